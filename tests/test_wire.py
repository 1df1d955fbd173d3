"""The stdio fast lane for ``tools/call`` (``mcp_gym/_compat/mcp_wire.py``), on a real Counter server over stdio.

A step's request goes straight onto the pipe and its answer straight back to the caller: no memory-object stream pair
per request (the SDK's dispatcher makes one per request), concurrent calls on one session each get their own answer,
and what the SDK did around the call still happens (progress, timeouts with the session kept, a dead server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.streams import memory

from mcp_gym import MCPEnv, Stdio

STEPS = 10


pytestmark = pytest.mark.xdist_group("wire")  # one worker: the `env` fixture, a stdio server made once


def counter() -> Stdio:
    return Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")


@pytest.fixture(scope="module")
def env() -> Iterator[MCPEnv]:
    """One Counter server for the file: its tests only echo (nothing they check depends on the counter's state)."""
    e = MCPEnv({"c": counter()}, ["Move the counter."], max_steps=1000, call_timeout=30.0)
    e.reset(seed=0)
    try:
        yield e
    finally:
        e.close()


def test_stdio_steps_make_no_stream_objects_per_call(env, monkeypatch):
    env.step({"tool": "echo", "arguments": {"text": "warm"}})
    made = [0]
    init = memory._MemoryObjectStreamState.__init__

    def counting(self: Any, *args: Any, **kw: Any) -> None:
        made[0] += 1
        init(self, *args, **kw)

    monkeypatch.setattr(memory._MemoryObjectStreamState, "__init__", counting)
    for i in range(STEPS):
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": f"hi {i}"}})
        assert info["error"] is None and f"hi {i}" in obs["result"], info
    assert made[0] == 0, f"{made[0]} memory-object streams made for {STEPS} steps"


def test_concurrent_calls_on_one_stdio_session_get_their_own_answers(env):
    host = env.host

    async def calls() -> list[Any]:
        return await asyncio.gather(*(host.call("echo", {"text": f"call {i}"}, timeout=30.0) for i in range(16)))

    outs = env._rt.call(calls)
    for i, out in enumerate(outs):
        assert out.error is None, out.error
        assert out.result.content[0].text == f"call {i}"


def test_progress_timeout_and_a_dead_server_as_before():
    env = MCPEnv({"c": counter()}, ["Move the counter."], max_steps=1000, call_timeout=60.0)  # a bound on hangs
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "slow", "arguments": {"seconds": 0.3}})
        assert info["error"] is None and len(info["progress"]) >= 3, info
        assert info["progress"][-1]["progress"] == info["progress"][-1]["total"], info["progress"]
        env.call_timeout = 0.5  # a bound that must expire (the 10 s call), short; the other calls keep 60 s
        _, _, _, _, info = env.step({"tool": "slow", "arguments": {"seconds": 10}})
        env.call_timeout = 60.0
        assert info["error"]["kind"] == "timeout" and "no result within 0.5 s" in info["error"]["message"], info
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "still here"}})
        assert info["error"] is None and "still here" in obs["result"], info
        _, _, _, _, info = env.step({"tool": "crash", "arguments": {}})
        assert info["error"]["kind"] == "server_dead", info
    finally:
        env.close()


SCHEMAS = [
    {"type": "object", "properties": {"text": {"type": "string", "description": "d"}}, "required": ["text"]},
    {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"}},
     "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"},
    {"type": "object", "properties": {"n": {"type": "integer"}}, "$schema": "http://json-schema.org/draft-04/schema#"},
    {"type": "object", "properties": {"o": {"type": "object"}, "a": {"type": "array"}, "z": {"type": "null"}}},
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 3}}},  # not plain: jsonschema only
    {"type": "object", "properties": {"s": {"type": ["string", "null"]}}},  # not plain: jsonschema only
]
VALUES = ["hi", "", 1, 1.0, 2.5, True, False, None, {}, {"k": 1}, [], [1]]  # (NaN is refused before the schema)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_quick_argument_check_agrees_with_jsonschema(schema):
    """Plainly typed schemas are checked once compiled, without jsonschema, when the arguments are valid: "valid"
    from the quick check is exactly jsonschema's verdict (anything else goes to jsonschema for the message)."""
    from mcp_gym.spaces import ToolCallSpace
    from mcp_gym.spaces._compile import _compile, quick_check

    validator = _compile(schema)
    quick = quick_check(validator)
    plain = "minLength" not in str(schema) and "[" not in str(schema["properties"])
    assert (quick is not None) == plain
    space = ToolCallSpace({"t": schema})
    keys = list(schema["properties"]) + ["extra"]
    for key in keys:
        for value in VALUES:
            for arguments in ({key: value}, {**{k: "x" for k in keys[:1]}, key: value}, {}):
                expected = validator.is_valid(arguments)
                if quick is not None and quick(arguments):
                    assert expected, (schema, arguments)
                assert (space.validation_error({"tool": "t", "arguments": arguments}) is None) == expected, \
                    (schema, arguments)
