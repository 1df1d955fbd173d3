"""The compatibility modules (mcp_gym._compat): each private name of a dependency is still there and does its job,
and when one goes, the run goes on as documented and says so once."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator

import anyio
import mcp.client.session as sdk_session
import mcp.types as mt
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer

import mcp_gym._compat
from mcp_gym._compat import CompatWarning, mcp_output, mcp_surface, mcp_wire
from mcp_gym._compat import mcp as mcp_compat
from mcp_gym._compat import stdlib as stdlib_compat
from mcp_gym._compat import uvicorn as uvicorn_compat
from mcp_gym._compat import verl as verl_compat


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the once-only warnings afresh."""
    monkeypatch.setattr(mcp_gym._compat, "_warned", set())
    yield


# -- every private name is still there (these fail naming what moved when a dependency update drops one) --------------
@pytest.mark.parametrize("module", [mcp_compat, mcp_wire, mcp_output, stdlib_compat,
                                    verl_compat, uvicorn_compat],
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


def test_the_session_needs_no_private_name_for_a_raw_listing() -> None:
    """``ClientSession._dispatcher`` and ``._stamp`` are given up: a raw ``tools/list`` is the lanes' own request
    (``tests/test_lane_owner.py``), elsewhere the session's public ``send_request``; nothing in ``_compat`` offers
    them any longer."""
    assert not hasattr(mcp_compat, "raw_sender") and not hasattr(mcp_compat, "stamp")
    anyio.run(public_listing)


async def public_listing() -> None:
    async with Client(server(), cache=None) as client:
        page = await client.session.send_request(mt.ListToolsRequest(params=mt.PaginatedRequestParams()),
                                                 mt.ListToolsResult)
        assert [t.name for t in page.tools] == ["double"]


def test_discover_timeout_is_the_sdk_global(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS", sdk_session.DISCOVER_TIMEOUT_SECONDS)
    mcp_compat.set_discover_timeout(1.25)
    assert sdk_session.DISCOVER_TIMEOUT_SECONDS == 1.25


def test_page_shell_drops_later_fields_and_clamps_ttl() -> None:
    shell = mcp_surface.page_shell({"ttlMs": -5, "nextCursor": "c"}, "tools/list", "2025-06-18")
    assert shell == {"nextCursor": "c"}  # ttlMs belongs to the 2026-07-28 revision
    assert mcp_surface.page_shell({"ttlMs": -5}, "tools/list", "2026-07-28") == {"ttlMs": 0}
    for method, version in (("tools/list", "2025-06-18"), ("tools/call", "2024-11-05"), ("resources/read",
                                                                                            "2025-11-25")):
        # the SDK's own (private) answer, read by the test only: the lane's public redo agrees
        assert mcp_surface.later_fields(method, version) == sdk_session._later_revision_fields(method, version)


def test_default_http_timeouts_are_the_sdks() -> None:
    from mcp.shared import _httpx_utils  # the SDK's (private) defaults, read by the test only

    from mcp_gym.client import _http

    assert (_http.DEFAULT_TIMEOUT, _http.DEFAULT_SSE_READ_TIMEOUT) == (
        _httpx_utils.MCP_DEFAULT_TIMEOUT, _httpx_utils.MCP_DEFAULT_SSE_READ_TIMEOUT), "the SDK changed its timeouts"


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
    monkeypatch.delattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS")
    first = warned(mcp_compat.set_discover_timeout, 3.0)
    assert len(first) == 1 and "mcp.client.session.DISCOVER_TIMEOUT_SECONDS is gone from mcp " in first[0]
    assert warned(mcp_compat.set_discover_timeout, 3.0) == []  # once
    assert not hasattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS")  # not created behind the SDK's back
    assert mcp_compat.missing() == ["mcp.client.session.DISCOVER_TIMEOUT_SECONDS"]


def test_a_python_without_the_c_encoder_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    messages = warned(stdlib_compat.c_json_encoders, str)
    assert len(messages) == 1 and "json.encoder.c_make_encoder is gone from Python 3." in messages[0]
    assert stdlib_compat.missing() == ["json.encoder.c_make_encoder"]


def stdio_client() -> Client:
    """The SDK's client of a real bundled server over stdio (the fast lane serves stdio connections)."""
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "mcp_gym.servers.counter"]))


def test_the_stdio_lane_uses_no_private_name_of_the_sdk() -> None:
    """The fast lane speaks JSON-RPC itself (its own ids, read loop, progress, courtesy cancel, the result checked
    with the SDK's public types): nothing of the SDK's it needs can move, except the input-request driver, listed
    in ``mcp_gym._compat.mcp`` (and checked by ``test_no_private_name_moved``)."""
    assert mcp_wire.missing() == []
    assert hasattr(Client, "_drive_input_required")


def test_a_moved_input_request_driver_says_what_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A result asking for input, on an SDK without its driver: a one-line error naming the name (nothing else)."""
    monkeypatch.delattr(Client, "_drive_input_required")
    assert "mcp.Client._drive_input_required" in mcp_compat.missing()
    first = mt.InputRequiredResult(request_state="s")

    async def again(r: object, s: object) -> object:
        raise AssertionError("not sent again")

    async def main() -> None:
        async with stdio_client() as client:
            with pytest.raises(RuntimeError, match=r"has no Client\._drive_input_required"):
                await mcp_compat.drive_input_required(client, first, again)
            plain = mt.CallToolResult(content=[])
            assert await mcp_compat.drive_input_required(client, plain, again) is plain
    anyio.run(main)


def test_uvicorns_check_sees_an_attribute_its_protocol_no_longer_sets() -> None:
    """``missing()`` reads uvicorn's own classes: an attribute their code never sets (``self.x = ...``, annotated or
    not) is named, a comparison or another object's attribute is not a setting; the guard's class is uvicorn's."""
    import inspect

    from uvicorn.protocols.http import h11_impl
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    source = "self.cycle: Cycle = None\nself.loop == loop\nother.more_body = False\n"
    assert uvicorn_compat.absent(source, ("cycle", "loop", "more_body")) == ["loop", "more_body"]
    assert uvicorn_compat.absent(inspect.getsource(h11_impl.H11Protocol), ("cycle", "gone")) == ["gone"]
    assert uvicorn_compat.guarded_protocol(1.0, 2).__mro__[1] is AutoHTTPProtocol
