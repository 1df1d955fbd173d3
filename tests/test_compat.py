"""The compatibility modules (mcp_gym._compat): each private name of a dependency is still there and does its job,
and when one goes, the run goes on as documented and says so once."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator

import anyio
import httpx2
import mcp.client.session as sdk_session
import mcp.types as mt
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer

import mcp_gym._compat
from mcp_gym._compat import CompatWarning, mcp_wire
from mcp_gym._compat import anyio as anyio_compat
from mcp_gym._compat import httpx2 as httpx2_compat
from mcp_gym._compat import hydra as hydra_compat
from mcp_gym._compat import mcp as mcp_compat
from mcp_gym._compat import stdlib as stdlib_compat
from mcp_gym._compat import verl as verl_compat


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the once-only warnings afresh."""
    monkeypatch.setattr(mcp_gym._compat, "_warned", set())
    yield


# -- every private name is still there (these fail naming what moved when a dependency update drops one) --------------
@pytest.mark.parametrize("module", [mcp_compat, mcp_wire, anyio_compat, httpx2_compat, hydra_compat, stdlib_compat,
                                    verl_compat],
                         ids=lambda m: m.__name__)
def test_no_private_name_moved(module: object) -> None:
    assert module.missing() == [], f"{module.__name__}: these private names moved; update {module.__name__}"


def server() -> MCPServer:
    mcp = MCPServer("compat")

    @mcp.tool(structured_output=True)
    def double(x: int) -> dict[str, int]:
        """Twice x."""
        return {"y": 2 * x}

    return mcp


def test_session_private_names_work() -> None:
    anyio.run(session_private_names_work)


async def session_private_names_work() -> None:
    async with Client(server(), cache=None) as client:
        session = client.session
        assert mcp_compat.missing_on_session(session) == [], "ClientSession's private names moved"
        send = mcp_compat.raw_sender(session)
        assert send is not None
        request = mt.ListToolsRequest(params=mt.PaginatedRequestParams()).model_dump(by_alias=True, mode="json",
                                                                                     exclude_none=True)
        raw = await send("tools/list", request)
        assert isinstance(raw, dict) and [t["name"] for t in raw["tools"]] == ["double"]  # raw JSON, not a model
        result = mt.ListToolsResult.model_validate(raw)
        assert mcp_compat.absorb_tool_listing(session, result)
        marker = object()
        mcp_compat.seed_output_validators(session, result.tools, {"double": marker})
        assert session._tool_output_validators["double"] is marker  # the session's own cache holds it


def test_discover_timeout_is_the_sdk_global(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS", sdk_session.DISCOVER_TIMEOUT_SECONDS)
    mcp_compat.set_discover_timeout(1.25)
    assert sdk_session.DISCOVER_TIMEOUT_SECONDS == 1.25


def test_page_shell_drops_later_fields_and_clamps_ttl() -> None:
    shell = mcp_compat.page_shell({"ttlMs": -5, "nextCursor": "c"}, "tools/list", "2025-06-18")
    assert shell == {"nextCursor": "c"}  # ttlMs belongs to the 2026-07-28 revision
    assert mcp_compat.page_shell({"ttlMs": -5}, "tools/list", "2026-07-28") == {"ttlMs": 0}


def test_keepalive_expiry_reaches_the_pool() -> None:
    client = httpx2.AsyncClient(limits=httpx2.Limits(keepalive_expiry=5.0))
    httpx2_compat.set_keepalive_expiry(client, 42.0)
    assert client._transport._pool._keepalive_expiry == 42.0


def test_default_http_timeouts_are_the_sdks() -> None:
    assert mcp_compat.default_http_timeouts() == (30.0, 300.0)


def test_c_json_encoders_write_compact_json() -> None:
    encoders = stdlib_compat.c_json_encoders(lambda o: str(o))
    assert encoders is not None
    encode, escaped = encoders
    value = {"a": [1, 2.5, None, True], "é": "x\ud800"}
    assert "".join(encode(value, 0)) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert "".join(escaped(value, 0)) == json.dumps(value, separators=(",", ":"))


# -- a name that moved: the documented fallback, one warning naming it ------------------------------------------------
def warned(fn: object, *args: object) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [str(w.message) for w in caught if issubclass(w.category, CompatWarning)]


def test_a_moved_sdk_name_warns_once_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sdk_session, "_clamp_inbound_ttl")
    first = warned(mcp_compat.page_shell, {"ttlMs": -1}, "tools/list", None)
    assert len(first) == 1 and "mcp.client.session._clamp_inbound_ttl is gone from mcp " in first[0]
    assert warned(mcp_compat.page_shell, {"ttlMs": -1}, "tools/list", None) == []  # once
    monkeypatch.delattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS")
    assert len(warned(mcp_compat.set_discover_timeout, 3.0)) == 1
    assert not hasattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS")  # not created behind the SDK's back
    assert mcp_compat.missing() == ["mcp.client.session.DISCOVER_TIMEOUT_SECONDS",
                                    "mcp.client.session._clamp_inbound_ttl"]


