"""SFT export (mcp_gym.sft): chat structure, filters, splits, output formats, dataset card and replay on every env."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import with_code_marked
from mcp.server.mcpserver import Context, MCPServer
from test_env_reset_listing import declare_list_changed, tools_changed

import mcp_gym
from mcp_gym import chat, sft
from mcp_gym.envs import BUNDLED_ENVS
from mcp_gym.recording import RecordTrajectories, TrajectoryWriter, load

pytestmark = pytest.mark.xdist_group("sft")  # one worker: `oracle_run`, `synthetic_run`: job runs made once

TASKS_PER_ENV = 2


def record_oracle(run_dir: Path, envs: Iterable[str] = BUNDLED_ENVS, tasks: int = TASKS_PER_ENV) -> Path:
    """Record the reference solutions of the first ``tasks`` tasks of each bundled env into ``run_dir``."""
    for name in envs:
        env = RecordTrajectories(mcp_gym.make_env(name), run_dir, policy="oracle")
        try:
            for task in env.unwrapped.tasks[:tasks]:
                env.reset(options={"task_id": task.id})
                for call in task.solution:
                    _, _, terminated, truncated, _ = env.step(dict(call))
                    if terminated or truncated:
                        break
        finally:
            env.close()
    return run_dir


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_oracle(tmp_path_factory.mktemp("oracle") / "run")


@pytest.fixture(scope="module")
def oracle(oracle_run: Path) -> datasets.Dataset:
    # one example per episode: Maze's `unlock` appears mid-episode, which the default would split (or drop in this
    # layout); test_prompt_completion_layout checks the split
    return sft.build(oracle_run, tools_changed="last")


def tool_calls(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]


# -- synthetic recordings (written with the recording writer) -----------------------------------------------------
TOOLS = [
    {"name": "add", "description": "Add to the counter.", "input_schema": {
        "type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}},
    {"name": "write", "description": "Write a file.", "input_schema": {
        "type": "object", "properties": {"path": {"type": "string"}, "meta": {"type": "object"}}}},
    {"name": "submit", "description": "Submit.", "input_schema": {
        "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}},
]


def write_episode(
    writer: TrajectoryWriter,
    task_id: str,
    calls: Sequence[Mapping[str, Any]],
    *,
    success: bool | None = True,
    reward: float = 1.0,
    final_answer: str | None = "done",
    tools: Sequence[Mapping[str, Any]] = TOOLS,
    changes: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """One recorded episode: ``calls`` are add_step keyword dicts with ``tool`` and ``arguments``."""
    ep = writer.start_episode(env_id="mcp_gym/Counter-v0", task_id=task_id, task_prompt=f"Solve {task_id}.",
                              tools=tools, seed=7, policy="synthetic")
    for call in calls:
        kw = {"observation": "ok", **call}
        ep.add_step(kw.pop("tool"), kw.pop("arguments"), **kw)
    ep.finish(total_reward=reward, success=success, termination="submit" if final_answer else "done",
              final_answer=final_answer, catalogue_changes=changes)


SUBMIT = {"tool": "submit", "arguments": {"answer": "done"}, "observation": "Submitted: done"}
TIMEOUT = {"kind": "timeout", "tool": "add", "server": "s", "argument": None, "code": -32001, "message": "slow"}
UNKNOWN = {"kind": "unknown_tool", "tool": "nope", "server": None, "argument": None, "code": None, "message": "no"}


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("synthetic") / "run"
    add = {"tool": "add", "arguments": {"amount": 2}}
    with TrajectoryWriter(path) as w:
        write_episode(w, "ok-1", [add, SUBMIT])
        write_episode(w, "ok-1", [add, SUBMIT])  # identical trajectory
        write_episode(w, "ok-2", [add, add, add, SUBMIT], reward=0.5)
        write_episode(w, "failed", [add, SUBMIT], success=False, reward=0.0)
        write_episode(w, "parse-error", [{**add, "raw_text": "<tool_call>{oops", "parse_status": "invalid_json"},
                                         SUBMIT])
        write_episode(w, "server-error", [{**add, "is_error": True, "error": TIMEOUT, "observation": "Error: slow"},
                                          SUBMIT])
        write_episode(w, "tool-error", [{"tool": "nope", "arguments": {}, "is_error": True, "error": UNKNOWN,
                                         "observation": "Error: no"}, add, SUBMIT])
    return path


def task_ids(ds: datasets.Dataset) -> list[str]:
    return sorted(ds["task_id"])


# -- structure ------------------------------------------------------------------------------------------------------
@pytest.mark.bwrap  # every bundled env, Code too
def test_every_bundled_env_exports_its_oracle_episodes(oracle: datasets.Dataset, oracle_run: Path) -> None:
    assert len(oracle) == len(BUNDLED_ENVS) * TASKS_PER_ENV
    envs = {name: mcp_gym.make_env(name) for name in BUNDLED_ENVS}
    try:
        for ex in oracle:
            env = envs[ex["env_id"].split("/")[1].removesuffix("-v0")]
            task = next(t for t in env.tasks if t.id == ex["task_id"])
            messages = ex["messages"]
            assert [m["role"] for m in messages[:2]] == ["system", "user"]
            assert messages[0]["content"] == sft.DEFAULT_SYSTEM_PROMPT == chat.DEFAULT_SYSTEM_PROMPT
            obs, _ = env.reset(seed=ex["seed"], options={"task_id": task.id})
            assert messages[1]["content"] == chat.user_content(task.prompt, obs["resources"])  # resources included
            calls = tool_calls(messages)
            expected = list(task.solution)[: len(calls)]
            assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
                (c["tool"], c["arguments"]) for c in expected]
            for i, m in enumerate(messages[2:], start=2):
                assert set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"}
                if m.get("tool_calls") and i < len(messages) - 1:
                    (call,) = m["tool_calls"]
                    assert call["type"] == "function" and isinstance(call["function"]["arguments"], dict)
                    reply = messages[i + 1]
                    assert reply == {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                                     "content": reply["content"]}
            assert messages[-1]["role"] == "assistant"  # the final reply; what it produced was never shown
            if ex["final_answer"] is not None:  # ended by submit: the conversation ends with the submit call
                assert messages[-1]["tool_calls"][0]["function"] == {
                    "name": "submit", "arguments": {"answer": ex["final_answer"]}}
            names = [t["function"]["name"] for t in ex["tools"]]
            assert [t for t in chat.env_tools(env) if t["function"]["name"] != "submit"] == [
                t for t in ex["tools"] if t["function"]["name"] in {e.name for e in env.tools}]
            assert "submit" in names  # (Maze: `unlock` too once the key is held)
            assert {c["function"]["name"] for c in calls} <= set(names)
            assert ex["num_tool_calls"] == len(calls)
            assert ex["success"] is True and ex["policy"] == "oracle" and ex["source_run"] == str(oracle_run)
            assert ex["seed"] is not None and ex["episode_id"]
    finally:
        for env in envs.values():
            env.close()


@pytest.mark.parametrize("name", with_code_marked(BUNDLED_ENVS))
def test_replaying_an_example_reproduces_the_recorded_reward(oracle: datasets.Dataset, name: str) -> None:
    examples = oracle.filter(lambda e: e == f"mcp_gym/{name}-v0", input_columns="env_id")
    assert len(examples) == TASKS_PER_ENV
    for ex in examples:
        env = mcp_gym.make_env(name)
        try:
            assert sft.replay(ex, env) == pytest.approx(ex["reward"])
        finally:
            env.close()


def test_replay_builds_the_env_from_its_id(oracle: datasets.Dataset) -> None:
    ex = next(e for e in oracle if e["env_id"] == "mcp_gym/SQL-v0")
    assert sft.replay(ex) == pytest.approx(ex["reward"])


def test_final_answer_as_submit_call(oracle_run: Path) -> None:
    ds = sft.build(oracle_run, final_answer="tool_call", system_prompt=None, tools_changed="last")
    submitted = [ex for ex in ds if ex["final_answer"] is not None]
    assert submitted
    for ex in submitted:
        last = ex["messages"][-1]
        assert ex["messages"][0]["role"] == "user"
        assert last["role"] == "assistant" and last["tool_calls"][0]["function"] == {
            "name": "submit", "arguments": {"answer": ex["final_answer"]}}
        assert "submit" in [t["function"]["name"] for t in ex["tools"]]
        assert ex["num_tool_calls"] == len(tool_calls(ex["messages"]))
        assert sft.actions(ex)[-1] == {"tool": "submit", "arguments": {"answer": ex["final_answer"]}}
        assert sum(a["tool"] == "submit" for a in sft.actions(ex)) == 1


def test_prompt_completion_layout(oracle_run: Path, oracle: datasets.Dataset) -> None:
    ds = sft.build(oracle_run, layout="prompt_completion", tools_changed="last")
    assert "messages" not in ds.column_names
    by_id = {ex["episode_id"]: ex for ex in oracle}
    for ex in ds:
        assert [m["role"] for m in ex["prompt"]] == ["system", "user"]
        assert ex["prompt"] + ex["completion"] == by_id[ex["episode_id"]]["messages"]
        assert sft.actions(ex) == sft.actions(by_id[ex["episode_id"]])
    # By default an episode whose tools changed (Maze: `unlock` once the key is held) is one example per tool list:
    # no completion calls a tool its example does not offer, and the parts put together are the whole conversation
    split = sft.build(oracle_run, layout="prompt_completion")
    maze = [ex for ex in split if ex["env_id"] == "mcp_gym/Maze-v0"]
    assert len(split) == len(ds) + len(maze) // 2 and len(maze) == 2 * TASKS_PER_ENV
    for first, second in zip(maze[::2], maze[1::2], strict=True):
        assert "unlock" not in [t["function"]["name"] for t in first["tools"]]
        assert "unlock" in [t["function"]["name"] for t in second["tools"]]
        assert first["prompt"] + first["completion"][:-1] == second["prompt"][:len(first["prompt"]) - 1 + len(
            first["completion"])]
        assert second["prompt"] + second["completion"] == by_id[second["episode_id"]]["messages"]
    for ex in split:
        offered = {t["function"]["name"] for t in ex["tools"]}
        assert {c["function"]["name"] for c in tool_calls(ex["completion"])} <= offered


# -- recorded model text --------------------------------------------------------------------------------------------
def test_recorded_model_text_is_kept_without_tool_markup(tmp_path: Path) -> None:
    raw = '<think>Two more.</think>\n<tool_call>\n{"name": "add", "arguments": {"amount": 2}}\n</tool_call>'
    both = "<think>Two calls.</think><tool_call>{...}</tool_call><tool_call>{...}</tool_call>"
    with TrajectoryWriter(tmp_path / "run") as w:
        write_episode(w, "t", [
            {"tool": "add", "arguments": {"amount": 2}, "raw_text": raw, "parse_status": "ok"},
            {"tool": "add", "arguments": {"amount": 1}, "raw_text": both, "parse_status": "ok"},
            {"tool": "add", "arguments": {"amount": 1}, "raw_text": both, "parse_status": "ok"},
            {**SUBMIT, "raw_text": '<think>Done.</think>{"name": "submit", "arguments": {"answer": "done"}}'},
        ])
    messages = sft.build(tmp_path / "run")[0]["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert [m["content"] for m in assistant] == [  # calls parsed from one output: one assistant turn
        "<think>Two more.</think>", "<think>Two calls.</think>", "<think>Done.</think>"]
    assert [len(m["tool_calls"]) for m in assistant] == [1, 2, 1]
    without = sft.build(tmp_path / "run", assistant_text=None)[0]["messages"]
    assert [m["content"] for m in without if m["role"] == "assistant"] == ["", "", ""]
    as_message = sft.build(tmp_path / "run", final_answer="message")[0]["messages"]
    assert as_message[-1] == {"role": "assistant", "content": "<think>Done.</think>\n\ndone"}


@pytest.mark.parametrize(("raw", "text"), [
    ('<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>', ""),
    ("<think>x</think>\n\n<tool_call>{}</tool_call>", "<think>x</think>"),
    ('Let me look.<|python_tag|>{"name": "a", "parameters": {}}', "Let me look."),
    ('[TOOL_CALLS][{"name": "a", "arguments": {}}]', ""),
    ('{"name": "a", "parameters": {"x": 1}}', ""),
    ("The answer is {42}.", "The answer is {42}."),
    ("<tool_call>{unterminated", ""),
])
def test_strip_tool_calls(raw: str, text: str) -> None:
    assert sft.strip_tool_calls(raw) == text


# -- filters --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "kept"), [
    ({}, ["ok-1", "ok-2", "tool-error"]),
    ({"dedupe": False}, ["ok-1", "ok-1", "ok-2", "tool-error"]),
    ({"success_only": False}, ["failed", "ok-1", "ok-2", "tool-error"]),
    ({"drop_errors": False}, ["ok-1", "ok-2", "parse-error", "server-error", "tool-error"]),
    ({"drop_tool_errors": True}, ["ok-1", "ok-2"]),
    ({"min_reward": 0.75}, ["ok-1", "tool-error"]),
    ({"max_turns": 3}, ["ok-1", "tool-error"]),
    ({"task_ids": ["ok-2", "failed"]}, ["ok-2"]),
    ({"success_only": False, "drop_errors": False, "dedupe": False},
     ["failed", "ok-1", "ok-1", "ok-2", "parse-error", "server-error", "tool-error"]),
])
def test_filters(synthetic_run: Path, options: dict[str, Any], kept: list[str]) -> None:
    assert task_ids(sft.build(synthetic_run, **options)) == kept


def test_failed_steps_are_kept_as_tool_messages(synthetic_run: Path) -> None:
    ex = next(e for e in sft.build(synthetic_run) if e["task_id"] == "tool-error")
    assert ex["messages"][2]["tool_calls"][0]["function"] == {"name": "nope", "arguments": {}}
    assert ex["messages"][3] == {"role": "tool", "tool_call_id": "call_0_0", "name": "nope", "content": "Error: no"}


def test_actions_without_a_tool_name_are_never_exported(tmp_path: Path) -> None:
    malformed = {"kind": "malformed", "tool": None, "server": None, "argument": None, "code": None, "message": "?"}
    with TrajectoryWriter(tmp_path / "run") as w:
        write_episode(w, "t", [{"tool": None, "arguments": "oops", "is_error": True, "error": malformed}, SUBMIT])
    with pytest.raises(sft.NothingToExport, match=r"all 1 episodes read were dropped \(malformed: 1\)"):
        sft.build(tmp_path / "run", drop_errors=False)  # nothing kept of a non-empty run: said, not an empty dataset


def test_tools_include_tools_that_appeared_during_the_episode(tmp_path: Path) -> None:
    extra = {"name": "secret", "description": "Shown later.", "input_schema": {"type": "object"}}
    with TrajectoryWriter(tmp_path / "run") as w:
        write_episode(w, "t", [{"tool": "add", "arguments": {"amount": 1}}, SUBMIT],
                      changes=[{"step_index": 0, "hash": "x", "tools": [*TOOLS, extra]}])
    ex = sft.build(tmp_path / "run", tools_changed="last")[0]  # the tools of the last request
    assert [t["function"]["name"] for t in ex["tools"]] == ["add", "write", "submit", "secret"]
    assert ex["tools"][0] == {"type": "function", "function": {
        "name": "add", "description": "Add to the counter.", "parameters": TOOLS[0]["input_schema"]}}


def test_client_recordings_render_content_blocks(tmp_path: Path) -> None:
    blocks = [{"type": "text", "text": "line"}, {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}]
    with TrajectoryWriter(tmp_path / "run") as w:
        write_episode(w, "t", [{"tool": "add", "arguments": {"amount": 1}, "observation": None, "content": blocks},
                               SUBMIT])
    messages = sft.build(tmp_path / "run")[0]["messages"]
    assert messages[-2]["content"] == "line\n[image: image/png, 6 bytes]"


# -- splits ---------------------------------------------------------------------------------------------------------
@pytest.mark.bwrap  # counts the episodes of every bundled env, Code too
@pytest.mark.parametrize("test_size", [0.25, 3, 0.01])
def test_train_test_split_by_task(oracle_run: Path, test_size: float) -> None:
    dd = sft.build(oracle_run, test_size=test_size, seed=3, tools_changed="last")
    train, test = ({(e["env_id"], e["task_id"]) for e in dd[s]} for s in ("train", "test"))
    assert train and test and not train & test
    assert len(train) + len(test) == len(BUNDLED_ENVS) * TASKS_PER_ENV
    if isinstance(test_size, int):
        assert len(test) == test_size
    again = sft.build(oracle_run, test_size=test_size, seed=3, tools_changed="last")
    assert again["test"]["episode_id"] == dd["test"]["episode_id"]


def test_bad_options_raise(oracle_run: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="final_answer"):
        sft.build(oracle_run, final_answer="text")
    with pytest.raises(ValueError, match="test_size"):
        sft.build(oracle_run, test_size=1.5)
    with pytest.raises(TypeError):
        sft.build(oracle_run, no_such_filter=True)
    with pytest.raises(ValueError, match="format"):
        sft.export(oracle_run, tmp_path / "out", format="csv")
    with pytest.raises(FileNotFoundError, match="no recorded run"):
        sft.build(tmp_path / "missing")


# -- sources and outputs --------------------------------------------------------------------------------------------
def test_many_runs_by_path_glob_and_parent(tmp_path: Path) -> None:
    for name in ("a", "b"):
        with TrajectoryWriter(tmp_path / "runs" / f"run-{name}") as w:
            write_episode(w, f"task-{name}", [{"tool": "add", "arguments": {"amount": 1}}, SUBMIT])
    runs = [str(tmp_path / "runs" / "run-a"), str(tmp_path / "runs" / "run-b")]
    loaded = [load(r) for r in runs]
    for source in (runs, str(tmp_path / "runs" / "run-*"), tmp_path / "runs", [*runs, runs[0]], loaded):
        ds = sft.build(source)
        assert sorted(zip(ds["task_id"], ds["source_run"], strict=True)) == [
            ("task-a", runs[0]), ("task-b", runs[1])]


def _rows(ds: datasets.Dataset) -> list[dict[str, Any]]:
    return sorted(ds.to_list(), key=lambda r: r["episode_id"])


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "disk"])
def test_export_round_trips_arguments_as_objects(oracle_run: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "sft"
    written = sft.export(oracle_run, out, format=fmt, test_size=0.25)
    assert isinstance(written, datasets.DatasetDict)
    cache = str(tmp_path / "hf")
    loaded = datasets.load_from_disk(str(out)) if fmt == "disk" else datasets.load_dataset(str(out), cache_dir=cache)
    for split in ("train", "test"):
        assert loaded[split].features == sft.features()
        assert _rows(loaded[split]) == _rows(written[split])
    assert all(isinstance(c["function"]["arguments"], dict) for ex in loaded["train"]
               for c in tool_calls(ex["messages"]))
    # Below datasets: every stored message is one JSON object whose arguments are objects, never strings.
    if fmt == "parquet":
        table = pq.read_table(next((out / "data").glob("train-*.parquet")))
        assert table.schema.field("messages").type.value_type == pa.json_()
        stored = [json.loads(m) for row in table.column("messages").to_pylist() for m in row]
    elif fmt == "jsonl":
        lines = next((out / "data").glob("train-*.jsonl")).read_text(encoding="utf-8").splitlines()
        stored = [m for line in lines for m in json.loads(line)["messages"]]
    else:
        return
    calls = tool_calls(stored)
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)
    assert all(m["role"] == "tool" or "tool_call_id" not in m for m in stored)  # no null-filled keys


def test_parquet_shards_load_with_the_parquet_builder(oracle_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    written = sft.export(oracle_run, out, max_shard_rows=5)
    count = -(-len(written) // 5)  # 3 shards; 2 where bubblewrap is missing (the Code env's episodes then fail)
    assert count >= 2
    shards = sorted(p.name for p in (out / "data").iterdir())
    assert [name[:20] for name in shards] == [f"train-{i:05d}-of-{count:05d}" for i in range(count)]
    loaded = datasets.load_dataset("parquet", data_files=str(out / "data" / "*.parquet"), split="train",
                                  cache_dir=str(tmp_path / "hf"))
    assert loaded.features == sft.features() and _rows(loaded) == _rows(written)


def test_dataset_card(synthetic_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    sft.export(synthetic_run, out, format="jsonl", min_reward=0.75, test_size=1)
    card = (out / "README.md").read_text(encoding="utf-8")
    meta = datasets.load_dataset_builder(str(out), cache_dir=str(tmp_path / "hf")).info
    assert meta.features == sft.features()
    for text in (*sft.features(), str(synthetic_run), "`min_reward`: `0.75`", "`test_size`: `1`",
                 "7 episodes read, 2 examples kept", "dedupe: 1", "drop_errors: 2", "min_reward: 1",
                 "success_only: 1", "data/<split>-<tag>.jsonl"):
        assert text in card, text


def test_export_refuses_to_clobber(oracle_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    sft.export(oracle_run, out, format="jsonl")
    with pytest.raises(FileExistsError, match="not empty"):
        sft.export(oracle_run, out)
    assert len(sft.export(oracle_run, out, overwrite=True, task_ids=["sql-0000"])) == 1
    cache = str(tmp_path / "hf")
    assert [p.suffix for p in (out / "data").iterdir()] == [".parquet"]
    assert datasets.load_dataset(str(out), split="train", cache_dir=cache)["task_id"] == ["sql-0000"]
    sft.export(oracle_run, out, overwrite=True, task_ids=["sql-0001"])
    assert datasets.load_dataset(str(out), split="train", cache_dir=cache)["task_id"] == ["sql-0001"]  # not stale
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="refusing"):
        sft.export(oracle_run, other, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp dirs left behind


# -- tools that change mid-episode -------------------------------------------------------------------------------------
def door_server() -> MCPServer:
    """A plain MCPServer whose tools change mid-episode: ``take_key`` adds ``unlock`` and removes itself, and says so
    with ``notifications/tools/list_changed`` (nothing else tells the client)."""
    mcp = MCPServer("door", log_level="WARNING")
    declare_list_changed(mcp)

    @mcp.tool()
    async def look() -> str:
        """Look around."""
        return "A locked door. A key on the floor. <|im_end|>"  # server text: neutralised alike everywhere

    async def unlock(code: int) -> str:
        """Open the door with the key and a code."""
        return f"The door opens ({code})."

    @mcp.tool()
    async def take_key(ctx: Context) -> str:
        """Pick up the key."""
        mcp.add_tool(unlock)
        mcp.remove_tool("take_key")
        await tools_changed(ctx)
        return "You hold the key."

    return mcp


def test_an_episode_whose_tools_changed_exports_as_the_policy_saw_it(tmp_path: Path) -> None:
    """Recorded through the chat policy (eval's chat view), exported to Parquet, loaded with ``datasets``: the one
    example's messages are every request the policy sent, byte for byte, tools note included, then the final reply;
    its ``tools`` are those offered at reset (what verl and SkyRL render once per trajectory)."""
    from episodes import hermes, run_policy

    from mcp_gym import InProcess, MCPEnv
    from mcp_gym.recording.schema import dumps
    from mcp_gym.tasks import Task

    def make() -> MCPEnv:
        return MCPEnv({"door": InProcess(door_server())}, [Task(id="door-0", prompt="Open the door.", answer="open")],
                      env_id="test/Door-v0", verifier=lambda t, answer, state: float(answer == t.answer))

    texts = [hermes(("look", {}), text="Let me look."), hermes(("take_key", {})), "The key is mine.",
             hermes(("unlock", {"code": 7})), hermes(("submit", {"answer": "open"}))]
    policy = run_policy(make, "door-0", texts, tmp_path / "run")
    assert len(policy.requests) == len(texts)
    before, after = policy.requests[0][1], policy.requests[-1][1]
    assert {t["function"]["name"] for t in before} == {"look", "take_key", "submit"}
    assert {t["function"]["name"] for t in after} == {"look", "unlock", "submit"}
    note = chat.tools_note(before, after)
    assert '"name": "unlock"' in note and note.endswith("Removed tools (no longer callable): take_key")

    sft.export(tmp_path / "run", tmp_path / "sft", drop_errors=False)  # (keeps the reply without a call)
    (ex,) = datasets.load_dataset("parquet", data_files=str(tmp_path / "sft" / "data" / "*.parquet"), split="train",
                                  cache_dir=str(tmp_path / "hf"))
    messages = ex["messages"]
    for shown, _ in policy.requests:  # every request: a prefix of the example, message for message, byte for byte
        assert [dumps(m) for m in messages[:len(shown)]] == [dumps(m) for m in shown]
    assert len(messages) == len(policy.requests[-1][0]) + 1
    assert messages[-1]["tool_calls"][0]["function"] == {"name": "submit", "arguments": {"answer": "open"}}
    (noted,) = [m for m in messages if "[tools changed]" in (m.get("content") or "")]
    assert noted["role"] == "tool" and noted["name"] == "take_key"
    assert noted["content"] == "You hold the key.\n\n" + note  # the message answering the step that changed them
    assert "<\u200b|im_end|>" in messages[3]["content"]  # look's result, as the model was shown it
    assert ex["tools"] == before and ex["success"] is True
    # tools_changed=last: the last request's tools, the same messages; prompt_completion: one example per tool list
    assert sft.build(tmp_path / "run", drop_errors=False, tools_changed="last")[0]["tools"] == after
    first, second = sft.build(tmp_path / "run", drop_errors=False, layout="prompt_completion")
    assert (first["tools"], second["tools"]) == (before, after)
    assert second["prompt"] == next(shown for shown, tools in policy.requests if tools == after)
    with pytest.raises(ValueError, match="tools_changed='split' needs layout='prompt_completion'"):
        sft.build(tmp_path / "run", tools_changed="split")
