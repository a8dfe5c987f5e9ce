"""Which shard owns a translation unit: the one partition rule of the forge.

A TU's key is its source path relative to the source root, with forward
slashes (``csrc/kernels/k03_reduce.cu``). The owner is

    shard = int(md5(key)[:8], 16) % N + 1        (1-based)

The key depends only on the source layout, so the seat (deciding live inside
the build), the ``source`` filter (deleting files before it) and a planner on
any other machine all reach the same answer.
"""

from __future__ import annotations

import hashlib
import ntpath
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from cuw.base.errors import InputError
from cuw.base.shard_spec import spec_numbers
from cuw.config.limits import check_count
from cuw.partition.globs import glob_match


_WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def tu_key(path: str, source_root: str) -> str:
    """The partition key of a source file: its path relative to the source root.

    Windows paths (``D:\\a\\_temp\\src\\k.cu``) give the same key as POSIX ones,
    on any machine, so a planner on Linux predicts a Windows lane.
    """
    if _WINDOWS_PATH.match(path) or _WINDOWS_PATH.match(source_root):
        rel = ntpath.relpath(ntpath.normpath(path), ntpath.normpath(source_root))
        return rel.replace("\\", "/")
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(source_root))
    return rel.replace(os.sep, "/")


def owner(key: str, count: int) -> int:
    """The 1-based shard that compiles the TU with this key."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    digest = hashlib.md5(key.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % count + 1


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count``, 1-based, as written on the command line (``3/23``)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def tag(self) -> str:
        """File-name form: ``3of23``."""
        return f"{self.index}of{self.count}"

    def owns(self, key: str) -> bool:
        return owner(key, self.count) == self.index


# ASCII digits only: ``\d`` also takes Arabic-Indic and other digits, which int() reads.


# A cell's N shard jobs and its link job run in one GitHub matrix, which holds at most 256 jobs.
def parse_shard_spec(text: str) -> ShardSpec:
    """Parses ``I/N`` (1 <= I <= N); anything else is a CuwError that says why."""
    numbers = spec_numbers(text)
    if numbers is None:
        raise InputError(f"shard {text!r} is not I/N (for example 3/23: shard 3 of 23, counted from 1)")
    index, count = numbers
    check_count(count, f"shard {text!r}: count")
    if not 1 <= index <= count:
        raise InputError(f"shard {text!r}: the index must be between 1 and {count} (shards count from 1)")
    return ShardSpec(index, count)


# -- rules over a known set of TUs ---------------------------------------------
#
# ``hash`` needs nothing but the key. ``sorted`` and ``cost`` need the full set
# (the source filter's files, or a recipe's cost table), so they produce an
# explicit table key -> shard; a key outside that table (a TU the table never
# saw) falls back to the hash rule, so every key still has exactly one owner.

RULES = ("hash", "sorted", "cost")
OTHER_FAMILY = "other"


def families_of(keys: Iterable[str], families: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Each key's family: the one whose globs match it, else ``other``; two families for one key is an error."""
    out: dict[str, str] = {}
    for key in keys:
        found = sorted(name for name, globs in families.items() if any(glob_match(key, g) for g in globs))
        if len(found) > 1:
            raise InputError(f"sharding.source.families: {key} matches {' and '.join(found)}; a file belongs to one family")
        out[key] = found[0] if found else OTHER_FAMILY
    return out


@dataclass(frozen=True)
class Assignment:
    """Which shard owns each TU: an explicit table, with the hash rule for keys outside it."""

    count: int
    rule: str = "hash"
    table: Mapping[str, int] = field(default_factory=dict)

    def owner(self, key: str) -> int:
        return self.table.get(key) or owner(key, self.count)

    def owned(self, keys: Iterable[str], index: int) -> list[str]:
        return [k for k in keys if self.owner(k) == index]


def _family_order(family: Mapping[str, str]) -> list[str]:
    names = sorted(set(family.values()) - {OTHER_FAMILY})
    return names + ([OTHER_FAMILY] if OTHER_FAMILY in family.values() else [])


