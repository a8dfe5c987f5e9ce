"""The job folders are checked before anything is written: not inside the recipe's source, not
inside one another, short enough for the job folders and the source tree under them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from cuw.base.errors import CuwError
from cuw.config.paths import ROOM_FOR_JOBS, check_job_folders


def _shard(recipes_dir: Path, tmp_path: Path, *folders: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cuw", "shard", "example", "1/2", "--recipes", str(recipes_dir), *folders],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_a_work_folder_inside_the_source_is_refused_before_anything_is_written(recipes_dir, tmp_path):
    source = recipes_dir / "example" / "package"
    before = sorted(p.relative_to(source) for p in source.rglob("*"))
    proc = _shard(recipes_dir, tmp_path, "--work", str(source / "w"), "--artifacts", str(tmp_path / "a"))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"cuw: error: --work {source / 'w'} is inside the recipe's source {source}")
    assert sorted(p.relative_to(source) for p in source.rglob("*")) == before, "nothing was made in the source"
    assert not (tmp_path / "a").exists()


def test_folders_inside_each_other_and_paths_too_long_are_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(CuwError, match=r"--dist .* is inside --artifacts"):
        check_job_folders({"--work": tmp_path / "w", "--artifacts": tmp_path / "a", "--dist": tmp_path / "a" / "d"}, src)
    with pytest.raises(CuwError, match=r"--work .* is the same folder as --dist"):
        check_job_folders({"--work": tmp_path / "x", "--dist": tmp_path / "x"}, src)
    with pytest.raises(CuwError, match=r"the folder name a{40}\.\.\. is over 255 bytes"):
        check_job_folders({"--work": tmp_path / ("a" * 300)}, src)
    deep = tmp_path.joinpath(*["d" * 200] * 16)  # 3.2 k characters: the OS takes it, the jobs under it would not
    with pytest.raises(CuwError, match=rf"--work is \d+ characters long: .* need about {ROOM_FOR_JOBS} more"):
        check_job_folders({"--work": deep}, src)
    check_job_folders({"--work": tmp_path / "w", "--artifacts": tmp_path / "a", "--dist": tmp_path / "d"}, src)
