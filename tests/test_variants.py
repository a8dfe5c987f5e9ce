"""Wheel variants (PEP 825, ``wheel.variants``): the variant wheel and the index's
``-variants.json`` the forge makes are read back with variantlib (the reference library), uv
(``--preview-features wheel-variants``, the NVIDIA provider's properties forced) picks the wheel
only for a GPU it holds SASS for, and a wheel made without the option is the finished wheel, byte
for byte."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from dataclasses import replace
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import REPO, need, run_settings
from cuw.base.errors import InputError
from cuw.config.cell import Cell
from cuw.config.paths import Paths
from cuw.config.policy import load_policy
from cuw.config.recipe import load_recipe, recipe_for_wheel
from cuw.jobs import link
from cuw.jobs.workspace import Workspace
from cuw.base.files import sha256_of
from cuw.toolchain.toolkit import find_toolkit
from cuw.wheel import variants
from cuw.wheel.finish import build_of, highest_build
from cuw.wheel.index import build_index
from cuw.wheel.verify import device_code, integrity, verify
from wheel_maker import make_wheel

variantlib = pytest.importorskip("variantlib", reason="variantlib==0.2.2 (the test extra) reads what the forge writes")
from variantlib.models.variant import VariantProperty  # noqa: E402
from variantlib.resolver.filtering import filter_variants_by_property  # noqa: E402
from variantlib.variant_dist_info import VariantDistInfo  # noqa: E402
from variantlib.variants_json import VariantsJson  # noqa: E402

NAME = "cuw_example-0.1.0+cu130-py3-none-manylinux_2_31_x86_64.whl"
KERNEL = (
    '__global__ void cuw_k(float *x) { x[threadIdx.x] *= 2.0f; }\nextern "C" void cuw_run(float *x) { cuw_k<<<1, 32>>>(x); }\n'
)
CELL = Cell("example", "linux", f"{sys.version_info.major}.{sys.version_info.minor}", "13.0", None)


def _library(tmp: Path, *gencode: str) -> bytes:
    """A small CUDA library, compiled for real: the device code the variant names."""
    (tmp / "k.cu").write_text(KERNEL)
    args = [str(need("nvcc")), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", *gencode, "-o", str(tmp / "k.so")]
    subprocess.run([*args, str(tmp / "k.cu")], check=True, capture_output=True, timeout=300)
    return (tmp / "k.so").read_bytes()


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Two builds of the kernel: SASS for sm_80 and sm_90 with PTX for compute_90, and SASS for sm_120 alone."""
    tmp = tmp_path_factory.mktemp("cu")
    (tmp / "a").mkdir(), (tmp / "b").mkdir()
    return {
        "ampere_hopper": _library(
            tmp / "a", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"
        ),
        "blackwell": _library(tmp / "b", "-gencode", "arch=compute_120,code=sm_120"),
    }


def _variant(folder: Path, library: bytes, name: str = NAME) -> Path:
    wheel = make_wheel(folder / "in", name, payload=library, record=False)
    sass, ptx = device_code(wheel, find_toolkit(homes=run_settings().homes))
    return variants.make_variant(wheel, "13.0", sass, ptx, folder / "dist")


