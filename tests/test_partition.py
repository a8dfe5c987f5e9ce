import hashlib

import pytest

from cuw.base.errors import CuwError
from cuw.partition.rules import ShardSpec, owner, parse_shard_spec, tu_key


@pytest.mark.parametrize("text", ["0/4", "5/4", "a/b", "3", "3/0", "-1/4", "3/23/1", ""])
def test_malformed_shard_specs_are_refused(text):
    with pytest.raises(CuwError) as err:
        parse_shard_spec(text)
    assert repr(text) in str(err.value)


def test_shard_spec_parses_one_based():
    spec = parse_shard_spec("3/23")
    assert spec == ShardSpec(3, 23) and spec.tag == "3of23" and str(spec) == "3/23"


def test_owner_is_md5_prefix_mod_n_one_based():
    key = "csrc/kernels/k03_reduce.cu"
    expected = int(hashlib.md5(key.encode()).hexdigest()[:8], 16) % 7 + 1
    assert owner(key, 7) == expected
    assert owner(key, 1) == 1


def test_every_key_has_exactly_one_owner():
    keys = [f"gen/kernel_{i:03}.cu" for i in range(144)]
    for n in (1, 3, 20, 23):
        owners = [owner(k, n) for k in keys]
        assert all(1 <= o <= n for o in owners)
        assert sum(ShardSpec(i, n).owns(k) for i in range(1, n + 1) for k in keys) == len(keys)


def test_key_is_relative_to_source_root_with_forward_slashes(tmp_path):
    src = tmp_path / "a" / "src"
    assert tu_key(str(src / "csrc" / "x.cu"), str(src)) == "csrc/x.cu"
    # The same layout under another folder gives the same key (another runner, another shard).
    other = tmp_path / "b" / "src"
    assert tu_key(str(other / "csrc" / "x.cu"), str(other)) == "csrc/x.cu"


def test_listing_and_matching_read_a_glob_the_same_way(tmp_path):
    """One glob engine: the files the source filter lists for a glob are exactly the keys the
    matcher (the seat's, the families') says it matches, ``[x]`` a character class in both."""
    from cuw.partition.coverage import source_filter_files
    from cuw.partition.globs import glob_match
    from cuw.partition.rules import tu_key

    for name in ("x.cu", "[x].cu", "y.cu", "sub/x.cu"):
        (tmp_path / "csrc" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "csrc" / name).write_text("")
    keys = [tu_key(str(p), str(tmp_path)) for p in (tmp_path / "csrc").rglob("*") if p.is_file()]
    for pattern in ("csrc/[x].cu", "csrc/*.cu", "csrc/**/*.cu", "csrc/[!x].cu", "csrc/?.cu"):
        listed = {tu_key(str(p), str(tmp_path)) for p in source_filter_files(tmp_path, [pattern])}
        assert listed == {k for k in keys if glob_match(k, pattern)}, pattern
    assert {tu_key(str(p), str(tmp_path)) for p in source_filter_files(tmp_path, ["csrc/[x].cu"])} == {"csrc/x.cu"}


def test_a_list_of_shards_folds_into_runs_on_one_line():
    from cuw.partition.rules import shard_listing

    assert shard_listing([2, 3, 4, 7], 10) == "4 of 10 (2-4, 7)"
    assert shard_listing(list(range(2, 256)), 255) == "254 of 255 (2-255)"
    assert shard_listing([5], 23) == "1 of 23 (5)"


def test_a_seat_recipes_globs_name_its_tus_among_the_trees_sources(recipes_dir, tmp_path):
    """flash-attn's sdist carries CUTLASS's .cu examples and tests, which no build step compiles:
    its globs keep them out of what is counted, planned and expected of a shard."""
    from cuw.config.recipe import load_recipe
    from cuw.jobs.shard import expected_owned
    from cuw.partition.coverage import covered_keys
    from cuw.partition.rules import ShardSpec

    for name in ("csrc/flash_attn/src/flash_fwd_a.cu", "csrc/flash_attn/src/flash_bwd_b.cu", "csrc/flash_attn/flash_api.cpp",
                 "csrc/cutlass/examples/00_basic/basic.cu", "csrc/cutlass/test/unit/gemm.cu", "csrc/cutlass/tools/x.cpp"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("// tu\n")
    recipe = load_recipe("flash_attn", recipes_dir)
    tus = ["csrc/flash_attn/flash_api.cpp", "csrc/flash_attn/src/flash_bwd_b.cu", "csrc/flash_attn/src/flash_fwd_a.cu"]
    assert covered_keys(recipe, tmp_path) == tus
    owned = [k for i in range(1, 5) for k in expected_owned(recipe, tmp_path, ShardSpec(i, 4))]
    assert sorted(owned) == tus
