"""Special files on every path option of every verb: a FIFO, a device, a folder where a file
belongs, a link to nowhere and a link planted to a file elsewhere.

The path options come from the parser (:func:`cuw.cli.parser.verb_specs`, ``OptionSpec.path``),
so a new one is walked the day it is added. Each row runs ``cuw.cli.main.main`` in a process of
its own (forked from this one, its imports already made: a few hundred rows in a minute), with
a timeout and a memory limit, so a verb that waits on a FIFO or reads ``/dev/zero`` until memory
runs out fails its row instead of hanging the suite. Each row asserts

* the exit code: 2, or where docs/verbs.md documents another result for the path (an
  ``--output`` is written into a device and through a link), that result;
* stderr: exactly one ``cuw: error:`` line naming the path given, no traceback, no internal error;
* nothing changed outside the row's folder (the planted link's target, a file elsewhere, keeps
  its bytes), except the target of an ``--output`` link, which docs/verbs.md says is written.

No row compiles: every special path must be refused before a build starts. Then the files the
forge names itself (a report beside a wheel, the index's files): a link planted at the name is
replaced by the new file, never written through.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from conftest import REPO
from wheel_maker import make_wheel

WHEEL = "cuw_example-0.1.0+cu130-py3-none-linux_x86_64.whl"
RECIPES = str(REPO / "recipes")
TIMEOUT_S = 90.0  # a hang fails its row; a loaded machine still finishes a refusal well within it
MEMORY = 4 << 30  # the address space a row may add: /dev/zero read whole ends here, not in the machine's swap


def _mapped() -> int:
    """The address space this process maps now (an xdist worker that imported torch maps gigabytes)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


KINDS = ("fifo", "device", "folder", "dangling", "planted")
"""What each path option is given: a FIFO, /dev/zero, an empty folder (file options only), a link
to nothing, a link to a file outside the row's folder."""

FOLDER_OPTIONS = {
    "--recipes",
    "--work",
    "--artifacts",
    "--dist",
    "--out",
    "--into-index",
    "--index",
    "--published",
    "--git-mirror",
    "--toolkit",
    "--reports",
    "--upload",
    "--source-root",
    "wheel_dir",
    "out_dir",
    "cell_dir",
    "incoming",
    "index",
    "folder",
    "site",
    "wheels",
    "target",
}
"""The path options that name a folder (or either: ``--git-mirror``, ``gpu``'s wheels): a folder
there is no special file."""

EXTRA_PATHS = {"gpu": ("wheels",), "lint-guards": ("target",)}
"""Positionals that take a path or another word (a URL, a recipe name): no path type of their own."""


# Each verb's command line with every other argument valid (the path under test replaces its own).
BASE: dict[str, dict[str, object]] = {
    "shard": {"recipe": "example", "shard": "1/2", "--recipes": RECIPES, "--work": "{W}/out/work", "--artifacts": "{W}/out/art"},
    "link": {
        "recipe": "example",
        "--recipes": RECIPES,
        "--work": "{W}/out/work",
        "--artifacts": "{W}/out/art",
        "--dist": "{W}/out/dist",
    },
    "build": {
        "recipe": "example",
        "--recipes": RECIPES,
        "--work": "{W}/out/work",
        "--artifacts": "{W}/out/art",
        "--dist": "{W}/out/dist",
    },
    "lint-guards": {"target": "{W}/cmake", "--recipes": RECIPES},
    "verify": {"wheel": "{W}/v/" + WHEEL, "--recipes": RECIPES, "--no-import": True},
    "gpu": {"wheels": "{W}/v/" + WHEEL, "--recipes": RECIPES, "--dry-run": True},
    "index": {"wheel_dir": "{W}/v", "out_dir": "{W}/out/index"},
    "yank": {"wheel": WHEEL, "--index": "{W}/index", "--reason": "broken"},
    "matrix": {"--package": "example", "--recipes": RECIPES},
    "audit": {"--index": "{W}/index", "--package": "example", "--recipes": RECIPES},
    "recipes": {"--recipes": RECIPES},
    "toolkit": {"--recipes": RECIPES},
    "show": {"recipe": "example", "--recipes": RECIPES},
    "plan": {"recipe": "example", "--shards": "2", "--recipes": RECIPES},
    "grid": {"--recipes": RECIPES},
    "report": {"cell_dir": "{W}/cell", "--artifacts": "{W}/art", "--dist": "{W}/dist"},
    "costs": {"recipe": "example", "--from": "{W}/seat.jsonl", "--output": "{W}/out/costs.json", "--recipes": RECIPES},
    "record": {"recipe": "example", "--dist": "{W}/dist", "--artifacts": "{W}/art", "--recipes": RECIPES},
    "publish": {"incoming": "{W}/v", "index": "{W}/out/index"},
    "upload": {"folder": "{W}/v", "site": "{W}/index", "--repo": "o/r"},
    "image": {},
    "workflow": {"recipe": "example", "--chunk": "example-linux-cu13.0", "--recipes": RECIPES, "--index": "{W}/out/index"},
}

