"""``tools/list`` fetched raw and checked tool by tool, so one bad tool definition costs only that tool.

The SDK validates a whole ``tools/list`` result at once (pydantic, against the negotiated protocol's schema): one tool
with an empty name, a missing or non-object ``inputSchema`` or a broken JSON Schema makes the whole listing fail, and
with it every tool of the server. Here the result is fetched without that validation where mcp-gym owns the wire: on the
session's fast lane (stdio, Streamable HTTP: mcp-gym's own JSON-RPC request, its own id, stamped as the session stamps
its requests). Where there is no lane (in-process and old-SSE servers, an HTTP session with ``auth=``, cookies or a
proxy), and over HTTP before the SDK has sent its session's first message after the handshake, the page comes
through the session's public ``send_request``, validated whole: there a tool the protocol schema refuses fails the
listing (:class:`ListingError` naming it), except that a lane, given the stamp by that request, fetches the page
again raw (one more request, only then). The page itself (``tools``
array, ``nextCursor``, ...) is checked, then each tool on its own: against the same protocol schema, plus what the
schema does not catch (a name that is empty, longer than :data:`MAX_TOOL_NAME`, not encodable or a duplicate; an
input or output schema that is not valid JSON Schema or loops on itself). Good tools are handed to the SDK session
through its public ``Client.list_tools``, served from the client's response-cache store (:class:`ListingHandOver`),
so the session sets itself up as after its own listing; bad ones come back as ``{"name", "reason"}``. ``tools/call``
results are checked against the listed output schemas by mcp-gym
(:func:`mcp_gym._compat.mcp_output.check_output`).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Collection, Mapping
from typing import Any, cast

import anyio
import mcp.types as mt
from jsonschema.exceptions import SchemaError
from mcp.client.caching import CacheConfig, CacheEntry, CacheKey
from pydantic import ValidationError

from mcp_gym import _schema
from mcp_gym._compat.mcp_output import remember_output_schemas
from mcp_gym._compat.mcp_surface import page_shell
from mcp_gym._compat.mcp_wire import Lane, StepAside, list_tools_raw
from mcp_gym._memo import BoundedCache
from mcp_gym.errors import MCPGymError

try:
    from mcp_types import methods as _methods
except ImportError:  # pragma: no cover - the SDK layout this was written for is pinned (mcp>=2.3,<3)
    _methods = None  # type: ignore[assignment]  # absent: the per-tool check is skipped

__all__ = ["MAX_TOOL_NAME", "MAX_PAGES", "MAX_LISTING_BYTES", "ListingError", "list_tools_checked", "schema_problem",
           "show_name", "ListingHandOver", "listing_cache", "hand_to_session"]

MAX_TOOL_NAME = 128
"""Longest accepted tool name (the MCP specification's recommended limit, 1 to 128 characters)."""
MAX_PAGES = 1000
"""Most ``tools/list`` pages followed (a server whose cursors never end fails the listing instead of looping)."""
MAX_LISTING_BYTES = 64 << 20
"""Most characters of tool definitions (their canonical JSON) one listing takes, all pages together (round 9: each
page is bounded by the spec's ``max_message_bytes``, 32 MiB, but 1,000 of them were not: 20 pages of one 30 MB tool
cost 1.3 GB, held for the job, and the definitions cache kept them after the server was gone). A server past it
fails the listing in one line naming the bound; real servers' catalogues are a few hundred kB."""


class ListingError(MCPGymError):
    """The ``tools/list`` result as a whole is unusable (not a page of tools)."""


def show_name(name: Any, limit: int = 60) -> str:
    """A short printable form of a (possibly hostile) tool name, for error messages."""
    text = name if isinstance(name, str) else repr(name)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _pydantic_reason(e: ValidationError, strip: str = "") -> str:
    parts = []
    for err in e.errors()[:2]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        loc = loc[len(strip):] if loc.startswith(strip) else loc
        parts.append(f"{loc or 'tool'}: {err.get('msg', 'invalid')}")
    more = len(e.errors()) - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})  # their values are data, not subschemas
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_MAX_NODES = 20_000


