import pytest

from cuw.base.errors import InputError
from cuw.partition.rules import ShardSpec, owner, parse_shard_spec, tu_key


@pytest.mark.parametrize("text", ["0/4", "5/4", "a/b", "3", "3/0", "-1/4", "3/23/1", ""])
def test_malformed_shard_specs_are_refused(text):
    with pytest.raises(InputError) as err:
        parse_shard_spec(text)
    assert repr(text) in str(err.value)


def test_shard_spec_parses_one_based():
    spec = parse_shard_spec("3/23")
    assert spec == ShardSpec(3, 23) and spec.tag == "3of23" and str(spec) == "3/23"


# Golden owners: written down once (the hash ones checked against coreutils' ``md5sum``, the
# sorted and cost ones worked by hand), never recomputed here. A change of the hash, its seed or
# prefix, the sort order, the family order or the LPT's cost order, tie-break or rest mean moves
# an owner and fails these, which no check derived from ``owner()`` itself can do.
HASH_GOLDEN = {
    "csrc/kernels/k03_reduce.cu": {1: 1, 2: 1, 7: 4, 23: 8, 256: 135},
    "csrc/flash_attn/src/flash_fwd_a.cu": {1: 1, 2: 2, 7: 7, 23: 9, 256: 100},
    "gen/kernel_000.cu": {1: 1, 2: 2, 7: 6, 23: 5, 256: 100},
    "gen/kernel_143.cu": {1: 1, 2: 1, 7: 6, 23: 22, 256: 141},
    "csrc/natten0.cpp": {1: 1, 2: 2, 7: 5, 23: 21, 256: 138},
    "csrc/autogen/src/cuda/fna/source_11.cu": {1: 1, 2: 2, 7: 2, 23: 4, 256: 60},
}


@pytest.mark.parametrize("key", sorted(HASH_GOLDEN))
def test_owner_matches_its_golden_vector(key):
    """``md5(key)[:8] % N + 1``, as literal values: the seat, the filter and a planner on another
    machine agree only while these stay the same."""
    assert {n: owner(key, n) for n in HASH_GOLDEN[key]} == HASH_GOLDEN[key]
    assert {n: [ShardSpec(i, n).owns(key) for i in range(1, n + 1)].index(True) + 1 for n in HASH_GOLDEN[key]} == HASH_GOLDEN[key]


