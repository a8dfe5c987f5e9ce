"""The farm tier (pytest -m farm, ``nox -s farm``): the real build.yml under act, published, pip-installed.

Runs on a clone of this checkout's HEAD (the committed state, not the work in progress
beside it) so the example's version can be bumped there without touching this checkout:

1. ``cuw workflow example --platform linux --cuda 13.0 --python 3.11``: plan, 4 shards,
   the link, publish; ``pip install --index-url file://<index>/cu130 cuw-example`` in a
   fresh venv installs 0.1.0 and it imports.
2. The example bumped to 0.1.1, two cells (Python 3.11 and 3.12) and the fault switch on
   shard 2/4 of the 3.11 cell: that cell's link fails naming shard 2/4, nothing of it is
   published, the 3.12 cell is; the index then lists 0.1.0 and 0.1.1, a fresh venv gets
   0.1.1 and ``cuw-example==0.1.0`` stays installable.

Needs act (``pip install -e '.[farm]'``), nvcc 13.0, Pythons 3.11 and 3.12 (pyenv's here),
the pinned actions offline ($CUW_OFFLINE_ACTIONS or ../shared/actions) or GitHub, and
PyPI for the jobs' own venvs. About 10 minutes on 2 cores; the wall time of each run is
printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, have, installed_build, need, run_in_container, run_settings
from cuw.ci.workflow_run import find_interpreter

pytestmark = pytest.mark.farm

CELL_311 = "example-linux-py3.11-cu13.0-notorch"
CELL_312 = "example-linux-py3.12-cu13.0-notorch"


def _copy_repo(dest: Path) -> Path:
    """A clone of this checkout's HEAD: what is committed, without the work in progress beside it.

    ``CUW_FARM_WORKTREE=1``: the checkout's files as they are now (tracked and untracked, not ignored),
    committed into the copy, to try uncommitted work."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True)
    subprocess.run(["git", "remote", "remove", "origin"], cwd=dest, check=True)
    if os.environ.get("CUW_FARM_WORKTREE") == "1":
        listed = (
            subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True
            )
            .stdout.decode()
            .split("\0")
        )
        for rel in filter(None, listed):
            if (REPO / rel).is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, dest / rel)
        _commit(dest, "the checkout's work in progress")
    return dest


