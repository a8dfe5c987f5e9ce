"""The seat's native stub (cuw/seat/seat_stub.c) against the Python seat, with the real compilers and ccache.

Two job folders of equal path length, ``a`` (native stub in front, Python seat behind it) and
``b`` (the Python seat alone), get the same sources and the same calls. Every call runs in
``b``, then in ``a`` with CUW_SEAT_STUB_NO_FALLBACK (the native stub exits 97 where it would
hand over), then in ``a`` again without it where it handed over. The work trees and seat logs
(less pid, seconds and at) must end up identical, and the native stub must have handled exactly
the calls marked ``native``: foreign TUs (stubbed) and owned ones (compiled through each job's
own ccache: the log's outcome, hit, miss or uncacheable, must agree too). The same again for a
link job's seat (no partition: every TU compiled through the cache).
"""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cuw.jobs.workspace import Workspace, seat_config
from cuw.toolchain import cache
from cuw.seat import install, runtime, seat_log
from cuw.seat import native as seat_native
from cuw.partition.rules import owner, tu_key
from cuw.toolchain.nvcc_args import SOURCE_SUFFIXES
from cuw.toolchain.toolkit import find_toolkit
from conftest import run_settings

KERNEL = "__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n"
HOST_SRC = 'extern "C" int answer() { return 42; }\n'
ARCH = ["-gencode", "arch=compute_90,code=sm_90"]
NO_FALLBACK = {"CUW_SEAT_STUB_NO_FALLBACK": "1"}
INDEX, COUNT = 1, 2


def _named(pattern: str, index: int, base: str = "") -> str:
    """The first ``pattern.format(i)`` whose key (relative to the source root, or ``base/..``) shard ``index`` owns."""
    return next(p for p in (pattern.format(i) for i in range(2000)) if owner(base + p, COUNT) == index)


F_CU = _named("csrc/k{}.cu", 2)  # foreign CUDA TU
O_CU = _named("csrc/k{}.cu", 1)  # owned CUDA TU
F_CPP = _named("csrc/h{}.cpp", 2)
O_CPP = _named("csrc/h{}.cpp", 1)
F_SPACE = _named("csrc/with space/k{}.cu", 2)
F_QUOTE = _named('csrc/q"uote{}.cu', 2)
F_UNICODE = _named("csrc/\u00fcn{}.cu", 2)
F_TMPXFT_CU = _named("csrc/tmpxft_{}.cu", 2)
F_TMPXFT_CPP = _named("csrc/tmpxft_00_{}.cudafe1.cpp", 2)
F_PROBE_CPP = _named("CMakeFiles/CMakeScratch/TryCompile-x/src{}.cxx", 2)
F_PROBE_CU = _named("CMakeFiles/CMakeScratch/TryCompile-y/k{}.cu", 2)
HOST_OUTSIDE = "gen/host_outside.cpp"  # below the job, outside the source root
HOST_BAD = "gen/host_bad.cpp"
F_SECOND = _named("csrc/s{}.cu", 2)
F_OUTSIDE = _named("../gen/x{}.cu", 2)  # a key outside the source root, still foreign by the hash
F_GENERATED = _named("csrc/generated{}.cu", 2)  # written after the seat was installed
O_GENERATED = _named("csrc/generated{}.cu", 1)  # the same, owned
O_BAD = _named("csrc/bad{}.cu", 1)  # an owned TU that does not compile
O_DC = _named("csrc/dc{}.cu", 1)
SOURCES = {
    F_CU: KERNEL,
    O_CU: KERNEL,
    F_SPACE: KERNEL,
    F_QUOTE: KERNEL,
    F_UNICODE: KERNEL,
    F_TMPXFT_CU: KERNEL,
    F_SECOND: KERNEL,
    F_CPP: HOST_SRC,
    O_CPP: HOST_SRC,
    F_TMPXFT_CPP: HOST_SRC,
    F_PROBE_CPP: HOST_SRC,
    F_PROBE_CU: KERNEL,
    ".c": "int answer(void) { return 42; }\n",
    ".hidden.c": "int answer(void) { return 42; }\n",
    O_BAD: "this is not CUDA\n",
    O_DC: KERNEL,
}
EXTRA_ARGS = ["-DCUW_EXTRA=1"]  # the recipe's nvcc_flags


@dataclass
class Case:
    name: str
    argv: list[str]
    native: bool
    """Whether the native stub must handle the call itself (else it must hand it to the Python seat)."""
    tool: str = "nvcc"
    cwd: str = "src"
    env: dict[str, str] = field(default_factory=dict)
    argv0: str = ""
    """argv[0] when it is not the path run (the tool is the name run, as for the Python script)."""
    action: str = "stubbed"
    """The seat log's last action after a call the native stub handled; empty: the call logs nothing."""
    outcome: str = ""
    """For a compile: the cache outcome both seats must log."""


