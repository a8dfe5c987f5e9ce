"""The host seat (gcc/g++/cc/c++ through the cache and the partition) with the real g++ and ccache."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cuw.jobs.workspace import Workspace, seat_config
from cuw.toolchain import cache
from cuw.seat import install, runtime, seat_log
from cuw.toolchain.nvcc_args import HOST_VALUE_OPTIONS, parse
from cuw.partition.rules import owner
from cuw.toolchain.toolkit import find_toolkit
from conftest import run_settings

HOST_SRC = 'extern "C" int answer() { return 42; }\n'


class HostSeat:
    """A job's seat with its host compilers linked into a bin folder, as the shadow CUDA_HOME has them."""

    def __init__(self, root: Path, partition: runtime.SeatPartition | None, lane: str = "linux") -> None:
        ws = Workspace(root, root)
        self.src = ws.src
        (self.src / "build").mkdir(parents=True)
        job_cache = cache.open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings())
        job_cache.prepare()
        self.cache = job_cache
        ws.seat_dir.mkdir()
        ws.logs.mkdir()
        self.empty = install.make_empty_object(ws.empty_object, run_settings().cc)
        self.log = ws.seat_log
        config = seat_config(ws, find_toolkit(homes=run_settings().homes).nvcc, job_cache, partition, lane=lane)
        self.config = config
        install.install(ws.seat_dir, config)
        self.bin = root / "bin"
        self.bin.mkdir()
        self.links = install.link_host_seat(ws.seat_dir, self.bin, config)

    def gxx(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / "g++"), *args], cwd=cwd or self.src, capture_output=True, text=True)

    def entries(self) -> list[dict]:
        return seat_log.read_log(self.log)

    def source(self, rel: str) -> Path:
        path = self.src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HOST_SRC)
        return path


def _key_owned_by(index: int, count: int) -> str:
    return next(f"csrc/h{i}.cpp" for i in range(1000) if owner(f"csrc/h{i}.cpp", count) == index)


def test_every_host_compiler_name_is_linked_to_the_host_seat(tmp_path):
    s = HostSeat(tmp_path, None)
    assert {p.name for p in s.links} == set(s.config.real_compilers) >= {"gcc", "g++"}
    assert all(os.path.realpath(p).endswith(runtime.HOST_SCRIPT) for p in s.links)
    assert all(runtime.HOST_SCRIPT not in os.path.realpath(real) for real in s.config.real_compilers.values())


def test_owned_host_tu_compiles_through_the_cache_and_hits_the_second_time(tmp_path):
    s = HostSeat(tmp_path, runtime.SeatPartition(1, 1))
    s.source("csrc/a.cpp")
    for _ in range(2):
        proc = s.gxx("-O2", "-Werror", "-fPIC", "-c", "csrc/a.cpp", "-o", "build/a.o")
        assert proc.returncode == 0, proc.stderr
    entries = s.entries()
    assert [(e["action"], e["kind"], e["key"]) for e in entries] == [("compiled", "host", "csrc/a.cpp")] * 2
    assert [e["outcome"] for e in entries] == ["miss", "hit"]
    nm = subprocess.run(["nm", str(s.src / "build" / "a.o")], capture_output=True, text=True, check=True).stdout
    assert " T answer" in nm


def test_foreign_host_tu_gets_the_empty_object_and_a_depfile(tmp_path):
    key = _key_owned_by(2, 3)
    s = HostSeat(tmp_path, runtime.SeatPartition(1, 3))
    s.source(key)
    proc = s.gxx("-MD", "-MF", "build/x.o.d", "-c", key, "-o", "build/x.o")
    assert proc.returncode == 0, proc.stderr
    assert (s.src / "build" / "x.o").read_bytes() == s.empty.read_bytes()
    assert (s.src / "build" / "x.o.d").read_text().startswith("build/x.o:")
    assert [(e["action"], e["kind"], e["owner"]) for e in s.entries()] == [("stubbed", "host", 2)]