def _commit(repo: Path, message: str) -> None:
    git = ["git", "-c", "user.name=farm", "-c", "user.email=farm@localhost"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", message], cwd=repo, check=True)  # nothing new: still a commit


def _bump(repo: Path, version: str, per_interpreter: bool = False) -> None:
    path = repo / "recipes/example/package/pyproject.toml"
    text = re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', path.read_text())
    if per_interpreter:  # a cp3X wheel per Python: two Python cells, two wheels (py3 collapses them into one)
        text = text.replace('wheel.py-api = "py3"\n', "")
        recipe = repo / "recipes/example/recipe.yml"
        recipe.write_text(re.sub(r"(?m)^wheel_python: py3\b.*$", "wheel_python: per-interpreter", recipe.read_text()))
    path.write_text(text)
    _commit(repo, f"example {version}")


def _workflow(repo: Path, index: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ)
    if "CUW_OFFLINE_ACTIONS" not in env and have("offline-actions"):  # the run is in a clone, away from ../shared
        env["CUW_OFFLINE_ACTIONS"] = str(need("offline-actions"))
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "workflow",
            "example",
            "--platform",
            "linux",
            "--cuda",
            "13.0",
            "--index",
            str(index),
            *args,
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    print(proc.stdout[-6000:], proc.stderr[-3000:], sep="\n")
    print(f"farm: cuw workflow {' '.join(args)}: {wall:.0f} s wall, exit {proc.returncode}")
    return proc, wall


def _pip_install(index: Path, tmp: Path, spec: str, python: str = "3.11") -> str:
    """A fresh venv, the package from the index alone; returns the version that imports."""
    interp = find_interpreter(python, run_settings())
    assert interp, f"needs Python {python}"
    venv = tmp / f"venv-{len(list(tmp.glob('venv-*')))}"  # a fresh venv per call: nothing installed before
    subprocess.run([str(interp.prefix / "bin" / "python3"), "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-cache-dir", "--index-url", f"file://{index}/cu130", spec],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    code = "import importlib.metadata as m, cuw_example; print(m.version('cuw-example'))"
    out = subprocess.run(
        [str(py), "-c", code], capture_output=True, text=True, cwd=tmp, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _verdicts(stdout: str) -> dict[str, str]:
    """The verdict lines (job name -> line), between the 'workflow ...' line and 'index:'."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^\S+ (success|failure|skipped|unfinished)\s+(.+?) \(\d+ s\)", line)
        if m:
            out[m.group(2)] = line
    return out


def test_the_real_workflow_publishes_and_pip_installs(tmp_path):
    need("act")
    repo = _copy_repo(tmp_path / "repo")
    index = tmp_path / "index"

    first, wall1 = _workflow(repo, index, "--python", "3.11")
    assert first.returncode == 0, "the first run must pass end to end"
    assert first.stdout.rstrip().splitlines()[-1] == f"index: {index}"
    verdicts = _verdicts(first.stdout)
    assert sum("shard" in name for name in verdicts) == 4 and any("link" in n for n in verdicts)
    assert any("publish" in n for n in verdicts) and all(" success " in v for v in verdicts.values())
    [wheel] = sorted((index / "files").glob("*.whl"))
    record = json.loads((index / "files" / f"{wheel.name}.build.json").read_text())
    assert record["cell"]["python"] == "3.11" and len(record["shards"]) == 4
    assert record["link"]["misses"] == 0 and record["verify"]["ok"] is True
    assert record["source"]["kind"] == "path" and len(record["recipe_digest"]) == 64
    assert _pip_install(index, tmp_path, "cuw-example") == wheel.name.split("-")[1]

    # Nothing changed: the plan finds the cell published with today's inputs; nothing runs after it.
    marker_before = (index / "cuw-index.json").read_bytes()
    idle, wall_idle = _workflow(repo, index, "--python", "3.11")
    assert idle.returncode == 0, "a run with nothing to build passes"
    ran = {name: line for name, line in _verdicts(idle.stdout).items() if " skipped " not in line}
    assert list(ran) == ["build/plan"], idle.stdout[-3000:]
    assert "1 cell(s) up to date, 0 stale, 0 missing; --rebuild stale: 0 cell(s) planned" in idle.stdout + idle.stderr
    assert (index / "cuw-index.json").read_bytes() == marker_before, "nothing new published"

    _bump(repo, "0.1.1", per_interpreter=True)
    second, wall2 = _workflow(repo, index, "--python", "3.11,3.12", "--fail-shard", f"{CELL_311}:2/4")
    assert second.returncode == 1, "the faulted shard and its cell's link fail the run"
    verdicts = _verdicts(second.stdout)
    failed = sorted(name for name, line in verdicts.items() if " failure " in line)
    assert any(CELL_311 in n and "2/4" in n for n in failed) and any(n.startswith("build/link") and CELL_311 in n for n in failed)
    assert all(CELL_312 not in n for n in failed), failed
    assert any("publish" in n and " success " in line for n, line in verdicts.items())
    summaries = second.stdout + second.stderr
    assert re.search(rf"not published: cell {CELL_311}: link failed: missing shard\(s\) 2/4", summaries), summaries[-3000:]
    names = sorted(p.name for p in (index / "files").glob("*.whl"))
    versions = sorted({n.split("-")[1] for n in names})
    assert versions == ["0.1.0+cu130", "0.1.1+cu130"], names
    newer = [n for n in names if n.split("-")[1].startswith("0.1.1")]
    records = [json.loads((index / "files" / f"{n}.build.json").read_text()) for n in newer]
    assert [r["cell"]["python"] for r in records] == ["3.12"], "only the cell without the fault is published"
    page = (index / "cu130" / "cuw-example" / "index.html").read_text()
    assert page.count("#sha256=") == len(names)
    assert _pip_install(index, tmp_path, "cuw-example", "3.12") == "0.1.1+cu130"  # the cp312 wheel
    assert _pip_install(index, tmp_path, "cuw-example==0.1.0", "3.12") == "0.1.0+cu130"  # the py3 wheel

    # The re-dispatch after the faulted shard: the 3.12 cell is published with these inputs and is
    # left out; the 3.11 cell (stale: its published record is 0.1.0's) is built and published.
    third, wall3 = _workflow(repo, index, "--python", "3.11,3.12")
    assert third.returncode == 0, "the re-dispatch passes"
    ran = [name for name, line in _verdicts(third.stdout).items() if " skipped " not in line]
    assert all(CELL_312 not in name for name in ran) and any(CELL_311 in name and "link" in name for name in ran), ran
    names = sorted(p.name for p in (index / "files").glob("*.whl"))
    records = [json.loads((index / "files" / f"{n}.build.json").read_text()) for n in names if "0.1.1" in n]
    assert sorted(r["cell"]["python"] for r in records) == ["3.11", "3.12"], names
    assert _pip_install(index, tmp_path, "cuw-example", "3.11") == "0.1.1+cu130"
    print(
        f"farm: wall times: first run {wall1:.0f} s (5 matrix jobs), nothing to build {wall_idle:.0f} s, second run "
        f"{wall2:.0f} s (10 matrix jobs, one faulted), re-dispatch {wall3:.0f} s (the faulted cell only)"
    )


def _watch_creates(engine: str) -> subprocess.Popen:
    """The engine's container-create events from now on (its own log keeps only the last few hundred)."""
    return subprocess.Popen(
        [
            engine,
            "events",
            "--filter",
            "type=container",
            "--filter",
            "event=create",
            "--format",
            "{{.ID}} {{.Actor.Attributes.name}} {{.Actor.Attributes.image}}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def _created(watch: subprocess.Popen) -> list[tuple[str, ...]]:
    watch.terminate()
    out, _ = watch.communicate(timeout=60)
    return [tuple(line.split(" ", 2)) for line in out.splitlines() if line.strip()]


def test_the_workflow_in_docker_mode_runs_each_job_in_a_container_of_its_own(tmp_path):
    """``cuw workflow --engine docker``: plan and publish in the runner image, each shard and the link
    in the stand-in (pinned by digest through the local registry), seven containers for seven jobs;
    the wheel is at the stand-in's floor and installs from the published index in a clean stand-in."""
    engine = need("docker", "registry", "nodejs")
    repo = _copy_repo(tmp_path / "repo")
    index = tmp_path / "index"
    watch = _watch_creates(engine.path)
    try:
        run, wall = _workflow(repo, index, "--python", "3.11", "--engine", "docker")
    finally:
        created = [c for c in _created(watch) if c[1].startswith("act-")]
    assert run.returncode == 0, "the docker-mode run must pass end to end"
    where = re.search(r"docker mode: plan and publish in (\S+), linux jobs in (\S+) \((\S+)\)", run.stderr)
    assert where, run.stderr[-3000:]
    runner, pinned, standin = where.groups()
    assert re.fullmatch(r"127\.0\.0\.1:\d+/cuw-standin-x86_64@sha256:[0-9a-f]{64}", pinned)

    # One container per job, each of the image its job names; nothing shared between them.
    verdicts = _verdicts(run.stdout)
    assert len(verdicts) == 7 and all(" success " in v for v in verdicts.values()), run.stdout[-3000:]
    for name, line in verdicts.items():
        expected = runner if name in ("build/plan", "build/publish") else pinned
        assert f"[in {expected}]" in line, line
    assert len(created) == 7 and len({c[0] for c in created}) == 7, created
    assert sorted(c[2] for c in created) == sorted([runner] * 2 + [pinned] * 5), created

    # Built in the stand-in: its floor, its glibc; the record names the pinned image.
    [wheel] = sorted((index / "files").glob("*.whl"))
    assert wheel.name.endswith("manylinux_2_31_x86_64.whl"), wheel.name
    record = json.loads((index / "files" / f"{wheel.name}.build.json").read_text())
    assert record["link"]["misses"] == 0 and record["verify"]["ok"] is True and len(record["shards"]) == 4
    assert record["builder"]["image"] == pinned and record["builder"]["glibc"] == "2.31"

    # The published wheel installs from the index, and imports, in a clean container of the stand-in.
    script = (
        "/opt/python/cp311-cp311/bin/python -m pip install -q --no-cache-dir --index-url file:///index/cu130 cuw-example && "
        "cd / && /opt/python/cp311-cp311/bin/python -c 'import json, cuw_example as m; print(json.dumps(m.tu_values()))'"
    )
    index_ro = f"{index}:/index:ro"
    proc = run_in_container(engine, standin, "-e", "PIP_CONFIG_FILE=/dev/null", "-v", index_ro, "--", "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from conftest import expected_tu_values

    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected_tu_values()
    print(f"farm: docker mode: {wall:.0f} s wall (plan, 4 shards, link, publish, each in its own container)")


def _serve(index: Path) -> tuple[subprocess.Popen, str]:
    """The index folder served over HTTP on 127.0.0.1 (``python -m http.server``): the server and its URL."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(index)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = server.stdout.readline() if server.stdout else ""  # "Serving HTTP on 127.0.0.1 port 43517 (http://...)"
    return server, f"http://127.0.0.1:{line.split(' port ')[1].split()[0]}"


def test_a_fixed_recipe_rebuilds_its_one_cell_as_build_1_which_pip_and_uv_install(tmp_path):
    """Publish the cell; fix the recipe's patch.py (the same upstream version, other inputs): the next
    run plans that cell alone, its link stamps build 1 and publish puts it beside build 0; pip and uv,
    from the index over HTTP, install build 1. A third run builds nothing."""
    need("act")
    uv = need("uv")
    repo = _copy_repo(tmp_path / "repo")
    index = tmp_path / "index"

    first, wall1 = _workflow(repo, index, "--python", "3.11")
    assert first.returncode == 0, "the first run must pass end to end"
    [build0] = sorted(p.name for p in (index / "files").glob("*.whl"))

    patch = repo / "recipes/example/patch.py"
    patch.write_text(patch.read_text() + "\n# a fix of the recipe: the same upstream version, another wheel\n")
    _commit(repo, "example: a fix of its patch")
    second, wall2 = _workflow(repo, index, "--python", "3.11")
    assert second.returncode == 0, "the rebuild passes"
    assert "0 cell(s) up to date, 1 stale, 0 missing" in second.stdout + second.stderr, second.stdout[-3000:]
    names = sorted(p.name for p in (index / "files").glob("*.whl"))
    build1 = build0.replace("+cu130-", "+cu130-1-")
    assert names == sorted([build0, build1]), names
    record = json.loads((index / "files" / f"{build1}.build.json").read_text())
    assert record["supersedes"] == {"wheel": build0, "changed": "patch"} and record["link"]["misses"] == 0

    server, url = _serve(index)
    try:
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir"]
        assert installed_build(pip, url, tmp_path / "pip") == "1"
        uv_pip = [uv, "pip", "install", "--no-cache", "--python", str(venv / "bin" / "python")]
        assert installed_build(uv_pip, url, tmp_path / "uv") == "1"
    finally:
        server.terminate()
        server.wait(timeout=30)

    marker = (index / "cuw-index.json").read_bytes()
    third, wall3 = _workflow(repo, index, "--python", "3.11")
    assert third.returncode == 0
    ran = [name for name, line in _verdicts(third.stdout).items() if " skipped " not in line]
    assert ran == ["build/plan"], third.stdout[-3000:]
    assert (index / "cuw-index.json").read_bytes() == marker, "nothing new published"
    print(f"farm: wall times: first run {wall1:.0f} s, the rebuild {wall2:.0f} s, nothing to build {wall3:.0f} s")
