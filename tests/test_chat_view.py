"""One chat view of an episode: the SFT export reproduces exactly what the chat policy sent the model, on every bundled
env; TextEnvBatch and the TRL adapter build the same conversation as the policy."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from _chat_server import serve_chat_completions
from conftest import with_code_marked
from episodes import MAZE_TEXTS, TextPolicy, hermes, recorded_episode, run_policy

from mcp_gym import chat, protocol, sft
from mcp_gym.client.runtime import default_runtime
from mcp_gym.envs import BUNDLED_ENVS, load_env_tasks, make_env
from mcp_gym.parsing import parse_tool_calls
from mcp_gym.policies import OpenAIPolicy
from mcp_gym.recording import RecordTrajectories, load
from mcp_gym.textenv import TextEnvBatch
from mcp_gym.vector import EpisodeSpec, VectorMCPEnv

TASKS_PER_ENV = 3


# -- a scripted chat-completions endpoint that logs every request ----------------------------------------------------
class Script:
    """Plays each task's reference solution over ``POST /v1/chat/completions``, in varied reply shapes.

    The reply depends only on the request (episodes run concurrently): the task is found from the user turn, the
    position in the solution from the calls already in the conversation. Task ``k`` of an env (``variant = k % 3``):
    variant 1 opens with a reply without a tool call and then one with broken JSON; replies alternate between OpenAI
    ``tool_calls`` (with or without text) and Hermes ``<tool_call>`` text (with reasoning); variant 2 sends two calls
    in one reply while three or more remain. The last call of a solution is ``submit`` (or the step that ends the
    episode with ``done``).
    """

    def __init__(self, tasks: Sequence[Any]) -> None:
        self.tasks = [(t.prompt, t, k % 3) for k, t in enumerate(tasks)]
        self.log: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (request body, reply message)
        self.lock = threading.Lock()

    def task_of(self, user: str) -> tuple[Any, int]:
        found = [(t, v) for p, t, v in self.tasks if user == p or user.startswith(p + "\n\n")]
        assert len(found) == 1, user[:80]
        return found[0]

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body["messages"]
        user = next(m for m in msgs if m["role"] == "user")["content"]
        task, variant = self.task_of(user)
        turn = sum(m["role"] == "assistant" for m in msgs)
        done = sum(len(m.get("tool_calls") or ()) for m in msgs if m["role"] == "assistant")
        left = [{"name": c["tool"], "arguments": c["arguments"]} for c in task.solution][done:]
        if variant == 1 and turn == 0:
            message: dict[str, Any] = {"role": "assistant", "content": "Let me think about this task first."}
        elif variant == 1 and turn == 1:
            message = {"role": "assistant", "content": '<tool_call>\n{"name": "oops", "arguments": {</tool_call>'}
        else:
            calls = left[:2] if variant == 2 and len(left) >= 3 else left[:1]
            if turn % 2 == 0:
                message = {"role": "assistant", "content": None if turn % 4 == 0 else f"Step {turn}: calling.",
                           "tool_calls": [{"id": f"srv-{turn}-{i}", "type": "function", "function": {
                               "name": c["name"], "arguments": json.dumps(c["arguments"])}}
                               for i, c in enumerate(calls)]}
            else:
                blocks = "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)
                message = {"role": "assistant", "content": f"<think>Turn {turn}.</think>\n{blocks}"}
        with self.lock:
            self.log.append((copy.deepcopy(body), message))
        return {"id": f"chatcmpl-{len(self.log)}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def serve(script: Script) -> AbstractContextManager[str]:
    return serve_chat_completions(lambda body, headers: script.reply(body))


def collect(name: str, run: Path) -> tuple[list[Any], Script]:
    tasks = load_env_tasks(name, "train")[:TASKS_PER_ENV]
    script = Script(tasks)
    specs = [EpisodeSpec(f"{t.id}#0", t.id, 100 + k) for k, t in enumerate(tasks)]
    results: list[Any] = []

    async def go(url: str) -> None:
        policy = OpenAIPolicy("scripted", url, "sk-test", retries=0)
        try:
            async with VectorMCPEnv(lambda i: RecordTrajectories(make_env(name, max_steps=30), run), 3) as vec:
                await vec.run(policy, specs, on_result=results.append)
        finally:
            await policy.aclose()

    with serve(script) as url:
        default_runtime().call(go, url)
    return results, script


# -- comparing a request with an exported example --------------------------------------------------------------------
def canonical(message: Mapping[str, Any]) -> dict[str, Any]:
    """A wire message in comparable form: arguments decoded, ids dropped, content None as ""."""
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            (c["function"]["name"], c["function"]["arguments"] if isinstance(c["function"]["arguments"], dict)
             else json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    if message["role"] == "tool":
        out["name"] = message["name"]
    return out


def expected_final(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The final reply as the chat view keeps it: the model's own text (no call markup) and its calls."""
    if reply.get("tool_calls"):
        return canonical(reply)
    parsed = parse_tool_calls(reply["content"])
    calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in parsed.calls]
    return canonical({"role": "assistant", "content": chat.assistant_content(parsed),
                      **({"tool_calls": calls} if calls else {})})


