"""The GPU tier on a machine with a GPU, prepared here: one short command there (docs/gpu.md).

A machine with a GPU may be at hand for a few minutes, with no network and no build tools of ours.
So everything is made here, into one folder (``.cuw/gpu-bundle``, under 60 MiB), and the machine
only runs it:

    python benchmarks/gpu_check.py prepare [--cell-wheel WHEEL]   # here: builds, wheels, pure-Python deps
    python benchmarks/gpu_check.py run [--dry-run]                # there, from the repository root

``prepare`` builds the example sharded (N=4) and unsharded (N=1) with ``cuw build`` and puts each
wheel under ``wheels/sharded/`` and ``wheels/unsharded/`` (``--cell-wheel`` adds another build's,
such as the test tier's, under ``wheels/cell/``; ``--image-wheel`` one built in a build image under
``wheels/image/``), and the forge's imports on the ``cuw gpu`` path that a bare Python lacks
(PyYAML, packaging, pyelftools, pefile, wheel) for the GPU machine's Python under ``pylib/``.

``run`` builds nothing: it puts the checkout and ``pylib/`` on ``sys.path`` and runs ``cuw gpu`` on
every wheel of the bundle (each in its own environment that sees the machine's torch, only the
shipped SASS allowed to run, the builds compared bit for bit), writing its log and the reports to
``$OUT`` when set (else ``--out``). Without a GPU it says so and exits 0; ``--dry-run`` runs every
step but the launches (the default test tier runs that on the example's wheel).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / ".cuw" / "gpu-bundle"
BUILDS = REPO / ".cuw" / "gpu-build"
LIMIT_MIB = 60
RUN_LIMIT_S = 300  # the whole tier there: under 5 minutes
# The forge's imports on the ``cuw gpu`` path beyond the standard library (the verbs module's).
PYLIB = ("PyYAML", "packaging", "pyelftools", "pefile", "wheel")


def _say(message: str, log: list[str] | None = None) -> None:
    line = f"gpu_check: {message}"
    print(line, file=sys.stderr, flush=True)
    if log is not None:
        log.append(line)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _build(name: str, shards: int) -> Path:
    """The example built as ``shards`` shards and a link into its own folders; its wheel."""
    root = BUILDS / name
    shutil.rmtree(root, ignore_errors=True)
    cmd = [sys.executable, "-m", "cuw", "build", "example", "--shards", str(shards), "--work", str(root / "work")]
    cmd += ["--artifacts", str(root / "artifacts"), "--dist", str(root / "dist")]
    _say(f"{name}: {' '.join(cmd[1:])}")
    started = time.monotonic()
    subprocess.run(cmd, check=True, cwd=REPO)
    (wheel,) = (root / "dist").glob("*.whl")
    _say(f"{name}: {wheel.name} in {time.monotonic() - started:.0f} s")
    return wheel


def _pylib(target: Path, python: str) -> None:
    """The pure-Python (or pure-Python-fallback) packages the GPU machine's Python may lack, at the
    versions this environment runs, unpacked for that Python (PyYAML falls back to pure Python)."""
    from importlib.metadata import version

    pins = [f"{name}=={version(name)}" for name in PYLIB]
    shutil.rmtree(target, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary", ":all:", "--target", str(target)]
    cmd += ["--python-version", python, "--implementation", "cp", "--platform", "manylinux_2_17_x86_64", *pins]
    subprocess.run(cmd, check=True)
    for junk in [*target.glob("*.dist-info"), *target.glob("bin")]:
        shutil.rmtree(junk, ignore_errors=True)


def prepare(args: argparse.Namespace) -> int:
    bundle = args.bundle
    wheels = bundle / "wheels"
    bundle.mkdir(parents=True, exist_ok=True)
    made = {}
    if not args.no_build:
        shutil.rmtree(wheels, ignore_errors=True)
        made = {"sharded": _build("sharded", 4), "unsharded": _build("unsharded", 1)}
    for label, given in (("cell", args.cell_wheel), ("image", args.image_wheel)):
        if given is not None:
            made[label] = given
    for label, wheel in made.items():
        (wheels / label).mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, wheels / label / wheel.name)
    _pylib(bundle / "pylib", args.python)
    size = _size(bundle)
    listing = {str(p.relative_to(bundle)): p.stat().st_size for p in sorted(wheels.rglob("*.whl"))}
    (bundle / "bundle.json").write_text(
        json.dumps({"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "bytes": size, "wheels": listing}, indent=2)
    )
    _say(f"{bundle}: {len(listing)} wheel(s), {size / 2**20:.1f} MiB (at most {LIMIT_MIB})")
    if size > LIMIT_MIB << 20:
        _say(f"the bundle is over {LIMIT_MIB} MiB: it does not fit beside the checkout on the GPU machine")
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    """``cuw gpu`` over the bundle's wheels, in this process, the forge from the checkout."""
    out = Path(os.environ.get("OUT") or args.out)
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    wheels = args.bundle / "wheels"
    if not wheels.is_dir():
        _say(f"error: {wheels} is not there: run `python benchmarks/gpu_check.py prepare` first and carry {args.bundle}")
        return 2
    sys.path[:0] = [str(REPO), str(args.bundle / "pylib")]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(args.bundle / "pylib")])  # for the forge's own children
    started = time.monotonic()
    _say(f"python {sys.version.split()[0]} at {sys.executable}; bundle {args.bundle}; out {out}", log)
    from cuw.cli.main import main

    argv = ["gpu", str(wheels), "--out", str(out / "reports"), "--recipes", str(REPO / "recipes"), "--timeout", str(args.timeout)]
    if args.dry_run:
        argv.append("--dry-run")
    _say("cuw " + " ".join(argv), log)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(_Tee(sys.stderr, err)):
        rc = main(argv)
    log += err.getvalue().splitlines()
    seconds = time.monotonic() - started
    _say(f"cuw gpu exit {rc} in {seconds:.1f} s (the tier's limit: {RUN_LIMIT_S} s)", log)
    reports = sorted((out / "reports").rglob("*.gpu.json")) if (out / "reports").is_dir() else []
    summary = {
        "exit": rc,
        "seconds": round(seconds, 1),
        "dry_run": args.dry_run,
        "reports": [json.loads(p.read_text()) for p in reports],
    }
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "gpu_check.log").write_text("\n".join(log) + "\n")
    if rc == 0 and seconds > RUN_LIMIT_S:
        _say(f"the tier took {seconds:.0f} s, over its {RUN_LIMIT_S} s", log)
        return 1
    return rc


