"""Safe writes: whole files renamed into place, with the mode a plain write gives, never a torn or private file."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO
from cuw.base.errors import InputError, OutputError
from cuw.base.files import contained, copy_into, write_text


def test_a_new_file_gets_the_umask_mode_and_an_old_file_keeps_its_mode(tmp_path):
    old = os.umask(0o022)
    try:
        fresh = write_text(tmp_path / "index.html", "<html/>")
        assert fresh.stat().st_mode & 0o777 == 0o644  # served by a web server: readable by all
        fresh.chmod(0o640)
        write_text(fresh, "<html>2</html>")
        assert fresh.stat().st_mode & 0o777 == 0o640 and fresh.read_text() == "<html>2</html>"
    finally:
        os.umask(old)


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    dest = tmp_path / "costs.json"
    dest.write_text("old")

    class Boom(Exception):
        pass

    def fill_then_fail(_src, tmp):  # copy2 raising half-way through
        raise Boom

    import shutil

    original = shutil.copy2
    shutil.copy2 = fill_then_fail  # type: ignore[assignment]
    try:
        with pytest.raises(Boom):
            copy_into(tmp_path / "new", dest)
    finally:
        shutil.copy2 = original  # type: ignore[assignment]
    assert dest.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["costs.json"]


def test_outputs_onto_a_folder_or_into_a_missing_folder_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        write_text(tmp_path, "x", "--output")
    with pytest.raises(InputError, match="does not exist"):
        write_text(tmp_path / "no" / "x.json", "x", "--output")


def test_a_path_built_from_input_stays_under_its_root(tmp_path):
    assert contained(tmp_path / "a" / "b", tmp_path, "cell") == (tmp_path / "a" / "b").resolve()
    with pytest.raises(InputError, match="would lie outside"):
        contained(tmp_path / ".." / "elsewhere", tmp_path, "recipe '..'")


def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    write_text(link, "new", "--output")
    assert link.is_symlink() and os.readlink(link) == "real.json" and target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="needs /dev/null")
def test_a_device_is_written_into_never_replaced(tmp_path):
    """``--output /dev/null`` (run as root it could be renamed over): the device stays a device."""
    before = os.stat("/dev/null")
    assert write_text(Path("/dev/null"), "plan\n", "--output") == Path("/dev/null")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    if Path("/dev/full").is_char_device():
        with pytest.raises(OutputError, match=r"--output /dev/full: cannot write \(No space left on device\)"):
            write_text(Path("/dev/full"), "x" * 100_000, "--output")
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_pipe_is_written_into_and_one_nobody_reads_is_refused(tmp_path):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="nothing reads that pipe"):
        write_text(fifo, "x", "--output")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for _ in range(200):  # the reader opens its end: then a write finds it
        try:
            write_text(fifo, "through the pipe", "--output")
            break
        except OutputError:
            time.sleep(0.01)
    reader.join(timeout=10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="needs /dev/stdout")
def test_output_to_dev_stdout_reaches_the_pipe_the_verb_writes_to(tmp_path):
    """``--output /dev/stdout`` is a link to a pipe here (``/proc/self/fd/1``, ``pipe:[...]``):
    written into, not resolved to a path that is no file."""
    from conftest import run_cuw

    proc = run_cuw("plan", "example", "--shards", "2", "--output", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("plan for example: ") and proc.stderr.strip() == "cuw: plan: /dev/stdout"
    dash = run_cuw("plan", "example", "--shards", "2", "--output", "-", cwd=tmp_path)
    assert dash.returncode == 0 and dash.stdout == proc.stdout and not (tmp_path / "-").exists(), dash.stderr


def test_a_link_loop_is_refused_and_stays_a_link(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OutputError, match=r"--output .*a: cannot write \(Too many levels of symbolic links\)"):
        write_text(tmp_path / "a", "x", "--output")
    assert os.readlink(tmp_path / "a") == "b" and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_dev_stdout_into_a_file_writes_where_the_shell_left_off(tmp_path):
    """``{ echo before; cuw ... --output /dev/stdout; echo after; } > log``: the log keeps all three,
    as a plain write to the open descriptor would (a rename unlinked the file, a reopen overwrote it)."""
    log = tmp_path / "log.txt"
    code = (
        "import sys; from pathlib import Path; from cuw.base.files import write_text; "
        "sys.stdout.write('before\\n'); sys.stdout.flush(); write_text(Path('/dev/stdout'), 'plan\\n', '--output'); "
        "sys.stdout.write('after\\n')"
    )
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True, cwd=REPO)
    assert log.read_text() == "before\nplan\nafter\n"
    # With standard output closed (``>&-``), the error says so.
    plan_only = code.replace("sys.stdout.write('before\\n'); sys.stdout.flush(); ", "").rsplit("; ", 1)[0]
    closed = subprocess.run(
        [sys.executable, "-c", plan_only], stderr=subprocess.PIPE, text=True, cwd=REPO, preexec_fn=lambda: os.close(1)
    )
    assert "--output /dev/stdout: cannot write (that file descriptor is not open)" in closed.stderr


def test_what_is_written_into_a_pipe_is_made_where_nobody_else_can_open_it(tmp_path, monkeypatch):
    made: list[str] = []
    real = tempfile.TemporaryDirectory

    def watched(*args, **kwargs):
        folder = real(*args, **kwargs)
        made.append(folder.name)
        return folder

    monkeypatch.setattr(tempfile, "TemporaryDirectory", watched)

    def check_private(tmp: str) -> None:
        Path(tmp).write_text("x")
        os.chmod(tmp, 0o666)  # what write_text gives a file for /dev/null's mode
        assert stat.S_IMODE(os.stat(os.path.dirname(tmp)).st_mode) == 0o700

    from cuw.base import files

    files._replace(Path("/dev/null"), "--output", check_private)
    assert made and not os.path.exists(made[0])


def test_a_destination_name_at_the_file_systems_limit_still_gets_its_temp(tmp_path):
    dest = tmp_path / ("a" * 250)
    write_text(dest, "x", "--output")
    assert dest.read_text() == "x"


# -- what the forge names itself, and what it reads --------------------------------------------


def test_a_file_the_forge_names_replaces_a_link_planted_there(tmp_path):
    """``<wheel>.verify.json`` and its kind: the link is replaced, the file it points to keeps its bytes."""
    from cuw.base.files import place_bytes, place_copy, place_text

    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious\n")
    victim.chmod(0o600)
    folder = tmp_path / "dist"
    folder.mkdir()
    source = tmp_path / "made.whl"
    source.write_bytes(b"wheel")
    for name, place in (
        ("a.verify.json", lambda dest: place_text(dest, "{}\n", "verify report")),
        ("b.index", lambda dest: place_bytes(dest, b"page", "index page")),
        ("c.whl", lambda dest: place_copy(source, dest, "--dist")),
    ):
        link = folder / name
        link.symlink_to(victim)
        assert place(link) == link
        assert not link.is_symlink() and link.is_file() and link.stat().st_mode & 0o777 != 0o600
        assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["a.verify.json", "b.index", "c.whl"]  # no temp left


def test_a_file_the_forge_names_replaces_a_fifo_and_keeps_a_regular_files_mode(tmp_path):
    from cuw.base.files import place_text

    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    place_text(fifo, "x", "report")  # a FIFO nobody reads: replaced at once, not waited on
    assert fifo.is_file() and fifo.read_text() == "x"
    fifo.chmod(0o640)
    place_text(fifo, "y", "report")
    assert stat.S_IMODE(fifo.stat().st_mode) == 0o640 and fifo.read_text() == "y"
    (tmp_path / "a-folder").mkdir()
    with pytest.raises(OutputError, match="a folder is in the way"):
        place_text(tmp_path / "a-folder", "x", "report")


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path):
    from cuw.base.reading import open_file, read_text

    fifo = tmp_path / "costs.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"costs.json is a FIFO, not a regular file; give the cost table"):
        read_text(fifo, "cost table", "cost table")
    with pytest.raises(InputError, match="is a FIFO"):
        open_file(fifo, "wheel")
    assert time.monotonic() - started < 5


@pytest.mark.skipif(not Path("/dev/zero").is_char_device(), reason="needs /dev/zero")
def test_a_device_is_refused_never_read_until_memory_runs_out():
    from cuw.base.files import sha256_of
    from cuw.base.reading import read_bytes

    with pytest.raises(InputError, match=r"^/dev/zero is a character device, not a regular file"):
        read_bytes("/dev/zero", "cost table", "cost table")
    with pytest.raises(InputError, match="character device"):
        sha256_of(Path("/dev/zero"), "wheel")


def test_each_kind_of_file_is_read_to_its_bound(tmp_path, monkeypatch):
    from cuw.base import reading

    monkeypatch.setitem(reading.LIMITS, "report", 10)
    path = tmp_path / "x.json"
    path.write_bytes(b"0123456789")
    assert reading.read_bytes(path, "report", "report") == b"0123456789"
    path.write_bytes(b"01234567890")
    with pytest.raises(InputError, match=r"x.json is larger than 10 bytes, more than any report holds"):
        reading.read_bytes(path, "report", "report")
    with pytest.raises(FileNotFoundError):  # each caller keeps its own line for a missing file
        reading.read_bytes(tmp_path / "none.json", "report", "report")


def test_what_is_expected_a_folder_names_what_is_there(tmp_path):
    from cuw.base.reading import folder, is_regular, optional_folder

    fifo = tmp_path / "reports"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"^--reports .*reports is a FIFO, not a folder"):
        optional_folder(fifo, "--reports")
    assert optional_folder(tmp_path / "none", "--reports") is False and optional_folder(tmp_path, "--reports") is True
    with pytest.raises(InputError, match="no such folder"):
        folder(tmp_path / "none", "--dist")
    with pytest.raises(InputError, match="is a FIFO, not a regular file"):
        is_regular(fifo, "wheel")
    assert is_regular(tmp_path / "none", "wheel") is False
