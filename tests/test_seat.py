"""The seat with the real nvcc and the real ccache."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path


from cuw.base.records import SeatLogEntry
from cuw.jobs.workspace import Workspace, seat_config
from cuw.toolchain import cache
from cuw.seat import install, runtime, seat_log
from cuw.partition.rules import owner, tu_key
from cuw.toolchain.toolkit import find_toolkit, make_shadow_home
from conftest import run_settings

KERNEL = """
__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }
extern "C" void launch(float* x) { k<<<1, 32>>>(x); }
"""
ARCH = ["-gencode", "arch=compute_90,code=sm_90"]


class Seat:
    def __init__(self, root: Path, partition: runtime.SeatPartition | None, extra_args: list[str] | None = None) -> None:
        self.root = root
        ws = Workspace(root, root)
        self.src = ws.src
        self.src.mkdir(parents=True)
        self.cache = cache.open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings())
        self.cache.prepare()
        self.cache_dir = self.cache.cache_dir
        ws.seat_dir.mkdir()
        ws.logs.mkdir()
        empty = install.make_empty_object(ws.empty_object, run_settings().cc)
        self.log = ws.seat_log
        self.toolkit = find_toolkit(homes=run_settings().homes)
        config = seat_config(ws, self.toolkit.nvcc, self.cache, partition, extra_args or [])
        self.exe = install.install(ws.seat_dir, config)
        self.empty = empty

    def run(self, *args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
        full_env = dict(os.environ, **(env or {}))
        return subprocess.run([str(self.exe), *args], cwd=cwd or self.src, env=full_env, capture_output=True, text=True)

    def entries(self) -> list[dict]:
        return seat_log.read_log(self.log)


def _source(seat_: Seat, rel: str) -> Path:
    path = seat_.src / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KERNEL)
    return path


def _key_owned_by(index: int, count: int) -> str:
    for i in range(1000):
        key = f"kernels/k{i}.cu"
        if owner(key, count) == index:
            return key
    raise AssertionError


def test_owned_tu_compiles_through_the_cache_and_hits_the_second_time(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 1))
    src = _source(s, "kernels/a.cu")
    for _ in range(2):
        proc = s.run("-MD", "-MF", "a.o.d", "-c", "-c", str(src), "-o", "a.o", *ARCH)
        assert proc.returncode == 0, proc.stderr
    outcomes = [e["outcome"] for e in s.entries() if e["action"] == "compiled"]
    assert outcomes == ["miss", "hit"]
    assert (s.src / "a.o.d").read_text().startswith("a.o:")
    stats = s.cache.stats()
    assert (stats.hits, stats.misses) == (1, 1)


def test_a_compile_measured_by_the_seat_travels_through_the_timeline_and_the_report(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 1))
    src = _source(s, "kernels/a.cu")
    assert s.run("-c", str(src), "-o", "a.o", *ARCH).returncode == 0
    (entry,) = [e for e in seat_log.read_entries(s.log) if e.is_compile]
    # cicc alone needs well over 10 MB; nvcc's passes take more than 10 ms of CPU
    assert entry.cpu_s is not None and entry.peak_mb is not None and entry.seconds is not None, entry
    assert entry.cpu_s > 0.01 and entry.peak_mb >= 10, entry
    row = seat_log.timeline_row(entry)
    assert row is not None and row[4:] == [entry.cpu_s, entry.peak_mb]
    back = seat_log.timeline_entry(row)
    assert back is not None and (back.cpu_s, back.peak_mb, back.key) == (entry.cpu_s, entry.peak_mb, "kernels/a.cu")
    old = seat_log.timeline_entry(row[:4])  # a manifest from before the measurement: read, unmeasured
    assert old is not None and old.cpu_s is None and old.seconds == entry.seconds
    assert seat_log.timeline_entry(row[:5]) is None
    other = replace(entry, cpu_s=1.5, peak_mb=entry.peak_mb + 100)
    unmeasured = SeatLogEntry("compiled", key="b.cu")
    assert seat_log.measured_totals([entry, other, unmeasured]) == {
        "cpu_s": round(entry.cpu_s + 1.5, 3),
        "peak_mb": entry.peak_mb + 100,
    }
    assert seat_log.measured_totals([replace(unmeasured, seconds=1.0)]) == {"cpu_s": None, "peak_mb": None}


def test_foreign_tu_gets_the_empty_object_and_a_depfile(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 2))
    key = _key_owned_by(2, 2)
    src = _source(s, key)
    out = s.src / "obj" / "x.cu.o"
    proc = s.run("-MD", "-MT", "obj/x.cu.o", "-MF", "obj/x.cu.o.d", "-x", "cu", "-c", str(src), "-o", "obj/x.cu.o", *ARCH)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == s.empty.read_bytes()
    assert (s.src / "obj" / "x.cu.o.d").read_text().strip() == "obj/x.cu.o:"
    (entry,) = s.entries()
    assert entry == {**entry, "action": "stubbed", "key": key, "owner": 2}
    assert s.cache.stats().total == 0


def test_probe_tus_always_compile_for_real_and_uncached(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 2))
    key = "CMakeFiles/CMakeScratch/TryCompile-abc/" + _key_owned_by(2, 2).split("/")[-1]
    src = _source(s, key)
    proc = s.run("-c", str(src), "-o", str(src.with_suffix(".o")), *ARCH)
    assert proc.returncode == 0, proc.stderr
    assert src.with_suffix(".o").read_bytes() != s.empty.read_bytes()
    assert [e["action"] for e in s.entries()] == ["probe"]
    assert s.cache.stats().total == 0


def test_a_work_folder_named_like_a_probe_above_the_tree_is_not_a_probe(tmp_path):
    """Markers count in path components below the job's tree: a farm whose work folder is
    ``.../conftest/...`` still stubs foreign TUs and caches owned ones."""
    s = Seat(tmp_path / "conftest" / "job", runtime.SeatPartition(1, 2))
    foreign, owned = _source(s, _key_owned_by(2, 2)), _source(s, _key_owned_by(1, 2))
    assert s.run("-c", str(foreign), "-o", "f.o", *ARCH).returncode == 0
    assert s.run("-c", str(owned), "-o", "o.o", *ARCH).returncode == 0
    assert [e["action"] for e in s.entries()] == ["stubbed", "compiled"]
    call = runtime.parse(["-c", "/w/conftest/job/src/a.cu", "-o", "a.o"])
    assert not runtime.is_probe(call, "/w/conftest/job/build", "/w/conftest/job")
    assert runtime.is_probe(call, "/w/conftest/job/build", "")  # without the tree, every component counts
    scratch = "/w/conftest/job/build/CMakeFiles/CMakeScratch/TryCompile-x"
    assert runtime.is_probe(runtime.parse(["-c", f"{scratch}/src.cu", "-o", "a.o"]), scratch, "/w/conftest/job")
    assert runtime.is_probe(runtime.parse(["-c", "conftest.cu", "-o", "conftest.o"]), "/tmp/x", "/w/conftest/job")


def test_non_compiles_pass_through_untouched(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 2))
    proc = s.run("--version")
    assert proc.returncode == 0 and "release 13" in proc.stdout
    assert [e["action"] for e in s.entries()] == ["passthrough"]


def test_dc_after_c_returns_relocatable_device_code(tmp_path):
    """ccache does not hash nvcc's -dc: the seat spells it out as -rdc=true -c."""
    s = Seat(tmp_path, None)
    src = _source(s, "kernels/r.cu")
    assert s.run("-c", str(src), "-o", "plain.o", *ARCH).returncode == 0
    assert s.run("-dc", str(src), "-o", "reloc.o", *ARCH).returncode == 0
    assert b"__nv_relfatbin" not in (s.src / "plain.o").read_bytes()
    assert b"__nv_relfatbin" in (s.src / "reloc.o").read_bytes()
    assert [e["outcome"] for e in s.entries()] == ["miss", "miss"]


