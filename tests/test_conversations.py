"""Conversations: a task of several user turns. The env gives the next user message when the agent ends a turn with
``submit``, calls the servers' hidden turn hook (``mcp_gym_turn``), offers the tools the hook added, and ends the
episode after the last turn; graders see the calls grouped by turn; the oracle and ``tasks validate`` play each turn's
reference solution. The server is real: an in-process or stdio MCP server (``tests/_turns_server.py``)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _turns_server import TASK, grade_turns, make_server
from conftest import ROOT
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_gym import InProcess, MCPEnv, sft
from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT, tools_note
from mcp_gym.cli import main
from mcp_gym.parsing import ParseResult, parse_tool_calls
from mcp_gym.policies import ChatPolicy
from mcp_gym.protocol import HIDDEN_META_KEY, TURN_TOOL
from mcp_gym.recording import RecordTrajectories, load
from mcp_gym.recording.conversation import conversation, offered_tools
from mcp_gym.tasks import Task, TaskDataError, load_tasks, save_tasks
from mcp_gym.textenv import TextEnvBatch
from mcp_gym.trl import environment_factory
from mcp_gym.viewer import write_view

SERVER = f'+env.servers.t="{sys.executable} {ROOT / "tests" / "_turns_server.py"}"'
RUN = ["env=custom", SERVER, "env.grader=_turns_server:grade_turns", "launcher.progress=false", "plots=false"]
TURN1 = "Also add 'eggs', then tell me how many notes there are."


def test_task_turns_round_trip_and_checks(tmp_path: Path) -> None:
    assert TASK.prompt == "Add a note 'milk'." and TASK.multi_turn and not Task(id="x", prompt="p").multi_turn
    assert Task.from_record(TASK.to_record()) == TASK
    assert Task(id="x", prompt="p").to_record()["turns"] is None  # a single-turn record as before (plus a null)
    save_tasks([TASK], tmp_path / "t.jsonl")
    assert load_tasks(tmp_path / "t.jsonl") == [TASK]
    assert TASK.turn_plan() == [([{"tool": "add_note", "arguments": {"text": "milk"}}], "Added milk."),
                                ([{"tool": "add_note", "arguments": {"text": "eggs"}},
                                  {"tool": "count_notes", "arguments": {}}], "2")]
    with pytest.raises(TaskDataError, match=r"task 'x': 'prompt' differs from turns\[0\]"):
        Task(id="x", prompt="other", turns=({"prompt": "p"},))
    with pytest.raises(TaskDataError, match=r"task 'x': turns\[1\] has no 'prompt'"):
        Task(id="x", prompt="", turns=({"prompt": "p"}, {"solution": []}))
    with pytest.raises(TaskDataError, match=r"turns\[0\]: 'solution' must be a list"):
        Task.from_record({"id": "x", "turns": json.dumps([{"prompt": "p", "solution": "add"}])})


def test_env_plays_turns_with_a_tool_added_at_turn_1() -> None:
    env = MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns)
    try:
        obs, info = env.reset(seed=0)
        assert (obs["task"], obs["turn"], info["turn"], info["turns"]) == ("Add a note 'milk'.", 0, 0, 2)
        assert info["tools"] == ["add_note", "submit"]  # count_notes is not offered yet; the hook is hidden
        env.step({"tool": "add_note", "arguments": {"text": "milk"}})
        obs, reward, terminated, truncated, info = env.step({"tool": "submit", "arguments": {"answer": "Added."}})
        assert (reward, terminated, truncated, info["termination"]) == (0.0, False, False, None)
        assert (obs["task"], obs["result"], obs["turn"], info["turn"], info["turns"]) == (TURN1, TURN1, 1, 1, 2)
        assert info["turn_answer"] == "Added." and info["tools_changed"]
        assert env.action_space.tool_names == ["add_note", "count_notes", "submit"]  # before the turn's first step
        _, _, _, _, info = env.step({"tool": "add_note", "arguments": {"text": "eggs"}})
        _, _, _, _, info = env.step({"tool": "count_notes", "arguments": {}})
        assert info["error"] is None and info["turn"] == 1
        obs, reward, terminated, truncated, info = env.step({"tool": "submit", "arguments": {"answer": "2"}})
        assert (reward, terminated, info["termination"], info["success"]) == (1.0, True, "submit", True)
        assert [(c["tool"], c["turn"]) for c in env.transcript] == [
            ("add_note", 0), ("submit", 0), ("add_note", 1), ("count_notes", 1), ("submit", 1)]
        # a fresh episode starts at turn 0, without the turn-1 tool
        obs, info = env.reset(seed=1)
        assert obs["turn"] == 0 and info["tools"] == ["add_note", "submit"]
        _, _, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": ""}})
        assert not terminated and info["turn"] == 1
        _, _, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "2"}})
        assert terminated and info["success"] is False and "calls by turn [[], []]" in info["grade"]["reason"]
    finally:
        env.close()


def test_max_steps_counts_every_turn() -> None:
    env = MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns, max_steps=3)
    try:
        env.reset(seed=0)
        env.step({"tool": "add_note", "arguments": {"text": "milk"}})
        _, _, _, truncated, info = env.step({"tool": "submit", "arguments": {"answer": "ok"}})
        assert not truncated and info["turn"] == 1
        _, _, terminated, truncated, info = env.step({"tool": "add_note", "arguments": {"text": "eggs"}})
        assert (terminated, truncated, info["termination"], info["success"]) == (False, True, "max_steps", False)
    finally:
        env.close()


def _summary(out: Path) -> dict[str, object]:
    return json.loads((out / "report" / "results.json").read_text())["summary"]


@pytest.mark.slow  # 13 s: the heavy lane (the fast lane keeps the file's other tests)
def test_eval_oracle_and_noop_and_validate(tmp_path: Path) -> None:
    task = dataclasses.replace(TASK, split="test")
    tasks = save_tasks([task, Task(id="conv-1", prompt="", answer="1", split="test", turns=(
        {"prompt": "Nothing yet.", "answer": "ok"},
        {"prompt": "Add 'tea' and count.", "solution": [{"tool": "add_note", "arguments": {"text": "tea"}},
                                                         {"tool": "count_notes", "arguments": {}}]}))],
        tmp_path / "tasks.jsonl")
    assert main(["eval", *RUN, f"env.tasks={tasks}", "policy=oracle", f"out={tmp_path / 'oracle'}"]) == 0
    assert _summary(tmp_path / "oracle")["success_rate"] == 1.0
    assert main(["eval", *RUN, f"env.tasks={tasks}", "policy=noop", f"out={tmp_path / 'noop'}"]) == 0
    assert _summary(tmp_path / "noop")["success_rate"] == 0.0
    assert main(["tasks", "validate", *RUN[:3], f"env.tasks={tasks}", f"out={tmp_path / 'v'}"]) == 0
    checks = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert [c["status"] for c in checks] == ["passed", "passed"]


@pytest.mark.slow  # 11 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_collect_then_export_sft_is_one_chat_with_every_user_turn(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tasks = save_tasks([TASK], tmp_path / "tasks.jsonl")
    run, sft = tmp_path / "run", tmp_path / "sft"
    assert main(["collect", *RUN[:4], f"env.tasks={tasks}", "policy=oracle", "episodes=1", f"out={run}"]) == 0
    steps = load(run).steps.to_list()
    assert [(s["tool"], s["user_turn"]) for s in sorted(steps, key=lambda s: s["step_index"])] == [
        ("add_note", 0), ("submit", 0), ("add_note", 1), ("count_notes", 1), ("submit", 1)]
    page = write_view([run], tmp_path / "view.html").read_text(encoding="utf-8")  # the viewer shows each user turn
    episode = json.loads(re.search(r'<script type="application/json" id="ep-0">(.*?)</script>', page, re.S)[1])
    assert episode["turns"] == ["Add a note 'milk'.", TURN1]
    assert [s["user_turn"] for s in episode["steps"]] == [0, 0, 1, 1, 1]
    # count_notes appears at turn 1: the example keeps the reset's tools and tells the change where the model was told
    # of it (as verl and SkyRL render the trajectory); tools_changed=last gives the last request's tools, the same chat
    assert main(["export-sft", f"runs=[{run}]", f"out={sft}", "sft.tools_changed=split"]) == 2  # (prompt_completion)
    assert "tools_changed='split' needs layout='prompt_completion'" in capsys.readouterr().err
    assert main(["export-sft", f"runs=[{run}]", f"out={sft}"]) == 0
    rows = pq.read_table(next((sft / "data").glob("train-*.parquet"))).to_pylist()
    assert main(["export-sft", f"runs=[{run}]", f"out={sft}", "sft.tools_changed=last", "overwrite=true"]) == 0
    last = pq.read_table(next((sft / "data").glob("train-*.parquet"))).to_pylist()
    assert last[0]["messages"] == rows[0]["messages"]
    assert [t["function"]["name"] for t in rows[0]["tools"]] == ["add_note", "submit"]
    assert [t["function"]["name"] for t in last[0]["tools"]] == ["add_note", "count_notes", "submit"]
    messages = [json.loads(m) for m in rows[0]["messages"]]

    def call(turn: int, name: str, arguments: dict[str, object]) -> dict[str, object]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{turn}_0", "type": "function", "function": {"name": name, "arguments": arguments}}]}

    def result(turn: int, name: str, content: str) -> dict[str, object]:
        return {"role": "tool", "tool_call_id": f"call_{turn}_0", "name": name, "content": content}

    ep = load(run).episodes.to_list()[0]
    (change,) = json.loads(ep["catalogue_changes"])  # turn 1's hook showed count_notes: the next message says so
    note = tools_note(offered_tools(ep, None), offered_tools(ep, change["tools"]))
    assert note.startswith("[tools changed]") and '"name": "count_notes"' in note and "Removed" not in note
    assert messages == [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": "Add a note 'milk'."},
        call(0, "add_note", {"text": "milk"}), result(0, "add_note", "added 'milk'"),
        {"role": "assistant", "content": "Added milk."},  # the submit that ended turn 0: the turn's reply
        {"role": "user", "content": f"{TURN1}\n\n{note}"},
        call(2, "add_note", {"text": "eggs"}), result(2, "add_note", "added 'eggs'"),
        call(3, "count_notes", {}), result(3, "count_notes", "2"),
        call(4, "submit", {"answer": "2"}),  # the final submit, as in a single-turn episode
    ]


def test_trl_face_gives_the_next_user_message_as_submits_result() -> None:
    cls = environment_factory(lambda: MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns))
    assert list(cls._tool_specs) == ["add_note", "count_notes", "submit"]  # the probe saw turn 1's tool too
    env: Any = cls()
    try:
        assert env.reset(task_id="conv-0") == "Add a note 'milk'."
        assert env.add_note(text="milk") == "added 'milk'"
        assert env.submit(answer="Added milk.") == TURN1 and not env.done
        assert env.add_note(text="eggs") == "added 'eggs'" and env.count_notes() == "2"
        env.submit(answer="2")
        assert env.done and env.get_reward() == 1.0
    finally:
        env._close()


def _call(name: str, **arguments: object) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_text_env_batch_carries_the_turns() -> None:
    batch = TextEnvBatch(lambda: MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns), n=1)
    try:
        batch.reset(["conv-0"])
        before = batch.tools_of(0)
        out = batch.step([_call("add_note", text="milk") + _call("submit", answer="Added milk.")])[0]
        assert not out.done and (out.info["turn"], out.info["turns"]) == (1, 2)
        assert "count_notes" in [t["function"]["name"] for t in batch.tools_of(0)]
        turn1 = {"role": "user", "content": f"{TURN1}\n\n{tools_note(before, batch.tools_of(0))}"}  # + the tool
        assert out.messages[-1] == turn1  # the next user message
        history = batch.histories[0]
        assert history[2]["tool_calls"][0]["function"]["name"] == "add_note" and len(history[2]["tool_calls"]) == 1
        assert history[-2:] == [{"role": "assistant", "content": "Added milk."}, turn1]
        batch.step([_call("add_note", text="eggs")])
        batch.step([_call("count_notes")])
        out = batch.step([_call("submit", answer="2")])[0]
        assert out.done and out.info["success"] is True and batch.returns[0] == 1.0
    finally:
        batch.close()


class Scripted(ChatPolicy):
    """A chat policy whose replies are scripted texts (the model's side; the env, server and recording are real)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.requests: list[tuple[list[dict[str, Any]], list[str]]] = []

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> ParseResult:
        self.requests.append((copy.deepcopy(messages), [t["function"]["name"] for t in tools]))
        return parse_tool_calls(self.replies.pop(0))


def test_a_chat_policy_sees_the_conversation_sft_exports(tmp_path: Path) -> None:
    policy = Scripted([_call("add_note", text="milk"), "Noted. " + _call("submit", answer="Added milk."),
                       _call("add_note", text="eggs") + _call("count_notes"), _call("submit", answer="2")])
    env = RecordTrajectories(MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns), tmp_path / "r",
                             policy="scripted")
    try:
        obs, info = env.reset(seed=0, options={"task_id": "conv-0"})
        agent = policy.agent(env.unwrapped, obs, info, 0)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(asyncio.run(agent.act(obs, info)))
            done = terminated or truncated
        assert info["success"] is True
    finally:
        env.close()
    shown, tools = policy.requests[-1]
    assert "count_notes" in tools and "count_notes" not in policy.requests[0][1]
    assert [m["role"] for m in shown] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant",
                                          "tool", "tool"]
    assert shown[4] == {"role": "assistant", "content": "Noted.\n\nAdded milk."}  # turn 0's reply: text, answer
    rec = load(tmp_path / "r")
    steps = sorted(rec.steps.to_list(), key=lambda s: s["step_index"])
    assert conversation(rec.episodes.to_list()[0], steps)[:-1] == shown  # SFT trains on what the model was shown
    # One example per tool list: its prompt is the request that made its first reply, its tools that request's,
    # and its completion holds only replies made with those tools (count_notes is never offered before turn 1)
    data = sft.build(tmp_path / "r", layout="prompt_completion")
    assert len(data) == 2
    for row, (first, last) in zip(data, [(0, 1), (2, 3)], strict=True):
        assert row["prompt"] == policy.requests[first][0]
        assert sorted(t["function"]["name"] for t in row["tools"]) == sorted(policy.requests[first][1])
        assert policy.requests[first][1] == policy.requests[last][1]
        assert row["prompt"] + row["completion"][:-1] == policy.requests[last][0]
    # One `messages` example: the last request's messages (the tools note where count_notes appeared), the reset's
    # tools; it replays as it was played: each user turn's text reply is that turn's submit (before, the turn-0
    # submit was left out, so turn 1's calls ran in turn 0 and the replay scored 0 where the episode scored 1)
    (whole,) = sft.build(tmp_path / "r")
    assert whole["messages"][:-1] == shown and sorted(t["function"]["name"] for t in whole["tools"]) == sorted(
        policy.requests[0][1])
    assert [a["tool"] for a in sft.actions(whole)] == ["add_note", "submit", "add_note", "count_notes", "submit"]
    assert sft.actions(whole)[1]["arguments"] == {"answer": "Noted.\n\nAdded milk."}  # the reply as the model saw it
    replayed = MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns)
    assert sft.replay(whole, replayed) == whole["reward"] == 1.0
    replayed.close()


