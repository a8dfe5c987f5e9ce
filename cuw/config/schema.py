"""Strict loading of YAML mappings into typed dataclasses.

Every field's type is read from the dataclass itself, so the schema is written
once. An unknown key is an error naming the closest valid key; a version that
YAML turned into a number is an error, not a silently different value.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, TypeVar, Union

from cuw.base.errors import CuwError

T = TypeVar("T")


class SchemaError(CuwError):
    pass


def _closest(key: str, valid: list[str]) -> str:
    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else f"; valid keys: {', '.join(sorted(valid))}"


def load_dataclass(cls: type[T], data: Any, where: str) -> T:
    """Builds ``cls`` from a mapping; ``where`` names the file and key path for errors."""
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            raise SchemaError(f"{where}: unknown key {key!r}{_closest(str(key), list(fields))}")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _convert(hints[name], data[name], f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SchemaError(f"{where}: missing required key {name!r}")
    return cls(**values)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, where)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise SchemaError(f"{where}: {value!r} is not one of {choices}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise SchemaError(f"{where}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(f"{where}: expected a mapping, got {type(value).__name__}")
        return {_convert(args[0], k, f"{where}"): _convert(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return load_dataclass(tp, value, where)
    if tp is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise SchemaError(
                f"{where}: {value!r} must be a string; YAML read it as a number "
                f"(an unquoted 2.10 becomes 2.1) -- quote it: '{value}'"
            )
        if not isinstance(value, str):
            raise SchemaError(f"{where}: expected a string, got {type(value).__name__}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{where}: expected an integer, got {value!r}")
        return value
    raise TypeError(f"schema type {tp!r} at {where} is not supported")


# -- generated documentation -------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each dataclass field (its docstring), read with ast."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _public_fields(cls: type, hidden: tuple[str, ...]) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.name not in hidden]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return None if dataclasses.is_dataclass(value) else value
    return dataclasses.MISSING


def json_schema(cls: type, hidden: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON schema (draft 2020-12) for ``cls``, strict like the loader."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    props: dict[str, Any] = {}
    required = []
    for f in _public_fields(cls, hidden):
        prop = _type_schema(hints[f.name])
        if f.name in docs:
            prop["description"] = docs[f.name]
        default = _default(f)
        if default is dataclasses.MISSING:
            required.append(f.name)
        elif default is not None:
            prop["default"] = default
        props[f.name] = prop
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        out["description"] = " ".join(cls.__doc__.split())
    return out


def _type_schema(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return {"anyOf": [_type_schema(inner), {"type": "null"}]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return json_schema(tp)
    return {str: {"type": "string"}, bool: {"type": "boolean"}, int: {"type": "integer"}}[tp]


def docs_table(cls: type, prefix: str = "", hidden: tuple[str, ...] = ()) -> list[str]:
    """Markdown rows: key, type, default, meaning; nested dataclasses expand inline."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows = []
    for f in _public_fields(cls, hidden):
        tp = hints[f.name]
        default = _default(f)
        shown = "required" if default is dataclasses.MISSING else ("" if default is None else f"`{default!r}`")
        rows.append(f"| `{prefix}{f.name}` | {_type_name(tp)} | {shown} | {docs.get(f.name, '')} |")
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows.extend(docs_table(tp, f"{prefix}{f.name}.", ()))
    return rows


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return f"{_type_name(inner)} or null"
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return tp.__name__
