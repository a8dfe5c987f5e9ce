"""Reading CMake files into commands: comments, bracket and quoted arguments, multi-line calls,
each command with its line and the nested if/elseif/else/endif branches it sits under."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from cuw.base.errors import InputError

# ---------------------------------------------------------------------------
# Reading CMake: commands with their arguments and line numbers.


@dataclass(frozen=True)
class Arg:
    text: str
    line: int
    quoted: bool = False
    """Quoted or bracket argument: never a keyword, never a parenthesis."""

    @property
    def paren(self) -> bool:
        return not self.quoted and self.text in ("(", ")")


@dataclass(frozen=True)
class Branch:
    """One arm of an if-chain: ``if``/``elseif`` with its condition, or ``else``."""

    keyword: str
    condition: tuple[Arg, ...]
    line: int
    earlier: tuple[tuple[Arg, ...], ...]
    """Conditions of the chain's earlier arms (false whenever this arm runs)."""
    chain: int
    """Identifies the if-chain, so two commands can be told to share an arm."""

    def __str__(self) -> str:
        if self.keyword == "else":
            return f"else() of if({render(self.earlier[0])}) at line {self.line}"
        return f"{self.keyword}({render(self.condition)}) at line {self.line}"


@dataclass(frozen=True)
class Command:
    name: str
    """Lower case: CMake command names are case-insensitive."""
    args: tuple[Arg, ...]
    file: Path
    line: int
    branches: tuple[Branch, ...] = ()
    """Outermost first."""

    def text(self) -> str:
        return f"{self.name}({render(self.args)})"


def render(args: Iterable[Arg]) -> str:
    out = ""
    for arg in args:
        piece = f'"{arg.text}"' if arg.quoted else arg.text
        if out and not out.endswith("(") and piece != ")":
            out += " "
        out += piece
    return out


_BRACKET_OPEN = re.compile(r"\[(=*)\[")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Reader:
    """A small scanner over one file's text, following the CMake language grammar."""

    def __init__(self, text: str, path: Path) -> None:
        self.text = text
        self.path = path
        self.pos = 0
        self.line = 1

    def fail(self, why: str, line: Optional[int] = None) -> InputError:
        return InputError(f"{self.path}:{line or self.line}: cannot parse CMake: {why}")

    def peek(self, n: int = 0) -> str:
        i = self.pos + n
        return self.text[i] if i < len(self.text) else ""

    def advance(self, n: int = 1) -> str:
        chunk = self.text[self.pos : self.pos + n]
        self.line += chunk.count("\n")
        self.pos += n
        return chunk

    def bracket(self) -> Optional[str]:
        """A bracket argument or comment body (``[==[ ... ]==]``) at the cursor, consumed."""
        match = _BRACKET_OPEN.match(self.text, self.pos)
        if not match:
            return None
        start = self.line
        close = f"]{match.group(1)}]"
        end = self.text.find(close, match.end())
        if end < 0:
            raise self.fail(f"{match.group(0)} is never closed", start)
        body = self.text[match.end() : end]
        self.advance(end + len(close) - self.pos)
        return body.removeprefix("\n")

    def skip_blank(self, newlines: bool) -> None:
        """Skips spaces, comments and (if ``newlines``) line ends."""
        while self.pos < len(self.text):
            c = self.peek()
            if c in " \t\r" or (newlines and c == "\n"):
                self.advance()
            elif c == "#":
                self.advance()
                if self.bracket() is None:
                    while self.pos < len(self.text) and self.peek() != "\n":
                        self.advance()
            else:
                return

    def quoted(self) -> str:
        start = self.line
        self.advance()  # the opening quote
        out = []
        while True:
            c = self.peek()
            if c == "":
                raise self.fail("a quoted argument is never closed", start)
            if c == "\\":
                out.append(self.advance(2))
            elif c == '"':
                self.advance()
                return "".join(out)
            else:
                out.append(self.advance())

    def unquoted(self) -> str:
        out: list[str] = []
        while True:
            c = self.peek()
            if c == "" or c in " \t\r\n()#":
                return "".join(out)
            if c == "\\":
                out.append(self.advance(2))
            elif c == '"':  # legacy form: -DX="a b" is one argument
                start = self.line
                end = self.text.find('"', self.pos + 1)
                if end < 0:
                    raise self.fail("a quote inside an argument is never closed", start)
                out.append(self.advance(end + 1 - self.pos))
            else:
                out.append(self.advance())

    def arguments(self, opened_at: int) -> tuple[Arg, ...]:
        args: list[Arg] = []
        depth = 0
        while True:
            self.skip_blank(newlines=True)
            c = self.peek()
            if c == "":
                raise self.fail("a command's '(' is never closed", opened_at)
            line = self.line
            if c == "(":
                self.advance()
                depth += 1
                args.append(Arg("(", line))
            elif c == ")":
                self.advance()
                if depth == 0:
                    return tuple(args)
                depth -= 1
                args.append(Arg(")", line))
            elif c == '"':
                args.append(Arg(self.quoted(), line, quoted=True))
            elif c == "[" and _BRACKET_OPEN.match(self.text, self.pos):
                args.append(Arg(self.bracket() or "", line, quoted=True))
            else:
                args.append(Arg(self.unquoted(), line))

    def commands(self) -> Iterator[tuple[str, int, tuple[Arg, ...]]]:
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return
            line = self.line
            match = IDENT.match(self.text, self.pos)
            if not match:
                raise self.fail(f"expected a command name, found {self.text[self.pos : self.pos + 20]!r}")
            self.advance(match.end() - self.pos)
            self.skip_blank(newlines=False)
            if self.peek() != "(":
                raise self.fail(f"command {match.group(0)} is not followed by '('", line)
            self.advance()
            yield match.group(0).lower(), line, self.arguments(line)


def parse_file(path: Path, shown_as: Optional[Path] = None) -> list[Command]:
    """Every command of one CMake file, each with the if-branches it sits under."""
    shown = shown_as or path
    reader = _Reader(path.read_text(errors="replace"), shown)
    out: list[Command] = []
    # One frame per open if-chain: its arms so far.
    stack: list[list[Branch]] = []
    chains = 0
    for name, line, args in reader.commands():
        if name == "if":
            chains += 1
            out.append(Command(name, args, shown, line, tuple(f[-1] for f in stack)))
            stack.append([Branch("if", args, line, (), chains)])
            continue
        if name in ("elseif", "else", "endif"):
            if not stack:
                raise reader.fail(f"{name}() without an open if()", line)
            arms = stack[-1]
            if name == "endif":
                stack.pop()
            else:
                earlier = tuple(arm.condition for arm in arms)
                if arms[-1].keyword == "else":
                    raise reader.fail(f"{name}() after else() (the if() at line {arms[0].line})", line)
                arms.append(Branch(name, args if name == "elseif" else (), line, earlier, arms[0].chain))
            continue
        out.append(Command(name, args, shown, line, tuple(f[-1] for f in stack)))
    if stack:
        raise reader.fail("if() is never closed by endif()", stack[-1][0].line)
    return out


def cmake_files(tree: Path) -> list[Path]:
    """CMakeLists.txt and *.cmake files of a source tree, outside build trees."""
    found = []
    for path in sorted(tree.rglob("*")):
        if path.name != "CMakeLists.txt" and path.suffix != ".cmake":
            continue
        inside = path.relative_to(tree).parents
        if not path.is_file() or any((tree / parent / "CMakeCache.txt").is_file() for parent in inside):
            continue
        found.append(path)
    return found
