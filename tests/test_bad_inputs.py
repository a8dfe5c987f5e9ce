"""Bad input over every verb: one table, each row a careless or hostile command line.

Every row runs in a scratch world and asserts

* the exit code (2 bad input, 1 a gate refused the result);
* stderr: exactly one line ``cuw: error: ...`` (argparse's errors too: no usage
  block), naming what the row expects; through nox and invoke, which add their own
  framing lines: the same exit code, one ``cuw: error:`` line and no usage block;
* no ``Traceback`` and no ``internal error`` anywhere, and no crash log written;
* nothing in the world changed outside the folders the row legitimately writes
  (a snapshot of path, size, mtime and mode before and after).

Most rows call the one error boundary, ``cuw.cli.main.main(argv)``, in this process (its
stdout and stderr captured at the file descriptors, the environment and working folder
the subprocess had, both put back after the row; a row that leaves either changed fails).
The rows marked ``@python`` (``python -m cuw``), ``@cuw`` (the console script pip
installs), ``@nox`` and ``@invoke`` run as a process of their own, a few per front end:
how each entry point frames the same one line.

No row compiles: every error must be caught before a build starts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
JUNK = Path("/bin/ls").read_bytes()[:65536]  # a real binary: NUL bytes, invalid UTF-8
WHEEL = "cuw_example-0.1.0+cu130-py3-none-linux_x86_64.whl"
MINIMAL = "name: x\nlinks_torch: false\nbackend: setuptools\nsource: {pypi: 'x==1.0', sha256: '" + "0" * 64 + "'}\n"


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: str = ""
    """A substring of the error line: the file, option or value it must name."""
    code: int = 2
    kind: str = "error"
    """error: one ``cuw: error:`` line; gate: exit 1 without an error line; wrapper: an invoke task
    or nox session (its own framing lines around the verb's one error line); refused: the wrapper's
    own grammar refuses the line before the verb runs (one line of its own)."""
    writes: tuple[str, ...] = ()
    """World paths the row may create or change (relative to the world)."""


def C(id: str, *argv: str, expect: str = "", code: int = 2, kind: str = "error", writes: tuple[str, ...] = ()) -> Case:
    return Case(id, argv, expect, code, kind, writes)


R = ("--recipes", "{W}/recipes")
B = ("--recipes", "{W}/bad")
OUT = ("--work", "{W}/out/work", "--artifacts", "{W}/out/artifacts")
OUTD = (*OUT, "--dist", "{W}/out/dist")

CASES: list[Case] = [
    # -- missing files and folders -------------------------------------------------
    C("missing/recipes-dir-recipes", "recipes", "--recipes", "{W}/nowhere", expect="nowhere does not exist"),
    C("missing/recipes-dir-shard", "shard", "example", "1/2", "--recipes", "{W}/nowhere", *OUT, expect="nowhere"),
    C("missing/recipes-dir-link", "link", "example", "--recipes", "{W}/nowhere", *OUTD, expect="nowhere"),
    C("missing/recipes-dir-build", "build", "example", "--recipes", "{W}/nowhere", *OUTD, expect="nowhere"),
    C("missing/recipes-dir-matrix", "matrix", "--recipes", "{W}/nowhere", expect="nowhere"),
    C("missing/recipes-dir-show", "show", "example", "--recipes", "{W}/nowhere", expect="nowhere"),
    C("missing/recipes-dir-plan", "plan", "example", "--recipes", "{W}/nowhere", expect="nowhere"),
    C(
        "missing/recipes-dir-costs",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--recipes",
        "{W}/nowhere",
        expect="nowhere",
    ),
    C("missing/recipes-dir-lint", "lint-guards", "example", "--recipes", "{W}/nowhere", expect="nowhere"),
    C("missing/recipes-dir-verify", "verify", "{W}/v_junk/" + WHEEL, "--recipes", "{W}/nowhere", expect="nowhere"),
    C("missing/unknown-recipe-shard", "shard", "flash_atten", "1/2", *R, *OUT, expect="unknown recipe 'flash_atten'"),
    C("missing/unknown-recipe-show", "show", "nosuch", *R, expect="unknown recipe 'nosuch'"),
    C("missing/unknown-recipe-plan", "plan", "nosuch", *R, expect="unknown recipe 'nosuch'"),
    C("missing/unknown-recipe-lint", "lint-guards", "nosuch", *R, expect="unknown recipe 'nosuch'"),
    C("missing/unknown-package-matrix", "matrix", "--package", "nosuch", *R, expect="unknown recipe 'nosuch'"),
    C("missing/verify-recipe", "verify", "{W}/v_junk/" + WHEEL, "--recipe", "nosuch", *R, expect="nosuch"),
    C("missing/costs-from", "costs", "example", "--from", "{W}/nolog.jsonl", *R, expect="nolog.jsonl"),
    C("missing/plan-costs", "plan", "example", "--costs", "{W}/nocosts.json", *R, expect="nocosts.json"),
    C("missing/plan-from-log", "plan", "example", "--from-log", "{W}/nolog.jsonl", *R, expect="nolog.jsonl"),
    C("missing/verify-wheel", "verify", "{W}/no-1.0-py3-none-any.whl", *R, expect="no-1.0-py3-none-any.whl"),
    C("missing/index-input", "index", "{W}/nowheels", "{W}/idx", expect="nowheels"),
    C("missing/index-empty-input", "index", "{W}/afolder", "{W}/idx", expect="no wheels"),
    C("missing/lint-path", "lint-guards", "{W}/nowhere/CMakeLists.txt", *R, expect="CMakeLists.txt"),
    C(
        "missing/costs-source-root",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--source-root",
        "{W}/nosrc",
        "--output",
        "{W}/afolder/costs.json",
        *R,
        expect="--source-root",
    ),
    C("missing/policy-bad-recipes", "recipes", *B, expect="bad/"),
    # -- folders where files belong, files where folders belong --------------------
    C("kind/costs-from-folder", "costs", "example", "--from", "{W}/afolder", *R, expect="is a folder"),
    C("kind/plan-costs-folder", "plan", "example", "--costs", "{W}/afolder", *R, expect="is a folder"),
    C("kind/plan-from-log-folder", "plan", "example", "--from-log", "{W}/afolder", *R, expect="is a folder"),
    C("kind/verify-folder", "verify", "{W}/afolder.whl", *R, expect="afolder.whl"),
    C("kind/index-input-file", "index", "{W}/afile", "{W}/idx", expect="is a file"),
    C("kind/index-output-file", "index", "{W}/wheels", "{W}/afile", expect="afile"),
    C("kind/recipes-dir-file-recipes", "recipes", "--recipes", "{W}/afile", expect="is not a folder"),
    C("kind/recipes-dir-file-show", "show", "example", "--recipes", "{W}/afile", expect="is not a folder"),
    C(
        "kind/work-file-shard",
        "shard",
        "example",
        "1/2",
        *R,
        "--work",
        "{W}/afile",
        "--artifacts",
        "{W}/out/a",
        expect="--work",
        writes=("out",),
    ),
    C(
        "kind/artifacts-file-link",
        "link",
        "example",
        *R,
        "--work",
        "{W}/out/w",
        "--artifacts",
        "{W}/afile",
        "--dist",
        "{W}/out/d",
        expect="--artifacts",
        writes=("out",),
    ),
    C(
        "kind/dist-file-build",
        "build",
        "example",
        *R,
        "--work",
        "{W}/out/w",
        "--artifacts",
        "{W}/out/a",
        "--dist",
        "{W}/afile",
        expect="--dist",
        writes=("out",),
    ),
    C("kind/recipe-yml-folder", "show", "ymlfolder", *B, expect="ymlfolder"),
    C("kind/source-path-file", "show", "srcfile", *B, expect="source.path"),
    C("kind/lint-binary-file", "lint-guards", "{W}/junk.bin", *R, expect="junk.bin"),
    # -- git mirrors (--git-mirror / $CUW_GIT_MIRROR) -------------------------------
    C("mirror/missing-lint", "lint-guards", "cumm", *R, "--git-mirror", "{W}/nowhere", expect="--git-mirror"),
    C("mirror/missing-shard", "shard", "cumm", "1/1", *R, *OUT, "--git-mirror", "{W}/nowhere", expect="nowhere"),
    C("mirror/missing-link", "link", "cumm", *R, *OUTD, "--git-mirror", "{W}/nowhere", expect="nowhere"),
    C("mirror/missing-build", "build", "cumm", *R, *OUTD, "--git-mirror", "{W}/nowhere", expect="nowhere"),
    C("mirror/empty", "lint-guards", "cumm", *R, "--git-mirror", "", expect="--git-mirror: an empty value"),
    C("mirror/missing-plan", "plan", "spconv", *R, "--git-mirror", "{W}/nowhere", expect="nowhere"),
    C("mirror/wrong-hash", "lint-guards", "cumm", *R, "--git-mirror", "{W}/junk.bin", expect="junk.bin has sha256"),
    C(
        "mirror/folder-for-tarball",
        "lint-guards",
        "cumm",
        *R,
        "--git-mirror",
        "{W}/mirror_kinds",
        expect="cumm-0.7.11.tar.gz is a folder, not a tarball",
    ),
    C(
        "mirror/plain-folder-for-repo",
        "lint-guards",
        "cumm",
        *R,
        "--git-mirror",
        "{W}/mirror_plain",
        expect="is a folder but not a git repository",
    ),
    C("mirror/empty-folder", "lint-guards", "cumm", *R, "--git-mirror", "{W}/afolder", expect="holds no mirror"),
    C("mirror/dotdot-name", "lint-guards", "gitdots", *B, "--git-mirror", "{W}/afolder", expect="not a plain name"),
    C("mirror/no-pin", "lint-guards", "gitnopin", *B, "--git-mirror", "{W}/junk.bin", expect="archive_sha256 is not set"),
    C("mirror/bad-pin", "show", "gitbadpin", *B, expect="archive_sha256"),
    C("mirror/invoke-link-missing", "@invoke", "link", "cumm", "--git-mirror", "{W}/nowhere", kind="wrapper"),
    # -- binary junk ---------------------------------------------------------------
    C("junk/recipe-yml", "show", "junkyaml", *B, expect="recipe.yml"),
    C("junk/defaults-yml-recipes", "recipes", "--recipes", "{W}/junkpolicy", expect="defaults.yml"),
    C("junk/defaults-yml-matrix", "matrix", "--recipes", "{W}/junkpolicy", expect="defaults.yml"),
    C("missing/defaults-yml-matrix", "matrix", "--recipes", "{W}/nopolicy", expect="nopolicy/defaults.yml is not there"),
    C("missing/defaults-yml-farm", "plan", "--farm", "--recipes", "{W}/nopolicy", expect="defaults.yml is not there"),
    C("missing/defaults-yml-grid", "grid", "--recipes", "{W}/nopolicy", expect="defaults.yml is not there"),
    C("junk/grid-platform-no-lane", "plan", "--farm", "--recipes", "{W}/macpolicy", expect="names 'macos', no lane"),
    # a device where a table was read back before it was written: /dev/full read forever
    C(
        "output/costs-into-dev-full",
        "@python",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--output",
        "/dev/full",
        *R,
        expect="--output /dev/full: cannot write (No space left on device)",
    ),
    C("junk/costs-json-plan", "plan", "junkcosts", *B, expect="costs.json"),
    C("kind/costs-json-a-folder", "plan", "foldercosts", *B, expect="foldercosts/costs.json is a folder"),
    C("kind/recipe-yml-a-folder", "show", "folderrecipe", *B, expect="folderrecipe/recipe.yml is a folder"),
    C("junk/plan-costs", "plan", "example", "--costs", "{W}/junk.bin", *R, expect="junk.bin"),
    C("junk/plan-from-log", "plan", "example", "--from-log", "{W}/junk.bin", *R, expect="junk.bin"),
    C(
        "junk/plan-from-another-recipes-log",
        "plan",
        "example",
        "--from-log",
        "{W}/seat_hits.jsonl",
        *R,
        expect="none of its 1 TUs",
    ),
    C("junk/plan-from-ninja-log", "plan", "example", "--from-log", "{W}/ninja_junk/.ninja_log", *R, expect=".ninja_log"),
    C(
        "junk/costs-from-seat-log",
        "costs",
        "example",
        "--from",
        "{W}/junk.bin",
        "--output",
        "{W}/c.json",
        *R,
        expect="junk.bin",
    ),
    C(
        "junk/costs-from-ninja-log",
        "costs",
        "example",
        "--from",
        "{W}/ninja_junk/.ninja_log",
        "--source-root",
        "{W}/afolder",
        "--output",
        "{W}/c.json",
        *R,
        expect=".ninja_log",
    ),
    C(
        "junk/costs-from-ninja-no-build",
        "costs",
        "example",
        "--from",
        "{W}/ninja_nobuild/.ninja_log",
        "--source-root",
        "{W}/afolder",
        "--output",
        "{W}/c.json",
        *R,
        expect=".ninja_log",
    ),
    C(
        "junk/costs-from-garbage-lines",
        "costs",
        "example",
        "--from",
        "{W}/seat_garbage.jsonl",
        "--output",
        "{W}/c.json",
        *R,
        expect="seat_garbage.jsonl:1",
    ),
    C(
        "junk/costs-from-nan",
        "costs",
        "example",
        "--from",
        "{W}/seat_nan.jsonl",
        "--output",
        "{W}/c.json",
        *R,
        expect="seat_nan.jsonl:1",
    ),
    C(
        "junk/costs-from-hits-only",
        "costs",
        "example",
        "--from",
        "{W}/seat_hits.jsonl",
        "--output",
        "{W}/c.json",
        *R,
        expect="cache hits",
    ),
    C(
        "junk/costs-existing-table-junk",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--output",
        "{W}/junk.bin",
        *R,
        expect="junk.bin",
    ),
    C("junk/plan-nan-costs", "plan", "example", "--costs", "{W}/nan_costs.json", *R, expect="nan_costs.json"),
    # JSON's integers have no bound: 10**400 overflows a float (it was an internal error)
    C("junk/plan-huge-int-costs", "plan", "example", "--costs", "{W}/big_costs.json", *R, expect="big_costs.json"),
    C("junk/plan-huge-int-peak", "plan", "example", "--costs", "{W}/big_peak_costs.json", *R, expect="peak_mb"),
    C(
        "junk/costs-from-huge-int-seconds",
        "costs",
        "example",
        "--from",
        "{W}/seat_big.jsonl",
        "--output",
        "{W}/afolder/c.json",
        *R,
        expect="seat_big.jsonl:1",
    ),
    # nested deeper than the JSON parser goes (it was an internal error: RecursionError)
    C("junk/plan-deep-costs", "@python", "plan", "example", "--costs", "{W}/deep.json", *R, expect="deep.json"),
    C(
        "junk/costs-from-deep-json",
        "costs",
        "example",
        "--from",
        "{W}/deep.json",
        "--output",
        "{W}/afolder/c.json",
        *R,
        expect="deep.json",
    ),
    C("junk/audit-deep-marker", "audit", "--index", "{W}/deepidx", *R, expect="cuw-index.json"),
    C("junk/matrix-published-deep-marker", "matrix", "--published", "{W}/deepidx", *R, expect="cuw-index.json"),
    C("junk/plan-cap-huge", "plan", "example", "--cap", "1e30", *R, expect="at most 7200"),
    C("junk/plan-farm-cap-huge", "plan", "--farm", "--cap", "7201", *R, expect="at most 7200"),
    C(
        "junk/plan-from-log-nothing",
        "plan",
        "example",
        "--from-log",
        "{W}/seat_hits_nokey.jsonl",
        *R,
        expect="seat_hits_nokey.jsonl",
    ),
    C(
        "junk/verify-wheel-bytes",
        "verify",
        "{W}/v_junk/" + WHEEL,
        "--recipe",
        "example",
        "--no-import",
        *R,
        code=1,
        kind="gate",
        expect="FAIL: record: File is not a zip file",
        writes=("v_junk",),
    ),
    C(
        "junk/verify-record-garbage",
        "verify",
        "{W}/v_garbage/" + WHEEL,
        "--recipe",
        "example",
        "--no-import",
        *R,
        code=1,
        kind="gate",
        expect="RECORD line 1: 1 fields",
        writes=("v_garbage",),
    ),
    C(
        "junk/verify-record-binary",
        "verify",
        "{W}/v_binrecord/" + WHEEL,
        "--recipe",
        "example",
        "--no-import",
        *R,
        code=1,
        kind="gate",
        expect="RECORD is not UTF-8",
        writes=("v_binrecord",),
    ),
    C("junk/verify-not-wheel-name", "verify", "{W}/junk.bin", *R, expect="junk.bin"),
    C("junk/index-wheel-bytes", "index", "{W}/junkwheels", "{W}/idx", expect="not a wheel"),
    C("junk/index-marker", "index", "{W}/wheels", "{W}/idx_badmarker", expect="cuw-index.json"),
    # -- '..' and '/' in recipe names --------------------------------------------------
    C("name/shard-dotdot", "shard", "../recipes/example", "1/2", *R, *OUT, expect="not a folder name"),
    C("name/shard-absolute", "shard", "/etc", "1/2", *R, *OUT, expect="not a folder name"),
    C("name/link-dotdot", "link", "..", *R, *OUTD, expect="not a folder name"),
    C("name/build-dot", "build", ".", *R, *OUTD, expect="not a folder name"),
    C("name/build-slash", "build", "example/", *R, *OUTD, expect="not a folder name"),
    C("name/show-dotdot", "show", "../example", *R, expect="not a folder name"),
    C("name/plan-slash", "plan", "a/b", *R, expect="not a folder name"),
    C("name/costs-dotdot", "costs", "..", "--from", "{W}/seat_ok.jsonl", *R, expect="not a folder name"),
    C("name/verify-recipe-dotdot", "verify", "{W}/v_junk/" + WHEEL, "--recipe", "../example", *R, expect="not a folder name"),
    C("name/matrix-package-dotdot", "matrix", "--package", "../recipes/example", *R, expect="not a folder name"),
    C("name/empty", "show", "", *R, expect="not a folder name"),
    C("name/source-path-absolute", "show", "srcroot", *B, expect="source.path"),
    C("name/source-path-escape", "show", "srcescape", *B, expect="source.path"),
    C("name/build-subdir-escape", "show", "subdirescape", *B, expect="build_subdir"),
    # -- shard specs and counts ----------------------------------------------------------
    C("count/spec-zero-index", "shard", "example", "0/4", *R, *OUT, expect="'0/4'"),
    C("count/spec-zero-count", "shard", "example", "1/0", *R, *OUT, expect="'1/0'"),
    C("count/spec-index-over", "shard", "example", "5/4", *R, *OUT, expect="'5/4'"),
    C("count/spec-256", "shard", "example", "1/256", *R, *OUT, expect="1..255"),
    C("count/spec-100000", "shard", "example", "1/100000", *R, *OUT, expect="1..255"),
    C("count/spec-20-digits", "shard", "example", "1/99999999999999999999", *R, *OUT, expect="not I/N"),
    C("count/spec-abc", "shard", "example", "abc", *R, *OUT, expect="'abc'"),
    C("count/spec-negative-count", "shard", "example", "1/-4", *R, *OUT, expect="'1/-4'"),
    C("count/spec-empty", "shard", "example", "", *R, *OUT, expect="''"),
    C("count/spec-unicode-digits", "shard", "example", "\u0661/\u0662", *R, *OUT, expect="not I/N"),
    C("count/spec-negative-index", "shard", "example", "-4/4", *R, *OUT),
    C("count/build-shards-0", "build", "example", "--shards", "0", *R, *OUTD, expect="--shards 0"),
    C("count/build-shards-neg", "build", "example", "--shards", "-4", *R, *OUTD, expect="--shards -4"),
    C("count/build-shards-256", "build", "example", "--shards", "256", *R, *OUTD, expect="--shards 256"),
    C("count/build-shards-20-digits", "build", "example", "--shards", "99999999999999999999", *R, *OUTD, expect="--shards"),
    C("count/build-shards-abc", "build", "example", "--shards", "abc", *R, *OUTD, expect="--shards"),
    C("count/plan-shards-0", "plan", "example", "--shards", "0", *R, expect="--shards 0"),
    C("count/plan-shards-neg", "plan", "example", "--shards", "-4", *R, expect="--shards -4"),
    C("count/plan-shards-256", "plan", "example", "--shards", "256", *R, expect="--shards 256"),
    C("count/plan-shards-abc", "plan", "example", "--shards", "abc", *R, expect="--shards"),
    C("count/plan-check-neg", "plan", "example", "--check", "-4", *R, expect="--check -4"),
    C("count/plan-check-huge", "plan", "example", "--check", "100000", *R, expect="--check 100000"),
    C("count/plan-range-zero", "plan", "example", "--range", "0..4", *R, expect="--range"),
    C("count/plan-range-reversed", "plan", "example", "--range", "8..2", *R, expect="--range"),
    C("count/plan-range-over", "plan", "example", "--range", "2..256", *R, expect="--range end"),
    C("count/plan-range-20-digits", "plan", "example", "--range", "2..99999999999999999999", *R, expect="--range"),
    C("count/plan-range-abc", "plan", "example", "--range", "abc", *R, expect="--range"),
    C("count/plan-shards-and-range", "plan", "example", "--shards", "2", "--range", "2..4", *R, expect="not both"),
    C("count/jobs-zero", "shard", "example", "1/2", "--jobs", "0", *R, *OUT, expect="--jobs"),
    C("deadline/a-word", "shard", "example", "1/2", "--deadline", "soon", *R, *OUT, expect="--deadline 'soon'"),
    C("deadline/seconds-without-plus", "shard", "example", "1/2", "--deadline", "3600", *R, *OUT, expect="write +3600"),
    C("deadline/local-time", "shard", "example", "1/2", "--deadline", "2026-12-02T17:00:00", *R, *OUT, expect="must be UTC"),
    C("deadline/negative", "shard", "example", "1/2", "--deadline", "+-5", *R, *OUT, expect="--deadline '+-5'"),
    C("deadline/nan", "shard", "example", "1/2", "--deadline", "+nan", *R, *OUT, expect="--deadline '+nan'"),
    C("resume/missing", "shard", "example", "1/2", "--resume", "{W}/nowhere.tar", *R, *OUT, expect="no such archive"),
    C("count/jobs-huge", "link", "example", "--jobs", "100000", *R, *OUTD, expect="--jobs"),
    C("count/jobs-abc", "build", "example", "--jobs", "abc", *R, *OUTD, expect="--jobs"),
    C("count/recipe-count-0", "show", "count0", *B, expect="sharding.count 0"),
    C("count/recipe-count-huge", "show", "counthuge", *B, expect="sharding.count"),
    C("count/recipe-count-str", "show", "countstr", *B, expect="sharding.count"),
    # -- empty filter values ---------------------------------------------------------------
    C("filter/matrix-cuda-empty", "matrix", "--cuda", "", *R, expect="--cuda"),
    C("filter/matrix-python-comma", "matrix", "--python", "3.11,", *R, expect="--python"),
    C("filter/matrix-platform-blank", "matrix", "--platform", " ", *R, expect="--platform"),
    C("filter/matrix-pytorch-empty", "matrix", "--pytorch", "", *R, expect="--pytorch"),
    C("filter/matrix-package-empty", "matrix", "--package", "", *R, expect="not a folder name"),
    C("filter/matrix-chunk-empty", "matrix", "--chunk", "", *R, expect="--chunk"),
    C("filter/matrix-chunk-unknown", "matrix", "--chunk", "nosuch", *R, expect="nosuch"),
    C("filter/matrix-no-match", "matrix", "--cuda", "1.0", *R, expect="1.0"),
    C("filter/build-matrix-cuda-empty", "build", "example", "--matrix", "--cuda", "", *R, *OUTD, expect="--cuda"),
    # -- options that do not apply to the verb ----------------------------------------------
    C("option/build-cuda-without-matrix", "build", "example", "--cuda", "12.8", *R, *OUTD, expect="--matrix"),
    C("option/build-python-without-matrix", "build", "example", "--python", "3.10", *R, *OUTD, expect="--matrix"),
    C("option/shard-cell-pip", "shard", "example", "1/2", "--cell", "linux/3.11/13.0", *R, *OUT, expect="--cell"),
    C("option/link-cell-pip", "link", "example", "--cell", "linux/3.11/13.0", *R, *OUTD, expect="--cell"),
    C(
        "option/build-matrix-cibuildwheel",
        "build",
        "example",
        "--matrix",
        "--backend",
        "cibuildwheel",
        *R,
        *OUTD,
        expect="--matrix",
    ),
    C(
        "option/cibw-bad-cell",
        "shard",
        "example",
        "1/2",
        "--backend",
        "cibuildwheel",
        "--cell",
        "linux//13.0",
        *R,
        *OUT,
        expect="--cell",
    ),
    C("option/show-bad-cell", "show", "example", "--cell", "garbage", *R, expect="--cell 'garbage'"),
    C("option/show-cell-off-grid", "show", "example", "--cell", "linux/2.7/13.0", *R, expect="2.7"),
    C("option/cache-tool", "shard", "example", "1/2", "--cache-tool", "distcc", *R, *OUT, expect="--cache-tool"),
    C("option/cache-remote-scheme", "shard", "example", "1/2", "--cache-remote", "ftp://x", *R, *OUT, expect="ftp://x"),
    C(
        "option/cache-remote-port",
        "link",
        "example",
        "--cache-remote",
        "redis://localhost:99999",
        *R,
        *OUTD,
        expect="--cache-remote",
    ),
    C("option/cache-remote-no-host", "build", "example", "--cache-remote", "redis://", *R, *OUTD, expect="no host"),
    C("option/plan-from-log-source-filter", "plan", "natten", "--from-log", "{W}/seat_ok.jsonl", *R, expect="--from-log"),
    C("option/unknown-verb", "compile", "example", expect="invalid choice"),
    C("option/unknown-flag", "matrix", "--frobnicate", *R, expect="--frobnicate"),
    C("option/missing-arg", "shard", "example", expect="required"),
    C("option/no-verb", "@python", expect="required: verb; `cuw --help` lists the verbs"),
    C(
        "option/bad-choice-format",
        "audit",
        "--index",
        "{W}/afolder",
        "--format",
        "pdf",
        *R,
        expect="--format: invalid choice: 'pdf'",
    ),
    C("option/missing-value", "plan", "example", "--shards", *R, expect="--shards: expected one argument"),
    # -- outputs ---------------------------------------------------------------------------
    C("output/matrix-missing-folder", "matrix", "--output", "{W}/nodir/m.json", *R, expect="nodir"),
    C("output/matrix-onto-folder", "matrix", "--output", "{W}/afolder", *R, expect="is a folder"),
    C("output/matrix-proc", "matrix", "--output", "/proc/cuw-matrix.json", *R, expect="/proc/cuw-matrix.json"),
    C(
        "output/costs-missing-folder",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--output",
        "{W}/nodir/c.json",
        *R,
        expect="nodir",
    ),
    C(
        "output/costs-onto-folder",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--output",
        "{W}/afolder",
        *R,
        expect="is a folder",
    ),
    C(
        "output/costs-onto-input",
        "costs",
        "example",
        "--from",
        "{W}/seat_ok.jsonl",
        "--output",
        "{W}/seat_ok.jsonl",
        *R,
        expect="--from",
    ),
    C("output/index-equal-input", "index", "{W}/wheels", "{W}/wheels", expect="wheel folder"),
    C("output/index-contains-input", "index", "{W}/wheels", "{W}", expect="wheel folder"),
    C("output/index-non-index", "index", "{W}/wheels", "{W}/notindex", expect="not an index"),
    C("output/index-proc", "index", "{W}/soundwheels", "/proc/cuw-index", expect="/proc/cuw-index"),
    C("output/index-under-file", "index", "{W}/soundwheels", "{W}/afile/sub", expect="afile"),
    # -- unwritable --work / --artifacts / --dist --------------------------------------------
    C(
        "unwritable/shard-work",
        "shard",
        "example",
        "1/2",
        *R,
        "--work",
        "{W}/afile/sub",
        "--artifacts",
        "{W}/out/a",
        expect="--work",
        writes=("out",),
    ),
    C(
        "unwritable/shard-artifacts",
        "shard",
        "example",
        "1/2",
        *R,
        "--work",
        "{W}/out/w",
        "--artifacts",
        "{W}/afile/sub",
        expect="--artifacts",
        writes=("out",),
    ),
    C(
        "unwritable/link-dist",
        "link",
        "example",
        *R,
        "--work",
        "{W}/out/w",
        "--artifacts",
        "{W}/out/a",
        "--dist",
        "{W}/afile/sub",
        expect="--dist",
        writes=("out",),
    ),
    C(
        "unwritable/build-work-proc",
        "build",
        "example",
        *R,
        "--work",
        "/proc/cuw-work",
        "--artifacts",
        "{W}/out/a",
        "--dist",
        "{W}/out/d",
        expect="--work",
        writes=("out",),
    ),
    C(
        "unwritable/build-dist-proc",
        "build",
        "example",
        *R,
        "--work",
        "{W}/out/w",
        "--artifacts",
        "{W}/out/a",
        "--dist",
        "/proc/cuw-dist",
        expect="--dist",
        writes=("out",),
    ),
    # -- recipe code: patch.py ---------------------------------------------------------------
    C("patch/plan-raises", "plan", "patchraise", *B, expect="patch.py:"),
    C("patch/plan-syntax", "plan", "patchsyntax", *B, expect="syntax error"),
    C("patch/plan-exit0", "plan", "patchexit", *B, expect="sys.exit(0)"),
    C("patch/plan-no-function", "plan", "patchnofunc", *B, expect="no patch(ctx)"),
    C("patch/plan-binary", "plan", "patchjunk", *B, expect="patch.py"),
    C("patch/lint-raises", "lint-guards", "patchraise", *B, expect="patch.py:"),
    C("patch/lint-syntax", "lint-guards", "patchsyntax", *B, expect="syntax error"),
    C("patch/lint-exit0", "lint-guards", "patchexit", *B, expect="sys.exit(0)"),
    # -- the recipe's source: its pyproject.toml names the build backend (cuw/jobs/frontend.py) --
    C("pyproject/not-toml", "shard", "pyjunk", "1/1", *B, *OUT, expect="pyproject.toml: not valid TOML", writes=("out",)),
    C(
        "pyproject/backend-number",
        "shard",
        "pybackend",
        "1/1",
        *B,
        *OUT,
        expect="build-backend must name a module",
        writes=("out",),
    ),
    C("pyproject/folder", "shard", "pyfolder", "1/1", *B, *OUT, expect="pyproject.toml is a folder", writes=("out",)),
    # -- recipe YAML shapes ------------------------------------------------------------------
    C("yaml/empty", "show", "emptyyaml", *B, expect="expected a mapping"),
    C("yaml/list", "show", "listyaml", *B, expect="expected a mapping"),
    C("yaml/scalar", "show", "scalaryaml", *B, expect="expected a mapping"),
    C("yaml/invalid", "show", "invalidyaml", *B, expect="not valid YAML"),
    C("yaml/python-tag", "@python", "show", "pytagyaml", *B, expect="not valid YAML"),
    C("yaml/unknown-key", "show", "unknownkey", *B, expect="unknown key 'bakend'"),
    C("yaml/duplicate-key", "show", "dupkey", *B, expect="the key 'backend' appears twice in one mapping (line 3 and line 6)"),
    C("yaml/alias-bomb", "show", "aliasbomb", *B, expect="anchors and aliases are not read here"),
    C("yaml/deep-nesting", "show", "deepyaml", *B, expect="nesting deeper than 32 levels"),
    C("yaml/oversized", "show", "hugeyaml", *B, expect="larger than 1024 KiB"),
    C("yaml/env-number", "show", "envnumber", *B, expect="env.A"),
    C("yaml/int-keys", "show", "intkeys", *B, expect="unknown key"),
    C("yaml/max-jobs-zero", "show", "maxjobs0", *B, expect="max_jobs"),
    C("yaml/max-jobs-huge", "show", "maxjobshuge", *B, expect="max_jobs must be from 1 to 1024"),
    C("yaml/bad-arch", "show", "badarch", *B, expect="archs"),
    # -- grid --check and the plan's formats ------------------------------------------------------
    C("grid/index-no-url", "grid", "--check", *R, "--index", "13.0=", expect="--index '13.0='"),
    C("grid/index-unknown-line", "grid", "--check", *R, "--index", "9.9=http://127.0.0.1:9/x", expect="--index '9.9="),
    C("grid/recipes-missing", "grid", "--check", "--recipes", "{W}/nowhere", expect="nowhere does not exist"),
    C(
        "grid/no-index-answers",
        "grid",
        "--check",
        *R,
        "--index",
        "13.0=file:///{W}/none",
        "--index",
        "12.8=file:///{W}/none",
        expect="no torch index answered",
    ),
    C("plan/two-formats", "plan", "example", *R, "--json", "--format", "html", expect="two formats"),
    C("plan/output-folder", "plan", "example", *R, "--format", "html", "--output", "{W}/afolder", expect="is a folder"),
    C(
        "verify/torch-index-alone",
        "verify",
        "{W}/wheels/" + WHEEL,
        "--torch-index",
        "http://127.0.0.1:9/x",
        expect="--torch-index goes with --torch-patches",
    ),
    # -- the farm verbs: report, record, publish, workflow ----------------------------------------
    C("farm/report-missing", "report", "{W}/nowhere", expect="nowhere: not a folder"),
    C("farm/report-file", "report", "{W}/afile", expect="afile: not a folder"),
    C("farm/report-empty-cell", "report", "{W}/afolder", expect="no job folders"),
    C("farm/report-output-folder", "report", "{W}/afolder", "--output", "{W}/afolder", expect="is a folder"),
    C("farm/report-output-missing-folder", "report", "{W}/afolder", "--output", "{W}/nodir/r.html", expect="nodir"),
    C("farm/record-dotdot", "record", "../example", *R, expect="not a folder name"),
    C(
        "farm/record-no-link",
        "record",
        "example",
        *R,
        "--dist",
        "{W}/afolder",
        "--artifacts",
        "{W}/afolder",
        expect="no passed link",
    ),
    C("farm/publish-missing", "publish", "{W}/nowhere", "{W}/idx", expect="nowhere is not a folder"),
    C("farm/publish-file", "publish", "{W}/afile", "{W}/idx", expect="afile is not a folder"),
    C("farm/publish-unrecorded", "publish", "{W}/wheels", "{W}/notindex", code=1, kind="gate", expect="no build record"),
    C("farm/workflow-outside-repo", "workflow", "example", *R, expect="build.yml"),
    # -- the wrappers: invoke tasks and nox sessions -------------------------------------------
    # invoke's own grammar takes plan's optional recipe as no positional: invoke refuses it, in its one line, exit 2
    C("wrapper/invoke-plan-shards-abc", "@invoke", "plan", "example", "--shards", "abc", code=2, kind="refused"),
    C("wrapper/invoke-shard-abc", "@invoke", "shard", "example", "abc", kind="wrapper"),
    C("wrapper/invoke-build-shards-abc", "@invoke", "build", "--recipe", "example", "--shards", "abc", kind="wrapper"),
    C("wrapper/nox-plan-shards-abc", "@nox", "plan", "--", "example", "--shards", "abc", *R, kind="wrapper"),
    C("wrapper/nox-shard-spec", "@nox", "shard", "--", "example", "0/4", *R, *OUT, kind="wrapper"),
    C("wrapper/nox-matrix-empty-cuda", "@nox", "matrix", "--", "--cuda", "", *R, kind="wrapper"),
    # an empty value reaches cuw, which refuses it (dropped, the filter meant every platform)
    C("wrapper/invoke-matrix-empty-platform", "@invoke", "matrix", "--platform", "", kind="wrapper", expect="an empty value"),
    C("wrapper/invoke-farm-empty-count", "@invoke", "plan", "--farm", "--count", "", kind="wrapper", expect="RECIPE=N"),
    # argparse's own errors through every front end: one line, exit 2, no usage block
    C("frontend/cuw-bad-choice", "@cuw", "shard", "example", "1/2", "--cache-tool", "nosuch", *R, *OUT, expect="--cache-tool"),
    C("frontend/cuw-unknown-option", "@cuw", "matrix", "--frobnicate", *R, expect="matrix: unrecognized arguments: --frobnicate"),
    C("frontend/cuw-missing-positional", "@cuw", "shard", "example", *R, expect="shard: the following arguments are required"),
    C("frontend/cuw-bad-verb", "@cuw", "compile", expect="invalid choice: 'compile'"),
    C(
        "frontend/nox-bad-choice",
        "@nox",
        "shard",
        "--",
        "example",
        "1/2",
        "--cache-tool",
        "nosuch",
        *R,
        *OUT,
        kind="wrapper",
        expect="--cache-tool: invalid choice",
    ),
    C("frontend/nox-unknown-option", "@nox", "matrix", "--", "--frobnicate", *R, kind="wrapper", expect="--frobnicate"),
    C("frontend/nox-missing-positional", "@nox", "shard", "--", "example", *R, kind="wrapper", expect="required: shard"),
    C(
        "frontend/invoke-bad-choice",
        "@invoke",
        "shard",
        "example",
        "1/2",
        "--cache-tool",
        "nosuch",
        kind="wrapper",
        expect="--cache-tool: invalid choice",
    ),
    C("frontend/invoke-bad-int", "@invoke", "build", "--recipe", "example", "--jobs", "many", kind="wrapper", expect="--jobs"),
]


# -- the world every row runs in ------------------------------------------------------------


def _wheel(path: Path, record: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    dist = "cuw_example-0.1.0+cu130.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cuw_example/__init__.py", "")
        zf.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: cuw-example\nVersion: 0.1.0+cu130\n\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")
        zf.writestr(f"{dist}/RECORD", record)


def _sound_wheel(path: Path) -> None:
    """The same wheel with a RECORD that lists each member's hash: one cuw index takes."""
    import base64
    import hashlib

    _wheel(path, b"")
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist() if not n.endswith("RECORD")}
    lines = []
    for name, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append("cuw_example-0.1.0+cu130.dist-info/RECORD,,")
    _wheel(path, ("\n".join(lines) + "\n").encode())


