"""What the seat costs per compiler call, in milliseconds, with the real nvcc, g++ and ccache.

    python benchmarks/seat_overhead.py [--calls 40] [--json out.json]

One seat (shard 1 of 2, hash rule) and its host seat are installed as a job
installs them. Per call, median and p90 of ``--calls`` calls of:

* stub .cu:  a foreign CUDA TU through the nvcc seat (gets the empty object);
* stub .cpp: a foreign host TU through the host seat (g++);
* the same two stubs through the native stub (cuw/seat/seat_stub.c, as a shard job installs
  it), run with CUW_SEAT_STUB_NO_FALLBACK so a call it handed to Python would fail;
* seat hit:  an owned TU that is a cache hit, through the Python seat;
* native hit: the same hit through the native stub (it runs the cache itself, no Python);
* ccache hit: the same hit calling ccache directly (``ccache <real compiler>
  <same args>``, same cache environment), for a tiny .cu and a tiny .cpp;
* waiter hit: the .cpp ccache hit started by a C program that does nothing else (vfork, exec,
  wait; linked statically where it can be): what one more process in front of ccache costs here,
  the native seat's floor;
* not a TU: ``g++ -E`` of a tiny file (a call a configure makes dozens of: a probe, a link,
  nvcc's intermediates) through the Python host seat, through the native stub, and directly.

The seat's own overhead on a hit is (seat hit) - (ccache hit); the target is
<= 5 ms per stubbed TU and, through the native seat, <= 1 ms over ccache per cache hit (the link
job's every TU). The calls are interleaved round-robin, so the noise of a shared machine falls on
every column alike; wall times on a loaded machine also hold the wait for a core after each process
a call waits for (the native seat waits for one more than ccache alone), so the CPU rows beside
them say what the seat itself costs. A breakdown of a
stub's cost follows: the interpreter start with and without site-packages,
the import of cuw.seat.runtime, the configuration read and the stub's own work; and,
for scale, a shell stub (md5sum and cp, as the real farm's seat did).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.toolchain import cache
from cuw.seat import install, runtime, seat_log  # noqa: E402
from cuw.seat import native as seat_native  # noqa: E402
from cuw.toolchain.nvcc_args import parse  # noqa: E402
from cuw.partition.rules import owner  # noqa: E402
from cuw.toolchain.toolkit import find_toolkit  # noqa: E402
from cuw.base.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the run's, read once here: a benchmark is an entry point, like the command line

KERNEL = '__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\nextern "C" void launch(float* x) { k<<<1, 32>>>(x); }\n'
HOST = 'extern "C" int answer() { return 42; }\n'
WAITER = """#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    (void)argc;
    pid_t pid = vfork();
    if (pid == 0) {
        execve(argv[1], argv + 1, environ);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
"""
ARCH = ["-gencode", "arch=compute_90,code=sm_90"]
TARGET_STUB_MS = 5.0
TARGET_HIT_MS = 1.0  # a cache hit through the native seat, over ccache alone


def _key(index: int, count: int, suffix: str) -> str:
    return next(f"csrc/t{i}{suffix}" for i in range(1000) if owner(f"csrc/t{i}{suffix}", count) == index)


class Bench:
    """A job's seat (shard 1 of 2) with its host seat in a bin folder, and four tiny TUs;
    ``native``: with the native stub in front of the Python seat, as a shard job has it."""

    def __init__(self, root: Path, native: bool = False) -> None:
        self.src = root / "src"
        self.src.mkdir(parents=True)
        self.files = {}
        for name, index, suffix, text in (
            ("stub_cu", 2, ".cu", KERNEL),
            ("stub_cpp", 2, ".cpp", HOST),
            ("own_cu", 1, ".cu", KERNEL),
            ("own_cpp", 1, ".cpp", HOST),
        ):
            path = self.src / _key(index, 2, suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            self.files[name] = path
        self.cache = cache.open_cache("ccache", root / "cache", root, settings=SETTINGS)
        self.cache.prepare()
        (root / "seat").mkdir()
        empty = install.make_empty_object(root / "seat" / "empty.o", SETTINGS.cc)
        self.real_compilers = install.find_host_compilers()
        self.nvcc = str(find_toolkit(homes=SETTINGS.homes).nvcc)
        self.config = runtime.SeatConfig(
            real_nvcc=self.nvcc,
            cache_cmd=self.cache.binary(),
            cache_env=self.cache.env,
            statslog_var=self.cache.statslog_var,
            source_root=str(self.src),
            empty_object=str(empty),
            log=str(root / "seat.jsonl"),
            partition=runtime.SeatPartition(1, 2),
            real_compilers=self.real_compilers,
        )
        self.native = native
        self.exe = install.install(root / "seat", self.config)
        if native and not seat_native.install_native(root / "seat", self.config, cc=SETTINGS.cc):
            raise SystemExit("the native stub could not be built (see the line above)")
        self.bin = root / "bin"
        self.bin.mkdir()
        install.link_host_seat(root / "seat", self.bin, self.config)
        self.waiter = _build_waiter(root)
        self.cache_env = {**cache.scrub(dict(os.environ)), **self.cache.env}
        self.cpu_ms: dict[tuple[str, ...], list[float]] = {}

    def nvcc_args(self, name: str) -> list[str]:
        # -ccbin given, so the seat adds nothing and the direct call below is the very same command.
        src = self.files[name]
        return ["-ccbin", self.real_compilers["g++"], "-c", str(src), "-o", str(src.with_suffix(".o")), *ARCH]

    def host_args(self, name: str) -> list[str]:
        src = self.files[name]
        return ["-O2", "-c", str(src), "-o", str(src.with_suffix(".o"))]

    def untouched_args(self) -> list[str]:
        return ["-E", str(self.files["stub_cpp"]), "-o", os.devnull]

    def calls(self) -> dict[str, list[str]]:
        """Each measured call: its argv, run with the cache environment only for the direct ccache ones."""
        ccache = self.config.cache_cmd
        return {
            "stub .cu (nvcc seat)": [str(self.exe), *self.nvcc_args("stub_cu")],
            "stub .cpp (host seat)": [str(self.bin / "g++"), *self.host_args("stub_cpp")],
            "hit .cu via seat": [str(self.exe), *self.nvcc_args("own_cu")],
            "hit .cu via ccache": [ccache, self.nvcc, *parse(self.nvcc_args("own_cu")).cache_safe_args()],
            "hit .cpp via seat": [str(self.bin / "g++"), *self.host_args("own_cpp")],
            "hit .cpp via ccache": [ccache, self.real_compilers["g++"], *self.host_args("own_cpp")],
            "hit .cpp via waiter + ccache": [self.waiter, ccache, self.real_compilers["g++"], *self.host_args("own_cpp")],
            "not a TU: g++ -E via seat": [str(self.bin / "g++"), *self.untouched_args()],
            "not a TU: g++ -E directly": [self.real_compilers["g++"], *self.untouched_args()],
        }

    def native_calls(self) -> dict[str, list[str]]:
        return {
            "stub .cu (native stub)": [str(self.exe), *self.nvcc_args("stub_cu")],
            "stub .cpp (native host stub)": [str(self.bin / "g++"), *self.host_args("stub_cpp")],
            "hit .cu via native seat": [str(self.exe), *self.nvcc_args("own_cu")],
            "hit .cpp via native seat": [str(self.bin / "g++"), *self.host_args("own_cpp")],
            "not a TU: g++ -E via native seat": [str(self.bin / "g++"), *self.untouched_args()],
        }

    def run(self, argv: list[str]) -> float:
        env = self.cache_env if argv[0] in (self.config.cache_cmd, self.waiter) else None
        if self.native:
            env = {**os.environ, "CUW_SEAT_STUB_NO_FALLBACK": "1"}  # a call handed to Python fails
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=self.src, env=env, capture_output=True, text=True, check=False)
        ms = (time.perf_counter() - start) * 1000
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU ms of the call and everything it waited for: what a loaded machine does not inflate.
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
        self.cpu_ms.setdefault(tuple(argv), []).append(cpu)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
        return ms


def _build_waiter(root: Path) -> str:
    """The waiter (WAITER), compiled with the run's C compiler: static where the C library allows, as the native stub."""
    (root / "waiter.c").write_text(WAITER)
    cmd = [install.c_compiler(SETTINGS.cc), "-O2", str(root / "waiter.c"), "-o", str(root / "waiter")]
    if subprocess.run([*cmd, "-static"], capture_output=True, check=False).returncode != 0:
        subprocess.run(cmd, capture_output=True, check=True)
    return str(root / "waiter")


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered), 2), "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2)}


