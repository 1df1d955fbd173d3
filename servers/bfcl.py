"""BFCL multi-turn: the simulated APIs of a local copy of BFCL served as one MCP server.

``python -m mcp_gym.servers.bfcl --bfcl PATH`` (PATH: an unpacked ``bfcl-eval`` wheel or sdist, or gorilla's
``berkeley-function-call-leaderboard/``, see :func:`mcp_gym.envs.bfcl.check.find_root`) serves every function of
BFCL's multi-turn API classes (``GorillaFileSystem``, ``MathAPI``, ``MessageAPI``, ``TwitterAPI``, ``TicketAPI``,
``TradingBot``, ``TravelAPI``, ``VehicleControlAPI``) as a tool, its schema from BFCL's ``multi_turn_func_doc/``.

One set of instances per episode: ``mcp_gym_reset(task_id)`` takes the BFCL task of that id from the copy's own data
files (an mcp-gym task imported by ``mcp-gym tasks import bfcl`` has BFCL's id), makes its ``involved_classes`` and
loads the task's ``initial_config`` into them as BFCL does (``_load_scenario``, with ``long_context`` for that
category); the episode then sees the functions of those classes only. ``miss_func``'s held-back functions stay hidden
until their turn: the hidden ``mcp_gym_turn(turn)`` (called by the env when a turn starts) shows them and sends
``notifications/tools/list_changed``. A call runs the method on the episode's instance and answers with the text
BFCL's ``execute_multi_turn_func_call`` gives the model (a dict as JSON, an exception as ``Error during execution:
...``). The hidden ``mcp_gym_state`` returns ``{"bfcl": {root, task_id, turn, turns, calls, state}}``: the calls that
ran, per turn (what the grader hands to BFCL's checker), and the instances' public attributes.

Code of the copy runs in this process: name only a copy you trust.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib
import inspect
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from mcp_gym.envs.bfcl import check
from mcp_gym.protocol import HIDDEN_META_KEY, TURN_TOOL
from mcp_gym.serverkit import EpisodeServer

__all__ = ["BFCLServer", "build_server", "tool_schema", "main"]

FORBIDDEN = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")
"""Function names BFCL's ``execute_multi_turn_func_call`` refuses to run."""
_TYPES_FALLBACK = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "any": "string",
                   "bool": "boolean"}


