"""The publish stage: build records for finished wheels, and adding them to the farm's index.

* :func:`record` runs in the link job, after the link passed: it writes
  ``dist/<wheel>.build.json`` (what the wheel was built from and how every job of its
  cell went), read from the reports the shards and the link left behind.
* :func:`publish` runs in the publish job, after every link of a chunk: it adds each
  wheel that arrived with its build record (only a wheel that passed link and verify
  reaches ``dist/``, and only ``dist/`` is uploaded) to the index with ``cuw index``'s
  append-only rules, puts the record beside the wheel in ``files/``, and names every
  cell that was not published and why (its link report: the missing shard).

A wheel the index already holds with the same bytes is "already published" (a re-run of
the publish job is harmless), and so is a rebuild whose record names the inputs of the newest
published build of its name, version and tags (the published bytes stand). A wheel whose name the
index holds with other bytes and other inputs is refused, alone (its build number is taken: a
concurrent rebuild; the next plan gives the next number): the other wheels of the chunk are still
published. A rebuild of other inputs carries the next build number (PEP 427's build tag, stamped by
finish) and is published beside the builds before it; its record in the index names the build it
supersedes and which inputs changed.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from packaging.utils import canonicalize_name

from cuw import __version__
from cuw.gates import report
from cuw.base.errors import CuwError, InputError
from cuw.base.records import build_record as build_record_of  # its reader: this module's build_record makes one
from cuw.base.records import (
    BuildRecord,
    LinkReport,
    ShardReport,
    VerifyReport,
    read_build_record,
    read_link_report,
    read_shard_report,
    read_verify_report,
    write_build_record,
)
from cuw.base.settings import GitHub, Settings
from cuw.base.files import check_apart, place_copy, writable_dir
from cuw.base.files import sha256_of as sha256_file, tree_digest
from cuw.base import reading
from cuw.config.inputs import cell_inputs, changed_inputs, inputs_digest
from cuw.wheel.finish import build_of, highest_build, wheel_key
from cuw.wheel.index import RECORD_SUFFIX  # one name for the record beside each wheel
from cuw.wheel.verify import integrity


def _source(recipe: Any) -> dict[str, Any]:
    src = recipe.source
    if src.pypi:
        return {"kind": "pypi", "spec": src.pypi, "sha256": src.sha256}
    if src.git:
        return {"kind": "git", "spec": f"{src.git}@{src.tag}", "sha256": None}
    folder = Path(recipe.folder) / src.path
    return {"kind": "path", "spec": src.path, "sha256": tree_digest(folder)}


def _forge_commit(github: GitHub) -> Optional[str]:
    if github.sha:
        return github.sha
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=Path(__file__).resolve().parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _nvcc_version(nvcc: Path) -> Optional[str]:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in out.splitlines() if "release" in line]
    return lines[-1].split(",")[-1].strip() if lines else None  # "V13.0.88"


def _shard_row(rep: ShardReport) -> dict[str, Any]:
    return {
        "shard": rep.shard,
        "ok": rep.ok,
        "tus_compiled": rep.facts.get("compiled"),
        "tus_owned": rep.facts.get("expected_owned"),
        "seconds": rep.build_s,
    }


def _shard_order(rep: ShardReport) -> int:
    index = (rep.shard or "0/0").split("/")[0]
    return int(index) if index.isdigit() else 0


def build_record(
    recipe: Any,
    wheel: Path,
    link_report: LinkReport,
    shard_reports: list[ShardReport],
    verify_report: Optional[VerifyReport],
    toolkit: Any,
    inputs: dict[str, Any],
    github: GitHub,
) -> BuildRecord:
    """The record of one wheel (pure: everything it says comes from the arguments). ``inputs``: what
    the wheel is a function of (:func:`cuw.config.inputs.cell_inputs`), which the plan compares;
    ``github``: the run's GitHub Actions context (its commit and run, when there is one)."""
    recipes_dir = Path(recipe.folder).parent
    policy = recipes_dir / "defaults.yml"
    facts = link_report.facts
    checks = verify_report.checks if verify_report else []
    return BuildRecord(
        wheel=wheel.name,
        inputs=inputs,
        inputs_digest=inputs_digest(inputs),
        sha256=sha256_file(wheel),
        recipe=recipe.key,
        cell=link_report.cell,
        source=_source(recipe),
        recipe_digest=tree_digest(Path(recipe.folder)),
        policy_digest=sha256_file(policy) if policy.is_file() else None,
        toolkit={"cuda": toolkit.version, "nvcc": _nvcc_version(toolkit.nvcc)},
        cache=link_report.cache,
        builder=link_report.builder,
        forge={"version": __version__, "commit": _forge_commit(github)},
        shards=[_shard_row(rep) for rep in sorted(shard_reports, key=_shard_order)],
        link={k: facts.get(k) for k in ("total", "hits", "misses", "uncacheable", "cuda_tus")}
        | {"seconds": link_report.build_s, "shard_count": link_report.shard_count},
        verify={"ok": verify_report.ok if verify_report else None, "checks": [{"name": c.name, "ok": c.ok} for c in checks]}
        | _tests_counts(verify_report),
        run=dict(github.run),
        nulls=frozenset({"policy_digest", "cache", "builder"}),  # said as null when there is none
    )


