"""The output-schema check of ``tools/call`` results, done by mcp-gym on every path (the fast lanes and the SDK's own
``Client.call_tool``) with the SDK's public API only; see :mod:`mcp_gym._compat` (it lives here, beside the lane that
uses it, and reaches no private name).

The SDK checks a result against the output schema its session recorded from the last listing, with a validator it
compiles per session on the tool's first call (the metaschema check alone is ~5 ms of CPU, per session and tool: at
1,000 sessions that is seconds). mcp-gym hands the session its checked listing without the output schemas
(:func:`mcp_gym.client._tools.hand_to_session`) and checks results here instead, with the validator it compiled once
per tool definition while checking the listing (bounded ``pattern`` matching, shared by every session), giving the
SDK's messages.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import mcp.types as mt
from jsonschema.exceptions import best_match
from referencing.exceptions import Unresolvable

from mcp_gym._compat.stdlib import own_task

__all__ = ["OUTPUT_SCHEMAS", "remember_output_schemas", "check_output", "nothing_to_check", "missing"]


def missing() -> list[str]:
    """The private names used here: none."""
    return []


OUTPUT_SCHEMAS: weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Any]]] = weakref.WeakKeyDictionary()
"""By SDK session: each tool of mcp-gym's last checked listing, with its ``outputSchema`` and that schema's compiled
validator (``(None, None)``: no output schema). mcp-gym checks ``tools/call`` results against them itself
(:func:`check_output`); the session was handed these tools without their output schemas, so the SDK's own check of
a listed tool does nothing (:func:`mcp_gym.client._tools.hand_to_session`)."""


def remember_output_schemas(session: Any, tools: Iterable[mt.Tool], validators: Mapping[str, Any]) -> None:
    """Make ``tools`` (a complete checked listing) the ones whose results :func:`check_output` checks on
    ``session``; ``validators``: each output schema's compiled validator, by tool name."""
    OUTPUT_SCHEMAS[session] = {t.name: (t.output_schema, validators.get(t.name)) for t in tools}


def nothing_to_check(session: Any, name: str, result: mt.CallToolResult) -> bool:
    """Whether :func:`check_output` surely has nothing to do (a step need not await it): an error result, or a tool of
    mcp-gym's last checked listing without an output schema."""
    if result.is_error:
        return True
    tools = OUTPUT_SCHEMAS.get(session)
    entry = tools.get(name) if tools is not None else None
    return entry is not None and entry[0] is None


async def check_output(session: Any, name: str, result: mt.CallToolResult, *, sdk_checked: bool) -> None:
    """Check a successful ``tools/call`` result against the tool's listed output schema, as the SDK's
    ``validate_tool_result`` does (same errors), with the validator compiled when the listing was checked (bounded
    ``pattern`` matching, shared by every session listing the same definition). A tool mcp-gym did not list is left
    to the SDK's ``validate_tool_result`` (it lists the tools, then checks), unless it already ran
    (``sdk_checked``)."""
    if result.is_error:
        return
    tools = OUTPUT_SCHEMAS.get(session)
    entry = tools.get(name) if tools is not None else None
    if entry is None or (entry[0] is not None and entry[1] is None):
        if not sdk_checked:
            await own_task()  # the SDK's code: in the call's task (an inline step's first part has none)
            await session.validate_tool_result(name, result)
        return
    schema, validator = entry
    if schema is None:
        return
    if result.structured_content is None and "structured_content" not in result.model_fields_set:
        raise RuntimeError(f"Tool {name} has an output schema but did not return structured content")
    try:
        error = best_match(validator.iter_errors(result.structured_content))
    except Unresolvable as e:
        raise RuntimeError(f"Invalid schema for tool {name}: {e}") from e
    if error is not None:
        raise RuntimeError(f"Invalid structured content returned by tool {name}: {error}") from error
