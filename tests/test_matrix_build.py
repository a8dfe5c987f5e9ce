"""build --matrix: finding each cell's Python, its own environment, several cells at once, the closing table."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO, need, run_settings
from cuw.jobs import cell_env
from cuw.config.cell import Cell
from cuw.ci.matrix_build import Buildable, Row, cells_at_once, plan_local, run_matrix, table
from cuw.config import toolkits
from cuw.config.policy import load_policy
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import find_toolkit


def test_the_forges_own_and_pyenvs_pythons_are_found_and_a_missing_one_names_where_it_looked():
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    got, _ = cell_env.find_python(here, settings=run_settings())
    assert got and got.version.startswith(here + ".")
    missing, looked = cell_env.find_python("3.99", settings=run_settings())
    assert missing is None
    assert "python3.99 on PATH (none)" in looked and any(w.startswith(("pyenv", "pyenv versions in")) for w in looked)
    assert any(w.startswith("uv") for w in looked)


def _find(minor: str) -> tuple[cell_env.Interpreter | None, list[str]]:
    """The lookup ``cuw build --matrix`` hands plan_local: the run's Python ``minor``."""
    return cell_env.find_python(minor, settings=run_settings())


def test_plan_local_names_what_would_make_each_cell_buildable(recipes_dir, monkeypatch):
    monkeypatch.delenv("CUW_TOOLKIT", raising=False)
    recipe = load_recipe("example_torch", recipes_dir)
    cells = [
        Cell("example_torch", "linux", "3.11", "13.0", "2.14"),
        Cell("example_torch", "linux", "3.99", "13.0", "2.14"),
        Cell("example_torch", "linux", "3.11", "12.8", "2.14"),
        Cell("example_torch", "windows", "3.11", "13.0", "2.14"),
    ]
    lines = toolkits.for_lines(load_policy(recipes_dir), None, ["13.0", "12.8"], run_settings())
    build, skipped = plan_local(recipe, cells, "linux", lines, _find)
    assert [b.cell for b in build] == cells[:1] and build[0].toolkit_home == str(find_toolkit(homes=run_settings().homes).home)
    why = {r.cell.id: r.why for r in skipped}
    assert why[cells[1].id].startswith("Python 3.99: none found (looked at python3.99 on PATH (none), pyenv")
    assert "pyenv install 3.99" in why[cells[1].id]
    assert why[cells[2].id].startswith(
        "CUDA 12.8 toolkit: toolkits.12.8 in recipes/defaults.yml is system, but the system toolkit is CUDA 13.0"
    )
    assert "CUW_CUDA_HOME" in why[cells[2].id] and "no nvcc driver" in why[cells[2].id]
    assert why[cells[3].id] == "lane windows: this machine is linux; build it on a windows runner"


