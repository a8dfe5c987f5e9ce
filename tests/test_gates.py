"""The gate conditions, one flipped at a time (pure functions, no build)."""

from cuw.gates.conditions import LinkObservation, ShardObservation, compile_errors, link_gate, shard_gate
from cuw.partition.rules import owner

UNDEF = (
    "/usr/bin/ld: CMakeFiles/_kernels.dir/csrc/dispatch.cpp.o: undefined reference to `cuw_k03_host'\n"
    "collect2: error: ld returned 1 exit status\n"
)


def good_shard(**changes):
    base = dict(
        build_rc=1,
        log="[3/13] Building CUDA object k00.cu.o\n" + UNDEF,
        real_objects=4,
        seat_compiles_seen=9,
        compiled=["csrc/kernels/k00.cu"],
        failed=[],
        expected_owned=["csrc/kernels/k00.cu"],
        cache_files=2,
    )
    base.update(changes)
    return ShardObservation(**base)


def test_a_shard_failing_on_undefined_references_passes():
    v = shard_gate(good_shard())
    assert v.ok, v.reasons
    assert "undefined references" in v.line


def test_nvlink_undefined_reference_counts_and_is_not_a_compile_error():
    log = "nvlink error   : Undefined reference to '_Z3foov' in 'CMakeFiles/x.dir/a.cu.o'\n"
    assert compile_errors(log) == []
    assert shard_gate(good_shard(log=log)).ok


def test_no_real_objects_fails():
    v = shard_gate(good_shard(real_objects=0))
    assert not v.ok and any("no real object" in r for r in v.reasons)


def test_failure_without_undefined_reference_fails():
    v = shard_gate(good_shard(log="CMake Error at CMakeLists.txt:3 (project): boom\n", real_objects=0))
    assert not v.ok
    assert any("compile-shard failed without undefined references" in r for r in v.reasons)


def test_compile_error_is_never_laundered_as_a_link_failure():
    for diagnostic in (
        '/s/csrc/kernels/k04.cu(6): error: identifier "nope" is undefined',
        '  ../src/csrc/kernels/k04.cu(7): error: identifier "x" is undefined',  # pip -v indents
        "/s/csrc/kernels/k04.cu:6:10: fatal error: missing.h: No such file or directory",
        "/s/csrc/dispatch.cpp:12:5: error: 'x' was not declared in this scope",
        "ptxas fatal   : Unresolved extern function 'foo'",
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
        '/s/a.cu(3): catastrophic error: cannot open source file "x.h"',
    ):
        v = shard_gate(good_shard(log=diagnostic + "\n" + UNDEF))
        assert not v.ok, diagnostic
        assert any("a real compile error" in r for r in v.reasons), diagnostic


def test_linker_errors_are_not_compile_errors():
    assert compile_errors(UNDEF + "/usr/bin/ld: final link failed: bad value\n") == []


def test_a_compile_the_seat_saw_fail_is_named_even_without_a_known_diagnostic():
    v = shard_gate(good_shard(failed=["csrc/kernels/k04.cu"], log="weird output\n" + UNDEF))
    assert not v.ok and "csrc/kernels/k04.cu" in v.line


def test_seat_never_reached_fails():
    v = shard_gate(good_shard(build_rc=0, seat_compiles_seen=0, compiled=[], log="downloaded a wheel\n"))
    assert not v.ok and any("seat saw no CUDA compile" in r for r in v.reasons)


def test_without_device_code_only_no_compile_at_all_fails():
    host_only = dict(build_rc=0, seat_compiles_seen=0, compiled=["csrc/a.cpp"], expected_owned=["csrc/a.cpp"])
    assert shard_gate(good_shard(**host_only, host_compiles_seen=3, device_code=False)).ok
    assert not shard_gate(good_shard(**host_only, host_compiles_seen=3)).ok  # a CUDA recipe still needs a CUDA compile
    v = shard_gate(good_shard(**host_only, host_compiles_seen=0, device_code=False))
    assert not v.ok and any("the seat saw no compile (the recipe has device_code: false" in r for r in v.reasons)


def test_nothing_of_its_slice_compiled_fails_but_an_empty_slice_passes():
    v = shard_gate(good_shard(compiled=[], expected_owned=["a.cu", "b.cu"]))
    assert not v.ok and any("compiled none of its 2 TUs" in r for r in v.reasons)
    v = shard_gate(good_shard(compiled=[], expected_owned=[], cache_files=0))
    assert v.ok and "empty slice" in v.line


def test_empty_cache_after_compiling_fails():
    v = shard_gate(good_shard(cache_files=0))
    assert not v.ok and any("cache is empty" in r for r in v.reasons)


def test_a_part_stopped_at_its_deadline_passes_with_what_it_leaves():
    v = shard_gate(good_shard(expected_owned=["csrc/kernels/k00.cu", "a.cu", "b.cu"], deferred=["a.cu", "b.cu"]))
    assert v.ok, v.reasons
    assert v.facts["left"] == ["a.cu", "b.cu"] and v.facts["partial"] is True
    assert "stopped at its deadline with 2 of its 3 TUs left (partial)" in v.line