def _recipe(bad: Path, name: str, text: str | bytes, example: bool = False, patch: str | bytes | None = None) -> None:
    folder = bad / name
    if example:
        shutil.copytree(REPO / "recipes" / "example", folder, ignore=shutil.ignore_patterns("costs.json", "__pycache__"))
    else:
        folder.mkdir()
    target = folder / "recipe.yml"
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    if patch is not None:
        (folder / "patch.py").write_bytes(patch if isinstance(patch, bytes) else patch.encode())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("bad-inputs"))


def build_world(W: Path) -> Path:
    """The files and folders the rows point at (also usable by hand: python -c 'build_world(Path(...))')."""
    shutil.copytree(REPO / "recipes", W / "recipes", ignore=shutil.ignore_patterns("__pycache__"))
    (W / "cwd").mkdir()
    (W / "afolder").mkdir()
    (W / "afolder.whl").mkdir()
    (W / "afile").write_text("a file, not a folder\n")
    (W / "junk.bin").write_bytes(JUNK)
    (W / "notindex").mkdir()
    (W / "notindex" / "hello.txt").write_text("someone's files\n")
    (W / "idx_badmarker").mkdir()
    (W / "idx_badmarker" / "cuw-index.json").write_bytes(JUNK)
    (W / "ninja_junk").mkdir()
    (W / "ninja_junk" / ".ninja_log").write_bytes(b"# ninja log v5\n" + JUNK)
    (W / "ninja_nobuild").mkdir()
    (W / "ninja_nobuild" / ".ninja_log").write_text("# ninja log v5\n0\t100\t0\tk.o\tabc\n")
    (W / "seat_garbage.jsonl").write_text("this is not json\n")
    (W / "seat_nan.jsonl").write_text('{"action": "compiled", "key": "k.cu", "seconds": NaN, "rc": 0}\n')
    (W / "seat_hits.jsonl").write_text('{"action": "compiled", "key": "k.cu", "seconds": 1, "rc": 0, "outcome": "hit"}\n')
    (W / "seat_hits_nokey.jsonl").write_text('{"action": "probe"}\n[1, 2]\n"text"\n')
    (W / "seat_ok.jsonl").write_text('{"action": "compiled", "key": "csrc/kernels/k00_saxpy.cu", "seconds": 1.5, "rc": 0}\n')
    (W / "nan_costs.json").write_text('{"header": {}, "costs": {"a.cu": NaN}}\n')
    big = "1" + "0" * 400
    (W / "deep.json").write_text("[" * 200_000 + "\n")
    (W / "deepidx").mkdir()
    (W / "deepidx" / "cuw-index.json").write_text("[" * 200_000 + "\n")
    (W / "big_costs.json").write_text('{"header": {}, "costs": {"a.cu": ' + big + "}}\n")
    (W / "big_peak_costs.json").write_text('{"header": {}, "costs": {"a.cu": 1}, "peak_mb": {"a.cu": ' + big + "}}\n")
    (W / "seat_big.jsonl").write_text(
        '{"action": "compiled", "key": "csrc/kernels/k00_saxpy.cu", "seconds": ' + big + ', "rc": 0}\n'
    )
    _wheel(W / "wheels" / WHEEL, b"")
    _sound_wheel(W / "soundwheels" / WHEEL)  # one an index takes: its rows are about where the index goes
    (W / "junkwheels").mkdir()
    (W / "junkwheels" / WHEEL).write_bytes(JUNK)
    (W / "v_junk").mkdir()
    (W / "v_junk" / WHEEL).write_bytes(JUNK)
    _wheel(W / "v_garbage" / WHEEL, b'garbage\na,b\nx,sha256=!!!,1\ny,nohash=abc,2\n"unterminated\n,,,,\n')
    _wheel(W / "v_binrecord" / WHEEL, JUNK)
    # A recipes folder whose defaults.yml is binary junk (the example beside it is fine).
    shutil.copytree(REPO / "recipes" / "example", W / "junkpolicy" / "example", ignore=shutil.ignore_patterns("__pycache__"))
    (W / "junkpolicy" / "defaults.yml").write_bytes(JUNK)
    shutil.copytree(REPO / "recipes" / "example", W / "nopolicy" / "example", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "recipes" / "example", W / "macpolicy" / "example", ignore=shutil.ignore_patterns("__pycache__"))
    policy = (REPO / "recipes" / "defaults.yml").read_text()
    assert "platforms: [linux, linux_aarch64, windows]" in policy
    (W / "macpolicy" / "defaults.yml").write_text(policy.replace("[linux, linux_aarch64, windows]", "[linux, macos]", 1))
    # A recipes folder of broken recipes.
    bad = W / "bad"
    bad.mkdir()
    shutil.copy(REPO / "recipes" / "defaults.yml", bad / "defaults.yml")
    example = (REPO / "recipes" / "example" / "recipe.yml").read_text()
    _recipe(bad, "junkyaml", JUNK)
    _recipe(bad, "emptyyaml", "")
    _recipe(bad, "listyaml", "- a\n- b\n")
    _recipe(bad, "scalaryaml", "42\n")
    _recipe(bad, "invalidyaml", "name: [unclosed\n\tbackend: x\n")
    _recipe(bad, "pytagyaml", "name: !!python/object/apply:os.system ['true']\n")
    _recipe(bad, "unknownkey", example.replace("backend:", "bakend:"), example=True)
    _recipe(bad, "dupkey", MINIMAL + "max_jobs: 2\nbackend: scikit-build-core\n")
    _recipe(
        bad,
        "aliasbomb",
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)),
    )
    _recipe(bad, "deepyaml", "name: " + "[" * 200 + "]" * 200 + "\n")
    _recipe(bad, "hugeyaml", MINIMAL + "# " + "x" * (1 << 20) + "\n")
    _recipe(bad, "envnumber", MINIMAL + "env: {A: 1}\n")
    _recipe(bad, "intkeys", MINIMAL + "1: 2\n")
    _recipe(bad, "maxjobs0", MINIMAL + "max_jobs: 0\n")
    _recipe(bad, "maxjobshuge", MINIMAL + "max_jobs: 99999999999999999999999\n")
    _recipe(bad, "badarch", example.replace('["9.0"]', '["sm_90"]'), example=True)
    _recipe(bad, "count0", MINIMAL + "sharding: {count: 0}\n")
    _recipe(bad, "counthuge", MINIMAL + "sharding: {count: 99999999999999999999}\n")
    _recipe(bad, "countstr", MINIMAL + "sharding: {count: abc}\n")
    git_source = "source: {git: 'https://git.example.invalid/o/%s', tag: v1, commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa%s}"
    no_pypi = MINIMAL.replace("source: {pypi: 'x==1.0', sha256: '" + "0" * 64 + "'}", "%s")
    _recipe(bad, "gitdots", no_pypi % (git_source % ("..", "")))
    _recipe(bad, "gitnopin", no_pypi % (git_source % ("x", "")))
    _recipe(bad, "gitbadpin", no_pypi % (git_source % ("x", ", archive_sha256: 'abc'")))
    (W / "mirror_kinds" / "cumm-0.7.11.tar.gz").mkdir(parents=True)
    (W / "mirror_plain" / "cumm").mkdir(parents=True)
    _recipe(bad, "srcroot", MINIMAL.replace("source: {pypi: 'x==1.0', sha256: '" + "0" * 64 + "'}", "source: {path: /}"))
    _recipe(bad, "srcescape", MINIMAL.replace("source: {pypi: 'x==1.0', sha256: '" + "0" * 64 + "'}", "source: {path: ../../..}"))
    _recipe(bad, "srcfile", example.replace("path: package", "path: README.md"), example=True)
    _recipe(bad, "subdirescape", example + "build_subdir: ../../..\n", example=True)
    (bad / "ymlfolder" / "recipe.yml").mkdir(parents=True)
    _recipe(bad, "junkcosts", example, example=True)
    (bad / "junkcosts" / "costs.json").write_bytes(JUNK)
    _recipe(bad, "foldercosts", example, example=True)
    (bad / "foldercosts" / "costs.json").mkdir()
    (bad / "folderrecipe" / "recipe.yml").mkdir(parents=True)
    for name, pyproject in (
        ("pyjunk", b"[build-system\nrequires = = []\n"),
        ("pybackend", b"[build-system]\nbuild-backend = 7\n"),
        ("pyfolder", None),
    ):
        _recipe(bad, name, example, example=True)
        (bad / name / "package" / "pyproject.toml").unlink()
        if pyproject is None:
            (bad / name / "package" / "pyproject.toml").mkdir()
        else:
            (bad / name / "package" / "pyproject.toml").write_bytes(pyproject)
    _recipe(bad, "patchraise", example, example=True, patch="def patch(ctx):\n    raise RuntimeError('upstream moved')\n")
    _recipe(bad, "patchsyntax", example, example=True, patch="def patch(ctx)\n    pass\n")
    _recipe(bad, "patchexit", example, example=True, patch="import sys\n\ndef patch(ctx):\n    sys.exit(0)\n")
    _recipe(bad, "patchnofunc", example, example=True, patch="PATCH = 1\n")
    _recipe(bad, "patchjunk", example, example=True, patch=JUNK)
    return W