def test_ccache_alone_shows_the_dc_defect_the_seat_guards(tmp_path):
    """The control: without the seat, ccache hands back the -c object for -dc."""
    toolkit = find_toolkit(homes=run_settings().homes)
    (tmp_path / "src").mkdir()
    src = tmp_path / "src" / "r.cu"
    src.write_text(KERNEL)
    ccache = cache.open_cache("ccache", tmp_path / "cache", tmp_path, settings=run_settings())
    ccache.prepare()
    env = cache.scrub(dict(os.environ))
    env.update(ccache.env)
    for flag, out in (("-c", "plain.o"), ("-dc", "reloc.o")):
        subprocess.run([ccache.binary(), str(toolkit.nvcc), flag, str(src), "-o", out, *ARCH], cwd=tmp_path, env=env, check=True)
    assert b"__nv_relfatbin" not in (tmp_path / "reloc.o").read_bytes()


def test_partitioning_seat_refuses_when_the_source_filter_is_active(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 2))
    src = _source(s, "kernels/a.cu")
    proc = s.run("-c", str(src), "-o", "a.o", *ARCH, env={"CUDA_WHEELS_SHARD_COUNT": "2", "CUDA_WHEELS_SHARD_INDEX": "1"})
    assert proc.returncode == runtime.DOUBLE_PARTITION_EXIT
    assert "1/N^2" in proc.stderr
    assert not (s.src / "a.o").exists()


def test_pass_through_seat_ignores_source_filter_variables(tmp_path):
    s = Seat(tmp_path, None)
    src = _source(s, "kernels/a.cu")
    proc = s.run("-c", str(src), "-o", "a.o", *ARCH, env={"CUDA_WHEELS_SHARD_COUNT": "2", "CUDA_WHEELS_SHARD_INDEX": "1"})
    assert proc.returncode == 0, proc.stderr
    assert s.entries()[0]["owner"] is None