def _variant_json(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/variant.json")]
        return zf.read(name)


def test_file_names_with_a_variant_label_parse_and_a_bad_label_is_refused():
    assert variants.split_label(NAME) == (NAME, None)
    built = NAME.replace("-py3-", "-2-py3-")
    assert variants.split_label(built) == (built, None)
    assert variants.split_label(built[:-4] + "-cu130_1a2b3c4d.whl") == (built, "cu130_1a2b3c4d")
    assert variants.split_label(NAME[:-4] + "-null.whl") == (NAME, "null")
    labelled = NAME[:-4] + "-cu130_1a2b3c4d.whl"
    assert variants.parse_wheel_name(labelled)[1].local == "cu130"
    assert build_of(built[:-4] + "-cu130_1a2b3c4d.whl") == 2
    assert highest_build([built[:-4] + "-cu130_1a2b3c4d.whl"], NAME) == 2  # a variant build counts for the plan's next number
    assert recipe_for_wheel(labelled, REPO / "recipes") == "example"
    with pytest.raises(InputError, match="1-16 of a-z"):
        variants.parse_wheel_name(NAME[:-4] + "-cu130_far_too_long_label.whl")
    with pytest.raises(InputError, match="1-16 of a-z"):
        variants.parse_wheel_name(NAME[:-4] + "-Cu130.whl")


@pytest.mark.needs("nvcc")
def test_the_variant_wheel_names_its_cuda_line_and_listed_device_code_and_variantlib_reads_it(libraries, tmp_path):
    wheel = _variant(tmp_path, libraries["ampere_hopper"])
    label = variants.split_label(wheel.name)[1]
    assert wheel.name == NAME[:-4] + f"-{label}.whl" and label is not None and label.startswith("cu130_")
    assert integrity(wheel) == []  # RECORD lists variant.json with its hash; the name parses
    read = VariantDistInfo(_variant_json(wheel), expected_label=label)
    props = sorted(p.to_str() for p in read.variant_desc.properties)
    assert props == [
        "nvidia :: cuda_version_lower_bound :: 13.0",
        "nvidia :: sm_arch :: 80_real",
        "nvidia :: sm_arch :: 90_real",
        "nvidia :: sm_arch :: 90_virtual",
    ]
    assert label == "cu130_" + read.variant_desc.hexdigest  # the label's hash is variantlib's
    assert read.namespace_priorities == ["nvidia"] and read.providers["nvidia"].plugin_api == variants.PROVIDER["plugin-api"]
    # PEP 825's rule: per feature one value must fit. An sm_90 machine with a 13.0 driver takes it, sm_75 does not.
    desc = [read.variant_desc]
    fits = [VariantProperty("nvidia", "cuda_version_lower_bound", "13.0"), VariantProperty("nvidia", "sm_arch", "90_real")]
    assert list(filter_variants_by_property(desc, fits)) == desc
    assert list(filter_variants_by_property(desc, [fits[0], VariantProperty("nvidia", "sm_arch", "75_real")])) == []
    # Every member but variant.json and RECORD is the finished wheel's, byte for byte.
    with zipfile.ZipFile(tmp_path / "in" / NAME) as a, zipfile.ZipFile(wheel) as b:
        before = {n: a.read(n) for n in a.namelist() if not n.endswith("RECORD")}
        after = {n: b.read(n) for n in b.namelist() if not n.endswith(("RECORD", "variant.json"))}
    assert before == after


@pytest.mark.needs("nvcc")
def test_verify_holds_the_variant_to_the_device_code_and_the_label_to_its_file(libraries, tmp_path):
    wheel = _variant(tmp_path, libraries["ampere_hopper"])
    recipe = load_recipe("example", REPO / "recipes")
    toolkit, policy = find_toolkit(homes=run_settings().homes), load_policy(REPO / "recipes").wheel

    def checks(w: Path) -> dict[str, Any]:
        return {c.name: c for c in verify(w, recipe, CELL, toolkit, policy, ["8.0", "9.0+PTX"], import_check=False).checks}

    good = checks(wheel)
    assert good["variant"].ok and good["arch"].ok and good["filename"].ok, good["variant"].details
    # The same label and file name, other properties (a wheel that claims sm_120): refused.
    liar = tmp_path / "liar" / wheel.name
    data = json.loads(_variant_json(wheel))
    (label,) = data["variants"]
    data["variants"][label]["nvidia"]["sm_arch"] = ["120_real"]
    tree = tmp_path / "liar-tree"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tree)
    (next(tree.glob("*.dist-info")) / "variant.json").write_text(json.dumps(data))
    (next(tree.glob("*.dist-info")) / "RECORD").unlink()
    from wheel.wheelfile import WheelFile

    liar.parent.mkdir()
    with WheelFile(liar, "w") as wf:
        wf.write_files(str(tree))
    bad = checks(liar)
    assert not bad["variant"].ok and "the wheel holds" in bad["variant"].details[0]
    # A label without variant.json, and variant.json under a name without the label: not sound wheels.
    unlabelled = tmp_path / NAME
    shutil.copy(liar, unlabelled)
    assert any("no variant label" in p for p in integrity(unlabelled))
    plain = make_wheel(tmp_path / "bare", NAME, payload=b"x", record=False)
    bare = plain.rename(plain.with_name(NAME[:-4] + f"-{label}.whl"))
    assert any("variant.json, not 1" in p for p in integrity(bare))


