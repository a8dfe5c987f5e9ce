"""Property tests: the shard spec, the partition, the CLI options and recipe YAML shapes.

Each property says what must hold for every input, not for the few a person thought of:
a shard spec parses to 1 <= I <= N <= MAX_SHARDS or is refused with a CuwError; every
key has exactly one owner for every rule; no argv makes a read-only verb raise or
report an internal error; no recipe.yml makes the loader raise anything but a CuwError.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cuw.cli import main as cli
from cuw.base.errors import CuwError
from cuw.config.limits import MAX_SHARDS
from cuw.partition.rules import RULES, Assignment, ShardSpec, assign, families_of, parse_shard_spec
from cuw.config.recipe import Recipe, load_recipe
from cuw.config.schema import SchemaError

REPO = Path(__file__).resolve().parent.parent
# More examples for a deeper search: CUW_PROPERTY_EXAMPLES=500 pytest tests/test_properties.py
_SCALE = int(os.environ.get("CUW_PROPERTY_EXAMPLES", "0")) or None
# database=None: no .hypothesis folder in the checkout; a failure prints its falsifying example.
_COMMON = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FAST = settings(max_examples=_SCALE or 60, **_COMMON)
SLOW = settings(max_examples=_SCALE or 25, **_COMMON)


# -- the shard spec ----------------------------------------------------------------------

spec_texts = st.one_of(
    st.text(max_size=24),
    st.builds(
        lambda i, n, a, b: f"{a}{i}{b}/{a}{n}{b}",
        st.integers(-300, 300),
        st.integers(-300, 300),
        st.sampled_from(["", " ", "\t", "0", "+", "-"]),
        st.sampled_from(["", " ", "\n", ".0", "x"]),
    ),
    st.builds(lambda i, n: f"{i}/{n}", st.integers(0, 10**25), st.integers(0, 10**25)),
    st.builds(lambda d: f"{d}/{d}", st.sampled_from(["\u0661", "\u0967", "\uff11", "\u00b9", "\u2460"])),
)


@FAST
@given(spec_texts)
def test_a_shard_spec_parses_in_range_or_is_refused(text: str) -> None:
    try:
        spec = parse_shard_spec(text)
    except CuwError as exc:
        assert "\n" not in str(exc).strip() or "\n" in text
        return
    assert isinstance(spec.index, int) and isinstance(spec.count, int)
    assert 1 <= spec.index <= spec.count <= MAX_SHARDS
    assert parse_shard_spec(str(spec)) == spec
    assert spec.tag == f"{spec.index}of{spec.count}"
    assert str(spec).isascii()


@FAST
@given(st.integers(-5, 400), st.integers(-5, 400))
def test_every_in_range_spec_is_accepted_and_nothing_else(index: int, count: int) -> None:
    text = f"{index}/{count}"
    if 1 <= index <= count <= MAX_SHARDS:
        assert parse_shard_spec(text) == ShardSpec(index, count)
    else:
        with pytest.raises(CuwError):
            parse_shard_spec(text)


# -- the partition -------------------------------------------------------------------------

# First names a, ab, b, bc often: FAMILIES below (a*, b*) then meet keys in a family, in another and in none.
key_names = st.from_regex(r"(a|ab|b|bc|[a-z]{1,3})(/[a-z0-9_]{1,6}){0,2}\.(cu|cpp)", fullmatch=True)
keys = st.lists(key_names, min_size=1, max_size=30, unique=True)
# Quarter seconds: every sum of them is exact, so the reference LPT below meets the same ties
# as the rule's (a float sum in another order could break a tie the other way).
costs = st.integers(0, 40_000).map(lambda q: q / 4)
FAMILIES = {"a": ["a*/**/*"], "b": ["b*/**/*"]}  # a file under a folder whose name starts a or b


def _reference_owners(
    rule: str, count: int, known: list[str], rest: list[str], table: dict[str, float], per_family: bool
) -> dict[str, int]:
    """The rules as the docs state them, written apart from :mod:`cuw.partition.rules`: the hash
    from md5's raw bytes, the round-robin as a cycle over one sort key, LPT over a heap."""
    import hashlib
    import heapq
    import itertools

    if rule == "hash":
        return {k: int.from_bytes(hashlib.md5(k.encode()).digest()[:4], "big") % count + 1 for k in known + rest}

    def fam(k: str) -> str:  # FAMILIES by hand: "a..." -> a, "b..." -> b, else other (last)
        return {"a": "a", "b": "b"}.get(k[0], "~other") if per_family and "/" in k else "~other"

    if rule == "sorted":
        order = sorted(known, key=lambda k: (fam(k), k)) + sorted(rest)
        return dict(zip(order, itertools.cycle(range(1, count + 1))))
    mean = sum(table.values()) / len(table)
    cost = {k: table.get(k, mean) for k in known + rest}
    groups = [sorted(g) for _, g in itertools.groupby(sorted(known, key=fam), key=fam)] + [rest]
    load = [0.0] * (count + 1)
    out: dict[str, int] = {}
    for group in groups:
        heap = [(0.0, load[i], i) for i in range(1, count + 1)]
        heapq.heapify(heap)
        for key in sorted(group, key=lambda k: (-cost[k], k)):
            own, total, i = heapq.heappop(heap)
            out[key] = i
            load[i] = total + cost[key]
            heapq.heappush(heap, (own + cost[key], load[i], i))
    return out


