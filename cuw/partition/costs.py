"""Cost tables: measured compile seconds per TU, recorded from real builds.

A recipe's table is ``recipes/<name>/costs.json``, committed next to the recipe:

    {"header": {"from": [...], "recorded": "...", "tus": 9, "total_seconds": 31.4},
     "costs": {"csrc/kernels/k08_gemm.cu": 8.192, ...},
     "cpu_s": {"csrc/kernels/k08_gemm.cu": 7.9, ...},
     "peak_mb": {"csrc/kernels/k08_gemm.cu": 1840, ...}}

Keys are partition keys (:func:`cuw.partition.rules.tu_key`). ``costs`` is wall seconds;
``cpu_s`` (user + system seconds of the compile's processes) and ``peak_mb`` (its largest
process's peak memory) are there for the TUs a seat measured them for, and absent from tables
recorded before the seat measured them (or from ninja logs alone). Two logs feed it:

* the seat log (JSON lines): ``compiled`` entries carry ``key`` and ``seconds`` (and
  ``cpu_s`` and ``peak_mb`` where the seat measured them); cache hits are skipped (a
  replayed TU says nothing about its compile cost);
* ninja's ``.ninja_log``: end - start per output, mapped to its source through
  ``ninja -t compdb`` in the same build folder.

A shard job's report (``cuw-shard-*.report.json``) feeds its seat log's TU costs and the
table's ``shard`` entry: what a shard's build costs beside its compiles (configure, probes,
stubs, the build's own link steps), the median over the reports given.

A link job's report (``link.report.json`` or ``dist/<wheel>.link.json``) feeds the table's
``link`` entry: what a link costs beside its replays (prepare, restore, configure and probes,
the link steps, finish and verify) and what one replay costs, which the planner's link
estimate reads.

Both entries also learn ``disk_gb``, the most disk the job used (decimal GB): from the report's
``resources`` record, free disk at the job's start less the least free disk seen. A shard's is
the largest over the reports given; it is absent from tables recorded before the reports had
the record. ``cuw matrix`` and ``cuw plan`` hold it against the runner's free disk
(:mod:`cuw.partition.disk_need`).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, TypeGuard

from cuw.base.errors import InputError
from cuw.toolchain import ninja
from cuw.base.files import same_file, write_text
from cuw.base.reading import is_regular, open_file, read_text
from cuw.base.records import SeatLogEntry, gate_of, is_number, read_link_report, read_shard_report, seat_entries, seat_entry
from cuw.partition.rules import tu_key, unseen_cost
from cuw.config.recipe import Recipe, costs_path


@dataclass(frozen=True)
class LinkCost:
    fixed_s: float
    """A link's seconds beside its replays: prepare, restore, extra deps, configure and probes,
    the link steps, finish and verify."""
    per_replay_s: float
    """One cache-hit replay's seconds."""
    source: str = ""
    disk_gb: Optional[float] = None
    """The most disk a link used (GB); None: not measured."""

    def estimate(self, tus: int) -> float:
        return self.fixed_s + self.per_replay_s * tus


@dataclass(frozen=True)
class ShardCost:
    fixed_s: float
    """A shard build's seconds beside its compiles: configure, probes, stubs, the link steps."""
    source: str = ""
    disk_gb: Optional[float] = None
    """The most disk a shard used (GB), the largest over the reports; None: not measured."""


