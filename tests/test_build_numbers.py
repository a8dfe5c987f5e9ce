"""Rebuilds that publish: a wheel's build number (PEP 427's build tag), from the plan or the
published index, stamped by finish, kept apart by publish, listed by the index, picked by pip and uv.

The unit tests use small real wheels (tests/wheel_maker.py) and records as ``cuw record`` writes
them; the last test builds the example twice (a ``patch.py`` changed between) and publishes both.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Iterator

import pytest
from packaging.version import Version
from wheel.wheelfile import WheelFile

from conftest import REPO, installed_build, need, run_cuw, serving
from wheel_maker import make_wheel
from cuw.base.errors import CuwError, InputError
from cuw.ci.build_numbers import next_build
from cuw.cli.main import main
from cuw.config.cell import Cell
from cuw.config.inputs import cell_inputs, inputs_digest
from cuw.config.policy import load_policy
from cuw.config.recipe import load_recipe
from cuw.wheel.finish import FIRST_BUILD, BuildNumber, check_build, retag
from cuw.wheel.index import MARKER, PACKAGES
from cuw.wheel.publish import RECORD_SUFFIX, publish

CELL = Cell("example", "linux", "3.10", "13.0", None)
B0 = "cuw_example-0.1.0+cu130-py3-none-manylinux_2_31_x86_64.whl"
B1 = "cuw_example-0.1.0+cu130-1-py3-none-manylinux_2_31_x86_64.whl"
B2 = "cuw_example-0.1.0+cu130-2-py3-none-manylinux_2_31_x86_64.whl"


def _wheel_text(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/WHEEL")]
        return zf.read(name).decode()


# -- the number's text form ----------------------------------------------------------------------


def test_a_build_number_is_k_or_one_per_upstream_version():
    assert BuildNumber.parse("2").of(Version("9.9")) == 2, "K: whatever the version"
    plan = BuildNumber.parse("0.1.0=1, 0.2=3")
    assert plan.of(Version("0.1.0")) == 1 and plan.of(Version("0.2.0")) == 3, "versions compare as versions"
    assert plan.of(Version("0.3.0")) == 0, "a version the index does not publish is a first build"
    assert plan.of(Version("0.1.0+cu130")) == 1, "the local label is the cell's, not the version's"
    assert str(plan) == "0.1.0=1,0.2=3" and BuildNumber.parse(str(plan)) == plan
    assert str(FIRST_BUILD) == "0" and FIRST_BUILD.of(Version("1")) == 0
    for bad in ("", "-1", "x=1", "0.1.0=", "0.1.0=one", "0.1.0=1,0.1=2", "12345678901", "1.0=99999999999"):
        with pytest.raises(InputError, match="--build-number"):
            BuildNumber.parse(bad)


# -- finish stamps it ----------------------------------------------------------------------------


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    """The build backend's wheel, before finish: no label, no build tag."""
    return make_wheel(tmp_path / "raw", "cuw_example-0.1.0-py3-none-linux_x86_64.whl", b"kernels", record=False)


def test_finish_stamps_the_build_tag_and_wheel_build(raw, tmp_path):
    recipe = load_recipe("example", REPO / "recipes")
    stamped = retag(raw, CELL, recipe, tmp_path / "one", {}.get, None, BuildNumber.parse("0.0.9=4,0.1.0=2"))
    assert stamped.name == "cuw_example-0.1.0+cu130-2-py3-none-linux_x86_64.whl"
    text = _wheel_text(stamped)
    assert text.count("Build:") == 1 and "Build: 2\nTag: py3-none-linux_x86_64" in text
    with WheelFile(stamped) as wf:  # RECORD rebuilt: every file checks out
        for member in wf.infolist():
            wf.read(member)
    check_build(stamped, 2)
    with pytest.raises(CuwError, match="finish stamped build 3"):
        check_build(stamped, 3)

    other = retag(raw, CELL, recipe, tmp_path / "other", {}.get, None, BuildNumber.parse("0.2.0=5"))
    assert other.name == "cuw_example-0.1.0+cu130-py3-none-linux_x86_64.whl", "another version's number is not this one's"
    assert "Build:" not in _wheel_text(other)
    check_build(other, 0)

    again = retag(stamped, CELL, recipe, tmp_path / "again", {}.get, None, FIRST_BUILD)  # a tagged input is re-numbered
    assert again.name == other.name and "Build:" not in _wheel_text(again)
    lying = tmp_path / "lying" / stamped.name.replace("-2-", "-7-")
    lying.parent.mkdir()
    shutil.copy(stamped, lying)
    with pytest.raises(CuwError, match=r"finish stamped build 7, the wheel says \['2'\]"):
        check_build(lying, 7)


