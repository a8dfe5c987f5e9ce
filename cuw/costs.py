"""Cost tables: measured compile seconds per TU, recorded from real builds.

A recipe's table is ``recipes/<name>/costs.json``, committed next to the recipe:

    {"header": {"from": [...], "recorded": "...", "tus": 9, "total_seconds": 31.4},
     "costs": {"csrc/kernels/k08_gemm.cu": 8.192, ...}}

Keys are partition keys (:func:`cuw.partition.tu_key`). Two logs feed it:

* the seat log (JSON lines): ``compiled`` entries carry ``key`` and ``seconds``;
  cache hits are skipped (a replayed TU says nothing about its compile cost);
* ninja's ``.ninja_log``: end - start per output, mapped to its source through
  ``ninja -t compdb`` in the same build folder.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .compdb import _ninja
from .errors import CuwError
from .partition import tu_key
from .recipe import Recipe, costs_path


@dataclass(frozen=True)
class CostTable:
    costs: dict[str, float]
    header: dict[str, object] = field(default_factory=dict)
    path: Optional[Path] = None

    @property
    def total(self) -> float:
        return sum(self.costs.values())

    @property
    def longest(self) -> float:
        return max(self.costs.values(), default=0.0)


def load(path: Path) -> CostTable:
    """Reads a cost table; a malformed one is an error naming the file and the fix."""
    fix = "record it again with `cuw costs <recipe> --from <seat log or .ninja_log>`"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CuwError(f"no cost table at {path}: {fix}") from None
    except json.JSONDecodeError as exc:
        raise CuwError(f"{path}: not valid JSON ({exc}): {fix}") from None
    costs = data.get("costs") if isinstance(data, dict) else None
    if not isinstance(costs, dict) or not costs:
        raise CuwError(f"{path}: expected {{\"header\": {{...}}, \"costs\": {{\"<tu key>\": seconds, ...}}}}: {fix}")
    for key, seconds in costs.items():
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise CuwError(f"{path}: costs[{key!r}] = {seconds!r} is not a number of seconds >= 0: {fix}")
    header = data.get("header") if isinstance(data.get("header"), dict) else {}
    return CostTable({k: float(v) for k, v in costs.items()}, header, path)


def recipe_costs(recipe: Recipe) -> Optional[CostTable]:
    """The recipe's committed cost table, or None when it has none."""
    path = costs_path(Path(recipe.folder))
    return load(path) if path.is_file() else None


def from_seat_log(path: Path) -> dict[str, float]:
    """Seconds per key from a seat log's ``compiled`` entries that were real compiles (not hits).

    Host TUs count too (the host seat partitions them off Windows). A key compiled more
    than once in one build (torch-scatter builds each host source into a ``_cpu`` and a
    ``_cuda`` module) costs its owner the sum."""
    out: dict[str, float] = {}
    hits = 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            raise CuwError(f"{path}:{n}: not a seat log line (JSON expected)") from None
        if entry.get("action") != "compiled" or entry.get("rc") not in (0, None):
            continue
        if entry.get("outcome") == "hit":
            hits += 1
            continue
        out[entry["key"]] = out.get(entry["key"], 0.0) + float(entry["seconds"])
    if not out:
        why = f"all {hits} compiles were cache hits: record from a cold build" if hits else "no compiled TUs"
        raise CuwError(f"{path}: {why}")
    return out


def _job_seat(start: Path) -> Optional[dict]:
    """The seat configuration of the forge job folder above ``start``, if there is one."""
    for folder in [start, *start.parents]:
        config = folder / "seat" / "seat.json"
        if config.is_file():
            return json.loads(config.read_text())
    return None


def _replayed_or_stubbed(seat_log: Path) -> set[str]:
    """Keys whose ninja time measures a stub or a cache hit, not a compile."""
    if not seat_log.is_file():
        return set()
    out = set()
    for line in seat_log.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line) if line.strip() else {}
        if entry.get("action") == "stubbed" or entry.get("outcome") == "hit":
            out.add(entry["key"])
    return out


def from_ninja_log(path: Path, source_root: Optional[Path] = None) -> dict[str, float]:
    """Seconds per key from ``.ninja_log`` (the last run of each output), via the build's compile database."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("# ninja log v"):
        raise CuwError(f"{path}: not a ninja log (its first line is not '# ninja log vN')")
    build_dir = path.parent
    job = _job_seat(build_dir)
    root = source_root or (Path(job["source_root"]) if job else None)
    skip = _replayed_or_stubbed(Path(job["log"])) if job else set()
    if root is None:
        raise CuwError(f"{path}: pass --source-root, the folder TU keys are relative to (no forge job folder above it)")
    proc = subprocess.run([_ninja(), "-C", str(build_dir), "-t", "compdb"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise CuwError(f"{path}: `ninja -t compdb` failed in {build_dir} (the build.ninja beside the log is needed)")
    sources = {e["output"]: e["file"] for e in json.loads(proc.stdout or "[]") if e.get("output") and e.get("command")}
    seconds: dict[str, float] = {}
    for line in lines[1:]:
        parts = line.split("\t")
        if len(parts) < 4 or parts[3] not in sources:
            continue
        source = Path(sources[parts[3]])
        source = source if source.is_absolute() else build_dir / source
        key = tu_key(str(source), str(root))
        if key not in skip:
            seconds[key] = (int(parts[1]) - int(parts[0])) / 1000.0
    if not seconds:
        raise CuwError(f"{path}: no compile of the build's compile database appears in it")
    return seconds


def read_log(path: Path, source_root: Optional[Path] = None) -> dict[str, float]:
    if not path.is_file():
        raise CuwError(f"--from {path}: no such file (a seat log, logs/seat.jsonl, or a build's .ninja_log)")
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    return from_ninja_log(path, source_root) if first.startswith("# ninja log") else from_seat_log(path)


def _shown(path: Path) -> str:
    """A log's path as the header records it: relative to here when it lies below."""
    resolved = path.resolve()
    return str(resolved.relative_to(Path.cwd())) if resolved.is_relative_to(Path.cwd()) else str(resolved)


def record(
    logs: list[Path], out: Path, source_root: Optional[Path] = None, keep: Optional[Callable[[str], bool]] = None
) -> CostTable:
    """Merges the logs (the larger time wins for a TU seen twice) and writes the table."""
    merged: dict[str, float] = {}
    for log in logs:
        for key, seconds in read_log(log, source_root).items():
            if keep is None or keep(key):
                merged[key] = max(merged.get(key, 0.0), seconds)
    if not merged:
        raise CuwError(f"no TU of the partition appears in {', '.join(map(str, logs))}")
    header: dict[str, object] = {
        "from": [_shown(log) for log in logs],
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tus": len(merged),
        "total_seconds": round(sum(merged.values()), 3),
        "how": "cuw costs <recipe> --from <seat log | .ninja_log>",
    }
    costs = {k: round(merged[k], 3) for k in sorted(merged)}
    out.write_text(json.dumps({"header": header, "costs": costs}, indent=2) + "\n")
    return CostTable(costs, header, out)
