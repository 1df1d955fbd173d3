"""A ``tools/call`` result's content blocks validated by their ``type``: the SDK's ``CallToolResult`` declares its
content as a plain union of five block models, which pydantic tries member by member for every block (2.5 µs a text
block); a union told apart by ``type`` gives the same models at a quarter of that. Public names of the SDK and
pydantic only (nothing here can move on an upgrade: a content union of another shape is just not tagged)."""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any, Literal, cast, get_args, get_origin

import mcp.types as mt
from pydantic import Field, TypeAdapter, ValidationError

__all__ = ["tagged_blocks", "call_tool_result", "plain_text", "CALL_BLOCKS"]


def tagged_blocks(model: Any) -> Any:
    """The validator of ``model``'s ``content`` list (a union of content blocks, each with its own ``type``
    literal) told apart by ``type``, or ``None`` when the union is not one of that shape. A block dict can only
    validate as the member its ``type`` names, so the result is what the plain union gives, without trying each
    member; what it refuses is validated the union's way (whose error is the SDK's)."""
    field = getattr(model, "model_fields", {}).get("content")
    annotation = field.annotation if field is not None else None
    if get_origin(annotation) is not list:
        return None
    members = get_args(get_args(annotation)[0])
    tags = []
    for member in members:
        kind = getattr(member, "model_fields", {}).get("type")
        literal = kind.annotation if kind is not None else None
        if get_origin(literal) is not Literal or len(get_args(literal)) != 1:
            return None  # (a block without "type" fails the tagged union and is then validated the union's way)
        tags.append(get_args(literal)[0])
    if len(members) < 2 or len(set(tags)) != len(tags):
        return None
    union = functools.reduce(operator.or_, members)
    return TypeAdapter(cast(Any, list)[cast(Any, Annotated)[union, Field(discriminator="type")]]).validator


CALL_BLOCKS = tagged_blocks(mt.CallToolResult)
"""The tagged validator of ``CallToolResult.content`` (``None``: the SDK's union is not of that shape)."""


def call_tool_result(arm: Any, raw: dict[str, Any]) -> Any:
    """``arm`` (``CallToolResult``'s validator) on ``raw``, its content blocks validated by :data:`CALL_BLOCKS` and
    set on the model; ``None``: not that shape, or not valid so (the caller's validation decides)."""
    content = raw.get("content")
    if CALL_BLOCKS is None or type(content) is not list or not content:
        return None
    try:
        blocks = CALL_BLOCKS.validate_python(content, by_name=False)
        result = arm.validate_python({**raw, "content": []}, by_name=False)
    except ValidationError:
        return None
    if _PLAIN_SET:
        result.__dict__["content"] = blocks  # what pydantic's __setattr__ does here ("content" is already set)
    else:  # pragma: no cover - a later SDK's model that validates or freezes assignments
        result.content = blocks
    return result


_PLAIN_SET = not mt.CallToolResult.model_config.get("validate_assignment") and \
    not mt.CallToolResult.model_config.get("frozen") and "content" not in mt.CallToolResult.__private_attributes__
"""Whether setting a ``CallToolResult``'s ``content`` only stores it (no validation, not frozen)."""



def plain_text(raw: dict[str, Any]) -> bool:
    """Whether ``raw`` is a tool's plainest result: ``{"content": [text blocks], "isError": bool}`` (``isError``
    optional), each block exactly ``{"type": "text", "text": str}``, nothing else (the lane's fast path,
    ``mcp_wire._checked``)."""
    n = len(raw)
    if n == 2:
        if raw.get("isError").__class__ is not bool:
            return False
    elif n != 1:
        return False
    content = raw.get("content")
    if content.__class__ is not list:
        return False
    for block in content:
        if block.__class__ is not dict or len(block) != 2 or block.get("type") != "text" or \
                block.get("text").__class__ is not str:
            return False
    return True