@dataclass(frozen=True)
class CostTable:
    costs: dict[str, float]
    """Wall seconds per key."""
    header: dict[str, object] = field(default_factory=dict)
    path: Optional[Path] = None
    link: Optional[LinkCost] = None
    shard: Optional[ShardCost] = None
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds (user + system) per key, for the keys measured with them."""
    peaks: dict[str, float] = field(default_factory=dict)
    """Peak memory (MB) of one compile per key, for the keys measured with it."""

    @property
    def total(self) -> float:
        return sum(self.costs.values())

    @property
    def longest(self) -> float:
        return max(self.costs.values(), default=0.0)

    @property
    def beside_s(self) -> float:
        """What a shard build costs beside its compiles (0 when the table has not measured it)."""
        return self.shard.fixed_s if self.shard else 0.0

    def seconds(self, key: str) -> float:
        """One TU's wall seconds; a TU the table never saw costs the table's mean."""
        return self.costs[key] if key in self.costs else unseen_cost(self.costs)

    def wall_of(self, keys: Iterable[str]) -> float:
        """These TUs' compiles in one compile slot (wall seconds)."""
        fallback = unseen_cost(self.costs)
        return sum(self.costs.get(k, fallback) for k in keys)

    def cpu_of(self, keys: Iterable[str]) -> Optional[float]:
        """These TUs' CPU seconds (an unmeasured one: the mean); None when the table has no CPU."""
        if not self.cpu:
            return None
        fallback = unseen_cost(self.cpu)
        return sum(self.cpu.get(k, fallback) for k in keys)


def load(path: Path) -> CostTable:
    """Reads a cost table; a malformed one is an error naming the file and the fix."""
    fix = "record it again with `cuw costs <recipe> --from <seat log or .ninja_log>`"
    try:
        data = json.loads(read_text(path, "cost table", "cost table"), parse_constant=_no_constant)
    except FileNotFoundError:
        raise InputError(f"no cost table at {path}: check the path, or {fix}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (a JSON cost table expected): {fix}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: a nesting deeper than the parser goes
        raise InputError(f"{path}: not valid JSON ({exc}): {fix}") from None
    costs = data.get("costs") if isinstance(data, dict) else None
    if not isinstance(costs, dict) or not costs:
        raise InputError(f'{path}: expected {{"header": {{...}}, "costs": {{"<tu key>": seconds, ...}}}}: {fix}')
    for key, seconds in costs.items():
        if not _is_measure(seconds):
            raise InputError(f"{path}: costs[{key!r}] = {_cut(seconds)} is not a number of seconds from 0 to 1e9: {fix}")
    header = data.get("header") if isinstance(data.get("header"), dict) else {}
    link = data.get("link")
    if link is not None:
        numbers = [link.get(k) if isinstance(link, dict) else None for k in ("fixed_s", "per_replay_s")]
        if not all(_is_measure(v) for v in numbers):
            raise InputError(
                f'{path}: link must be {{"fixed_s": seconds, "per_replay_s": seconds, ...}}: record it again with '
                f"`cuw costs <recipe> --from <link report>`"
            )
        disk = _disk_entry(link, path, "link", "link report")
        link = LinkCost(float(link["fixed_s"]), float(link["per_replay_s"]), str(link.get("from", "")), disk)
    shard = data.get("shard")
    if shard is not None:
        fixed = shard.get("fixed_s") if isinstance(shard, dict) else None
        if not _is_measure(fixed):
            raise InputError(
                f'{path}: shard must be {{"fixed_s": seconds, ...}}: record it again with '
                f"`cuw costs <recipe> --from <shard reports>`"
            )
        shard = ShardCost(float(fixed), str(shard.get("from", "")), _disk_entry(shard, path, "shard", "shard reports"))
    cpu, peaks = (_measures(data.get(name), path, name, fix) for name in ("cpu_s", "peak_mb"))
    return CostTable({k: float(v) for k, v in costs.items()}, header, path, link, shard, cpu, peaks)


def _disk_entry(entry: dict, path: Path, name: str, what: str) -> Optional[float]:
    """An entry's optional ``disk_gb``: absent from tables recorded before the reports carried disk."""
    disk = entry.get("disk_gb")
    if disk is not None and not _is_measure(disk):
        raise InputError(
            f"{path}: {name}.disk_gb = {_cut(disk)} is not a number of GB from 0 to 1e9: "
            f"record it again with `cuw costs <recipe> --from <{what}>`"
        )
    return None if disk is None else float(disk)


def _measures(section: object, path: Path, name: str, fix: str) -> dict[str, float]:
    """An optional per-key section (``cpu_s``, ``peak_mb``); absent in tables recorded before the seat measured them."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise InputError(f'{path}: {name} must be {{"<tu key>": number, ...}}: {fix}')
    for key, value in section.items():
        if not _is_measure(value):
            raise InputError(f"{path}: {name}[{key!r}] = {_cut(value)} is not a number from 0 to 1e9: {fix}")
    return {k: float(v) for k, v in section.items()}


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number of seconds")


def recipe_costs(recipe: Recipe) -> Optional[CostTable]:
    """The recipe's committed cost table, or None when it has none (a folder or a broken link
    there is an error that names it, not "no table")."""
    path = costs_path(Path(recipe.folder))
    return load(path) if path.exists() or path.is_symlink() else None


def from_seat_log(path: Path) -> dict[str, float]:
    """Seconds per key from a seat log's ``compiled`` entries that were real compiles (not hits).

    Host TUs count too (the host seat partitions them off Windows). A key compiled more
    than once in one build (torch-scatter builds each host source into a ``_cpu`` and a
    ``_cuda`` module) costs its owner the sum."""
    out: dict[str, float] = {}
    for entry in _cold_compiles(path):
        assert entry.key is not None and entry.seconds is not None  # _cold_compiles checked both
        out[entry.key] = out.get(entry.key, 0.0) + float(entry.seconds)
    return out


def usage_from_seat_log(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds and peak MB per key from the same compiles as :func:`from_seat_log`, where the
    seat measured them: a key compiled twice costs the sum of its CPU and the larger peak."""
    cpu: dict[str, float] = {}
    peaks: dict[str, float] = {}
    for entry in _cold_compiles(path):
        key, cpu_s, peak = str(entry.key), entry.cpu_s, entry.peak_mb
        if _is_measure(cpu_s) and _is_measure(peak):
            cpu[key] = round(cpu.get(key, 0.0) + float(cpu_s), 3)
            peaks[key] = max(peaks.get(key, 0.0), float(peak))
    return cpu, peaks


