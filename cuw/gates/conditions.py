"""The shard gate and the link gate: pure functions over what a job observed.

Every condition the forge enforces on a build result lives here. A verdict is
a pass/fail plus one line per reason; callers print, report and exit on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

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


# A build that died of its machine, not of its code. The out-of-memory killer sends SIGKILL to
# the largest process (a compiler: cicc, cc1plus, ptxas); each driver reports that in its own words.
KILLED_PATTERNS = (
    re.compile(r"Killed signal terminated program \S+"),  # gcc/g++ driver
    re.compile(r"internal compiler error: Killed\b.*"),  # older gcc: "... Killed (program cc1plus)"
    re.compile(r"'[^']+' died due to signal 9\b.*"),  # nvcc driver
    re.compile(r"died with <Signals\.SIGKILL: 9>"),  # Python's subprocess (torch's cpp_extension, setuptools)
    re.compile(r"^[ \t]*Killed[ \t]*$", re.M),  # sh reporting its killed child (nvcc 13 runs cicc through sh)
    re.compile(r"^.*: line \d+: +\d+ Killed\b.*$", re.M),  # bash reporting its killed child
    re.compile(r"\bError 137\b|\b(?:exit (?:status|code)|returned) 137\b"),  # make, CMake: 128 + SIGKILL
)
# ninja (1.12+) names a step's exit code: 137 is 128 + SIGKILL. Second choice: the compiler's own
# "Killed" line, when there is one, comes with it and is quoted with this step.
NINJA_KILLED = re.compile(r"FAILED: \[code=137\].*")
OUT_OF_MEMORY_PATTERNS = (
    re.compile(r"virtual memory exhausted.*"),  # gcc's xmalloc
    re.compile(r"out of memory allocating \d+ bytes.*"),  # cc1plus
    re.compile(r"std::bad_alloc"),
    re.compile(r"Cannot allocate memory"),  # ENOMEM: fork, mmap
)
DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded")
MEMORY_KNOBS = "lower max_jobs / nvcc_threads in the recipe (or the job's --jobs)"
DISK_KNOBS = "free space on the work folder's disk (a hosted runner's preinstalled toolchains) or point --work at a larger one"


def _log_line(log: str, start: int, limit: int = 200) -> str:
    """The whole line of the log around ``start``, cut to ``limit`` characters."""
    begin = log.rfind("\n", 0, start) + 1
    end = log.find("\n", start)
    line = log[begin : end if end != -1 else len(log)].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _first(patterns: tuple[re.Pattern[str], ...], log: str) -> Optional[int]:
    """Where the earliest match of any pattern starts (the first casualty is the cause; later
    lines are often the build giving up)."""
    starts = [m.start() for m in (p.search(log) for p in patterns) if m]
    return min(starts) if starts else None


def _killed_what(log: str, at: int) -> str:
    """The line that says a compiler was killed; a bare ``Killed`` gets the step ninja names
    (``FAILED: [code=137] <object>``) before it, so the verdict says which TU was being compiled."""
    line = _log_line(log, at)
    if line == "Killed":
        # ninja prints the step, then its command, then what it said: a FAILED line well before
        # belongs to another step.
        before = log[:at].splitlines()[-20:]
        failed = [b.strip() for b in before if b.strip().startswith("FAILED: ")]
        if failed:
            return f"Killed ({failed[-1][:200]})"
    return line


def size(mb: object) -> str:
    """A size in a verdict, a report line or the timeline: GB from 1 GB up (how runners are sold),
    MB below (a 48 MB process is not "0.0 GB")."""
    if isinstance(mb, bool) or not isinstance(mb, (int, float)):
        return "?"
    return f"{mb / 1000:.1f} GB" if mb >= 1000 else f"{mb:.0f} MB"


def _memory_numbers(resources: Optional[dict[str, Any]]) -> str:
    if not resources or resources.get("peak_mem_used_mb") is None:
        return ""
    text = f"; {size(resources['peak_mem_used_mb'])} used at the peak"
    if resources.get("mem_total_mb"):
        text += f" of {size(resources['mem_total_mb'])}"
    if resources.get("min_mem_available_mb") is not None:
        text += f", {size(resources['min_mem_available_mb'])} available at the least"
    top = resources.get("largest") or []
    if top and isinstance(top[0], dict):
        text += f", largest process {top[0].get('name')} at {size(top[0].get('rss_mb') or 0)}"
    return text


def _disk_numbers(resources: Optional[dict[str, Any]]) -> str:
    if not resources or resources.get("disk_free_start_mb") is None:
        return ""
    text = f"; {size(resources['disk_free_start_mb'])} free on {resources.get('disk_mount', 'its disk')} at the job's start"
    if resources.get("min_disk_free_mb") is not None:
        text += f", {size(resources['min_disk_free_mb'])} at the least"
    return text


def _memory_cause(log: str, build_rc: int) -> str:
    """What in the log (or the build's exit) says memory ran out, or ""."""
    killed = _first(KILLED_PATTERNS, log)
    killed = _first((NINJA_KILLED,), log) if killed is None else killed
    if killed is not None:
        return f"a compiler was killed: {_killed_what(log, killed)}"
    short = _first(OUT_OF_MEMORY_PATTERNS, log)
    if short is not None:
        return f"a process could not get memory: {_log_line(log, short)}"
    if build_rc in (-9, 137):
        return f"the build was killed by SIGKILL (exit {build_rc}), what the kernel's out-of-memory killer does"
    return ""


def starved(log: str, build_rc: int = 0, resources: Optional[dict[str, Any]] = None) -> dict[str, str]:
    """Why a failed build died of its machine: ``{"memory": reason, "disk": reason}``, each only
    when the log (or a SIGKILLed build, exit -9/137) shows it. One function for the shard and the
    link gate, so both name the same cause and the same knob."""
    found: dict[str, str] = {}
    what = _memory_cause(log, build_rc)
    if what:
        found["memory"] = f"the build ran out of memory ({what}){_memory_numbers(resources)}; {MEMORY_KNOBS}"
    full = DISK_FULL.search(log)
    if full:
        found["disk"] = (
            f"the disk filled ({full.group(0)}: {_log_line(log, full.start())}){_disk_numbers(resources)}; {DISK_KNOBS}"
        )
    return found


def _blame_machine(v: "Verdict", log: str, build_rc: int, resources: Optional[dict[str, Any]]) -> None:
    """A failed verdict whose build died of memory or disk says so first: the other reasons
    (a compile error, no objects) are what that death looks like, not its cause."""
    causes = starved(log, build_rc, resources)
    if causes:
        v.facts["starved"] = sorted(causes)
        v.reasons[:0] = [causes[k] for k in ("memory", "disk") if k in causes]


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
    unstored_misses: int = 0
    """Misses a remote cache never received (read-only, failing): the link would miss them."""
    """TU key -> the cache's reason, for owned compiles that succeeded but that the cache could not
    store (``unsupported_compiler_option``, ``multiple_source_files``, …): the link would miss them."""
    resources: Optional[dict[str, Any]] = None
    """The job's resource record without its samples (:func:`cuw.jobs.resources.summary`): numbers
    for a verdict that blames memory or disk."""
    deferred: list[str] = field(default_factory=list)
    """TU keys the seat did not start because the job's deadline had passed: left, not failed."""
    earlier: list[str] = field(default_factory=list)
    """A continuation's: TU keys finished in the earlier parts of its shard (in the cache it restored)."""
    missed: list[str] = field(default_factory=list)
    """TU keys whose compile here missed the cache: an earlier part's TU among them was not handed on."""

    @property
    def left(self) -> list[str]:
        """The TUs this part leaves to a continuation: deferred, and in no part's cache yet."""
        return sorted(set(self.deferred) - set(self.compiled) - set(self.earlier))


def _listing(keys: list[str], limit: int = 5) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def shard_gate(obs: ShardObservation) -> Verdict:
    """A shard's verdict: each check below adds its reasons in this order; a failed build that
    died of its machine says so first, a pass says what was compiled."""
    v = Verdict("shard", ok=True, facts=_shard_facts(obs))
    _check_compile_errors(v, obs)
    _check_seat_saw_compiles(v, obs)
    _check_slice_compiled(v, obs)
    _check_cache_stored(v, obs)
    _check_failed_build(v, obs)
    _check_part(v, obs)
    if not v.ok and (obs.build_rc != 0 or obs.failed):
        _blame_machine(v, obs.log, obs.build_rc, obs.resources)
    if v.ok:
        v.reasons.insert(0, _shard_pass_line(obs))
    return v


def _shard_facts(obs: ShardObservation) -> dict[str, object]:
    return {
        "build_rc": obs.build_rc,
        "real_objects": obs.real_objects,
        "compiled": len(obs.compiled),
        "expected_owned": len(obs.expected_owned),
        "cache_files": obs.cache_files,
    }


def _fail(v: Verdict, reason: str) -> None:
    v.ok = False
    v.reasons.append(reason)


def _check_compile_errors(v: Verdict, obs: ShardObservation) -> None:
    errors = compile_errors(obs.log)
    if obs.failed or errors:
        named = ", ".join(obs.failed) if obs.failed else "see log"
        _fail(v, f"a real compile error ({named}): " + (errors[0] if errors else "compiler exited non-zero"))


def _check_seat_saw_compiles(v: Verdict, obs: ShardObservation) -> None:
    if obs.device_code and obs.seat_compiles_seen == 0:
        _fail(
            v,
            "the seat saw no CUDA compile: the build did not compile from source "
            "(a prebuilt download?) or called nvcc around the seat",
        )
    elif not obs.device_code and obs.seat_compiles_seen + obs.host_compiles_seen == 0:
        _fail(
            v,
            "the seat saw no compile (the recipe has device_code: false, so a host compile counts): the build "
            "did not compile from source (a prebuilt download?) or called the compiler around the seat",
        )


def _owned_in_build(obs: ShardObservation) -> list[str]:
    """The owned TUs the build compiles. A source file the build never compiles (one of another
    flavour's, say) is no TU of the slice. Without a compile database only CUDA sources are taken
    as built: a host source in the tree may be a test or an example no build step compiles."""
    if obs.build_tus is None:
        return [k for k in obs.expected_owned if is_cuda(k)]
    listed = set(obs.build_tus)
    return [k for k in obs.expected_owned if k in listed]


def _check_slice_compiled(v: Verdict, obs: ShardObservation) -> None:
    in_build = _owned_in_build(obs)
    missing = sorted(set(in_build) - set(obs.compiled) - set(obs.deferred))  # deferred: left, not failed
    unseen = sorted(set(obs.expected_owned) - set(in_build) - set(obs.compiled))
    if in_build and not obs.compiled and not obs.deferred:
        _fail(v, f"compiled none of its {len(in_build)} TUs")
    elif missing and obs.build_rc != 0:
        # A shard's build keeps going past a failed link (ninja -k 0, make -k): an owned TU it
        # never compiled would be a miss in the link job, hours later.
        v.facts["uncompiled"] = missing
        _fail(
            v,
            f"{len(missing)} of its {len(obs.expected_owned)} TUs were never compiled before the build failed "
            f"(the link would miss them): {_listing(missing)}",
        )
    if obs.build_tus is not None and unseen:
        v.reasons.append(f"note: {len(unseen)} TUs of its slice are not in the build's compile database: {_listing(unseen)}")
    if obs.build_tus is None and unseen and obs.build_rc != 0:
        # Without a compile database a host source may be a test or an example no step builds: a
        # note, not a failure, that says what the gate could not check.
        v.reasons.append(
            f"note: without a compile database only CUDA TUs are checked; {len(unseen)} host TUs of its "
            f"slice were never seen compiled (the link would miss any the build needs): {_listing(unseen)}"
        )


def _check_cache_stored(v: Verdict, obs: ShardObservation) -> None:
    if obs.uncacheable:
        v.facts["uncacheable"] = sorted(obs.uncacheable)
        why = ", ".join(sorted(set(obs.uncacheable.values())))
        _fail(
            v,
            f"{len(obs.uncacheable)} of its TUs compiled but the cache could not store them ({why}): the link "
            f"would miss them; drop the flag that makes the cache refuse them: {_listing(sorted(obs.uncacheable))}",
        )
    if obs.compiled and obs.cache_files == 0:
        _fail(v, "the cache is empty after compiling: nothing to hand over")
    elif obs.unstored_misses:
        _fail(
            v,
            f"{obs.unstored_misses} of its compiles missed the cache and never reached the remote cache "
            "(read-only, or it refused the writes): the link would miss them; give the shard a remote it can write to",
        )


def _check_failed_build(v: Verdict, obs: ShardObservation) -> None:
    """A shard's build is expected to fail at the link, on undefined references only."""
    if obs.build_rc == 0:
        return
    if obs.real_objects == 0 and (obs.compiled or not obs.deferred):  # all deferred: only stubs
        _fail(v, "no real object files were built")
    if not UNDEFINED_REFERENCE.search(obs.log):
        _fail(v, "compile-shard failed without undefined references (configure or build error; see log)")


def _shard_pass_line(obs: ShardObservation) -> str:
    how = "build succeeded" if obs.build_rc == 0 else "link failed on undefined references, as a shard should"
    n = len(obs.compiled)
    if n or obs.deferred:
        slice_note = f"compiled {n} TU{'' if n == 1 else 's'}{_part_note(obs)}"
    elif obs.expected_owned:
        slice_note = f"compiled none of the {len(obs.expected_owned)} TUs of its slice: no build step compiles them"
    else:
        slice_note = "empty slice (no TU hashes to this shard)"
    return f"{slice_note}; {how}"


def _check_part(v: Verdict, obs: ShardObservation) -> None:
    """A part of a shard split by its deadline: what it leaves (facts), and a continuation's
    replays of the earlier parts' TUs, every one a cache hit (else the handoff between parts broke)."""
    if obs.deferred or obs.earlier:
        v.facts["left"] = obs.left
        v.facts["partial"] = bool(obs.left)
    missed = sorted(set(obs.earlier) & set(obs.missed))
    if missed:
        _fail(
            v,
            f"{len(missed)} TUs finished in earlier parts missed the cache restored from them (each must be a hit: "
            f"the archive resumed is not the one those parts packed, or its cache lost entries): {_listing(missed)}",
        )


def _part_note(obs: ShardObservation) -> str:
    replayed = len(set(obs.earlier) & set(obs.compiled))
    note = f" ({replayed} of them finished in earlier parts, all hits)" if replayed else ""
    if obs.left:
        note += f"; stopped at its deadline with {len(obs.left)} of its {len(obs.expected_owned)} TUs left (partial)"
    return note


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
    resources: Optional[dict[str, Any]] = None
    """As :attr:`ShardObservation.resources`."""


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
        _blame_machine(v, obs.log, obs.build_rc, obs.resources)
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
            v.reasons.append(
                f"{noun}: {count} (must be 0): " + attribute(keys, obs.shard_count, obs.missing_shards, obs.assignment)
            )
    if v.ok:
        v.reasons.insert(
            0, f"{total} compiler calls, {obs.hits} cache hits, zero misses; {len(obs.cuda_tus_in_build)} CUDA TUs in the build"
        )
    v.facts["compile_db"] = obs.compile_db
    if obs.compile_db is None:
        v.reasons.append(
            "note: the build left no compile database (neither ninja's nor CMake's compile_commands.json), "
            "so the seat-bypass check could not run"
        )
    elif not obs.cuda_tus_in_build and total:
        v.reasons.append(
            f"note: the build's compile database ({obs.compile_db}) lists no CUDA TU, "
            "so the seat-bypass check had nothing to compare"
        )
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
