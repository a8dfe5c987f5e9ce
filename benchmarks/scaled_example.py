"""The example recipe scaled up into an nvcc-heavy workload, on a copy only.

Each kernel TU's cost is its ``#define CUW_TU_WEIGHT`` (kernels instantiated),
so multiplying every weight by K makes the build K times heavier while the TU
list, the CMake glob, ``tus.def`` and the dispatcher stay as they are; the
cost table (``costs.json``) is scaled by K too, so the ``cost`` rule still
matches the TUs. The example's own files are never touched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# tu_values() returns id * 1000 + weight: a weight of 1000 or more would overlap the next id.
MAX_WEIGHT = 999
WEIGHT = re.compile(r"^#define CUW_TU_WEIGHT (\d+)$", re.MULTILINE)
TU_ID = re.compile(r"^#define CUW_TU_ID (\d+)$", re.MULTILINE)
TU_NAME = re.compile(r"^#define CUW_TU_NAME (\w+)$", re.MULTILINE)


def kernel_dir(recipe_dir: Path) -> Path:
    return recipe_dir / "package" / "csrc" / "kernels"


def scale_example(recipe_dir: Path, factor: int, protected: Path) -> dict[str, int]:
    """Multiplies every kernel weight (and cost) of the copied example in
    ``recipe_dir`` by ``factor``; returns what the wheel's tu_values() must give.

    ``protected`` is the repository's own recipes folder: refusing to write
    under it keeps the committed example unchanged.
    """
    if recipe_dir.resolve().is_relative_to(protected.resolve()):
        raise ValueError(f"{recipe_dir} is the committed recipe; scale a copy")
    if factor < 1:
        raise ValueError(f"--scale must be at least 1, got {factor}")
    rewritten: dict[Path, str] = {}
    for path in sorted(kernel_dir(recipe_dir).glob("*.cu")):
        text = path.read_text()
        found = WEIGHT.search(text)
        if found is None:
            raise ValueError(f"{path}: no '#define CUW_TU_WEIGHT <n>' line to scale")
        weight = int(found.group(1)) * factor
        if weight > MAX_WEIGHT:
            raise ValueError(f"{path}: weight {weight} exceeds {MAX_WEIGHT}; use a smaller --scale")
        rewritten[path] = WEIGHT.sub(f"#define CUW_TU_WEIGHT {weight}", text, count=1)
    # Written only once every TU is known to scale: a refused factor leaves the copy whole.
    for path, text in rewritten.items():
        path.write_text(text)
    costs = recipe_dir / "costs.json"
    if costs.is_file():
        table = json.loads(costs.read_text())
        table["costs"] = {tu: round(seconds * factor, 3) for tu, seconds in table["costs"].items()}
        table.setdefault("header", {})["total_seconds"] = round(sum(table["costs"].values()), 3)
        costs.write_text(json.dumps(table, indent=2) + "\n")
    return tu_values(recipe_dir)


def trim_example(recipe_dir: Path, keep: int, protected: Path) -> dict[str, int]:
    """Keeps the first ``keep`` kernel TUs of the copied example in ``recipe_dir`` (by file name):
    the others' ``.cu`` files, their ``tus.def`` lines and their costs are removed, so the
    dispatcher, the CMake glob and the ``cost`` rule still match the TUs. A real build of the same
    shape, a fraction of the compiles: what a smoke run of a benchmark builds. Returns what the
    wheel's tu_values() must give."""
    if recipe_dir.resolve().is_relative_to(protected.resolve()):
        raise ValueError(f"{recipe_dir} is the committed recipe; trim a copy")
    kernels = sorted(kernel_dir(recipe_dir).glob("*.cu"))
    if not 1 <= keep <= len(kernels):
        raise ValueError(f"--kernels must be from 1 to {len(kernels)}, got {keep}")
    dropped = kernels[keep:]
    names = {TU_NAME.search(path.read_text()).group(1) for path in dropped}  # type: ignore[union-attr]
    tus_def = recipe_dir / "package" / "csrc" / "tus.def"
    lines = tus_def.read_text().splitlines(keepends=True)
    kept_lines = [line for line in lines if line.strip() not in {f"CUW_TU({name})" for name in names}]
    if len(lines) - len(kept_lines) != len(dropped):
        raise ValueError(f"{tus_def}: expected one CUW_TU(name) line for each of {sorted(names)}")
    tus_def.write_text("".join(kept_lines))
    for path in dropped:
        path.unlink()
    costs = recipe_dir / "costs.json"
    if costs.is_file():
        gone = {f"csrc/kernels/{path.name}" for path in dropped}
        table = json.loads(costs.read_text())
        table["costs"] = {tu: seconds for tu, seconds in table["costs"].items() if tu not in gone}
        header = table.setdefault("header", {})
        header["tus"], header["total_seconds"] = len(table["costs"]), round(sum(table["costs"].values()), 3)
        costs.write_text(json.dumps(table, indent=2) + "\n")
    return tu_values(recipe_dir)


def tu_values(recipe_dir: Path) -> dict[str, int]:
    """What the example's tu_values() returns for these sources: id * 1000 + weight per TU."""
    values = {}
    for path in sorted(kernel_dir(recipe_dir).glob("*.cu")):
        text = path.read_text()
        values[TU_NAME.search(text).group(1)] = int(TU_ID.search(text).group(1)) * 1000 + int(WEIGHT.search(text).group(1))
    return values