# A measure above this is no measurement (about 32 years of seconds, a petabyte in MB): a ceiling
# that keeps every sum the planner makes finite, so no plan prints inf or writes Infinity into JSON.
MOST = 1e9


def _is_measure(value: object) -> TypeGuard[float]:
    return is_number(value) and 0 <= float(value) <= MOST  # type: ignore[arg-type]


def _cut(value: object) -> str:
    """A bad value as the error shows it: its repr, cut short (a 400-digit integer is not read)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _cold_compiles(path: Path) -> list[SeatLogEntry]:
    """A seat log's ``compiled`` entries that passed and were real compiles (not hits), checked
    to carry a key and seconds; an error when there is none."""
    out: list[SeatLogEntry] = []
    hits = 0
    for n, line in enumerate(read_text(path, "seat log", "log").splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            raise InputError(f"{path}:{n}: not a seat log line (JSON expected)") from None
        if not isinstance(value, dict):
            raise InputError(f"{path}:{n}: not a seat log line (a JSON object expected)")
        entry = seat_entry(value, f"{path}:{n}")  # a field of the wrong type: refused, naming it
        if not entry.is_compile or entry.rc not in (0, None):
            continue
        if entry.outcome == "hit":
            hits += 1
            continue
        if entry.key is None or entry.seconds is None:
            raise InputError(f"{path}:{n}: a compiled entry without a TU key and seconds")
        if entry.seconds < 0:
            raise InputError(f"{path}:{n}: seconds {entry.seconds!r} is not a finite number >= 0")
        out.append(entry)
    if not out:
        why = f"all {hits} compiles were cache hits: record from a cold build" if hits else "no compiled TUs"
        raise InputError(f"{path}: {why}")
    return out


def _job_seat(start: Path) -> Optional[dict]:
    """The seat configuration of the forge job folder above ``start``, if there is one."""
    for folder in [start, *start.parents]:
        config = folder / "seat" / "seat.json"
        if config.is_file():
            try:
                return json.loads(read_text(config, "seat configuration", "report"))
            except (OSError, ValueError):
                raise InputError(f"{config}: unreadable seat configuration of the job folder above the log") from None
    return None


def _replayed_or_stubbed(seat_log: Path) -> set[str]:
    """Keys whose ninja time measures a stub or a cache hit, not a compile."""
    if not seat_log.is_file():
        return set()
    return {str(e.key) for e in seat_entries(seat_log) if e.action in ("stubbed", "deferred") or e.outcome == "hit"}


def from_ninja_log(path: Path, source_root: Optional[Path] = None) -> dict[str, float]:
    """Seconds per key from ``.ninja_log`` (the last run of each output), via the build's compile database.

    Stubs and cache hits of a forge job are left out: their time is not a compile's."""
    seconds, skip = ninja_log_times(path, source_root)
    kept = {k: v for k, v in seconds.items() if k not in skip}
    if not kept:
        raise InputError(f"{path}: every compile in it was a stub or a cache hit: record from a cold build")
    return kept


