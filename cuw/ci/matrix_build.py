"""``build --matrix``: every cell of the selection this machine can build, each in its own environment.

A cell is buildable here when its lane is this machine's, its CUDA line has a
toolkit here (each line its own, ``cuw/config/toolkits.py``) and its Python is
installed (``cuw/jobs/cell_env.py`` finds it); its torch is installed into its
environment. Buildable cells run several at a time within
the machine's cores and memory, each as ``cuw build`` inside its venv (its
shards and its link run there too); the run ends with a table: cell,
built/failed/skipped, why skipped (naming what would make it buildable), wall,
verdicts.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from cuw.jobs import cell_env
from cuw.config.cell import Cell
from cuw.base.errors import CuwError
from cuw.base.settings import Settings
from cuw.config.grid import Grid, served_pythons
from cuw.config.recipe import Recipe
from cuw.config.toolkits import LineToolkit

CELL_MEMORY_GB = 4.0  # one cell's build at a time (compilers, pip, the link's auditwheel)
_VERDICT = re.compile(r"^(link|verify) gate (PASS|FAIL)")


@dataclass
class Row:
    cell: Cell
    status: str  # built | failed | skipped
    why: str = ""
    wall: float = 0.0
    verdicts: list[str] = field(default_factory=list)
    serves: list[str] = field(default_factory=list)
    env: str = ""


@dataclass(frozen=True)
class Buildable:
    cell: Cell
    interp: cell_env.Interpreter
    toolkit_home: str  # the cell's CUDA line's toolkit, passed to its build as CUW_TOOLKIT


def memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return CELL_MEMORY_GB


def cells_at_once(cells: int, cores: int, mem_gb: float, jobs: Optional[int]) -> tuple[int, int]:
    """How many cells build at once and the compile jobs each gets: ``jobs`` (default: the cores)
    is the whole budget; a cell needs at least 2 jobs' worth of cores and CELL_MEMORY_GB of memory."""
    budget = max(1, jobs or cores)
    at_once = max(1, min(cells, budget // 2 or 1, cores // 2 or 1, int(mem_gb // CELL_MEMORY_GB) or 1))
    return at_once, max(1, budget // at_once)


def plan_local(
    recipe: Recipe,
    selected: list[Cell],
    lane: str,
    toolkits: Mapping[str, LineToolkit],
    find: Callable[[str], tuple[Optional[cell_env.Interpreter], list[str]]],
) -> tuple[list[Buildable], list[Row]]:
    """The cells this machine can build (with their Python and their line's toolkit), and a skipped
    row for every other one."""
    build: list[Buildable] = []
    skipped: list[Row] = []
    pythons: dict[str, tuple[Optional[cell_env.Interpreter], list[str]]] = {}
    for cell in selected:
        if cell.lane != lane:
            skipped.append(Row(cell, "skipped", f"lane {cell.lane}: this machine is {lane}; build it on a {cell.lane} runner"))
            continue
        line = toolkits.get(cell.cuda)
        if line is None or line.chosen is None:
            skipped.append(Row(cell, "skipped", f"CUDA {cell.cuda} toolkit: {line.why if line else 'not planned'}"))
            continue
        if cell.python not in pythons:
            pythons[cell.python] = find(cell.python)
        interp, looked = pythons[cell.python]
        if interp is None:
            skipped.append(
                Row(
                    cell,
                    "skipped",
                    f"Python {cell.python}: none found (looked at {', '.join(looked)}); "
                    f"install it (pyenv install {cell.python}, or uv python install {cell.python})",
                )
            )
            continue
        build.append(Buildable(cell, interp, str(line.chosen.toolkit.home)))
    return build, skipped


def _spec(recipe: Recipe, cell: Cell, interp: cell_env.Interpreter, torch_index: dict[str, str]) -> cell_env.Spec:
    torch = cell_env.torch_requirement(cell.torch) if (recipe.links_torch and cell.torch) else None
    return cell_env.Spec(interp, torch, torch_index.get(cell.cuda) if torch else None)


def _pump(proc: subprocess.Popen, log: Path, prefix: str, say: Callable[[str], None], verdicts: list[str]) -> None:
    with open(log, "w") as fh:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            fh.write(line + "\n")
            fh.flush()
            say(f"{prefix}: {line.removeprefix('cuw: ')}")
            text = line.strip().removeprefix("cuw: ")
            if _VERDICT.search(text):
                verdicts.append(text)


def run_matrix(
    recipe: Recipe,
    grid: Grid,
    torch_index: dict[str, str],
    build: list[Buildable],
    args: list[str],
    work: Path,
    jobs: Optional[int],
    say: Callable[[str], None],
    *,
    settings: Settings,
) -> list[Row]:
    """Builds each cell with ``cuw build <recipe> <args>`` in its environment, several at once;
    ``settings``: the run's (its venv folder, its children's environment)."""
    at_once, jobs_each = cells_at_once(len(build), os.cpu_count() or 1, memory_gb(), jobs)
    say(f"matrix: {len(build)} buildable cell(s), {at_once} at a time, {jobs_each} compile job(s) each")
    logs = work / "matrix-logs"
    logs.mkdir(parents=True, exist_ok=True)
    launcher = _CellLauncher(recipe, grid, torch_index, args, logs, jobs_each, say, settings)
    return _run_cells(build, at_once, launcher)


@dataclass(frozen=True)
class _CellRun:
    row: Row
    proc: subprocess.Popen
    pump: threading.Thread
    started: float


@dataclass(frozen=True)
class _CellLauncher:
    """How a cell's ``cuw build`` starts: in its environment, its output pumped to its log."""

    recipe: Recipe
    grid: Grid
    torch_index: dict[str, str]
    args: list[str]
    logs: Path
    jobs_each: int
    say: Callable[[str], None]
    settings: Settings

    def start(self, item: Buildable) -> Union[_CellRun, Row]:
        """The cell's build, running; or its skipped row when its environment could not be made."""
        cell, interp = item.cell, item.interp
        row = Row(cell, "failed", serves=served_pythons(self.recipe, self.grid, cell))
        started = time.monotonic()
        try:
            spec = _spec(self.recipe, cell, interp, self.torch_index)
            self.say(
                f"matrix: {cell.id}: environment for Python {interp.version} ({interp.where})"
                + (f", {spec.torch}" if spec.torch else "")
                + " ..."
            )
            python, reused = cell_env.ensure(spec, self.settings.folders.cell_venvs)
        except CuwError as exc:
            row.status, row.why, row.wall = "skipped", f"its environment could not be made: {exc}", time.monotonic() - started
            self.say(f"matrix: {cell.id}: {row.why}")
            return row
        venv = python.parent.parent
        row.env = f"{venv} ({'reused' if reused else 'made'})"
        self.say(f"matrix: {cell.id}: building in {row.env}")
        proc = subprocess.Popen(
            [str(python), "-m", "cuw", "build", self.recipe.key, *self.args, "--jobs", str(self.jobs_each)],
            env=_cell_environ(self.settings, venv, item.toolkit_home),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=os.name == "posix",
        )
        pump = threading.Thread(target=_pump, args=(proc, self.log(cell), cell.id, self.say, row.verdicts), daemon=True)
        pump.start()
        return _CellRun(row, proc, pump, started)

    def log(self, cell: Cell) -> Path:
        return self.logs / f"{cell.id}.log"


def _cell_environ(settings: Settings, venv: Path, toolkit_home: str) -> dict[str, str]:
    """The run's child environment inside the cell's venv, with the cell's line's toolkit whatever
    this run's own is: its build exports it to its jobs."""
    env = settings.child_env(drop=("PYTHONHOME", "PYTHONPATH", "__PYVENV_LAUNCHER__"))
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    env.update(CUW_TOOLKIT=toolkit_home, CUW_CUDA_HOME=toolkit_home, CUDA_HOME=toolkit_home)
    return env


def _run_cells(build: list[Buildable], at_once: int, launcher: _CellLauncher) -> list[Row]:
    """Every cell, ``at_once`` at a time; a row for each, in the order they ended."""
    rows: list[Row] = []
    pending = list(build)
    running: list[_CellRun] = []
    try:
        while pending or running:
            while pending and len(running) < at_once:
                started = launcher.start(pending.pop(0))
                if isinstance(started, Row):
                    rows.append(started)
                else:
                    running.append(started)
            time.sleep(0.5)
            for run in list(running):
                if run.proc.poll() is None:
                    continue
                run.pump.join()
                run.row.wall = time.monotonic() - run.started
                run.row.status = "built" if run.proc.returncode == 0 else "failed"
                if run.proc.returncode != 0 and not run.row.verdicts:
                    run.row.why = f"cuw build exited {run.proc.returncode}; log {launcher.log(run.row.cell)}"
                rows.append(run.row)
                running.remove(run)
    except BaseException:
        _stop_cells([run.proc for run in running])
        raise
    return rows


def _stop_cells(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def table(rows: list[Row], collapse_note: str = "") -> str:
    """The closing table: one line per cell, in the selection's order."""
    head = f"{'cell':44} {'result':8} {'wall':>7}  verdicts / why"
    lines = [head, "-" * len(head)]
    for row in rows:
        wall = f"{row.wall:6.0f}s" if row.status != "skipped" or row.wall else "      -"
        text = "; ".join(row.verdicts) if row.verdicts else ""
        if row.why:
            text = f"{text}; {row.why}" if text else row.why
        if row.status != "skipped" and len(row.serves) > 1:
            text += f" [one wheel for Python {', '.join(row.serves)}]"
        lines.append(f"{row.cell.id:44} {row.status:8} {wall}  {text}")
    if collapse_note:
        lines.append(collapse_note)
    return "\n".join(lines)
