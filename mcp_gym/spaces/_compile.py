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