# -- the next number from the published records --------------------------------------------------


def _record(wheel: str, digest: str, python: str = "3.10", lane: str = "linux") -> dict:
    return {"wheel": wheel, "cell": {**CELL.to_dict(), "python": python, "lane": lane}, "inputs_digest": digest}


def test_the_next_number_counts_the_published_builds_of_the_cells_version():
    recipe = load_recipe("example", REPO / "recipes")
    nxt = lambda records, digest="today": str(next_build(records, recipe, CELL, digest))  # noqa: E731
    assert nxt([]) == "", "nothing published: a first build"
    assert nxt([_record(B0, "old")]) == "0.1.0=1", "other inputs: the next number"
    assert nxt([_record(B0, "today")]) == "", "today's inputs published: the same number (publish: already there)"
    assert nxt([_record(B0, "old"), _record(B1, "today")]) == "0.1.0=1"
    assert nxt([_record(B0, "today"), _record(B1, "newer")]) == "0.1.0=2", "a revert is a new build: pip serves the highest"
    older = "cuw_example-0.0.9+cu130-3-py3-none-manylinux_2_31_x86_64.whl"
    assert nxt([_record(older, "x"), _record(B0, "old")]) == "0.0.9=4,0.1.0=1", "each version its own count"
    assert nxt([_record(B0, "old", python="3.12")]) == "0.1.0=1", "a py3 wheel built with another Python is this cell's"
    assert nxt([_record(B0, "old", lane="linux_aarch64")]) == "", "another lane's wheel is not"
    assert nxt([_record(B0, "old")], None) == "0.1.0=1", "inputs unknown: a new number"


# -- publish: beside the builds before it, a taken number refused ---------------------------------


def _recipes(tmp_path: Path) -> Path:
    dest = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _arrived(recipes: Path, root: Path, name: str, payload: bytes, image: str = "") -> Path:
    """A finished wheel of CELL and the record `cuw record` writes for it (``image``: another input)."""
    incoming = root / f"incoming-{len(list(root.glob('incoming-*')))}"
    inputs = cell_inputs(load_recipe("example", recipes), load_policy(recipes), CELL, image)
    make_wheel(incoming, name, payload, cell=CELL.to_dict(), inputs=inputs, inputs_digest=inputs_digest(inputs))
    return incoming