@FAST
@given(
    keys,
    st.lists(key_names, max_size=12, unique=True),
    st.one_of(st.integers(1, 6), st.integers(1, MAX_SHARDS)),  # few shards: keys share them, ties meet
    st.sampled_from(RULES),
    st.data(),
)
def test_every_key_has_exactly_one_owner(
    known: list[str], drawn_rest: list[str], count: int, rule: str, data: st.DataObject
) -> None:
    """Known keys and a rest (the sources a source filter's globs leave to the seat), for every
    rule: each key, rest included, in exactly one shard's slice (a Counter, not a sum of sizes),
    owned where an independent reference puts it; the known keys keep their owners without the
    rest; a table rule's table holds the rest too (no rest key falls back to the hash)."""
    from collections import Counter

    rest = [k for k in drawn_rest if k not in known]
    table = {k: data.draw(costs, label=f"cost of {k}") for k in known}
    costed_rest = {k: data.draw(costs, label=f"cost of rest {k}") for k in rest if data.draw(st.booleans(), label=f"{k} costed")}
    per_family = data.draw(st.booleans(), label="per_family") and rule != "hash"
    family = families_of(known, FAMILIES if per_family else {})
    result = assign(count, rule, known, {**table, **costed_rest}, family, per_family, rest=rest)
    assert isinstance(result, Assignment) and result.count == count
    every = known + rest
    strangers = [f"zz/unknown{i}.cu" for i in range(3) if f"zz/unknown{i}.cu" not in every]  # outside the table: the hash
    for key in [*every, *strangers]:
        assert 1 <= result.owner(key) <= count
    slices = [result.owned(every, i) for i in range(1, count + 1)]
    assert Counter(k for part in slices for k in part) == Counter(every)
    expected = _reference_owners(rule, count, known, rest, {**table, **costed_rest}, per_family)
    assert {k: result.owner(k) for k in every} == expected
    assert {k: result.owner(k) for k in strangers} == _reference_owners("hash", count, strangers, [], {}, False)
    if rule != "hash":
        assert set(result.table) == set(every), "the rest is the rule's, not the hash fallback's"
    alone = assign(count, rule, known, table, family, per_family)
    assert {k: alone.owner(k) for k in known} == {k: result.owner(k) for k in known}
    if rule != "hash":  # a table rule uses min(N, keys) shards before any shard gets a second key
        used = {result.owner(k) for k in known}
        assert len(used) == min(count, len(known)) or rule == "cost" and any(v == 0 for v in table.values())
    if rule == "sorted":  # the rest continues the count: still min(N, keys) shards in all
        assert len({result.owner(k) for k in every}) == min(count, len(every))


