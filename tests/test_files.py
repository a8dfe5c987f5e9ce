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
