"""Elicitation helpers: the requested schema's ``default`` values (SEP-1034) and a ready handler that accepts with them.

An elicitation (``elicitation/create``, form mode) asks the user for a flat object described by ``requested_schema``;
since MCP 2025-11-25 (SEP-1034) its properties may carry a ``default``. When an elicitation handler accepts with
partial content, :class:`~mcp_gym.client.host.MCPHost` (and so :class:`~mcp_gym.env.MCPEnv`) fills every omitted
property that has a default with it (:func:`with_defaults`) before answering the server; values the handler gave are
never overwritten.

:func:`accept_defaults` is an ``elicitation=`` handler for unattended runs: it accepts with the defaults, and declines
when a required property has none (a server must not receive an answer that misses a required value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["schema_defaults", "with_defaults", "accept_defaults"]


def _properties(schema: Mapping[str, Any] | None) -> Mapping[str, Any]:
    props = (schema or {}).get("properties")
    return props if isinstance(props, Mapping) else {}


def schema_defaults(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{property: default}`` for each property of an elicitation's ``requested_schema`` that declares a ``default``.

    >>> schema_defaults({"type": "object", "properties": {"name": {"type": "string", "default": "Ada"},
    ...                                                     "age": {"type": "integer"}}})
    {'name': 'Ada'}
    """
    return {str(name): prop["default"] for name, prop in _properties(schema).items()
            if isinstance(prop, Mapping) and "default" in prop}


def with_defaults(content: Mapping[str, Any] | None, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """``content`` with every property it omits filled from the schema's ``default`` (SEP-1034); given values win.

    >>> with_defaults({"age": 41}, {"properties": {"name": {"default": "Ada"}, "age": {"default": 30}}})
    {'name': 'Ada', 'age': 41}
    """
    return {**schema_defaults(schema), **dict(content or {})}


def accept_defaults(message: str, schema: Mapping[str, Any], params: Any = None) -> dict[str, Any] | None:
    """An ``elicitation=`` handler (:data:`~mcp_gym.client.host.ElicitationFn`) that accepts every form elicitation
    with the requested schema's defaults, or declines (``None``) when a required property has no default.

    >>> accept_defaults("Who are you?", {"properties": {"name": {"type": "string", "default": "Ada"}}})
    {'name': 'Ada'}
    >>> accept_defaults("Who are you?", {"properties": {"name": {"type": "string"}}, "required": ["name"]}) is None
    True
    """
    defaults = schema_defaults(schema)
    required = schema.get("required") or ()
    if any(name not in defaults for name in required):
        return None
    return defaults
