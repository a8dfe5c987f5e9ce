"""Windows specifics, as far as Linux can test them: paths, link tolerance, host sources."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from dataclasses import asdict
from pathlib import Path

import pytest

from conftest import wine as _wine, run_settings
from cuw.toolchain.builder import current_builder
from cuw.jobs import archive
from cuw.jobs.backends import FORCE_UNRESOLVED, build_env
from cuw.base.errors import CuwError
from cuw.gates.conditions import ShardObservation, compile_errors, shard_gate
from cuw.partition.rules import ShardSpec, owner, tu_key
from cuw.jobs.shard import apply_source_filter
from cuw.config.recipe import load_recipe

RUNNER_TEMP = "D:\\a\\_temp"


@pytest.mark.parametrize(
    "path, root, key",
    [
        (RUNNER_TEMP + "\\src\\csrc\\kernels\\k03.cu", RUNNER_TEMP + "\\src", "csrc/kernels/k03.cu"),
        ("D:/a/my project/src/csrc/k.cu", "D:/a/my project/src", "csrc/k.cu"),
        ("D:\\a\\my project\\src\\csrc\\k.cu", "D:/a/my project/src", "csrc/k.cu"),
        ("/home/runner/work/src/csrc/kernels/k03.cu", "/home/runner/work/src", "csrc/kernels/k03.cu"),
    ],
)
def test_partition_keys_are_the_same_on_every_os(path, root, key):
    assert tu_key(path, root) == key
    # ... so the Windows lane's owner equals what a Linux planner predicts.
    assert owner(tu_key(path, root), 7) == owner(key, 7)


def _archive_with(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"a{archive.SUFFIX}"
    manifest = json.dumps({"format": 1}).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        evil = tarfile.TarInfo(name)
        evil.size = 1
        tar.addfile(evil, io.BytesIO(b"x"))
    return path


@pytest.mark.parametrize("name", ["cache\\..\\..\\evil", "D:\\a\\_temp\\evil", "C:/evil", "\\\\server\\share\\evil"])
def test_windows_shaped_member_names_are_refused(tmp_path, name):
    (tmp_path / "staging").mkdir()
    with pytest.raises(CuwError):
        archive.unpack(_archive_with(tmp_path, name), tmp_path / "staging")
    assert list((tmp_path / "staging").iterdir()) == []


def test_archives_round_trip_through_folders_with_spaces(tmp_path):
    from cuw.toolchain.cache import Ccache
    from cuw.config.cell import Cell

    folder = tmp_path / "D colon" / "a b" / "_temp" / "cache"
    (folder / "0" / "1").mkdir(parents=True)
    (folder / "0" / "1" / "entryR").write_bytes(b"entry")
    cell = Cell("example", "windows", "3.11", "13.0", None)
    manifest = archive.Manifest(
        archive.FORMAT,
        "0.1.0",
        cell.to_dict(),
        1,
        2,
        "seat",
        "sccache",
        "0.16.0",
        None,
        [],
        [],
        {},
        fingerprint={"source": "0" * 16},
        builder=current_builder(run_settings()).to_dict(),
    )
    dest = archive.pack(Ccache(folder, folder.parent), manifest, tmp_path / "out dir" / archive.archive_name(cell, 1, 2))
    assert dest.name == "cuw-shard-example-windows-py3.11-cu13.0-notorch-1of2.tar"
    (tmp_path / "staging area").mkdir()
    restored = archive.unpack(dest, tmp_path / "staging area")
    assert asdict(restored.manifest) == asdict(manifest)
    assert (restored.staging / "0" / "1" / "entryR").read_bytes() == b"entry"


def test_windows_shards_link_past_missing_kernels_and_the_link_job_does_not(recipes_dir, tmp_path):
    recipe = load_recipe("example", recipes_dir)
    args = (recipe, tmp_path / "cuda", tmp_path / "build", 2, None)
    base = {"PATH": "/usr/bin", "LINK": "/DEBUG /FORCE:UNRESOLVED"}
    shard = build_env(*args, base=base, lane="windows", shard=ShardSpec(2, 4))
    assert shard["LINK"].split() == ["/DEBUG", FORCE_UNRESOLVED]
    link = build_env(*args, base=base, lane="windows", shard=None)
    assert link["LINK"] == "/DEBUG"
    assert "LINK" not in build_env(*args, base={"PATH": "/usr/bin"}, lane="linux", shard=ShardSpec(2, 4))
    assert "LINK" not in build_env(*args, base={"PATH": "/usr/bin"}, lane="windows", shard=ShardSpec(1, 1))


def test_windows_source_filter_keeps_host_sources_in_every_shard(tmp_path):
    src = tmp_path / "src"
    (src / "csrc").mkdir(parents=True)
    names = [f"k{i}.cu" for i in range(8)] + ["module.cpp", "dispatch.cpp"]
    for name in names:
        (src / "csrc" / name).write_text("")
    kept = apply_source_filter(src, ["csrc/*"], ShardSpec(1, 4), lane="windows")
    assert (src / "csrc" / "module.cpp").exists() and (src / "csrc" / "dispatch.cpp").exists()
    assert all(k.endswith(".cu") for k in kept)
    assert sorted(p.name for p in (src / "csrc").glob("*.cu")) == sorted(k.split("/")[-1] for k in kept)


def test_msvc_shapes_in_the_shard_gate():
    unresolved = "dispatch.obj : error LNK2019: unresolved external symbol cuw_k03_host referenced in function f\n"
    obs = ShardObservation(1, unresolved, 3, 9, ["a.cu"], [], ["a.cu"], 1)
    assert shard_gate(obs).ok
    assert compile_errors("D:\\a\\src\\module.cpp(12): error C2065: 'x': undeclared identifier\n")


# -- the toolkit: bin\nvcc.exe -----------------------------------------------------------


def _toolkit_tree(root: Path, nvcc: str) -> Path:
    """A toolkit-shaped folder whose nvcc prints a release line (a script: Linux runs it)."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    tool = root / "bin" / nvcc
    tool.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    tool.chmod(0o755)
    return root


