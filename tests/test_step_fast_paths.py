"""The fast paths of a step (issue 40: stdio ``env.step`` close to the hand-written floor): each answers only where
the full check surely agrees, and everything else still gets the full check and its error. Counted, never timed."""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import mcp.types as mt
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


def test_only_a_result_with_nothing_to_check_skips_the_output_check() -> None:
    """``nothing_to_check`` lets a step skip awaiting ``check_output`` only for an error result or a listed tool
    without an output schema; a tool with one (or one mcp-gym did not list) is still checked, with the SDK's error."""
    from mcp_gym._compat.mcp_output import check_output, nothing_to_check, remember_output_schemas
    from mcp_gym.spaces._compile import _compile as compile_schema

    class Session:  # (a key of the weak store: any object the SDK's session would be)
        pass

    session = Session()
    schema = {"type": "object", "properties": {"y": {"type": "integer"}}, "required": ["y"]}
    tools = [mt.Tool(name="plain", input_schema={"type": "object"}),
             mt.Tool(name="typed", input_schema={"type": "object"}, output_schema=schema)]
    remember_output_schemas(session, tools, {"typed": compile_schema(schema)})
    text = [mt.TextContent(type="text", text="hi")]
    bad = mt.CallToolResult(content=text, structured_content={"y": "no"})
    assert nothing_to_check(session, "plain", mt.CallToolResult(content=text))
    assert nothing_to_check(session, "typed", mt.CallToolResult(content=text, is_error=True))
    assert not nothing_to_check(session, "typed", bad)
    assert not nothing_to_check(session, "unlisted", mt.CallToolResult(content=text))
    assert not nothing_to_check(Session(), "plain", mt.CallToolResult(content=text))  # no listing of that session
    with pytest.raises(RuntimeError, match="Invalid structured content returned by tool typed"):
        asyncio.run(check_output(session, "typed", bad, sdk_checked=False))


def test_a_request_line_is_written_at_once_and_a_full_pipe_is_waited_for() -> None:
    """The lane writes a request line without awaiting (``_Stdin.write`` is True) while the pipe has room; once the
    transport's queue is over its high-water mark it says so (False) and ``drain`` waits until the reader makes room
    (a real pipe; every wait bounded)."""
    from mcp_gym.client._stdio_pipes import _Stdin

    async def main() -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        stdin = _Stdin()
        transport, _ = await loop.connect_write_pipe(lambda: stdin, open(write_fd, "wb", buffering=0))  # noqa: SIM115 - the transport closes it
        try:
            assert stdin.write(b"x\n") is True
            assert os.read(read_fd, 10) == b"x\n"
            assert stdin.write(b"y" * (1 << 20)) is False  # more than the pipe holds: the rest is queued
            drained = asyncio.ensure_future(stdin.drain())
            await asyncio.sleep(0.05)
            assert not drained.done()  # nothing read: no room yet
            os.set_blocking(read_fd, False)
            got = 0
            for _ in range(10_000):  # (bounded: 1 MB read 64 kB at a time, or waits of 1 ms)
                if drained.done():
                    break
                try:
                    got += len(os.read(read_fd, 1 << 16))
                except BlockingIOError:
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0)
            await asyncio.wait_for(drained, 10)
            assert got > 0
        finally:
            transport.close()
            os.close(read_fd)

    asyncio.run(main())


PLAIN = [{"content": [{"type": "text", "text": "hi"}]},
         {"content": [{"type": "text", "text": ""}] * 3, "isError": True},
         {"content": [{"type": "text", "text": "é"}], "isError": False}]