def tool_schema(doc: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """A BFCL function doc's parameters as a JSON Schema, cast as BFCL casts them for function-calling models
    (``_cast_to_openai_type`` with ``GORILLA_TO_OPENAPI``: ``dict`` -> ``object``, ``float`` -> ``number`` noted in the
    description, a property without a type a ``string``)."""
    params = copy.deepcopy(doc.get("parameters") or {})

    def cast(props: dict[str, Any]) -> dict[str, Any]:
        for value in props.values():
            kind = value.get("type")
            if kind == "float":
                value["format"] = "float"
                value["description"] = str(value.get("description", "")) + " This is a float type value."
            value["type"] = mapping.get(kind, "string") if kind is not None else "string"
            if value["type"] in ("array", "object"):
                if isinstance(value.get("properties"), dict):
                    value["properties"] = cast(value["properties"])
                elif isinstance(value.get("items"), dict):
                    items = value["items"]
                    items["type"] = mapping.get(items.get("type"), "string")
                    if items["type"] == "object" and isinstance(items.get("properties"), dict):
                        items["properties"] = cast(items["properties"])
                    elif items["type"] == "array" and isinstance(items.get("items"), dict):
                        items["items"]["type"] = mapping.get(items["items"].get("type"), "string")
        return props

    schema: dict[str, Any] = {"type": "object", "properties": cast(dict(params.get("properties") or {}))}
    if params.get("required"):
        schema["required"] = list(params["required"])
    return schema


def bfcl_text(result: Any) -> str:
    """A call's result as BFCL's ``execute_multi_turn_func_call`` hands it to the model: a string as is, a dict as
    JSON (else ``str``), anything else ``str``."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:  # noqa: BLE001 - BFCL's own fallback
            return str(result)
    return str(result)


def _public(instance: Any) -> dict[str, Any]:
    out = {k: v for k, v in vars(instance).items() if not k.startswith("_")}
    return json.loads(json.dumps(out, default=str))


@dataclass
class BFCLEpisode:
    """One episode: the task's API instances, which class owns which function, the turn, and the calls per turn."""

    task_id: str | None
    turns: int = 1
    instances: dict[str, Any] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    offered: list[str] = field(default_factory=list)
    held: dict[int, list[str]] = field(default_factory=dict)
    turn: int = 0
    calls: list[list[dict[str, Any]]] = field(default_factory=lambda: [[]])


class BFCLServer(EpisodeServer[BFCLEpisode]):
    """An :class:`~mcp_gym.serverkit.EpisodeServer` serving the BFCL copy at ``root`` (see the module)."""

    def __init__(self, root: str | Path, categories: Sequence[str] = check.CATEGORIES) -> None:
        self.bfcl = check.load_bfcl(check.find_root(root))
        self.root = self.bfcl.root
        backend = self.bfcl.backend
        self.classes: dict[str, str] = dict(backend.CLASS_FILE_PATH_MAPPING)
        mapping = dict(importlib.import_module("bfcl_eval.constants.type_mappings").GORILLA_TO_OPENAPI)
        used: list[str] = []
        for category in categories:
            try:
                table = check.entries(self.root, category)
            except FileNotFoundError:
                continue
            for e, _ in table.values():
                used += [c for c in e.get("involved_classes") or () if c not in used]
        self.docs: dict[str, list[dict[str, Any]]] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        for cls in used:
            if cls not in self.classes or cls not in backend.MULTI_TURN_FUNC_DOC_FILE_MAPPING:
                raise ValueError(f"{self.root}: class {cls!r} has no module or function docs in BFCL's "
                                 "executable_backend_config")
            path = check.inside(self.root, check.PACKAGE, "data", "multi_turn_func_doc",
                                  backend.MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls])
            docs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            self.docs[cls] = docs
            for doc in docs:
                self.tools[doc["name"]] = {"name": doc["name"], "description": str(doc.get("description", "")),
                                           "inputSchema": tool_schema(doc, mapping),
                                           "annotations": ToolAnnotations(open_world_hint=False).model_dump(
                                               by_alias=True, exclude_none=True)}
        super().__init__("bfcl", self._new_episode, snapshot=self._snapshot_of, on_reset=self._show_first,
                         instructions="BFCL's multi-turn APIs (file system, messages, posts, tickets, trading, "
                                      "travel, vehicle, math); each task uses some of them.")
        self._made = 0
        self._gated.update(self.tools)  # every function is shown per episode, for its task's classes
        self._register_turn_tool()

    # -- episodes ----------------------------------------------------------------------------------------------------
    def _new_episode(self, task_id: str | None, seed: int) -> BFCLEpisode:
        if task_id is None:
            return BFCLEpisode(None)
        test_entry, ground_truth = check.entry(self.root, task_id)
        category = check.category_of(task_id)
        ep = BFCLEpisode(task_id, turns=len(ground_truth))
        classes = list(test_entry["involved_classes"])
        for cls in classes:
            if cls not in self.docs:
                raise ValueError(f"task {task_id!r}: class {cls!r} is not served (no function docs)")
        self._made += 1
        model = f"mcpgym_serve{self._made}"
        try:  # BFCL's own way of making a task's instances (its _load_scenario, long_context for that category)
            _, ep.instances = self.bfcl.utils.execute_multi_turn_func_call(
                [], copy.deepcopy(test_entry.get("initial_config") or {}), classes, model, task_id,
                long_context="long_context" in category or "composite" in category)
        finally:  # it keeps them in its module's globals too, by model name: this episode holds them
            space = vars(self.bfcl.utils)
            for name in [n for n in space if n.startswith(model + "_")]:
                del space[name]
        for cls in classes:
            for name, _ in inspect.getmembers(ep.instances[cls], predicate=inspect.ismethod):
                if not name.startswith("_"):
                    ep.owner[name] = cls
        missed = {int(k): [str(n) for n in v] for k, v in (test_entry.get("missed_function") or {}).items()}
        held = {n for names in missed.values() for n in names}
        ep.held = missed
        ep.offered = [d["name"] for cls in test_entry["involved_classes"] for d in self.docs[cls]
                      if d["name"] not in held]
        ep.calls = [[] for _ in range(ep.turns)]
        return ep

    def _show_first(self, ep: BFCLEpisode) -> dict[str, Any]:
        for name in ep.offered:
            self.show_tool(name)
        return {"task_id": ep.task_id, "turns": ep.turns, "tools": len(ep.offered)}

    def _snapshot_of(self, ep: BFCLEpisode) -> dict[str, Any]:
        return {"bfcl": {"root": str(self.root), "task_id": ep.task_id, "turn": ep.turn, "turns": ep.turns,
                         "calls": ep.calls, "state": {c: _public(i) for c, i in ep.instances.items()}}}

    def _register_turn_tool(self) -> None:
        async def mcp_gym_turn(turn: int, ctx: Context) -> dict[str, Any]:
            """Start turn ``turn`` of the conversation (used by the mcp-gym environment, not by agents)."""
            ep = self.state
            if ep.task_id is None:
                raise ToolError("no BFCL task in this episode: reset it with a task id first")
            if not ep.turn < turn < ep.turns:
                raise ToolError(f"task {ep.task_id!r} is in turn {ep.turn} of {ep.turns}: cannot start turn {turn}")
            shown = [n for t in range(ep.turn + 1, turn + 1) for n in ep.held.get(t, [])]
            ep.turn = turn
            for name in shown:
                self.show_tool(name)
            if shown:
                await self.notify_tools_changed(ctx)
            return {"turn": turn, "shown": shown}

        self.mcp.add_tool(mcp_gym_turn, name=TURN_TOOL, meta={HIDDEN_META_KEY: True}, structured_output=False,
                          annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))

    # -- the API functions as tools ----------------------------------------------------------------------------------
    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run BFCL function ``name`` on the current episode's instance and record the call in its turn."""
        ep = self.state
        cls = ep.owner.get(name)
        if cls is None:
            raise ToolError(f"Unknown tool: '{name}' is not a function of this task's classes")
        ep.calls[ep.turn].append({"tool": name, "arguments": copy.deepcopy(arguments)})
        if name in FORBIDDEN:
            return f"Error during execution: Function call {name} is not allowed."
        try:
            return bfcl_text(getattr(ep.instances[cls], name)(**arguments))
        except Exception as e:  # noqa: BLE001 - BFCL hands the model the error text
            return f"Error during execution: {e}"

    async def _middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        async def inner(c: ServerRequestContext[Any, Any]) -> HandlerResult:
            params = c.params or {}
            if c.method == "tools/call" and params.get("name") in self.tools:
                arguments = params.get("arguments") or {}
                try:
                    if not isinstance(arguments, dict):
                        raise ToolError("arguments must be a JSON object")
                    text = self.call(str(params["name"]), dict(arguments))
                except ToolError as e:
                    return CallToolResult(content=[TextContent(type="text", text=str(e))], is_error=True)
                return CallToolResult(content=[TextContent(type="text", text=text)])
            result = await call_next(c)
            if c.method == "tools/list" and result is not None:
                data = dict(result if isinstance(result, dict) else
                            result.model_dump(by_alias=True, mode="json", exclude_none=True))
                data["tools"] = [*data.get("tools", []), *self.tools.values()]
                return data
            return result

        return await super()._middleware(ctx, inner)