@FAST
@given(st.integers(-10, 0), st.sampled_from(RULES))
def test_a_count_below_one_is_refused(count: int, rule: str) -> None:
    with pytest.raises((CuwError, ValueError)):
        assign(count, rule, ["a.cu"], {"a.cu": 1.0})


# -- the CLI options -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def world() -> Path:
    """A private recipes copy and a few files for the options to point at."""
    root = Path(tempfile.mkdtemp(prefix="cuw-properties-"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "cwd").mkdir()
    (root / "folder").mkdir()
    (root / "file.txt").write_text("text\n")
    (root / "junk.bin").write_bytes(Path("/bin/ls").read_bytes()[:4096])
    (root / "seat.jsonl").write_text('{"action": "compiled", "key": "csrc/kernels/k00_saxpy.cu", "seconds": 1.5, "rc": 0}\n')
    (root / "x-1.0+cu130-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really")
    yield root
    shutil.rmtree(root, ignore_errors=True)


VERBS = ("matrix", "recipes", "show", "plan", "verify", "index", "costs")
VALUE = [
    "",
    " ",
    "0",
    "-4",
    "1",
    "2",
    "4",
    "256",
    "abc",
    "2..4",
    "8..2",
    "1/2",
    "..",
    "../x",
    "/",
    "example",
    "example_torch",
    "linux/3.11/13.0",
    "linux/3.11/13.0/2.14",
    "13.0",
    "3.11",
    ",",
    "all",
    "99999999999999999999",
    "\u0661",
]
PATH = [
    "{W}/folder",
    "{W}/file.txt",
    "{W}/junk.bin",
    "{W}/seat.jsonl",
    "{W}/missing",
    "{W}/missing/sub",
    "{W}/file.txt/sub",
    "{W}/x-1.0+cu130-py3-none-any.whl",
    "{W}/recipes",
    "{W}/recipes/example/costs.json",
    "{W}/out",
    "/proc/cuw-nope",
]
FLAGS = {
    "matrix": ["--package", "--platform", "--cuda", "--pytorch", "--python", "--chunk", "@--output"],
    "recipes": [],
    "show": ["--cell"],
    "plan": ["--shards", "--range", "@--costs", "@--from-log", "--check"],
    "verify": ["--recipe", "!--no-import"],
    "index": [],
    "costs": ["@--from", "@--source-root", "@--output"],
}
POSITIONAL = {"show": ["recipe"], "plan": ["recipe"], "costs": ["recipe"], "verify": ["@wheel"], "index": ["@in", "@out"]}


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    verb = draw(st.sampled_from(VERBS))
    argv = [verb]
    for slot in POSITIONAL.get(verb, []):
        if draw(st.integers(0, 9)) == 0:
            continue  # a missing positional: argparse's usage error
        argv.append(draw(st.sampled_from(PATH if slot.startswith("@") else VALUE)))
    for flag in draw(st.lists(st.sampled_from(FLAGS[verb] or ["--recipes"]), max_size=4)):
        if flag.startswith("!"):
            argv.append(flag[1:])
        elif flag.startswith("@"):
            argv += [flag[1:], draw(st.sampled_from(PATH))]
        else:
            argv += [flag, draw(st.sampled_from(VALUE))]
    if verb in ("verify",) and "--no-import" not in argv:
        argv.append("--no-import")  # importing a wheel installs it: not a property of the options
    if verb != "index":
        argv += ["--recipes", "{W}/recipes"] if draw(st.integers(0, 5)) else ["--recipes", draw(st.sampled_from(PATH))]
    if draw(st.integers(0, 12)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(["--bogus", "-x", "--", "--json=1"])))
    return argv


@SLOW
@given(argv=argvs())
def test_no_argv_raises_or_reports_an_internal_error(argv: list[str], world: Path, capsys, monkeypatch) -> None:
    argv = [a.replace("{W}", str(world)) for a in argv]
    assume("--help" not in argv and "-h" not in argv)
    logs = world / "logs"
    logs.mkdir(exist_ok=True)
    monkeypatch.chdir(world / "cwd")
    monkeypatch.setenv("CUW_LOG_DIR", str(logs))
    monkeypatch.setenv("CUW_RECIPES", str(world / "recipes"))
    for name in ("CUW_CACHE_TOOL", "CUW_CACHE_REMOTE", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code, err)
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    assert not list(logs.iterdir()), (argv, err)
    if code == 2:
        assert [line for line in err.splitlines() if line.startswith("cuw: error:")], (argv, err)