def _round_robin(
    keys: Sequence[str], count: int, family: Mapping[str, str], per_family: bool, rest: Sequence[str] = ()
) -> dict[str, int]:
    """Sorted index i -> shard (i mod N) + 1; per family, the count runs on across families
    (sorted by name, ``other`` last) so each family covers min(size, N) shards. The ``rest``
    keys come after all of them, sorted, the count running on."""
    groups = (
        [[k for k in sorted(keys) if family.get(k, OTHER_FAMILY) == name] for name in _family_order(family)]
        if per_family
        else [sorted(keys)]
    )
    ordered = [k for group in groups for k in group] + sorted(rest)
    return {key: i % count + 1 for i, key in enumerate(ordered)}


def _lpt(
    costs: Mapping[str, float],
    count: int,
    family: Mapping[str, str],
    per_family: bool,
    rest: Optional[Mapping[str, float]] = None,
) -> dict[str, int]:
    """Longest processing time first: cost descending then key; each TU goes to the
    lowest-loaded shard, ties to the lowest index. Per family, the family's own load
    decides first (so its TUs spread over all shards), the total load breaks ties.
    The ``rest`` (key -> cost) comes last, onto the loads the others left."""
    load = [0.0] * count
    out: dict[str, int] = {}
    groups: list[list[str]] = [
        [k for k in costs if name is None or family.get(k, OTHER_FAMILY) == name]
        for name in (_family_order(family) if per_family else [None])
    ]
    every = {**costs, **(rest or {})}
    if rest:
        groups.append(list(rest))
    for keys in groups:
        fam_load = [0.0] * count
        for key in sorted(keys, key=lambda k: (-every[k], k)):
            best = min(range(count), key=lambda i: (fam_load[i], load[i], i))
            fam_load[best] += every[key]
            load[best] += every[key]
            out[key] = best + 1
    return out


def assign(
    count: int,
    rule: str,
    keys: Iterable[str] = (),
    costs: Optional[Mapping[str, float]] = None,
    family: Optional[Mapping[str, str]] = None,
    per_family: bool = False,
    rest: Iterable[str] = (),
) -> Assignment:
    """The one partition function: N, a rule, the known keys (with costs and families) -> an assignment.

    ``hash``: every key by md5. ``sorted``: round-robin over the sorted ``keys``
    (or the cost table's keys when ``keys`` is empty). ``cost``: LPT over the cost table.

    ``rest``: keys assigned after all of those, by the same rule, continuing where they
    left off (the round-robin's count, the LPT's shard loads), so the known keys' owners
    are the same with or without them. A source-filter recipe's seat partitions these:
    the sources its globs do not cover. Under ``cost`` a rest key without a cost in the
    table costs the table's mean.
    """
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    if rule not in RULES:
        raise InputError(f"sharding.rule {rule!r} is not one of {', '.join(RULES)}")
    family = dict(family or {})
    extra = set(rest)
    known = sorted((set(keys) or set(costs or {})) - extra)
    if rule == "hash":
        table: dict[str, int] = {}  # the fallback is the rule
    elif rule == "sorted":
        table = _round_robin(known, count, family, per_family, sorted(extra))
    else:
        if not costs:
            raise InputError("sharding.rule 'cost' needs a cost table (record one with `cuw costs <recipe> --from <log>`)")
        fallback = unseen_cost(costs)
        main = {k: v for k, v in costs.items() if k not in extra}
        table = _lpt(main, count, family, per_family, {k: costs.get(k, fallback) for k in extra})
    return Assignment(count, rule, table)


def unseen_cost(costs: Mapping[str, float]) -> float:
    """What a TU the table never saw costs: the table's mean (0 for an empty table)."""
    return sum(costs.values()) / len(costs) if costs else 0.0


def shard_listing(indices: list[int], count: int) -> str:
    """Shards by index, runs folded: ``[2, 3, 4, 7]`` of 10 -> ``4 of 10 (2-4, 7)``; one line at any N."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    spans = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"{len(set(indices))} of {count} ({spans})"