def ninja_log_times(path: Path, source_root: Optional[Path] = None) -> tuple[dict[str, float], set[str]]:
    """Every compile's seconds per key in ``.ninja_log``, and the keys that were stubs or hits."""
    lines = read_text(path, "ninja log", "log").splitlines()
    if not lines or not lines[0].startswith("# ninja log v"):
        raise InputError(f"{path}: not a ninja log (its first line is not '# ninja log vN')")
    build_dir = path.parent
    job = _job_seat(build_dir)
    root = source_root or (Path(job["source_root"]) if job else None)
    skip = _replayed_or_stubbed(Path(job["log"])) if job else set()
    if root is None:
        raise InputError(f"{path}: pass --source-root, the folder TU keys are relative to (no forge job folder above it)")
    entries = ninja.compdb(build_dir)
    if entries is None:  # ninja reads the build.ninja beside the log: the log's folder is the input
        raise InputError(f"{path}: `ninja -t compdb` failed in {build_dir} (the build.ninja beside the log is needed)")
    sources = {e["output"]: e["file"] for e in entries if isinstance(e, dict) and e.get("output") and e.get("command")}
    seconds: dict[str, float] = {}
    for line in lines[1:]:
        parts = line.split("\t")
        if len(parts) < 4 or parts[3] not in sources or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        source = Path(sources[parts[3]])
        source = source if source.is_absolute() else build_dir / source
        seconds[tu_key(str(source), str(root))] = (int(parts[1]) - int(parts[0])) / 1000.0
    if not seconds:
        raise InputError(f"{path}: no compile of the build's compile database appears in it")
    return seconds, skip


def link_report(path: Path) -> Optional[LinkCost]:
    """A link job's report as a :class:`LinkCost`; None when ``path`` is no link report (a log)."""
    if gate_of(path) != "link":
        return None
    report = read_link_report(path)
    phases = report.phases
    if phases is None or not all(k in phases for k in ("build_s", "replay_s", "replays")):
        raise InputError(
            f"--from {path}: a link report without its phases (written by an older forge): link again, then record it"
        )
    replays = int(phases["replays"])
    beside = sum(float(phases.get(k) or 0.0) for k in ("prepare_s", "restore_s", "deps_s", "finish_s"))
    # Replays run in parallel with each other, not with configure: the build's seconds beyond
    # its replays' own are configure, probes and the link steps (never less than nothing).
    fixed = beside + max(0.0, float(phases["build_s"]) - float(phases["replay_s"]))
    per_replay = float(phases["replay_s"]) / replays if replays else 0.0
    return LinkCost(round(fixed, 3), round(per_replay, 4), _shown(path), disk_used_gb(report.resources))


def compile_span(entries: list[SeatLogEntry]) -> float:
    """Seconds during which at least one compile ran (each entry is the bar [at - seconds, at]),
    so parallel compile jobs are not counted twice."""
    bars = sorted((e.at - e.seconds, e.at) for e in entries if e.is_compile and e.at is not None and e.seconds is not None)
    span, end = 0.0, float("-inf")
    for start, stop in bars:
        if stop > end:
            span += stop - max(start, end)
            end = stop
    return span