def _snapshot(root: Path) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_size if name in files else None, st.st_mtime_ns, st.st_mode)
    return out


def _changes(before: dict[str, tuple], after: dict[str, tuple], writes: tuple[str, ...]) -> list[str]:
    def allowed(rel: str) -> bool:
        return any(rel == w or rel.startswith(w + "/") for w in writes)

    def ancestor(rel: str) -> bool:  # its mtime moves when an allowed child is created
        return any(w.startswith(rel + "/") for w in writes)

    changed = []
    for rel in sorted(set(before) | set(after)):
        if allowed(rel):
            continue
        old, new = before.get(rel), after.get(rel)
        if old is not None and new is not None and ancestor(rel):
            old, new = (old[0], old[2]), (new[0], new[2])
        if old != new:
            changed.append(f"{rel}: {old} -> {new}")
    return changed


FRONT_ENDS = ("@python", "@cuw", "@nox", "@invoke")
"""A row whose argv starts with one of these runs as a process of its own; the others in this one."""


def _command(case: Case, world: Path) -> list[str]:
    argv = [a.replace("{W}", str(world)) for a in case.argv]
    if argv[:1] == ["@invoke"]:
        return [sys.executable, "-m", "invoke", "--search-root", str(REPO), *argv[1:]]
    if argv[:1] == ["@cuw"]:  # the console script pip installs
        return [str(Path(sys.executable).with_name("cuw")), *argv[1:]]
    if argv[:1] == ["@nox"]:
        return [sys.executable, "-m", "nox", "--noxfile", str(REPO / "noxfile.py"), "-s", *argv[1:]]
    if argv[:1] == ["@python"]:
        return [sys.executable, "-m", "cuw", *argv[1:]]
    return argv  # main(argv), in this process


