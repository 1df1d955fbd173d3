"""Compiled jsonschema validators, memoised by schema, and the parsing of a tool catalogue into plain schemas."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mcp_gym import _schema
from mcp_gym.spaces.errors import _shorten

_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


_COMPILED: dict[str, tuple[Any, str | None]] = {}
_COMPILED_MAX = 2048


def _compile(schema: Any, name: str | None = None) -> Any:
    """Build the jsonschema validator for ``schema``: class from ``$schema``, default Draft 2020-12.

    ``check_schema`` costs milliseconds, so results are memoised by the schema's canonical JSON (spaces are rebuilt
    when vector envs copy or unpickle them). A ``$ref`` resolves only inside the schema and the bundled metaschemas:
    nothing is fetched (jsonschema's default registry would open any URL a server's schema names); ``pattern`` matches
    are bounded in time (:mod:`mcp_gym._schema`). An invalid schema triggers a warning and falls back to a validator
    that only requires an object, so one broken tool does not make the whole server unusable.
    """
    try:
        key: str | None = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    cached = _COMPILED.get(key) if key is not None else None
    if cached is None:
        cls = _schema.validator_class(schema)
        try:
            cls.check_schema(schema)
            cached = (_schema.validator(cls, schema), None)
        except SchemaError as exc:
            cached = (Draft202012Validator(_OBJECT_SCHEMA), _shorten(exc.message, 200))
        if key is not None:
            if len(_COMPILED) >= _COMPILED_MAX:
                _COMPILED.pop(next(iter(_COMPILED)))
            _COMPILED[key] = cached
    validator, problem = cached
    if problem is not None:
        where = f"tool {name!r}" if name is not None else "schema"
        warnings.warn(f"{where}: invalid JSON Schema ({problem}); only checking that arguments are an object",
                      stacklevel=3)
    return validator


_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly"})
_SCALARS: dict[str, Any] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,  # a float such as 1.0 is left to jsonschema (drafts differ)
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
}
_QUICK: dict[int, tuple[Any, Any]] = {}


def quick_check(validator: Any) -> Any:
    """A fast "certainly valid" test for the arguments of ``validator``'s schema, made once per validator, or
    ``None`` when the schema is more than an object of plainly typed properties (``type``, ``properties``,
    ``required``, ``additionalProperties`` true/false, annotations). ``True`` from it means jsonschema finds no
    error; ``False`` means "ask jsonschema" (which finds the error, and its message)."""
    entry = _QUICK.get(id(validator))
    if entry is not None and entry[0] is validator:
        return entry[1]
    fn = _quick(getattr(validator, "schema", None))
    if len(_QUICK) >= _COMPILED_MAX:
        _QUICK.pop(next(iter(_QUICK)))
    _QUICK[id(validator)] = (validator, fn)
    return fn


def _quick(schema: Any) -> Any:
    if not isinstance(schema, dict) or schema.get("type") != "object" or \
            not set(schema) <= _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "$schema"}:
        return None
    props, required, extra = schema.get("properties", {}), schema.get("required", []), \
        schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or type(extra) is not bool or \
            not all(isinstance(r, str) for r in required):
        return None
    checks: dict[str, Any] = {}
    for key, sub in props.items():
        kind = sub.get("type") if isinstance(sub, dict) else None
        if not isinstance(kind, str) or kind not in _SCALARS or not set(sub) <= _ANNOTATIONS | {"type"}:
            return None
        checks[key] = _SCALARS[kind]
    need = tuple(required)

    def check(arguments: dict[str, Any]) -> bool:
        for key in need:
            if key not in arguments:
                return False
        for key, value in arguments.items():
            test = checks.get(key)
            if test is None:
                if not extra:
                    return False
            elif not test(value):
                return False
        return True

    return check


def _normalise_schema(schema: Any, name: str) -> Any:
    """Deep-copy a tool's schema as plain JSON containers; ``None`` means "no parameters" (``{"type": "object"}``)."""
    if schema is None:
        return dict(_OBJECT_SCHEMA)
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, Mapping):
        raise TypeError(f"tool {name!r}: input schema must be a mapping, got {type(schema).__name__}")
    return _plain(schema)


def _plain(value: Any) -> Any:
    """Deep copy turning Mappings into dicts and tuples into lists (so schemas compare and pickle cleanly)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parse_catalogue(tools: Any) -> dict[str, Any]:
    """Accept ``{name: schema}``, or an iterable of MCP ``Tool`` objects / ``{"name", "inputSchema"}`` dicts."""
    if tools is None:
        return {}
    out: dict[str, Any] = {}
    if isinstance(tools, Mapping):
        items: Iterable[tuple[Any, Any]] = tools.items()
    else:
        pairs = []
        for tool in tools:
            if isinstance(tool, Mapping):
                pairs.append((tool.get("name"), tool.get("inputSchema", tool.get("input_schema"))))
            else:
                pairs.append((getattr(tool, "name", None), getattr(tool, "inputSchema", None)))
        items = pairs
    for name, schema in items:
        if not isinstance(name, str) or not name:
            raise TypeError(f"tool names must be non-empty str, got {name!r}")
        if name in out:
            raise ValueError(f"duplicate tool name {name!r}")
        out[name] = _normalise_schema(schema, name)
    return out
