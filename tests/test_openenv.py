"""OpenEnv face (mcp_gym.openenv, ``mcp-gym serve-openenv``): OpenEnv's own clients (``MCPToolClient``,
``GenericEnvClient``) drive mcp-gym envs over the server's WebSocket, a session per connection, many at once; a
scripted policy reaches the same success and the same recorded episode as the same calls through ``MCPEnv``
directly, on bundled envs and on server-everything."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import serve_in_thread, start_server
from episodes import per_task_tools_env, recorded_episode

from mcp_gym import MCPEnv, Stdio, make_env
from mcp_gym.recording import RecordTrajectories

if importlib.util.find_spec("openenv") is None or importlib.util.find_spec("openenv.core") is None:
    pytest.skip("needs the [openenv] extra (pip install 'mcp-gym[openenv]')", allow_module_level=True)

pytestmark = pytest.mark.openenv


@pytest.fixture(autouse=True, scope="module")
def _openenv_imported() -> None:
    """Import OpenEnv (~5 s of CPU: its web interface brings gradio) when this module's first test runs, not when
    pytest collects the module: an xdist worker that runs none of these tests never pays it."""
    global CallToolAction, GenericEnvClient, MCPToolClient, create_app
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.generic_client import GenericEnvClient
    from openenv.core.mcp_client import MCPToolClient

    from mcp_gym.openenv import create_app

MAZE_CALLS = [("look", {}, "I look first."), ("move", {"direction": "up"}, ""), ("move", {"direction": "sideways"}, ""),
              ("nope", {}, ""), ("move", {"direction": "down"}, "Down."), ("submit", {"answer": "x"}, "")]
COUNTER_CALLS = [("get_count", {}, ""), ("add", {"amount": 5}, ""), ("add", {"amount": 4}, "")]
SUM_TASK = {"id": "sum-3-4", "prompt": "Add 3 and 4 with the tools, then submit the sum.", "answer": "7"}
SUM_CALLS = [("echo", {"message": "start"}, ""), ("get-sum", {"a": 3, "b": 4}, ""), ("submit", {"answer": "7"}, "")]
Calls = list[tuple[str, dict[str, Any], str]]


def everything_env() -> MCPEnv:
    from conftest import npm_bin

    return MCPEnv({"everything": Stdio(npm_bin("mcp-server-everything"), ["stdio"])}, [SUM_TASK], call_timeout=10.0,
                  env_id="everything")


def extras(k: int, text: str) -> dict[str, Any]:
    """What a model-driven client sends along with its k-th call (recorded with the step)."""
    return {"raw_text": f"reply {k}", "parse_status": "ok", "turn": k, "assistant_content": text}


def run_direct(make: Callable[[], MCPEnv], task_id: str, calls: Calls, run: Path, texts: bool = False) -> None:
    """The same calls through ``MCPEnv`` directly, recorded (``texts``: with the model texts of :func:`extras`)."""
    env = RecordTrajectories(make(), run)
    try:
        env.reset(seed=5, options={"task_id": task_id})
        for k, (tool, args, text) in enumerate(calls):
            if any(env.step({"tool": tool, "arguments": args, **(extras(k, text) if texts else {})})[2:4]):
                break
    finally:
        env.close()


class Server:
    """An mcp-gym OpenEnv server on 127.0.0.1 in a thread (uvicorn), stopped by :meth:`stop`."""

    def __init__(self, env: Any, **options: Any) -> None:
        self.serving = contextlib.ExitStack()
        self.port, _ = self.serving.enter_context(serve_in_thread(create_app(env, **options), log_level="critical"))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.serving.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(env: Any, **options: Any) -> Server:
        servers.append(Server(env, **options))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


async def play(url: str, task_id: str | None, calls: Calls) -> tuple[Any, list[Any]]:
    """OpenEnv's MCPToolClient: reset on the task, list the tools, step each call until done (it sends no action
    metadata)."""
    async with MCPToolClient(base_url=url) as client:
        reset = await client.reset(task_id=task_id, seed=5)
        assert {t.name for t in await client.list_tools()} >= {c[0] for c in calls} - {"nope"}
        steps = []
        for tool, args, _ in calls:
            steps.append(await client.step(CallToolAction(tool_name=tool, arguments=args)))
            if steps[-1].done:
                break
        return reset, steps


@pytest.mark.parametrize(("name", "task_id", "calls"), [("Maze", "maze-5x5-0000", MAZE_CALLS),
                                                         ("Counter", "counter-0000", COUNTER_CALLS)])
def test_bundled_env_plays_and_records_like_mcpenv(name: str, task_id: str, calls: Calls, tmp_path: Path,
                                                   serve: Callable[..., Server]) -> None:
    run_direct(lambda: make_env(name), task_id, calls, tmp_path / "direct")
    server = serve(name, record_to=str(tmp_path / "openenv"))
    _, steps = asyncio.run(play(server.url, task_id, calls))
    server.stop()  # the sessions are closed: the run is complete
    direct, served = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "openenv")
    assert served == direct  # messages, tool calls, rewards, success, recorded model texts
    assert [s.reward for s in steps] == [s["reward"] for s in direct["steps"]]
    assert steps[-1].done and not any(s.done for s in steps[:-1])
    assert [m["content"] for m in direct["messages"] if m["role"] == "tool"] == [s.observation.result
                                                                                 for s in steps][:-1]
    if name == "Maze":  # refused calls are OpenEnv ToolErrors; the step still counts
        assert [s.observation.error.error_type.value if s.observation.error else None for s in steps] == [
            None, None, "invalid_args", "tool_not_found", None, None]


@pytest.mark.thirdparty
def test_server_everything_plays_and_records_like_mcpenv(tmp_path: Path, serve: Callable[..., Server]) -> None:
    run_direct(everything_env, SUM_TASK["id"], SUM_CALLS, tmp_path / "direct", texts=True)
    server = serve(everything_env, record_to=str(tmp_path / "openenv"))

    async def go() -> list[Any]:  # OpenEnv's GenericEnvClient: plain dicts, every field of the observations
        async with GenericEnvClient(base_url=server.url) as client:
            reset = await client.reset(prompt=SUM_TASK["prompt"], seed=5)  # the task picked by its prompt
            assert reset.observation["task_id"] == SUM_TASK["id"]
            assert reset.observation["messages"][-1] == {"role": "user", "content": SUM_TASK["prompt"]}
            assert [t["function"]["name"] for t in reset.observation["tool_schemas"]][-1] == "submit"
            return [await client.step({"type": "call_tool", "tool_name": tool, "arguments": args,
                                       "metadata": extras(k, text)}) for k, (tool, args, text) in enumerate(SUM_CALLS)]

    steps = asyncio.run(go())
    server.stop()
    direct, served = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "openenv")
    assert served == direct  # with the model texts the client sent in the actions' metadata
    assert [s["raw_text"] for s in served["steps"]] == ["reply 0", "reply 1", "reply 2"]
    assert direct["success"] is True and steps[-1].done
    assert steps[-1].observation["success"] is True and steps[-1].observation["termination"] == "submit"
    assert steps[1].observation["result"] == "The sum of 3 and 4 is 7."
    assert steps[-1].observation["episode_return"] == pytest.approx(direct["total_reward"])


def test_many_sessions_at_once(tmp_path: Path, serve: Callable[..., Server]) -> None:
    """Each WebSocket connection is its own episode: concurrent clients on different tasks do not see each other."""
    from mcp_gym.envs import load_env_tasks

    tasks = load_env_tasks("Counter", None, 0)[:6]
    server = serve("Counter", record_to=str(tmp_path / "run"), max_sessions=6)

    async def one(task: Any) -> tuple[str, bool, str]:
        async with MCPToolClient(base_url=server.url) as client:
            await client.reset(task_id=task.id)
            for call in task.solution:
                result = await client.step(CallToolAction(tool_name=call["tool"], arguments=call["arguments"]))
                if result.done:
                    break
            state = await client.state()
            return state.episode_id, result.done, task.id

    async def all_at_once() -> list[tuple[str, bool, str]]:
        return list(await asyncio.gather(*(one(t) for t in tasks)))

    out = asyncio.run(all_at_once())
    server.stop()
    assert all(done for _, done, _ in out) and len({ep for ep, _, _ in out}) == len(tasks)
    from mcp_gym.recording import load

    episodes = load(tmp_path / "run").episodes
    assert sorted(episodes["task_id"]) == sorted(t.id for t in tasks)
    assert all(episodes["success"]) and set(episodes["policy"]) == {"openenv"}


@pytest.mark.slow
def test_serve_openenv_command(tmp_path: Path) -> None:
    """``mcp-gym serve-openenv ENV`` serves the env; OpenEnv's client plays an episode; bad arguments are named."""
    import os

    proc = subprocess.Popen([sys.executable, "-m", "mcp_gym.cli", "serve-openenv", "Counter", "--port", "0",
                             "--env-kwargs", '{"max_steps": 2}', "--record-to", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MCP_GYM_OPENENV_TOKEN": "t0ken"})
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # said at once, before the slow start-up: a first client knows to wait
        assert first.startswith("mcp-gym serve-openenv: starting Counter"), first
        listening = proc.stderr.readline()  # said once it listens, naming the port it got for --port 0
        found = re.search(r"ws://127\.0\.0\.1:(\d+)/ws \(http://127\.0\.0\.1:(\d+)\)$", listening.strip())
        assert found and found[1] == found[2] != "0", listening
        port = int(found[1])
        assert _http(f"http://127.0.0.1:{port}/health", None)[0] == 401  # the token from the environment

        async def go() -> Any:
            async with MCPToolClient(base_url=f"http://openenv:t0ken@127.0.0.1:{port}") as client:
                await client.reset(task_id="counter-0000")
                await client.step(CallToolAction(tool_name="add", arguments={"amount": 1}))
                return await client.step(CallToolAction(tool_name="add", arguments={"amount": 1}))

        last = asyncio.run(go())
        assert last.done and last.reward == pytest.approx(-0.01)  # truncated by --env-kwargs' max_steps
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "Exception in ASGI application" not in err  # a client's normal disconnect is not an error
    bad = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "serve-openenv", "Counter", "--env-kwargs", "{x"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--env-kwargs is not JSON" in bad.stderr


def test_tools_before_reset_and_the_http_routes(serve: Callable[..., Server]) -> None:
    """OpenEnv lists tools without a reset (the session starts an episode for it); a call before any reset is refused
    with OpenEnv's error message; ``/schema`` describes the MCP actions and mcp-gym's observation fields."""
    import json
    import urllib.request

    server = serve("Counter")

    async def go() -> tuple[Any, Any]:
        async with GenericEnvClient(base_url=server.url) as client:
            tools = await client.step({"type": "list_tools"})
        async with GenericEnvClient(base_url=server.url) as client:
            try:
                await client.step({"type": "call_tool", "tool_name": "add", "arguments": {"amount": 1}})
            except Exception as e:  # noqa: BLE001 - whatever OpenEnv's client raises for an error message
                return tools, e
        return tools, None

    tools, refused = asyncio.run(go())
    assert [t["name"] for t in tools.observation["tools"]] == ["add", "get_count", "submit"]
    assert refused is not None and "call reset before call_tool" in str(refused)
    with urllib.request.urlopen(f"{server.url}/schema", timeout=30) as r:
        schema = json.loads(r.read())
    assert "tool_name" in schema["action"]["properties"]
    assert {"step_error", "success", "episode_return"} <= set(schema["observation"]["properties"])


def test_sessions_step_on_the_servers_loop_with_no_thread_hop(serve: Callable[..., Server],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions' envs are made on the runtime hosted by the server's event loop, where OpenEnv awaits their
    steps: only the env's making and closing (in OpenEnv's worker thread) cross threads, however many steps."""
    import mcp_gym.client.runtime as runtime_module

    made: list[MCPEnv] = []
    hops: list[Any] = []
    real = asyncio.run_coroutine_threadsafe

    def counted(coro: Any, loop: Any) -> Any:
        hops.append(coro)
        return real(coro, loop)

    def factory() -> MCPEnv:
        made.append(make_env("Counter"))
        return made[-1]

    monkeypatch.setattr(runtime_module.asyncio, "run_coroutine_threadsafe", counted)
    server = serve(factory)
    calls = COUNTER_CALLS * 3
    _, steps = asyncio.run(play(server.url, "counter-0000", calls))
    server.stop()
    assert len(steps) >= 3
    assert len(made) == 1 and made[0].runtime.mode == "hosted" and made[0].runtime.closed  # ended with the server
    assert len(hops) == 2  # the connection at the env's making, and its closing


# -- hostile and careless clients (issue 36, items 3-5) and the first client's view (issue 39) -----------------------
def _children() -> set[int]:
    """This process's live child processes (the stdio servers of the envs it serves)."""
    import os

    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[1]) == me:
                out.add(int(entry))
    return out


def _until(condition: Callable[[], bool], what: str, bound: float = 60.0) -> None:
    """Wait (bounded) for ``condition``, an event the server brings about."""
    import time

    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, f"not within {bound} s: {what}"
        time.sleep(0.1)


def _http(url: str, body: bytes | None = b"{}", **headers: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_close_on_the_runtimes_own_loop_closes() -> None:
    """``MCPEnv.close()`` in async code on its hosted runtime cannot wait: it starts the close there, and a later
    ``aclose()`` waits for it; the env's server process is gone (it used to be marked closed and left running)."""
    from mcp_gym.client.runtime import Runtime

    async def go() -> tuple[set[int], set[int]]:
        rt = await Runtime.hosted()
        with rt.as_default():
            env = make_env("Counter", transport="stdio")
        await env.areset(seed=0)
        running = _children()
        env.close()
        await env.aclose()
        return running, _children()

    before = _children()
    running, after = asyncio.run(go())
    assert running - before and not (running - before) & after


@pytest.mark.slow  # stdio servers; test_close_on_the_runtimes_own_loop_closes checks an env closes its server
def test_stateless_resets_leave_no_server_running(serve: Callable[..., Server]) -> None:
    server = serve("Counter", env_kwargs={"transport": "stdio"})
    before = _children()
    for _ in range(3):  # each reset starts a server of its own: one left running shows
        status, body = _http(f"{server.url}/reset", json.dumps({"task_id": "counter-0000"}).encode())
        assert status == 200, body
    _until(lambda: not (_children() - before), "the 3 stateless envs' servers closed")  # were left running


def test_foreign_origin_and_host_are_refused_as_by_serve_http(serve: Callable[..., Server]) -> None:
    """``serve-openenv`` answers a foreign Origin 403 and a foreign Host 421, over HTTP and on the WebSocket upgrade,
    with the same check as ``mcp-gym serve --transport http``."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    server = serve("Counter")
    mcp, port = start_server([sys.executable, "-m", "mcp_gym.cli", "serve", "counter", "--transport", "http", "--port",
                              "0"], timeout=120)
    try:
        for headers, code in (({"Origin": "http://evil.example"}, 403), ({"Host": "evil.example"}, 421),
                              ({"Host": "rebound.example:80", "Origin": "http://rebound.example"}, 421)):
            theirs = _http(f"http://127.0.0.1:{port}/mcp", **headers)
            ours = _http(f"{server.url}/reset", **headers)
            assert theirs[0] == ours[0] == code and theirs[1] == ours[1], (headers, theirs, ours)
        assert _http(f"{server.url}/reset", Origin=f"http://localhost:{port}")[0] == 200  # a local page may

        async def upgrade(origin: str) -> Any:
            try:
                async with connect(f"ws://127.0.0.1:{server.port}/ws", origin=origin):  # type: ignore[arg-type]
                    return 101
            except InvalidStatus as e:
                return e.response.status_code

        assert asyncio.run(upgrade("http://evil.example")) == 403
        assert asyncio.run(upgrade(f"http://127.0.0.1:{server.port}")) == 101
    finally:
        mcp.terminate()
        mcp.wait(60)


def test_a_token_guards_every_request(serve: Callable[..., Server]) -> None:
    """With a token, requests without it are answered 401 (HTTP and the WebSocket upgrade); OpenEnv's clients carry
    it in the URL (``http://user:TOKEN@host:port``)."""
    server = serve("Counter", token="s3cret")
    assert _http(f"{server.url}/reset")[0] == 401
    assert _http(f"{server.url}/reset", Authorization="Bearer wrong")[0] == 401
    assert _http(f"{server.url}/reset", Authorization="Bearer s3cret")[0] == 200

    async def play(url: str) -> Any:
        async with GenericEnvClient(base_url=url) as client:
            return await client.reset(task_id="counter-0000")

    with pytest.raises(ConnectionError, match="401|403"):
        asyncio.run(play(server.url))
    assert asyncio.run(play(f"http://openenv:s3cret@127.0.0.1:{server.port}")).observation["task_id"] == "counter-0000"


@pytest.mark.slow  # a long openenv integration test (stdio servers, idle timeout)
def test_idle_sessions_are_closed_and_free_their_slots(serve: Callable[..., Server],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """``max_sessions`` idle sockets do not lock new clients out: the server closes a session idle longer than its
    idle timeout (its env's servers stop), a refusal while full says so in one line, and the idle client is told."""
    caplog.set_level("WARNING", logger="mcp_gym.openenv")
    # OpenEnv's reaper looks every max(timeout / 4, 5) = 5 s: a 4 s timeout costs no more wait than 0.5 s did, and the
    # idle client's reset and the refused connection need not follow each other within 0.5 s (a loaded machine)
    server = serve("Counter", env_kwargs={"transport": "stdio"}, max_sessions=1, idle_timeout=4.0)
    before = _children()

    async def go() -> tuple[str, str, Any]:
        idle = GenericEnvClient(base_url=server.url)
        await idle.connect()
        await idle.reset(task_id="counter-0000")
        from websockets.asyncio.client import connect

        async with connect(f"ws://127.0.0.1:{server.port}/ws") as full:  # the server speaks first when it is full
            refused = json.loads(await full.recv())["data"]["message"]
        await asyncio.to_thread(_until, lambda: "closed a session idle" in caplog.text, "the idle session closed")
        await asyncio.to_thread(_until, lambda: not (_children() - before), "its env's servers stopped")
        try:
            await idle.step({"type": "call_tool", "tool_name": "get_count", "arguments": {}})
            told = ""
        except Exception as e:  # noqa: BLE001
            told = str(e)
        await idle.disconnect()
        async with GenericEnvClient(base_url=server.url) as late:
            return refused, told, await late.reset(task_id="counter-0000")

    refused, told, late = asyncio.run(go())
    assert "Server at capacity: 1/1 sessions active" in refused and "\n" not in refused
    assert "session is closed (idle longer than the server's idle timeout, 4 s)" in told
    assert late.observation["task_id"] == "counter-0000"  # a new client gets in


def test_mcpgym_client_reset_returns_the_task_prompt(serve: Callable[..., Server]) -> None:
    """OpenEnv's ``MCPToolClient.reset`` keeps only OpenEnv's fields (no prompt); :class:`MCPGymClient` returns the
    reset's messages (the task prompt) and mcp-gym's step fields."""
    from mcp_gym.envs import load_env_tasks
    from mcp_gym.openenv import MCPGymClient, ResetObservation, StepObservation

    server = serve("Counter")
    prompt = next(t.prompt for t in load_env_tasks("Counter") if t.id == "counter-0000")

    async def go() -> tuple[Any, Any, Any]:
        async with MCPToolClient(base_url=server.url) as plain:
            bare = await plain.reset(task_id="counter-0000")
        async with MCPGymClient(base_url=server.url) as client:
            reset = await client.reset(task_id="counter-0000")
            step = await client.step(CallToolAction(tool_name="add", arguments={"amount": 2}))
        return bare, reset, step

    bare, reset, step = asyncio.run(go())
    assert prompt not in str(bare.observation)  # why MCPGymClient exists
    assert isinstance(reset.observation, ResetObservation) and prompt in reset.observation.messages[-1]["content"]
    assert isinstance(step.observation, StepObservation) and step.observation.step == 1


def test_a_conversation_through_openenv(serve: Callable[..., Server], tmp_path: Path) -> None:
    """A multi-turn task over OpenEnv: ``submit`` ends a user turn and its result is the next user message (not
    done), the tool the turn hook adds is listed for that turn, the last ``submit`` ends the episode graded, and the
    recorded episode carries the user turns."""
    from _turns_server import TASK, grade_turns, make_server

    from mcp_gym import InProcess
    from mcp_gym.openenv import MCPGymClient

    turn1 = TASK.turns[1]["prompt"]
    server = serve(lambda: MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns),
                   record_to=str(tmp_path / "run"))

    async def go() -> tuple[Any, list[Any], list[str], list[str]]:
        async with MCPGymClient(base_url=server.url) as client:
            reset = await client.reset(task_id=TASK.id)
            before = [t.name for t in await client.list_tools()]
            steps = [await client.step(CallToolAction(tool_name="add_note", arguments={"text": "milk"})),
                     await client.step(CallToolAction(tool_name="submit", arguments={"answer": "Added milk."}))]
            after = [t.name for t in await client.list_tools()]
            for tool, args in [("add_note", {"text": "eggs"}), ("count_notes", {}), ("submit", {"answer": "2"})]:
                steps.append(await client.step(CallToolAction(tool_name=tool, arguments=args)))
        return reset, steps, before, after

    reset, steps, before, after = asyncio.run(go())
    assert TASK.prompt in reset.observation.messages[-1]["content"]
    assert "count_notes" not in before and "count_notes" in after
    assert turn1 in str(steps[1].observation.result) and not steps[1].done
    assert [s.done for s in steps] == [False, False, False, False, True]
    assert steps[-1].observation.success is True and steps[-1].reward == 1.0
    from mcp_gym.recording import load

    steps_table = load(tmp_path / "run").steps.to_list()
    assert [(r["tool"], r["user_turn"]) for r in steps_table] == [
        ("add_note", 0), ("submit", 0), ("add_note", 1), ("count_notes", 1), ("submit", 1)]


def test_tools_listed_before_reset_that_the_task_lacks_are_said(serve: Callable[..., Server],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """verifiers' OpenEnv taskset lists the tools before its reset and shows the model that list all episode: when
    the reset's task offers other tools, the server says so in one line (the reset's ``tool_schemas`` are the
    task's); a task with the same tools says nothing."""
    server = serve(per_task_tools_env)

    async def go(pick: Callable[[list[str]], str]) -> tuple[list[str], list[str]]:
        async with GenericEnvClient(base_url=server.url) as client:  # what verifiers' OpenEnvEnv.run does
            listed = [t["name"] for t in (await client.step({"type": "list_tools"})).observation["tools"]]
            reset = await client.reset(task_id=pick(listed))
            return listed, [t["function"]["name"] for t in reset.observation["tool_schemas"]]

    with caplog.at_level("WARNING", logger="mcp_gym.openenv"):
        listed, offered = asyncio.run(go(lambda listed: "a" if "extra" in listed else "b"))  # the other task
    assert sorted(listed) != sorted(offered) and "extra" in listed + offered
    (line,) = [r.getMessage() for r in caplog.records if "before its first reset" in r.getMessage()]
    assert ("added: extra; gone: none" if "extra" in offered else "added: none; gone: extra") in line
    caplog.clear()
    with caplog.at_level("WARNING", logger="mcp_gym.openenv"):
        asyncio.run(go(lambda listed: "b" if "extra" in listed else "a"))  # the same tools
    assert not [r for r in caplog.records if "before its first reset" in r.getMessage()]


def test_a_tool_added_mid_episode_is_noted_as_in_eval(serve: Callable[..., Server], tmp_path: Path) -> None:
    """Maze's key reveals ``unlock``: the call that picked it up carries the new ``tool_schemas`` and its ``result``
    is the tool message eval's chat policy is shown, tools note included (:func:`mcp_gym.chat.tools_note`)."""
    from episodes import hermes, run_policy

    from mcp_gym.envs import load_env_tasks
    from mcp_gym.openenv import MCPGymClient

    task = next(t for t in load_env_tasks("Maze", None, 0) if t.id == "maze-5x5-0003")
    calls: Calls = [(c["tool"], c["arguments"], "") for c in task.solution] + [("submit", {"answer": "x"}, "")]
    shown, _ = run_policy(lambda: make_env("Maze"), task.id, [hermes((n, a)) for n, a, _ in calls],
                          tmp_path / "eval").requests[-1]
    (noted,) = [m for m in shown if "[tools changed]" in m["content"]]

    async def go(url: str) -> list[Any]:
        async with MCPGymClient(base_url=url) as client:
            reset = await client.reset(task_id=task.id, seed=5)
            assert "unlock" not in [t["function"]["name"] for t in reset.observation.tool_schemas]  # the key shows it
            steps = []
            for n, a, _ in calls:
                steps.append(await client.step(CallToolAction(tool_name=n, arguments=a)))
                if steps[-1].done:
                    return steps
            return steps

    steps = asyncio.run(go(serve("Maze").url))
    assert steps[-1].done and steps[-1].reward > 0  # the unlisted tool was called and the goal reached
    (changed,) = [s for s in steps if s.observation.tool_schemas is not None]
    assert "unlock" in [t["function"]["name"] for t in changed.observation.tool_schemas]
    assert changed.observation.result == noted["content"] and '"name": "unlock"' in noted["content"]