ALSO: dict[tuple[str, str], dict[str, object]] = {
    ("lint-guards", "--git-mirror"): {"target": "cumm"},
    ("plan", "--git-mirror"): {"recipe": "spconv"},
    ("costs", "--source-root"): {"--from": "{W}/build/.ninja_log"},
    ("publish", "--upload"): {"--asset-url": "https://example.invalid/{recipe}/{wheel}"},
    ("shard", "--git-mirror"): {"recipe": "cumm"},
    ("link", "--git-mirror"): {"recipe": "cumm"},
    ("build", "--git-mirror"): {"recipe": "cumm"},
    ("lint-guards", "--recipes"): {"target": "example"},
    ("toolkit", "--recipes"): {"--cuda": "13.0"},
    ("gpu", "--into-index"): {"--dry-run": False},
}
"""What a path option needs beside it to be read at all."""


@dataclass(frozen=True)
class Row:
    verb: str
    option: str
    kind: str

    @property
    def id(self) -> str:
        return f"{self.verb}:{self.option}:{self.kind}"


def path_options() -> list[tuple[str, str]]:
    from cuw.cli.parser import verb_specs

    found = []
    for spec in verb_specs():
        found += [(spec.name, o.flag) for o in spec.options if o.path]
        found += [(spec.name, flag) for flag in EXTRA_PATHS.get(spec.name, ())]
    return found


LEFT_OUT = {
    ("link", "--git-mirror", "planted"): "a link to a regular file is a tarball, checked when the shards fetch the source",
    ("build", "--git-mirror", "planted"): "a link to a regular file is a tarball, checked when the shards fetch the source",
    ("workflow", "--index", "dangling"): "a folder named through a link is made where it leads; the run goes on into act",
}
"""Rows that cannot end without a build: the path is no special file to the verb until then
(test_bad_inputs.py's mirror/wrong-hash rows check a wrong tarball)."""

NOT_REACHED = {
    ("record", "--artifacts", "dangling"): "an absent --artifacts is read only after a passed link's report in --dist",
}
"""Rows refused (exit 2, one line) by what the verb checks first, before the path: reaching it needs a build."""


def rows() -> list[Row]:
    out = []
    for verb, option in path_options():
        for kind in KINDS:
            if (kind == "folder" and option in FOLDER_OPTIONS) or (verb, option, kind) in LEFT_OUT:
                continue
            out.append(Row(verb, option, kind))
    return out


def test_every_verb_has_a_command_line_here() -> None:
    from cuw.cli.parser import verb_specs

    assert {spec.name for spec in verb_specs()} == set(BASE)
    assert len(path_options()) >= 50


# -- the row's world ---------------------------------------------------------------------------


def _world(root: Path) -> tuple[Path, Path]:
    """``root/row`` (the row's folder, its working folder) with the valid files the base command
    lines name, and ``root/outside`` (a file elsewhere, the planted link's target)."""
    W, outside = root / "row", root / "outside"
    for folder in ("cwd", "out", "cell/shard-1of2", "art", "dist", "cmake", "build"):
        (W / folder).mkdir(parents=True)
    make_wheel(W / "v", WHEEL, b"payload")
    (W / "cmake" / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.18)\nproject(x)\n")
    (W / "seat.jsonl").write_text(
        json.dumps({"action": "compiled", "key": "a.cu", "seconds": 1.5, "rc": 0, "outcome": "cold"}) + "\n"
    )
    (W / "build" / ".ninja_log").write_text("# ninja log v5\n")
    (W / "cwd" / ".github" / "workflows").mkdir(parents=True)  # cuw workflow runs at a repository's root
    shutil.copy(REPO / ".github" / "workflows" / "build.yml", W / "cwd" / ".github" / "workflows")
    from cuw.wheel.publish import publish

    publish(W / "v", W / "index")
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    return W, outside