def _pointer_get(root: Any, pointer: str) -> Any:
    node = root
    for token in pointer.split("/")[1:] if pointer else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _ref_loop(schema: Mapping[str, Any]) -> str | None:
    """A JSON pointer on a cycle of ``$ref`` / ``allOf`` / ``anyOf`` / ... that applies to one instance without ever
    descending into it (validating anything that reaches it recurses forever), or ``None``. Local refs only."""
    nodes: dict[str, Any] = {}
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        ptr, node = stack.pop()
        if isinstance(node, dict):
            nodes[ptr] = node
            items = [(k, v) for k, v in node.items() if k not in _DATA_KEYWORDS]
        elif isinstance(node, list):
            items = list(enumerate(node))
        else:
            continue
        if len(nodes) > _MAX_NODES:
            return None  # too large to check here: the validation probe and the step's own guard remain
        for k, v in items:
            if isinstance(v, (dict, list)):
                stack.append((f"{ptr}/{str(k).replace('~', '~0').replace('/', '~1')}", v))

    def edges(ptr: str) -> list[str]:
        node = nodes[ptr]
        out = []
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            target = ref[1:]
            if target in nodes or isinstance(_pointer_get(schema, target), dict):
                out.append(target)
        for k in _IN_PLACE_LISTS:
            if isinstance(node.get(k), list):
                out.extend(f"{ptr}/{k}/{i}" for i in range(len(node[k])))
        out.extend(f"{ptr}/{k}" for k in _IN_PLACE_ONE if isinstance(node.get(k), dict))
        deps = node.get("dependentSchemas")
        if isinstance(deps, dict):
            out.extend(f"{ptr}/dependentSchemas/{k.replace('~', '~0').replace('/', '~1')}" for k in deps)
        return [e for e in out if e in nodes]

    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in nodes:
        if start in state:
            continue
        path = [(start, iter(edges(start)))]
        state[start] = 1
        while path:
            ptr, it = path[-1]
            nxt = next(it, None)
            if nxt is None:
                state[ptr] = 2
                path.pop()
            elif state.get(nxt) == 1:
                return "#" + nxt
            elif nxt not in state:
                state[nxt] = 1
                path.append((nxt, iter(edges(nxt))))
    return None


def schema_problem(schema: Any, what: str = "inputSchema") -> str | None:
    """Why ``schema`` cannot serve as a tool's input (or output) schema, or ``None`` if it can.

    It must be a JSON object whose ``type`` is ``"object"``, valid under its own metaschema (``$schema``, default Draft
    2020-12), without a cycle of local ``$ref`` / ``allOf`` / ``anyOf`` / ``oneOf`` / ``not`` / ``if`` that never
    descends into the instance (``{"$ref": "#"}``; a recursive *tree* schema is fine), and validating an empty object
    against it must terminate. A ``$ref`` resolves only inside the schema (and the bundled metaschemas): nothing is
    fetched, so a tool definition cannot make the client open URLs.
    """
    return _compile_checked(schema, what)[1]


def _compile_checked(schema: Any, what: str) -> tuple[Any, str | None]:
    """(the schema's validator, ``None``) if the schema is usable (see :func:`schema_problem`), else (None, why)."""
    if not isinstance(schema, Mapping):
        return None, f"{what} must be a JSON object, got {type(schema).__name__}"
    if schema.get("type") != "object":
        return None, f"{what} must have \"type\": \"object\", got {show_name(schema.get('type', '(none)'))}"
    try:
        cls = _schema.validator_class(schema)  # bounded pattern matching (an outputSchema's serves the SDK too)
        _schema.check_schema(cls, schema)
        validator = _schema.validator(cls, schema)  # as the SDK does: no remote $ref retrieval
    except SchemaError as e:
        return None, f"{what} is not a valid JSON Schema: {show_name(e.message, 200)}"
    except Exception as e:  # noqa: BLE001 - an unknown $schema, a hostile mapping, ...
        return None, f"{what} is not usable: {type(e).__name__}: {show_name(str(e), 200)}"
    loop = _ref_loop(schema)
    if loop is not None:
        return None, f"{what} refers to itself without end (a $ref loop through {show_name(loop)})"
    try:
        for _ in validator.iter_errors({}):
            pass
    except RecursionError:
        return None, f"{what} refers to itself without end (a $ref loop)"
    except Exception as e:  # noqa: BLE001 - e.g. a $ref that does not resolve
        return None, f"{what} cannot be evaluated: {type(e).__name__}: {show_name(str(e), 200)}"
    return validator, None