def test_a_part_whose_deadline_passed_before_any_compile_is_still_valid():
    v = shard_gate(good_shard(compiled=[], expected_owned=["a.cu", "b.cu"], deferred=["a.cu", "b.cu"], real_objects=0))
    assert v.ok, v.reasons
    assert v.facts["left"] == ["a.cu", "b.cu"] and "compiled 0 TUs" in v.line


def test_a_deferred_tu_does_not_excuse_another_never_compiled():
    v = shard_gate(good_shard(expected_owned=["csrc/kernels/k00.cu", "a.cu", "b.cu"], deferred=["a.cu"]))
    assert not v.ok and any("never compiled before the build failed" in r and "b.cu" in r for r in v.reasons)


def test_a_continuation_whose_earlier_tus_missed_fails_and_one_whose_hit_passes():
    earlier = dict(compiled=["csrc/kernels/k00.cu", "a.cu"], expected_owned=["csrc/kernels/k00.cu", "a.cu"], earlier=["a.cu"])
    v = shard_gate(good_shard(**earlier, missed=["a.cu", "csrc/kernels/k00.cu"]))
    assert not v.ok and any("1 TUs finished in earlier parts missed the cache" in r and "a.cu" in r for r in v.reasons)
    v = shard_gate(good_shard(**earlier, missed=["csrc/kernels/k00.cu"]))
    assert v.ok, v.reasons
    assert v.facts["left"] == [] and v.facts["partial"] is False and "1 of them finished in earlier parts, all hits" in v.line


def test_an_earlier_parts_tu_deferred_again_is_not_left_it_is_in_the_cache():
    v = shard_gate(good_shard(expected_owned=["csrc/kernels/k00.cu", "a.cu"], deferred=["a.cu"], earlier=["a.cu"]))
    assert v.ok and v.facts["left"] == [] and v.facts["partial"] is False


def good_link(**changes):
    tus = [f"csrc/kernels/k0{i}.cu" for i in range(9)]
    base = dict(
        build_rc=0,
        wheel="x.whl",
        hits=9,
        misses=0,
        uncacheable=0,
        total=None,
        stats_zeroed_at=200,
        merged_at=200,
        cuda_tus_in_build=tus,
        seat_keys=tus,
        misses_by_key=[],
        uncacheable_by_key=[],
        shard_count=3,
        missing_shards=[],
    )
    base.update(changes)
    if base["total"] is None:
        base["total"] = base["hits"] + base["misses"] + base["uncacheable"]
    return LinkObservation(**base)


def test_all_hits_passes():
    v = link_gate(good_link())
    assert v.ok and "9 compiler calls, 9 cache hits, zero misses; 9 CUDA TUs" in v.line


def test_one_miss_fails_and_names_the_owning_shard():
    key = "csrc/kernels/k04.cu"
    v = link_gate(good_link(hits=8, misses=1, misses_by_key=[key], missing_shards=[owner(key, 3)]))
    assert not v.ok
    assert f"{key} <- shard {owner(key, 3)}/3 (its archive is missing)" in v.line


def test_a_high_ratio_is_still_a_failure():
    v = link_gate(good_link(hits=1000, misses=1, misses_by_key=["csrc/kernels/k00.cu"]))
    assert not v.ok and "cache misses: 1 (must be 0)" in v.line


def test_uncacheable_compiles_count_as_misses():
    v = link_gate(good_link(hits=8, uncacheable=1, uncacheable_by_key=["csrc/kernels/k01.cu"]))
    assert not v.ok and "uncacheable compiles: 1" in v.line


def test_zero_total_fails():
    v = link_gate(good_link(hits=0, seat_keys=[], cuda_tus_in_build=[]))
    assert not v.ok and any("zero compiler calls" in r for r in v.reasons)


def test_counters_not_zeroed_after_merge_fail():
    v = link_gate(good_link(stats_zeroed_at=100, merged_at=200))
    assert not v.ok and any("not zeroed" in r for r in v.reasons)


def test_bypassed_seat_fails():
    tus = [f"csrc/kernels/k0{i}.cu" for i in range(9)]
    v = link_gate(good_link(hits=8, seat_keys=tus[1:]))
    assert not v.ok and any("1 of 9 CUDA TUs bypassed the seat" in r and tus[0] in r for r in v.reasons)


def test_fewer_calls_than_tus_fails():
    v = link_gate(good_link(hits=5))
    assert not v.ok and any("saw 5 calls for 9 CUDA TUs" in r for r in v.reasons)


def test_failed_link_build_fails():
    v = link_gate(good_link(build_rc=1, wheel=None, log="/s/a.cu(3): error: boom\n"))
    assert not v.ok and "a.cu(3): error: boom" in v.line


def test_a_slice_the_build_never_compiles_is_not_called_empty():
    """Every owned TU outside the build's compile database, the build passing: the verdict says
    none of its TUs is compiled by any step, not that no TU hashes to the shard."""
    v = shard_gate(good_shard(compiled=[], expected_owned=["tests/a.cu", "tests/b.cu"], build_tus=["src/x.cu"], cache_files=0))
    assert v.ok and v.line.startswith("shard gate PASS: compiled none of the 2 TUs of its slice: no build step compiles them")
    assert "note: 2 TUs of its slice are not in the build's compile database: tests/a.cu, tests/b.cu" in v.reasons