def test_windows_lanes_compile_every_host_tu(tmp_path):
    key = _key_owned_by(2, 3)
    s = HostSeat(tmp_path, runtime.SeatPartition(1, 3), lane="windows")
    s.source(key)
    assert s.gxx("-c", key, "-o", "build/x.o").returncode == 0
    assert [(e["action"], e["kind"]) for e in s.entries()] == [("compiled", "host")]
    assert (s.src / "build" / "x.o").read_bytes() != s.empty.read_bytes()


@pytest.mark.parametrize(
    "where",
    ["outside", "tmpxft", "nameless", "probe", "link"],
)
def test_calls_that_are_not_the_builds_tus_run_the_real_compiler_uncached(tmp_path, where):
    s = HostSeat(tmp_path, runtime.SeatPartition(2, 2))
    if where == "outside":
        (tmp_path / "gen").mkdir()
        src = tmp_path / "gen" / "generated.cpp"
        src.write_text(HOST_SRC)
        args = ["-c", str(src), "-o", str(tmp_path / "gen" / "generated.o")]
    elif where == "tmpxft":
        src = s.source("tmpxft_0000_00000000-6_k.cudafe1.cpp")
        args = ["-c", str(src), "-o", "k.o"]
    elif where == "nameless":  # ggml's `nvcc .c -Xcompiler --version`: nvcc compiles its ".c" to a tmpxft object
        s.source(".c")
        args = ["-x", "c++", "-c", ".c", "-o", str(tmp_path / "tmpxft_000004f5_00000000-5_.o")]
    elif where == "probe":
        src = s.source("CMakeFiles/CMakeScratch/TryCompile-x/src.cxx")
        args = ["-c", str(src), "-o", "probe.o"]
    else:
        s.source("csrc/a.cpp")
        assert s.gxx("-c", "csrc/a.cpp", "-o", "a_real.o").returncode == 0
        args = ["-shared", "a_real.o", "-o", "liba.so"]
    before = s.entries()
    proc = s.gxx(*args)
    assert proc.returncode == 0, proc.stderr
    assert s.entries() == before, "the seat neither cached nor partitioned it"
    out = Path(args[args.index("-o") + 1])
    out = out if out.is_absolute() else s.src / out
    assert out.read_bytes() != s.empty.read_bytes()


def test_host_argv_is_read_with_gcc_options():
    call = parse(["-Werror", "-c", "x.cpp", "-o", "x.o"], HOST_VALUE_OPTIONS)
    assert (call.is_compile, call.source, call.output) == (True, "x.cpp", "x.o")
    # nvcc's -Werror takes a value; read as nvcc, the same argv is not a compile.
    assert not parse(["-Werror", "-c", "x.cpp", "-o", "x.o"]).is_compile


def test_nvcc_compiles_name_the_real_host_compiler(tmp_path):
    s = HostSeat(tmp_path, None)
    args = runtime._host_compiler_args(["-c", "k.cu"], s.config)
    assert args == ["-ccbin", s.config.real_compilers["g++"]]
    assert runtime._host_compiler_args(["-ccbin=/opt/gcc/bin/g++", "-c", "k.cu"], s.config) == []
    assert runtime._host_compiler_args(["--compiler-bindir", "/opt", "-c", "k.cu"], s.config) == []


def test_a_ccbin_naming_the_host_seat_becomes_the_real_compiler(tmp_path):
    """CMake passes -ccbin <CMAKE_CXX_COMPILER>, the job's own shadow bin/c++: the cache would key on it."""
    s = HostSeat(tmp_path, None)
    seat_cxx = str(s.bin / "c++")
    real = s.config.real_compilers["c++"]
    assert runtime._unseated_ccbin(["-ccbin", seat_cxx, "-c", "k.cu"], s.config) == ["-ccbin", real, "-c", "k.cu"]
    assert runtime._unseated_ccbin([f"-ccbin={seat_cxx}", "-c"], s.config) == [f"-ccbin={real}", "-c"]
    assert runtime._unseated_ccbin(["--compiler-bindir", seat_cxx], s.config) == ["--compiler-bindir", real]
    untouched = ["-ccbin", "/opt/gcc-13/bin/g++", "-c", "k.cu"]
    assert runtime._unseated_ccbin(untouched, s.config) == untouched