def _name_problem(name: Any, seen: set[str]) -> str | None:
    if not isinstance(name, str):
        return f"name must be a string, got {type(name).__name__}"
    if not name:
        return "name is empty"
    if len(name) > MAX_TOOL_NAME:
        return f"name is {len(name):,} characters long (at most {MAX_TOOL_NAME})"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid Unicode (lone surrogate)"
    if "\ufffd" in name:
        return "name is not valid Unicode (it has U+FFFD, e.g. from a lone surrogate or invalid UTF-8)"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "name contains control characters"
    if name in seen:
        return "duplicate name (an earlier tool of this server has it; the first one is kept)"
    return None


def _surface_check(version: str | None, shell: Mapping[str, Any], tool: Any) -> str | None:
    """The SDK's own per-protocol check of one tool (as a one-tool page); ``None`` if it passes or cannot run."""
    if _methods is None or version is None:
        return None
    try:
        _methods.validate_server_result("tools/list", version, {**shell, "tools": [tool]})
    except ValidationError as e:
        return _pydantic_reason(e, "tools.0.")
    except (KeyError, ValueError, TypeError):
        return None
    return None


def check_page(raw: Any, version: str | None) -> tuple[list[Any], dict[str, Any], str | None]:
    """Split a raw ``tools/list`` result into its raw tools, the rest of the page, and its next cursor."""
    if not isinstance(raw, dict):
        raise ListingError(f"tools/list result is not an object but {type(raw).__name__}")
    tools = raw.get("tools")
    if not isinstance(tools, list):
        raise ListingError("tools/list result has no \"tools\" array")
    shell = {k: v for k, v in raw.items() if k != "tools"}
    shell = page_shell(shell, "tools/list", version)
    if _methods is not None and version is not None:
        try:
            _methods.validate_server_result("tools/list", version, {**shell, "tools": []})
        except ValidationError as e:
            raise ListingError(f"tools/list result is invalid: {_pydantic_reason(e)}") from e
        except (KeyError, ValueError, TypeError):
            pass
    cursor = raw.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise ListingError(f"tools/list nextCursor must be a string, got {type(cursor).__name__}")
    return tools, shell, cursor or None


_Checked = tuple[mt.Tool | None, str | None, Any]  # (tool or None, why not, the outputSchema's validator or None)
_CHECKED = BoundedCache(4096)  # tool definitions remembered (servers re-list at every reset: checking a
# schema costs ~1 ms), 64 MiB of them at most