def _fake_toolkit(root: Path, release: str) -> Path:
    """A folder whose bin/nvcc reports ``release``: which line a path entry serves is read from nvcc."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return root


def test_each_cuda_line_gets_its_own_toolkit_and_a_forced_one_only_serves_its_line(recipes_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("CUW_TOOLKIT", raising=False)
    recipe = load_recipe("example_torch", recipes_dir)
    cells = [Cell("example_torch", "linux", "3.11", "13.0", "2.14"), Cell("example_torch", "linux", "3.11", "12.8", "2.14")]
    other = _fake_toolkit(tmp_path / "cuda-12.8", "12.8")
    policy = load_policy(recipes_dir)
    per_line = replace(policy, toolkits={**policy.toolkits, "12.8": str(other)})
    lines = toolkits.for_lines(per_line, None, ["13.0", "12.8"], run_settings())
    build, skipped = plan_local(recipe, cells, "linux", lines, _find)
    assert not skipped
    assert {b.cell.cuda: b.toolkit_home for b in build} == {
        "13.0": str(find_toolkit(homes=run_settings().homes).home),
        "12.8": str(other.resolve()),
    }
    # --toolkit PATH is one toolkit: the other line is skipped, naming the mismatch
    lines = toolkits.for_lines(policy, str(other), ["13.0", "12.8"], run_settings())
    build, skipped = plan_local(recipe, cells, "linux", lines, _find)
    assert [b.cell.cuda for b in build] == ["12.8"]
    assert skipped[0].why == (
        f"CUDA 13.0 toolkit: --toolkit = {other}: that toolkit is CUDA 12.8, not 13.0; name a CUDA 13.0 toolkit"
    )
    # --toolkit wheels cannot serve a CUDA 12 line
    lines = toolkits.for_lines(policy, "wheels", ["12.8"], run_settings())
    assert lines["12.8"].chosen is None and "ship ptxas but no nvcc driver" in lines["12.8"].why


# A cell's interpreter whose `-m cuw build` ends in a gate failure: a real process, its real exit code.
_FAILING_BUILD = """#!/bin/sh
echo "$@" > "$(dirname "$0")/argv"
echo "cuw: shard 1/1: done"
echo "cuw: link gate FAIL: 1 miss (csrc/kernels/k04_scan.cu): the link compiled what no shard cached"
exit 1
"""


@pytest.mark.long
def test_each_cells_row_is_its_real_builds_outcome_and_its_lines_toolkit_reaches_it(recipes_dir, tmp_path, monkeypatch):
    """run_matrix over four cells, each a real child process: the example really built (one shard,
    the forge's own Python and this machine's toolkit), a cell whose line's toolkit is not one (the
    real ``cuw build`` refuses it), a build that ends in a gate failure, and a cell whose environment
    cannot be made. Rows, verdicts, the closing table and the wheels follow what each child did."""
    from cuw.base.errors import CuwError

    recipe = load_recipe("example", recipes_dir)
    policy = load_policy(recipes_dir)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    toolkit = str(find_toolkit(homes=run_settings().homes).home)
    standin = tmp_path / "standin" / "bin" / "python"
    standin.parent.mkdir(parents=True)
    standin.write_text(_FAILING_BUILD)
    standin.chmod(0o755)
    real, bad_toolkit, gate_fails, no_env, windows = (
        Cell("example", "linux", here, "13.0", None),
        Cell("example", "linux", "3.97", "13.0", None),
        Cell("example", "linux", "3.98", "13.0", None),
        Cell("example", "linux", "3.99", "13.0", None),
        Cell("example", "windows", here, "13.0", None),
    )
    pythons = {here: Path(sys.executable), "3.97": Path(sys.executable), "3.98": standin}

    def ensure(spec, root=None):  # the cell's environment: its interpreter, by the Python it was made for
        version = spec.python.version.rsplit(".", 1)[0]
        if version not in pythons:
            raise CuwError(f"python{version} -m venv failed")
        return pythons[version], True

    monkeypatch.setattr(cell_env, "ensure", ensure)
    monkeypatch.setenv("CUW_TOOLKIT", str(tmp_path / "the-parents-toolkit"))  # a child must never fall back on it
    interp = lambda version: cell_env.Interpreter(str(pythons.get(version, sys.executable)), version + ".0", "test")  # noqa: E731
    build = [
        Buildable(real, interp(here), toolkit),
        Buildable(bad_toolkit, interp("3.97"), str(tmp_path / "no-cuda")),
        Buildable(gate_fails, interp("3.98"), toolkit),
        Buildable(no_env, interp("3.99"), toolkit),
    ]
    args = [
        "--shards",
        "1",
        "--recipes",
        str(recipes_dir),
        "--work",
        str(tmp_path / "work"),
        "--artifacts",
        str(tmp_path / "artifacts"),
        "--dist",
        str(tmp_path / "dist"),
    ]
    rows = run_matrix(recipe, policy.grid, {}, build, args, tmp_path / "work", 2, lambda _: None, settings=run_settings())
    order = [real, bad_toolkit, gate_fails, no_env, windows]
    skipped = Row(windows, "skipped", "lane windows: this machine is linux; build it on a windows runner")
    by_cell = {r.cell: r for r in rows}
    assert set(by_cell) == set(order[:4]) and len(rows) == 4

    built = by_cell[real]
    assert built.status == "built" and not built.why
    assert [v.split(":")[0] for v in built.verdicts] == ["link gate PASS", "verify gate PASS"], built.verdicts
    [wheel] = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith("cuw_example-") and "-py3-none-" in wheel.name, "the one wheel is the real cell's"

    refused = by_cell[bad_toolkit]
    log = tmp_path / "work" / "matrix-logs" / f"{bad_toolkit.id}.log"
    assert (refused.status, refused.verdicts) == ("failed", [])
    assert refused.why == f"cuw build exited 2; log {log}"
    assert f"$CUW_TOOLKIT = {tmp_path / 'no-cuda'}: no bin/nvcc there" in log.read_text(), "its line's toolkit, not the parent's"

    failed = by_cell[gate_fails]
    assert (failed.status, failed.why) == ("failed", "")
    assert failed.verdicts == ["link gate FAIL: 1 miss (csrc/kernels/k04_scan.cu): the link compiled what no shard cached"]
    assert (standin.parent / "argv").read_text().split() == ["-m", "cuw", "build", "example", *args, "--jobs", "2"]

    assert (by_cell[no_env].status, by_cell[no_env].why) == (
        "skipped",
        "its environment could not be made: python3.99 -m venv failed",
    )

    lines = table(sorted(rows + [skipped], key=lambda r: order.index(r.cell))).splitlines()[2:]
    assert [(line.split()[0], line.split()[1]) for line in lines] == [
        (real.id, "built"),
        (bad_toolkit.id, "failed"),
        (gate_fails.id, "failed"),
        (no_env.id, "skipped"),
        (windows.id, "skipped"),
    ]
    assert "link gate PASS" in lines[0] and "[one wheel for Python 3.10, 3.11, 3.12, 3.13]" in lines[0]
    assert f"cuw build exited 2; log {log}" in lines[1]
    assert "link gate FAIL: 1 miss" in lines[2] and "exited" not in lines[2]


def test_cells_at_once_stay_within_cores_memory_and_jobs():
    assert cells_at_once(4, cores=2, mem_gb=128, jobs=None) == (1, 2)
    assert cells_at_once(4, cores=16, mem_gb=128, jobs=None) == (4, 4)
    assert cells_at_once(4, cores=16, mem_gb=9, jobs=None) == (2, 8), "memory bounds it: 4 GB a cell"
    assert cells_at_once(4, cores=16, mem_gb=128, jobs=4) == (2, 2), "--jobs is the whole budget"
    assert cells_at_once(1, cores=16, mem_gb=128, jobs=None) == (1, 16)
    assert cells_at_once(3, cores=1, mem_gb=1, jobs=1) == (1, 1)


def test_the_table_shows_each_cell_its_result_and_the_collapse():
    built = Row(
        Cell("example", "linux", "3.10", "13.0", None),
        "built",
        wall=95.0,
        verdicts=["link gate PASS: 0 misses", "verify gate PASS: 14 checks"],
        serves=["3.10", "3.11"],
    )
    skipped = Row(Cell("example", "windows", "3.10", "13.0", None), "skipped", "lane windows: this machine is linux")
    text = table([built, skipped], "example: Python axis collapsed")
    lines = text.splitlines()
    assert lines[2].split()[:3] == ["example-linux-py3.10-cu13.0-notorch", "built", "95s"]
    assert "verify gate PASS" in lines[2] and "[one wheel for Python 3.10, 3.11]" in lines[2]
    assert lines[3].split()[:3] == ["example-windows-py3.10-cu13.0-notorch", "skipped", "-"]
    assert lines[3].endswith("lane windows: this machine is linux") and lines[-1] == "example: Python axis collapsed"


def test_the_environment_key_follows_its_inputs(monkeypatch):
    py = cell_env.Interpreter("/usr/bin/python3.12", "3.12.1", "PATH")
    base = cell_env.Spec(py, None, None)
    assert base.key() == cell_env.Spec(py, None, "https://ignored-without-torch").key()
    torch = cell_env.Spec(py, "torch==2.14.1", "https://pypi.org/simple")
    keys = {
        base.key(),
        torch.key(),
        replace(torch, torch_index="https://download.pytorch.org/whl/cu128").key(),
        replace(base, python=replace(py, version="3.12.2")).key(),
    }
    assert len(keys) == 4
    assert torch.folder(Path("/r")).name.startswith("py3.12-torch2.14.1-") and base.folder(Path("/r")).name.startswith(
        "py3.12-notorch-"
    )
    monkeypatch.setattr(cell_env, "forge_digest", lambda: "another forge")
    assert base.key() not in keys, "a changed forge makes a new environment"


@pytest.mark.long
def test_a_cells_environment_is_made_once_with_its_python_and_reused(tmp_path):
    """A real venv from another Python than the forge's (pyenv's 3.12 here), the forge installed in it."""
    other = next((m for m in ("3.12", "3.10", "3.13") if m != f"{sys.version_info.major}.{sys.version_info.minor}"), None)
    interp = need(f"python{other}")  # missing: a skip, or a failure where $CUW_REQUIRE lists it
    spec = cell_env.Spec(interp, None, None)
    python, reused = cell_env.ensure(spec, tmp_path)
    assert not reused and python.parent.parent.name.startswith(f"py{other}-notorch-")
    out = subprocess.run(
        [str(python), "-c", "import sys, cuw; print(sys.version_info[:2], cuw.__file__)"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"({other.replace('.', ', ')})") and str(REPO / "cuw") in out.stdout
    ccache = subprocess.run([str(python.parent / "ccache"), "--version"], capture_output=True, text=True)
    assert ccache.returncode == 0 and "4.14.2" in ccache.stdout.splitlines()[0], "the pinned cache tool is in it"
    ready = python.parent.parent / cell_env.READY
    stamp = ready.stat().st_mtime_ns
    again, reused = cell_env.ensure(spec, tmp_path)
    assert reused and again == python and ready.stat().st_mtime_ns == stamp
    # An environment never marked ready (an interrupted install) is made again, once, when two
    # jobs on the runner ask for it at the same moment: one makes it, the other waits and reuses it.
    ready.unlink()
    child = (
        "import sys; from cuw.jobs import cell_env; from pathlib import Path; "
        f"spec = cell_env.Spec(cell_env.Interpreter({interp.path!r}, {interp.version!r}, 'test'), None, None); "
        f"print(cell_env.ensure(spec, Path({str(tmp_path)!r}))[1])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    assert sorted(out.strip() for out, _ in results) == ["False", "True"], results
    assert ready.is_file() and subprocess.run([str(python), "-c", "import cuw"]).returncode == 0


def _matrix_build(recipes_dir: Path, root: Path, *filters: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "cuw",
        "build",
        *filters,
        "--matrix",
        "--platform",
        "linux",
        "--cuda",
        "13.0",
        "--recipes",
        str(recipes_dir),
        "--work",
        str(root / "work"),
        "--artifacts",
        str(root / "artifacts"),
        "--dist",
        str(root / "dist"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
    return proc


@pytest.mark.e2e  # a venv made for Python 3.10 and a whole cell built in it: minutes, the slow tier
@pytest.mark.needs("python3.10")  # missing: a skip, or a failure where $CUW_REQUIRE lists it
def test_build_matrix_builds_the_collapsed_example_cell_in_its_own_python(recipes_dir, tmp_path):
    """The example's one linux/13.0 cell (py3: every Python collapsed), built with the grid's lowest
    Python in its own venv (the default cell-venv folder, reused across runs), linked and verified."""
    proc = _matrix_build(recipes_dir, tmp_path, "example")
    assert proc.returncode == 0
    assert "Python axis collapsed (wheel_python: py3" in proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("example-linux-py3.10-cu13.0-notorch ")]
    assert row.split()[1] == "built" and "link gate PASS" in row and "verify gate PASS" in row
    assert "[one wheel for Python 3.10, 3.11, 3.12, 3.13]" in row
    [wheel] = (tmp_path / "dist").glob("*.whl")
    assert "-py3-none-" in wheel.name
    log = (tmp_path / "work" / "matrix-logs" / "example-linux-py3.10-cu13.0-notorch.log").read_text()
    assert "build example-linux-py3.10-cu13.0-notorch" in log, "the cell's own cuw build ran on Python 3.10"


@pytest.mark.e2e
def test_example_torch_builds_for_two_pythons_each_with_torch_2_14_1_in_its_own_env(recipes_dir, tmp_path):
    """Two Pythons of example_torch with torch 2.14.1 (the second Python's torch is a multi-GB download)."""
    proc = _matrix_build(recipes_dir, tmp_path, "example_torch", "--pytorch", "2.14", "--python", "3.11,3.12")
    assert proc.returncode == 0
    rows = [line for line in proc.stdout.splitlines() if line.startswith("example_torch-linux-py3.1")]
    assert len(rows) == 2 and all(r.split()[1] == "built" and "verify gate PASS" in r for r in rows), rows
    assert sorted(w.name.split("-")[2] for w in (tmp_path / "dist").glob("*.whl")) == ["cp311", "cp312"]
    envs = sorted(p.name for p in run_settings().folders.cell_venvs.glob("py3.1[12]-torch2.14.*") if p.is_dir())
    assert {e[:6] for e in envs} >= {"py3.11", "py3.12"}, envs