def _row_env(logs: Path, world: Path) -> dict[str, str]:
    """The environment a row runs in: this one without $CUW_* and $GITHUB_*, its own crash-log folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUW_", "GITHUB_"))}
    env.update(CUW_LOG_DIR=str(logs), CUW_RECIPES=str(world / "recipes"), PYTHONDONTWRITEBYTECODE="1")
    return env


def _in_process(argv: list[str], env: dict[str, str], cwd: Path, capfd: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``cuw.cli.main.main(argv)`` as ``python -m cuw`` would run it: ``env`` as the whole environment,
    ``cwd`` as the working folder, no bytecode written (recipe code is imported), output read at the
    file descriptors (a tool the verb starts writes there). The environment, the folder and the signal
    handlers are put back afterwards; a verb that left one changed is reported in the output, and fails."""
    from cuw.cli.main import main

    saved_env, saved_cwd, saved_bytecode = dict(os.environ), os.getcwd(), sys.dont_write_bytecode
    saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    capfd.readouterr()  # what came before the row is not the row's
    leaks: list[str] = []
    os.environ.clear()
    os.environ.update(env)
    try:
        os.chdir(cwd)
        sys.dont_write_bytecode = True
        try:
            code = main(argv)
        except Exception:  # noqa: BLE001 - what a process would have died of: its traceback is the output
            code, died = 1, traceback.format_exc()
        except SystemExit as exc:
            code, died = (exc.code if isinstance(exc.code, int) else 1), traceback.format_exc()
        else:
            died = ""
        if dict(os.environ) != env:
            leaks.append(f"the verb changed the environment: {sorted(set(os.environ.items()) ^ set(env.items()))}")
        if os.getcwd() != str(cwd):
            leaks.append(f"the verb changed the working folder to {os.getcwd()}")
        for sig, handler in saved_signals.items():
            if signal.getsignal(sig) is not handler:
                leaks.append(f"the verb left a handler for {sig.name}")
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.dont_write_bytecode = saved_bytecode
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
    out, err = capfd.readouterr()
    return code, out, err + died + "".join(f"leak: {line}\n" for line in leaks)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world: Path, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    env = _row_env(logs, world)
    command = _command(case, world)
    before = _snapshot(world)
    if case.argv[:1] and case.argv[0] in FRONT_ENDS:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        proc = subprocess.run(command, cwd=world / "cwd", env=env, capture_output=True, text=True, errors="replace", timeout=120)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        code, out, err = _in_process(command, env, world / "cwd", capfd)
    after = _snapshot(world)
    shown = f"exit {code}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-4000:]}"
    both = out + err
    assert "Traceback" not in both, shown
    assert "internal error" not in both, shown
    assert "leak: " not in err, shown
    assert not list(logs.iterdir()), shown
    assert code == case.code, shown
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("cuw: error:")]
    assert not [line for line in both.splitlines() if line.lstrip().startswith("usage:")], shown
    if case.kind == "error":
        assert len(lines) == 1 and len(errors) == 1, shown
    elif case.kind == "wrapper":  # nox's and invoke's own lines around the verb's one
        assert len(errors) == 1, shown
    elif case.kind == "refused":
        assert len(lines) == 1 and not errors, shown
    else:  # a gate refused: no error line, the verdict says why
        assert not errors, shown
    if case.expect:
        assert case.expect in (errors[0] if errors else both), shown
    assert not _changes(before, after, case.writes), "\n".join(_changes(before, after, case.writes)) + "\n" + shown


def test_every_front_end_keeps_rows_of_its_own() -> None:
    """The in-process rows stand for ``python -m cuw``; each entry point still runs some rows as a process."""
    counts = {front: sum(1 for c in CASES if c.argv[:1] == (front,)) for front in FRONT_ENDS}
    assert all(n >= 3 for n in counts.values()), counts
    assert sum(counts.values()) < len(CASES) // 4, counts