def disk_used_gb(record: Optional[dict]) -> Optional[float]:
    """The most disk a job used, in GB, from its report's ``resources`` record (:mod:`cuw.jobs.resources`):
    free disk at the start less the least free seen; None without the record (an older forge's report)."""
    start = record.get("disk_free_start_mb") if record else None
    least = record.get("min_disk_free_mb") if record else None
    if not (_is_measure(start) and _is_measure(least)):
        return None
    return round(max(0.0, start - least) / 1000, 3)


def shard_report(path: Path) -> Optional[tuple[float, Path, Optional[float]]]:
    """A finished, passing shard's report as (seconds beside its compiles, its seat log, the disk it
    used in GB or None); None when ``path`` is no shard report (a log)."""
    if gate_of(path) != "shard":
        return None
    report = read_shard_report(path)
    build_s, build_log = report.build_s, report.build_log
    if not report.ok or build_s is None or build_log is None:
        why = "; ".join(report.reasons) or "no build_s or build_log"
        raise InputError(f"--from {path}: a shard report of a build that did not pass ({why[:200]}): record a passing shard")
    seat = Path(build_log).parent / "seat.jsonl"
    if not seat.is_file():
        raise InputError(
            f"--from {path}: its seat log {seat} is gone (the shard's work folder): record on the machine that ran it"
        )
    return max(0.0, float(build_s) - compile_span(seat_entries(seat))), seat, disk_used_gb(report.resources)


def read_log(path: Path, source_root: Optional[Path] = None) -> dict[str, float]:
    if not is_regular(path, "--from log (a seat log, logs/seat.jsonl, or a build's .ninja_log)"):
        raise InputError(f"--from {path}: no such file (a seat log, logs/seat.jsonl, or a build's .ninja_log)")
    try:
        first = _first_line(path)
        return from_ninja_log(path, source_root) if first.startswith("# ninja log") else from_seat_log(path)
    except UnicodeDecodeError:
        raise InputError(f"--from {path}: not a text file (a seat log, logs/seat.jsonl, or a build's .ninja_log)") from None


def _shown(path: Path) -> str:
    """A log's path as the header records it: relative to here when it lies below."""
    resolved = path.resolve()
    return str(resolved.relative_to(Path.cwd())) if resolved.is_relative_to(Path.cwd()) else str(resolved)


@dataclass
class _Measured:
    """What the logs given to :func:`record` measured, merged: the larger value wins for a TU seen twice."""

    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    fed: dict[str, list[str]] = field(default_factory=dict)
    link: Optional[LinkCost] = None
    beside: list[float] = field(default_factory=list)
    disks: list[float] = field(default_factory=list)
    """The disk each shard report measured (GB)."""

    def add(self, log: Path, source_root: Optional[Path], keep: Optional[Callable[[str], bool]]) -> None:
        if log.is_file() and (from_link := link_report(log)) is not None:
            self.link = from_link
            return
        if log.is_file() and (from_shard := shard_report(log)) is not None:
            self.beside.append(from_shard[0])
            log = from_shard[1]
            if from_shard[2] is not None:
                self.disks.append(from_shard[2])
        keys = []
        for key, seconds in read_log(log, source_root).items():
            if keep is None or keep(key):
                self.seconds[key] = max(self.seconds.get(key, 0.0), seconds)
                keys.append(key)
        cpu, peaks = _read_usage(log)
        for key in keys:
            for mine, theirs in ((self.cpu, cpu), (self.peaks, peaks)):
                if key in theirs:
                    mine[key] = max(mine.get(key, 0.0), theirs[key])
        self.fed[_shown(log)] = sorted(keys)


def _read_usage(log: Path) -> tuple[dict[str, float], dict[str, float]]:
    """A seat log's CPU seconds and peaks per key (:func:`read_log` has checked it); none from a ninja log."""
    return ({}, {}) if _first_line(log).startswith("# ninja log") else usage_from_seat_log(log)


def _first_line(log: Path) -> str:
    """A log's first line (at most 4 KiB of it): a ninja log says ``# ninja log vN`` there."""
    with open_file(log, "log") as fh:
        return fh.readline(4096).decode("utf-8", "replace")


