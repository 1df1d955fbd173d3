"""Gymnasium spaces for MCP tool calls and free-form text.

* :class:`Utf8Text` -- any Python ``str`` (unlike ``gymnasium.spaces.Text``, which only contains strings made of its
  charset, so ``"hello world"``, ``""`` or non-ASCII text are rejected there).
* :class:`ToolCallSpace` -- the action space of an MCP server: an action is ``{"tool": name, "arguments": {...}}`` and
  is contained iff the tool exists and the arguments validate against the tool's ``inputSchema``.
* :func:`sample_from_schema` -- generate a random value valid under a JSON Schema (used by ``ToolCallSpace.sample``).

Validation uses :mod:`jsonschema` with the validator class chosen from each schema's ``$schema`` (default Draft
2020-12); one validator is compiled per tool when the catalogue is set and reused on every call. ``format`` is treated
as an annotation (the JSON Schema default), so e.g. a malformed ``date-time`` string is still contained.

Layout: :mod:`.text` (the text spaces), :mod:`.errors` (:class:`ActionError`, :func:`json_error`), :mod:`.tool_call`
(:class:`ToolCallSpace`), and private modules for the validator cache (``_compile``) and the schema sampler
(``_sampler``, ``_strings``).
"""

from __future__ import annotations

from mcp_gym.spaces.errors import MAX_ARGUMENT_DEPTH, ActionError, json_error
from mcp_gym.spaces.text import TextMapping, Utf8Text
from mcp_gym.spaces.tool_call import ToolCallSpace

__all__ = [
    "ActionError", "MAX_ARGUMENT_DEPTH", "TextMapping", "ToolCallSpace", "Utf8Text", "json_error",
]