def test_shadow_cuda_home_reaches_the_seat(tmp_path):
    """Builds that run $CUDA_HOME/bin/nvcc by path (torch's distutils path) reach the seat."""
    s = Seat(tmp_path / "job", runtime.SeatPartition(1, 1))
    shadow = make_shadow_home(s.toolkit, tmp_path / "cuda", s.exe)
    assert (shadow / "include" / "cuda_runtime.h").exists()
    assert os.path.realpath(shadow / "bin" / "ptxas") == os.path.realpath(s.toolkit.home / "bin" / "ptxas")
    src = _source(s, "kernels/a.cu")
    proc = subprocess.run(
        [str(shadow / "bin" / "nvcc"), "-c", str(src), "-o", "a.o", *ARCH], cwd=s.src, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert [e["action"] for e in s.entries()] == ["compiled"]
    # The forge never mistakes a shadow for the real toolkit.
    assert find_toolkit(homes=run_settings().homes).home == s.toolkit.home


def test_compile_error_exit_code_is_kept_and_logged(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 1))
    src = s.src / "bad.cu"
    src.write_text("__global__ void k() { undefined_thing(); }\n")
    proc = s.run("-c", str(src), "-o", "bad.o", *ARCH)
    assert proc.returncode != 0
    assert "bad.cu(1): error" in proc.stderr
    (entry,) = s.entries()
    assert entry["rc"] != 0 and entry["key"] == tu_key(str(src), str(s.src))


def test_recipe_nvcc_flags_reach_an_owned_compile(tmp_path):
    s = Seat(tmp_path, runtime.SeatPartition(1, 1), extra_args=["-DCUW_FROM_RECIPE=7"])
    src = s.src / "flags.cu"
    src.write_text("#if CUW_FROM_RECIPE != 7\n#error the recipe's nvcc_flags did not arrive\n#endif\n" + KERNEL)
    proc = s.run("-c", str(src), "-o", "flags.o", *ARCH)
    assert proc.returncode == 0, proc.stderr


# nvcc -v prints each step it runs; only with --threads N does it run them on workers that write to
# their own files, and it prints that redirection: the real nvcc's own word that it ran threaded.
THREADED_STEP = re.compile(r"_stdout 2>\S*_stderr")
TWO_ARCHS = [*ARCH, "-gencode", "arch=compute_80,code=sm_80"]  # --threads parallelizes across targets


def test_nvcc_threads_runs_every_owned_compile_threaded_through_either_seat(recipes_dir, tmp_path):
    """``nvcc_threads: 2`` in the recipe file: an owned TU, compiled by the native stub and by the
    Python seat behind it, makes the real nvcc run its steps threaded; a foreign TU runs no nvcc."""
    from cuw.jobs.workspace import Workspace, prepare
    from cuw.partition.assignment import recipe_assignment
    from cuw.partition.rules import ShardSpec
    from cuw.config.recipe import load_recipe

    toolkit = find_toolkit(homes=run_settings().homes)
    control = subprocess.run(
        [str(toolkit.nvcc), "-v", "--dryrun", "-c", "x.cu", "-o", "x.o", *TWO_ARCHS], cwd=tmp_path, capture_output=True, text=True
    )
    assert "cicc" in control.stderr and not THREADED_STEP.search(control.stderr), "the marker is --threads' alone"

    yml = recipes_dir / "example" / "recipe.yml"
    yml.write_text(yml.read_text() + "nvcc_threads: 2\n")
    recipe = load_recipe("example", recipes_dir)
    assert recipe.nvcc_threads == 2
    ws = Workspace(tmp_path / "job", tmp_path / "job")
    prepare(ws, recipe, toolkit, ShardSpec(1, 2), "ccache", settings=run_settings())
    rule = recipe_assignment(recipe, 2)
    kernels = sorted(p.relative_to(ws.src).as_posix() for p in (ws.src / "csrc/kernels").glob("*.cu"))
    owned = [k for k in kernels if rule.owner(k) == 1][:2]  # a TU each: each compile a miss (a hit replays output)
    foreign = next(k for k in kernels if rule.owner(k) == 2)
    env = {k: v for k, v in os.environ.items() if k not in runtime.SOURCE_FILTER_VARS}
    seats = {
        "native": (ws.seat_dir / "nvcc", {"CUW_SEAT_STUB_NO_FALLBACK": "1"}),
        "python": (ws.seat_dir / "python" / "nvcc", {}),
    }
    assert not seats["native"][0].read_bytes().startswith(b"#!"), "the native stub is in front"

    assert len(owned) == 2
    for (name, (exe, extra_env)), tu in zip(seats.items(), owned):
        argv = [str(exe), "-v", "-c", tu, "-o", f"{name}.o", *TWO_ARCHS]
        proc = subprocess.run(argv, cwd=ws.src, env={**env, **extra_env}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        steps = THREADED_STEP.findall(proc.stderr)
        assert len(steps) >= 4, f"{name} seat: nvcc ran unthreaded:\n{proc.stderr[-3000:]}"
        last = seat_log.read_log(ws.seat_log)[-1]
        assert (last["action"], last["key"], last["outcome"]) == ("compiled", tu, "miss")

        proc = subprocess.run(
            [str(exe), "-v", "-c", foreign, "-o", f"{name}-foreign.o", *TWO_ARCHS],
            cwd=ws.src,
            env={**env, **extra_env},
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and "cicc" not in proc.stderr, proc.stderr
        assert seat_log.read_log(ws.seat_log)[-1]["action"] == "stubbed"