def _tests_counts(verify_report: Optional[VerifyReport]) -> dict[str, Any]:
    """The upstream tests' counts the verify report holds (``verify.tests``), for the record's ``verify.tests``."""
    counts = verify_report.extra.get("tests") if verify_report else None
    return {"tests": counts} if isinstance(counts, dict) else {}


def record(recipe: Any, dist: Path, artifacts: Path, settings: Settings) -> Path:
    """``cuw record``: writes ``dist/<wheel>.build.json`` for this machine's cell of ``recipe``
    (the run's ``settings``: its toolkit and GitHub context)."""
    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit

    toolkit = find_toolkit(homes=settings.homes)
    cell = local_cell(recipe, toolkit)
    reading.folder(dist, "--dist")
    reading.optional_folder(artifacts, "--artifacts")
    links = []
    for path in sorted(dist.glob("*.whl.link.json")):
        rep = read_link_report(path)
        if rep.cell == cell.to_dict() and rep.ok:
            links.append((path, rep))
    if not links:
        raise InputError(
            f"no passed link of {cell.id} in {dist} (a *.whl.link.json with ok: true): "
            "run the link first; only a wheel that passed link and verify gets a build record"
        )
    path, link_rep = max(links, key=lambda found: found[0].stat().st_mtime_ns)  # the latest link (a name sorts no build)
    wheel = dist / path.name[: -len(".link.json")]
    if not wheel.is_file():
        raise InputError(f"{path} names {wheel.name}, which is not in {dist}")
    cell_dir = artifacts / cell.id
    # The shards of this link only: reports of another N left in the folder by earlier runs are not its history.
    suffix = f"of{link_rep.shard_count}.report.json"
    shard_reports = [read_shard_report(p) for p in sorted(cell_dir.glob(f"cuw-shard-*{suffix}"))]
    verify_path = dist / f"{wheel.name}.verify.json"
    verify_rep = read_verify_report(verify_path) if verify_path.is_file() else None
    from cuw.config.policy import load_policy
    from cuw.toolchain.builder import current_builder

    inputs = cell_inputs(recipe, load_policy(Path(recipe.folder).parent), cell, current_builder(settings).image or "")
    body = build_record(recipe, wheel, link_rep, shard_reports, verify_rep, toolkit, inputs, settings.github)
    out = write_build_record(dist / f"{wheel.name}{RECORD_SUFFIX}", body)
    link = body.link or {}
    report.say(f"build record: {out} ({len(shard_reports)} shard reports, link {link.get('hits')}/{link.get('total')} hits)")
    return out


@dataclass
class Outcome:
    published: list[str] = field(default_factory=list)  # wheel names added by this run
    already: list[str] = field(default_factory=list)  # same bytes, or the same inputs, already in the index
    same_inputs: list[str] = field(default_factory=list)  # of those: rebuilt from the same inputs, other bytes
    stands_for: dict[str, str] = field(default_factory=dict)  # of those: another build number -> the published build
    refused: dict[str, str] = field(default_factory=dict)  # wheel name -> why
    failed_cells: dict[str, str] = field(default_factory=dict)  # cell id -> why it has no wheel

    @property
    def ok(self) -> bool:
        return bool(self.published or self.already) and not self.refused