def _check_definition(raw: dict[str, Any], shell: Mapping[str, Any], version: str | None,
                      size: list[int] | None = None) -> _Checked:
    """The tool parsed from a raw definition, or why it is unusable (memoised by its canonical JSON), and the
    compiled validator of its ``outputSchema`` (shared by every session that lists this definition). ``size[0]``
    grows by the definition's canonical JSON length."""
    try:
        key: tuple[str | None, str] | None = (version, json.dumps(raw, sort_keys=True))
    except (TypeError, ValueError, RecursionError):
        key = None
    if key is not None and size is not None:
        size[0] += len(key[1])
        if size[0] > MAX_LISTING_BYTES:
            raise ListingError(f"tools/list holds more than {MAX_LISTING_BYTES >> 20} MiB of tool definitions "
                               "(mcp_gym.client._tools.MAX_LISTING_BYTES); refusing the rest of the listing")
    if key is not None and key in _CHECKED:
        return _CHECKED[key]
    tool: mt.Tool | None = None
    output_validator: Any = None
    reason = _surface_check(version, shell, raw)
    if reason is None:
        try:
            tool = mt.Tool.model_validate(raw, by_name=False)
        except ValidationError as e:
            reason = _pydantic_reason(e)
    if reason is None and tool is not None:
        reason = schema_problem(tool.input_schema, "inputSchema")
        if reason is None and tool.output_schema is not None:
            output_validator, reason = _compile_checked(tool.output_schema, "outputSchema")
    out = (tool if reason is None else None, reason, output_validator if reason is None else None)
    if key is not None:
        _CHECKED.put(key, out)
    return out


def check_tools(raw_tools: list[Any], shell: Mapping[str, Any], version: str | None, seen: set[str],
                output_validators: dict[str, Any] | None = None, size: list[int] | None = None,
                ) -> tuple[list[mt.Tool], list[dict[str, str]]]:
    """The usable tools of one page and ``{"name", "reason"}`` for each skipped one (``seen``: earlier names).
    ``output_validators`` receives each usable tool's compiled ``outputSchema`` validator by name; ``size``, the
    characters of the listing's definitions so far (:class:`ListingError` past :data:`MAX_LISTING_BYTES`)."""
    good: list[mt.Tool] = []
    skipped: list[dict[str, str]] = []
    for raw in raw_tools:
        name = raw.get("name") if isinstance(raw, dict) else None
        reason = "not a JSON object" if not isinstance(raw, dict) else _name_problem(name, seen)
        tool: mt.Tool | None = None
        validator: Any = None
        if reason is None:
            tool, reason, validator = _check_definition(raw, shell, version, size)
        if reason is not None or tool is None:
            skipped.append({"name": show_name(name), "reason": reason or "invalid"})
            continue
        seen.add(tool.name)
        good.append(tool)
        if validator is not None and output_validators is not None:
            output_validators[tool.name] = validator
    return good, skipped


async def _page(client: Any, wire: Lane | None, params: mt.PaginatedRequestParams) -> Any:
    """One raw ``tools/list`` page: on the lane when it can send it, else through the session's public
    ``send_request`` (validated whole; module docstring)."""
    dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    if wire is not None:
        try:
            return await list_tools_raw(client, wire, dumped)
        except StepAside:
            pass
    try:
        page = await client.session.send_request(mt.ListToolsRequest(params=params), mt.ListToolsResult)
    except ValidationError as e:
        if wire is not None:  # the session's request gave the lane its stamp: the page again, raw
            try:
                return await list_tools_raw(client, wire, dumped)
            except StepAside:
                pass
        raise ListingError(f"tools/list result is invalid: {_pydantic_reason(e)}") from e
    return page.model_dump(by_alias=True, mode="json", exclude_none=True)


