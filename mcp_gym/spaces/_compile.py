"""Compiled jsonschema validators, memoised by schema, and the parsing of a tool catalogue into plain schemas."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mcp_gym import _schema
from mcp_gym._memo import BoundedCache, keep
from mcp_gym.spaces.errors import _MAX_INT_BITS, _shorten

_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


_COMPILED_MAX = 2048
_COMPILED = BoundedCache(_COMPILED_MAX)
"""Compiled validators by their schema's canonical JSON (bounded in entries and characters)."""


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
            _schema.check_schema(cls, schema)
            cached = (_schema.validator(cls, schema), None)
        except SchemaError as exc:
            cached = (Draft202012Validator(_OBJECT_SCHEMA), _shorten(exc.message, 200))
        if key is not None:
            _COMPILED.put(key, cached)
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
    keep(_QUICK, id(validator), (validator, fn), _COMPILED_MAX)
    return fn


def _plain_object(schema: Any) -> tuple[dict[str, str], tuple[str, ...], bool] | None:
    """``(property -> its type name, required, additionalProperties)`` of an object schema of plainly typed
    properties (``type``, ``properties``, ``required``, ``additionalProperties`` true/false, annotations), else
    ``None``."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or \
            not set(schema) <= _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "$schema"}:
        return None
    props, required, extra = schema.get("properties", {}), schema.get("required", []), \
        schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or type(extra) is not bool or \
            not all(isinstance(r, str) for r in required):
        return None
    kinds: dict[str, str] = {}
    for key, sub in props.items():
        kind = sub.get("type") if isinstance(sub, dict) else None
        if not isinstance(kind, str) or kind not in _SCALARS or not set(sub) <= _ANNOTATIONS | {"type"}:
            return None
        kinds[key] = kind
    return kinds, tuple(required), extra


def _quick(schema: Any) -> Any:
    plain = _plain_object(schema)
    if plain is None:
        return None
    kinds, need, extra = plain
    checks = {key: _SCALARS[kind] for key, kind in kinds.items()}

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


# -- the whole argument check in one call, for the commonest arguments ------------------------------------------------
_FAST: dict[int, tuple[Any, Any]] = {}
_FAST_CLASSES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                              "boolean": (bool,), "null": (type(None),)}
"""The classes of the scalar values :func:`fast_check` takes for each property type (what ``_SCALARS`` accepts)."""


def fast_check(validator: Any) -> Any:
    """A one-call "certainly valid" test of a tool's arguments, made once per validator (so once per tool listing's
    schema), or ``None`` for schemas :func:`quick_check` does not cover or with a property of type ``object`` or
    ``array``: ``fn(arguments, max_bytes)`` is True only where the full check (:func:`~mcp_gym.spaces.errors.json_error`
    with ``max_bytes``, then :func:`quick_check`) finds nothing: a plain ``dict`` of ASCII string keys and scalar
    values (ASCII ``str``, ``int``, finite ``float``, ``bool``, ``None``), its JSON size bound (the one ``json_error``
    computes) within ``max_bytes``, each value of its property's type, the required keys present. ``False`` means
    "ask the full check", which finds the problem and its message."""
    entry = _FAST.get(id(validator))
    if entry is not None and entry[0] is validator:
        return entry[1]
    fn = _fast(getattr(validator, "schema", None))
    keep(_FAST, id(validator), (validator, fn), _COMPILED_MAX)
    return fn


def _fast(schema: Any) -> Any:
    plain = _plain_object(schema)
    if plain is None or not all(kind in _FAST_CLASSES for kind in plain[0].values()):
        return None
    allowed = {key: _FAST_CLASSES[kind] for key, kind in plain[0].items()}
    need, extra = plain[1], plain[2]

    def fast(arguments: dict[str, Any], max_bytes: int) -> bool:
        total = 2  # as json_error's _json_size_bound counts a dict
        for key, value in arguments.items():
            if key.__class__ is not str or not key.isascii():
                return False
            cls = value.__class__
            classes = allowed.get(key)
            if classes is None:
                if not extra:
                    return False
            elif cls not in classes:
                return False
            if cls is str:
                if not value.isascii():
                    return False
                total += 6 * len(key) + 6 + 6 * len(value) + 2
            elif cls is int:
                bits = value.bit_length()
                if bits > _MAX_INT_BITS:
                    return False
                total += 6 * len(key) + 6 + bits // 3 + 2
            elif cls is bool or value is None:
                total += 6 * len(key) + 6 + 5
            elif cls is float and value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
                total += 6 * len(key) + 6 + 24
            else:
                return False
        if total > max_bytes:
            return False
        for key in need:  # noqa: SIM110 - every step asks: a loop, not all()'s generator
            if key not in arguments:
                return False
        return True

    return fast


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
