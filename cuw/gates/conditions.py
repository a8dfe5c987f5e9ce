"""The shard gate and the link gate: pure functions over what a job observed.

Every condition the forge enforces on a build result lives here. A verdict is
a pass/fail plus one line per reason; callers print, report and exit on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from cuw.partition.coverage import is_cuda
from cuw.partition.rules import Assignment

# ld, nvlink, and MSVC's linker (LNK2019/LNK2001, or its /FORCE:UNRESOLVED warning LNK4088).
UNDEFINED_REFERENCE = re.compile(
    r"undefined reference to|nvlink error\s*: Undefined reference to|unresolved external symbol|LNK4088", re.I
)

# Lines may be indented (pip -v indents build output).
# Compiler diagnostics that mean a TU failed to compile, in the shapes gcc,
# nvcc's front end (EDG/cudafe/cicc), ptxas and the nvcc driver print them.
# ld and nvlink are linkers: their errors are what a shard is expected to hit.
COMPILE_ERROR_PATTERNS = (
    # gcc/clang (and nvcc's host pass): file.cu:123:4: error: / fatal error:
    re.compile(r"^[ \t]*\S+?:\d+(?::\d+)?: (?:fatal )?error: ", re.M),
    # nvcc front end: file.cu(123): error: ... / catastrophic error:
    re.compile(r"^[ \t]*\S+?\(\d+\): (?:catastrophic )?error\b", re.M),
    # MSVC (host pass on Windows): file.cpp(12): error C2065: ...
    re.compile(r"\): (?:fatal )?error C\d{4}:", re.M),
    re.compile(r"^[ \t]*ptxas (?:fatal|error)\s*:", re.M),
    re.compile(r"^[ \t]*nvcc (?:fatal|error)\s*:", re.M),
    re.compile(r"^[ \t]*cicc(?:\S*)?: .*error", re.M),
    re.compile(r"^[ \t]*Error: .*(?:cicc|ptxas|cudafe)", re.M),
)


def compile_errors(log: str, limit: int = 5) -> list[str]:
    """The first compiler error diagnostics in a build log (never linker errors)."""
    found: list[tuple[int, str]] = []
    for pattern in COMPILE_ERROR_PATTERNS:
        for match in pattern.finditer(log):
            end = log.find("\n", match.start())
            found.append((match.start(), log[match.start() : end if end != -1 else len(log)].strip()))
    return [line for _, line in sorted(found)[:limit]]


@dataclass
class Verdict:
    gate: str
    ok: bool
    reasons: list[str] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def line(self) -> str:
        status = "PASS" if self.ok else "FAIL"
        return f"{self.gate} gate {status}: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class ShardObservation:
    build_rc: int
    log: str
    real_objects: int
    """Object files in the build tree that are not the seat's empty stub."""
    seat_compiles_seen: int
    """CUDA compiles that reached the seat, stubbed or not (probes excluded)."""
    compiled: list[str]
    """TU keys this shard compiled through the cache."""
    failed: list[str]
    """TU keys whose compile returned non-zero."""
    expected_owned: list[str]
    """TU keys this shard should compile (source filter: kept files; seat: predicted)."""
    cache_files: int
    """Real entries the shard's cache holds (or, with a remote, entries written to or found in it)."""
    build_tus: Optional[list[str]] = None
    """Source keys the build system's compile databases list (ninja's, compile_commands.json);
    None when the build left none. An owned TU outside them is not part of the build."""
    host_compiles_seen: int = 0
    """Host compiles that reached the seat (the host seat: -ccbin, CC/CXX)."""
    device_code: bool = True
    """The recipe's ``device_code``: false, a host compile shows the build compiled from source."""
    uncacheable: dict[str, str] = field(default_factory=dict)
    """TU key -> the cache's reason, for owned compiles that succeeded but that the cache could not
    store (``unsupported_compiler_option``, ``multiple_source_files``, …): the link would miss them."""