CHAT_FAST = ("Maze", "Files", "Code")
"""Envs whose export is checked in the fast lane: observed resources (Maze), none (Files), Code's own tools; the other
bundled envs are the same check (heavy lane)."""


@pytest.mark.parametrize("name", with_code_marked(n for n in BUNDLED_ENVS if n in CHAT_FAST)
                         + [pytest.param(n, marks=pytest.mark.slow) for n in BUNDLED_ENVS if n not in CHAT_FAST])
def test_export_equals_the_last_request_of_each_episode(name: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    results, script = collect(name, run)
    assert len(results) == TASKS_PER_ENV and all(r.termination in ("submit", "done") for r in results), results
    ds = sft.build(run, success_only=False, drop_errors=False, dedupe=False, tools_changed="last")
    assert len(ds) == TASKS_PER_ENV
    # Split per tool list (the default; Maze's `unlock` appears mid-episode): every example's prompt is a request the
    # policy sent, byte for byte, and its tools are that request's
    parts = sft.build(run, success_only=False, drop_errors=False, dedupe=False, layout="prompt_completion")
    sent = [(body["messages"], body["tools"]) for body, _ in script.log]
    for ex in parts:
        assert (chat.to_wire(ex["prompt"]), ex["tools"]) in sent
    assert len(parts) > len(ds) or name != "Maze"
    rec = load(run)
    shapes = set()
    for ex in ds:
        task = next(t for p, t, _ in script.tasks if t.id == ex["task_id"])
        requests = [(body, reply) for body, reply in script.log
                    if script.task_of(next(m for m in body["messages"] if m["role"] == "user")["content"])[0] is task]
        body, reply = max(requests, key=lambda r: len(r[0]["messages"]))  # the episode's last request
        messages = ex["messages"]
        # Everything before the final reply is exactly what the policy sent; ids follow the one scheme.
        assert [canonical(m) for m in messages[:-1]] == [canonical(m) for m in body["messages"]]
        assert [m.get("tool_call_id") for m in messages[:-1]] == [m.get("tool_call_id") for m in body["messages"]]
        assert chat.to_wire(messages[:-1]) == body["messages"]  # byte for byte, once arguments are wire strings
        assert canonical(messages[-1]) == expected_final(reply)
        assert ex["tools"] == body["tools"]
        assert [t["function"]["name"] for t in body["tools"]][-1:] == ["submit"] or "submit" in {
            t["function"]["name"] for t in body["tools"]}
        # The user turn shows the observed resources (Maze's grid, the counter, ...) when the env has some.
        initial = json.loads(next(e for e in rec.episodes if e["episode_id"] == ex["episode_id"])
                             ["initial_observation"])
        assert messages[1]["content"] == chat.user_content(task.prompt, initial["resources"])
        shapes |= {m["role"] for m in messages} | {"multi" for m in messages if len(m.get("tool_calls") or ()) > 1}
        shapes |= {"feedback" for m in messages[2:] if m["role"] == "user"}
    assert {"system", "user", "assistant", "tool", "feedback"} <= shapes  # every kind of turn was exercised
    if len(script.tasks[2][1].solution) >= 3:  # variant 2 opens with two calls in one reply
        assert "multi" in shapes
    if name == "Maze":
        assert "[resource maze://state]" in ds[0]["messages"][1]["content"]


def test_legacy_runs_without_turns_still_export(tmp_path: Path) -> None:
    """A run of schema 1.0 (no turn/assistant_content columns) reads with nulls and exports with the old grouping."""
    import pyarrow.parquet as pq

    from mcp_gym.recording.schema import VERSION_KEY

    results, _ = collect("Counter", tmp_path / "run")
    new = sft.build(tmp_path / "run", success_only=False, drop_errors=False, dedupe=False)
    for shard in (tmp_path / "run" / "steps").glob("*.parquet"):
        table = pq.read_table(shard)
        old = table.drop_columns(["turn", "assistant_content"]).replace_schema_metadata({VERSION_KEY: b"1.0"})
        pq.write_table(old, shard)
    legacy = sft.build(tmp_path / "run", success_only=False, drop_errors=False, dedupe=False)
    assert load(tmp_path / "run").steps["turn"] == [None] * len(load(tmp_path / "run").steps)
    assert len(legacy) == len(new)
    for a, b in zip(sorted(legacy, key=lambda e: e["episode_id"]), sorted(new, key=lambda e: e["episode_id"]),
                    strict=True):
        assert [m["role"] for m in a["messages"]][:2] == ["system", "user"]
        assert a["messages"][1] == b["messages"][1] and a["tools"] == b["tools"]


# -- the same conversation through TextEnvBatch, the TRL adapter and a policy -----------------------------------------
def policy_conversation(name: str, task_id: str, texts: Sequence[str], run: Path) -> TextPolicy:
    return run_policy(lambda: make_env(name), task_id, texts, run)




@pytest.mark.parametrize(("name", "task_id", "texts"), [
    ("Maze", "maze-5x5-0000", MAZE_TEXTS),
    ("Counter", "counter-0000", ["Hmm.", hermes(("add", {"amount": 5})), hermes(("get_count", {})),
                                 hermes(("add", {"amount": 4}))]),
])
def test_textenv_builds_the_policy_conversation(name: str, task_id: str, texts: list[str], tmp_path: Path) -> None:
    policy = policy_conversation(name, task_id, texts, tmp_path / "run")
    assert len(policy.requests) == len(texts)  # the episode ended on the last text (submit / done)
    last_messages, last_tools = policy.requests[-1]
    with TextEnvBatch(name, n=1) as batch:
        batch.reset([task_id], seed=5)
        for k, text in enumerate(texts):  # before each reply: the conversation and tools of the policy's request
            assert batch.histories[0] == policy.requests[k][0]
            assert batch.tools_of(0) == policy.requests[k][1]
            batch.step([text])
        assert batch.all_done
        history = batch.histories[0]
    final = max(k for k, m in enumerate(history) if m["role"] == "assistant")
    assert history[:final] == last_messages  # system, user (with resources), assistant, tool and feedback turns
    assert history[final + 1:] == [  # TextEnvBatch also answers the final reply (the episode ended with it)
        {"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": m["content"]}
        for c, m in zip(history[final]["tool_calls"], history[final + 1:], strict=True)]
    assert any(m["role"] == "user" and m["content"].startswith("Error:") for m in history)  # feedback turn
    # The export of the recorded episode is the same conversation.
    (ex,) = sft.build(tmp_path / "run", success_only=False, drop_errors=False)
    assert ex["messages"] == history[:final + 1]
    assert ex["tools"] == last_tools


@pytest.mark.parametrize(("name", "task_id", "texts"), [("Maze", "maze-5x5-0000", MAZE_TEXTS)])
def test_textenv_records_the_policy_episode(name: str, task_id: str, texts: list[str], tmp_path: Path) -> None:
    """Envs under RecordTrajectories: TextEnvBatch records the episode the chat policy records (steps with the reply's
    raw text, turn and own text; the same conversation back from the run)."""
    run_policy(lambda: make_env(name), task_id, texts, tmp_path / "policy")
    with TextEnvBatch([RecordTrajectories(make_env(name), tmp_path / "batch", policy="text")]) as batch:
        batch.reset([task_id], seed=5)
        for text in texts:
            batch.step([text])
        assert batch.all_done
        history = batch.histories[0]
    expected, got = recorded_episode(tmp_path / "policy"), recorded_episode(tmp_path / "batch")
    assert got == expected
    assert [s["turn"] for s in got["steps"]] == [0, 1, 2, 3, 3, 4, 5]
    assert got["messages"] == history[:len(got["messages"])]


@pytest.mark.extras  # transformers (the [train] extra)
def test_trl_adapter_renders_like_the_policy(tmp_path: Path) -> None:
    """The TRL adapter's prompt (dataset row + reset text) and tool returns equal the policy's user and tool turns."""
    pytest.importorskip("transformers")
    from mcp_gym.trl import environment_factory, task_dataset

    task_id = "maze-5x5-0000"
    calls = [("look", {}), ("move", {"direction": "up"}), ("move", {"direction": "down"})]
    policy = policy_conversation("Maze", task_id, [hermes(c) for c in calls] + [hermes(("submit", {"answer": "-"}))],
                                 tmp_path / "run")
    expected = policy.requests[-1][0]
    row = next(r for r in task_dataset("Maze", "train") if r["task_id"] == task_id)
    cls = environment_factory("Maze")
    env = cls()
    try:
        observation = env.reset(**row)
        prompt = [dict(m) for m in row["prompt"]]
        prompt[-1]["content"] += observation or ""  # what TRL does with reset()'s return value
        assert prompt == expected[:2]
        assert "[resource maze://state]" in prompt[-1]["content"]
        tool_turns = [m["content"] for m in expected if m["role"] == "tool"]
        returns = [getattr(env, name)(**args) for name, args in calls]
        assert returns == tool_turns
    finally:
        env._close()


def test_chat_view_rules() -> None:
    view = chat.ChatView("Reach 3.", {"counter://state": "count=0"})
    assert view.messages == [{"role": "system", "content": chat.DEFAULT_SYSTEM_PROMPT},
                             {"role": "user", "content": "Reach 3.\n\n[resource counter://state]\ncount=0"}]
    assert view.reply("Thinking.", []) == []
    view.no_call("invalid_json", {"counter://state": "count=0"})  # nothing changed: no resource block
    ids = view.reply("", [parse_tool_calls(hermes(("add", {"amount": 3}), ("get_count", {}))).calls[i]
                          for i in range(2)])
    assert ids == ["call_1_0", "call_1_1"]
    view.tool_result(ids[0], "add", "3", {"counter://state": "count=3"})
    view.tool_result(ids[1], "get_count", "3", {"counter://state": "count=3"})
    assert [m["content"] for m in view.messages[3:]] == [
        "Error: a tool call in your reply is not valid JSON. Reply with a tool call from the tools you were given; "
        "when the task is done, call `submit` with your final answer.",
        "", "3\n\n[resource counter://state]\ncount=3", "3"]
    assert view.wire()[4]["tool_calls"][0]["function"]["arguments"] == '{"amount": 3}'
    assert view.messages[4]["tool_calls"][0]["function"]["arguments"] == {"amount": 3}
    # submit is always offered, once (a server's own `submit` tool is the one the env routes to).
    own = {"name": "submit", "description": "Server submit.", "input_schema": {"type": "object"}}
    assert protocol.openai_tools([]) == [{"type": "function", "function": {
        "name": "submit", "description": protocol.SUBMIT_DESCRIPTION, "parameters": protocol.SUBMIT_SCHEMA}}]
    assert protocol.openai_tools([own]) == [protocol.openai_function(own)]
    env = make_env("Counter")
    try:
        env.reset(options={"task_id": "counter-0000"})
        assert chat.env_tools(env) == env.openai_tools()
    finally:
        env.close()


def test_a_server_submit_tool_is_offered_once_by_env_and_policy() -> None:
    """A server's own ``submit`` replaces the built-in one in what the env offers, as in what the policies send (the
    env routes ``submit`` to that tool)."""
    from mcp.server.mcpserver import MCPServer

    from mcp_gym import InProcess, MCPEnv

    server = MCPServer("own-submit")

    @server.tool(description="The server's own submit.")
    def submit(answer: str, confidence: float) -> str:
        return f"{answer} at {confidence}"

    env = MCPEnv({"s": InProcess(server)}, ["t"])
    try:
        env.reset()
        tools = env.openai_tools()
        assert [t["function"]["name"] for t in tools] == ["submit"]
        assert tools[0]["function"]["description"] == "The server's own submit."
        assert tools == chat.env_tools(env)
        assert tools[0]["function"]["parameters"] == env.action_space.schemas["submit"]  # validated as offered
        obs, *_, info = env.step({"tool": "submit", "arguments": {"answer": "x", "confidence": 0.5}})
        assert info["error"] is None and obs["result"] == "x at 0.5" and info["server"] == "s"
    finally:
        env.close()


def test_a_killed_run_of_schema_1_0_still_loads(tmp_path: Path) -> None:
    """Write-ahead-log frames written before the 1.1 columns existed read with nulls in them."""
    import shutil

    import pyarrow as pa

    from mcp_gym.recording.reader import read_tables
    from mcp_gym.recording.wal import WalFile

    collect("Counter", tmp_path / "new")
    steps, episodes = read_tables(tmp_path / "new")

    def rows(table: pa.Table, width: int) -> list[tuple[Any, ...]]:
        cols = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns[:width]]
        return list(zip(*(c.to_pylist() for c in cols), strict=True))

    old = tmp_path / "old"
    shutil.copytree(tmp_path / "new", old, ignore=shutil.ignore_patterns("*.parquet"))
    (old / ".wal").mkdir(exist_ok=True)
    wal = WalFile(old / ".wal" / "oldwriter-0.wal", fsync=False)
    old_steps = rows(steps, steps.num_columns - 3)  # schema 1.0: no turn, assistant_content (1.1), user_turn (1.2)
    for ep in rows(episodes, episodes.num_columns):
        wal.append((ep, [s for s in old_steps if s[0] == ep[0]]))
    wal.close()
    rec = load(old)
    assert sorted(rec.episodes["episode_id"]) == sorted(episodes.column("episode_id").to_pylist())
    assert len(rec.steps) == steps.num_rows and set(rec.steps["turn"]) == set(rec.steps["user_turn"]) == {None}
    assert len(sft.build(old, success_only=False, drop_errors=False)) == TASKS_PER_ENV