NVCC_CASES = [
    Case(
        "cmake rule",
        [
            "-Xcompiler",
            "-Wall -Wextra",
            '-DNAME="a b"',
            "-MD",
            "-MT",
            "obj/f.cu.o",
            "-MF",
            "obj/f.cu.o.d",
            "-x",
            "cu",
            "-c",
            "{src}/" + F_CU,
            "-o",
            "obj/f.cu.o",
            *ARCH,
        ],
        True,
        cwd="build",
    ),
    Case(
        "torch ninja: -c -c, quoted -fPIC",
        ["-MD", "-MF", "t/f.o.d", "-c", "-c", F_CU, "-o", "t/f.o", "--compiler-options", "'-fPIC'", "-std=c++17"],
        True,
    ),
    Case(
        "torch distutils",
        [
            "-DWITH_CUDA",
            "-Icsrc",
            "-c",
            F_CU,
            "-o",
            "build/temp/f.o",
            "-D__CUDA_NO_HALF_OPERATORS__",
            "--expt-relaxed-constexpr",
            "--compiler-options",
            "'-fPIC'",
            "-O3",
            "-gencode=arch=compute_90,code=sm_90",
            "-std=c++20",
        ],
        True,
    ),
    Case("-o=", ["-c", F_CU, "-o=eq/f.o"], True),
    Case("-oFILE", ["-c", F_CU, "-oglued.o"], True),
    Case("--output-file and --dependency-output", ["--dependency-output", "d/x.d", "-c", F_CU, "--output-file", "d/x.o"], True),
    Case("-dc with -MD: depfile from the output", ["-dc", F_CU, "-o", "dc/f.o", "-MD", *ARCH], True),
    Case("--device-w with -MMD", ["--device-w", F_CU, "-o", "dw.cu.o", "-MMD"], True),
    Case("default output in the cwd", ["-c", F_CU], True),
    Case("-MF= beside -MD", ["-MD", "-MF=deps/y.d", "-c", F_CU, "-o", "y.o"], True),
    Case("'..' inside the root", ["-c", "./csrc/../" + F_CU, "-o", "dots.o"], True),
    Case("space in source and output", ["-MD", "-c", F_SPACE, "-o", "out dir/s p.o"], True),
    Case("quote in the key", ["-c", F_QUOTE, "-o", "quote.o"], True),
    Case("tmpxft name: nvcc partitions it", ["-c", F_TMPXFT_CU, "-o", "tmpxft.o"], True),
    Case("non-ASCII output: Python writes it", ["-c", F_UNICODE], False),
    Case("nvcc's -Werror takes a value: not a compile", ["-Werror", "-c", F_CU, "-o", "w.o"], True, action="passthrough"),
    Case("two sources", ["-c", F_SECOND, F_CU, "-o", "two.o"], False),
    Case("outside the source root", ["-c", "{root}/" + F_OUTSIDE.removeprefix("../"), "-o", "outside.o"], False),
    Case("'..' out of the root", ["-c", F_OUTSIDE, "-o", "up.o"], False),
    Case("generated after install", ["-c", F_GENERATED, "-o", "gen.o"], False),
    Case("a source right after an unknown option", ["-c", "--some-new-option", F_CU, "-o", "amb.o"], False),
    Case("options file", ["-optf", "opts.txt", "-c", F_CU, "-o", "optf.o"], False),
    Case("source filter active", ["-c", F_CU, "-o", "filter.o"], False, env={"CUDA_WHEELS_SHARD_COUNT": "2"}),
    Case("not a compile", ["--version"], True, action="passthrough"),
    Case(
        "preprocessing, a quote, over six arguments: six logged",
        ["-E", '-DQ="a b"', "-DW=1", "-I", "inc", "-x", "cu", F_CU, "-o", "pp.ii"],
        True,
        action="passthrough",
    ),
    Case("not a compile, non-ASCII: Python logs it", ["-E", F_UNICODE, "-o", "pp-u.ii"], False),
    Case("probe by output name", ["-c", F_CU, "-o", "cmTC_1.o", *ARCH], True, action="probe"),
    Case("probe by source", ["-c", F_PROBE_CU, "-o", "probe.o", *ARCH], True, action="probe"),
    Case("owned TU: a miss", ["-MD", "-c", O_CU, "-o", "own_o.o", *ARCH], True, action="compiled", outcome="miss"),
    Case("owned TU again: a hit", ["-MD", "-c", O_CU, "-o", "own_o.o", *ARCH], True, action="compiled", outcome="hit"),
    # The host seat as -ccbin (CMake passes its CXX) is the real g++ to the cache: the same command as above, a hit.
    Case(
        "owned, -ccbin the host seat",
        ["-MD", "-c", O_CU, "-o", "own_o.o", *ARCH, "-ccbin", "{root}/bin/g++"],
        True,
        action="compiled",
        outcome="hit",
    ),
    Case(
        "owned, -ccbin= a real compiler",
        ["-ccbin=/usr/bin/g++", "-c", O_CU, "-o", "own_eq.o", *ARCH],
        True,
        action="compiled",
        outcome="miss",
    ),
    Case(
        "owned, inherited CCACHE_ settings scrubbed",
        ["-MD", "-c", O_CU, "-o", "own_o.o", *ARCH],
        True,
        env={"CCACHE_DISABLE": "1", "CCACHE_RECACHE": "1"},
        action="compiled",
        outcome="hit",
    ),
    Case("owned -dc, spelled out", ["-dc", O_DC, "-o", "own_dc.o", "-MD", *ARCH], True, action="compiled", outcome="miss"),
    Case("owned -dc again: a hit", ["-dc", O_DC, "-o", "own_dc.o", "-MD", *ARCH], True, action="compiled", outcome="hit"),
    Case(
        "owned -rdc=true -c: the same command",
        ["-rdc=true", "-c", O_DC, "-o", "own_dc.o", "-MD", *ARCH],
        True,
        action="compiled",
        outcome="hit",
    ),
    Case("owned, default output and depfile", ["-MMD", "-c", O_CU, *ARCH], True, action="compiled", outcome="miss"),
    Case(
        "owned, a compile error",
        ["-c", O_BAD, "-o", "own_bad.o", *ARCH],
        True,
        action="compiled",
        outcome="uncacheable:compile_failed",
    ),
    Case("owned, generated after install", ["-c", O_GENERATED, "-o", "own_gen.o"], False),
    Case("owned, source filter active", ["-c", O_CU, "-o", "own_f.o"], False, env={"CUDA_WHEELS_SHARD_INDEX": "2"}),
]
HOST_CASES = [
    Case("host -MD -MF", ["-MD", "-MF", "build/x.o.d", "-c", F_CPP, "-o", "build/x.o"], True, tool="g++"),
    Case(
        "host torch distutils",
        [
            "-Wsign-compare",
            "-DNDEBUG",
            "-g",
            "-fwrapv",
            "-O3",
            "-Wall",
            "-fPIC",
            "-Icsrc",
            "-c",
            F_CPP,
            "-o",
            "build/temp/h.o",
            "-fopenmp",
            "-std=c++20",
        ],
        True,
        tool="g++",
    ),
    Case("gcc's -Werror takes none", ["-O2", "-Werror", "-fPIC", "-c", F_CPP, "-o", "w.o"], True, tool="g++"),
    Case("host -oFILE, default depfile", ["-MMD", "-c", F_CPP, "-obuild/g.o"], True, tool="c++"),
    Case("host default output, -x", ["-x", "c++", "-c", F_CPP], True, tool="gcc"),
    Case("host -o= (gcc reads it as the output too)", ["-c", F_CPP, "-o=eq.o"], True, tool="cc"),
    # The host compiler's calls that are not the build's TUs run untouched and are not logged.
    Case("host tmpxft", ["-c", F_TMPXFT_CPP, "-o", "tmpxft_host.o"], True, tool="g++", action=""),
    Case("host tmpxft output", ["-c", F_CPP, "-o", "tmpxft_0a.cudafe1.o"], True, tool="g++", action=""),
    Case("host probe", ["-c", F_PROBE_CPP, "-o", "probe.o"], True, tool="g++", action=""),
    Case(
        "host probe by cwd", ["-c", "{src}/" + F_CPP, "-o", "p.o"], True, tool="g++", cwd="build/CMakeFiles/CMakeTmp", action=""
    ),
    Case("host source outside the source root", ["-c", "{root}/" + HOST_OUTSIDE, "-o", "out.o"], True, tool="g++", action=""),
    Case("host source named only by its suffix", ["-c", ".c", "-o", "nameless.o"], True, tool="gcc", action=""),
    Case("host hidden source: Python decides", ["-c", ".hidden.c", "-o", "hidden.o"], False, tool="gcc"),
    Case("host response file", ["@opts.rsp", "-c", F_CPP, "-o", "rsp.o"], False, tool="g++"),
    Case("host preprocess", ["-E", F_CPP], True, tool="g++", action=""),
    Case("host version", ["--version"], True, tool="cc", action=""),
    Case(
        "host compile error outside the source root: its code",
        ["-c", "{root}/" + HOST_BAD, "-o", "bad.o"],
        True,
        tool="g++",
        action="",
    ),
    Case("host owned TU: a miss", ["-MD", "-c", O_CPP, "-o", "own.o"], True, tool="g++", action="compiled", outcome="miss"),
    Case("host owned TU again: a hit", ["-MD", "-c", O_CPP, "-o", "own.o"], True, tool="g++", action="compiled", outcome="hit"),
    Case(
        "host owned TU as cc: another compiler",
        ["-c", O_CPP, "-o", "own-cc.o"],
        True,
        tool="cc",
        action="compiled",
        outcome="miss",
    ),
    Case(
        "host owned TU, -O2 -fPIC",
        ["-O2", "-fPIC", "-c", O_CPP, "-o", "own-o2.o"],
        True,
        tool="c++",
        action="compiled",
        outcome="miss",
    ),
    Case("host argv[0] is not the name run", ["-c", F_CPP, "-o", "argv0.o"], True, tool="g++", argv0="cc-wrapper"),
    Case("host seat run by its own name", ["-c", F_CPP, "-o", "own-name.o"], False, tool="seat/host-cc"),
    Case("host link", ["-shared", "{root}/seat/empty.o", "-o", "liblink.so"], True, tool="g++", action=""),
]


