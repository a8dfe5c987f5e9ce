"""`cuw grid --check` against real simple indexes served over HTTP on localhost."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import serving

PAGE = "<!DOCTYPE html><html><body>\n{links}\n</body></html>\n"


def _names(version: str, pythons: list[str]) -> list[str]:
    tags = [f"cp{p.replace('.', '')}" for p in pythons]
    return [f"torch-{version}-{t}-{t}-manylinux_2_28_x86_64.whl" for t in tags] + [
        f"torch-{version}-{tags[-1]}-{tags[-1]}t-manylinux_2_28_x86_64.whl"  # free-threaded: not a grid Python
    ]


@pytest.fixture
def index_server(tmp_path):
    root = tmp_path / "www"
    html_names = _names("2.13.0", ["3.10", "3.11", "3.12", "3.13"]) + _names("2.14.1", ["3.10", "3.11", "3.12", "3.13"])
    html_names += _names("2.15.0", ["3.11", "3.12", "3.13"]) + _names("2.16.0rc1", ["3.12"]) + _names("1.13.1", ["3.10"])
    page = root / "cu130" / "torch"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(
        PAGE.format(links="\n".join(f'<a href="../../f/{n}">{n}</a><br/>' for n in html_names))
    )
    json_page = root / "cu128" / "torch"
    json_page.mkdir(parents=True)
    files = [{"filename": n, "url": f"../../f/{n}", "hashes": {}} for n in _names("2.14.0", ["3.10", "3.11", "3.12", "3.13"])]
    json_page.joinpath("index.html").write_text(json.dumps({"meta": {"api-version": "1.0"}, "name": "torch", "files": files}))
    with serving(root) as url:
        yield url


def _check(recipes: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cuw", "grid", "--check", "--recipes", str(recipes), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_torch_line_the_grid_lacks_is_listed_with_the_edit(recipes_dir, index_server):
    indexes = ("--index", f"13.0={index_server}/cu130", "--index", f"12.8={index_server}/cu128")
    proc = _check(recipes_dir, *indexes)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISSING torch 2.15.0 (line 2.15) for CUDA 13.0, Python 3.11, 3.12, 3.13 (a torch line the grid lacks)" in proc.stdout
    assert "2.16" not in proc.stdout and "1.13" not in proc.stdout  # a pre-release and history are not gaps
    assert "CUDA 12.8 publishes: torch 2.14.0 (Python 3.10, 3.11, 3.12, 3.13)" in proc.stdout  # the JSON index
    fix = proc.stdout.split("make grid.torch read:\n", 1)[1]
    assert '"2.15": {cuda: ["13.0"], python: ["3.11", "3.12", "3.13"]}' in fix

    # The printed edit, applied, makes the check pass.
    policy = recipes_dir / "defaults.yml"
    text = policy.read_text()
    block = re.search(r"(?m)^  torch:\n(?:    .*\n)+", text)
    assert block is not None
    policy.write_text(text.replace(block.group(0), fix.rstrip("\n") + "\n"))
    again = _check(recipes_dir, *indexes)
    assert again.returncode == 0 and "the grid knows every torch release" in again.stdout, again.stdout + again.stderr


def test_an_unreachable_index_is_named_and_does_not_hide_the_others(recipes_dir, index_server):
    proc = _check(recipes_dir, "--index", f"13.0={index_server}/cu130", "--index", "12.8=http://127.0.0.1:9/nowhere")
    assert proc.returncode == 1 and "could not ask CUDA 12.8: torch index http://127.0.0.1:9/nowhere/torch/" in proc.stdout
    only_bad = _check(recipes_dir, "--index", "13.0=http://127.0.0.1:9/x", "--index", "12.8=http://127.0.0.1:9/y")
    assert only_bad.returncode == 2 and "Traceback" not in only_bad.stderr


def test_a_bad_index_option_is_one_line(recipes_dir):
    proc = _check(recipes_dir, "--index", "9.9=http://x")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("cuw: error: --index '9.9=http://x'")


def test_a_lane_hole_is_found_and_the_printed_edit_lists_it(recipes_dir, tmp_path):
    """The index serves Windows wheels of 2.14 but none of 2.13: the grid must list the hole (its
    Windows cells of 2.13 would find no torch to install), and the edit it prints says so."""
    root = tmp_path / "www" / "cu130" / "torch"
    root.mkdir(parents=True)
    names = _names("2.13.0", ["3.10", "3.11", "3.12", "3.13"]) + _names("2.14.1", ["3.10", "3.11", "3.12", "3.13"])
    names += [n.replace("manylinux_2_28_x86_64", "win_amd64") for n in _names("2.14.1", ["3.10", "3.11", "3.12", "3.13"])]
    root.joinpath("index.html").write_text(PAGE.format(links="\n".join(f'<a href="../../f/{n}">{n}</a><br/>' for n in names)))
    with serving(tmp_path / "www") as url:
        proc = _check(recipes_dir, "--index", f"13.0={url}/cu130")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "HOLE torch 2.13 ships no windows wheel for CUDA 13.0" in proc.stdout
        assert "HOLE torch 2.14" not in proc.stdout and "linux_aarch64" not in proc.stdout  # served, or served for no line
        fix = proc.stdout.split("make grid.torch read:\n", 1)[1]
        assert 'holes: {windows: ["13.0"]}' in fix and 'patch: "2.14.1"' in fix
        policy = recipes_dir / "defaults.yml"
        text = policy.read_text()
        block = re.search(r"(?m)^  torch:\n(?:    .*\n)+", text)
        assert block is not None
        policy.write_text(text.replace(block.group(0), fix.rstrip("\n") + "\n"))
        again = _check(recipes_dir, "--index", f"13.0={url}/cu130")
        assert again.returncode == 0, again.stdout + again.stderr
