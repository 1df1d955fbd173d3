"""The fast paths of a step (issue 40: stdio ``env.step`` close to the hand-written floor): each answers only where
the full check surely agrees, and everything else still gets the full check and its error. Counted, never timed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from mcp_gym.spaces import ToolCallSpace
from mcp_gym.spaces import _compile as compile_
from mcp_gym.spaces._compile import _compile, fast_check

SCHEMAS = [
    {"type": "object", "properties": {"text": {"type": "string", "description": "d"}}, "required": ["text"]},
    {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
                                      "z": {"type": "null"}}, "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "integer"}}, "$schema": "http://json-schema.org/draft-04/schema#"},
    {"type": "object"},
]
VALUES: list[Any] = ["hi", "", "é", "\ud800", "x" * 300, 1, -(2**70), 2**15_000, 1.0, 2.5, float("inf"), float("nan"),
                     True, False, None, {}, [], [1], {"k": 1}, b"x", (1,)]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_one_call_argument_check_passes_only_what_the_full_check_passes(schema: dict[str, Any]) -> None:
    """``fast_check`` says "valid" only where the full check (JSON, size bound, schema) finds nothing, and the space
    gives the full check's verdict and error for everything else: every pair of keys and values, under a byte limit
    that some of them exceed."""
    space = ToolCallSpace({"t": schema}, max_argument_bytes=1_000)
    fast = fast_check(space._validators["t"])
    assert fast is not None
    keys = [*schema.get("properties", {}), "extra", "é"]
    taken = 0
    seconds = [(k, v) for k in keys for v in ("hi", 1, 2.5, None, "x" * 300, [1])]
    for (k1, v1), (k2, v2) in itertools.product(itertools.product(keys, VALUES), seconds):
        for arguments in ({k1: v1}, {k1: v1, k2: v2}):
            full = space._validation_error({"tool": "t", "arguments": arguments})  # (the path without fast_check)
            if fast(arguments, space.max_argument_bytes):
                taken += 1
                assert full is None, (schema, arguments, full)
            assert space.validation_error({"tool": "t", "arguments": arguments}) == full, arguments
    assert taken > 0


@pytest.mark.parametrize(("arguments", "kind"), [
    ({"text": "x" * 600}, "too_large"),  # over max_argument_bytes
    ({"text": 5}, "invalid_arguments"),  # not the property's type
    ({"text": True}, "invalid_arguments"),
    ({}, "invalid_arguments"),  # a required key missing
    ({"text": "\ud800"}, "invalid_arguments"),  # a lone surrogate (not ASCII: the full check looks)
    ({"text": float("nan")}, "invalid_arguments"),
    ({"text": "hi", 5: "x"}, "invalid_arguments"),  # a key that is not a string
])
def test_arguments_the_fast_path_does_not_cover_get_the_full_check(arguments: dict[Any, Any], kind: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    space = ToolCallSpace({"t": SCHEMAS[0]}, max_argument_bytes=500)
    fast = fast_check(space._validators["t"])
    assert not fast(arguments, space.max_argument_bytes)
    error = space.validation_error({"tool": "t", "arguments": arguments})
    assert error is not None and error.kind == kind and error.tool == "t", error


def test_the_fast_path_is_taken_for_a_plain_action_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain ``{"tool", "arguments"}`` dict takes one call; a dict subclass, a third key, arguments left out or
    given as ``None`` take the full path (same verdicts)."""
    space = ToolCallSpace({"t": SCHEMAS[0]})
    calls = [0]
    real = compile_.fast_check

    def counting(validator: Any) -> Any:
        calls[0] += 1
        return real(validator)

    monkeypatch.setattr("mcp_gym.spaces.tool_call.fast_check", counting)
    assert space.validation_error({"tool": "t", "arguments": {"text": "hi"}}) is None
    assert calls[0] == 1

    class Action(dict):  # type: ignore[type-arg]
        pass

    assert space.validation_error(Action(tool="t", arguments={"text": "hi"})) is None
    assert space.validation_error({"tool": "t", "arguments": {"text": "hi"}, "x": 1}).kind == "malformed"
    assert space.validation_error({"tool": "t"}).kind == "invalid_arguments"  # text is required
    assert space.validation_error({"tool": "t", "arguments": None}).kind == "invalid_arguments"
    assert space.validation_error({"tool": "u", "arguments": {"text": "hi"}}).kind == "unknown_tool"
    assert calls[0] == 1


def test_schemas_beyond_plain_scalars_have_no_fast_path() -> None:
    for schema in ({"type": "object", "properties": {"o": {"type": "object"}}},
                   {"type": "object", "properties": {"a": {"type": "array"}}},
                   {"type": "object", "properties": {"s": {"type": "string", "minLength": 3}}},
                   {"type": "object", "properties": {"s": {"type": ["string", "null"]}}},
                   {"type": "object", "properties": {"s": {"type": "string"}}, "minProperties": 1}):
        assert fast_check(_compile(schema)) is None, schema
