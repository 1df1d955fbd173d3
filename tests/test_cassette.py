"""Record and replay MCP servers (mcp_gym.cassette): real servers, real files, no mocks.

- A bundled env (Counter, in-process, 2026-07-28 era) and a real third-party server (npm server-memory over stdio,
  handshake era 2025-11-25) are recorded during a scripted evaluation, then replayed with the server absent: the
  per-episode rewards, successes and observations are identical, also with the episodes replayed in another order.
- Notifications (tools/list_changed, resources/updated) replay in their recorded order, in both protocol eras: the
  replayed session, itself recorded, gives the same cassette.
- An unrecorded call gets the documented error naming the closest recorded call; strict mode raises.
- The cassette served as a real MCP server over stdio and Streamable HTTP (`mcp-gym serve --replay`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import npm_bin, start_server

from mcp_gym import Http, InProcess, MCPEnv, Stdio, ToolCallFailed
from mcp_gym.cassette import Cassette, Replay, cassette_dir, cassette_path, record_servers, replay_servers
from mcp_gym.cassette.format import FORMAT, REPLAY_MISS
from mcp_gym.cassette.recorder import with_record
from mcp_gym.cassette.spec import replay_spec
from mcp_gym.envs import env_module, load_env_tasks
from mcp_gym.recording import RecordTrajectories, read_tables
from mcp_gym.rewards import StepContext
from mcp_gym.servers.counter import make_server
from mcp_gym.tasks import Task

Plan = list[tuple[str, int, list[dict[str, Any]]]]


# -- helpers ------------------------------------------------------------------------------------------------------
def counter_env(spec: Any, **kw: Any) -> MCPEnv:
    """The bundled Counter env over ``spec`` (what ``make_env("Counter")`` builds, with any server spec)."""
    mod = env_module("Counter")
    return MCPEnv({"testing": spec}, load_env_tasks("Counter")[:6], max_steps=mod.MAX_STEPS,
                  observe_resources=mod.OBSERVE_RESOURCES, verifier=mod.verify,
                  success_threshold=mod.SUCCESS_THRESHOLD, env_id="mcp_gym/Counter-v0", **kw)


def counter_plan() -> Plan:
    """Reference solutions; odd episodes start with a wrong move (and fail), one reads the counter first."""
    plan: Plan = []
    for i, task in enumerate(load_env_tasks("Counter")[:6]):
        actions = [dict(a) for a in task.solution]
        if i % 2:
            actions.insert(0, {"tool": "add", "arguments": {"amount": 1}})
        if i == 2:
            actions.insert(0, {"tool": "get_count", "arguments": {}})
        plan.append((task.id, 100 + i, actions))
    return plan


def run_eval(env: Any, plan: Plan) -> dict[tuple[str, int], dict[str, Any]]:
    """A scripted evaluation: per (task, seed) the step rewards, return, success and observations."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for task_id, seed, actions in plan:
        obs, info = env.reset(seed=seed, options={"task_id": task_id})
        ep: dict[str, Any] = {"rewards": [], "observations": [obs], "success": None, "errors": []}
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            ep["rewards"].append(float(reward))
            ep["observations"].append(obs)
            ep["errors"].append((info.get("error") or {}).get("kind"))
            if terminated or truncated:
                ep["success"] = info.get("success")
                break
        ep["return"] = sum(ep["rewards"])
        out[(task_id, seed)] = ep
    return out


def memory_tasks() -> list[Task]:
    return [Task(id=name, prompt=f"Remember that {name} likes tea.", answer=name) for name in ("alice", "bob", "eve")]


def memory_plan() -> Plan:
    plan: Plan = []
    for i, task in enumerate(memory_tasks()):
        name = task.id
        actions = [
            {"tool": "create_entities",
             "arguments": {"entities": [{"name": name, "entityType": "person", "observations": ["likes tea"]}]}},
            {"tool": "search_nodes", "arguments": {"query": "tea"}},
            {"tool": "add_observations", "arguments": {"observations": [{"entityName": name, "contents": ["cake"]}]}},
            {"tool": "open_nodes", "arguments": {"names": [name, "nobody"]}},
            {"tool": "submit", "arguments": {"answer": name if i != 1 else "nobody"}},
        ]
        plan.append((task.id, 7 + i, actions))
    return plan


