"""Incremental farming: the plan leaves out cells the published index holds with today's inputs.

No build here: build records are written as the link job's ``cuw record`` writes them (the same
``cell_inputs``), into a real folder index made by ``publish``, read from the folder and over a
real HTTP server.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO
from wheel_maker import make_wheel
from cuw.base.errors import CuwError, InputError
from cuw.ci import matrix
from cuw.ci.published import cell_status, read_records
from cuw.config.cell import Cell
from cuw.config.inputs import cell_inputs, inputs_digest
from cuw.config.policy import load_policy
from cuw.config.recipe import load_recipe
from cuw.wheel.publish import RECORD_SUFFIX, publish

CELL = Cell("example", "linux", "3.11", "13.0", None)
WHEEL = "cuw_example-0.1.0+cu130-py3-none-manylinux_2_31_x86_64.whl"


def _recipes(tmp_path: Path) -> Path:
    dest = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _published(recipes: Path, index: Path, payload: bytes = b"one", image: str = "", name: str = WHEEL) -> Path:
    """A wheel of CELL with the record `cuw record` would write for it, published into ``index``."""
    incoming = index.parent / f"incoming-{len(list(index.parent.glob('incoming-*')))}"
    inputs = cell_inputs(load_recipe("example", recipes), load_policy(recipes), CELL, image)
    make_wheel(incoming, name, payload, cell=CELL.to_dict(), inputs=inputs, inputs_digest=inputs_digest(inputs))
    return incoming


def _status(recipes: Path, location: str, image: str = ""):
    return cell_status([(load_recipe("example", recipes), CELL, image)], load_policy(recipes), read_records(location))


def test_the_inputs_follow_what_the_wheel_is_a_function_of(tmp_path):
    recipes = _recipes(tmp_path)
    recipe, policy = load_recipe("example", recipes), load_policy(recipes)
    base = inputs_digest(cell_inputs(recipe, policy, CELL, ""))
    assert base == inputs_digest(cell_inputs(recipe, policy, CELL, "")), "deterministic"
    assert base != inputs_digest(cell_inputs(recipe, policy, CELL, "registry/img@sha256:" + "a" * 64)), "the image"
    assert base != inputs_digest(cell_inputs(recipe, policy, replace(CELL, cuda="12.8"), "")), "the cell"
    # A py3-none wheel is the same whatever interpreter built it; a per-interpreter one is not.
    assert base == inputs_digest(cell_inputs(recipe, policy, replace(CELL, python="3.12"), "")), "py3: any Python"
    torch_recipe, torch_cell = load_recipe("example_torch", recipes), Cell("example_torch", "linux", "3.11", "13.0", "2.14")
    assert inputs_digest(cell_inputs(torch_recipe, policy, torch_cell, "")) != inputs_digest(
        cell_inputs(torch_recipe, policy, replace(torch_cell, python="3.12"), "")
    ), "per-interpreter: its Python"
    assert base != inputs_digest(cell_inputs(replace(recipe, archs={"13.0": ["8.0"]}), policy, CELL, "")), "the archs"
    kernel = next((recipes / "example" / "package").rglob("*.cu"))
    kernel.write_text(kernel.read_text() + "\n// one more line\n")
    assert base != inputs_digest(cell_inputs(load_recipe("example", recipes), policy, CELL, "")), "a source file"
    (recipes / "example" / "__pycache__").mkdir(exist_ok=True)
    edited = inputs_digest(cell_inputs(load_recipe("example", recipes), policy, CELL, ""))
    (recipes / "example" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert edited == inputs_digest(cell_inputs(load_recipe("example", recipes), policy, CELL, "")), "not __pycache__"


def test_a_cell_is_current_stale_or_missing_against_the_folder_index(tmp_path):
    recipes = _recipes(tmp_path)
    index = tmp_path / "index"
    index.mkdir()
    assert _status(recipes, str(index)).missing == [CELL.id], "an empty folder: nothing published"
    assert publish(_published(recipes, index), index).published == [WHEEL]
    status = _status(recipes, str(index))
    assert status.current == [CELL.id] and not status.stale and not status.missing
    assert status.to_build("missing") == status.to_build("stale") == set() and status.to_build("all") == {CELL.id}
    # A comment in recipe.yml changes no byte of the wheel: still current (tests/test_staleness.py flips the rest).
    with open(recipes / "example" / "recipe.yml", "a") as fh:
        fh.write("# a comment is no input\n")
    assert _status(recipes, str(index)).current == [CELL.id]
    # patch.py changes: the published wheel is stale, and the record says which input changed.
    with open(recipes / "example" / "patch.py", "a") as fh:
        fh.write("# patch.py is an input: every byte\n")
    status = _status(recipes, str(index))
    assert status.stale == {CELL.id: f"{WHEEL}: patch changed"}
    assert status.to_build("missing") == set() and status.to_build("stale") == {CELL.id}
    # Another image: stale for the image, naming where it was built and where the plan builds.
    image = "r/i@sha256:" + "b" * 64
    assert _status(recipes, str(index), image=image).stale[CELL.id] == (
        f"{WHEEL}: image, patch changed (built on the runner itself; the plan builds in {image})"
    )


def test_a_rebuild_of_the_same_inputs_publishes_as_a_no_op_and_other_inputs_are_refused(tmp_path):
    recipes = _recipes(tmp_path)
    index = tmp_path / "index"
    publish(_published(recipes, index, b"one"), index)
    again = publish(_published(recipes, index, b"rebuilt: other bytes"), index)  # not byte-reproducible
    assert again.ok and again.already == [WHEEL] and again.same_inputs == [WHEEL] and not again.refused
    with zipfile.ZipFile(index / "files" / WHEEL) as zf:
        assert zf.read("cuw_example/payload.bin") == b"one", "the published bytes stand"
    other = publish(_published(recipes, index, b"three", image="r/i@sha256:" + "c" * 64), index)
    assert WHEEL in other.refused and "never replaced" in other.refused[WHEEL]


def test_the_index_is_read_the_same_over_http_and_an_unreadable_one_is_an_error(tmp_path):
    recipes = _recipes(tmp_path)
    index = tmp_path / "index"
    publish(_published(recipes, index), index)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _status(recipes, url).current == [CELL.id]
        assert read_records(url) == read_records(str(index))
        (index / "files" / f"{WHEEL}{RECORD_SUFFIX}").write_text("{not json")
        with pytest.raises(InputError, match=r"is not JSON; restore the index"):
            read_records(url)
        with pytest.raises(CuwError, match=r"cannot read .*/nowhere/cuw-index.json .*an index that cannot be read is an error"):
            read_records(f"{url}/nowhere")
    finally:
        server.shutdown()
    with pytest.raises(InputError, match="no such index folder"):
        read_records(str(tmp_path / "missing"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    with pytest.raises(CuwError, match="not an index"):
        read_records(str(tmp_path / "junk"))


def test_the_plan_leaves_out_published_cells_and_keeps_its_chunk_ids(tmp_path):
    recipes = _recipes(tmp_path)
    index = tmp_path / "index"
    publish(_published(recipes, index), index)
    args = [
        "--package",
        "example",
        "--platform",
        "linux",
        "--cuda",
        "13.0",
        "--python",
        "3.11",
        "--on-host",
        "--recipes",
        str(recipes),
    ]

    def plan(*extra: str) -> tuple[dict, str]:
        out = tmp_path / "plan.json"
        proc = subprocess.run(
            [sys.executable, "-m", "cuw", "matrix", *args, "--output", str(out), *extra], cwd=REPO, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(out.read_text()), proc.stderr

    full, _ = plan()
    assert full["chunks"][0]["jobs"] == 5
    nothing, said = plan("--published", str(index))
    [chunk] = nothing["chunks"]
    assert chunk["id"] == full["chunks"][0]["id"] and chunk["jobs"] == 0 and nothing["total_jobs"] == 0
    assert f"published at {index}: 1 cell(s) up to date, 0 stale, 0 missing; --rebuild stale: 0 cell(s) planned" in said
    everything, _ = plan("--published", str(index), "--rebuild", "all")
    assert everything["chunks"][0] == full["chunks"][0]
    # The workflow's outputs for the empty chunk: nothing after the plan runs.
    (tmp_path / "chunk.json").write_text(json.dumps(matrix.chunk(nothing, chunk["id"])))
    outputs = subprocess.run(
        [sys.executable, str(REPO / ".github/scripts/chunk_outputs.py"), str(tmp_path / "chunk.json")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "has_compile=false" in outputs and "has_link=false" in outputs
    proc = subprocess.run(
        [sys.executable, "-m", "cuw", "matrix", *args, "--rebuild", "stale"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "give --published too" in proc.stderr


# -- one deadline for one read of a served index ------------------------------------------------


class _Slow(http.server.SimpleHTTPRequestHandler):
    """Serves the index folder, answering each build record only after ``delay`` seconds."""

    delay = 0.0

    def do_GET(self) -> None:
        if self.path.startswith("/files/"):
            time.sleep(self.delay)
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a reader that gave up at its deadline: the late answer's broken pipe is expected


def _many(recipes: Path, index: Path, count: int) -> None:
    """``count`` wheels of CELL (one version each) with their records, published in one go."""
    incoming = index.parent / "incoming-many"
    inputs = cell_inputs(load_recipe("example", recipes), load_policy(recipes), CELL, "")
    for i in range(count):
        name = f"cuw_example-0.{i}.0+cu130-py3-none-manylinux_2_31_x86_64.whl"
        make_wheel(incoming, name, b"x", cell=CELL.to_dict(), inputs=inputs, inputs_digest=inputs_digest(inputs))
    assert len(publish(incoming, index).published) == count


def _slow_server(index: Path, delay: float) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(type("Slow", (_Slow,), {"delay": delay}), directory=str(index))
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_served_index_is_read_a_few_records_at_a_time(tmp_path):
    recipes, index = _recipes(tmp_path), tmp_path / "index"
    _many(recipes, index, 24)
    server, url = _slow_server(index, 0.4)
    try:
        started = time.monotonic()
        assert len(read_records(url)) == 24
        took = time.monotonic() - started
    finally:
        server.shutdown()
    # One at a time it took 24 x 0.4 = 9.6 s; 8 at a time, 3 rounds.
    assert took < 4.5, took


def test_a_file_whose_wait_the_deadline_cut_short_is_late_not_a_server_timeout(tmp_path):
    """A read whose socket wait was cut to what was left of the deadline, and ran out, is the deadline's
    error (so a loaded machine cannot turn the deadline's one line into "timed out")."""
    from cuw.base import http as cuw_http

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "late.json").write_text("{}")
    server, url = _slow_server(tmp_path, 2.0)
    try:
        with pytest.raises(cuw_http._Late):
            cuw_http._read(f"{url}/files/late.json", 1 << 10, cuw_http.Deadline(0.3))
        with pytest.raises(CuwError, match=r"no whole answer in 0\.3 s, the deadline of one read of the index: 0 of 1"):
            cuw_http.fetch_all([f"{url}/files/late.json"], "--published", deadline=cuw_http.Deadline(0.3))
    finally:
        server.shutdown()


def test_a_slow_index_ends_the_plan_at_one_deadline_for_the_whole_read(tmp_path, monkeypatch, capsys):
    from cuw.base import http as cuw_http
    from cuw.cli.main import main

    recipes, index = _recipes(tmp_path), tmp_path / "index"
    _many(recipes, index, 40)
    monkeypatch.setattr(cuw_http, "DEADLINE_S", 2.0)
    server, url = _slow_server(index, 1.5)  # each record in time for a per-file limit; 40 of them are not
    try:
        started = time.monotonic()
        code = main(["matrix", "--package", "example", "--on-host", "--recipes", str(recipes), "--published", url])
        took = time.monotonic() - started
    finally:
        server.shutdown()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert re.fullmatch(
        rf"cuw: error: --published: cannot read {url}/files/cuw_example-0\.\d+\.0%2Bcu130-\S+\.whl\.build\.json "
        r"\(no whole answer in 2 s, the deadline of one read of the index: \d+ of 40 file\(s\) read\); the server answers "
        r"too slowly: retry when it is faster, or give the index's folder instead of its URL",
        err[0],
    ), err[0]
    assert 2.0 <= took < 4.5, took  # before: 60 s per file, so 40 x 1.5 s = 60 s, and no error