async def list_tools_checked(
    client: Any, meta: Mapping[str, Any] | None, timeout: float | None, page_metas: list[Any] | None = None,
    wire: Lane | None = None,
) -> tuple[list[mt.Tool], list[dict[str, str]], mt.ListToolsResult]:
    """Every page of ``tools/list`` within ``timeout`` seconds: (good tools, skipped tools, the result to record).
    ``page_metas`` receives each page's ``_meta`` (e.g. the server's identity stamp of the 2026 era); ``wire`` is
    the session's fast lane, which fetches the pages raw (``None``: the session's public route, module docstring).

    Raises ``TimeoutError`` when the listing (all pages) takes longer, :class:`ListingError` when a page is unusable,
    and what the SDK raises for JSON-RPC errors and lost connections.
    """
    session = client.session
    version = client.protocol_version
    good: list[mt.Tool] = []
    skipped: list[dict[str, str]] = []
    seen: set[str] = set()
    output_validators: dict[str, Any] = {}
    size = [0]  # characters of tool definitions listed so far (MAX_LISTING_BYTES)
    t = math.inf if timeout is None else max(0.0, timeout)
    with anyio.fail_after(t if math.isfinite(t) else None):
        cursor: str | None = None
        cursors: set[str] = set()
        for _ in range(MAX_PAGES):
            params = mt.PaginatedRequestParams(  # _meta: an open TypedDict, any keys
                cursor=cursor, _meta=cast(mt.RequestParamsMeta, dict(meta)) if meta else None)
            raw = await _page(client, wire, params)
            raw_tools, shell, cursor = check_page(raw, version)
            if page_metas is not None:
                page_metas.append(raw.get("_meta"))
            page_good, page_skipped = check_tools(raw_tools, shell, version, seen, output_validators, size)
            good.extend(page_good)
            skipped.extend(page_skipped)
            if cursor is None:
                break
            if cursor in cursors:
                raise ListingError(f"tools/list cursor {show_name(cursor)} repeats (pagination would never end)")
            cursors.add(cursor)
        else:
            raise ListingError(f"tools/list has more than {MAX_PAGES} pages")
        kept = await hand_to_session(client, good)  # within the bound: it may wait for another session's turn
    result = mt.ListToolsResult(tools=list(good))
    if kept is not None:  # the SDK drops tools with an invalid x-mcp-header (2026-07-28)
        for tool in good:
            if tool.name not in kept:
                skipped.append({"name": show_name(tool.name), "reason": "invalid x-mcp-header annotation"})
        good = [tool for tool in good if tool.name in kept]
        result.tools = list(good)
    remember_output_schemas(session, good, output_validators)
    return good, skipped, result


