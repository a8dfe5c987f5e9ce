"""Lint: every consumer of a target that exists only when its sources are present
must sit under ``if(TARGET <target>)``.

With ``filter: source`` a shard may hold no file of a family. A target created
under a condition that reads the family's source list (``if(AUTOGEN_HOPPER_FNA)``
around ``add_library(natten_hopper ...)``) then does not exist, and any consumer
guarded on something else (the arch flag, true in every shard) fails CMake's
generate step. This module reads the commands :mod:`cuw.tools.cmake_reader` parses, each
with the branches it sits under, and reports such consumers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from cuw.base.errors import InputError
from cuw.tools.cmake_reader import IDENT, Arg, Branch, Command, cmake_files, parse_file, render

# ---------------------------------------------------------------------------
# Which targets depend on which sources are present, and who uses them.


@dataclass(frozen=True)
class GuardFinding:
    file: Path
    """Relative to the linted tree."""
    line: int
    target: str
    consumer: str
    """The consuming command, on one line."""
    guard: str
    """The innermost condition it sits under, or 'no condition'."""
    producer: str
    """Where the target is created and under which condition."""
    fix: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.consumer} uses {self.target}, which exists only when its sources "
            f"are present ({self.producer}), but it sits under {self.guard}\n"
            f"    fix: {self.fix}"
        )


_VAR_REF = re.compile(r"\$\{([A-Za-z0-9_.+\-/]+)\}")
_TARGET_GENEX = re.compile(r"\$<TARGET_([A-Z_]+):([^>,:]+)")
# Generator expressions that ask whether a target exists (or tolerate its absence).
_SAFE_GENEX = ("EXISTS", "NAME_IF_EXISTS")
_CONDITION_WORDS = {
    "NOT",
    "AND",
    "OR",
    "DEFINED",
    "TARGET",
    "EXISTS",
    "COMMAND",
    "POLICY",
    "TEST",
    "IS_DIRECTORY",
    "IS_SYMLINK",
    "IS_ABSOLUTE",
    "IN_LIST",
    "MATCHES",
    "LESS",
    "GREATER",
    "EQUAL",
    "LESS_EQUAL",
    "GREATER_EQUAL",
    "STRLESS",
    "STRGREATER",
    "STREQUAL",
    "STRLESS_EQUAL",
    "STRGREATER_EQUAL",
    "VERSION_LESS",
    "VERSION_GREATER",
    "VERSION_EQUAL",
    "VERSION_LESS_EQUAL",
    "VERSION_GREATER_EQUAL",
    "PATH_EQUAL",
    "IS_NEWER_THAN",
    "CACHE",
    "ENV",
}
# Commands whose first argument must name an existing target.
_CONFIGURES_FIRST = {
    "target_link_libraries",
    "target_sources",
    "target_include_directories",
    "target_compile_definitions",
    "target_compile_options",
    "target_compile_features",
    "target_link_options",
    "target_link_directories",
    "target_precompile_headers",
    "add_dependencies",
    "set_target_properties",
}
_LINK_KEYWORDS = {
    "PUBLIC",
    "PRIVATE",
    "INTERFACE",
    "LINK_PUBLIC",
    "LINK_PRIVATE",
    "LINK_INTERFACE_LIBRARIES",
    "debug",
    "optimized",
    "general",
}


def _reads(args: Iterable[Arg], bare: bool = True) -> set[str]:
    """Variable names an argument list reads: ``${X}`` anywhere; with ``bare`` (a
    condition) also a plain ``X``, which if() dereferences."""
    names: set[str] = set()
    for arg in args:
        names.update(_VAR_REF.findall(arg.text))
        plain = not arg.quoted and not arg.paren
        if bare and plain and IDENT.fullmatch(arg.text) and arg.text not in _CONDITION_WORDS:
            names.add(arg.text)
    return names


def _source_list_vars(commands: list[Command]) -> set[str]:
    """Variables whose value depends on which files are present: set by file(GLOB),
    aux_source_directory(), or computed from such a variable (set, list)."""
    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cmd in commands:
            names = [a.text for a in cmd.args]
            new: Optional[str] = None
            globbed = cmd.name == "file" and len(names) > 1 and names[0] in ("GLOB", "GLOB_RECURSE")
            if globbed or (cmd.name == "aux_source_directory" and len(names) > 1):
                new = names[1]
            elif cmd.name == "set" and names and _reads(cmd.args[1:], bare=False) & tainted:
                new = names[0]
            elif cmd.name == "list" and len(names) > 2 and names[1] in tainted:
                # list(LENGTH L n), list(GET L i v), list(JOIN L g v): the output is the last argument
                new = (
                    names[1]
                    if names[0]
                    in ("APPEND", "PREPEND", "INSERT", "FILTER", "REMOVE_ITEM", "REMOVE_DUPLICATES", "TRANSFORM", "SORT")
                    else names[-1]
                )
            elif (
                cmd.name == "list"
                and len(names) > 2
                and names[0] in ("APPEND", "PREPEND", "INSERT")
                and _reads(cmd.args[2:], bare=False) & tainted
            ):
                new = names[1]
            if new and new not in tainted:
                tainted.add(new)
                changed = True
    return tainted


def _target_tests(condition: tuple[Arg, ...]) -> list[tuple[str, bool]]:
    """``TARGET x`` tests in a condition: (x, negated)."""
    out = []
    for i, arg in enumerate(condition[:-1]):
        if arg.text == "TARGET" and not arg.quoted:
            negated = i > 0 and condition[i - 1].text == "NOT" and not condition[i - 1].quoted
            out.append((condition[i + 1].text, negated))
    return out


def _conjunctive(condition: tuple[Arg, ...]) -> bool:
    """No OR anywhere: every TARGET test in it must hold when the arm runs."""
    return not any(a.text == "OR" and not a.quoted for a in condition)


def _arm_proves(branch: Branch, target: str) -> bool:
    """Whether running this arm means ``target`` exists."""
    asserted = branch.keyword != "else" and _conjunctive(branch.condition)
    if asserted and (target, False) in _target_tests(branch.condition):
        return True
    # else/elseif of ``if(NOT TARGET t)``: the earlier arm was false, so t exists
    return any(_target_tests(cond) == [(target, True)] and _conjunctive(cond) and len(cond) == 3 for cond in branch.earlier)


def _depends_on_sources(branch: Branch, tainted: set[str], conditional: set[str]) -> bool:
    for cond in (branch.condition, *branch.earlier):
        if _reads(cond) & tainted:
            return True
        if any(name in conditional for name, _ in _target_tests(cond)):
            return True
    return False


def _resolve(name: str, values: dict[str, str]) -> str:
    return _VAR_REF.sub(lambda m: values.get(m.group(1), m.group(0)), name)


def _plain_values(commands: list[Command]) -> dict[str, str]:
    """Variables set exactly once to one literal: enough to resolve ``add_library(${NAME} ...)``."""
    seen: dict[str, list[str]] = {}
    for cmd in commands:
        if cmd.name == "set" and cmd.args:
            seen.setdefault(cmd.args[0].text, []).append(cmd.args[1].text if len(cmd.args) == 2 else "\0")
    return {k: v[0] for k, v in seen.items() if len(v) == 1 and v[0] != "\0" and "${" not in v[0]}


@dataclass(frozen=True)
class _Producer:
    command: Command
    branch: Branch
    """The outermost arm whose condition depends on the sources."""


def _producers(commands: list[Command], tainted: set[str], values: dict[str, str]) -> dict[str, _Producer]:
    conditional: dict[str, _Producer] = {}
    changed = True
    while changed:
        changed = False
        for cmd in commands:
            if cmd.name not in ("add_library", "add_executable") or not cmd.args:
                continue
            name = _resolve(cmd.args[0].text, values)
            if name in conditional:
                continue
            arms = [b for b in cmd.branches if _depends_on_sources(b, tainted, set(conditional))]
            if arms:
                conditional[name] = _Producer(cmd, arms[0])
                changed = True
    return conditional


def _uses(cmd: Command, values: dict[str, str]) -> Iterator[tuple[str, int]]:
    """(target, line) for every target this command needs to exist."""
    for arg in cmd.args:
        for kind, name in _TARGET_GENEX.findall(arg.text):
            safe = f"$<TARGET_EXISTS:{name}>" in arg.text or f"$<TARGET_NAME_IF_EXISTS:{name}>" in arg.text
            if kind not in _SAFE_GENEX and not safe:
                yield _resolve(name, values), arg.line
    plain = [a for a in cmd.args if not a.paren]
    if cmd.name in _CONFIGURES_FIRST and plain:
        yield _resolve(plain[0].text, values), plain[0].line
    if cmd.name in ("target_link_libraries", "add_dependencies"):
        for arg in plain[1:]:
            if arg.text not in _LINK_KEYWORDS:
                yield _resolve(arg.text, values), arg.line
    if cmd.name == "get_target_property" and len(plain) > 1:
        yield _resolve(plain[1].text, values), plain[1].line
    if cmd.name in ("set_property", "install"):
        for i, arg in enumerate(plain[:-1]):
            if arg.text in ("TARGET", "TARGETS") and not arg.quoted:
                for following in plain[i + 1 :]:
                    if following.text.isupper():
                        break
                    yield _resolve(following.text, values), following.line


def _shares_arm(cmd: Command, producer: _Producer) -> bool:
    """The consumer runs only when the producer did: same file, inside the producer's
    arm (the one that depends on the sources), after the producer."""
    return (
        cmd.file == producer.command.file
        and producer.branch in cmd.branches
        and cmd.line > producer.command.line
        and all(b in cmd.branches for b in producer.command.branches)
    )


def _fix(target: str, guard: Optional[Branch], tainted: set[str]) -> str:
    if guard is None or guard.keyword == "else":
        return f"wrap it in if(TARGET {target}) ... endif()"
    if not (_reads(guard.condition) & tainted):
        return (
            f"guard it on if(TARGET {target}) instead of if({render(guard.condition)}): "
            f"that condition does not say whether {target}'s sources are present"
        )
    return f"guard it on if(TARGET {target}): the target's own condition may change, its existence is what matters"


def find_in_commands(commands: list[Command]) -> list[GuardFinding]:
    tainted = _source_list_vars(commands)
    values = _plain_values(commands)
    producers = _producers(commands, tainted, values)
    findings = []
    for cmd in commands:
        for target, line in _uses(cmd, values):
            producer = producers.get(target)
            if producer is None or cmd is producer.command:
                continue
            if any(_arm_proves(b, target) for b in cmd.branches) or _shares_arm(cmd, producer):
                continue
            guard = cmd.branches[-1] if cmd.branches else None
            where = f"{producer.command.file}:{producer.command.line} under {producer.branch}"
            guard_text = str(guard) if guard else "no condition"
            fix = _fix(target, guard, tainted)
            findings.append(GuardFinding(cmd.file, line, target, cmd.text(), guard_text, f"created at {where}", fix))
    return sorted(findings, key=lambda f: (str(f.file), f.line, f.target))


def find_unguarded(tree: Path) -> list[GuardFinding]:
    """Consumers of source-dependent targets not guarded by ``if(TARGET ...)``, in every
    CMake file under ``tree`` (or in ``tree`` itself when it is one file)."""
    if tree.is_file():
        return find_in_commands(parse_file(tree, Path(tree.name)))
    if not tree.is_dir():
        raise InputError(f"{tree}: no such folder or CMake file")
    files = cmake_files(tree)
    if not files:
        raise InputError(f"{tree}: no CMakeLists.txt or *.cmake file under it")
    commands = [c for path in files for c in parse_file(path, path.relative_to(tree))]
    return find_in_commands(commands)
