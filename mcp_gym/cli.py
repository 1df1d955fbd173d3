"""The ``mcp-gym`` command.

Jobs, configured with Hydra (the package ``mcp_gym.conf``, folder ``conf/``; overrides and ``-m``
multirun work as usual)::

    mcp-gym demo                                         # end-to-end: collect, evaluate, export SFT (offline)
    mcp-gym collect env=sql policy=random episodes=200   # record episodes to runs/collect/SQL-random
    mcp-gym eval env=counter policy=oracle samples=8     # success, pass@k, errors, latency; report and plots
    mcp-gym eval policy=openai policy.model=Qwen/Qwen3-8B policy.base_url=http://127.0.0.1:8000/v1
    mcp-gym export-sft 'runs=[runs/collect/SQL-oracle]' out=data/sql-sft
    mcp-gym collect -m policy=random,oracle              # one run per combination
    mcp-gym collect --cfg job                            # show the composed config
    mcp-gym tasks validate env=custom '+env.servers.x="cmd"' env.tasks=tasks.jsonl  # reference solutions pass?
    mcp-gym tasks import mcpmark ~/mcpmark --out bench  # MCPMark's filesystem tasks (a local checkout) as a task file
    mcp-gym tasks generate env=custom '+env.servers.x="cmd {workspace}"' n=50 out=gen  # tasks checked by running them
    mcp-gym envs list                                    # bundled and installed envs (mcp_gym.envs.packages)
    mcp-gym envs new demo-env --dir ~/src                # scaffold an installable env package

Servers::

    mcp-gym serve sql --transport http --port 8000       # a bundled server over stdio or Streamable HTTP
    mcp-gym inspect "npx -y @modelcontextprotocol/server-everything stdio"
    mcp-gym inspect http://127.0.0.1:8000/mcp            # tools, resources and prompts of any MCP server
    mcp-gym inspect sse+https://host/sse --header "Authorization: Bearer $TOKEN"  # older HTTP+SSE, with a header
    mcp-gym serve --replay runs/x/cassettes/memory.jsonl # a recorded cassette as a server (mcp_gym.cassette)
    mcp-gym serve-openenv Counter --port 8000            # an env as an OpenEnv server (mcp_gym.openenv)
    mcp-gym diff-tools runs/2026-11 runs/2026-12         # tool-catalogue drift (mcp_gym.drift)

Looking at runs::

    mcp-gym view runs/eval/Counter-oracle                # a static HTML report: episodes, steps, plots (offline)
    mcp-gym view RUN_A RUN_B --out compare.html          # several runs side by side by task (mcp_gym.viewer)

Rerunning an interrupted ``collect``/``eval``/``demo`` resumes it; with more ``episodes``/``samples`` it extends the
run. A rerun with another config into the same ``out`` refuses in one line (exit status 2). Exit status 130 after
Ctrl-C.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import stat
import sys
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from mcp_gym._terminal import json_printable, printable

__all__ = ["main", "run"]

JOBS = {"collect": "collect", "eval": "eval", "export-sft": "export_sft", "demo": "demo",
        "tasks-validate": "validate_tasks", "tasks-generate": "generate_tasks"}
"""Command -> option of the ``job`` config group."""
INTERRUPTED = 130
REFUSED = 2
"""Exit status of a job that refused to run (e.g. a rerun into a run directory of another config)."""
HIDDEN_NOTE = "(hidden: mcp-gym episode control)"
"""How ``mcp-gym inspect`` marks the hidden episode-control tools (``mcp_gym_reset``/``mcp_gym_state``)."""


def _usage() -> str:
    body = (__doc__ or "").split("\n", 2)[2].replace("``", "").replace("::", ":")
    commands = [c for c in JOBS if not c.startswith("tasks-")]
    names = [*commands, "tasks validate", "tasks generate", "tasks import", "serve", "serve-openenv", "inspect",
             "diff-tools", "view", "envs list", "envs new"]
    return f"usage: mcp-gym {{{','.join(names)}}} [arguments]\n\n{body}"


# -- Hydra jobs -------------------------------------------------------------------------------------------------------
class KeepHydraFiles:
    """Hydra callback: snapshot the run directory's ``.hydra/*.yaml`` before Hydra rewrites them, so that a job that
    refuses the directory (another config's run) puts them back and they keep describing the recorded episodes.

    Registered in ``conf/config.yaml`` (``hydra.callbacks``); Hydra instantiates it and calls ``on_run_start``.
    """

    saved: ClassVar[tuple[Path, dict[Path, bytes]] | None] = None
    WRITTEN: ClassVar[tuple[str, ...]] = ("config.yaml", "hydra.yaml", "overrides.yaml")
    """The names Hydra writes (``open(..., "w")``, through whatever is there) in its output subdirectory."""
    LIMIT: ClassVar[int] = 64 << 20
    """Bytes of one ``.hydra/*.yaml`` snapshot at most (a larger file is not snapshotted)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Read the files Hydra is about to overwrite; first replace what Hydra would write through (the run
        directory may be someone else's: a link at one of its names, or at the folder, leads to a file of yours)."""
        subdir = config.hydra.output_subdir
        if subdir is None:
            KeepHydraFiles.saved = None
            return
        folder = Path(str(config.hydra.run.dir)) / str(subdir)
        _unlink_written_through(folder, self.WRITTEN)
        KeepHydraFiles.saved = (folder, _snapshot(folder, self.LIMIT))

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """Mask the secrets in the ``.hydra/*.yaml`` files Hydra just wrote (a key given on the command line)."""
        from mcp_gym.jobs._hydra_files import redact_hydra_files

        if config.hydra.output_subdir is not None:
            redact_hydra_files(Path(str(config.hydra.runtime.output_dir)) / str(config.hydra.output_subdir),
                               self.WRITTEN)

    def __getattr__(self, name: str) -> Any:  # Hydra calls every on_* hook of a callback
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    @classmethod
    def restore(cls) -> None:
        """Put back the snapshot (files Hydra added are removed)."""
        if cls.saved is None:
            return
        folder, files = cls.saved
        cls.saved = None
        for p in folder.glob("*.yaml"):
            if p not in files:
                p.unlink()
        for p, data in files.items():
            p.write_bytes(data)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _unlink_written_through(folder: Path, names: Sequence[str]) -> None:
    """Remove (never follow) what a write to ``folder/name`` would go through: ``folder`` as a symlink or other
    non-folder, and a symlink, pipe, device or file with other names (a hard link) at each of ``names``. One line on
    stderr names each."""
    def drop(p: Path, why: str) -> None:
        print(printable(f"mcp-gym: {p} is {why}: replaced, never written through"), file=sys.stderr)
        p.unlink()

    try:
        st = folder.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        drop(folder, "a symlink" if stat.S_ISLNK(st.st_mode) else "not a folder")
        return
    for name in names:
        p = folder / name
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            drop(p, "a symlink")
        elif not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            drop(p, "not a regular file")
        elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            drop(p, f"a file with {st.st_nlink} names (a hard link)")


def _snapshot(folder: Path, limit: int) -> dict[Path, bytes]:
    """The regular files ``folder/*.yaml`` with one name and at most ``limit`` bytes, read without following a link
    or blocking on a pipe."""
    out: dict[Path, bytes] = {}
    if folder.is_symlink() or not folder.is_dir():
        return out
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    for p in folder.glob("*.yaml"):
        try:
            fd = os.open(p, flags)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= limit:
                out[p] = f.read(limit + 1)[:limit]
    return out


def _run_job(cfg: Any) -> None:
    """The Hydra task: run the job the config's ``command`` names, in Hydra's output directory."""
    from hydra.core.hydra_config import HydraConfig

    from mcp_gym import jobs
    from mcp_gym.jobs import _ctrl_c as ctrl_c
    from mcp_gym.jobs._early import start_early_servers, stop_early_servers
    from mcp_gym.jobs.identity import JobRefused
    from mcp_gym.jobs.schema import ConfigError, check_job_config
    from mcp_gym.tasks import TaskDataError

    out = Path(HydraConfig.get().runtime.output_dir)
    ctrl_c.keep()  # a Ctrl-C that C code drops (pydantic-core, a gc callback) is sent again, or still ends the job
    try:
        check_job_config(cfg)  # first: a key of the wrong type, or an unknown one (+episods=5), is refused
        start_early_servers(cfg)  # the first {workspace} servers boot while the job imports and plans
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
        elif cfg.command == "tasks-validate":
            from mcp_gym.jobs.validate import validate_tasks

            checks = validate_tasks(cfg, out)
            if any(c.status in ("failed", "error") for c in checks):
                raise SystemExit(1)
        elif cfg.command == "tasks-generate":
            from mcp_gym.jobs.generate import generate_tasks

            generate_tasks(cfg, out)
        else:
            raise ValueError(f"unknown command {cfg.command!r}")
    except jobs.JobInterrupted as e:
        print(printable(e), file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
    except KeyboardInterrupt:  # outside the episodes (e.g. in set-up, its first servers booting: stopped below)
        print("\nInterrupted; rerun the same command to resume", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
    except (JobRefused, TaskDataError, ConfigError) as e:  # one line, no traceback (HYDRA_FULL_ERROR=1 shows it)
        # .hydra/ keeps describing the directory's own episodes (the class Hydra instantiated: under
        # `python -m mcp_gym.cli` this module is __main__, not mcp_gym.cli)
        importlib.import_module("mcp_gym.cli").KeepHydraFiles.restore()
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(printable(f"mcp-gym {cfg.command.replace('tasks-', 'tasks ')}: {e}"), file=sys.stderr)  # as typed
        raise SystemExit(REFUSED) from None
    except Exception as e:
        if _is_ctrl_c(e):  # a Ctrl-C that became another error on its way up: still a Ctrl-C (exit status 130)
            print(f"\nInterrupted ({type(e).__name__} on the way); rerun the same command to resume", file=sys.stderr)
            raise SystemExit(INTERRUPTED) from None
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or not isinstance(e, jobs.JobFailed) and not _is_user_error(e):
            raise
        print(printable(f"mcp-gym {cfg.command.replace('tasks-', 'tasks ')}: {e}"), file=sys.stderr)  # one line
        raise SystemExit(1) from None
    else:
        if ctrl_c.lost():  # a Ctrl-C dropped by C code (pydantic-core, a gc callback) and not seen again: it stands
            print("\nInterrupted (a Ctrl-C was dropped on the way); rerun the same command to resume", file=sys.stderr)
            raise SystemExit(INTERRUPTED)
    finally:
        ctrl_c.release()
        stop_early_servers()  # the ones no env took (none outlives the job)
        if (checkers := sys.modules.get("mcp_gym.envs.bfcl.forked")) is not None:
            checkers.close_all()  # BFCL's checker processes (tasks validate, eval)


def _log_own_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` for jobs: mcp-gym's own warnings (a server unavailable) become one line of their
    module's logger (on stderr), not a source dump; other warnings go to ``show``."""

    def showwarning(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if category.__module__.startswith("mcp_gym."):
            logging.getLogger(category.__module__).warning("%s", message)
        else:
            show(message, category, *args, **kwargs)

    return showwarning


def _is_ctrl_c(e: BaseException) -> bool:
    """``e`` is a Ctrl-C turned into another error: raised while a ``KeyboardInterrupt`` was handled (a clean-up that
    failed) or from one, or pydantic-core's ``SchemaError`` naming one (a Ctrl-C while a model class is built, e.g.
    during an import of the MCP types: pydantic-core wraps the interrupt in the error's text, with no cause)."""
    seen: set[int] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, KeyboardInterrupt):
            return True
        if type(x).__name__ == "SchemaError" and type(x).__module__.startswith("pydantic_core") and \
                "KeyboardInterrupt" in str(x):
            return True
        if isinstance(members := getattr(x, "exceptions", None), (list, tuple)):  # an exception group's
            todo += [m for m in members if isinstance(m, BaseException)]
        todo += [c for c in (x.__cause__, x.__context__) if c is not None]
    return False


def _is_user_error(e: BaseException) -> bool:
    """A missing run or file, an unreachable endpoint, a refused shard or run file: errors whose message says all (no
    traceback needed)."""
    import httpx2

    from mcp_gym.recording._contained import RunFileRefused
    from mcp_gym.recording.shards import ShardRefused

    return isinstance(e, (FileNotFoundError, NotADirectoryError, ConnectionError, httpx2.TransportError, ShardRefused,
                          RunFileRefused))  # a run's file refused (a WAL segment too big, a link out): one line


def _job(command: str, args: Sequence[str]) -> int:
    """A job command: ``--help``/``-h`` prints its keys (mcp_gym.conf.help), anything else goes to Hydra."""
    if "--help" in args or "-h" in args:
        from mcp_gym.conf.help import job_help

        name = command.replace("-", " ", 1) if command.startswith("tasks-") else command
        print(job_help(name, JOBS[command], [a for a in args if not a.startswith("-")]))
        return 0
    return _hydra(command, args)


def _hydra(command: str, overrides: Sequence[str]) -> int:
    """Run a job through ``hydra.main`` (Hydra's flags, overrides, output directory, callbacks, logging, multirun and
    ``--experimental-rerun`` all work), on ``overrides``.

    ``hydra.main`` reads its arguments from ``sys.argv`` (Hydra has no public entry point for a run from an argument
    list: the compose API makes configs, not runs), so ``sys.argv`` is ``["mcp-gym COMMAND", *args]`` while Hydra
    parses and sets up; the job itself sees the caller's ``sys.argv``, which is restored when Hydra returns (Hydra's
    singleton is cleared before and after)."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    args = list(overrides)
    # The job choice goes just before the first override, keeping the overrides one block (argparse needs that).
    first = next((i for i, a in enumerate(args) if not a.startswith("-") and ("=" in a or a[:1] in "~+")), len(args))
    if "--hydra-help" not in args:  # Hydra's own help composes without the job group
        args.insert(first, f"job={JOBS[command]}")
    callers = sys.argv

    def job(cfg: Any) -> None:
        hydras, sys.argv = sys.argv, callers  # the job sees the caller's command line
        try:
            _run_job(cfg)
        finally:
            sys.argv = hydras

    GlobalHydra.instance().clear()
    from mcp_gym.envs.packages import register_env_configs

    register_env_configs()  # env=NAME for installed env packages
    run = hydra.main(version_base="1.3", config_path="pkg://mcp_gym.conf", config_name="config")(job)
    sys.argv = [f"mcp-gym {command}", *args]  # argparse's program name: Hydra's usage and error lines
    try:
        with warnings.catch_warnings():  # restores showwarning
            warnings.showwarning = _log_own_warnings(warnings.showwarning)
            run()
    finally:
        sys.argv = callers
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
    p.add_argument("--port", type=int, default=8000, help="HTTP port (0: any free one; the line said once the server "
                                                          "listens names it)")
    p.add_argument("--json-response", action="store_true", help="plain JSON responses over HTTP (no SSE)")
    a = p.parse_args(argv)
    if (a.name is None) == (a.replay is None):
        p.error("give a server name or --replay CASSETTE")
    if a.replay is not None:
        from mcp_gym.cassette.serve import serve_replay

        serve_replay(a.replay, a.transport, a.host, a.port, strict=a.strict, json_response=a.json_response)
        return 0
    name = a.name
    from mcp_gym.envs.packages import installed_env

    if name not in BUNDLED_SERVERS and installed_env(name) is None:  # an installed env's server goes by its name
        from mcp_gym.envs import env_module

        name = env_module(name).SERVER
    serve(name, a.transport, a.host, a.port, a.json_response)
    return 0


def _serve_openenv(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="mcp-gym serve-openenv",
                                description="Serve an env as an OpenEnv environment server (WebSocket /ws, MCP tool "
                                            "actions; needs the [openenv] extra).")
    p.add_argument("env", help="a bundled env (Counter, SQL, ...) or package.module:function returning an MCPEnv")
    p.add_argument("--env-kwargs", default="{}", metavar="JSON", help="make_env / factory keyword arguments")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: any free port (the line said once it listens names it)")
    p.add_argument("--max-sessions", type=int, default=64, help="most WebSocket sessions at once")
    p.add_argument("--record-to", metavar="DIR", help="record every session's episodes into this run directory")
    p.add_argument("--policy", default="openenv", help="the recorded policy name")
    p.add_argument("--token", default=os.environ.get("MCP_GYM_OPENENV_TOKEN"),
                   help="bearer token every request must carry (default: $MCP_GYM_OPENENV_TOKEN; set it when --host "
                        "is not a loopback address)")
    p.add_argument("--idle-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="close a session idle this long and free its slot (default 300; 0: never)")
    a = p.parse_args(argv)
    try:
        env_kwargs = json.loads(a.env_kwargs)
    except ValueError as e:
        p.error(f"--env-kwargs is not JSON: {e}")
    if not isinstance(env_kwargs, dict):
        p.error("--env-kwargs must be a JSON object")
    if not a.idle_timeout >= 0:
        p.error("--idle-timeout must be 0 (never) or a positive number of seconds")
    print(f"mcp-gym serve-openenv: starting {a.env} (a line follows when it listens)", file=sys.stderr, flush=True)
    try:
        from mcp_gym.openenv import create_app
    except ImportError as e:
        print(f"mcp-gym serve-openenv: {e}", file=sys.stderr)
        return 2
    from mcp_gym.serverkit import LOCAL_HOSTS, serve_http

    if a.host not in LOCAL_HOSTS and not a.token:
        print(f"mcp-gym serve-openenv: warning: {a.host} is not a loopback address and no --token is set: anyone who "
              "reaches the port can drive sessions", file=sys.stderr, flush=True)
    app = create_app(a.env, env_kwargs=env_kwargs, max_sessions=a.max_sessions, record_to=a.record_to,
                     policy=a.policy, host=a.host, token=a.token, idle_timeout=a.idle_timeout or None)

    def listening(port: int) -> None:
        print(f"serving {a.env} as an OpenEnv environment on ws://{a.host}:{port}/ws (http://{a.host}:{port})",
              file=sys.stderr, flush=True)

    serve_http(app, a.host, a.port, ready=listening)
    return 0


# -- inspect ----------------------------------------------------------------------------------------------------------
def _spec(target: str, timeout: float, header_lines: Sequence[str] = ()) -> Any:
    from mcp_gym.client.specs import Stdio, parse_server

    if target.endswith(".jsonl") and Path(target).is_file():  # a cassette: inspect its replay server
        return Stdio.python_module("mcp_gym.cli", "serve", "--replay", str(Path(target).resolve()),
                                   connect_timeout=timeout)

    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ValueError("--header needs 'Name: value' (the value is not shown: it may be a secret)")
        headers[name.strip()] = value.strip()
    return parse_server(target, inherit_env=True, connect_timeout=timeout, headers=headers or None)


async def _describe_server(spec: Any) -> dict[str, Any]:
    """Everything a server lists: its info, tools, resources, resource templates and prompts (JSON-able)."""
    from mcp_gym.client.connection import ServerConnection
    from mcp_gym.client.runtime import default_runtime
    from mcp_gym.protocol import HIDDEN_TOOLS

    conn = ServerConnection("server", spec)
    await conn.start(default_runtime().task_group)
    try:
        if conn.status != "ready":
            raise RuntimeError(f"could not connect to {spec.describe()}: {conn.error}")
        caps = conn.capabilities
        unavailable: dict[str, str] = {}

        async def listing(key: str, fetch: Callable[[], Awaitable[Sequence[Any]]]) -> list[dict[str, Any]]:
            # A server may declare a capability yet refuse one of its listings ("method not found" for
            # resources/templates/list, a replay server without that listing recorded): note it, list the rest.
            try:
                items = await fetch()
            except Exception as e:  # noqa: BLE001 - any refusal of one listing is reported, not raised
                unavailable[key] = _first_line(str(e) or type(e).__name__, 200)
                return []
            return [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items]

        async def prompts() -> Sequence[Any]:
            if caps is None or caps.prompts is None:
                return []
            return (await conn.request(lambda c: c.list_prompts(cache_mode="bypass"), method="prompts/list")).prompts

        d: dict[str, Any] = {"server": conn.info(), "tools": await listing("tools", conn.list_tools),
                             "resources": await listing("resources", conn.list_resources),
                             "resource_templates": await listing("resource_templates", conn.list_resource_templates),
                             "prompts": await listing("prompts", prompts)}
        for t in d["tools"]:
            if t.get("name") in HIDDEN_TOOLS:
                t["hidden"] = True
        d["unavailable"] = unavailable
        return d
    finally:
        await conn.close()


def _first_line(text: str | None, width: int = 80) -> str:
    line = (text or "").strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 1] + "…"


def _print_server(d: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from mcp_gym._terminal import markup_safe, plain

    console = Console()
    s = d["server"]  # everything a server lists is its own text: shown plain, control characters escaped
    console.print(f"[bold]{markup_safe(s['name'] or '?')}[/bold] {markup_safe(s['version'] or '')}  protocol "
                  f"{markup_safe(s['protocol_version'])}  ({s['transport']}: {markup_safe(s['target'])})",
                  soft_wrap=True)  # one line at any width (a pipe's console is 80 columns)
    tools = Table(title=f"Tools ({len(d['tools'])})", title_justify="left")
    for col in ("name", "arguments (* required)", "description", "hints"):
        tools.add_column(col, overflow="fold")
    for t in d["tools"]:
        schema = t.get("inputSchema") or {}
        required = set(schema.get("required") or ())
        args = ", ".join(f"{k}{'*' if k in required else ''}: {_arg_type(v)}"
                         for k, v in (schema.get("properties") or {}).items())
        hints = ", ".join(k.removesuffix("Hint") for k, v in (t.get("annotations") or {}).items()
                          if k.endswith("Hint") and v)
        name = t["name"] + (f" {HIDDEN_NOTE}" if t.get("hidden") else "")
        tools.add_row(plain(name), plain(args), plain(_first_line(t.get("description"))), plain(hints))
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
            table.add_row(*map(plain, cells))
        console.print(table)
    for key, why in (d.get("unavailable") or {}).items():
        console.print(plain(f"{key.replace('_', ' ')}: not listed by the server ({why})"))


def _arg_type(schema: Any, depth: int = 0) -> str:
    """An argument's type as ``inspect`` shows it: ``string``, ``boolean|string`` (a list of types), ``Settings`` (a
    ``$ref``), ``integer|null`` (``anyOf``/``oneOf``), ``enum``, ``array``; ``any`` when the schema says nothing."""
    if not isinstance(schema, dict) or depth > 3:
        return "any"
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and kind:
        return "|".join(str(k) for k in kind)
    if isinstance(schema.get("$ref"), str):
        return schema["$ref"].rsplit("/", 1)[-1] or "any"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return "|".join(dict.fromkeys(_arg_type(b, depth + 1) for b in schema[key]))
    if "enum" in schema:
        return "enum"
    return "any"


def _inspect(argv: Sequence[str]) -> int:
    from mcp_gym.client.runtime import default_runtime

    p = argparse.ArgumentParser(prog="mcp-gym inspect", description="List what any MCP server offers.")
    p.add_argument("server", help='a command line in one argument ("npx -y pkg stdio"), an http(s):// URL (Streamable '
                   'HTTP) or sse+http(s):// (the older HTTP+SSE transport)')
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="an HTTP header for a URL server (repeatable), e.g. 'Authorization: Bearer $TOKEN'")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to connect")
    a = p.parse_args(argv)
    try:
        d = default_runtime().call(_describe_server, _spec(a.server, a.timeout, a.header))
    except (RuntimeError, ValueError) as e:
        print(printable(f"mcp-gym inspect: {e}"), file=sys.stderr)
        return 1
    if a.json:
        print(json_printable(d, indent=1))  # the server's text: control characters as JSON escapes
    else:
        _print_server(d)
    return 0


# -- entry point ------------------------------------------------------------------------------------------------------
TASKS_HELP = """usage: mcp-gym tasks COMMAND ...

  validate env=... [overrides]          play every task's reference solution and grade it (a task set's self-test)
  generate env=... generator=explore|llm n=N out=DIR [overrides]
                                        tasks for any MCP server, each kept only when running it proves it
  import mcpmark PATH --states DIR      MCPMark's filesystem tasks from a local checkout, as a task file
  import bfcl PATH --out DIR            BFCL's multi-turn categories from a local copy, one task file each

Each command's own --help says more (e.g. mcp-gym tasks generate --help, mcp-gym tasks import bfcl --help)."""
"""What ``mcp-gym tasks`` (or ``tasks --help``) prints."""


def _not_dumpable() -> None:
    """Make this process non-dumpable (Linux ``PR_SET_DUMPABLE`` 0): its ``/proc/<pid>/environ`` and memory become
    root's to read, so a child running as this user (a server, a benchmark's verify.py, BFCL's checker), given a
    minimal environment, cannot read the user's API keys from its parent's instead (round 9). Children start
    dumpable again (``execve``); a child running as root reads it anyway. ``MCP_GYM_DUMPABLE=1`` keeps the process
    dumpable (core dumps, a debugger attaching as the same user)."""
    if sys.platform != "linux" or os.environ.get("MCP_GYM_DUMPABLE") == "1":
        return
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # no prctl (another libc): nothing more to do
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mcp-gym <command> ...``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] in ("--version", "-V", "version"):
        from mcp_gym._version import __version__

        print(f"mcp-gym {__version__}")
        return 0
    command, rest = args[0], args[1:]
    _not_dumpable()
    try:
        if command == "serve":
            return _serve(rest)
        if command == "serve-openenv":
            return _serve_openenv(rest)
        if command == "inspect":
            return _inspect(rest)
        if command == "view":
            from mcp_gym.viewer import main as view

            return view(rest)
        if command == "diff-tools":
            from mcp_gym.drift import main as diff_tools

            return diff_tools(rest)
        if command == "envs":
            from mcp_gym.envs.packages import main as envs

            return envs(rest)
        if command == "tasks":
            if rest[:2] == ["import", "bfcl"]:
                from mcp_gym.jobs.bfcl import main as import_bfcl

                return import_bfcl(rest[2:])
            if rest[:1] == ["import"] and (rest[1:2] in ([], ["-h"], ["--help"], ["help"])):
                # which benchmarks there are: mcpmark's own parser knows only itself (it listed {mcpmark} alone)
                lines = [ln for ln in TASKS_HELP.splitlines() if ln.lstrip().startswith("import ")]
                page = "usage: mcp-gym tasks import {mcpmark,bfcl} PATH ...\n\n" + "\n".join(lines) + \
                    "\n\nmcp-gym tasks import mcpmark --help and mcp-gym tasks import bfcl --help say more."
                print(page, file=sys.stdout if len(rest) > 1 else sys.stderr)
                return 0 if len(rest) > 1 else 2
            if rest and rest[0] == "import":
                from mcp_gym.jobs.mcpmark import main as import_tasks

                return import_tasks(rest[1:])
            if rest and rest[0] == "generate":
                return _job("tasks-generate", rest[1:])
            if not rest or rest[0] != "validate":
                asked = rest[:1] in (["--help"], ["-h"], ["help"])
                print(TASKS_HELP, file=sys.stdout if asked else sys.stderr)
                return 0 if asked else 2
            return _job("tasks-validate", rest[1:])
        if command in JOBS and not command.startswith("tasks-"):
            return _job(command, rest)
    except SystemExit as e:  # argparse, Hydra and interrupted jobs exit this way
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as e:
        if _is_ctrl_c(e):  # e.g. in an import before the job (see _is_ctrl_c)
            print(f"\nInterrupted ({type(e).__name__} on the way)", file=sys.stderr)
            return INTERRUPTED
        raise
    print(f"mcp-gym: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
    return 2


def run() -> None:
    """The ``mcp-gym`` program: :func:`main`, then the process exits with its status, without a last garbage
    collection over everything the job imported (``gc.freeze()``: that collection took ~0.5 s at the end of every job).
    Every file is written and closed by then; ``atexit`` handlers and the joins of threads still run."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
