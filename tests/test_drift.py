"""Tool-catalogue drift (mcp_gym.drift, `mcp-gym diff-tools A B`): real runs, cassettes and live servers.

- A recorded run, its cassette and the live server agree (no changes, exit 0).
- A changed server version (a live stdio command line) shows the added tool, the removed tool and the changed
  argument type by JSON path, and `diff-tools` exits non-zero.
- The breaking / non-breaking rules, renamed-looking tools, rendering and the CLI hook.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import start_http_server

from mcp_gym import InProcess, MCPEnv
from mcp_gym.cassette import cassette_dir, cassette_path
from mcp_gym.drift import Change, diff_catalogues, diff_tools, format_diff, load_catalogue, main, register_cli
from mcp_gym.envs import load_env_tasks
from mcp_gym.recording import RecordTrajectories
from mcp_gym.servers.counter import make_server

COUNTER = f"{sys.executable} -m mcp_gym.servers.counter"

VARIANT = textwrap.dedent('''
    """The Counter server, version 2: get_count removed, set_count added, add takes a string."""
    from mcp_gym.servers.counter import make_server

    srv = make_server()
    srv.mcp.remove_tool("get_count")
    srv.mcp.remove_tool("add")

    @srv.tool(title="Add to the counter")
    async def add(amount: str) -> str:
        """Add `amount` to the counter."""
        return amount

    @srv.tool()
    async def set_count(value: int) -> int:
        """Set the counter to `value`."""
        return value

    srv.mcp.run()
''')


@pytest.fixture(scope="module")
def counter_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded Counter run: trajectories plus the server's cassette."""
    run = tmp_path_factory.mktemp("run")
    tasks = load_env_tasks("Counter")[:2]
    env = MCPEnv({"testing": InProcess(make_server(), record=cassette_dir(run))}, tasks, env_id="counter")
    rec = RecordTrajectories(env, run)
    for task in tasks:
        rec.reset(seed=0, options={"task_id": task.id})
        for action in task.solution:
            *_, terminated, truncated, _ = rec.step(dict(action))
            if terminated or truncated:
                break
    rec.close()
    return run


def kinds(diff: Any) -> set[tuple[str, str, str, bool]]:
    return {(c.kind, c.tool, c.path, c.breaking) for c in diff.changes}


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_run_cassette_and_live_server_agree(counter_run: Path) -> None:
    label, run_tools = load_catalogue(counter_run)
    assert sorted(run_tools) == ["add", "get_count"]  # hidden reset/state tools and submit left out
    _, cas_tools = load_catalogue(cassette_path(cassette_dir(counter_run), "testing"))
    assert cas_tools == run_tools
    diff = diff_tools(counter_run, cassette_dir(counter_run))
    assert diff.changes == [] and diff.exit_code() == 0
    live = diff_tools(counter_run, COUNTER)  # a live stdio server given as a command line
    assert live.changes == [] and live.a_tools == live.b_tools == ["add", "get_count"]
    assert "no changes" in format_diff(live)
    proc, url = start_http_server("mcp_gym.servers.counter")  # ... and over Streamable HTTP, by URL
    try:
        assert diff_tools(url, cassette_path(cassette_dir(counter_run), "testing")).changes == []
    finally:
        proc.terminate()
        proc.wait(10)