def _workspace(root: Path) -> Workspace:
    """A job's folders as :func:`cuw.jobs.workspace.prepare` leaves them for its seat: the seat's
    folder with the empty object, and the logs."""
    ws = Workspace(root, root)
    ws.seat_dir.mkdir(parents=True)
    ws.logs.mkdir()
    install.make_empty_object(ws.empty_object, run_settings().cc)
    return ws


class Job:
    """One job folder: sources, a seat of shard 1/2 with its host seat in bin/, and a ccache."""

    def __init__(
        self, root: Path, native: bool, lane: str = "linux", partitioned: bool = True, deadline: float | None = None
    ) -> None:
        self.root = root
        self.src = root / "src"
        for rel, text in SOURCES.items():
            path = self.src / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (self.src / "opts.txt").write_text("-DX=1\n")
        (self.src / "opts.rsp").write_text("-DX=1\n")
        (root / "build" / "CMakeFiles" / "CMakeTmp").mkdir(parents=True)
        outside = root / F_OUTSIDE.removeprefix("../")
        outside.parent.mkdir(parents=True)
        outside.write_text(KERNEL)
        (root / HOST_OUTSIDE).write_text(HOST_SRC)
        (root / HOST_BAD).write_text("this is not C++\n")
        ws = _workspace(root)
        self.cache = cache.open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings())
        self.cache.prepare()
        self.empty = ws.empty_object
        self.log = ws.seat_log
        partition = runtime.SeatPartition(INDEX, COUNT) if partitioned else None
        self.config = seat_config(
            ws, find_toolkit(homes=run_settings().homes).nvcc, self.cache, partition, EXTRA_ARGS, lane, deadline
        )
        self.nvcc = install.install(ws.seat_dir, self.config)
        self.native = native and seat_native.install_native(
            root / "seat", self.config, note=root / "note.log", cc=run_settings().cc
        )
        assert self.native == native, (root / "note.log").read_text() if (root / "note.log").exists() else ""
        self.bin = root / "bin"
        self.bin.mkdir()
        install.link_host_seat(root / "seat", self.bin, self.config)
        for generated in (F_GENERATED, O_GENERATED):
            (self.src / generated).write_text(KERNEL)

    def run(self, case: Case, extra_env: dict[str, str] | None = None) -> int:
        exe = self.nvcc if case.tool == "nvcc" else self.root / case.tool if "/" in case.tool else self.bin / case.tool
        argv = [a.format(src=self.src, root=self.root) for a in case.argv]
        env = {k: v for k, v in os.environ.items() if k not in runtime.SOURCE_FILTER_VARS}
        env.update(case.env, **(extra_env or {}))
        proc = subprocess.run(
            [case.argv0 or str(exe), *argv],
            executable=str(exe),
            check=False,
            cwd=self.root / case.cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        return proc.returncode

    def snapshot(self) -> dict[str, str]:
        """The work tree (sources, build and outputs), with this job's root written as <job>."""
        out = {}
        stub = self.empty.read_bytes()
        for path in sorted(self.root.rglob("*")):
            rel = path.relative_to(self.root).as_posix()
            if not path.is_file() or rel.split("/")[0] not in ("src", "build", "gen"):
                continue
            data = path.read_bytes()
            if data == stub:
                out[rel] = "<empty object>"
            elif data.startswith(b"\x7fELF"):
                out[rel] = "<compiled object>"  # nvcc embeds per-build ids: compare what it is, not its bytes
            else:
                out[rel] = data.decode("utf-8", "replace").replace(str(self.root), "<job>")
        return out

    def entries(self) -> list[dict]:
        drop = ("pid", "seconds", "at", "cpu_s", "peak_mb")
        return [
            {k: (v.replace(str(self.root), "<job>") if isinstance(v, str) else v) for k, v in e.items() if k not in drop}
            for e in seat_log.read_log(self.log)
        ]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[Job, Job]:
    base = tmp_path_factory.mktemp("stub")
    return Job(base / "a", native=True), Job(base / "b", native=False)


@pytest.fixture(scope="module")
def link_jobs(tmp_path_factory) -> tuple[Job, Job]:
    base = tmp_path_factory.mktemp("link")
    return Job(base / "a", native=True, partitioned=False), Job(base / "b", native=False, partitioned=False)


def _compare(native_job: Job, python_job: Job, case: Case) -> None:
    logged = len(python_job.entries())
    rc_python = python_job.run(case)
    before = native_job.snapshot(), native_job.entries()
    rc_native = native_job.run(case, NO_FALLBACK)
    handled = rc_native != 97
    if not handled:
        assert (native_job.snapshot(), native_job.entries()) == before, "a call it handed over left no trace"
        rc_native = native_job.run(case)  # the exec into the Python seat
    assert handled == case.native, f"native stub {'handled' if handled else 'handed over'} {case.argv}"
    assert rc_native == rc_python
    assert native_job.snapshot() == python_job.snapshot()
    assert native_job.entries() == python_job.entries()
    if handled and case.action:
        assert len(python_job.entries()) == logged + 1 and python_job.entries()[-1]["action"] == case.action
    elif handled:
        assert len(python_job.entries()) == logged, "a call that is not the build's TU is not logged"
    if case.outcome:
        assert python_job.entries()[-1]["outcome"] == case.outcome
        raw = seat_log.read_log(native_job.log)[-1]
        assert isinstance(raw["seconds"], float) and isinstance(raw["at"], float) and raw["pid"] > 0
        for seat in (native_job, python_job):
            _assert_measured(seat_log.read_log(seat.log)[-1], case.outcome == "miss")


def _assert_measured(entry: dict, miss: bool) -> None:
    """A compile's CPU seconds and peak memory, from either seat: a miss really ran the compiler
    (cicc or cc1plus: more than a few MB, more than a few ms); a hit ran ccache alone."""
    assert isinstance(entry["cpu_s"], float) and isinstance(entry["peak_mb"], int), entry
    if miss:
        assert entry["cpu_s"] > 0.01 and entry["peak_mb"] >= 10, entry
    else:
        assert 0 <= entry["cpu_s"] < 5 and entry["peak_mb"] > 0, entry


@pytest.mark.parametrize("case", NVCC_CASES + HOST_CASES, ids=lambda c: c.name)
def test_native_stub_matches_the_python_seat(jobs, case):
    _compare(*jobs, case)


LINK_CASES = [
    Case(
        "link: a shard's foreign TU compiles", ["-MD", "-c", F_CU, "-o", "l_f.o", *ARCH], True, action="compiled", outcome="miss"
    ),
    Case("link: again, a hit", ["-MD", "-c", F_CU, "-o", "l_f.o", *ARCH], True, action="compiled", outcome="hit"),
    Case("link: generated after install", ["-c", F_GENERATED, "-o", "l_gen.o"], True, action="compiled", outcome="miss"),
    Case(
        "link: the source filter's variables",
        ["-c", F_CU, "-o", "l_sf.o"],
        True,
        action="compiled",
        outcome="miss",
        env={"CUDA_WHEELS_SHARD_INDEX": "2", "CUDA_WHEELS_SHARD_COUNT": "2"},
    ),
    Case("link: non-ASCII key", ["-c", F_UNICODE, "-o", "l_u.o"], False),
    Case("link: outside the source root", ["-c", F_OUTSIDE, "-o", "l_up.o"], False),
    Case("link: probe", ["-c", F_CU, "-o", "cmTC_2.o"], True, action="probe"),
    Case("link: not a compile", ["--version"], True, action="passthrough"),
    Case("link: host link", ["-shared", "{root}/seat/empty.o", "-o", "liblink.so"], True, tool="g++", action=""),
    Case("link: host TU", ["-MD", "-c", F_CPP, "-o", "l_h.o"], True, tool="g++", action="compiled", outcome="miss"),
    Case("link: host TU again", ["-MD", "-c", F_CPP, "-o", "l_h.o"], True, tool="g++", action="compiled", outcome="hit"),
    Case("link: host tmpxft", ["-c", F_TMPXFT_CPP, "-o", "l_tmpxft.o"], True, tool="g++", action=""),
]


@pytest.mark.parametrize("case", LINK_CASES, ids=lambda c: c.name)
def test_the_link_jobs_native_seat_matches_the_python_seat(link_jobs, case):
    _compare(*link_jobs, case)


DEADLINE_CASES = [
    Case(
        "before the deadline: an owned TU compiles", ["-c", O_CU, "-o", "d_o.o", *ARCH], True, action="compiled", outcome="miss"
    ),
    Case(
        "the tests' count of compiles reached: an owned TU is deferred",
        ["-MD", "-c", O_DC, "-o", "d_dc.o", *ARCH],
        False,
        env={runtime.DEADLINE_AFTER_VAR: "1"},
        action="deferred",
    ),
    Case("a foreign TU is stubbed as ever", ["-c", F_CU, "-o", "d_f.o", *ARCH], True),
]
PAST_DEADLINE_CASES = [
    Case("past the deadline: an owned TU is deferred", ["-MD", "-c", O_CU, "-o", "p_o.o", *ARCH], False, action="deferred"),
    Case("past the deadline: an owned host TU is deferred", ["-c", O_CPP, "-o", "p_h.o"], False, tool="g++", action="deferred"),
    Case("past the deadline: a foreign TU is stubbed natively", ["-c", F_CU, "-o", "p_f.o", *ARCH], True),
    Case("past the deadline: a probe still compiles", ["-c", O_CU, "-o", "cmTC_9.o"], True, action="probe"),
]


@pytest.fixture(scope="module")
def deadline_jobs(tmp_path_factory) -> tuple[Job, Job]:
    base = tmp_path_factory.mktemp("deadline")
    far = time.time() + 86400
    return Job(base / "a", native=True, deadline=far), Job(base / "b", native=False, deadline=far)


@pytest.fixture(scope="module")
def past_deadline_jobs(tmp_path_factory) -> tuple[Job, Job]:
    base = tmp_path_factory.mktemp("past")
    past = time.time() - 1
    return Job(base / "a", native=True, deadline=past), Job(base / "b", native=False, deadline=past)


@pytest.mark.parametrize("case", DEADLINE_CASES, ids=lambda c: c.name)
def test_an_owned_compile_after_the_deadline_is_deferred_through_either_seat(deadline_jobs, case):
    _compare(*deadline_jobs, case)
    assert deadline_jobs[1].entries()[-1]["action"] == case.action


@pytest.mark.parametrize("case", PAST_DEADLINE_CASES, ids=lambda c: c.name)
def test_a_deadline_passed_defers_every_owned_compile_and_nothing_else(past_deadline_jobs, case):
    native_job, python_job = past_deadline_jobs
    _compare(native_job, python_job, case)
    last = python_job.entries()[-1]
    assert last["action"] == case.action
    if case.action == "deferred":
        out = python_job.src / case.argv[case.argv.index("-o") + 1]
        assert out.read_bytes() == python_job.empty.read_bytes()  # the build goes on: an empty object stands in


CONFTEST_CASES = [
    Case("foreign TU, the job below a folder named conftest", ["-c", F_CU, "-o", "c_f.o", *ARCH], True),
    Case("owned TU there: compiled, cached", ["-c", O_CU, "-o", "c_o.o", *ARCH], True, action="compiled", outcome="miss"),
    Case("a probe inside the tree is still one", ["-c", F_CU, "-o", "cmTC_3.o"], True, action="probe"),
]


@pytest.fixture(scope="module")
def conftest_jobs(tmp_path_factory) -> tuple[Job, Job]:
    """Jobs whose folder lies below one named ``conftest`` (a probe marker): above the tree, it is not a probe."""
    base = tmp_path_factory.mktemp("work") / "conftest"
    return Job(base / "a", native=True), Job(base / "b", native=False)


@pytest.mark.parametrize("case", CONFTEST_CASES, ids=lambda c: c.name)
def test_probe_markers_count_only_below_the_jobs_tree(conftest_jobs, case):
    _compare(*conftest_jobs, case)


def test_the_foreign_table_is_the_partition_rule(jobs):
    native_job, _ = jobs
    table = (native_job.root / "seat" / seat_native.NATIVE_TABLE).read_text(encoding="utf-8")
    keys = {line.split("\t")[0]: int(line.split("\t")[1]) for line in table.split("keys\n", 1)[1].splitlines()}
    every = [
        tu_key(str(p), str(native_job.src))
        for p in native_job.src.rglob("*")
        if p.name.endswith(SOURCE_SUFFIXES) and p.name not in SOURCE_SUFFIXES  # ".c" alone names no TU
    ]
    assert F_CU in keys and O_CU not in keys and F_GENERATED not in keys
    generated = (F_GENERATED, O_GENERATED)
    assert keys == {k: owner(k, COUNT) for k in every if owner(k, COUNT) != INDEX and k not in generated}
    owned = {
        line.split("\t")[0]: int(line.split("\t")[1]) for line in table.split("\nowned\n", 1)[1].split("\nkeys\n")[0].splitlines()
    }
    assert owned == {k: INDEX for k in every if owner(k, COUNT) == INDEX and k not in generated}


def test_windows_lanes_compile_every_host_tu(tmp_path):
    job = Job(tmp_path / "w", native=True, lane="windows")
    assert job.run(Case("host", ["-c", F_CPP, "-o", "x.o"], False, tool="g++"), NO_FALLBACK) == 0
    assert [(e["action"], e["kind"], e["owner"], e["outcome"]) for e in job.entries()] == [("compiled", "host", None, "miss")]
    assert job.run(Case("nvcc", ["-c", F_CU, "-o", "k.o"], True), NO_FALLBACK) == 0  # CUDA TUs still partitioned
    assert job.entries()[-1]["action"] == "stubbed"


def test_a_job_folder_with_odd_characters_gets_the_native_stub(tmp_path):
    job = Job(tmp_path / 'job with sp\u00e4ce "and" quotes', native=True)
    assert job.run(Case("stub", ["-MD", "-c", F_CU, "-o", "k.o"], True), NO_FALLBACK) == 0
    assert job.entries() == [{"action": "stubbed", "key": F_CU, "output": "k.o", "owner": 2}]
    assert (job.src / "k.d").read_text() == "k.o:\n"


def test_without_a_c_compiler_the_python_seat_stays_and_says_so(tmp_path, monkeypatch):
    root = tmp_path / "j"
    ws = _workspace(root)
    (ws.src / F_CU).parent.mkdir(parents=True)
    (ws.src / F_CU).write_text(KERNEL)
    config = seat_config(
        ws,
        find_toolkit(homes=run_settings().homes).nvcc,
        cache.open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings()),
        runtime.SeatPartition(INDEX, COUNT),
    )
    script = install.install(ws.seat_dir, config)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    note = root / "build.log"
    assert not seat_native.install_native(root / "seat", config, note=note, cc=run_settings().cc)
    assert script.read_text().startswith("#!")  # still the Python seat
    assert sorted(p.name for p in ws.seat_dir.iterdir()) == ["empty.c", "empty.o", "host-cc", "nvcc", "seat.json"]
    assert note.read_text().count("\n") == 1 and "native stub not built" in note.read_text()
    proc = subprocess.run([str(script), "-c", F_CU, "-o", "k.o"], check=False, cwd=root / "src", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [e["action"] for e in seat_log.read_log(ws.seat_log)] == ["stubbed"]


def test_a_seat_without_partition_keeps_the_python_scripts(tmp_path):
    ws = _workspace(tmp_path)
    ws.src.mkdir()
    # A link's seat (no partition) whose owned compile the table cannot hold (a flag with a newline).
    job_cache = cache.open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings())
    config = seat_config(ws, find_toolkit(homes=run_settings().homes).nvcc, job_cache, None, ["-DTWO_LINES=a\nb"])
    script = install.install(ws.seat_dir, config)
    assert not seat_native.install_native(ws.seat_dir, config, cc=run_settings().cc)
    assert script.read_text().startswith("#!") and not (ws.seat_dir / seat_native.NATIVE_TABLE).exists()