def _listing(keys: list[str], limit: int = 5) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def shard_gate(obs: ShardObservation) -> Verdict:
    v = Verdict("shard", ok=True)
    v.facts = {
        "build_rc": obs.build_rc,
        "real_objects": obs.real_objects,
        "compiled": len(obs.compiled),
        "expected_owned": len(obs.expected_owned),
        "cache_files": obs.cache_files,
    }
    errors = compile_errors(obs.log)
    if obs.failed or errors:
        v.ok = False
        named = ", ".join(obs.failed) if obs.failed else "see log"
        v.reasons.append(f"a real compile error ({named}): " + (errors[0] if errors else "compiler exited non-zero"))
    if obs.device_code and obs.seat_compiles_seen == 0:
        v.ok = False
        v.reasons.append(
            "the seat saw no CUDA compile: the build did not compile from source "
            "(a prebuilt download?) or called nvcc around the seat"
        )
    elif not obs.device_code and obs.seat_compiles_seen + obs.host_compiles_seen == 0:
        v.ok = False
        v.reasons.append(
            "the seat saw no compile (the recipe has device_code: false, so a host compile counts): the build "
            "did not compile from source (a prebuilt download?) or called the compiler around the seat"
        )
    # A source file the build never compiles (one of another flavour's, say) is no TU of the slice.
    # Without a compile database only CUDA sources are taken as built: a host source in the tree
    # may be a test or an example no build step compiles.
    if obs.build_tus is None:
        in_build = [k for k in obs.expected_owned if is_cuda(k)]
    else:
        listed = set(obs.build_tus)
        in_build = [k for k in obs.expected_owned if k in listed]
    missing = sorted(set(in_build) - set(obs.compiled))
    outside = sorted(set(obs.expected_owned) - set(in_build) - set(obs.compiled)) if obs.build_tus is not None else []
    if in_build and not obs.compiled:
        v.ok = False
        v.reasons.append(f"compiled none of its {len(in_build)} TUs")
    elif missing and obs.build_rc != 0:
        # A shard's build keeps going past a failed link (ninja -k 0, make -k): an owned TU it
        # never compiled would be a miss in the link job, hours later.
        v.ok = False
        v.facts["uncompiled"] = missing
        v.reasons.append(
            f"{len(missing)} of its {len(obs.expected_owned)} TUs were never compiled before the build failed "
            f"(the link would miss them): {_listing(missing)}"
        )
    if outside and obs.build_rc != 0:
        v.reasons.append(f"note: {len(outside)} TUs of its slice are not in the build's compile database: {_listing(outside)}")
    if obs.uncacheable:
        v.ok = False
        v.facts["uncacheable"] = sorted(obs.uncacheable)
        why = ", ".join(sorted(set(obs.uncacheable.values())))
        v.reasons.append(
            f"{len(obs.uncacheable)} of its TUs compiled but the cache could not store them ({why}): the link "
            f"would miss them; drop the flag that makes the cache refuse them: {_listing(sorted(obs.uncacheable))}"
        )
    if obs.compiled and obs.cache_files == 0:
        v.ok = False
        v.reasons.append("the cache is empty after compiling: nothing to hand over")
    if obs.build_rc != 0:
        if obs.real_objects == 0:
            v.ok = False
            v.reasons.append("no real object files were built")
        if not UNDEFINED_REFERENCE.search(obs.log):
            v.ok = False
            v.reasons.append("compile-shard failed without undefined references (configure or build error; see log)")
    if v.ok:
        how = "build succeeded" if obs.build_rc == 0 else "link failed on undefined references, as a shard should"
        n = len(obs.compiled)
        slice_note = f"compiled {n} TU{'' if n == 1 else 's'}" if n else "empty slice (no TU hashes to this shard)"
        v.reasons.insert(0, f"{slice_note}; {how}")
    return v


