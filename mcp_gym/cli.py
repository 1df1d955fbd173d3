"""The ``mcp-gym`` command.

Jobs, configured with Hydra (the package ``mcp_gym.conf``, folder ``mcp_gym/conf/``; overrides and ``-m``
multirun work as usual)::

    mcp-gym demo                                         # end-to-end: collect, evaluate, export SFT (offline)
    mcp-gym collect env=sql policy=random episodes=200   # record episodes to runs/collect/SQL-random
    mcp-gym eval env=counter policy=oracle samples=8     # success, pass@k, errors, latency; report and plots
    mcp-gym eval policy=openai policy.model=Qwen/Qwen3-8B policy.base_url=http://127.0.0.1:8000/v1
    mcp-gym export-sft 'runs=[runs/collect/SQL-oracle]' out=data/sql-sft
    mcp-gym collect -m policy=random,oracle              # one run per combination
    mcp-gym collect --cfg job                            # show the composed config

Servers::

    mcp-gym serve sql --transport http --port 8000       # a bundled server over stdio or Streamable HTTP
    mcp-gym inspect "npx -y @modelcontextprotocol/server-everything stdio"
    mcp-gym inspect http://127.0.0.1:8000/mcp            # tools, resources and prompts of any MCP server
    mcp-gym serve --replay runs/x/cassettes/memory.jsonl # a recorded cassette as a server (mcp_gym.cassette)
    mcp-gym diff-tools runs/2026-11 runs/2026-12         # tool-catalogue drift (mcp_gym.drift)

Looking at runs::

    mcp-gym view runs/eval/Counter-oracle                # a static HTML report: episodes, steps, plots (offline)
    mcp-gym view RUN_A RUN_B --out compare.html          # several runs side by side by task (mcp_gym.viewer)

Rerunning an interrupted ``collect``/``eval``/``demo`` resumes it. Exit status 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

JOBS = {"collect": "collect", "eval": "eval", "export-sft": "export_sft", "demo": "demo"}
"""Command -> option of the ``job`` config group."""
INTERRUPTED = 130


def _usage() -> str:
    body = (__doc__ or "").split("\n", 2)[2].replace("``", "").replace("::", ":")
    return f"usage: mcp-gym {{{','.join([*JOBS, 'serve', 'inspect', 'diff-tools', 'view'])}}} [arguments]\n\n{body}"


# -- Hydra jobs -------------------------------------------------------------------------------------------------------
def _run_job(cfg: Any) -> None:
    """The Hydra task: run the job the config's ``command`` names, in Hydra's output directory."""
    from hydra.core.hydra_config import HydraConfig

    from mcp_gym import jobs

    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        if cfg.command == "collect":
            r = jobs.collect(cfg, out)
            print(f"{r.out}: {r.already_done + r.finished} of {r.planned} planned episodes recorded ({r.finished} new, "
                  f"{r.steps} steps in {r.seconds:.1f} s)" + (f"; {len(r.errors)} failed: rerun" if r.errors else ""))
        elif cfg.command == "eval":
            jobs.evaluate(cfg, out)
        elif cfg.command == "export-sft":
            jobs.export_sft(cfg, out)
        elif cfg.command == "demo":
            jobs.demo(cfg, out)
            from mcp_gym.viewer import write_view  # the products layer, above jobs: called from here, not from demo

            policies = list(cfg.demo.policies)
            page = write_view([out / f"{stage}-{k}" for stage in ("eval", "collect") for k in policies],
                              out / "report.html", title=f"mcp-gym demo: {cfg.env.name}")
            print(f"look at the episodes: open {page}")
        else:
            raise ValueError(f"unknown command {cfg.command!r}")
    except jobs.JobInterrupted as e:
        print(str(e), file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None


def _hydra(command: str, overrides: Sequence[str]) -> int:
    """Run a job through ``hydra.main`` (so Hydra's flags, overrides and multirun all work)."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    args = list(overrides)
    # The job choice goes just before the first override, keeping the overrides one block (argparse needs that).
    first = next((i for i, a in enumerate(args) if not a.startswith("-") and ("=" in a or a[:1] in "~+")), len(args))
    args.insert(first, f"job={JOBS[command]}")
    saved = sys.argv
    sys.argv = [f"mcp-gym {command}", *args]
    GlobalHydra.instance().clear()
    try:
        hydra.main(config_path="pkg://mcp_gym.conf", config_name="config", version_base="1.3")(_run_job)()
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()
    return 0


# -- serve ------------------------------------------------------------------------------------------------------------
def _serve(argv: Sequence[str]) -> int:
    from mcp_gym.envs.serve import BUNDLED_SERVERS, serve

    p = argparse.ArgumentParser(prog="mcp-gym serve", description="Run a bundled MCP server, or replay a cassette.")
    p.add_argument("name", nargs="?", help="a bundled server or env: " + ", ".join(BUNDLED_SERVERS) + ", counter")
    p.add_argument("--replay", metavar="CASSETTE", help="serve a recorded cassette (.jsonl) instead")
    p.add_argument("--strict", action="store_true", help="with --replay: JSON-RPC error for unrecorded tool calls")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--json-response", action="store_true", help="plain JSON responses over HTTP (no SSE)")
    a = p.parse_args(argv)
    if (a.name is None) == (a.replay is None):
        p.error("give a server name or --replay CASSETTE")
    if a.transport == "http":
        print(f"serving {a.name or a.replay} on http://{a.host}:{a.port}/mcp", file=sys.stderr, flush=True)
    if a.replay is not None:
        from mcp_gym.cassette import serve_replay

        serve_replay(a.replay, a.transport, a.host, a.port, strict=a.strict, json_response=a.json_response)
        return 0
    name = a.name
    if name not in BUNDLED_SERVERS:
        from mcp_gym.envs import env_module

        name = env_module(name).SERVER
    serve(name, a.transport, a.host, a.port, a.json_response)
    return 0


# -- inspect ----------------------------------------------------------------------------------------------------------
def _spec(target: str, timeout: float) -> Any:
    from mcp_gym.client.specs import parse_server

    return parse_server(target, inherit_env=True, connect_timeout=timeout)


async def _describe_server(spec: Any) -> dict[str, Any]:
    """Everything a server lists: its info, tools, resources, resource templates and prompts (JSON-able)."""
    from mcp_gym.client.connection import ServerConnection
    from mcp_gym.client.runtime import default_runtime

    conn = ServerConnection("server", spec)
    await conn.start(default_runtime().task_group)
    try:
        if conn.status != "ready":
            raise RuntimeError(f"could not connect to {spec.describe()}: {conn.error}")
        caps = conn.capabilities
        prompts = []
        if caps is not None and caps.prompts is not None:
            prompts = (await conn.request(lambda c: c.list_prompts())).prompts

        def dump(items: Sequence[Any]) -> list[dict[str, Any]]:
            return [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items]

        return {"server": conn.info(), "tools": dump(await conn.list_tools()),
                "resources": dump(await conn.list_resources()),
                "resource_templates": dump(await conn.list_resource_templates()), "prompts": dump(prompts)}
    finally:
        await conn.close()


def _first_line(text: str | None, width: int = 80) -> str:
    line = (text or "").strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 1] + "…"