def test_a_link_seat_gets_the_native_stub(tmp_path):
    job = Job(tmp_path / "l", native=True, partitioned=False)
    table = (job.root / "seat" / seat_native.NATIVE_TABLE).read_text(encoding="utf-8")
    assert "partition\t" not in table and table.endswith("owned\nkeys\n"), "no partition: no keys"
    assert job.run(Case("k", ["-c", F_CU, "-o", "k.o"], True), NO_FALLBACK) == 0
    assert [(e["action"], e["owner"], e["outcome"]) for e in job.entries()] == [("compiled", None, "miss")]


LOCALES = [
    {"LANG": "C"},
    {},
    {"LC_CTYPE": "POSIX"},
    {"LANG": "C", "LC_ALL": "C"},
    {"LANG": "C.UTF-8"},
    {"LC_CTYPE": "no_such_locale"},
]


def test_an_owned_compile_hashes_the_same_through_either_seat_in_any_locale(tmp_path):
    """The cache hashes LC_CTYPE, and the Python seat's interpreter coerces a C locale's (PEP 538):
    a TU the Python seat compiled on a shard (a file generated after install) must hit through the
    native seat on the link job, and the other way round."""
    job = Job(tmp_path / "j", native=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    base = {k: v for k, v in base.items() if k not in runtime.SOURCE_FILTER_VARS}
    for i, locale_env in enumerate(LOCALES):
        env = {**base, **locale_env}
        argv = ["-c", O_CPP, "-o", f"loc{i}.o"]
        first, second = (
            (job.root / "seat" / "python" / "g++", job.bin / "g++")
            if i % 2
            else (job.bin / "g++", job.root / "seat" / "python" / "g++")
        )
        assert subprocess.run([str(first), *argv], cwd=job.src, env={**env, **NO_FALLBACK}, check=False).returncode == 0
        assert subprocess.run([str(second), *argv], cwd=job.src, env={**env, **NO_FALLBACK}, check=False).returncode == 0
        assert job.entries()[-1]["outcome"] == "hit", f"{locale_env}: the second seat missed what the first compiled"


def _static_c_library() -> bool:
    """Whether this machine's C compiler links a static program (its C library's static archive installed)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "t.c").write_text("int main(void) { return 0; }\n")
        cmd = [install.c_compiler(run_settings().cc), "-static", "t.c", "-o", "t"]
        return subprocess.run(cmd, cwd=tmp, capture_output=True, check=False).returncode == 0


def _has_interpreter(path: Path) -> bool:
    """Whether an ELF64 little-endian executable names a dynamic loader (a PT_INTERP program header)."""
    data = path.read_bytes()
    assert data[:6] == b"\x7fELF\x02\x01", path
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    return any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))


def test_the_stub_starts_without_the_dynamic_loader_where_it_can_and_leaves_no_stats_log(tmp_path):
    """Each call starts the stub: it is linked statically where the C library allows it (and compiled
    once for both seats), and an owned compile's stats log is a memory file, so the seat folder and
    the logs keep no file of it."""
    job = Job(tmp_path / "j", native=True)
    static = _static_c_library()
    for name in ("nvcc", runtime.HOST_SCRIPT):
        assert _has_interpreter(job.root / "seat" / name) != static, f"{name}: static C library here: {static}"
    # One compile serves both seats: the host seat is the nvcc seat's file, linked.
    assert os.path.samefile(job.root / "seat" / "nvcc", job.root / "seat" / runtime.HOST_SCRIPT)
    assert job.run(Case("own", ["-c", O_CPP, "-o", "own.o"], True, tool="g++"), NO_FALLBACK) == 0
    assert job.entries()[-1]["outcome"] == "miss"
    assert job.run(Case("own", ["-c", O_CPP, "-o", "own.o"], True, tool="g++"), NO_FALLBACK) == 0
    assert job.entries()[-1]["outcome"] == "hit"
    leftovers = [p.name for folder in (job.root / "seat", job.log.parent) for p in folder.iterdir() if "statslog" in p.name]
    assert leftovers == []


def test_the_locale_coercion_is_the_tables_answer_asked_at_install(tmp_path):
    """Which LC_CTYPE the Python seat's interpreter coerces a C locale to, and whether the job's own
    locale loads, is asked of the C library once at install (native.py _locale_lines): the table
    holds the interpreter's answers, and the stub hands the cache the table's, not the library's;
    with a LOCPATH, or a name the table does not hold, it asks the library per call."""
    job = Job(tmp_path / "j", native=True)
    table_path = job.root / "seat" / seat_native.NATIVE_TABLE
    table = table_path.read_text(encoding="utf-8")
    answers = dict(line.split("\t", 1) for line in table.splitlines() if line.startswith("ctype_"))
    python = (job.root / "seat" / "python" / "nvcc").read_text().splitlines()[0][2:].split()[0]
    base = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_CTYPE", "LANG", "LOCPATH")}
    base = {k: v for k, v in base.items() if k not in runtime.SOURCE_FILTER_VARS}

    def interpreter(env: dict[str, str]) -> str:
        """The LC_CTYPE the Python seat's interpreter runs its compile with ("unset": none)."""
        code = "import os; print(os.environ.get('LC_CTYPE', 'unset'))"
        return subprocess.run([python, "-IS", "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()

    assert answers["ctype_c"] == interpreter(base) != "unset"
    name = os.environ.get("LC_CTYPE") or os.environ.get("LANG")
    loads = name if name and name not in ("C", "POSIX") and interpreter({**base, "LC_CTYPE": name}) == name else None
    assert answers.get("ctype_loads") == loads

    # The cache as the stub runs it, through a wrapper that writes down the LC_CTYPE it got.
    seen = tmp_path / "seen.txt"
    wrapper = tmp_path / "cache-wrapper"
    wrapper.write_text(f"#!/bin/sh\nprintf '%s\\n' \"${{LC_CTYPE-unset}}\" >> '{seen}'\nexec '{job.config.cache_cmd}' \"$@\"\n")
    wrapper.chmod(0o755)
    lines = [line for line in table.splitlines(keepends=True) if not line.startswith("ctype_")]
    head = lines.index("owned\n")
    lines[head:head] = ["ctype_c\tfrom-the-table\n", "ctype_loads\tno_such_locale.but-the-table-says-so\n"]
    table_path.write_text("".join(lines).replace(f"cache\t{job.config.cache_cmd}\n", f"cache\t{wrapper}\n"), encoding="utf-8")
    calls = [
        ({}, "from-the-table"),
        ({"LC_CTYPE": "POSIX"}, "from-the-table"),
        ({"LANG": "C"}, "from-the-table"),
        ({"LC_CTYPE": "no_such_locale.but-the-table-says-so"}, "no_such_locale.but-the-table-says-so"),
        ({"LC_CTYPE": "another_missing_locale"}, interpreter({**base, "LC_CTYPE": "another_missing_locale"})),
        ({"LOCPATH": str(tmp_path)}, interpreter({**base, "LOCPATH": str(tmp_path)})),
        ({"LC_ALL": "C"}, "unset"),
    ]
    for i, (locale_env, _) in enumerate(calls):
        argv = [str(job.bin / "g++"), "-c", O_CPP, "-o", f"loc{i}.o"]
        assert subprocess.run(argv, cwd=job.src, env={**base, **locale_env, **NO_FALLBACK}, check=False).returncode == 0
    assert seen.read_text().splitlines() == [expected for _, expected in calls]

    # A call that is not one of the build's TUs (preprocessing) runs the real compiler with the same LC_CTYPE.
    real = job.config.real_compilers["g++"]
    seen_real = tmp_path / "seen-real.txt"
    real_wrapper = tmp_path / "g++-wrapper"
    real_wrapper.write_text(f"#!/bin/sh\nprintf '%s\\n' \"${{LC_CTYPE-unset}}\" >> '{seen_real}'\nexec '{real}' \"$@\"\n")
    real_wrapper.chmod(0o755)
    table = table_path.read_text(encoding="utf-8")
    table_path.write_text(table.replace(f"real\tg++\t{real}\n", f"real\tg++\t{real_wrapper}\n"), encoding="utf-8")
    for i, (locale_env, _) in enumerate(calls):
        argv = [str(job.bin / "g++"), "-E", O_CPP, "-o", f"pre{i}.ii"]
        assert subprocess.run(argv, cwd=job.src, env={**base, **locale_env, **NO_FALLBACK}, check=False).returncode == 0
    assert seen_real.read_text().splitlines() == [expected for _, expected in calls]
