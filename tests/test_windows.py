"""Windows specifics, as far as Linux can test them: paths, link tolerance, host sources."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import asdict
from pathlib import Path

import pytest

from cuw import archive
from cuw.backends import FORCE_UNRESOLVED, build_env
from cuw.errors import CuwError
from cuw.gates import ShardObservation, compile_errors, shard_gate
from cuw.partition import ShardSpec, owner, tu_key
from cuw.pipeline import apply_source_filter
from cuw.recipe import load_recipe

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
    path = tmp_path / "a.tar.gz"
    manifest = json.dumps({"format": 1}).encode()
    with tarfile.open(path, "w:gz") as tar:
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
    from cuw.cache import Ccache
    from cuw.cell import Cell

    folder = tmp_path / "D colon" / "a b" / "_temp" / "cache"
    (folder / "0" / "1").mkdir(parents=True)
    (folder / "0" / "1" / "entryR").write_bytes(b"entry")
    cell = Cell("example", "windows", "3.11", "13.0", None)
    manifest = archive.Manifest(1, "0.1.0", cell.to_dict(), 1, 2, "seat", "sccache", "0.16.0", None, [], [], {})
    dest = archive.pack(Ccache(folder, folder.parent), manifest, tmp_path / "out dir" / archive.archive_name(cell, 1, 2))
    assert dest.name == "cuw-shard-example-windows-py3.11-cu13.0-notorch-1of2.tar.gz"
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
    from cuw.toolkit import find_toolkit

    win = _toolkit_tree(tmp_path / "NVIDIA GPU Computing Toolkit" / "CUDA" / "v13.0", "nvcc.exe")
    linux_shaped = _toolkit_tree(tmp_path / "linux-cuda", "nvcc")
    # CUDA_HOME names a tree with bin/nvcc only: not a Windows toolkit; CUDA_PATH (the installer's) is.
    no_toolkit_env.setenv("CUDA_HOME", str(linux_shaped))
    no_toolkit_env.setenv("CUDA_PATH", str(win))
    for platform in ("win32", "windows"):  # sys.platform or the lane
        found = find_toolkit(platform)
        assert found.home == win.resolve() and found.version == "13.0" and found.windows
        assert found.nvcc == win.resolve() / "bin" / "nvcc.exe"
        assert found.tool("cuobjdump").name == "cuobjdump.exe"
    # The Linux lane reads bin/nvcc and never CUDA_PATH.
    assert find_toolkit("linux").home == linux_shaped.resolve()
    assert find_toolkit("linux").nvcc.name == "nvcc"


def test_a_windows_toolkit_is_found_through_nvcc_exe_on_path(tmp_path, no_toolkit_env):
    from cuw.errors import CuwError
    from cuw.toolkit import find_toolkit

    win = _toolkit_tree(tmp_path / "CUDA" / "v13.0", "nvcc.exe")
    no_toolkit_env.setenv("PATH", str(win / "bin"))
    assert find_toolkit("win32").nvcc == win.resolve() / "bin" / "nvcc.exe"
    (win / "bin" / "nvcc.exe").unlink()
    with pytest.raises(CuwError, match=r"bin\\nvcc\.exe"):
        find_toolkit("win32")


# -- objects: MSVC's .obj ----------------------------------------------------------------


def test_real_objects_counts_msvc_obj_files(tmp_path):
    from cuw.workspace import Workspace, real_objects

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