def _print_server(d: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s = d["server"]
    console.print(f"[bold]{s['name'] or '?'}[/bold] {s['version'] or ''}  protocol {s['protocol_version']}  "
                  f"({s['transport']}: {s['target']})")
    tools = Table(title=f"Tools ({len(d['tools'])})", title_justify="left")
    for col in ("name", "arguments (* required)", "description", "hints"):
        tools.add_column(col, overflow="fold")
    for t in d["tools"]:
        schema = t.get("inputSchema") or {}
        required = set(schema.get("required") or ())
        args = ", ".join(f"{k}{'*' if k in required else ''}: {v.get('type', 'any') if isinstance(v, dict) else 'any'}"
                         for k, v in (schema.get("properties") or {}).items())
        hints = ", ".join(k.removesuffix("Hint") for k, v in (t.get("annotations") or {}).items()
                          if k.endswith("Hint") and v)
        tools.add_row(t["name"], args, _first_line(t.get("description")), hints)
    console.print(tools)
    for key, title, cols in (("resources", "Resources", ("uri", "name", "mimeType")),
                             ("resource_templates", "Resource templates", ("uriTemplate", "name", "mimeType")),
                             ("prompts", "Prompts", ("name", "description", "arguments"))):
        table = Table(title=f"{title} ({len(d[key])})", title_justify="left")
        for col in cols:
            table.add_column(col, overflow="fold")
        for item in d[key]:
            cells = []
            for col in cols:
                v = item.get(col)
                if col == "arguments":
                    v = ", ".join(a["name"] + ("*" if a.get("required") else "") for a in v or [])
                cells.append(_first_line(v if isinstance(v, str) else ("" if v is None else str(v))))
            table.add_row(*cells)
        console.print(table)


def _inspect(argv: Sequence[str]) -> int:
    from mcp_gym.client.runtime import default_runtime

    p = argparse.ArgumentParser(prog="mcp-gym inspect", description="List what any MCP server offers.")
    p.add_argument("server", help='a command line in one argument ("npx -y pkg stdio") or an http(s) URL')
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to connect")
    a = p.parse_args(argv)
    try:
        d = default_runtime().call(_describe_server, _spec(a.server, a.timeout))
    except (RuntimeError, ValueError) as e:
        print(f"mcp-gym inspect: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(d, indent=1, ensure_ascii=False))
    else:
        _print_server(d)
    return 0


# -- entry point ------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mcp-gym <command> ...``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    command, rest = args[0], args[1:]
    try:
        if command == "serve":
            return _serve(rest)
        if command == "inspect":
            return _inspect(rest)
        if command == "view":
            from mcp_gym.viewer import main as view

            return view(rest)
        if command == "diff-tools":
            from mcp_gym.drift import main as diff_tools

            return diff_tools(rest)
        if command in JOBS:
            return _hydra(command, rest)
    except SystemExit as e:  # argparse, Hydra and interrupted jobs exit this way
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        return INTERRUPTED
    print(f"mcp-gym: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