def _failed_cells(reports: Optional[Path]) -> dict[str, str]:
    """Cells whose link report says it failed: cell id -> the gate's reasons (missing shards named)."""
    out: dict[str, str] = {}
    if reports is None or not reading.optional_folder(reports, "--reports"):  # a FIFO or a file there: refused
        return out
    for path in sorted(reports.rglob("link.report.json")):
        try:
            rep = read_link_report(path)
        except CuwError:
            continue  # one unreadable report does not hide the other cells' failures
        if rep.ok:
            continue
        missing, count = rep.missing_shards, rep.shard_count
        named = f"missing shard(s) {', '.join(f'{i}/{count}' for i in missing)}; " if missing else ""
        out[path.parent.name] = named + "; ".join(rep.reasons[:3])
    return out


@dataclass(frozen=True)
class AssetStore:
    """Wheels kept elsewhere than the index (GitHub release assets), the pages linking them by URL.

    ``url``: where a wheel will be, a template with ``{recipe}`` and ``{wheel}``
    (``https://github.com/O/R/releases/download/wheels-{recipe}/{wheel}``); ``upload``: the folder
    the new wheels and their records are put in for the upload step (never a replacement: an
    asset name exists once per release)."""

    url: str
    upload: Path

    def url_of(self, recipe: str, wheel: str) -> str:
        return self.url.format(recipe=quote(recipe), wheel=quote(wheel))