def build_server(root: str | Path) -> BFCLServer:
    """The BFCL server of the copy at ``root``."""
    return BFCLServer(root)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m mcp_gym.servers.bfcl --bfcl PATH [--transport stdio|http] [--port N]``."""
    import logging

    from mcp_gym.envs._common import exit_cleanly_on_sigterm

    p = argparse.ArgumentParser(prog="python -m mcp_gym.servers.bfcl",
                                description="Serve BFCL's multi-turn APIs from a local copy of BFCL as MCP tools.")
    p.add_argument("--bfcl", required=True, help="the BFCL copy (holding bfcl_eval/)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (0: any free one, named on stderr)")
    a = p.parse_args(argv)
    exit_cleanly_on_sigterm()
    try:
        server = build_server(a.bfcl)
    except (OSError, ValueError, RuntimeError, ImportError) as e:
        raise SystemExit(f"python -m mcp_gym.servers.bfcl: {e}") from None
    logging.getLogger("mcp").setLevel(logging.WARNING)
    if a.transport == "stdio":
        server.mcp.run()
    else:
        from mcp_gym.serverkit import serve_http

        serve_http(server.mcp.streamable_http_app(host=a.host), a.host, a.port, ready=lambda bound: print(
            f"serving bfcl on http://{a.host}:{bound}/mcp", file=sys.stderr, flush=True))
    gc.freeze()  # the process exits now: no last garbage collection over the SDK's and BFCL's objects (~0.3 s of CPU
    # at every stop, which the end of a job waits for), as a bundled env's server (mcp_gym.envs.serve.main)


if __name__ == "__main__":
    main()