def test_changed_server_version_is_breaking(counter_run: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`mcp-gym diff-tools RUN "python counter_v2.py"`: added, removed and retyped, by JSON path; exit code 1."""
    script = tmp_path / "counter_v2.py"
    script.write_text(VARIANT)
    code = main([str(counter_run), f"{sys.executable} {script}", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["breaking"] is True
    assert out["a_tools"] == ["add", "get_count"] and out["b_tools"] == ["add", "set_count"]
    found = {(c["kind"], c["tool"], c["path"], c["breaking"]): c["detail"] for c in out["changes"]}
    assert found[("added", "set_count", "$", False)] == "tool added"
    assert found[("removed", "get_count", "$", True)] == "tool removed"
    assert found[("schema", "add", "$.inputSchema.properties.amount.type", True)] == "type integer -> string"
    assert ("schema", "add", "$.inputSchema.properties.amount.maximum", False) in found  # a dropped bound loosens
    assert ("output", "add", "$.outputSchema.properties.reward", True) in found  # a result field removed
    assert not any(c["kind"] == "renamed" for c in out["changes"])  # set_count's schema is not get_count's


def tool(name: str, props: dict[str, Any], required: list[str] = (), description: str = "",  # type: ignore[assignment]
         output: dict[str, Any] | None = None, **annotations: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "description": description,
                         "inputSchema": {"type": "object", "properties": props, "required": list(required)}}
    if output is not None:
        t["outputSchema"] = output
    if annotations:
        t["annotations"] = annotations
    return t


def test_breaking_rules() -> None:
    out_a = {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
             "required": ["id", "n"]}
    out_b = {"type": "object", "properties": {"n": {"type": "integer"}, "extra": {"type": "string"}},
             "required": ["n"]}
    a = [
        tool("search", {"q": {"type": "string", "description": "query"},
                        "mode": {"type": "string", "enum": ["fast", "deep", "exact"]},
                        "limit": {"type": "integer", "maximum": 100},
                        "page": {"type": "integer", "minimum": 1}}, ["q"], "Search.", output=out_a,
             readOnlyHint=True),
        tool("get_item", {"item_id": {"type": "string"}}, ["item_id"]),
        tool("delete", {"path": {"type": "string"}, "force": {"type": "boolean"}}, ["path"]),
        tool("mcp_gym_reset", {}),  # hidden tools never count
    ]
    b = [
        tool("search", {"q": {"type": "string", "description": "the query"},
                        "mode": {"type": "string", "enum": ["fast", "deep", "fuzzy"]},
                        "limit": {"type": "number", "maximum": 50},
                        "page": {"type": "integer", "minimum": 0},
                        "lang": {"type": "string"}, "user": {"type": "string"}}, ["q", "user"], "Search things.",
             output=out_b, readOnlyHint=False),
        tool("fetch_item", {"item_id": {"type": "string"}}, ["item_id"]),  # get_item renamed
        tool("delete", {"path": {"type": "string"}}, ["path"]),
        tool("ping", {}),
    ]
    diff = diff_tools(a, b)
    found = kinds(diff)
    expected = {
        ("renamed", "get_item", "$", True),
        ("added", "ping", "$", False),
        ("description", "search", "$.description", False),
        ("description", "search", "$.inputSchema.properties.q.description", False),
        ("schema", "search", "$.inputSchema.properties.mode.enum", True),   # lost "exact"
        ("schema", "search", "$.inputSchema.properties.mode.enum", False),  # gained "fuzzy"
        ("schema", "search", "$.inputSchema.properties.limit.type", False),  # integer -> number widens
        ("schema", "search", "$.inputSchema.properties.limit.maximum", True),  # 100 -> 50 tightens
        ("schema", "search", "$.inputSchema.properties.page.minimum", False),  # 1 -> 0 loosens
        ("schema", "search", "$.inputSchema.properties.lang", False),  # optional argument added
        ("schema", "search", "$.inputSchema.properties.user", True),  # required argument added
        ("output", "search", "$.outputSchema.properties.id", True),  # output field removed
        ("output", "search", "$.outputSchema.properties.extra", False),
        ("annotations", "search", "$.annotations.readOnlyHint", False),
        ("schema", "delete", "$.inputSchema.properties.force", True),  # argument removed
    }
    assert found == expected
    renamed = next(c for c in diff.changes if c.kind == "renamed")
    assert "'fetch_item' added" in renamed.detail
    assert diff.exit_code() == 1

    text = format_diff(diff)
    assert text.splitlines()[0] == "tools: tools (3) -> tools (4)"
    assert "BREAKING  removed" not in text and "BREAKING  renamed" in text
    assert text.splitlines()[-1] == f"{len(diff.breaking)} breaking change(s), " \
        f"{len(diff.changes) - len(diff.breaking)} other change(s)"

    safe = diff_catalogues({"t": {"description": "x", "inputSchema": {"type": "object"}}},
                           {"t": {"description": "y", "inputSchema": {"type": "object"}},
                            "u": {"description": "", "inputSchema": {"type": "object"}}})
    assert not safe.is_breaking and safe.exit_code() == 0 and safe.exit_code("any") == 1
    assert [c.kind for c in safe.changes] == ["added", "description"]
    assert isinstance(safe.changes[0], Change)


def test_cli_hook_and_errors(counter_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="mcp-gym")
    register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["diff-tools", str(counter_run), str(cassette_dir(counter_run)), "--fail-on", "any"])
    assert args.func(args) == 0
    assert "no changes" in capsys.readouterr().out
    assert main([str(counter_run), str(counter_run / "missing.jsonl")]) == 2
    assert "no such run directory or cassette" in capsys.readouterr().err


def test_every_form_of_a_tool_loads_as_its_recorded_form() -> None:
    """An MCP tool dict (camelCase), a recorded ``ToolEntry.to_record`` dict and an SDK ``Tool`` are one tool to drift
    (all go through ``ToolEntry``); hidden tools are left out; a dict that is no tool definition is refused by name."""
    import mcp.types as mt

    from mcp_gym.client.host import ToolEntry

    mcp_dict = tool("search", {"q": {"type": "string"}}, ["q"], "Search.", output={"type": "object"},
                    readOnlyHint=True)
    record = ToolEntry.of(mcp_dict, server="s").to_record()
    assert record["input_schema"] == mcp_dict["inputSchema"] and record["server"] == "s"
    hidden = {**tool("peek", {}), "_meta": {"mcp-gym/hidden": True}}
    as_mcp = load_catalogue([mcp_dict, hidden])[1]
    assert list(as_mcp) == ["search"]
    assert as_mcp == load_catalogue([record])[1] == load_catalogue([mt.Tool.model_validate(mcp_dict)])[1]
    assert as_mcp["search"]["annotations"] == {"readOnlyHint": True}
    assert diff_catalogues({"search": record}, {"search": mcp_dict}).changes == []
    with pytest.raises(ValueError, match="tool 'broken': not a tool definition"):
        load_catalogue([{"name": "broken", "inputSchema": "not a schema"}])