NOT_PLAIN = [
    {"content": []},  # (no blocks: the whole way, which accepts it)
    {"content": [{"type": "text", "text": 5}]},
    {"content": [{"type": "text", "text": "hi", "annotations": {"priority": "high"}}]},
    {"content": [{"type": "text", "text": "hi"}], "isError": 1},
    {"content": [{"type": "text", "text": "hi"}], "isError": None},
    {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}},
    {"content": [{"type": "text", "text": "hi"}], "_meta": "m"},
    {"content": [{"type": "text", "text": "hi"}], "ttlMs": -5},
    {"content": [{"type": "text", "text": "hi"}], "requestState": "s1"},
    {"content": [{"type": "text", "text": "hi"}], "resultType": 7},
    {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]},
    {"content": ({"type": "text", "text": "hi"},)},
    {"content": "hi"},
    {"isError": False},
]


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "2026-07-28"])
def test_only_the_plainest_tool_result_skips_the_version_checks(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A result of text blocks (and ``isError``) goes straight to ``CallToolResult``'s validation, where that is all
    the whole way would do; every other shape still takes the whole way (the version's schema, later fields, the
    union), with its own error. Same models, fields set and dumps either way."""
    import mcp_gym._compat.mcp_wire as mw
    from mcp_gym._compat import mcp_surface

    class Session:
        protocol_version = version

    asked = [0]
    quick = mcp_surface.quick_surface

    def counting(method: str, v: str) -> Any:
        asked[0] += 1
        return quick(method, v)

    def outcome(raw: dict[str, Any]) -> Any:
        try:
            result = mw._checked(Session(), "tools/call", dict(raw), mw.CALL_TOOL_RESULT)
        except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception itself
            return f"{type(exc).__name__}: {exc}"
        return result, result.model_fields_set, result.model_dump(by_alias=True)

    mw._plain_text_ok.cache_clear()
    plain = mw._plain_text_ok(version)  # (2026-07-28 requires resultType in mcp 2.3: no plain result there)
    assert plain or version == "2026-07-28"  # the published revisions' results are plain
    for raw in PLAIN + NOT_PLAIN:
        monkeypatch.setattr(mcp_surface, "quick_surface", counting)
        asked[0] = 0
        fast = outcome(raw)
        took_fast_path = asked[0] == 0
        assert took_fast_path == (plain and raw in PLAIN), raw  # never for a shape it does not cover
        monkeypatch.setattr(mcp_surface, "quick_surface", quick)
        with monkeypatch.context() as m:
            m.setattr(mw, "_plain_text_ok", lambda v: False)  # the whole way, as before
            assert outcome(raw) == fast, raw


IDS: list[Any] = [1, 7, 0, -3, 2**80, True, False, None, "7", "07", " 7", "²", "x", "1" * 5_000, 7.0, [7], {"a": 7}]


def test_an_answers_int_id_is_its_own_key_and_every_other_id_is_read_as_before() -> None:
    """``answer_of`` takes an ``int`` id as its key without ``request_key``'s call; every other id (a bool, a string
    of digits, a hostile string, a float) still goes through ``request_key``: the verdict is the one
    ``request_key`` gives for every id and shape of answer."""
    from mcp_gym._compat import mcp_wire as mw

    def reference(obj: Any, waiting: dict[int, Any]) -> int | None:  # answer_of as it was: request_key for every id
        if type(obj) is not dict or "method" in obj:
            return None
        rid = mw.request_key(obj.get("id"))
        if rid is None or rid not in waiting:
            return None
        result, error = obj.get("result"), obj.get("error")
        ok = (type(result) is dict and error is None) or (
            result is None and type(error) is dict and type(error.get("code")) is int
            and type(error.get("message")) is str)
        return rid if ok else None

    waiting = {1: None, 7: None, 0: None, -3: None, 2**80: None}
    bodies: list[dict[str, Any]] = [{"result": {}}, {"error": {"code": 1, "message": "m"}}, {"result": 1},
                                    {"result": {}, "method": "x"}, {}]
    taken = 0
    for rid, body in itertools.product(IDS, bodies):
        obj = {"jsonrpc": "2.0", "id": rid, **body}
        assert mw.answer_of(obj, waiting) == reference(obj, waiting), obj
        taken += mw.answer_of(obj, waiting) is not None
    assert taken > 0
    assert mw.answer_of({"id": True, "result": {}}, {1: None}) is None  # (True == 1, but no request has it)


def test_a_line_is_counted_for_its_nesting_only_when_it_could_be_too_deep() -> None:
    """``take_line`` counts brackets only in a line longer than the nesting bound (a shorter one cannot hold more
    brackets than it has bytes); a long line nested past the bound is still left to the usual path."""
    from mcp_gym._compat import mcp_wire as mw

    async def main() -> None:
        wire = mw.Wire()
        fut = asyncio.get_running_loop().create_future()
        wire.waiting[5] = fut
        deep = b'{"jsonrpc":"2.0","id":5,"result":{"x":' + b"[" * 200 + b"]" * 200 + b"}}"
        assert not wire.take_line(deep) and not fut.done()  # past the bound: the usual path decides
        shallow = b'{"jsonrpc":"2.0","id":5,"result":{"x":' + b"[" * 100 + b"]" * 100 + b"}}"
        assert len(shallow) > mw._NESTING and wire.take_line(shallow)  # long, but within the bound
        assert fut.done() and fut.result()["id"] == 5
        wire.waiting[6] = asyncio.get_running_loop().create_future()
        short = b'{"jsonrpc":"2.0","id":6,"result":{}}'
        assert len(short) <= mw._NESTING and wire.take_line(short) and wire.waiting[6].result()["result"] == {}

    asyncio.run(main())


def test_requests_due_after_the_timer_share_it_and_each_still_times_out() -> None:
    """A request whose due time is after the lane's one timer only records it (no timer of its own); one due
    earlier moves the timer; each request still fails with ``TimeoutError`` when its time has passed (bounded)."""
    from mcp_gym._compat import mcp_wire as mw

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wire = mw.Wire()
        wire.loop, wire.send = loop, lambda line: True
        first = asyncio.ensure_future(wire.exchange(1, b"{}", {}, 0.2, "tools/call"))
        await asyncio.sleep(0)
        timer = wire._watch
        assert timer is not None and wire._watch_when == timer.when()
        later = asyncio.ensure_future(wire.exchange(2, b"{}", {}, 0.4, "tools/call"))
        await asyncio.sleep(0)
        assert wire._watch is timer  # due after the timer: no timer of its own
        sooner = asyncio.ensure_future(wire.exchange(3, b"{}", {}, 0.01, "tools/call"))
        await asyncio.sleep(0)
        assert wire._watch is not timer and wire._watch_when == wire._watch.when() < timer.when()  # moved
        for fut in (sooner, first, later):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(fut, 30)
        assert wire._watch is None and wire._watch_when == float("inf") and not wire._due

    asyncio.run(main())


def test_a_loop_with_its_own_create_future_makes_the_lanes_futures() -> None:
    """The lane makes its request's future as the base event loop would (``asyncio.Future``) only on a loop whose
    ``create_future`` is the base one; a loop with its own (uvloop, a subclass) is asked."""
    from mcp_gym._compat import mcp_wire as mw

    class Mine(asyncio.Future):  # type: ignore[type-arg]
        pass

    class Loop(asyncio.SelectorEventLoop):
        def create_future(self) -> asyncio.Future[Any]:
            return Mine(loop=self)

    made: list[type] = []

    async def main() -> None:
        wire = mw.Wire()
        wire.loop = asyncio.get_running_loop()

        def send(line: bytes) -> bool:
            made.extend(type(f) for f in wire.waiting.values())
            wire.waiting[1].set_result({"jsonrpc": "2.0", "id": 1, "result": {}})
            return True

        wire.send = send
        assert await wire.exchange(1, b"{}", {}, None, "tools/call") == {"jsonrpc": "2.0", "id": 1, "result": {}}

    asyncio.run(main())
    loop = Loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert made == [asyncio.Future, Mine]


def test_a_tool_schema_is_checked_once_by_the_listing_and_the_action_space(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing's check of a tool's schema and the action space's compile of it share one ``check_schema`` per
    schema (by its canonical JSON); a schema that fails is checked, and refused with the same reason, every time."""
    import uuid

    from mcp_gym import _schema
    from mcp_gym.client._tools import schema_problem

    good = {"type": "object", "title": uuid.uuid4().hex, "properties": {"a": {"type": "string"}}}
    bad = {"type": "object", "title": uuid.uuid4().hex, "properties": {"a": {"type": 5}}}
    cls = _schema.validator_class(good)
    check = cls.check_schema
    calls: list[str] = []
    monkeypatch.setattr(cls, "check_schema", staticmethod(lambda s: calls.append(s["title"]) or check(s)))
    assert schema_problem(good) is None
    _compile(good, "t")
    assert schema_problem(dict(good)) is None  # the same schema again (another dict): no second check
    assert calls == [good["title"]]
    reasons = {schema_problem(bad) for _ in range(2)}
    assert len(reasons) == 1 and "not a valid JSON Schema" in str(next(iter(reasons)))
    with pytest.warns(UserWarning, match="invalid JSON Schema"):
        _compile(bad, "t")
    assert calls == [good["title"]] + [bad["title"]] * 3
