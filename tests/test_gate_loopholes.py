"""The shard gate's loopholes, closed and shown with the real tools: keep-going shard builds
(ninja, torch's ninja path, make), owned TUs a failed build never compiled, a cache with no
real entries, a retried shard on a warm remote, the progress reader and the build child on an
interrupt, and a job prepared without a C compiler."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuw.base.errors import CuwError
from cuw.jobs import backends
from cuw.config.policy import CacheChoice
from cuw.jobs import process
from cuw.seat import install, seat_log
from cuw.partition.assignment import recipe_assignment
from cuw.jobs.backends import build_env
from cuw.toolchain.cache import Ccache, open_cache
from cuw.partition.rules import ShardSpec
from cuw.jobs.local import run_build
from cuw.jobs.shard import run_shard
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import find_toolkit
from cuw.jobs.workspace import Workspace, install_ninja_wrapper, prepare
from conftest import run_settings, trim_example

# -- keep-going builds ----------------------------------------------------------------------

_FAILING_FIRST = """rule run
  command = $cmd
build first: run
  cmd = sh -c 'echo first; exit 1'
build second: run
  cmd = sh -c 'echo second > second.out'
"""


def _shard_and_link_env(tmp_path: Path, recipe) -> tuple[dict[str, str], dict[str, str]]:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    assert install_ninja_wrapper(cuda / "bin", run_settings().path) is not None
    base = {"PATH": os.environ["PATH"], "MAKEFLAGS": "-j1"}
    shard = build_env(recipe, cuda, tmp_path / "build", 1, None, base=base, shard=ShardSpec(1, 2))
    link = build_env(recipe, cuda, tmp_path / "build", 1, None, base={**base, "CUW_KEEP_GOING": "1"})
    return shard, link


def test_ninja_by_name_keeps_going_in_a_shard_and_stops_in_the_link(recipes_dir, tmp_path):
    """The wrapper in the shadow bin, as torch's ninja path runs it (``ninja -v -j N`` by name)."""
    shard, link = _shard_and_link_env(tmp_path, load_recipe("example", recipes_dir))
    for env, kept_going in ((shard, True), (link, False)):
        work = tmp_path / ("shard" if kept_going else "link")
        work.mkdir()
        (work / "build.ninja").write_text(_FAILING_FIRST)
        proc = subprocess.run(["ninja", "-v", "-j", "1", "first", "second"], cwd=work, env=env, capture_output=True, text=True)
        assert proc.returncode != 0
        assert (work / "second.out").exists() is kept_going, proc.stdout
    assert shard["MAKEFLAGS"] == "-k -j1" and "-k" not in link["MAKEFLAGS"].split()
    assert shard["SKBUILD_BUILD_TOOL_ARGS"] == "-k;0" and "SKBUILD_BUILD_TOOL_ARGS" not in link
    assert "CUW_KEEP_GOING" not in link


@pytest.mark.needs("torch")
def test_torch_ninja_path_runs_the_wrapper(recipes_dir, tmp_path, monkeypatch):
    """torch.utils.cpp_extension's own ninja call, in a shard's environment."""
    from torch.utils import cpp_extension

    shard, _ = _shard_and_link_env(tmp_path, load_recipe("example", recipes_dir))
    (tmp_path / "build.ninja").write_text(_FAILING_FIRST)
    monkeypatch.setenv("PATH", shard["PATH"])
    monkeypatch.setenv("CUW_KEEP_GOING", "1")
    monkeypatch.setenv("MAX_JOBS", "1")
    with pytest.raises(RuntimeError, match="Error building"):
        cpp_extension._run_ninja_build(str(tmp_path), verbose=False, error_prefix="Error building")
    assert (tmp_path / "second.out").exists()


def test_make_keeps_going_in_a_shard_only(recipes_dir, tmp_path):
    shard, link = _shard_and_link_env(tmp_path, load_recipe("example", recipes_dir))
    makefile = "all: first second\nfirst:\n\tfalse\nsecond:\n\ttouch second.out\n"
    for env, kept_going in ((shard, True), (link, False)):
        work = tmp_path / ("make-shard" if kept_going else "make-link")
        work.mkdir()
        (work / "Makefile").write_text(makefile)
        assert subprocess.run(["make"], cwd=work, env=env, capture_output=True).returncode != 0
        assert (work / "second.out").exists() is kept_going