# -- recipe YAML shapes ----------------------------------------------------------------------

FIELDS = [
    "name",
    "links_torch",
    "source",
    "backend",
    "build_subdir",
    "archs",
    "grid",
    "env",
    "extra_deps",
    "extra_deps_cuda",
    "max_jobs",
    "nvcc_flags",
    "nvcc_threads",
    "pre_build",
    "requires_dist",
    "sharding",
    "verify",
    "path",
    "pypi",
    "sha256",
    "git",
    "tag",
    "count",
    "filter",
    "platforms",
    "rule",
    "per_family",
    "globs",
    "families",
    "key",
    "folder",
    "sources",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "package",
            "..",
            "/",
            "seat",
            "source",
            "hash",
            "cost",
            "linux",
            "9.0",
            "x==1.0",
            "0" * 64,
            "scikit-build-core",
            "setuptools",
        ]
    ),
)
shapes = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=6), st.integers(-3, 3)), inner, max_size=5),
    ),
    max_leaves=20,
)
VALID = {
    "name": "x",
    "links_torch": False,
    "backend": "setuptools",
    "source": {"pypi": "x==1.0", "sha256": "0" * 64},
    "sharding": {"count": 2},
}


@st.composite
def recipe_documents(draw: st.DrawFn) -> object:
    """Random YAML, or the valid recipe with one value (at any depth) replaced."""
    if draw(st.booleans()):
        return draw(shapes)
    doc = yaml.safe_load(yaml.safe_dump(VALID))
    target = doc
    path = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3))
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = draw(shapes)
    return doc


@pytest.fixture(scope="module")
def recipes_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="cuw-yaml-"))
    (root / "r").mkdir()
    (root / "r" / "package").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _load(root: Path, text: str | bytes) -> None:
    path = root / "r" / "recipe.yml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        recipe = load_recipe("r", root)
    except (CuwError, SchemaError) as exc:
        assert str(exc).strip()
        return
    assert isinstance(recipe, Recipe) and recipe.key == "r"


@SLOW
@given(document=recipe_documents())
def test_any_yaml_shape_loads_or_is_a_cuw_error(document: object, recipes_root: Path) -> None:
    _load(recipes_root, yaml.safe_dump(document, allow_unicode=True))


@SLOW
@given(text=st.one_of(st.text(max_size=80), st.binary(max_size=80)))
def test_any_recipe_text_loads_or_is_a_cuw_error(text: str | bytes, recipes_root: Path) -> None:
    _load(recipes_root, text)


def test_the_committed_recipes_still_load() -> None:
    for folder in sorted((REPO / "recipes").glob("*/recipe.yml")):
        assert load_recipe(folder.parent.name, REPO / "recipes").key == folder.parent.name


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=400), st.text(alphabet="ab:-[]{}&*!|>#'\" \n\t,.?%@`", max_size=200).map(str.encode)))
def test_the_yaml_reader_answers_any_bytes_with_data_or_one_refusal(tmp_path, data):
    """Random bytes and YAML-ish punctuation: parsed, or a CuwError naming the file; never another exception."""
    from cuw.base.errors import CuwError
    from cuw.base.yamlfile import read_yaml

    path = tmp_path / "recipe.yml"
    path.write_bytes(data)
    try:
        read_yaml(path, "recipe")
    except CuwError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)


def test_the_yaml_reader_refuses_a_fifo_without_blocking(tmp_path):
    import os

    from cuw.base.errors import CuwError
    from cuw.base.yamlfile import read_yaml

    fifo = tmp_path / "defaults.yml"
    os.mkfifo(fifo)
    with pytest.raises(CuwError, match="not a regular file"):
        read_yaml(fifo, "farm policy")