def check_asset_store(store: AssetStore) -> None:
    """A template that fills in ``{recipe}`` and ``{wheel}`` as they are (no index, attribute,
    conversion or format: ``{wheel.__class__}`` would put Python's insides into every URL), with
    ``{wheel}`` in it, into an http(s) URL with a fixed host."""
    import string
    from urllib.parse import urlsplit

    bad = f"--asset-url {store.url!r}:"
    if not store.url.lower().startswith(("https://", "http://")):
        raise InputError(f"{bad} an http(s) URL with {{wheel}} (and {{recipe}}) in it")
    try:
        fields = [
            (name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(store.url) if name is not None
        ]
    except ValueError as exc:
        raise InputError(f"{bad} not a template ({exc}); only {{recipe}} and {{wheel}} may be filled in") from None
    if any(name not in ("recipe", "wheel") or spec or conversion for name, spec, conversion in fields):
        raise InputError(
            f"{bad} only {{recipe}} and {{wheel}} may be filled in, as they are (no index, attribute, conversion or format)"
        )
    if "wheel" not in [name for name, _, _ in fields]:
        raise InputError(f"{bad} an http(s) URL with {{wheel}} (and {{recipe}}) in it: every wheel needs a URL of its own")
    template = urlsplit(store.url)
    filled = store.url_of("r", "w.whl")
    if "{" in template.netloc or not urlsplit(filled).hostname:
        raise InputError(f"{bad} the host must be written out (https://HOST/...{{wheel}})")
    odd = next((c for c in filled if c.isspace() or not c.isprintable() or c in '"<>\\^`{|}'), None)
    if odd is not None:
        raise InputError(f"{bad} {odd!r} has no place in a URL (percent-encode it)")


def check_folders(incoming: Path, index: Path, upload: Optional[Path] = None) -> None:
    """INCOMING, INDEX and the upload folder lie apart: an upload folder in the index would put the
    wheels on the pages, one in INCOMING would be published again from there, an index in INCOMING
    (or INCOMING in it) would be read as arrived wheels."""
    named = [("INCOMING", incoming), ("INDEX", index)] + ([("--upload", upload)] if upload is not None else [])
    check_apart(named, "publish: ")


def continue_from(site: str, index: Path) -> int:
    """The published state of the index served at ``site`` (its marker and every build record),
    written into ``index``, a new or empty folder: a publish on a runner that starts empty continues
    from what is online, never from nothing. Everything is read and checked before anything is
    written, the marker last. Returns how many wheels the site lists."""
    from cuw.wheel.index import LOCK, MARKER, index_lock, read_served, write_marker

    def check_new() -> None:
        if (index / MARKER).exists():
            raise InputError(f"--from-url: {index} already holds an index; give a new folder to continue {site} in")
        if index.exists() and not index.is_dir():
            raise InputError(f"--from-url: {index} is a file; give a new or empty folder to continue {site} in")
        there = sorted(p.name for p in index.iterdir() if p.name != LOCK) if index.is_dir() else []
        if there:
            raise InputError(
                f"--from-url: {index} holds other files ({', '.join(there[:3])}); give a new or empty folder "
                f"to continue {site} in"
            )

    check_new()
    if not site.lower().startswith(("https://", "http://", "file://")):
        raise InputError(f"--from-url {site}: the http(s) URL the index is served at")
    served = read_served(site.rstrip("/"), "--from-url")
    files, remote = served.files, served.remote
    local = sorted(set(files) - set(remote))
    if local:
        raise InputError(
            f"--from-url: {site} serves {local[0]} itself; --from-url continues an index whose wheels are "
            "stored elsewhere (release assets)"
        )
    # Each record as its reader reads it (a later forge's fields kept): one it refuses writes nothing.
    records = {
        name: build_record_of(record, f"--from-url: {site}/files/{name}{RECORD_SUFFIX}")
        for name, record in served.records.items()
    }
    with index_lock(index):  # another continue or publish into the same folder meanwhile: one of them is refused
        check_new()
        (index / "files").mkdir(exist_ok=True)
        for name, record in records.items():
            write_build_record(index / "files" / f"{name}{RECORD_SUFFIX}", record)
        write_marker(index, files, remote, served.details)  # upload times, metadata digests, yanks: as published
    return len(files)


def publish(
    incoming: Path, index: Path, reports: Optional[Path] = None, store: Optional[AssetStore] = None, online: int = 0
) -> Outcome:
    """Adds every wheel under ``incoming`` that has its build record to the index at ``index``;
    with ``store``, the wheels go to its upload folder and the pages link their URLs. ``online``:
    how many wheels the published index lists (it never publishes fewer)."""
    from cuw.wheel.index import MARKER, add_to_index, index_lock, published_files, remote_files, write_marker, write_pages
    from cuw.wheel.index import read_details, stage_metadata, upload_time

    if not incoming.is_dir():
        raise InputError(f"publish: {incoming} is not a folder (the wheels the links uploaded)")
    check_folders(incoming, index, store.upload if store is not None else None)
    # Sorted once without touching the index (a run with nothing to add, or refused, writes nothing)...
    outcome, accepted = _sort(incoming, published_files(index) if (index / MARKER).is_file() else {}, reports, index)
    if not accepted and not outcome.already:
        return outcome
    published_files(index)  # a folder that is not an index is refused before the lock file is made in it
    if index.is_dir():  # a read-only index fails in one line with the fix, not at its lock file (and only
        writable_dir(index, "INDEX")  # when something is to be written: a refused run touches nothing)
    with index_lock(index):  # ...and again under the lock: another publish may have added meanwhile
        published = published_files(index)
        outcome, accepted = _sort(incoming, published, reports, index)
        if accepted:
            (index / "files").mkdir(parents=True, exist_ok=True)
            for _, rec_path in accepted:  # each record before its wheel is listed: a listed wheel has its record
                _publish_record(rec_path, index / "files" / rec_path.name, published, index)
            if store is not None:
                remote, details, added = remote_files(index), read_details(index), upload_time()
                store.upload.mkdir(parents=True, exist_ok=True)
                for wheel, rec_path in accepted:
                    place_copy(wheel, store.upload / wheel.name, "wheel to upload")
                    stage_metadata(wheel, store.upload, details, added)  # <wheel>.metadata: an asset beside it
                    place_copy(index / "files" / rec_path.name, store.upload / rec_path.name, "build record to upload")
                    recipe = read_build_record(rec_path).recipe or canonicalize_name(wheel.name.split("-")[0])
                    published[wheel.name] = sha256_file(wheel)
                    remote[wheel.name] = {"url": store.url_of(recipe, wheel.name), "size": wheel.stat().st_size}
                write_marker(index, published, remote, details)
                write_pages(index, published, remote)
            else:
                with tempfile.TemporaryDirectory(prefix="cuw-publish-") as tmp:
                    for wheel, _ in accepted:
                        shutil.copy2(wheel, Path(tmp) / wheel.name)
                    add_to_index(Path(tmp), index)
            outcome.published += [wheel.name for wheel, _ in accepted]
        elif published:
            write_pages(index, published)  # pages a killed run left behind the marker are brought up to it
        listed = len(published_files(index))
        if listed < online:  # a partial read of the online index must never shrink it
            raise CuwError(  # the two indexes disagree: neither an option nor a tool is at fault
                f"publish: the index at {index} lists {listed} wheels, the published one {online}; refusing to publish fewer"
            )
    return outcome


def _cell_id(rec: BuildRecord) -> str:
    from cuw.config.cell import Cell

    try:
        return Cell(**(rec.cell or {})).id
    except TypeError:
        return ""


def _record_problem(rec: BuildRecord, name: str, digest: str) -> str:
    """Why a build record does not vouch for this wheel ("" when it does): it names another file or
    other bytes, or says the link or verify did not pass."""
    if rec.wheel != name:
        return f"its build record names {rec.wheel!r}"
    if rec.sha256 != digest:
        return f"its build record names other bytes (sha256 {rec.sha256}, file {digest})"
    if rec.verify is None or rec.verify.get("ok") is not True:
        return "its build record says verify did not pass"
    if rec.link is None or rec.link.get("misses") != 0:
        return f"its build record says the link missed the cache ({rec.link.get('misses') if rec.link else 'no link'})"
    return ""


def _published_record(index: Path, name: str) -> Optional[BuildRecord]:
    try:
        return read_build_record(index / "files" / f"{name}{RECORD_SUFFIX}")
    except CuwError:
        return None


def _same_inputs(index: Path, name: str, rec: BuildRecord) -> bool:
    """Whether the published record of ``name`` names the same inputs as ``rec`` (a rebuild of a cell
    that is already published: builds are not byte-reproducible, the published wheel stands)."""
    theirs = _published_record(index, name)
    return theirs is not None and bool(rec.inputs_digest) and theirs.inputs_digest == rec.inputs_digest


def _newest(published: dict[str, str], name: str, below: Optional[int] = None) -> Optional[str]:
    """The published wheel with the highest build number of ``name``'s name, version and tags
    (``below``: under that number); None when there is none."""
    mine = wheel_key(name)
    found = []
    for other in published:
        theirs = wheel_key(other)
        if mine is not None and theirs is not None and theirs[0] == mine[0] and (below is None or theirs[1] < below):
            found.append((theirs[1], other))
    return max(found)[1] if found else None


def _against_index(name: str, digest: str, rec: BuildRecord, published: dict[str, str], index: Path) -> tuple[str, str]:
    """How an arrived wheel stands against the index: ``("new", "")``; ``("already", name)`` (the same
    bytes); ``("same_inputs", published)``: a rebuild of the inputs of the newest published build of
    its name, version and tags (or of its own name), whose bytes stand; ``("refused", why)``: its
    name is published with other bytes and other inputs (the number is taken)."""
    if published.get(name) == digest:
        return "already", name
    for stands in (_newest(published, name), name if name in published else None):
        if stands is not None and _same_inputs(index, stands, rec):
            return "same_inputs", stands
    if name not in published:
        return "new", ""
    number, following = build_of(name), highest_build(published, name) + 1
    return "refused", (
        f"the index already publishes {name} with other bytes and a published wheel is never replaced: "
        f"build {number} of its version and tags is taken (a concurrent rebuild); the next plan "
        f"(cuw matrix --published) gives the cell build {following}, a build outside it takes it with "
        f"--published INDEX or --build-number {following}"
    )


def _publish_record(rec_path: Path, dest: Path, published: dict[str, str], index: Path) -> None:
    """The wheel's build record into the index; a rebuild's names the build it supersedes (the
    highest published below its number, of its name, version and tags) and which inputs changed."""
    rec = read_build_record(rec_path)
    older = _newest(published, rec.wheel, below=build_of(rec.wheel))
    theirs = _published_record(index, older) if older is not None else None
    if theirs is None:
        place_copy(rec_path, dest, "build record")
        return
    changed = changed_inputs(theirs.inputs, rec.inputs) if theirs.inputs and rec.inputs else "not recorded"
    write_build_record(dest, replace(rec, supersedes={"wheel": theirs.wheel, "changed": changed}))


def _sort(
    incoming: Path, published: dict[str, str], reports: Optional[Path], index: Path
) -> tuple[Outcome, list[tuple[Path, Path]]]:
    """What arrived, sorted into refused, already published and accepted (wheel, record) pairs."""
    outcome = Outcome(failed_cells=_failed_cells(reports))
    accepted: list[tuple[Path, Path]] = []
    vouched: set[str] = set()  # the cells of the wheels accepted or already published
    arrived: dict[str, list[Path]] = {}
    for wheel in sorted(incoming.rglob("*.whl")):
        arrived.setdefault(wheel.name, []).append(wheel)
    for name, copies in arrived.items():
        if len({sha256_file(w) for w in copies}) > 1:  # two links made one name with other bytes: neither is it
            outcome.refused[name] = (
                f"{len(copies)} different wheels arrived under this name "
                f"({', '.join(str(w.relative_to(incoming)) for w in copies)}); none is published"
            )
    for wheel in sorted(copies[0] for copies in arrived.values()):
        if wheel.name in outcome.refused:
            continue
        rec_path = wheel.with_name(wheel.name + RECORD_SUFFIX)
        if not rec_path.is_file():
            outcome.refused[wheel.name] = f"no build record ({rec_path.name}): not from a passed link"
            continue
        try:
            rec = read_build_record(rec_path)
        except CuwError as exc:  # one unreadable record refuses its wheel, not the publish
            outcome.refused[wheel.name] = str(exc)
            continue
        digest = sha256_file(wheel)
        why = _record_problem(rec, wheel.name, digest) or "; ".join(integrity(wheel))
        if why:
            outcome.refused[wheel.name] = why
            continue
        stand, detail = _against_index(wheel.name, digest, rec, published, index)
        if stand == "refused":
            outcome.refused[wheel.name] = detail
            continue
        if stand == "new":
            accepted.append((wheel, rec_path))
        else:
            outcome.already.append(wheel.name)
        if stand == "same_inputs":
            outcome.same_inputs.append(wheel.name)
            if detail != wheel.name:
                outcome.stands_for[wheel.name] = detail
        vouched.add(_cell_id(rec))
    # A cell whose wheel is published here passed its link: an older failed report of it is history.
    outcome.failed_cells = {cell: why for cell, why in outcome.failed_cells.items() if cell not in vouched}
    return outcome, accepted


def summarize(outcome: Outcome, index: Path) -> str:
    """The publish job's summary (markdown); also the lines it prints."""
    rows = [
        f"### publish to {index}: {len(outcome.published)} added, {len(outcome.already)} already there, "
        f"{len(outcome.refused)} refused, {len(outcome.failed_cells)} cell(s) not published",
        "",
        "| | what | detail |",
        "|---|---|---|",
    ]
    rows += [f"| ✅ | {name} | published with {name}{RECORD_SUFFIX} |" for name in outcome.published]
    rows += [f"| ✅ | {name} | already published ({_why_already(outcome, name)}) |" for name in outcome.already]
    rows += [f"| ❌ | {name} | refused: {why} |" for name, why in outcome.refused.items()]
    rows += [f"| ❌ | cell {cell} | not published: link failed: {why} |" for cell, why in outcome.failed_cells.items()]
    return "\n".join(rows)


def _why_already(outcome: Outcome, name: str) -> str:
    if name in outcome.stands_for:
        return f"rebuilt from the inputs of {outcome.stands_for[name]}, the published build; its bytes stand"
    return "rebuilt from the same inputs; the published bytes stand" if name in outcome.same_inputs else "same bytes"


def run_publish(
    incoming: Path,
    index: Path,
    reports: Optional[Path],
    store: Optional[AssetStore] = None,
    online: int = 0,
    summary: Optional[str] = None,
) -> int:
    """``cuw publish``: ``publish`` with a line per wheel, and its table in the step summary ``summary``."""
    outcome = publish(incoming, index, reports, store, online)
    for name in outcome.published:
        report.say(f"published {name}" + (f" (to upload: {store.upload / name})" if store else ""))
    for name in outcome.already:
        report.say(f"already published {name} ({_why_already(outcome, name)})")
    for name, why in outcome.refused.items():
        report.say(f"refused {name}: {why}")
    for cell, why in outcome.failed_cells.items():
        report.say(f"not published: cell {cell}: link failed: {why}")
    report.append_summary(summarize(outcome, index), summary)
    if not (outcome.published or outcome.already or outcome.refused):
        report.say(f"publish: no wheel arrived in {incoming}: nothing published")
        return 1
    report.say(
        f"publish: {len(outcome.published)} added, {len(outcome.already)} already there, "
        f"{len(outcome.refused)} refused -> {index}"
    )
    return 0 if outcome.ok else 1