def _special(row: Row, W: Path, outside: Path) -> str:
    name = WHEEL if row.option in ("wheel", "wheels") else f"special-{row.option.strip('-')}"
    path = W / name
    if row.kind == "fifo":
        os.mkfifo(path)
    elif row.kind == "device":
        return "/dev/zero"
    elif row.kind == "folder":
        path.mkdir()
    elif row.kind == "dangling":
        path.symlink_to(outside / "nothing")
    else:
        path.symlink_to(outside / "victim.txt")
    return str(path)


def _argv(row: Row, W: Path, special: str) -> list[str]:
    from cuw.cli.parser import verb_specs

    spec = next(s for s in verb_specs() if s.name == row.verb)
    given = {**BASE[row.verb], **ALSO.get((row.verb, row.option), {}), row.option: special}
    argv = [row.verb]
    for option in spec.options:
        value = given.get(option.flag)
        if value is None or value is False:
            continue
        value = str(value).replace("{W}", str(W))
        argv += [value] if option.positional else [option.flag] if value == "True" else [option.flag, value]
    return argv


def _snapshot(root: Path) -> dict[str, tuple]:
    seen = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        seen[str(path.relative_to(root))] = (info.st_mode, info.st_size, content)
    return seen


# -- one row in a process of its own ------------------------------------------------------------


def run_forked(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = TIMEOUT_S) -> tuple[Optional[int], str]:
    """``cuw ARGV`` in a child forked from this process (its imports already made): the exit code
    (None when it ran past ``timeout`` and was killed with its process group) and its stderr."""
    err_path = cwd.parent / f".stderr-{os.getpid()}-{time.monotonic_ns()}"
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.setsid()
            limit = _mapped() + MEMORY
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(fd, 2)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
            from cuw.cli.main import main

            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 -- the child reports whatever escaped, then leaves
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    deadline = time.monotonic() + timeout
    status: Optional[int] = None
    while time.monotonic() < deadline:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(raw)
            break
        time.sleep(0.02)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    err = Path(err_path).read_text(errors="replace") if Path(err_path).exists() else ""
    Path(err_path).unlink(missing_ok=True)
    return status, err


@pytest.fixture(scope="module", autouse=True)
def _imports() -> None:
    """The verbs' modules imported once, before the forks (each row then starts at once)."""
    import cuw.cli.main  # noqa: F401
    import cuw.cli.verbs  # noqa: F401
    import cuw.jobs.runner  # noqa: F401
    import cuw.tools.planner  # noqa: F401
    import cuw.wheel.publish  # noqa: F401
    import cuw.wheel.verify  # noqa: F401


OTHER_RESULT: dict[tuple[str, str, str], int] = {
    ("verify", "wheel", "planted"): 1,  # a link to a file that is no wheel: the verify gate refuses it
    ("publish", "--reports", "dangling"): 0,  # no --reports folder: no link failed, nothing to name
    ("report", "--artifacts", "dangling"): 0,  # no such folder: no shard reports to draw
    ("report", "--dist", "dangling"): 0,  # no such folder: no link report to draw
}
"""Rows whose documented result is not exit 2, with that exit code."""


def _documented(row: Row) -> bool:
    """An ``--output`` the user names: a device is written into, a link written through (docs/verbs.md)."""
    return row.option == "--output" and row.kind in ("device", "dangling", "planted")


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.id)
def test_a_special_path(row: Row, tmp_path: Path) -> None:
    W, outside = _world(tmp_path)
    special = _special(row, W, outside)
    argv = _argv(row, W, special)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CUW_")},
        "CUW_LOG_DIR": str(tmp_path / "logs"),
        "CUW_RECIPES": RECIPES,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    before = _snapshot(outside)
    started = time.monotonic()
    code, err = run_forked(argv, W / "cwd", env)
    took = time.monotonic() - started
    shown = f"cuw {' '.join(argv)} -> exit {code} in {took:.1f} s\n{err}"
    assert code is not None, f"hung: {shown}"
    assert "Traceback" not in err and "internal error" not in err, shown
    after = _snapshot(outside)
    if _documented(row):
        assert code in (0, 1, 2), shown
        target = str(Path(os.path.realpath(special)).relative_to(outside)) if special != "/dev/zero" else None
        assert {k: v for k, v in after.items() if k != target} == {k: v for k, v in before.items() if k != target}, shown
    else:
        assert code == OTHER_RESULT.get((row.verb, row.option, row.kind), 2), shown
        assert after == before, f"wrote outside the row's folder: {shown}"
    errors = [line for line in err.splitlines() if line.startswith("cuw: error:")]
    if code == 2:
        assert len(errors) == 1, shown
        if (row.verb, row.option, row.kind) in NOT_REACHED:
            return
        named = (special, Path(special).name, os.path.realpath(special))
        assert any(name in errors[0] for name in named), shown