class _Tee:
    def __init__(self, *streams: object) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)  # type: ignore[attr-defined]
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="here: build the example sharded and unsharded, gather the bundle")
    p.add_argument("--bundle", type=Path, default=BUNDLE)
    p.add_argument("--cell-wheel", type=Path, default=None, help="another build's example wheel (wheels/cell/)")
    p.add_argument("--image-wheel", type=Path, default=None, help="an example wheel built in a build image (wheels/image/)")
    p.add_argument("--no-build", action="store_true", help="keep the wheels the bundle has; only add and refresh pylib/")
    p.add_argument("--python", default="3.12", help="the GPU machine's Python (default: %(default)s)")
    r = sub.add_parser("run", help="there: the GPU tier over the bundle; log and reports into $OUT or --out")
    r.add_argument("--bundle", type=Path, default=BUNDLE)
    r.add_argument("--out", type=Path, default=REPO / ".cuw" / "gpu-check")
    r.add_argument("--dry-run", action="store_true", help="every step but the launches (no GPU needed)")
    r.add_argument("--timeout", type=float, default=120.0, help="one wheel's smoke at most (default: %(default)s s)")
    args = parser.parse_args()
    for option in ("cell_wheel", "image_wheel"):
        given = getattr(args, option, None)
        if given is not None and not Path(given).is_file():
            _say(f"error: --{option.replace('_', '-')} {given}: no such wheel")
            return 2
    return prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