def test_a_rebuild_publishes_beside_the_first_and_a_taken_number_is_refused(tmp_path):
    recipes, index = _recipes(tmp_path), tmp_path / "index"
    assert publish(_arrived(recipes, tmp_path, B0, b"zero"), index).published == [B0]
    image = "r/i@sha256:" + "1" * 64
    one = publish(_arrived(recipes, tmp_path, B1, b"one", image), index)
    assert one.published == [B1] and one.ok
    assert set(json.loads((index / MARKER).read_text())["files"]) == {B0, B1}, "the older build stays"
    record = json.loads((index / "files" / f"{B1}{RECORD_SUFFIX}").read_text())
    assert record["supersedes"] == {"wheel": B0, "changed": "image"}, "the record names what changed"
    page = (index / "cu130" / "cuw-example" / "index.html").read_text()
    assert page.index(B0) < page.index(B1), "builds listed in order"

    # Another build 1 (a concurrent rebuild of other inputs): refused, the number is taken.
    taken = publish(_arrived(recipes, tmp_path, B1, b"another one", "r/i@sha256:" + "2" * 64), index)
    why = taken.refused[B1]
    assert "never replaced" in why and "build 1 of its version and tags is taken" in why
    assert "gives the cell build 2" in why and "--build-number 2" in why and not taken.ok
    # The same inputs as the newest build, under another number: the published bytes stand.
    same = publish(_arrived(recipes, tmp_path, B2, b"two", image), index)
    assert same.ok and same.already == [B2] and same.stands_for == {B2: B1} and not same.published
    assert B2 not in json.loads((index / MARKER).read_text())["files"]
    # A build 0 of the old inputs again: already published (its own record names them).
    again = publish(_arrived(recipes, tmp_path, B0, b"zero, rebuilt"), index)
    assert again.ok and again.already == [B0] and again.same_inputs == [B0]

    manifest = json.loads((index / PACKAGES).read_text())["wheels"]
    assert [(w["filename"], w["build"]) for w in manifest] == [(B0, 0), (B1, 1)], "sorted by version, then build"


def test_the_index_verb_refuses_a_replacement_naming_the_next_build(tmp_path, capsys):
    make_wheel(tmp_path / "a", B0, b"zero", record=False)
    make_wheel(tmp_path / "b", B0, b"other", record=False)
    make_wheel(tmp_path / "b1", B1, b"one", record=False)
    assert main(["index", str(tmp_path / "a"), str(tmp_path / "site")]) == 0
    assert main(["index", str(tmp_path / "b1"), str(tmp_path / "site")]) == 0, "build 1 beside build 0"
    assert main(["index", str(tmp_path / "b"), str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "never replaced: build it again as build 2 of its version" in err and "--build-number 2)" in err, err


# -- the plan: a stale cell's link carries the number --------------------------------------------


def test_the_plan_gives_a_stale_cell_the_next_number_and_its_link_carries_it(tmp_path, capsys):
    recipes, index = _recipes(tmp_path), tmp_path / "index"
    publish(_arrived(recipes, tmp_path, B0, b"zero"), index)
    args = ["matrix", "--package", "example", "--platform", "linux", "--cuda", "13.0", "--on-host", "--recipes", str(recipes)]
    out = tmp_path / "plan.json"

    def links(*extra: str) -> list[dict]:
        assert main([*args, "--output", str(out), *extra]) == 0
        return [j for c in json.loads(out.read_text())["chunks"] for key in ("compile", "link") for j in c[key]["include"]]

    assert links("--published", str(index)) == [], "current: nothing planned"
    assert all(j["build_number"] == "" for j in links("--published", str(index), "--rebuild", "all")), (
        "a rebuild of today's inputs keeps the published number: publish calls it already there"
    )
    (recipes / "example" / "patch.py").write_text((recipes / "example" / "patch.py").read_text() + "\n# fixed\n")
    jobs = links("--published", str(index))
    assert {j["kind"] for j in jobs} == {"shard", "link"}
    assert {j["kind"]: j["build_number"] for j in jobs} == {"shard": "", "link": "0.1.0=1"}
    assert "build number: example-linux-py3.10-cu13.0-notorch: 0.1.0=1" in capsys.readouterr().err
    import yaml

    workflow = (REPO / ".github/workflows/build.yml").read_text()
    assert "BUILD_NUMBER: ${{ matrix.build_number }}" in workflow
    jobs = yaml.safe_load(workflow)["jobs"]  # the rungs' steps are written once (anchors): read them as GitHub does
    carry = [name for name, job in jobs.items() for s in job["steps"] if '--build-number "$BUILD_NUMBER"' in s.get("run", "")]
    assert carry == ["compile", "compile_2", "compile_3", "link"], "the link job and every rung's build job"


# -- the verbs' options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["link", "example", "--build-number", "one"], "--build-number 'one': give the build number K"),
        (["build", "example", "--build-number", "1", "--published", "x"], "both choose the wheel's build number"),
        (["build", "example", "--matrix", "--build-number", "1"], "built with the pip backend"),
        (["build", "example", "--published", "/nowhere/index"], "--published /nowhere/index: no such index folder"),
    ],
)
def test_a_bad_build_number_option_is_one_line_before_any_folder(tmp_path, argv, message):
    proc = run_cuw(*argv, "--work", str(tmp_path / "work"), "--dist", str(tmp_path / "dist"))
    assert proc.returncode == 2 and proc.stderr.startswith("cuw: error: ") and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "work").exists() and not (tmp_path / "dist").exists()


