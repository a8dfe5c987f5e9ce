"""Dispatches build.yml once per chunk of a `cuw matrix` plan (the whole grid in one farm.yml run).

    python .github/scripts/dispatch_chunks.py plan.json --ref main [--package all] [--platform …]
        [--cuda …] [--pytorch …] [--python …] [--dry-run] [--pause 1.0]

Each chunk becomes `POST /repos/{repo}/actions/workflows/build.yml/dispatches` with the
inputs build.yml's form takes (package, chunk and the same filters, so its plan job
rebuilds exactly this chunk). The token is $GH_TOKEN (the calling run's GITHUB_TOKEN,
`actions: write`): workflow_dispatch is the event such a token may start runs with.
Dispatches are paced and a rate-limited one (403/429) is retried after the wait GitHub
names (a 403 that is not a rate limit, a missing permission, is not retried, nor is any other
error); a chunk that still cannot be dispatched is listed and the script exits 1 after
trying every other chunk. Needs only the standard library.

$CUW_DISPATCH_WAIT_SCALE (default 1) multiplies every wait: the tests set it small.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


def _wait_scale() -> float:
    return float(os.environ.get("CUW_DISPATCH_WAIT_SCALE") or 1)


def dispatch(api: str, repo: str, token: str, ref: str, inputs: dict[str, str], tries: int = 4) -> None:
    url = f"{api}/repos/{repo}/actions/workflows/build.yml/dispatches"
    body = json.dumps({"ref": ref, "inputs": inputs}).encode()
    for attempt in range(tries):
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28", "Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                if resp.status in (200, 204):
                    return
                raise RuntimeError(f"HTTP {resp.status}")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            # A 403 is a rate limit only when GitHub says so (a missing permission is a 403 too, and waits fix nothing).
            limited = exc.code == 429 or (exc.code == 403 and (
                "rate limit" in text.lower() or exc.headers.get("X-RateLimit-Remaining") == "0"))  # fmt: skip
            if limited and attempt + 1 < tries:
                wait = int(exc.headers.get("Retry-After") or 60) * _wait_scale()
                print(f"rate limited (HTTP {exc.code}); waiting {wait:g} s", file=sys.stderr, flush=True)
                time.sleep(wait)
                continue
            raise RuntimeError(f"HTTP {exc.code}: {text[:300]}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan", help="the JSON `cuw matrix --output` wrote (every chunk)")
    p.add_argument("--ref", required=True, help="the branch or tag build.yml runs on")
    p.add_argument("--package", default="all")
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", default="")
    p.add_argument("--rebuild", choices=("missing", "stale", "all"), default="stale",
                   help="passed on to each build.yml run (its plan leaves out what the index holds)")
    p.add_argument("--dry-run", action="store_true", help="list the dispatches, send nothing")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between dispatches (default 1)")
    args = p.parse_args(argv)

    with open(args.plan, encoding="utf-8") as fh:
        chunks = json.load(fh)["chunks"]
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com")
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    token = os.environ.get("GH_TOKEN", "")
    if not args.dry_run and not (repo and token):
        print("dispatch_chunks: needs $GITHUB_REPOSITORY and $GH_TOKEN (or --dry-run)", file=sys.stderr)
        return 2
    failed: dict[str, str] = {}
    rows = ["| chunk | jobs | dispatched |", "|---|---|---|"]
    empty = [c["id"] for c in chunks if not c["jobs"]]  # every cell already published (cuw matrix --published)
    for chunk_id in empty:
        print(f"nothing to build in {chunk_id}: every cell is published with today's inputs", flush=True)
        rows.append(f"| {chunk_id} | 0 | up to date, not dispatched |")
    chunks = [c for c in chunks if c["jobs"]]
    for i, chunk in enumerate(chunks):
        inputs = {"package": args.package, "chunk": chunk["id"], "platform": args.platform, "cuda": args.cuda,
                  "pytorch": args.pytorch, "python": args.python, "rebuild": args.rebuild}  # fmt: skip
        if args.dry_run:
            print(f"would dispatch build.yml@{args.ref} {json.dumps(inputs, sort_keys=True)}", flush=True)
            rows.append(f"| {chunk['id']} | {chunk['jobs']} | dry run |")
            continue
        try:
            dispatch(api, repo, token, args.ref, inputs)
            print(f"dispatched {chunk['id']} ({chunk['jobs']} jobs)", flush=True)
            rows.append(f"| {chunk['id']} | {chunk['jobs']} | ✅ |")
        except (RuntimeError, OSError) as exc:
            failed[chunk["id"]] = str(exc)
            print(f"could not dispatch {chunk['id']}: {exc}", file=sys.stderr, flush=True)
            rows.append(f"| {chunk['id']} | {chunk['jobs']} | ❌ {exc} |")
        if i + 1 < len(chunks):
            time.sleep(args.pause)
    total = sum(c["jobs"] for c in chunks)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(f"### farm: {len(chunks) - len(failed)}/{len(chunks)} chunks dispatched ({total} jobs)\n\n")
            fh.write("\n".join(rows) + "\n\n")
    print(f"{len(chunks) - len(failed)}/{len(chunks)} chunks dispatched ({total} jobs)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