@pytest.mark.needs("nvcc")
def test_the_index_serves_a_variants_json_that_variantlib_merges_the_same_way(libraries, tmp_path):
    a = _variant(tmp_path / "a", libraries["ampere_hopper"])
    b = _variant(tmp_path / "b", libraries["blackwell"], NAME.replace("manylinux_2_31_x86_64", "manylinux_2_31_aarch64"))
    plain = make_wheel(tmp_path / "c", NAME.replace("0.1.0", "0.2.0"), payload=b"plain", record=False)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for w in (a, b, plain):
        shutil.copy(w, wheels)
    index = tmp_path / "index"
    build_index(wheels, index)
    served = index / "files" / "cuw_example-0.1.0+cu130-variants.json"
    got = VariantsJson(json.loads(served.read_text()))
    expected = VariantDistInfo(_variant_json(a))  # what variantlib's generate-index-json does: merge each wheel's
    expected.merge(VariantDistInfo(_variant_json(b)))
    assert got.variants == expected.variants and len(got.variants) == 2
    assert json.loads(served.read_text()) == json.loads(expected.to_str())  # the same file, key for key
    assert not (index / "files" / "cuw_example-0.2.0+cu130-variants.json").exists()  # a version without variants has none
    sha = sha256_of(served)
    for page in ("simple/cuw-example", "cu130/cuw-example"):
        html = (index / page / "index.html").read_text()
        assert f"files/cuw_example-0.1.0%2Bcu130-variants.json#sha256={sha}" in html, page
        files = {f["filename"]: f for f in json.loads((index / page / "index.json").read_text())["files"]}
        assert files[served.name]["hashes"] == {"sha256": sha} and files[served.name]["size"] == served.stat().st_size
    # A later publish of another build rewrites the file from the marker: the old variants stay.
    c = _variant(tmp_path / "d", libraries["blackwell"], NAME.replace("-py3-", "-1-py3-"))
    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(c, more)
    build_index(more, index)
    assert set(VariantsJson(json.loads(served.read_text())).variants) == set(expected.variants)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served_index(libraries: dict[str, bytes], tmp_path: Path) -> Iterator[str]:
    wheel = _variant(tmp_path, libraries["ampere_hopper"])
    build_index(wheel.parent, tmp_path / "index")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path / "index")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/cu130/"
    server.shutdown()


@pytest.mark.needs("nvcc", "uv")
@pytest.mark.parametrize(
    ("driver", "sm", "picked"),
    [("13.0", "9.0", True), ("13.0", "8.6", True), ("13.0", "7.5", False), ("12.8", "9.0", False)],
)
def test_uv_with_wheel_variants_installs_the_variant_only_where_it_runs(served_index, tmp_path, driver, sm, picked):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env |= {"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    env |= {"NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": driver, "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": sm}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    cmd = [str(need("uv")), "pip", "install", "--no-cache", "--python", str(venv / "bin" / "python")]
    cmd += ["--preview-features", "wheel-variants", "--index-url", served_index, "cuw-example"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if picked:
        assert proc.returncode == 0, proc.stderr
        assert list((venv / "lib").glob("python*/site-packages/cuw_example-0.1.0+cu130.dist-info/variant.json"))
    else:
        assert proc.returncode != 0 and "only unsupported wheel variants" in proc.stderr, proc.stderr


def _finish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: bytes, on: bool) -> tuple[Path, Path]:
    """The link's finish step on a built wheel (auditwheel's repair stood in by a copy): the wheel
    it hands to verify, and the repaired wheel it started from."""
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes)
    policy = recipes / "defaults.yml"
    text = policy.read_text()
    assert "  variants: false\n" in text
    policy.write_text(text.replace("  variants: false\n", f"  variants: {'true' if on else 'false'}\n"))
    raw = make_wheel(tmp_path / "raw", "cuw_example-0.1.0-py3-none-linux_x86_64.whl", payload=library, record=False)
    repaired: list[Path] = []

    def repair(wheel: Path, *_: Any) -> Path:
        out = tmp_path / "repaired" / wheel.name.replace("linux_x86_64", "manylinux_2_31_x86_64")
        out.parent.mkdir(exist_ok=True)
        repaired.append(Path(shutil.copy(wheel, out)))
        return repaired[-1]

    seen: list[Path] = []
    monkeypatch.setattr(link, "repair", repair)
    monkeypatch.setattr(link, "verify", lambda wheel, *a, **k: seen.append(wheel) or link.VerifyReport(str(wheel), []))
    recipe = load_recipe("example", recipes)
    toolkit = find_toolkit(homes=run_settings().homes)
    ws = Workspace(tmp_path / "ws", tmp_path / "ws")
    paths = Paths(work=tmp_path / "work", artifacts=tmp_path / "artifacts", dist=tmp_path / "dist")
    _, final = link._finish_and_verify(raw, recipe, replace(CELL, python="3.11"), ["8.0"], toolkit, ws, paths, run_settings())
    assert seen == [final]
    return final, repaired[0]


@pytest.mark.needs("nvcc")
def test_the_link_applies_the_variant_after_finish_and_before_verify_and_only_when_asked(libraries, tmp_path, monkeypatch):
    final, repaired = _finish(tmp_path / "off", monkeypatch, libraries["ampere_hopper"], on=False)
    assert final == repaired and variants.split_label(final.name)[1] is None
    assert not [n for n in zipfile.ZipFile(final).namelist() if n.endswith("variant.json")]  # unchanged: no variant.json
    final, repaired = _finish(tmp_path / "on", monkeypatch, libraries["ampere_hopper"], on=True)
    assert final.name == repaired.name[:-4] + f"-{variants.split_label(final.name)[1]}.whl"
    assert VariantDistInfo(_variant_json(final), expected_label=variants.split_label(final.name)[1])
    assert integrity(final) == []