# -- files the forge names itself -----------------------------------------------------------------


def _planted(folder: Path, name: str, outside: Path) -> Path:
    """A link named ``name`` in ``folder`` to a file outside, which must keep its bytes."""
    link = folder / name
    link.unlink(missing_ok=True)
    link.symlink_to(outside / "victim.txt")
    return link


def _assert_replaced(link: Path, outside: Path) -> None:
    assert (outside / "victim.txt").read_text() == "precious\n", f"written through the link at {link}"
    assert not link.is_symlink() and link.is_file(), link


def test_verify_replaces_a_link_planted_at_its_reports(tmp_path: Path) -> None:
    W, outside = _world(tmp_path)
    wheel = W / "v" / WHEEL
    links = [_planted(wheel.parent, wheel.name + suffix, outside) for suffix in (".verify.json", ".verify.md")]
    code, err = run_forked(["verify", str(wheel), "--recipes", RECIPES, "--no-import"], W / "cwd", dict(os.environ), 120)
    assert code in (0, 1), err
    for link in links:
        _assert_replaced(link, outside)
    assert json.loads(links[0].read_text())["wheel"].endswith(WHEEL)


def test_the_index_replaces_links_planted_at_its_files(tmp_path: Path) -> None:
    from cuw.wheel.publish import publish

    W, outside = _world(tmp_path)
    second = WHEEL.replace("0.1.0", "0.2.0")
    make_wheel(W / "v2", second, b"two")
    index = W / "index"
    planted = [
        _planted(index / "simple", "index.html", outside),
        _planted(index / "simple" / "cuw-example", "index.json", outside),
        _planted(index, "choose.html", outside),
        _planted(index, "packages.json", outside),
        _planted(index / "files", second + ".build.json", outside),
        _planted(index / "files", second + ".metadata", outside),
    ]
    assert publish(W / "v2", index).published == [second]
    for link in planted:
        _assert_replaced(link, outside)


def test_a_record_planted_as_a_link_is_replaced(tmp_path: Path) -> None:
    from cuw.base.records import read_build_record, write_build_record

    W, outside = _world(tmp_path)
    record = read_build_record(W / "v" / (WHEEL + ".build.json"))
    link = _planted(W / "dist", WHEEL + ".build.json", outside)
    write_build_record(link, record)
    _assert_replaced(link, outside)
    assert read_build_record(link).wheel == WHEEL


def test_a_publish_of_a_fifo_named_like_a_wheel_is_refused_at_once(tmp_path: Path) -> None:
    """The issue's first case: a FIFO with a record beside it hung ``cuw publish`` forever."""
    W, _ = _world(tmp_path)
    incoming = W / "incoming"
    incoming.mkdir()
    shutil.copy(W / "v" / (WHEEL + ".build.json"), incoming)
    os.mkfifo(incoming / WHEEL)
    code, err = run_forked(["publish", str(incoming), str(W / "out" / "index")], W / "cwd", dict(os.environ))
    assert code == 2 and f"{incoming / WHEEL} is a FIFO, not a regular file" in err, err


def test_an_audit_of_an_index_whose_wheel_is_a_fifo_finds_it_at_once(tmp_path: Path) -> None:
    """A FIFO at a published wheel's place: a finding about that wheel (its open waited forever)."""
    W, _ = _world(tmp_path)
    wheel = W / "index" / "files" / WHEEL
    wheel.unlink()
    os.mkfifo(wheel)
    out = W / "audit.md"
    argv = ["audit", "--index", str(W / "index"), "--package", "example", "--recipes", RECIPES, "--output", str(out)]
    code, err = run_forked(argv, W / "cwd", dict(os.environ), 120)
    assert code == 1, err
    assert f"unreadable: {wheel} is a FIFO, not a regular file" in out.read_text(), out.read_text()


def test_a_wheels_metadata_past_the_members_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cuw.base import reading
    from cuw.base.errors import InputError
    from cuw.wheel.index import read_metadata

    wheel = make_wheel(tmp_path, WHEEL, record=False)
    assert read_metadata(wheel).startswith(b"Metadata-Version")
    monkeypatch.setitem(reading.LIMITS, "member", 16)
    with pytest.raises(InputError, match=r"METADATA is larger than any METADATA"):
        read_metadata(wheel)