def test_a_failing_turn_hook_is_reported_and_the_turn_still_starts() -> None:
    mcp = MCPServer("broken-hook", log_level="WARNING")

    def hook(turn: int) -> str:
        raise ToolError(f"cannot start turn {turn}")

    def ping() -> str:
        return "pong"

    mcp.add_tool(hook, name=TURN_TOOL, meta={HIDDEN_META_KEY: True})
    mcp.add_tool(ping)
    env = MCPEnv({"b": InProcess(mcp)}, [Task(id="c", prompt="", turns=({"prompt": "one"}, {"prompt": "two"}))])
    try:
        _, info = env.reset(seed=0)
        assert info["tools"] == ["ping", "submit"]  # the hook is hidden
        obs, _, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "a"}})
        assert not terminated and (obs["task"], info["turn"]) == ("two", 1)
        assert info["error"]["kind"] == "tool_error" and info["error"]["server"] == "b"
        assert "mcp_gym_turn" in info["error"]["message"] and "cannot start turn 1" in info["error"]["message"]
        _, _, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "b"}})
        assert terminated and info["termination"] == "submit"
    finally:
        env.close()


def test_a_reply_without_a_call_ends_the_turn_with_its_text_under_trls_rule(tmp_path: Path) -> None:
    policy = Scripted([_call("add_note", text="milk"), "Added milk.", _call("add_note", text="eggs"),
                       _call("count_notes"), "2"])
    policy.no_call = "end"  # TRL's tool-loop rule: a reply without a call ends the turn (the episode at the last)
    env = RecordTrajectories(MCPEnv({"t": InProcess(make_server().mcp)}, [TASK], grader=grade_turns), tmp_path / "r",
                             policy="scripted")
    try:
        obs, info = env.reset(seed=0, options={"task_id": "conv-0"})
        agent = policy.agent(env.unwrapped, obs, info, 0)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(asyncio.run(agent.act(obs, info)))
            done = terminated or truncated
        assert info["success"] is True and info["final_answer"] == "2"
    finally:
        env.close()
    shown, _ = policy.requests[-1]
    assert shown[4] == {"role": "assistant", "content": "Added milk."}
    assert shown[5]["role"] == "user" and shown[5]["content"].startswith(f"{TURN1}\n\n[tools changed]")
    rec = load(tmp_path / "r")
    steps = sorted(rec.steps.to_list(), key=lambda s: s["step_index"])
    assert conversation(rec.episodes.to_list()[0], steps)[:-1] == shown
