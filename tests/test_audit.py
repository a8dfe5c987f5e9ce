"""``cuw audit`` on a real published index: the suite's one built example wheel, its build record
written by ``cuw record``, published; then a planted gap, a planted stale wheel and a wheel
without the policy's SASS, each found (from the folder, over HTTP, through the CLI)."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from pathlib import Path

import pytest

from conftest import run_cuw, run_settings
from cuw.ci import audit
from cuw.config.policy import load_policy
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import find_toolkit
from cuw.wheel.publish import publish


@pytest.fixture
def published(example_cell, tmp_path) -> tuple[Path, Path]:
    """(recipes, index): the grid narrowed to the built cell's lane, Python and CUDA line, and an
    index holding its wheel with the record the link job writes."""
    assert example_cell.outcomes == (True,) * example_cell.count
    recipes = tmp_path / "recipes"
    shutil.copytree(example_cell.recipes, recipes, symlinks=True)
    policy = recipes / "defaults.yml"
    text = re.sub(r"(?m)^  platforms: .*$", "  platforms: [linux]", policy.read_text())
    text = re.sub(r'(?m)^  python: \["3.10", .*$', '  python: ["3.11"]', text, count=1)
    text = re.sub(r'(?m)^  cuda: \["12.8", "13.0"\]$', '  cuda: ["13.0"]', text, count=1)
    policy.write_text(text)
    dist = tmp_path / "dist"
    dist.mkdir()
    for made in example_cell.paths.dist.glob(example_cell.wheel.name + "*"):  # the wheel, its link and verify reports
        shutil.copy2(made, dist)
    proc = run_cuw(
        "record", "example", "--dist", str(dist), "--artifacts", str(example_cell.paths.artifacts), "--recipes", str(recipes)
    )
    assert proc.returncode == 0, proc.stderr
    index = tmp_path / "index"
    assert publish(dist, index).published == [example_cell.wheel.name]
    return recipes, index


def _audit(recipes: Path, location: str) -> list[audit.Finding]:
    return audit.audit(
        location, [load_recipe("example", recipes)], load_policy(recipes), find_toolkit(homes=run_settings().homes), {}
    )


def test_a_fresh_index_has_nothing_to_report_and_each_planted_fault_is_found(published):
    recipes, index = published
    assert _audit(recipes, str(index)) == []
    # A gap: the grid gains a CUDA line nothing was built for.
    policy = recipes / "defaults.yml"
    policy.write_text(policy.read_text().replace('  cuda: ["13.0"]', '  cuda: ["12.8", "13.0"]', 1))
    findings = _audit(recipes, str(index))
    assert [(f.kind, f.subject, f.detail) for f in findings] == [
        ("gap", "example-linux-py3.11-cu12.8-notorch", "no published wheel")
    ]
    # Stale, and without the policy's SASS: the recipe now promises sm_80 as well.
    recipe = recipes / "example" / "recipe.yml"
    recipe.write_text(recipe.read_text().replace('archs: {"13.0": ["9.0"]}', 'archs: {"13.0": ["8.0", "9.0"]}'))
    findings = _audit(recipes, str(index))
    kinds = {f.kind: f for f in findings}
    assert set(kinds) == {"gap", "stale", "wheel"}, findings
    assert kinds["stale"].subject == "example-linux-py3.11-cu13.0-notorch" and "archs changed" in kinds["stale"].detail
    assert kinds["wheel"].detail.startswith("arch: no SASS for sm_80"), kinds["wheel"]


def test_the_cli_reads_the_index_over_http_and_exits_by_its_findings(published, tmp_path):
    recipes, index = published
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        clean = run_cuw("audit", "--index", url, "--package", "example", "--on-host", "--recipes", str(recipes))
        assert clean.returncode == 0, clean.stderr
        assert clean.stdout.startswith(f"### audit of {url}: 0 gap(s), 0 stale, 0 wheel finding(s)")
        with open(recipes / "example" / "recipe.yml", "a") as fh:
            fh.write("# edited after publication\n")
        out = tmp_path / "audit.html"
        stale = run_cuw(
            "audit",
            "--index",
            url,
            "--package",
            "example",
            "--on-host",
            "--recipes",
            str(recipes),
            "--format",
            "html",
            "--output",
            str(out),
        )
        assert stale.returncode == 1, stale.stderr
        assert "<tr class='stale'><td>stale</td><td>example-linux-py3.11-cu13.0-notorch</td>" in out.read_text()
    finally:
        server.shutdown()
    gone = run_cuw("audit", "--index", f"{url}/nothing-here", "--package", "example", "--recipes", str(recipes))
    assert gone.returncode == 2 and gone.stderr.strip().splitlines()[-1].startswith("cuw: error: --index: cannot read")