class _Handed(mt.ListToolsResult):
    """A checked listing handed to the SDK's session once (:class:`ListingHandOver`): its copy when served shares
    the tool definitions (the SDK's absorption replaces the list, never a tool), so handing it over copies no
    schema."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> _Handed:
        return super().model_copy(update=update)


class ListingHandOver:
    """The SDK ``Client``'s response-cache store (``CacheConfig(store=...)``, the SDK's public
    ``ResponseCacheStore``) for mcp-gym's sessions: it caches nothing (so no result is ever served from a cache), and
    serves, once, a ``tools/list`` result mcp-gym fetched and checked tool by tool (:func:`hand_to_session`).

    ``Client.list_tools`` then absorbs that listing into its session as it absorbs any served listing: tools with an
    invalid ``x-mcp-header`` annotation are dropped (2026-07-28), the others' annotations become the ``Mcp-Param-*``
    headers of their calls, and each listed tool is known to ``validate_tool_result`` (no second listing when one is
    called the SDK's way)."""

    def __init__(self) -> None:
        self.pending: CacheEntry | None = None
        self.turn = anyio.Lock()
        """Held by :func:`hand_to_session` from handing a listing over to the session's taking it: episodes sharing
        one session list tools at once, and one's listing must not be taken (or left) by another's ``list_tools``."""

    async def get(self, key: CacheKey) -> CacheEntry | None:
        """The handed listing, once (a ``tools/list`` lookup), else nothing."""
        if key.method != "tools/list" or self.pending is None:
            return None
        entry, self.pending = self.pending, None
        return entry

    async def set(self, key: CacheKey, entry: CacheEntry) -> None:
        """Nothing is cached."""

    async def delete(self, key: CacheKey) -> None:
        """Nothing is cached."""

    async def clear(self) -> None:
        """Nothing is cached."""


def listing_cache() -> CacheConfig:
    """The SDK ``Client``'s ``cache=`` for an mcp-gym session: a :class:`ListingHandOver` (nothing cached)."""
    return CacheConfig(store=ListingHandOver(), partition="mcp-gym", target_id="mcp-gym")


_handover_failed = False


async def hand_to_session(client: Any, tools: list[mt.Tool]) -> set[str] | None:
    """Hand a complete checked listing to ``client``'s session through its public ``list_tools`` (served by its
    :class:`ListingHandOver`, without a request), as the session's own listing would have set it up; the tools go
    without their output schemas (mcp-gym checks results against them itself, with the validators compiled while
    checking: :func:`mcp_gym._compat.mcp_output.check_output`). Returns the names the session kept (``None``: the client
    has no hand-over store, or the SDK did not read it: said once, and then the SDK's own first call of each tool
    lists the tools again)."""
    global _handover_failed
    store = getattr(getattr(client, "cache", None), "store", None)
    if not isinstance(store, ListingHandOver) or _handover_failed:
        return None
    handed = _Handed(tools=[t.model_copy(update={"output_schema": None}) if t.output_schema is not None else t
                            for t in tools])
    async with store.turn:  # one hand-over at a time per session (ListingHandOver.turn)
        store.pending = CacheEntry(value=handed, scope="private", expires_at=math.inf)
        served: mt.ListToolsResult | None = None
        try:
            served = await client.list_tools()
        except Exception:
            if store.pending is None:
                raise
        except BaseException:  # cancelled (the listing's bound): no later listing may take this one
            store.pending = None
            raise
        missed, store.pending = store.pending is not None, None
    if missed or served is None:
        _handover_failed = True
        warnings.warn("mcp-gym: this mcp SDK's Client.list_tools did not take the listing from its response-cache "
                      "store, so its sessions list tools again on their first call the SDK's way "
                      "(mcp_gym/client/_tools.py needs an update)", RuntimeWarning, stacklevel=2)
        return None
    return {tool.name for tool in served.tools}


class ToolFilter:
    """The ``include_tools`` / ``exclude_tools`` settings of an env: which agent-facing tool names (prefixed when
    tools are) the agent is shown. ``include``: only these (``None``: all); ``exclude``: never these.

    >>> f = ToolFilter(include=["get-sum", "echo"], exclude=["echo"])
    >>> [name for name in ("get-sum", "echo", "add") if not f.hide(name)], f.hidden
    (['get-sum'], {'echo': 'exclude_tools', 'add': 'include_tools'})
    >>> f.message("add", "get-sum")
    "tool 'add' is hidden: it is not in the env's include_tools setting (available: get-sum, submit)"
    """

    def __init__(self, include: Collection[str] | None = None, exclude: Collection[str] | None = ()) -> None:
        for setting, names in (("include_tools", include), ("exclude_tools", exclude)):
            if isinstance(names, str) or not all(isinstance(n, str) for n in names or ()):
                raise TypeError(f"{setting} takes a list of tool names, got {names!r}")
        self.include = frozenset(include) if include is not None else None
        self.exclude = frozenset(exclude or ())
        self.hidden: dict[str, str] = {}
        """The names a server lists that the settings hide (since the catalogue's last rebuild) -> the setting."""
        self._reported: set[str] = set()

    def hide(self, name: str) -> bool:
        """Whether the settings hide tool ``name`` (then noted in :attr:`hidden`)."""
        if name in self.exclude:
            self.hidden[name] = "exclude_tools"
        elif self.include is not None and name not in self.include:
            self.hidden[name] = "include_tools"
        else:
            return False
        return True

    def unlisted(self, listed: Collection[str]) -> list[str]:
        """The ``include_tools`` names not among the tool names the servers have ``listed`` that were not reported yet
        (each is reported once: a name no server lists, a typo most likely, would otherwise leave the agent without
        that tool unsaid)."""
        if self.include is None:
            return []
        new = sorted(self.include - set(listed) - self._reported)
        self._reported.update(new)
        return new

    def message(self, name: str, available: str) -> str | None:
        """The one-line refusal of a call to a hidden tool (naming it and the setting), else ``None``."""
        setting = self.hidden.get(name)
        if setting is None:
            return None
        why = "is not in" if setting == "include_tools" else "is in"
        return f"tool '{name}' is hidden: it {why} the env's {setting} setting (available: {available}, submit)"