@dataclass(frozen=True)
class LinkObservation:
    build_rc: int
    wheel: Optional[str]
    hits: int
    misses: int
    uncacheable: int
    total: int
    """Compiler calls (TUs) the cache tool saw, in its own terms."""
    stats_zeroed_at: int
    merged_at: int
    """When the shard caches were merged; the counters must be zeroed after it."""
    cuda_tus_in_build: list[str]
    """CUDA TU keys the build system compiled (from its own compile database)."""
    seat_keys: list[str]
    """CUDA TU keys that went through the seat."""
    misses_by_key: list[str]
    uncacheable_by_key: list[str]
    shard_count: int
    missing_shards: list[int]
    log: str = ""
    assignment: Optional[Assignment] = None
    """The recipe's partition at N, to name the shard that owned each missed TU (None: the hash rule)."""
    compile_db: Optional[str] = "ninja"
    """Where ``cuda_tus_in_build`` came from (``ninja``, ``compile_commands.json``), or None when
    the build left no compile database and the seat-bypass check could not run."""


def link_gate(obs: LinkObservation) -> Verdict:
    v = Verdict("link", ok=True)
    total = obs.total
    v.facts = {
        "hits": obs.hits,
        "misses": obs.misses,
        "uncacheable": obs.uncacheable,
        "total": total,
        "cuda_tus": len(obs.cuda_tus_in_build),
        "missing_shards": obs.missing_shards,
    }
    if obs.build_rc != 0 or not obs.wheel:
        v.ok = False
        errors = compile_errors(obs.log, limit=1)
        v.reasons.append("the link build failed" + (f": {errors[0]}" if errors else f" (exit {obs.build_rc}); see log"))
    if obs.stats_zeroed_at < obs.merged_at:
        v.ok = False
        v.reasons.append("cache counters were not zeroed after the merge: they would report the shards' history")
    if total == 0:
        v.ok = False
        v.reasons.append("the cache saw zero compiler calls: the handoff did not happen (nothing restored, or the seat bypassed)")
    bypassed = sorted(set(obs.cuda_tus_in_build) - set(obs.seat_keys))
    if bypassed:
        v.ok = False
        v.reasons.append(
            f"{len(bypassed)} of {len(obs.cuda_tus_in_build)} CUDA TUs bypassed the seat (nvcc called by path?): "
            + ", ".join(bypassed[:5])
        )
    if total < len(obs.cuda_tus_in_build):
        v.ok = False
        v.reasons.append(f"the cache saw {total} calls for {len(obs.cuda_tus_in_build)} CUDA TUs in the build")
    for noun, count, keys in (
        ("cache misses", obs.misses, obs.misses_by_key),
        ("uncacheable compiles", obs.uncacheable, obs.uncacheable_by_key),
    ):
        if count:
            v.ok = False
            v.reasons.append(f"{noun}: {count} (must be 0): " + attribute(keys, obs.shard_count, obs.missing_shards, obs.assignment))
    if v.ok:
        v.reasons.insert(0, f"{total} compiler calls, {obs.hits} cache hits, zero misses; {len(obs.cuda_tus_in_build)} CUDA TUs in the build")
    v.facts["compile_db"] = obs.compile_db
    if obs.compile_db is None:
        v.reasons.append(
            "note: the build left no compile database (neither ninja's nor CMake's compile_commands.json), "
            "so the seat-bypass check could not run"
        )
    elif not obs.cuda_tus_in_build and total:
        v.reasons.append(f"note: the build's compile database ({obs.compile_db}) lists no CUDA TU, "
                         "so the seat-bypass check had nothing to compare")  # fmt: skip
    return v


def attribute(keys: list[str], count: int, missing_shards: list[int], assignment: Optional[Assignment] = None) -> str:
    """Names each missed TU with the shard that owned it under the recipe's rule."""
    rule = assignment or Assignment(count)
    parts = []
    for key in sorted(keys)[:8]:
        shard = rule.owner(key)
        why = " (its archive is missing)" if shard in missing_shards else ""
        parts.append(f"{key} <- shard {shard}/{count}{why}")
    more = f" and {len(keys) - 8} more" if len(keys) > 8 else ""
    return ", ".join(parts) + more if parts else "not attributed to a TU"