# -- the whole way: build, record, publish; change patch.py; again; pip and uv pick build 1 --------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """An index folder served over HTTP on 127.0.0.1 (conftest.serving): (the folder, its URL)."""
    index = tmp_path / "index"
    index.mkdir()
    with serving(index) as url:
        yield index, url


@pytest.mark.long
@pytest.mark.needs("nvcc", "cmake")
def test_a_changed_patch_is_published_as_build_1_beside_build_0_and_pip_and_uv_pick_it(recipes_dir, served, tmp_path):
    index, url = served
    uv = need("uv")
    folders = ["--recipes", str(recipes_dir), "--work", str(tmp_path / "work"), "--artifacts", str(tmp_path / "artifacts")]

    def build_record_publish(dist: Path, *build: str) -> str:
        made = run_cuw("build", "example", "--shards", "2", *folders, "--dist", str(dist), *build)
        assert made.returncode == 0, made.stderr[-3000:]
        recorded = run_cuw("record", "example", *folders[:2], "--artifacts", folders[-1], "--dist", str(dist))
        assert recorded.returncode == 0, recorded.stderr[-2000:]
        published = run_cuw("publish", str(dist), str(index))
        assert published.returncode == 0, published.stderr[-2000:]
        (wheel,) = dist.glob("*.whl")
        return wheel.name

    first = build_record_publish(tmp_path / "dist0", "--published", str(index))  # an empty index: a first build
    assert "+cu130-py3-none-" in first and "Build:" not in _wheel_text(index / "files" / first)
    patch = recipes_dir / "example" / "patch.py"
    patch.write_text(patch.read_text() + "\n# a fix of the recipe: the same upstream version, another wheel\n")
    second = build_record_publish(tmp_path / "dist1", "--published", url)  # read over HTTP this time
    assert second == first.replace("+cu130-", "+cu130-1-"), "published as build 1"
    assert set(json.loads((index / MARKER).read_text())["files"]) == {first, second}, "beside build 0"
    assert "Build: 1\n" in _wheel_text(index / "files" / second)
    record = json.loads((index / "files" / f"{second}{RECORD_SUFFIX}").read_text())
    assert (
        record["supersedes"] == {"wheel": first, "changed": "patch"}
        and record["sha256"] == json.loads((index / MARKER).read_text())["files"][second]
    ), "the bytes verified and recorded are the bytes published"

    # A second, different build 1 (a concurrent rebuild): refused, the index unchanged.
    inputs = {**record["inputs"], "image": "another"}
    make_wheel(tmp_path / "rogue", second, b"rogue", cell=record["cell"], inputs=inputs, inputs_digest=inputs_digest(inputs))
    before = (index / MARKER).read_bytes()
    assert main(["publish", str(tmp_path / "rogue"), str(index)]) == 1
    assert (index / MARKER).read_bytes() == before

    # pip and uv, from the index served over HTTP: build 1.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir"]
    assert installed_build(pip, url, tmp_path / "pip") == "1"
    assert (
        installed_build([uv, "pip", "install", "--no-cache", "--python", str(venv / "bin" / "python")], url, tmp_path / "uv")
        == "1"
    )