# The known keys (two families and ``other``), the rest after them, and a cost table that
# costs some of the rest (``csrc/hand/b.cu`` has none: it costs the table's mean, 48.5 / 11).
GOLDEN_KNOWN = [
    "csrc/fused.cu",
    "csrc/gen/fna/f0.cu",
    "csrc/gen/fna/f1.cu",
    "csrc/gen/fna/f2.cu",
    "csrc/gen/hopper/h0.cu",
    "csrc/gen/hopper/h1.cu",
    "csrc/gen/hopper/h2.cu",
    "csrc/ops/gemm.cu",
    "csrc/ops/reduce.cu",
]
GOLDEN_REST = ["csrc/bind.cpp", "csrc/hand/a.cu", "csrc/hand/b.cu"]
GOLDEN_COSTS = {
    "csrc/fused.cu": 6.0,
    "csrc/gen/fna/f0.cu": 8.0,
    "csrc/gen/fna/f1.cu": 3.0,
    "csrc/gen/fna/f2.cu": 3.0,
    "csrc/gen/hopper/h0.cu": 5.0,
    "csrc/gen/hopper/h1.cu": 1.0,
    "csrc/gen/hopper/h2.cu": 7.0,
    "csrc/ops/gemm.cu": 9.0,
    "csrc/ops/reduce.cu": 2.0,
    "csrc/hand/a.cu": 4.0,
    "csrc/bind.cpp": 0.5,
}
GOLDEN_FAMILIES = {"hopper": ["csrc/gen/hopper/*.cu"], "fna": ["csrc/gen/fna/*.cu"]}
# (rule, per_family, N) -> the owner of each of GOLDEN_KNOWN + GOLDEN_REST, in that order.
GOLDEN_OWNERS = {
    ("hash", False, 1): [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    ("hash", False, 3): [3, 1, 1, 1, 3, 3, 2, 1, 1, 2, 3, 2],
    ("hash", False, 5): [2, 2, 1, 2, 4, 3, 2, 5, 5, 1, 3, 4],
    ("sorted", False, 1): [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    ("sorted", False, 3): [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3],
    ("sorted", False, 5): [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2],
    ("sorted", True, 3): [1, 1, 2, 3, 1, 2, 3, 2, 3, 1, 2, 3],
    ("sorted", True, 5): [2, 1, 2, 3, 4, 5, 1, 3, 4, 5, 1, 2],
    ("cost", False, 1): [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    ("cost", False, 3): [3, 2, 1, 1, 2, 3, 3, 1, 2, 2, 1, 3],
    ("cost", False, 5): [4, 2, 5, 4, 5, 2, 3, 1, 3, 2, 1, 5],
    ("cost", True, 3): [1, 1, 2, 3, 3, 1, 2, 3, 2, 3, 1, 2],
    ("cost", True, 5): [2, 1, 2, 3, 5, 2, 4, 3, 5, 1, 5, 4],
}


@pytest.mark.parametrize("rule, per_family, n", sorted(GOLDEN_OWNERS))
def test_every_key_has_the_one_owner_of_its_golden_vector(rule, per_family, n):
    """Each rule, its rest included, against literal owners; each key in exactly one shard's
    slice (a key in two slices and one in none fail the Counter, not only the golden table)."""
    from collections import Counter

    from cuw.partition.rules import assign, families_of

    family = families_of(GOLDEN_KNOWN, GOLDEN_FAMILIES)
    result = assign(n, rule, GOLDEN_KNOWN, GOLDEN_COSTS, family, per_family, rest=GOLDEN_REST)
    every = GOLDEN_KNOWN + GOLDEN_REST
    assert [result.owner(k) for k in every] == GOLDEN_OWNERS[rule, per_family, n]
    slices = [result.owned(every, i) for i in range(1, n + 1)]
    assert Counter(k for part in slices for k in part) == Counter(every)
    expected_slices = [[k for k, o in zip(every, GOLDEN_OWNERS[rule, per_family, n]) if o == i] for i in range(1, n + 1)]
    assert slices == expected_slices
    # The known keys keep their owners without the rest (the rest continues the rule after them).
    alone = assign(n, rule, GOLDEN_KNOWN, {k: GOLDEN_COSTS[k] for k in GOLDEN_KNOWN}, family, per_family)
    assert [alone.owner(k) for k in GOLDEN_KNOWN] == GOLDEN_OWNERS[rule, per_family, n][: len(GOLDEN_KNOWN)]


def test_every_hash_key_is_owned_by_exactly_one_shard_spec():
    """Over ``ShardSpec.owns`` (the seat's question), not over ``owner()``: a Counter of the keys
    each spec claims equals the keys once each (a sum of claims would let one key be claimed
    twice and another never)."""
    from collections import Counter

    keys = [f"gen/kernel_{i:03}.cu" for i in range(144)]
    for n in (1, 3, 20, 23):
        claimed = Counter(k for i in range(1, n + 1) for k in keys if ShardSpec(i, n).owns(k))
        assert claimed == Counter(keys), n
    assert [ShardSpec(i, 23).owns("gen/kernel_143.cu") for i in (21, 22, 23)] == [False, True, False]


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

    for name in (
        "csrc/flash_attn/src/flash_fwd_a.cu",
        "csrc/flash_attn/src/flash_bwd_b.cu",
        "csrc/flash_attn/flash_api.cpp",
        "csrc/cutlass/examples/00_basic/basic.cu",
        "csrc/cutlass/test/unit/gemm.cu",
        "csrc/cutlass/tools/x.cpp",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("// tu\n")
    recipe = load_recipe("flash_attn", recipes_dir)
    tus = ["csrc/flash_attn/flash_api.cpp", "csrc/flash_attn/src/flash_bwd_b.cu", "csrc/flash_attn/src/flash_fwd_a.cu"]
    assert covered_keys(recipe, tmp_path) == tus
    owned = [k for i in range(1, 5) for k in expected_owned(recipe, tmp_path, ShardSpec(i, 4))]
    assert sorted(owned) == tus


# A natten-like source-filter recipe: the filter's generated kernels (two families), and a rest its
# globs do not cover (hand-written CUDA, a host TU, a kernel one folder too deep for the glob).
REST_TREE_FILTERED = [
    "csrc/autogen/cuda/fna/s0.cu",
    "csrc/autogen/cuda/fna/s1.cu",
    "csrc/autogen/cuda/fna/s2.cu",
    "csrc/autogen/cuda/fna/s3.cu",
    "csrc/autogen/cuda/hopper_fmha/s0.cu",
    "csrc/autogen/cuda/hopper_fmha/s1.cu",
    "csrc/autogen/cuda/hopper_fmha/s2.cu",
]
REST_TREE_REST = ["csrc/autogen/cuda/fna/extra/x.cu", "csrc/natten.cpp", "csrc/src/hand_0.cu", "csrc/src/hand_1.cu"]
REST_TREE_COSTS = {
    "csrc/autogen/cuda/fna/s0.cu": 4.0,
    "csrc/autogen/cuda/fna/s1.cu": 9.0,
    "csrc/autogen/cuda/fna/s2.cu": 2.0,
    "csrc/autogen/cuda/fna/s3.cu": 6.0,
    "csrc/autogen/cuda/hopper_fmha/s0.cu": 8.0,
    "csrc/autogen/cuda/hopper_fmha/s1.cu": 1.0,
    "csrc/autogen/cuda/hopper_fmha/s2.cu": 5.0,
    "csrc/src/hand_0.cu": 7.0,
    "csrc/autogen/cuda/fna/gone.cu": 1000.0,
}  # not in the source: dropped, not in the rest's mean
REST_TREE_YML = """
name: rest-tree
links_torch: false
source: {path: src}
backend: scikit-build-core
sharding:
  count: 4
  filter: source
  rule: RULE
  per_family: PER_FAMILY
  platforms: [linux]
  source:
    globs: ["csrc/autogen/cuda/*/*.cu"]
    families: {hopper: ["csrc/autogen/cuda/hopper_*/*.cu"]}
"""
# (rule, N) -> the owner of each of REST_TREE_FILTERED + REST_TREE_REST, in that order; per family
# (``hopper`` first, ``other`` last) for sorted and cost. The rest without a cost costs the mean of
# the table's TUs in the source, 42 / 8.
REST_TREE_GOLDEN = {
    ("hash", 3): [2, 1, 1, 1, 2, 1, 2, 1, 1, 3, 3],
    ("hash", 5): [1, 5, 1, 2, 1, 3, 3, 3, 1, 5, 5],
    ("sorted", 3): [1, 2, 3, 1, 1, 2, 3, 2, 3, 1, 2],
    ("sorted", 5): [4, 5, 1, 2, 1, 2, 3, 3, 4, 5, 1],
    ("cost", 3): [1, 3, 1, 2, 1, 3, 2, 2, 1, 3, 2],
    ("cost", 5): [3, 4, 2, 5, 1, 3, 2, 5, 2, 3, 1],
}


def _rest_tree(root, rule: str, seat_rest: bool = True):
    import json

    from conftest import REPO
    from cuw.config.recipe import load_recipe

    folder = root / "recipes" / "rest_tree"
    src = folder / "src"
    for key in [*REST_TREE_FILTERED, *REST_TREE_REST, "csrc/include/natten.h", "csrc/README.md"]:
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_text("// tu\n")
    (root / "recipes" / "defaults.yml").write_text((REPO / "recipes" / "defaults.yml").read_text())
    text = REST_TREE_YML.replace("RULE", rule).replace("PER_FAMILY", str(rule != "hash").lower())
    (folder / "recipe.yml").write_text(text + ("" if seat_rest else "    seat_rest: false\n"))
    (folder / "costs.json").write_text(json.dumps({"header": {}, "costs": REST_TREE_COSTS}))
    return load_recipe("rest_tree", root / "recipes"), src


@pytest.mark.parametrize("rule, n", sorted(REST_TREE_GOLDEN))
def test_filter_and_rest_are_disjoint_cover_every_source_and_keep_golden_owners_under_every_rule(tmp_path, rule, n):
    """For hash, sorted and cost alike: the filter's files and the seat's rest are disjoint and
    together every TU of the tree (literal lists, not the code's own listing); every TU is in
    exactly one shard's expected slice (a Counter of the slices, not a sum of their sizes); the
    owners are the golden ones; the filter's files keep them with ``seat_rest: false``."""
    from collections import Counter

    from cuw.jobs.shard import expected_owned
    from cuw.partition.assignment import recipe_assignment
    from cuw.partition.coverage import covered_keys, rest_keys

    recipe, src = _rest_tree(tmp_path, rule)
    filtered, rest = covered_keys(recipe, src), rest_keys(recipe, src)
    assert sorted(filtered) == REST_TREE_FILTERED and sorted(rest) == REST_TREE_REST
    assert not set(filtered) & set(rest)
    every = REST_TREE_FILTERED + REST_TREE_REST
    slices = [expected_owned(recipe, src, ShardSpec(i, n)) for i in range(1, n + 1)]
    assert Counter(k for part in slices for k in part) == Counter(every)
    owners = {k: i for i, part in enumerate(slices, 1) for k in part}
    assert [owners[k] for k in every] == REST_TREE_GOLDEN[rule, n]
    joint = recipe_assignment(recipe, n, src)
    assert [joint.owner(k) for k in every] == REST_TREE_GOLDEN[rule, n]

    off, off_src = _rest_tree(tmp_path / "off", rule, seat_rest=False)
    assert rest_keys(off, off_src) == []
    without = recipe_assignment(off, n, off_src)
    assert [without.owner(k) for k in REST_TREE_FILTERED] == REST_TREE_GOLDEN[rule, n][: len(REST_TREE_FILTERED)]
    off_slices = [expected_owned(off, off_src, ShardSpec(i, n)) for i in range(1, n + 1)]
    assert Counter(k for part in off_slices for k in part) == Counter(REST_TREE_FILTERED)
