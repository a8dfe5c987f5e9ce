"""``cuw audit`` on a real published index: the suite's one built example wheel, its build record
written by ``cuw record``, published; then a planted gap, a planted stale wheel and a wheel
without the policy's SASS, each found (from the folder, over HTTP, through the CLI); and the
published bytes themselves: a wheel replaced by another consistent one, a lost file, a release
asset gone (404), served bigger than listed (with and without its length said), and one too slow
for the audit's deadline, each a finding with exit 1 and the other findings kept."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from conftest import recorded_example, run_cuw, run_settings, serving
from cuw.ci import audit
from cuw.cli.main import main
from cuw.config.policy import load_policy
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import find_toolkit
from cuw.wheel.index import MARKER
from cuw.wheel.publish import AssetStore, publish
from wheel_maker import make_wheel


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
    dist = recorded_example(example_cell, tmp_path / "dist", recipes).parent
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
    with serving(index) as url:
        clean = run_cuw("audit", "--index", url, "--package", "example", "--on-host", "--recipes", str(recipes))
        assert clean.returncode == 0, clean.stderr
        assert clean.stdout.startswith(f"### audit of {url}: 0 gap(s), 0 stale, 0 wheel finding(s)")
        with open(recipes / "example" / "patch.py", "a") as fh:  # an input of the wheel's bytes
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
    gone = run_cuw("audit", "--index", f"{url}/nothing-here", "--package", "example", "--recipes", str(recipes))
    assert gone.returncode == 2 and gone.stderr.strip().splitlines()[-1].startswith("cuw: error: --index: cannot read")


def _plant_gap(recipes: Path) -> None:
    """The grid gains a CUDA line nothing was built for: one gap, the finding every test below keeps."""
    policy = recipes / "defaults.yml"
    policy.write_text(policy.read_text().replace('  cuda: ["13.0"]', '  cuda: ["12.8", "13.0"]', 1))


GAP = "| gap | example-linux-py3.11-cu12.8-notorch | no published wheel |"


def _cli_audit(capsys, recipes: Path, location: str, *more: str) -> tuple[int, str, str]:
    """``cuw audit`` through the command line in this process: exit code, report, stderr."""
    capsys.readouterr()
    code = main(["audit", "--index", location, "--package", "example", "--on-host", "--recipes", str(recipes), *more])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_replaced_or_lost_wheel_in_the_folder_is_a_finding_and_the_other_findings_stay(published, tmp_path, capsys):
    recipes, index = published
    [wheel] = sorted((index / "files").glob("*.whl"))
    _plant_gap(recipes)
    code, report, err = _cli_audit(capsys, recipes, str(index))
    assert code == 1 and GAP in report and "0 wheel finding(s)" in report, report + err
    # Another wheel, consistent in itself (RECORD, METADATA), under the published name.
    other = make_wheel(tmp_path / "other", wheel.name, b"not the published bytes", record=False)
    shutil.copy2(other, wheel)
    code, report, err = _cli_audit(capsys, recipes, str(index))
    assert code == 1, err
    assert report.startswith(f"### audit of {index}: 1 gap(s), 0 stale, 1 wheel finding(s)") and GAP in report, report
    assert re.search(rf"\| wheel \| {re.escape(wheel.name)} \| other bytes: .* has sha256 [0-9a-f]{{64}}, the marker and", report)
    wheel.unlink()
    code, report, err = _cli_audit(capsys, recipes, str(index))
    assert code == 1 and GAP in report and f"missing: {wheel} is not there" in report, report + err


class _Assets(http.server.SimpleHTTPRequestHandler):
    """Release assets served from a folder: as a static server does, or without saying their length
    (the download ends where the bytes do), or slowly (``delay`` seconds before the bytes)."""

    say_length = True
    delay = 0.0

    def send_header(self, keyword: str, value: str) -> None:
        if self.say_length or keyword.lower() != "content-length":
            super().send_header(keyword, value)

    def copyfile(self, source, outputfile) -> None:
        time.sleep(self.delay)
        super().copyfile(source, outputfile)

    def log_message(self, *_args) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a download the audit cut short (over its listed size, past its deadline): no traceback


@pytest.fixture
def on_assets(published, tmp_path):
    """(recipes, site URL, the wheel's asset file, handler): the built wheel published with its
    pages on one server and the wheel a release asset on another, as on GitHub."""
    recipes, index = published
    dist = tmp_path / "dist"
    assets = tmp_path / "assets"
    handler = type("Assets", (_Assets,), {})
    servers = []
    for folder, kind in ((assets, handler), (tmp_path / "site", http.server.SimpleHTTPRequestHandler)):
        folder.mkdir(exist_ok=True)
        server = _Server(("127.0.0.1", 0), functools.partial(kind, directory=str(folder)))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
    a_url, s_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    store = AssetStore(a_url + "/{recipe}/{wheel}", tmp_path / "upload")
    assert publish(dist, tmp_path / "site", store=store).published
    [wheel] = sorted((tmp_path / "upload").glob("*.whl"))
    (assets / "example").mkdir()
    asset = assets / "example" / wheel.name
    shutil.copy2(wheel, asset)
    assert '"remote"' in (tmp_path / "site" / MARKER).read_text()
    yield recipes, s_url, asset, handler
    for server in servers:
        server.shutdown()


def test_a_lost_an_oversized_and_a_replaced_release_asset_are_findings_and_the_other_findings_stay(on_assets, capsys):
    recipes, site, asset, handler = on_assets
    code, report, err = _cli_audit(capsys, recipes, site)
    assert code == 0 and "Nothing found." in report, report + err
    _plant_gap(recipes)
    published = asset.read_bytes()
    url = re.escape(f"/example/{asset.name}".replace("+", "%2B"))
    size = len(published)
    bigger, other = published + b"x" * 4096, published[:-1] + bytes([published[-1] ^ 1])
    for name, plant, finding in (
        ("lost", lambda: asset.unlink(), rf"missing: http://127\.0\.0\.1:\d+{url} answers HTTP 404"),
        ("bigger", lambda: asset.write_bytes(bigger), rf"larger than listed: .*{url} serves \d+ bytes, the marker lists {size}"),
        ("length unsaid", lambda: setattr(handler, "say_length", False), rf"larger than listed: .*{url} serves over {size}"),
        ("replaced", lambda: asset.write_bytes(other), r"other bytes: .* has sha256"),
    ):  # fmt: skip
        plant()
        code, report, err = _cli_audit(capsys, recipes, site)
        assert code == 1, (name, err)
        assert "1 gap(s), 0 stale, 1 wheel finding(s)" in report and GAP in report, (name, report)
        assert re.search(rf"\| wheel \| {re.escape(asset.name)} \| {finding}", report), (name, report)
        assert "cuw: error" not in err, (name, err)
    # Too slow for the audit's deadline: a finding, and the report keeps the rest.
    asset.write_bytes(published)
    handler.say_length, handler.delay = True, 5.0
    started = time.monotonic()
    code, report, err = _cli_audit(capsys, recipes, site, "--deadline", "1")
    assert code == 1 and time.monotonic() - started < 4.5, err
    assert GAP in report and re.search(
        r"not checked: the audit's deadline \(1 s for every wheel's read\) passed while", report
    ), report
    code, _, err = _cli_audit(capsys, recipes, site, "--deadline", "0")
    assert code == 2 and "cuw: error: --deadline 0: give the seconds" in err