# Shard 1/2 owns early2.cpp but not dep2.cu, so the "early" library's link fails at once,
# while every kernel TU waits for a slow custom target: without keep-going ninja stops
# scheduling and shard 1's kernels are never compiled.
# The kernels wait (cuw_slow) until the early library's link has run and failed: its link launcher
# leaves a marker after the link, whatever the link's exit, so no compile of the slice starts before.
_EARLY_CMAKE = """
add_custom_target(cuw_slow COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/csrc/early/wait.sh ${CMAKE_BINARY_DIR}/early-linked)
add_dependencies(_kernels cuw_slow)
add_library(early SHARED csrc/early/early2.cpp csrc/early/dep2.cu)
target_link_options(early PRIVATE -Wl,--no-undefined)
set_target_properties(early PROPERTIES
  RULE_LAUNCH_LINK "sh ${CMAKE_CURRENT_SOURCE_DIR}/csrc/early/linked.sh ${CMAKE_BINARY_DIR}/early-linked")
"""
_LINKED = 'marker=$1; shift; "$@"; rc=$?; touch "$marker"; exit $rc\n'
_WAIT = 'i=0; while [ ! -e "$1" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done\n'  # at most a minute


def _early_link_failure(recipes: Path) -> None:
    package = recipes / "example" / "package"
    (package / "csrc" / "early").mkdir()
    (package / "csrc" / "early" / "dep2.cu").write_text('extern "C" int cuw_dep2(void) { return 2; }\n')
    (package / "csrc" / "early" / "early2.cpp").write_text(
        'extern "C" int cuw_dep2(void);\nextern "C" int cuw_early(void) { return cuw_dep2(); }\n'
    )
    (package / "csrc" / "early" / "linked.sh").write_text(_LINKED)
    (package / "csrc" / "early" / "wait.sh").write_text(_WAIT)
    cmake = package / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + _EARLY_CMAKE)
    rule = recipe_assignment(load_recipe("example", recipes), 2)
    assert (rule.owner("csrc/early/early2.cpp"), rule.owner("csrc/early/dep2.cu")) == (1, 2)


def test_a_link_failing_before_the_slice_is_compiled_fails_the_shard_unless_it_keeps_going(
    recipes_dir, paths, monkeypatch, warm_cache
):
    """Both shards start warm (conftest.warm_cache): which TUs the build reached is the subject, not their compiles."""
    _early_link_failure(recipes_dir)
    recipe = load_recipe("example", recipes_dir)
    keep_going = backends.keep_going
    with monkeypatch.context() as m:  # the build as it ran before: ninja stops at the first failed edge
        m.setattr(backends, "keep_going", lambda env, recipe, shard: keep_going(env, recipe, False))
        stopped = run_shard(recipe, ShardSpec(1, 2), paths, progress=None, settings=run_settings())
    assert not stopped.verdict.ok and stopped.archive is None
    # Its 6 TUs: 5 CUDA and the host TU it owns (the seat partitions host TUs too), compiled first.
    assert stopped.verdict.reasons == [
        "5 of its 6 TUs were never compiled before the build failed (the link would miss them): "
        "csrc/kernels/k01_scale.cu, csrc/kernels/k03_reduce.cu, csrc/kernels/k04_scan.cu, "
        "csrc/kernels/k05_softmax.cu, csrc/kernels/k07_conv.cu"
    ]
    log = next(paths.work.glob("*/shard-1of2/logs/build.log")).read_text()
    assert "undefined reference to `cuw_dep2'" in log and "ninja: build stopped: subcommand failed" in log

    kept = run_shard(recipe, ShardSpec(1, 2), paths, progress=None, settings=run_settings())
    assert kept.verdict.ok, kept.verdict.line
    manifest_owned = json.loads(kept.report.read_text())["facts"]
    assert manifest_owned["expected_owned"] == 6 and manifest_owned["build_rc"] != 0  # 5 CUDA TUs and its host TU
    log = next(paths.work.glob("*/shard-1of2/logs/build.log")).read_text()
    assert "undefined reference to `cuw_dep2'" in log
    assert "ninja: build stopped: cannot make progress due to previous errors" in log  # ninja -k 0's words
    compiled = {
        json.loads(line)["key"]
        for line in next(paths.work.glob("*/shard-1of2/logs/seat.jsonl")).read_text().splitlines()
        if json.loads(line)["action"] == "compiled"
    }
    assert {
        "csrc/kernels/k01_scale.cu",
        "csrc/kernels/k03_reduce.cu",
        "csrc/kernels/k04_scan.cu",
        "csrc/kernels/k05_softmax.cu",
        "csrc/kernels/k07_conv.cu",
    } <= compiled


