"""The import check's install (cuw/wheel/target_install.py) against ``pip install --no-deps --target``:
the same files land, and pip's refusals (tags, Requires-Python) are refused the same way."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from cuw.wheel.target_install import install_into

WHEEL_META = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"


def _wheel(folder: Path, tag: str = "py3-none-any", requires_python: str = "", purelib: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"demo-1.0-{tag}.whl"
    metadata = "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n" + (
        f"Requires-Python: {requires_python}\n" if requires_python else ""
    )
    with WheelFile(path, "w") as whl:
        whl.writestr("demo/__init__.py", "ANSWER = 42\n")
        whl.writestr("demo/sub/data.txt", "payload\n")
        whl.writestr("demo-1.0.dist-info/METADATA", metadata)
        whl.writestr("demo-1.0.dist-info/WHEEL", WHEEL_META.format(purelib=str(purelib).lower(), tag=tag))
        whl.writestr("demo-1.0.dist-info/entry_points.txt", "[console_scripts]\ndemo-cli = demo:main\n")
        whl.writestr("demo-1.0.data/scripts/demo-tool", "#!python\nprint('tool')\n")
    return path


def _pip_target(wheel: Path, target: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(target), str(wheel)]
    return subprocess.run(cmd, capture_output=True, text=True)


def _importable(root: Path) -> dict[str, bytes]:
    """The files an import from ``root`` can reach, less the installer's own bookkeeping."""
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in skip and "__pycache__" not in p.parts and p.parts[len(root.parts)] != "bin"
    }


@pytest.mark.parametrize("purelib", [True, False], ids=["purelib", "platlib"])
def test_the_same_files_as_pip_target_and_the_package_imports(tmp_path, purelib):
    wheel = _wheel(tmp_path / "in", purelib=purelib)
    ours, pips = tmp_path / "ours", tmp_path / "pips"
    assert install_into(wheel, ours, tmp_path / "rest") == ""
    proc = _pip_target(wheel, pips)
    assert proc.returncode == 0, proc.stderr
    assert _importable(ours) == _importable(pips) and "demo/__init__.py" in _importable(ours)
    assert not (ours / "bin").exists() and (tmp_path / "rest" / "bin" / "demo-cli").is_file()  # scripts: off the path
    child = subprocess.run(
        [sys.executable, "-c", "import demo; print(demo.ANSWER)"], env={"PYTHONPATH": str(ours)}, capture_output=True, text=True
    )
    assert child.stdout.strip() == "42", child.stderr


@pytest.mark.parametrize(
    "tag, requires_python, ours_say, pip_says",
    [
        ("cp27-cp27m-win32", "", "is not a supported wheel on this platform", "is not a supported wheel on this platform"),
        ("py3-none-any", ">=4", "requires Python >=4, this is", "requires a different Python"),
    ],
    ids=["tags", "requires-python"],
)
def test_what_pip_refuses_is_refused_before_anything_is_written(tmp_path, tag, requires_python, ours_say, pip_says):
    wheel = _wheel(tmp_path / "in", tag=tag, requires_python=requires_python)
    why = install_into(wheel, tmp_path / "ours", tmp_path / "rest")
    assert ours_say in why and wheel.name in why, why
    assert not (tmp_path / "ours").exists()
    proc = _pip_target(wheel, tmp_path / "pips")
    assert proc.returncode != 0 and pip_says in proc.stderr, proc.stderr


def test_a_damaged_wheel_is_one_line(tmp_path):
    wheel = _wheel(tmp_path / "in")
    wheel.write_bytes(wheel.read_bytes()[:100])
    why = install_into(wheel, tmp_path / "ours", tmp_path / "rest")
    assert why.startswith(f"{wheel.name} could not be installed: ") and "\n" not in why, why
    junk = tmp_path / "in" / "not-a-wheel.whl"
    junk.write_bytes(b"junk")
    assert "is not a wheel's file name" in install_into(junk, tmp_path / "ours", tmp_path / "rest")


@pytest.mark.parametrize(
    "member, says",
    [
        ("../escaped.py", "outside of the target directory"),
        ("demo/../../escaped.py", "outside of the target directory"),
        ("/tmp/escaped-abs.py", "absolute"),
    ],
    ids=["dotdot", "inner-dotdot", "absolute"],
)
def test_a_member_that_leads_outside_the_target_is_refused_and_writes_nothing_outside(tmp_path, member, says):
    """A wheel is input from an earlier step: one whose member names a path above the target (a
    tampered or hostile wheel) is refused in one line, and nothing lands beside or above the target."""
    wheel = _wheel(tmp_path / "in")
    with zipfile.ZipFile(wheel, "a") as whl:  # added after the wheel's RECORD, as a tampering would be
        whl.writestr(member, "ESCAPED = True\n")
    root = tmp_path / "deep" / "deeper"
    before = set(tmp_path.rglob("*"))
    why = install_into(wheel, root / "ours", root / "rest")
    assert why.startswith(f"{wheel.name} could not be installed: ") and says in why and "\n" not in why, why
    assert not list(tmp_path.rglob("escaped*.py")) and not Path("/tmp/escaped-abs.py").exists()
    assert {p for p in tmp_path.rglob("*") if root not in p.parents and p != root} - before <= {tmp_path / "deep"}