def memory_reward(ctx: StepContext) -> float:
    """A reward read from the server's answers: per person found by search_nodes (the graph grows across episodes)
    0.25, else 1 for a result naming the task's person; -0.5 per error."""
    if ctx.is_error:
        return -0.5
    if ctx.tool == "search_nodes":
        return 0.25 * ctx.text.count('"entityType"')
    return 1.0 if ctx.task is not None and f'"{ctx.task.id}"' in ctx.text else 0.0


def memory_verifier(task: Task, answer: str | None, state: Any) -> float:
    return 1.0 if answer == task.answer else 0.0


def memory_env(spec: Any, **kw: Any) -> MCPEnv:
    return MCPEnv({"memory": spec}, memory_tasks(), observe_resources=["memory://knowledge-graph"],
                  reward_fn=memory_reward, verifier=memory_verifier, call_timeout=20.0, **kw)


def events(path: Path, kinds: tuple[str, ...] = ("request", "notification")) -> dict[str | None, list[tuple]]:
    """Per episode (in recording order, ids replaced by their index), the (kind, method, params) sequence, results
    of requests included (without the change hints a replay adds)."""
    per: dict[str | None, list[tuple]] = {}
    order: dict[str | None, int] = {}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for ev in sorted((e for e in lines if e["kind"] in kinds), key=lambda e: (e["connection"], e["seq"])):
        ep = ev["episode"]
        order.setdefault(ep, len(order))
        result = dict(ev.get("result") or {})
        meta = {k: v for k, v in (result.pop("_meta", None) or {}).items() if k != "mcp-gym/changes"}
        if meta:
            result["_meta"] = meta
        per.setdefault(order[ep], []).append(
            (ev["kind"], ev["method"], json.dumps(ev["params"], sort_keys=True), json.dumps(result, sort_keys=True)))
    return per