# -- the cache must hold real entries ---------------------------------------------------------


def test_a_cache_left_without_entries_fails_the_shard(recipes_dir, paths, monkeypatch):
    """A read-only ccache: every compile succeeds, nothing is stored; ccache's own stats files
    (one per folder) are there and must not pass for entries."""
    env = Ccache.env

    monkeypatch.setattr(Ccache, "env", property(lambda self: {**env.fget(self), "CCACHE_READONLY": "1"}))
    trim_example(recipes_dir, 3)  # a cold shard: its slice of three kernel TUs, not of nine
    result = run_shard(load_recipe("example", recipes_dir), ShardSpec(1, 3), paths, progress=None, settings=run_settings())
    assert not result.verdict.ok and result.archive is None
    assert any(r.startswith("the cache is empty after compiling") for r in result.verdict.reasons), result.verdict.line
    assert result.verdict.facts["compiled"] > 0 and result.verdict.facts["cache_files"] == 0
    (cache_dir,) = paths.work.glob("*/shard-1of3/cache")
    files = [p for p in cache_dir.rglob("*") if p.is_file()]
    assert files and all(p.name in ("stats", "CACHEDIR.TAG") or p.name.startswith(".") for p in files)


def test_entry_count_leaves_out_ccache_bookkeeping(tmp_path):
    cache = open_cache("ccache", tmp_path / "cache", tmp_path, settings=run_settings())
    cache.prepare()
    for name in (
        "0/stats",
        "0/1/stats",
        "CACHEDIR.TAG",
        "0/CACHEDIR.TAG",
        "tmp/.cleaned",
        "0/1/stats.lock",
        "lock/x",
        "0/1/abc.tmp.123",
        "0/1/ab7f3c0d9e1a2b4c5d6e7f8091a2b3c4d5e6f70",
    ):
        (cache.cache_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (cache.cache_dir / name).write_text("x")
    assert cache.entry_count() == 1


def test_a_retried_shard_on_a_warm_remote_passes(recipes_dir, paths, tmp_path):
    """The second run finds every TU in the remote and writes nothing: still a good handoff."""
    remote = tmp_path / "remote"
    remote.mkdir()
    choice = CacheChoice("ccache", f"file:{remote}")
    recipe = load_recipe("example", recipes_dir)
    first = run_shard(recipe, ShardSpec(2, 3), paths, progress=None, cache=choice, settings=run_settings())
    assert first.verdict.ok, first.verdict.line
    again = run_shard(recipe, ShardSpec(2, 3), paths, progress=None, cache=choice, settings=run_settings())
    assert again.verdict.ok, again.verdict.line
    counters = json.loads(again.report.read_text())["counters"]
    assert counters["misses"] == 0 and counters["hits"] == again.verdict.facts["compiled"] > 0
    assert again.verdict.facts["cache_files"] > 0


# -- the progress reader and the build child ------------------------------------------------


def test_the_log_reader_waits_for_a_partial_line_and_reads_only_what_was_appended(tmp_path):
    log = tmp_path / "seat.jsonl"
    whole = json.dumps({"action": "compiled", "key": "a.cu", "rc": 0}) + "\n"
    half = json.dumps({"action": "compiled", "key": "b.cu", "rc": 0})
    log.write_text(whole + half[:17])
    reader = seat_log.LogReader(log)
    assert reader.compiled_count() == 1 and seat_log.compiled_count(log) == 1  # the half line raises nothing
    assert [e["key"] for e in seat_log.read_log(log)] == ["a.cu"]
    with open(log, "a") as fh:
        fh.write(half[17:] + "\n" + json.dumps({"action": "stubbed", "key": "c.cu"}) + "\n")
    assert [e.key for e in reader.read()] == ["b.cu", "c.cu"] and reader.compiled == 2
    assert reader.read() == [] and reader.offset == log.stat().st_size
    with open(log, "a") as fh:  # a whole line the reader cannot read: no progress, and the gate's reader refuses it
        fh.write(json.dumps({"action": "compiled", "key": 3, "rc": 0}) + "\n")
    assert reader.read() == [] and reader.compiled == 2
    with pytest.raises(CuwError, match=rf"^{re.escape(str(log))}:4: field 'key' is 3, not a string$"):
        seat_log.read_entries(log)
    log.unlink()
    log.write_text(whole)  # a job folder prepared afresh: read from its start
    assert reader.compiled_count() == 1


def _alive(marker: str) -> list[int]:
    """Processes (not zombies) whose command line or environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if state != "Z" and marker.encode() in text:
            found.append(int(entry.name))
    return found


def test_an_interrupt_during_the_watch_stops_the_build_child_and_its_group(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "job", tmp_path / "job")
    ws.logs.mkdir(parents=True)
    ws.seat_log.write_text(json.dumps({"action": "compiled", "key": "a.cu", "rc": 0}) + "\n" + '{"action": "comp')
    marker = f"CUW_TEST_MARK={tmp_path}"
    # A child that ignores SIGTERM, and a grandchild in its group: both must go.
    script = "trap '' TERM; sleep 300 & sleep 300; wait"
    proc = process.spawn(["bash", "-c", script], env={**os.environ, "CUW_TEST_MARK": str(tmp_path)})
    seen = []

    def progress(line: str) -> None:
        seen.append(line)
        raise KeyboardInterrupt

    stop = process.stop
    monkeypatch.setattr(process, "stop", lambda procs, grace=10.0: stop(procs, grace=1.0))
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        process.watch(proc, ws, "shard 1/2", 3, progress, poll_s=0.1)
    assert len(seen) == 1 and seen[0].startswith("shard 1/2: compiled 1/3 TUs, "), "the half-written line raised nothing"
    assert proc.returncode == -signal.SIGKILL, "it ignored SIGTERM, was killed and reaped"
    # SIGKILL is delivered when the kernel next runs a grandchild: on a loaded machine that is not
    # the instant the group was signalled, so give the group a moment to die.
    deadline = time.monotonic() + 3
    while _alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(marker) == [], "nothing of its group is left"
    assert time.monotonic() - started < 10


def test_an_interrupt_during_a_local_build_stops_every_shard_and_its_build(recipes_dir, paths, tmp_path, monkeypatch):
    """``cuw build``: a Ctrl-C while shards build leaves no shard, pip, CMake or compiler running."""
    calls = []

    def interrupted(self):
        # Once a shard's build has reached the seat (configure probes are logged), Ctrl-C.
        calls.append(self.path)
        if self.path.exists() and self.path.stat().st_size > 0:
            raise KeyboardInterrupt
        if len(calls) > 400:
            pytest.fail("no shard build reached its seat")
        return 0

    monkeypatch.setattr(seat_log.LogReader, "compiled_count", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_build(
            load_recipe("example", recipes_dir),
            paths,
            count=2,
            recipes_dir=recipes_dir,
            progress=lambda line: None,
            settings=run_settings(),
        )
    deadline = time.monotonic() + 5
    while _alive(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(str(tmp_path)) == []


# -- no C compiler ------------------------------------------------------------------------------


def test_a_shard_prepares_without_a_c_compiler(recipes_dir, tmp_path, monkeypatch):
    """The empty object is written by the forge, the Python seat stays and the log says so;
    the seat then stubs a foreign TU with that object, which a real linker accepts."""
    toolkit = find_toolkit(homes=run_settings().homes)
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("ccache", "ninja", "python", "python3"):
        (bare / tool).symlink_to(Path(sys.executable).parent / tool)
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.delenv("CC", raising=False)
    assert shutil.which("cc") is None and shutil.which("gcc") is None and install.find_c_compiler(run_settings().cc) is None

    recipe = load_recipe("example", recipes_dir)
    ws = Workspace(tmp_path / "job", tmp_path / "job")
    prepare(ws, recipe, toolkit, ShardSpec(1, 2), "ccache", settings=run_settings())
    assert ws.empty_object.read_bytes() == install.empty_elf_object()
    assert "native stub not built" in ws.build_log.read_text()
    assert (ws.seat_dir / "nvcc").read_text().startswith("#!"), "the Python seat stays"
    rule = recipe_assignment(recipe, 2)
    foreign = next(
        k for k in sorted(p.relative_to(ws.src).as_posix() for p in (ws.src / "csrc/kernels").glob("*.cu")) if rule.owner(k) == 2
    )
    out = tmp_path / "foreign.o"
    subprocess.run([str(ws.cuda_home / "bin" / "nvcc"), "-c", str(ws.src / foreign), "-o", str(out)], check=True)
    assert out.read_bytes() == install.empty_elf_object()
    assert [e["action"] for e in seat_log.read_log(ws.seat_log)] == ["stubbed"]

    monkeypatch.undo()  # the real toolchain again: the object links like one cc made
    real = tmp_path / "real.c"
    real.write_text("int cuw_real(void) { return 1; }\n")
    subprocess.run(["cc", "-fPIC", "-c", str(real), "-o", str(tmp_path / "real.o")], check=True)
    subprocess.run(
        ["cc", "-shared", "-Wl,--no-undefined", str(tmp_path / "real.o"), str(out), "-o", str(tmp_path / "libreal.so")],
        check=True,
    )
    nvlinked = subprocess.run([str(toolkit.nvcc), "-arch=sm_90", "-dlink", str(out), "-o", str(tmp_path / "dlink.o")])
    assert nvlinked.returncode == 0


# -- the gate's own rules (pure) -----------------------------------------------------------------


def test_uncompiled_owned_tus_fail_a_failed_shard_only_when_the_build_lists_them():
    from cuw.gates.conditions import ShardObservation, shard_gate

    undef = "ld: x.o: undefined reference to `f'\n"
    owned = [f"csrc/k{i}.cu" for i in range(8)]
    base = dict(
        build_rc=1,
        log=undef,
        real_objects=2,
        seat_compiles_seen=3,
        compiled=owned[:1],
        failed=[],
        expected_owned=owned,
        cache_files=2,
    )
    v = shard_gate(ShardObservation(**base))
    assert not v.ok and v.reasons == [
        "7 of its 8 TUs were never compiled before the build failed (the link would miss them): "
        "csrc/k1.cu, csrc/k2.cu, csrc/k3.cu, csrc/k4.cu, csrc/k5.cu and 2 more"
    ]
    # TUs no compile database lists are not part of the build: a note, not a failure.
    v = shard_gate(ShardObservation(**base, build_tus=owned[:1] + ["csrc/other.cpp"]))
    assert v.ok and v.reasons[-1].startswith("note: 7 TUs of its slice are not in the build's compile database")
    # A build that succeeded compiled what it meant to; an empty slice passes.
    assert shard_gate(ShardObservation(**{**base, "build_rc": 0})).ok
    assert shard_gate(ShardObservation(**{**base, "compiled": [], "expected_owned": [], "cache_files": 0})).ok


def test_scikit_build_core_gets_no_ninja_flag_under_a_makefiles_generator(recipes_dir, tmp_path):
    recipe = load_recipe("example", recipes_dir)
    for base in ({"CMAKE_GENERATOR": "Unix Makefiles"}, {"CMAKE_ARGS": "-G 'Unix Makefiles' -DX=1"}):
        env = build_env(
            recipe, tmp_path / "cuda", tmp_path / "build", 1, None, base={"PATH": "/usr/bin", **base}, shard=ShardSpec(1, 2)
        )
        assert "SKBUILD_BUILD_TOOL_ARGS" not in env and env["MAKEFLAGS"] == "-k" and env["CUW_KEEP_GOING"] == "1"
    env = build_env(
        recipe,
        tmp_path / "cuda",
        tmp_path / "build",
        1,
        None,
        shard=ShardSpec(1, 2),
        base={"PATH": "/usr/bin", "SKBUILD_BUILD_TOOL_ARGS": "-d;stats", "MAKEFLAGS": "j4"},
    )
    assert env["SKBUILD_BUILD_TOOL_ARGS"] == "-d;stats;-k;0" and env["MAKEFLAGS"] == "kj4"
