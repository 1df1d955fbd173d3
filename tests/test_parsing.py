"""The text-action layer: tool calls from model text in the common formats; never raises; round-trips its own output."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcp_gym.parsing import ToolCall, format_tool_calls, parse_message, parse_tool_calls, split_action

ADD = ToolCall("add", {"amount": 2})


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "add", "arguments": {"amount": 2}}\n</tool_call>',
        '<tool_call>{"name": "add", "arguments": {"amount": 2}}',  # stopped before the closing tag
        '{"name": "add", "arguments": {"amount": 2}}',
        'Let me add two. {"name": "add", "parameters": {"amount": 2}}',
        '```json\n{"tool": "add", "arguments": {"amount": 2}}\n```',
        '{"name": "add", "arguments": "{\\"amount\\": 2}"}',  # double-encoded arguments
        '[{"type": "function", "function": {"name": "add", "arguments": {"amount": 2}}}]',
        '{"tool_calls": [{"name": "add", "arguments": {"amount": 2}}]}',
        '<|python_tag|>{"name": "add", "parameters": {"amount": 2}}',
        '[TOOL_CALLS][{"name": "add", "arguments": {"amount": 2}}]',
    ],
)
def test_formats(text: str) -> None:
    r = parse_tool_calls(text)
    assert (r.status, r.calls) == ("ok", [ADD]), r
    assert r.raw_text == text


def test_several_calls_and_content() -> None:
    text = ('<think>count first</think>\n<tool_call>{"name": "get_count", "arguments": {}}</tool_call>\n'
            '<tool_call>{"name": "add", "arguments": {"amount": 2}}</tool_call>')
    r = parse_tool_calls(text)
    assert [c.name for c in r.calls] == ["get_count", "add"]
    assert r.content == "<think>count first</think>"


def test_a_closing_tag_inside_a_string_argument() -> None:
    r = parse_tool_calls('<tool_call>{"name": "echo", "arguments": {"text": "</tool_call>"}}</tool_call> done')
    assert r.calls == [ToolCall("echo", {"text": "</tool_call>"})] and r.content == "done"


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("The answer is 42.", "no_tool_call"),
        ("", "no_tool_call"),
        ('<tool_call>{"name": "add", "arguments": {"amount": </tool_call>', "invalid_json"),
        ('{"name": "add", "arguments": {"amount": 2}', "invalid_json"),
        ('<tool_call>{"arguments": {}}</tool_call>', "invalid_call"),
        ('{"name": "add", "arguments": [1, 2]}', "invalid_call"),
        ('{"name": "", "arguments": {}}', "invalid_call"),
        pytest.param("[" * 5000, "no_tool_call", id="deep-nesting"),
        ('The JSON {"a": 1} is not a call.', "no_tool_call"),
    ],
)
def test_failures_are_statuses(text: str, status: str) -> None:
    r = parse_tool_calls(text)
    assert r.status == status and not r.calls and r.error


def test_openai_message() -> None:
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"amount": 2}'}}]}
    r = parse_message(msg)
    assert r.ok and r.calls == [ToolCall("add", {"amount": 2}, "c1")]
    assert json.loads(r.raw_text) == msg["tool_calls"]
    bad = parse_message({"role": "assistant", "content": "hm", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{oops"}}]})
    assert bad.status == "invalid_call" and not bad.calls and bad.raw_text.startswith("hm\n")
    assert parse_message({"role": "assistant", "content": '<tool_call>{"name": "add", "arguments": {"amount": 2}}'
                          "</tool_call>"}).calls == [ADD]


def test_split_action() -> None:
    action = {"tool": "add", "arguments": {"amount": 1}, "raw_text": "x", "parse_status": "ok"}
    call, extras = split_action(action)
    assert call == {"tool": "add", "arguments": {"amount": 1}} and extras == {"raw_text": "x", "parse_status": "ok"}
    assert split_action({"tool": "add", "arguments": {}}) == ({"tool": "add", "arguments": {}}, {})


# -- property-based -------------------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
calls = st.builds(ToolCall, name=st.text(min_size=1, max_size=20),
                  arguments=st.dictionaries(st.text(max_size=10), json_values, max_size=4))
# Prose before the calls: anything but the markup and JSON brackets that would start another call.
prose = st.text(max_size=60).filter(lambda t: not any(m in t for m in ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
                                                                        "{", "[", "`")))


def test_markup_inside_a_bare_call_is_an_argument_and_a_broken_block_stays_broken() -> None:
    """A bare JSON call whose argument holds ``<tool_call>`` or a marker is that call (it read as a broken Hermes
    block: ``invalid_json``); a broken ``<tool_call>`` block stays ``invalid_json`` even when a call-shaped object
    decodes inside it (never the inner object as the call)."""
    r = parse_tool_calls('{"name": "echo", "arguments": {"text": "use <tool_call> and [TOOL_CALLS]"}}')
    assert (r.status, r.calls) == ("ok", [ToolCall("echo", {"text": "use <tool_call> and [TOOL_CALLS]"})]), r
    r = parse_tool_calls('<tool_call>{"name": "a", "arguments": {"name": "b", "arguments": {}}')
    assert (r.status, r.calls) == ("invalid_json", []), r
    r = parse_tool_calls('[TOOL_CALLS]{"name": "a", "arguments": {"x": {"name": "b", "arguments": {}}')
    assert (r.status, r.calls) == ("invalid_json", []), r


@settings(max_examples=100, deadline=None)
@given(st.lists(calls, min_size=1, max_size=3), prose, st.sampled_from(["hermes", "json"]))
@example([ToolCall("0", {"": ["<tool_call>"]})], "", "json")  # markup inside a bare call's JSON (a CI run's find)
@example([ToolCall("0", {"a": "[TOOL_CALLS]"}), ToolCall("<|python_tag|>", {})], "Two.", "json")
@example([ToolCall("0", {"a": "<tool_call>", "b": "</tool_call>"})], "", "hermes")
def test_round_trip(cs: list[ToolCall], content: str, style: str) -> None:
    r = parse_tool_calls(format_tool_calls(cs, content, style))  # type: ignore[arg-type]
    assert r.status == "ok"
    assert r.calls == cs
    assert r.content == content.strip()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300) | st.lists(st.sampled_from(['<tool_call>', '</tool_call>', '{"name": ', '"add"', ', ',
                                                          '"arguments": ', '{', '}', '[', ']', '"x"', '1', '```json\n',
                                                          '```', '<|python_tag|>', '[TOOL_CALLS]', ';', '\\', '"']),
                                         max_size=40).map("".join))
def test_never_raises(text: str) -> None:
    r = parse_tool_calls(text)
    assert r.status in ("ok", "no_tool_call", "invalid_json", "invalid_call")
    assert (r.status == "ok") == (bool(r.calls) and r.error is None)
    assert all(isinstance(c.name, str) and c.name and isinstance(c.arguments, dict) for c in r.calls)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["content", "tool_calls", "role"]), json_values))
def test_messages_never_raise(message: dict) -> None:
    assert parse_message(message).status in ("ok", "no_tool_call", "invalid_json", "invalid_call")
