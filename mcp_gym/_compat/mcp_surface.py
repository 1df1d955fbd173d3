"""The negotiated protocol version's schema of a server's result, as the SDK's session applies it (``mcp_types``'
public tables): the adapter that checks a result, the fields of later revisions that are dropped first, a negative
``ttlMs`` clamped, and a check in Python, without pydantic, for the results of the plainest shapes (a tool's text
result), which answers True only where the schema surely accepts. Used by the fast lanes (:mod:`.mcp_wire`) and the
tool listing."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any, cast, get_args

from mcp_types.methods import SERVER_RESULTS
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

__all__ = ["surface", "later_fields", "clamp_ttl", "page_shell", "quick_surface"]


@functools.cache
def surface(method: str, version: str) -> Any:
    """The adapter checking a ``method`` result against protocol ``version``'s schema (``None``: none), as
    ``mcp_types.methods.validate_server_result`` checks it."""
    if version not in KNOWN_PROTOCOL_VERSIONS:
        raise ValueError(f"unknown protocol version {version!r}")
    row = SERVER_RESULTS.get((method, version))
    return None if row is None else TypeAdapter(cast(Any, row))  # a model or a union of models (typed per version)


def _wire_fields(row: Any) -> frozenset[str]:
    """The top-level keys a result type declares (its members', for a union)."""
    members = get_args(row) if isinstance(row, types.UnionType) else (row,)
    return frozenset(f.alias or n for m in members for n, f in getattr(m, "model_fields", {}).items())


@functools.cache
def later_fields(method: str, version: str) -> frozenset[str]:
    """Result keys a revision newer than ``version`` declares for ``method`` and ``version`` does not: outside the
    negotiated contract, dropped before the version-free model reads the result (as the SDK's session does)."""
    current = SERVER_RESULTS.get((method, version))
    if current is None or version not in KNOWN_PROTOCOL_VERSIONS:
        return frozenset()
    later: set[str] = set()
    for revision in KNOWN_PROTOCOL_VERSIONS[KNOWN_PROTOCOL_VERSIONS.index(version) + 1:]:
        row = SERVER_RESULTS.get((method, revision))
        if row is not None:
            later |= _wire_fields(row)
    return frozenset(later) - _wire_fields(current)


def clamp_ttl(raw: dict[str, Any]) -> None:
    """A negative ``ttlMs`` read as 0 (2026-07-28 caching: a client SHOULD), as the SDK's session does."""
    ttl = raw.get("ttlMs")
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl < 0:
        raw["ttlMs"] = 0


def page_shell(shell: Mapping[str, Any], method: str, version: str | None) -> dict[str, Any]:
    """A raw result's top-level fields (``tools`` excluded) as the SDK sees them before validating: fields of later
    protocol revisions than ``version`` dropped, a negative ``ttlMs`` clamped to 0."""
    out = dict(shell)
    if version is not None:
        foreign = later_fields(method, version)
        out = {k: v for k, v in out.items() if k not in foreign}
    clamp_ttl(out)
    return out


# -- the negotiated version's schema, checked without pydantic for results of the plainest shape -------------------
_SIMPLE: dict[str, Callable[[Any], bool]] = {
    "<class 'str'>": lambda v: type(v) is str,
    "bool | None": lambda v: v is None or type(v) is bool,
    "dict[str, typing.Any] | None": lambda v: v is None or type(v) is dict,  # JSON: its keys are strings
    "typing.Any | None": lambda v: True,
}
"""Field annotations (as ``repr``) whose values a check in Python accepts only where pydantic surely does too."""


def _plain_fields(model: Any) -> dict[str, tuple[Any, bool]] | None:
    """``{alias: (annotation, required)}`` of a pydantic model that validates no more than its fields' types (no
    validators, not strict), else ``None``."""
    decorators = getattr(model, "__pydantic_decorators__", None)
    fields = getattr(model, "model_fields", None)
    if decorators is None or fields is None or getattr(model, "model_config", {}).get("strict") or any(
            (decorators.validators, decorators.field_validators, decorators.root_validators,
             decorators.model_validators)):
        return None
    return {f.alias or n: (f.annotation, f.is_required()) for n, f in fields.items()}


def _text_blocks(annotation: Any) -> bool:
    """Whether ``annotation`` is a list of a union whose first member is a text block: ``{"type": "text", "text":
    str}`` required, everything else optional."""
    args = get_args(annotation)
    if getattr(annotation, "__origin__", None) is not list or len(args) != 1:
        return False
    fields = _plain_fields((get_args(args[0]) or args)[0])
    if fields is None or repr(fields.get("type")) != "(typing.Literal['text'], True)" or \
            fields.get("text") != (str, True):
        return False
    return not any(required for alias, (_, required) in fields.items() if alias not in ("type", "text"))


def _open_object(annotation: Any) -> bool:
    """Whether ``annotation`` is an optional model that takes any JSON object: extra keys allowed, every field
    optional and of any type (2026-07-28's ``_meta``)."""
    args = get_args(annotation)
    if not isinstance(annotation, types.UnionType) or len(args) != 2 or type(None) not in args:
        return False
    model = next(a for a in args if a is not type(None))
    fields = _plain_fields(model)
    return fields is not None and getattr(model, "model_config", {}).get("extra") == "allow" and all(
        not required and repr(annotation) == "typing.Any | None" for annotation, required in fields.values())


def _text_list(value: Any) -> bool:
    if type(value) is not list:
        return False
    for block in value:
        if type(block) is not dict or len(block) != 2 or block.get("type") != "text" or \
                type(block.get("text")) is not str:
            return False
    return True


@functools.cache
def quick_surface(method: str, version: str) -> Callable[[dict[str, Any]], bool] | None:
    """For ``method``'s result under ``version``: a check that answers True only for results its schema accepts
    (then pydantic's check of them is not repeated): every key a field of a plain type (a string, an optional bool or
    object, an optional model open to any object, any JSON value, or text blocks only), every required field there.
    ``None``: no such check (the schema has validators, or a required field of another type)."""
    row = SERVER_RESULTS.get((method, version))
    members = get_args(row) if isinstance(row, types.UnionType) else (row,)
    fields = _plain_fields(members[0]) if members else None  # a union passes where its first member does
    if fields is None:
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for alias, (annotation, _) in fields.items():
        simple = _SIMPLE.get(repr(annotation))
        if simple is not None:
            checks[alias] = simple
        elif _text_blocks(annotation):
            checks[alias] = _text_list
        elif _open_object(annotation):
            checks[alias] = _SIMPLE["dict[str, typing.Any] | None"]
    required = frozenset(alias for alias, (_, req) in fields.items() if req)
    if not required <= checks.keys():
        return None

    def plain(raw: dict[str, Any]) -> bool:
        if not required.issubset(raw):
            return False
        for key, value in raw.items():
            check = checks.get(key)
            if check is None or not check(value):
                return False
        return True

    return plain