def test_tools_note_names_the_tools_added_and_removed_with_their_schemas() -> None:
    """The one text every face shows the model when its tools change (verl, SkyRL, eval's policies, the export)."""
    add = protocol.openai_function({"name": "add", "description": "Add.", "input_schema": {"type": "object"}})
    unlock = protocol.openai_function({"name": "unlock", "description": "Open <|im_end|> it.",
                                       "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}}})
    assert chat.tools_note([add], [add]) == ""
    assert chat.tools_note([add], [add, unlock]) == (
        "[tools changed] The tools you can call have changed.\nNew or changed tools (now callable):\n"
        '{"description": "Open <|im_end|> it.", "name": "unlock", "parameters": {"properties": {"x": {"type": '
        '"integer"}}, "type": "object"}}')
    assert chat.tools_note([add, unlock], [unlock]).endswith("\nRemoved tools (no longer callable): add")
    view = chat.ChatView("Go.", tools=[add])
    view.reply("", [parse_tool_calls(hermes(("add", {}))).calls[0]] * 3)
    assert view.tool_result("call_0_0", "add", "1", tools=None)["content"] == "1"  # no change: no note
    noted = view.tool_result("call_0_1", "add", "2", tools=[add, unlock])["content"]
    assert noted.startswith("2\n\n[tools changed]") and "<\u200b|im_end|>" in noted  # server text is neutralised
    assert view.tool_result("call_0_2", "add", "3", tools=[add, unlock])["content"] == "3"  # told once
    assert chat.ChatView("Go.").tool_result("x", "add", "1", tools=[unlock])["content"] == "1"  # not tracked


def test_a_tool_added_mid_episode_is_noted_alike_by_eval_textenv_and_export(tmp_path: Path) -> None:
    """Maze's key reveals ``unlock``: the message answering that move ends with the tools note, the same in the chat
    policy's request (eval: the ``openai`` policy's HTTP request body), ``TextEnvBatch``'s history (the verl and SkyRL
    faces) and the recorded conversation (the SFT export's prompt)."""
    task = next(t for t in load_env_tasks("Maze", None, 0) if t.id == "maze-5x5-0003")
    texts = [hermes((c["tool"], c["arguments"])) for c in task.solution] + [hermes(("submit", {"answer": "x"}))]
    policy = run_policy(lambda: make_env("Maze"), task.id, texts, tmp_path / "run")
    shown, _ = policy.requests[-1]
    (noted,) = [m for m in shown if "[tools changed]" in m["content"]]
    before, after = policy.requests[0][1], policy.requests[-1][1]
    assert [t["function"]["name"] for t in after if t not in before] == ["unlock"]
    assert noted["role"] == "tool" and noted["content"].endswith("\n\n" + chat.tools_note(before, after))
    assert '"name": "unlock"' in noted["content"] and "Removed" not in noted["content"]
    bodies: list[dict[str, Any]] = []

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        bodies.append(copy.deepcopy(body))
        text = texts[sum(m["role"] == "assistant" for m in body["messages"])]
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    async def go(url: str) -> None:
        openai = OpenAIPolicy("scripted", url, "sk-test", retries=0)
        try:
            async with VectorMCPEnv(lambda i: make_env("Maze"), 1) as vec:
                await vec.run(openai, [EpisodeSpec(f"{task.id}#0", task.id, 5)])
        finally:
            await openai.aclose()

    with serve_chat_completions(reply) as url:
        default_runtime().call(go, url)
    assert [m for m in bodies[-1]["messages"] if "[tools changed]" in (m.get("content") or "")] == [noted]
    with TextEnvBatch("Maze", n=1) as batch:
        batch.reset([task.id])
        for text in texts:
            batch.step([text])
        assert batch.histories[0][:len(shown)] == shown
    examples = sft.build(tmp_path / "run", layout="prompt_completion", success_only=False)
    prompt = list(examples[-1]["prompt"])  # the first request after the change, rebuilt from the recording
    assert prompt[-1] == noted and prompt == shown[:len(prompt)]