# -- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def counter_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A recorded Counter evaluation: trajectories (Parquet) and cassettes side by side in one run directory."""
    run = tmp_path_factory.mktemp("counter-run")
    env = RecordTrajectories(counter_env(InProcess(make_server(), record=cassette_dir(run))), run, policy="scripted")
    results = run_eval(env, counter_plan())
    env.close()
    return {"run": run, "cassette": cassette_path(cassette_dir(run), "testing"), "results": results}


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A recorded evaluation on the real npm server-memory (stdio); its memory file is deleted afterwards."""
    tmp = tmp_path_factory.mktemp("memory-run")
    mem = tmp / "mem.jsonl"
    spec = Stdio(npm_bin("mcp-server-memory"), [], env={"MEMORY_FILE_PATH": str(mem)}, record=cassette_dir(tmp))
    env = memory_env(spec)
    results = run_eval(env, memory_plan())
    env.close()
    assert mem.exists()
    mem.unlink()  # the recorded server's state is gone too
    return {"dir": tmp, "cassette": cassette_path(cassette_dir(tmp), "memory"), "results": results}


@pytest.fixture
def closing() -> Iterator[list[MCPEnv]]:
    envs: list[MCPEnv] = []
    yield envs
    for env in envs:
        env.close()


# -- record -------------------------------------------------------------------------------------------------------
def test_recording_of_bundled_env_documents_the_session(counter_run: dict[str, Any]) -> None:
    cas = Cassette.load(counter_run["cassette"])
    head = cas.header
    assert head["format"] == FORMAT and head["version"] == 1 and head["alias"] == "testing"
    assert head["protocol_version"] == "2026-07-28"
    assert head["server_info"]["name"] == "mcp-gym-counter" and head["server_info"]["version"] == "1.0.0"
    assert head["capabilities"]["tools"] == {"listChanged": True}
    tapes = cas.recorded_episodes()
    assert [(t.task_id, t.seed) for t in tapes] == [(tid, seed) for tid, seed, _ in counter_plan()]
    # The episode ids of the cassette are the trajectories' episode ids.
    _, episodes = read_tables(counter_run["run"])
    assert {t.id for t in tapes} == set(episodes.column("episode_id").to_pylist())
    first = tapes[0].exchanges
    assert first[0].method == "tools/call" and first[0].params["name"] == "mcp_gym_reset"
    assert first[0].params["arguments"] == {"task_id": tapes[0].task_id, "seed": tapes[0].seed}
    assert "_meta" not in first[0].params  # volatile _meta (episode id, task, seed) is not part of the params
    assert [ex.method for ex in first[1:3]] == ["tools/list", "resources/read"]
    calls = [ex for ex in first if ex.method == "tools/call"]
    assert calls[-1].params["name"] == "mcp_gym_state" and '"count"' in calls[-1].result["content"][0]["text"]
    add = next(ex for ex in first if ex.params.get("name") == "add")
    assert add.result["structuredContent"]["reward"] in (1.0, -0.01)
    assert add.result["_meta"]["mcp-gym/changes"] == {"resources": ["counter://state"]}


# -- replay -------------------------------------------------------------------------------------------------------
def test_replay_of_bundled_env_reproduces_rewards(counter_run: dict[str, Any], closing: list[MCPEnv]) -> None:
    recorded = counter_run["results"]
    assert {ep["success"] for ep in recorded.values()} == {True, False}
    env = counter_env(Replay(counter_run["cassette"]))
    closing.append(env)
    assert env.host.server_info()["testing"]["name"] == "mcp-gym-counter"
    assert env.host.server_info()["testing"]["protocol_version"] == "2026-07-28"
    assert sorted(env.action_space.tool_names) == ["add", "get_count", "submit"]
    replayed = run_eval(env, list(reversed(counter_plan())))  # another order: episodes match by (task, seed)
    assert replayed == recorded
    # ... and they are the rewards stored in the run's trajectory files.
    _, episodes = read_tables(counter_run["run"])
    stored = dict(zip(zip(episodes.column("task_id").to_pylist(), episodes.column("seed").to_pylist(), strict=True),
                      episodes.column("total_reward").to_pylist(), strict=True))
    assert stored == pytest.approx({k: ep["return"] for k, ep in replayed.items()})
    # A second pass on the same spec maps the episodes again.
    assert run_eval(env, counter_plan()[:2]) == {k: recorded[k] for k, _ in zip(recorded, range(2), strict=False)}


def test_a_replayed_bundled_env_takes_a_connect_timeout(tmp_path: Path, closing: list[MCPEnv]) -> None:
    """``make_env(..., replay=, connect_timeout=)``: the connect timeout reaches the replay spec (one helper sets it for
    every spec class; rebuilding the spec as a dataclass failed on ``Replay``'s own constructor)."""
    from mcp_gym.envs import make_env

    recorded = make_env("Counter", record=tmp_path)
    recorded.reset(seed=0)
    recorded.close()
    env = make_env("Counter", replay=tmp_path, connect_timeout=7)
    closing.append(env)
    (spec,) = env.server_templates.values()
    assert isinstance(spec, Replay) and spec.connect_timeout == 7.0 and spec.path.startswith(str(tmp_path))
    _, info = env.reset(seed=0)
    assert info["error"] is None and "add" in env.action_space.tool_names


def test_replay_of_third_party_server_reproduces_rewards(memory_run: dict[str, Any], closing: list[MCPEnv]) -> None:
    recorded = memory_run["results"]
    assert [ep["return"] for ep in recorded.values()] == [4.25, 3.5, 4.75]  # the graph grows across episodes
    assert [ep["success"] for ep in recorded.values()] == [True, False, True]
    cas = Cassette.load(memory_run["cassette"])
    assert cas.header["protocol_version"] == "2025-11-25" and cas.header["server_info"]["name"] == "memory-server"
    assert cas.header["capabilities"]["resources"]["subscribe"] is True
    env = memory_env(Replay(memory_run["cassette"]))
    closing.append(env)
    assert env.host.server_info()["memory"]["protocol_version"] == "2025-11-25"
    replayed = run_eval(env, memory_plan())
    assert replayed == recorded
    # The knowledge graph observed through resources/updated + resources/read matches step by step.
    last = replayed[("eve", 9)]["observations"][-2]["resources"]["memory://knowledge-graph"]
    assert all(f'"{n}"' in last for n in ("alice", "bob", "eve"))


def test_notifications_of_third_party_server_replay_in_order(memory_run: dict[str, Any], tmp_path: Path,
                                                             closing: list[MCPEnv]) -> None:
    original = memory_run["cassette"]
    notes = [ev for ev in events(original)[1] if ev[0] == "notification"]
    assert [n[1] for n in notes] == ["notifications/resources/updated"] * 2  # create_entities, add_observations
    again = tmp_path / "again.jsonl"
    env = memory_env(Replay(original, record=again))
    closing.append(env)
    run_eval(env, memory_plan())
    env.close()
    assert events(again) == events(original)  # same requests, answers and notifications, in the same order


@pytest.mark.parametrize("era", ["handshake", "listen"])
def test_list_changed_and_resource_updates_replay_in_order(era: str, tmp_path: Path, closing: list[MCPEnv]) -> None:
    """tools/list_changed (unlock_bonus) and resources/updated (add) from a stdio server, in the handshake era
    (notifications) and the 2026 era (subscriptions/listen stream)."""
    kw: dict[str, Any] = {"protocol": "legacy"} if era == "handshake" else {"listen": True}
    cassette = tmp_path / "counter.jsonl"
    spec = Stdio.python_module("mcp_gym.servers.counter", "--diagnostics", record=cassette, **kw)
    actions = [{"tool": "add", "arguments": {"amount": 2}}, {"tool": "unlock_bonus", "arguments": {}},
               {"tool": "bonus", "arguments": {}}, {"tool": "rpc_error", "arguments": {}},
               {"tool": "add", "arguments": {"amount": 1}}]
    plan: Plan = [("counter-0000", 1, actions)]
    env = counter_env(spec, call_timeout=20.0)
    closing.append(env)
    recorded = run_eval(env, plan)
    env.close()
    ep = recorded[("counter-0000", 1)]
    assert ep["rewards"][2] == 0.5 and ep["errors"] == [None, None, None, "jsonrpc", None]

    def notes(path: Path) -> list[tuple]:
        return [ev[1:3] for ev in events(path)[1] if ev[0] == "notification"]

    updated = ("notifications/resources/updated", json.dumps({"uri": "counter://state"}))
    changed = ("notifications/tools/list_changed", "{}")
    assert notes(cassette) == [updated, changed, updated]
    if era == "listen":
        assert all(ev.get("via") == "listen" for ev in map(json.loads, cassette.read_text().splitlines())
                   if ev["kind"] == "notification")

    again = tmp_path / "again.jsonl"
    env = counter_env(Replay(cassette, record=again, **({"listen": True} if era == "listen" else {})))
    closing.append(env)
    replayed = []
    obs, info = env.reset(seed=1, options={"task_id": "counter-0000"})
    for action in actions:
        obs, reward, *_, info = env.step(action)
        replayed.append((reward, (info["error"] or {}).get("kind"), info["tools_changed"],
                         "bonus" in env.action_space.tool_names))
    env.close()
    assert [r for r, *_ in replayed] == ep["rewards"]
    assert [e for _, e, _, _ in replayed] == ep["errors"]  # the JSON-RPC error replays as one
    assert [(c, b) for *_, c, b in replayed] == [(False, False), (True, True), (False, True), (False, True),
                                                 (False, True)]
    assert Cassette.load(again).header["protocol_version"] == Cassette.load(cassette).header["protocol_version"]
    assert notes(again) == notes(cassette)
    if era == "handshake":  # same interleaving of requests and notifications
        assert events(again) == events(cassette)


def test_unrecorded_call_gets_an_error_naming_the_closest_call(counter_run: dict[str, Any],
                                                               closing: list[MCPEnv]) -> None:
    task_id, seed, actions = counter_plan()[0]
    env = counter_env(Replay(counter_run["cassette"]))
    closing.append(env)
    env.reset(seed=seed, options={"task_id": task_id})
    recorded_amount = actions[0]["arguments"]["amount"]
    obs, reward, terminated, truncated, info = env.step({"tool": "add", "arguments": {"amount": -recorded_amount}})
    assert info["error"]["kind"] == "tool_error" and not terminated
    text = obs["result"]
    assert text.startswith("mcp-gym replay: no recorded response for tools/call")
    assert f"(task {task_id}, seed {seed})" in text
    closest = json.dumps({"arguments": {"amount": recorded_amount}, "name": "add"}, separators=(",", ":"))
    assert f"closest recorded call: tools/call {closest}" in text
    # The recorded call still answers; calling it once more than recorded is a miss too.
    obs, *_ = env.step(actions[0])
    assert not obs["result"].startswith("mcp-gym replay")
    obs, *_ = env.step(actions[0])
    assert "it was recorded 1 time(s) and this is call 2" in obs["result"]

    strict = counter_env(Replay(counter_run["cassette"], strict=True), strict=True)
    closing.append(strict)
    strict.reset(seed=seed, options={"task_id": task_id})
    with pytest.raises(ToolCallFailed) as exc:
        strict.step({"tool": "get_count", "arguments": {}})
    assert exc.value.error["code"] == REPLAY_MISS
    assert "closest recorded call: tools/call" in exc.value.error["message"]


def test_unknown_episode_and_helpers(counter_run: dict[str, Any], tmp_path: Path, closing: list[MCPEnv]) -> None:
    specs = replay_servers(counter_run["run"])  # a run directory's cassettes as replay specs
    assert list(specs) == ["testing"] and specs["testing"].transport == "replay"
    assert replay_spec(counter_run["run"], "testing").path == str(counter_run["cassette"])
    with pytest.raises(FileNotFoundError, match="no cassette of server 'memory'"):
        replay_spec(counter_run["run"], "memory")
    recording = record_servers({"a": "http://127.0.0.1:1/mcp", "b": "mcp-server-memory"}, tmp_path)
    assert {alias: (type(spec).__name__, spec.record) for alias, spec in recording.items()} == {
        "a": ("Http", tmp_path), "b": ("Stdio", tmp_path)}
    env = counter_env(specs["testing"])
    closing.append(env)
    obs, info = env.reset(seed=999, options={"task_id": "counter-0005"})  # never recorded with this seed
    assert info["reset_errors"] and "no recorded response" in info["reset_errors"][0]["message"]
    # with_record copies a spec with record= set; a torn last line (a crash mid-write) is skipped on reading.
    spec = with_record(InProcess(make_server()), tmp_path / "c.jsonl")
    assert spec.record == tmp_path / "c.jsonl" and isinstance(spec, InProcess)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(counter_run["cassette"].read_bytes() + b'{"kind":"request","conn')
    assert len(Cassette.load(torn).recorded_episodes()) == len(counter_plan())
    with pytest.raises(ValueError, match="no cassette header"):
        (tmp_path / "empty.jsonl").write_text("")
        Cassette.load(tmp_path / "empty.jsonl")


# -- serve --replay -----------------------------------------------------------------------------------------------
def test_serve_replay_over_stdio_and_http(memory_run: dict[str, Any], closing: list[MCPEnv]) -> None:
    path = str(memory_run["cassette"])
    pyenv = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env = memory_env(Stdio(sys.executable, ["-m", "mcp_gym.cassette", path], env=pyenv))
    closing.append(env)
    assert env.host.server_info()["memory"]["name"] == "memory-server"
    assert run_eval(env, memory_plan()) == memory_run["results"]
    env.close()

    proc, port = start_server([sys.executable, "-m", "mcp_gym.cassette", path, "--transport", "http", "--port", "0"],
                              env={**os.environ, **pyenv})
    try:
        env = memory_env(Http(f"http://127.0.0.1:{port}/mcp"))
        closing.append(env)
        info = env.host.server_info()["memory"]
        assert info["name"] == "memory-server" and info["protocol_version"] == "2025-11-25"
        assert run_eval(env, memory_plan()) == memory_run["results"]
    finally:
        proc.terminate()
        proc.wait(10)


# -- a server on {workspace}: refused at record time --------------------------------------------------------------
def test_recording_a_workspace_server_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    """A server started per episode on ``{workspace}`` sends each episode's own temporary path in its requests and
    results, and a replay starts no workspace (a task's fixture, a grader reading its files): its cassette cannot
    replay, so ``record=`` on it is refused before anything starts, naming the server and the workaround; the other
    servers of the env still record."""
    fs = [str(Path(__file__).parent / "servers" / "fs_server.py"), "{workspace}"]
    refused = (r"server 'fs': record= cannot make a cassette that replays for a server started per episode on "
               r"\{workspace\}")
    with pytest.raises(ValueError, match=refused + r".*record the trajectories instead \(RecordTrajectories"):
        MCPEnv({"fs": Stdio(sys.executable, fs, record=cassette_dir(tmp_path / "run"))}, ["Write a file."])
    assert not (tmp_path / "run").exists()  # nothing recorded, nothing started
    env = MCPEnv({"fs": Stdio(sys.executable, fs), "c": InProcess(make_server(), record=cassette_dir(tmp_path / "ok"))},
                 ["Count."])
    env.close()  # a workspace env whose fixed server records: built as before
    # (the job's refusal: tests/test_jobs.py, test_a_job_recording_a_workspace_server_is_refused_in_one_line; this
    # file runs in .ci/lowest, whose editable install Hydra's config search does not read)
