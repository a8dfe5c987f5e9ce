"""docs/writing-a-recipe.md, run as a reader runs it: every ``$ `` command of its ``console`` blocks, in
order, in an empty folder, each exiting 0 and printing the lines the page shows under it.

``cuw`` is ``python -m cuw`` of this checkout, ``python`` the interpreter running the tests and
``$FORGE`` the checkout; the commands run in ``tmp_path`` with no ``$CUW_*`` settings of the caller, so
the recipes, job folders, archives and wheel they make stay there. A real build: two cold shards and
the link of the example's copy (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO

PAGE = REPO / "docs" / "writing-a-recipe.md"
ELIDED = "…"


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)
    """Output lines the page shows; ``…`` inside one stands for any text, a line of ``…`` alone for any lines."""


def steps(markdown: str) -> list[Step]:
    """The ``$ `` commands of the page's ``console`` blocks with the output lines shown under each."""
    found: list[Step] = []
    for block in re.findall(r"^```console\n(.*?)^```", markdown, flags=re.M | re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append(Step(line[2:]))
            elif found and line.strip() and line.strip() != ELIDED:
                found[-1].expected.append(line)
            elif not found:
                raise AssertionError(f"output before any command in a console block: {line!r}")
    return found


def _fragments(line: str) -> list[str]:
    return [" ".join(part.split()) for part in line.split(ELIDED)]


def _matches(expected: str, line: str) -> bool:
    """``line`` is the expected one, whitespace runs compared as one space; where the expected line has
    ``…``, any text: its first fragment starts the line, its last ends it, the others come in order."""
    text, parts = " ".join(line.split()), _fragments(expected)
    if len(parts) == 1:
        return text == parts[0]
    if not (text.startswith(parts[0]) and text.endswith(parts[-1])):
        return False
    at = len(parts[0])
    for part in parts[1:-1]:
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return len(text) - len(parts[-1]) >= at


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The expected lines not found in ``output``, each after the previous one's match."""
    lines, at, missing = output.splitlines(), 0, []
    for want in expected:
        hit = next((i for i in range(at, len(lines)) if _matches(want, lines[i])), None)
        if hit is None:
            missing.append(want)
        else:
            at = hit + 1
    return missing


def test_the_page_parses_into_the_walkthrough():
    """The parser reads the page as a reader would: every step the page promises, in order."""
    commands = [s.command for s in steps(PAGE.read_text())]
    assert commands[:3] == [
        "mkdir recipes",
        'cp "$FORGE/recipes/defaults.yml" recipes/',
        'cp -r "$FORGE/recipes/example" recipes/my_kernels',
    ]
    for verb in ("cuw recipes", "cuw show my_kernels", "cuw plan my_kernels --shards 2", "cuw shard my_kernels 1/2"):
        assert verb in commands
    assert commands.index("cuw shard my_kernels 2/2") < commands.index("cuw link my_kernels")
    assert all(s.expected for s in steps(PAGE.read_text()) if s.command.startswith(("cuw link", "cuw verify")))


def test_expected_lines_are_matched_in_order_with_elisions():
    out = "cuw: shard 1/2: building\ncuw: shard gate PASS: compiled 5 TUs; build succeeded\ncuw: cache archive: /t/a-1of2.tar\n"
    assert missing_lines(["cuw: shard gate PASS: compiled …", "cuw: cache archive: …-1of2.tar"], out) == []
    assert missing_lines(["cuw: cache archive: …-2of2.tar"], out) == ["cuw: cache archive: …-2of2.tar"]
    assert missing_lines(["cuw: cache archive: …", "cuw: shard gate PASS: …"], out) == ["cuw: shard gate PASS: …"]
    assert missing_lines(["  ok   arch   SASS"], "ok arch SASS ['90']") == ["  ok   arch   SASS"], "a line ends where it says"


def _environment(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cuw").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cuw "$@"\n')
    (bin_dir / "cuw").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUW_", "CCACHE_", "SCCACHE_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",  # stdout and stderr interleave as they were written
        FORGE=str(REPO),
    )
    return env


@pytest.mark.long
@pytest.mark.needs("nvcc", "cmake")
def test_the_add_a_recipe_walkthrough_runs_command_by_command(tmp_path):
    env = _environment(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir()
    for step in steps(PAGE.read_text()):
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", step.command],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=1800,
        )
        assert proc.returncode == 0, f"$ {step.command}\nexit {proc.returncode}\n{proc.stdout[-3000:]}"
        missing = missing_lines(step.expected, proc.stdout)
        assert missing == [], f"$ {step.command}\nnot in its output: {missing}\n{proc.stdout[-3000:]}"
    assert sorted(p.name for p in folder.iterdir()) == [".cuw", "artifacts", "dist", "recipes", "site"]
