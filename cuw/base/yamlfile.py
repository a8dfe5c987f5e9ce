"""Reading the forge's YAML files (recipes, the farm policy, image recipes): bounded and strict.

A recipe is a small hand-written file. What this reader refuses, each in one line naming the
file (and the line where YAML knows it):

* anything but a regular file: a FIFO would block the reader forever, a device never ends;
* more than :data:`LIMIT` bytes;
* bytes that are not UTF-8;
* anchors and aliases (``&a`` / ``*a``): nothing in these files needs them, and a few hundred
  bytes of nested aliases expand into gigabytes (the "billion laughs" shape);
* a key twice in one mapping: YAML keeps the last silently, so an override can hide a pin;
* nesting deeper than :data:`DEPTH`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Hashable, Optional

import yaml

from cuw.base.errors import InputError
from cuw.base.reading import LIMITS, read_bytes

LIMIT = LIMITS["recipe"]  # bytes: the largest recipe is a few kilobytes
DEPTH = 32
# What a file's bytes parsed to: one job reads the farm policy about eight times, and the
# pure-Python parser the strict rules need takes some 30 ms a read. Keyed by the bytes read (so
# never stale); each caller gets its own copy.
_PARSED: dict[bytes, Any] = {}


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}"


class _StrictLoader(yaml.SafeLoader):
    def compose_node(self, parent: Optional[yaml.Node], index: int) -> Optional[yaml.Node]:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves it unannotated
            raise yaml.YAMLError(
                f"an alias (*{event.anchor}) at line {event.start_mark.line + 1}: "
                "anchors and aliases are not read here; write the value out"
            )
        event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves it unannotated
        if getattr(event, "anchor", None):
            raise yaml.YAMLError(
                f"an anchor (&{event.anchor}) at line {event.start_mark.line + 1}: "
                "anchors and aliases are not read here; write the value out"
            )
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > DEPTH:
                raise yaml.YAMLError(f"nesting deeper than {DEPTH} levels at line {event.start_mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if first is not None:
                    raise yaml.YAMLError(
                        f"the key {key!r} appears twice in one mapping ({_where(first)} and "
                        f"{_where(key_node)}): YAML would keep the last silently; keep one"
                    )
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def problem(path: Path, exc: yaml.YAMLError) -> str:
    """A YAML error as one line: the file, line and column, and what is wrong there."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = getattr(exc, "problem", None) or str(exc)
    return f"{path}: not valid YAML{where}: " + " ".join(str(what).split())


def read_yaml(path: Path, what: str) -> Any:
    """The parsed contents of ``path`` (``what``: the kind of file, for the messages)."""
    try:
        data = read_bytes(path, what, "recipe")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (the {what})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (the {what}, UTF-8 YAML, expected)") from None
    if data in _PARSED:
        return copy.deepcopy(_PARSED[data])
    try:
        parsed = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 -- a SafeLoader with stricter rules
    except yaml.YAMLError as exc:
        raise InputError(problem(path, exc)) from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to read") from None
    _PARSED[data] = parsed
    return copy.deepcopy(parsed)
