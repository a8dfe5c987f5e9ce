"""Safe writes: whole files renamed into place, with the mode a plain write gives, never a torn or private file."""

from __future__ import annotations

import os

import pytest

from cuw.base.errors import InputError
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