@pytest.fixture
def no_toolkit_env(monkeypatch, tmp_path):
    for var in ("CUW_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    return monkeypatch


def test_a_windows_toolkit_is_found_by_nvcc_exe(tmp_path, no_toolkit_env):
    from cuw.toolchain.toolkit import find_toolkit

    win = _toolkit_tree(tmp_path / "NVIDIA GPU Computing Toolkit" / "CUDA" / "v13.0", "nvcc.exe")
    linux_shaped = _toolkit_tree(tmp_path / "linux-cuda", "nvcc")
    # CUDA_HOME names a tree with bin/nvcc only: not a Windows toolkit, and a named toolkit is
    # never silently replaced by another one; CUDA_PATH (the installer's) is read when it is unset.
    no_toolkit_env.setenv("CUDA_HOME", str(linux_shaped))
    no_toolkit_env.setenv("CUDA_PATH", str(win))
    with pytest.raises(CuwError, match=r"CUDA_HOME=.* has no bin/nvcc.exe"):
        find_toolkit("win32", homes=run_settings().homes)
    assert find_toolkit("linux", homes=run_settings().homes).home == linux_shaped.resolve()
    no_toolkit_env.delenv("CUDA_HOME")
    for platform in ("win32", "windows"):  # sys.platform or the lane
        found = find_toolkit(platform, homes=run_settings().homes)
        assert found.home == win.resolve() and found.version == "13.0" and found.windows
        assert found.nvcc == win.resolve() / "bin" / "nvcc.exe"
        assert found.tool("cuobjdump").name == "cuobjdump.exe"
    # The Linux lane reads bin/nvcc and never CUDA_PATH.
    no_toolkit_env.setenv("CUDA_HOME", str(linux_shaped))
    assert find_toolkit("linux", homes=run_settings().homes).home == linux_shaped.resolve()
    assert find_toolkit("linux", homes=run_settings().homes).nvcc.name == "nvcc"
    no_toolkit_env.setenv("CUDA_HOME", str(tmp_path / "gone"))  # named but not there: refused, no fallback
    with pytest.raises(CuwError, match=r"CUDA_HOME=.*gone has no bin/nvcc: point it at a CUDA toolkit"):
        find_toolkit("linux", homes=run_settings().homes)


def test_a_windows_toolkit_is_found_through_nvcc_exe_on_path(tmp_path, no_toolkit_env):
    from cuw.base.errors import CuwError
    from cuw.toolchain.toolkit import find_toolkit

    win = _toolkit_tree(tmp_path / "CUDA" / "v13.0", "nvcc.exe")
    no_toolkit_env.setenv("PATH", str(win / "bin"))
    assert find_toolkit("win32", homes=run_settings().homes).nvcc == win.resolve() / "bin" / "nvcc.exe"
    (win / "bin" / "nvcc.exe").unlink()
    with pytest.raises(CuwError, match=r"bin\\nvcc\.exe"):
        find_toolkit("win32", homes=run_settings().homes)


# -- objects: MSVC's .obj ----------------------------------------------------------------


def test_real_objects_counts_msvc_obj_files(tmp_path):
    from cuw.jobs.workspace import Workspace, real_objects

    ws = Workspace(tmp_path / "job", tmp_path / "job")
    build = ws.tree / "build" / "CMakeFiles" / "ext.dir" / "csrc"
    build.mkdir(parents=True)
    ws.empty_object.parent.mkdir(parents=True, exist_ok=True)
    ws.empty_object.write_bytes(b"EMPTY-COFF" * 8)
    (build / "k01.cu.obj").write_bytes(b"\x64\x86" + b"real kernel" * 40)  # a compiled TU
    (build / "module.cpp.obj").write_bytes(b"\x64\x86" + b"host code" * 40)
    (build / "k02.cu.obj").write_bytes(ws.empty_object.read_bytes())  # a foreign TU's stub
    (build / "k03.cu.o").write_bytes(b"\x7fELF" + b"linux" * 40)
    assert real_objects(ws) == 3


# -- verify: PE files (.pyd) read with pefile --------------------------------------------

MINGW = "x86_64-w64-mingw32-gcc"
needs_mingw = pytest.mark.needs("mingw")  # no PE files to test with without it

# DLLs a real Windows build imports from: an import library per DLL, made from a .def file,
# so the .pyd's import table names them exactly as MSVC's would.
_IMPORT_LIBS = {
    "python311": ["PyModule_Create2"],
    "python310": ["PyModule_Create2"],
    "cudart64_13": ["cudaGetDeviceCount"],
    "libgomp-1": ["omp_get_max_threads"],
}


def _mingw(tmp: Path, *args: str) -> None:
    proc = subprocess.run([MINGW, *args], cwd=tmp, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _pyd(tmp: Path, module: str, *, python: str = "python311", export: str | None = None, extra: tuple = ()) -> bytes:
    """A real PE .pyd from mingw-w64: exports PyInit_<export or module>, imports PyModule_Create2
    from the given Python DLL, cudaGetDeviceCount from the CUDA runtime, and whatever ``extra``
    names (``helper`` -> the wheel's own helper.dll, ``libgomp-1`` -> not allowed)."""
    for lib in [python, "cudart64_13", *[e for e in extra if e in _IMPORT_LIBS]]:
        if not (tmp / f"lib{lib}.a").exists():
            (tmp / f"{lib}.def").write_text(f"LIBRARY {lib}.dll\nEXPORTS\n" + "\n".join(_IMPORT_LIBS[lib]) + "\n")
            subprocess.run(["x86_64-w64-mingw32-dlltool", "-d", f"{lib}.def", "-l", f"lib{lib}.a"], cwd=tmp, check=True)
    calls = "".join(f" + {fn}()" for fn in ("helper_value",) if "helper" in extra)
    calls += "".join(" + omp_get_max_threads()" for e in extra if e == "libgomp-1")
    (tmp / f"{module}.c").write_text(
        "extern void *PyModule_Create2(void *, int);\nextern int cudaGetDeviceCount(int *);\n"
        "extern int helper_value(void);\nextern int omp_get_max_threads(void);\n"
        f"static char def[104];\nint probe(void) {{ int n = 0; return cudaGetDeviceCount(&n){calls}; }}\n"
        f"__declspec(dllexport) void *PyInit_{export or module}(void) {{ return PyModule_Create2(def, 1013); }}\n"
    )
    out = f"{module}.cp311-win_amd64.pyd"
    libs = [f"-l{lib}" for lib in [python, "cudart64_13", *extra]]
    _mingw(tmp, "-shared", "-O1", f"{module}.c", "-o", out, "-L.", *libs)
    return (tmp / out).read_bytes()


def _helper_dll(tmp: Path) -> bytes:
    (tmp / "helper.c").write_text("__declspec(dllexport) int helper_value(void) { return 7; }\n")
    _mingw(tmp, "-shared", "helper.c", "-o", "helper.dll", "-Wl,--out-implib,libhelper.a")
    return (tmp / "helper.dll").read_bytes()


def _windows_wheel(tmp: Path, files: dict[str, bytes], tag: str = "cp311-cp311-win_amd64") -> Path:
    from wheel.wheelfile import WheelFile

    name = f"cuw_example-0.1.0+cu130-{tag}.whl"
    dist = "cuw_example-0.1.0+cu130.dist-info"
    path = tmp / name
    with WheelFile(path, "w") as wf:  # writes RECORD with every hash
        for member, data in files.items():
            wf.writestr(member, data)
        wf.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: cuw-example\nVersion: 0.1.0+cu130\n\n")
        wf.writestr(f"{dist}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n")
    return path


def _verify_windows(recipes_dir: Path, wheel: Path, import_check: bool = False) -> dict:
    from cuw.config.cell import Cell
    from cuw.config.policy import load_policy
    from cuw.toolchain.toolkit import find_toolkit
    from cuw.wheel.verify import verify

    # These wheels hold real CPython extensions (.pyd linking python311.dll): per interpreter.
    recipe_yml = recipes_dir / "example" / "recipe.yml"
    recipe_yml.write_text(recipe_yml.read_text().replace("wheel_python: py3 ", "wheel_python: per-interpreter "))
    cell = Cell("example", "windows", "3.11", "13.0", None)
    report = verify(
        wheel,
        load_recipe("example", recipes_dir),
        cell,
        find_toolkit(homes=run_settings().homes),
        load_policy(recipes_dir).wheel,
        [],
        import_check=import_check,
    )
    return {c.name: c for c in report.checks}


@needs_mingw
def test_verify_reads_a_real_pyd(recipes_dir, tmp_path):
    from cuw.wheel.binaries import read_pe
    from cuw.wheel.verify import GateCannotRun

    build = tmp_path / "build"
    build.mkdir()
    helper = _helper_dll(build)
    pyd = _pyd(build, "_core", extra=("helper",))
    read = read_pe("cuw_example/_core.cp311-win_amd64.pyd", pyd, build)
    assert read.kind == "pe" and read.exports_pyinit == "_core"
    assert {d.lower() for d in read.needed} >= {"python311.dll", "cudart64_13.dll", "helper.dll", "kernel32.dll"}

    wheel = _windows_wheel(
        tmp_path,
        {
            "cuw_example/__init__.py": b"from ._core import *\n",
            "cuw_example/_core.cp311-win_amd64.pyd": pyd,
            "cuw_example/helper.dll": helper,  # shipped: its import is allowed
        },
    )
    checks = _verify_windows(recipes_dir, wheel)
    failed = {n: c.details for n, c in checks.items() if not c.ok}
    assert not failed, failed
    assert checks["compiled"].details == ["cuw_example/_core.cp311-win_amd64.pyd", "cuw_example/helper.dll"]
    assert checks["pyinit"].details == ["1 extension module(s) export PyInit_<name>"]
    assert "torch-free" in checks["links_torch"].details[0]
    # A .pyd cannot be imported here: the gate says it cannot run (exit 2), it does not pass.
    with pytest.raises(GateCannotRun, match="needs Windows .*--no-import"):
        _verify_windows(recipes_dir, wheel, import_check=True)


@needs_mingw
def test_verify_refuses_a_pyd_with_foreign_dlls_or_the_wrong_init(recipes_dir, tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    _helper_dll(build)
    wheel = _windows_wheel(
        tmp_path,
        {
            # helper.dll imported but not shipped; libgomp-1.dll is mingw's OpenMP, not the system's
            "cuw_example/_core.cp311-win_amd64.pyd": _pyd(build, "_core", extra=("helper", "libgomp-1")),
            # built against Python 3.10 in a 3.11 cell
            "cuw_example/_old.cp311-win_amd64.pyd": _pyd(build, "_old", python="python310"),
            # renamed after the build: Python would look for PyInit__renamed
            "cuw_example/_renamed.cp311-win_amd64.pyd": _pyd(build, "_orig"),
        },
    )
    checks = _verify_windows(recipes_dir, wheel)
    assert sorted(checks["needed"].details) == [
        "cuw_example/_core.cp311-win_amd64.pyd: helper.dll",
        "cuw_example/_core.cp311-win_amd64.pyd: libgomp-1.dll",
        "cuw_example/_old.cp311-win_amd64.pyd: python310.dll (the cell is Python 3.11)",
    ]
    assert checks["pyinit"].details == [
        "cuw_example/_renamed.cp311-win_amd64.pyd: exports PyInit__orig, its name needs PyInit__renamed"
    ]
    assert checks["filename"].ok and checks["record"].ok


@needs_mingw
def test_verify_refuses_a_linux_wheel_in_the_windows_cell(recipes_dir, tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    wheel = _windows_wheel(
        tmp_path, {"cuw_example/_core.cp311-win_amd64.pyd": _pyd(build, "_core")}, tag="cp311-cp311-manylinux_2_34_x86_64"
    )
    checks = _verify_windows(recipes_dir, wheel)
    assert not checks["filename"].ok and "win_amd64" in checks["filename"].details[0]


# -- the seat on Windows: the native stub as an .exe launcher ------------------------------

STUB_SOURCE = Path(__file__).resolve().parent.parent / "cuw" / "seat" / "seat_stub.c"


def _cross_compile_stub(out: Path, seat_dir: str, host: int) -> Path:
    from cuw.seat.native import _c_literal

    cmd = [
        MINGW,
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-DSEAT_DIR={_c_literal(seat_dir)}",
        f"-DSEAT_HOST={host}",
        str(STUB_SOURCE),
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@needs_mingw
@pytest.mark.parametrize("host", [0, 1])
def test_the_native_stub_cross_compiles_to_a_windows_executable(tmp_path, host):
    import pefile

    from cuw.wheel.binaries import read_pe
    from cuw.wheel.verify import WINDOWS_SYSTEM_DLLS, _allowed

    exe = _cross_compile_stub(tmp_path / "nvcc.exe", "D:\\a\\_temp\\my job\\seat", host)
    pe = pefile.PE(str(exe), fast_load=True)
    assert pe.FILE_HEADER.Machine == pefile.MACHINE_TYPE["IMAGE_FILE_MACHINE_AMD64"]
    assert pe.FILE_HEADER.Characteristics & pefile.IMAGE_CHARACTERISTICS["IMAGE_FILE_EXECUTABLE_IMAGE"]
    assert not pe.FILE_HEADER.Characteristics & pefile.IMAGE_CHARACTERISTICS["IMAGE_FILE_DLL"]
    assert pe.OPTIONAL_HEADER.Subsystem == pefile.SUBSYSTEM_TYPE["IMAGE_SUBSYSTEM_WINDOWS_CUI"]  # a console program
    pe.close()
    # It runs on a bare Windows machine: nothing but system DLLs (no mingw runtime DLL to ship).
    needed = read_pe("nvcc.exe", exe.read_bytes(), tmp_path).needed
    assert needed and all(_allowed(d.lower(), WINDOWS_SYSTEM_DLLS) for d in needed), needed


@needs_mingw
@pytest.mark.needs("wine")  # without it the Windows launcher is compiled but not run
def test_the_windows_launcher_hands_every_call_to_the_python_seat_under_wine(tmp_path):
    """The launcher runs the interpreter named on the Python seat's #! line (a path with a space,
    unquoted, as cuw/seat/runtime.py writes it) with the line's options, the script, and its own
    arguments verbatim, and exits with the child's code. The "interpreter" is a PE program that
    prints its argv."""
    interp_dir = tmp_path / "py dir"
    interp_dir.mkdir()
    (tmp_path / "echo.c").write_text(
        "#include <stdio.h>\n#include <stdlib.h>\nint main(int argc, char **argv) {\n"
        '  for (int i = 1; i < argc; ++i) printf("[%s]\\n", argv[i]);\n'
        '  return getenv("FAKE_EXIT") ? atoi(getenv("FAKE_EXIT")) : 0;\n}\n'
    )
    _mingw(tmp_path, "echo.c", "-o", str(interp_dir / "python.exe"))
    seat = tmp_path / "seat dir"
    (seat / "python").mkdir(parents=True)
    windows_path = lambda p: "Z:" + str(p).replace("/", "\\")  # noqa: E731 (wine maps / to Z:)
    for tool in ("nvcc", "g++"):
        (seat / "python" / tool).write_text(f"#!{windows_path(interp_dir / 'python.exe')} -IS\nimport sys\n")
    nvcc = _cross_compile_stub(tmp_path / "nvcc.exe", windows_path(seat), 0)
    host = _cross_compile_stub(tmp_path / "g++.exe", windows_path(seat), 1)

    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "WINEPREFIX": str(tmp_path / "wineprefix"),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml,winemenubuilder.exe=d",
        "FAKE_EXIT": "5",
    }
    args = ["-c", "a b.cu", "-o", 'x"y.obj', '-DX="1 2"', "back\\\\slash\\"]
    run = subprocess.run([_wine(), str(nvcc), *args], capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 5, run.stderr  # the Python seat's exit code
    printed = run.stdout.replace("\r\n", "\n").splitlines()
    assert printed == [f"[{a}]" for a in ["-IS", windows_path(seat / "python" / "nvcc"), *args]]

    run = subprocess.run([_wine(), str(host), "-c", "m.cpp"], capture_output=True, text=True, env=env, timeout=240)
    assert run.stdout.replace("\r\n", "\n").splitlines()[1] == f"[{windows_path(seat / 'python' / 'g++')}]"
    # The native path handles nothing itself on Windows.
    env["CUW_SEAT_STUB_NO_FALLBACK"] = "1"
    assert subprocess.run([_wine(), str(nvcc), *args], capture_output=True, env=env, timeout=240).returncode == 97


# -- until a Windows runner has built a cell, the lane says it is unverified ---------------


def test_the_matrix_summary_marks_the_windows_lane_unverified(recipes_dir):
    from cuw.ci.matrix import Filters, plan, summary
    from cuw.config.policy import load_policy

    grid = load_policy(recipes_dir).grid
    both = summary(plan([load_recipe("example", recipes_dir)], grid, Filters(cuda=("13.0",), python=("3.11",))))
    windows = [line for line in both.splitlines() if line.startswith("  lane windows")]
    assert len(windows) == 1 and "UNVERIFIED: no Windows runner has built a cell yet" in windows[0]
    assert all("UNVERIFIED" not in line for line in both.splitlines() if line.startswith("  lane linux"))
    linux_only = summary(plan([load_recipe("example", recipes_dir)], grid, Filters(platform=("linux",))))
    assert "UNVERIFIED" not in linux_only
    # ... and on stderr of `cuw matrix` (the workflow's plan job)
    args = ["matrix", "--package", "example", "--platform", "windows", "--cuda", "13.0", "--recipes", str(recipes_dir)]
    cli = subprocess.run([sys.executable, "-m", "cuw", *args], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "UNVERIFIED: no Windows runner has built a cell yet" in cli.stderr