def record(
    logs: list[Path], out: Path, source_root: Optional[Path] = None, keep: Optional[Callable[[str], bool]] = None
) -> CostTable:
    """Merges the logs (the larger time wins for a TU seen twice) into the table at ``out``.

    Keys the logs did not measure keep their recorded cost: one shard's log updates its
    TUs, never drops the others'. The header lists each log with the keys it fed. A log
    is never written over."""
    for log in logs:
        if same_file(log, out):
            raise InputError(f"--output {out} is also a --from log; write the table elsewhere")
    got = _Measured()
    for log in logs:
        got.add(log, source_root, keep)
    previous = load(out) if out.is_file() else None  # a device or a pipe there holds no table to merge
    if not got.seconds and (got.link is None or previous is None):
        raise InputError(f"no TU of the partition appears in {', '.join(map(str, logs))}")
    link = got.link or (previous.link if previous else None)
    shard = _shard_cost(got, previous.shard if previous else None)
    table = CostTable(
        _merged(previous.costs if previous else {}, got.seconds, 3),
        _header(previous, got),
        out,
        link,
        shard,
        # A TU measured again without them (a ninja log) keeps no stale CPU or peak of an older build.
        _merged(_without(previous.cpu, got.seconds) if previous else {}, got.cpu, 3),
        _merged(_without(previous.peaks, got.seconds) if previous else {}, got.peaks, 0),
    )
    write_text(out, json.dumps(_document(table), indent=2) + "\n", "--output")
    return table


def _shard_cost(got: _Measured, previous: Optional[ShardCost]) -> Optional[ShardCost]:
    """The median seconds beside the compiles of the shard reports given, and the largest disk one
    used (the previous table's when none of them measured it); the previous entry without reports."""
    if not got.beside:
        return previous
    disk = max(got.disks) if got.disks else previous.disk_gb if previous else None
    return ShardCost(round(statistics.median(got.beside), 3), f"median of {len(got.beside)} shard report(s)", disk)


def _without(old: dict[str, float], keys: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in old.items() if k not in keys}


def _merged(old: dict[str, float], new: dict[str, float], digits: int) -> dict[str, float]:
    merged = {**old, **new}
    return {k: round(merged[k], digits) if digits else float(round(merged[k])) for k in sorted(merged)}


def _header(previous: Optional[CostTable], got: _Measured) -> dict[str, object]:
    earlier = previous.header.get("from", []) if previous else []
    sources = [s for s in earlier if isinstance(s, dict)] if isinstance(earlier, list) else []
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sources.append({"recorded": now, "logs": {log: len(keys) for log, keys in got.fed.items()}, "keys": sorted(got.seconds)})
    merged = {**(previous.costs if previous else {}), **got.seconds}
    return {
        "from": sources,
        "recorded": now,
        "tus": len(merged),
        "total_seconds": round(sum(merged.values()), 3),
        "how": (
            "cuw costs <recipe> --from <seat log | .ninja_log | shard report | link report>; "
            "keys not in the newest logs keep their earlier cost"
        ),
    }


def _document(table: CostTable) -> dict[str, object]:
    """The table as its JSON file holds it; ``cpu_s`` and ``peak_mb`` only when some TU has them."""
    document: dict[str, object] = {"header": table.header, "costs": table.costs}
    if table.cpu:
        document["cpu_s"] = table.cpu
    if table.peaks:
        document["peak_mb"] = {k: int(v) for k, v in table.peaks.items()}
    if table.link is not None:
        link = {"fixed_s": table.link.fixed_s, "per_replay_s": table.link.per_replay_s, "from": table.link.source}
        document["link"] = {**link, **_disk_field(table.link.disk_gb)}
    if table.shard is not None:
        document["shard"] = {"fixed_s": table.shard.fixed_s, "from": table.shard.source, **_disk_field(table.shard.disk_gb)}
    return document


def _disk_field(disk_gb: Optional[float]) -> dict[str, float]:
    return {} if disk_gb is None else {"disk_gb": disk_gb}