def interleaved(calls: dict[str, Callable[[], float]], rounds: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name].append(call())
    return {name: summary(values) for name, values in samples.items()}


def breakdown(bench: Bench) -> dict[str, Callable[[], float]]:
    """Where a stub's time goes: the interpreter start with and without site-packages, the
    import of cuw.seat.runtime, the configuration read, the stub's own work once started."""
    py = sys.executable
    imp = f"import sys; sys.path.insert(0, {str(REPO)!r}); import cuw.seat.runtime"
    config_path = str(Path(bench.exe).parent / "seat.json")

    def config_read() -> float:
        start = time.perf_counter()
        runtime.SeatConfig.read(config_path)
        return (time.perf_counter() - start) * 1000

    def stub_in_process() -> float:
        here = os.getcwd()
        os.chdir(bench.src)
        try:
            start = time.perf_counter()
            runtime.run(bench.nvcc_args("stub_cu"), bench.config)
            return (time.perf_counter() - start) * 1000
        finally:
            os.chdir(here)

    # The real farm's shell seat, for scale: what a stub costs that starts no interpreter.
    shell_stub = 'h=$(printf %s "$1" | md5sum | cut -c1-8); [ $(( 0x$h % 2 )) -ne 0 ] || true; cp "$2" "$3"'
    stub_args = [str(bench.files["stub_cu"]), bench.config.empty_object, str(bench.src / "shell-stub.o")]

    return {
        "true (a process start alone, for scale)": lambda: bench.run(["true"]),
        "sh: md5sum + cp (a shell stub, for scale)": lambda: bench.run(["sh", "-c", shell_stub, "sh", *stub_args]),
        "python -I (start only)": lambda: bench.run([py, "-I", "-c", "pass"]),
        "python -I -S (start only)": lambda: bench.run([py, "-I", "-S", "-c", "pass"]),
        "python -I + import cuw.seat.runtime": lambda: bench.run([py, "-I", "-c", imp]),
        "python -I -S + import cuw.seat.runtime": lambda: bench.run([py, "-I", "-S", "-c", imp]),
        "seat.json read (in process)": config_read,
        "stub: parse, owner, copy, log (in process)": stub_in_process,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40, help="calls per column (default: 40)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cuw-seat-bench-") as tmp:
        bench = Bench(Path(tmp) / "python")
        native = Bench(Path(tmp) / "native", native=True)
        argvs = bench.calls()
        for name in ("hit .cu via seat", "hit .cpp via seat"):  # the misses that fill the cache
            bench.run(argvs[name])
        bench.cache.zero()
        bench.cpu_ms.clear()
        calls = {name: (lambda a=argv: bench.run(a)) for name, argv in argvs.items()}
        native_argvs = native.native_calls()
        for name in ("hit .cu via native seat", "hit .cpp via native seat"):  # the native job's cache
            native.run(native_argvs[name])
        native.cache.zero()
        native.cpu_ms.clear()
        calls.update({name: (lambda a=argv: native.run(a)) for name, argv in native_argvs.items()})
        steps = breakdown(bench)
        measured = interleaved({**calls, **steps}, args.calls)  # one loop: every ratio is side by side
        rows = {name: measured[name] for name in calls}
        parts = {name: measured[name] for name in steps}
        stats = bench.cache.stats()
        native_stats = native.cache.stats()
        entries = seat_log.read_log(Path(bench.config.log))
        native_entries = seat_log.read_log(Path(native.config.log))
        shebang = bench.exe.read_text().splitlines()[0]
    hits_expected = 5 * args.calls  # seat and direct, .cu and .cpp; the waiter's .cpp
    stubs = sum(1 for e in entries if e.get("action") == "stubbed") - args.calls  # less the in-process ones
    checks = {
        "every hit column hit the cache": stats.hits == hits_expected and stats.misses == 0,
        "every stub call was stubbed": stubs == 2 * args.calls,
        "the native stub stubbed every call itself": sum(e.get("action") == "stubbed" for e in native_entries) == 2 * args.calls,
        "the native stub compiled every owned call itself, all hits": native_stats.hits == 2 * args.calls
        and native_stats.misses == 0
        and sum(e.get("action") == "compiled" and e.get("outcome") == "hit" for e in native_entries) == 2 * args.calls,
    }
    overhead = {
        ext: round(rows[f"hit {ext} via seat"]["median_ms"] - rows[f"hit {ext} via ccache"]["median_ms"], 2)
        for ext in (".cu", ".cpp")
    }
    native_overhead = {
        ext: round(rows[f"hit {ext} via native seat"]["median_ms"] - rows[f"hit {ext} via ccache"]["median_ms"], 2)
        for ext in (".cu", ".cpp")
    }
    cpu = {
        name: round(statistics.median(owner_bench.cpu_ms[tuple(argv)]), 2)
        for owner_bench, argvs_ in ((bench, argvs), (native, native_argvs))
        for name, argv in argvs_.items()
    }
    floor = "hit .cpp via waiter + ccache"
    waiter_overhead = {
        "wall": round(rows[floor]["median_ms"] - rows["hit .cpp via ccache"]["median_ms"], 2),
        "cpu": round(cpu[floor] - cpu["hit .cpp via ccache"], 2),
    }
    untouched_overhead = {
        how: {
            "wall": round(rows[f"not a TU: g++ -E via {how}"]["median_ms"] - rows["not a TU: g++ -E directly"]["median_ms"], 2),
            "cpu": round(cpu[f"not a TU: g++ -E via {how}"] - cpu["not a TU: g++ -E directly"], 2),
        }
        for how in ("native seat", "seat")
    }
    result = {
        "seat_shebang": shebang,
        "cpu_median_ms": cpu,
        "calls": args.calls,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "rows": rows,
        "overhead_on_hit_ms": overhead,
        "native_overhead_on_hit_ms": native_overhead,
        "waiter_overhead_on_hit_ms": waiter_overhead,
        "untouched_overhead_ms": untouched_overhead,
        "stub_breakdown": parts,
        "checks": checks,
        "target_stub_ms": TARGET_STUB_MS,
        "target_hit_ms": TARGET_HIT_MS,
    }
    print(f"seat script: {shebang}   ({args.calls} calls per column, interleaved)")
    print(f"load average (1 min) before and after: {result['load_average'][0]:.2f}, {result['load_average'][1]:.2f}\n")
    print(f"{'call':44} {'median ms':>10} {'p90 ms':>8}")
    for name, row in rows.items():
        print(f"{name:44} {row['median_ms']:>10.1f} {row['p90_ms']:>8.1f}")
    print(f"\ncache hit, median ms (goal: native seat <= ccache + {TARGET_HIT_MS:.0f} ms)")
    print(
        f"{'':10} {'ccache':>8} {'native':>8} {'python':>8} "
        f"{'native-ccache':>14} {'python-ccache':>14} {'native/ccache':>14}  goal"
    )
    for ext in (".cu", ".cpp"):
        direct, nat, py = (rows[f"hit {ext} via {how}"]["median_ms"] for how in ("ccache", "native seat", "seat"))
        verdict = "ok" if native_overhead[ext] <= TARGET_HIT_MS else "MISSED"
        print(
            f"{ext + ' wall':10} {direct:>8.1f} {nat:>8.1f} {py:>8.1f} {native_overhead[ext]:>14.1f} {overhead[ext]:>14.1f} "
            f"{nat / direct:>14.2f}  {verdict}"
        )
        direct, nat, py = (cpu[f"hit {ext} via {how}"] for how in ("ccache", "native seat", "seat"))
        print(
            f"{ext + ' cpu':10} {direct:>8.1f} {nat:>8.1f} {py:>8.1f} {nat - direct:>14.1f} {py - direct:>14.1f} "
            f"{nat / direct:>14.2f}"
        )
    print("(cpu: user+sys ms of the call and its children, median: what the machine's load does not inflate)")
    print(
        "one more process in front of ccache (the waiter: the native seat's floor): "
        f".cpp {waiter_overhead['wall']:+.1f} ms wall, {waiter_overhead['cpu']:+.1f} ms cpu"
    )
    print(
        "a call that is not a TU (g++ -E), over g++ alone: "
        + ", ".join(
            f"{how} {untouched_overhead[how]['wall']:+.1f} ms wall, {untouched_overhead[how]['cpu']:+.1f} ms cpu"
            for how in untouched_overhead
        )
    )
    print(f"\nstub path breakdown (target <= {TARGET_STUB_MS:.0f} ms per stubbed TU)")
    for name, row in parts.items():
        print(f"{name:44} {row['median_ms']:>10.1f} {row['p90_ms']:>8.1f}")
    for name, ok in checks.items():
        print(f"check: {name}: {'ok' if ok else 'FAILED'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