def test_a_moved_session_name_warns_once() -> None:
    class Session:  # an SDK session without the private channel
        pass

    assert warned(mcp_compat.raw_sender, Session())[0].startswith("mcp-gym: ClientSession._dispatcher/_stamp is gone")
    assert mcp_compat.missing_on_session(Session()) == [
        "ClientSession._dispatcher", "ClientSession._stamp", "ClientSession._absorb_tool_listing",
        "ClientSession._tool_output_validators", "ClientSession._tool_output_schemas"]
    assert len(warned(mcp_compat.seed_output_validators, Session(), [], {})) == 1


def test_a_moved_pool_name_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    client = httpx2.AsyncClient()
    monkeypatch.delattr(client._transport, "_pool")
    assert len(warned(httpx2_compat.set_keepalive_expiry, client, 1.0)) == 1
    assert httpx2_compat.missing(client) == ["httpx2.AsyncHTTPTransport._pool"]


def test_a_moved_hydra_name_says_what_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    import hydra._internal.utils

    monkeypatch.delattr(hydra._internal.utils, "_run_hydra")
    assert hydra_compat.missing() == ["hydra._internal.utils._run_hydra"]
    with pytest.raises(RuntimeError, match=r"hydra-core 1\.\d+\.\d+: it has no hydra._internal.utils._run_hydra"):
        hydra_compat.run(None, None, print, "pkg://mcp_gym.conf", "config")


def test_a_python_without_the_c_encoder_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    messages = warned(stdlib_compat.c_json_encoders, str)
    assert len(messages) == 1 and "json.encoder.c_make_encoder is gone from Python 3." in messages[0]
    assert stdlib_compat.missing() == ["json.encoder.c_make_encoder"]


def stdio_client() -> Client:
    """The SDK's client of a real bundled server over stdio (the fast lane serves stdio connections)."""
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "mcp_gym.servers.counter"]))


def test_the_stdio_lane_names_are_on_a_stdio_session() -> None:
    async def main() -> None:
        async with stdio_client() as client:
            assert mcp_wire.missing_on(client) == [], "the stdio fast lane's Client/session/dispatcher names moved"
    anyio.run(main)


def test_the_stdio_lane_steps_aside_when_a_name_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session without one of the lane's names: the call takes the SDK's way, and says so once."""
    anyio.run(lane_steps_aside, monkeypatch)


async def lane_steps_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_wire, "_usable", {})
    async with stdio_client() as client:
        monkeypatch.delattr(client.session._dispatcher.__class__, "_cancel_outbound")
        with pytest.warns(CompatWarning, match="JSONRPCDispatcher._cancel_outbound"):
            assert not mcp_wire.usable(client)
        assert mcp_wire.missing_on(client) == ["JSONRPCDispatcher._cancel_outbound"]
        tools = {t.name for t in (await client.list_tools()).tools}
        name = sorted(tools - {"submit"})[0]
        result = await mcp_wire.call_tool(client, name, {}, wire=mcp_wire.Wire(), read_timeout_seconds=5,
                                          progress_callback=None, meta=None)
        assert isinstance(result, mt.CallToolResult)  # answered the SDK's way (an error result is fine too)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not mcp_wire.usable(client)  # said once


def test_anyio_stdin_writer_is_asyncios_stream_writer() -> None:
    async def main() -> None:
        async with await anyio.open_process(["cat"]) as process:
            assert isinstance(anyio_compat.stdin_writer(process.stdin), __import__("asyncio").StreamWriter)
            assert anyio_compat.stdin_writer(object()) is None
    anyio.run(main)
