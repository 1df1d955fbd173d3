"""The batched text-step API: model texts in, tool messages + rewards + done flags out, never a crash."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

import mcp_gym
from mcp_gym.chat import no_call_feedback, render_resources
from mcp_gym.textenv import StepOut, TextEnvBatch, parse_model_output, reset_options


def hermes(name: str, **arguments: object) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture
def batch() -> TextEnvBatch:
    b = TextEnvBatch("Counter", n=3)
    yield b
    b.close()


def test_reset_returns_chat_messages_with_task_and_resources(batch: TextEnvBatch) -> None:
    convs = batch.reset(["counter-0000", {"task_id": "counter-0001"}, None], seed=7)
    assert len(convs) == 3
    for conv in convs:
        assert [m["role"] for m in conv] == ["system", "user"]
        assert "[resource counter://state]\ncount=0 target=" in conv[1]["content"]
    assert convs[0][1]["content"].startswith("Use the counter tools to make the counter reach exactly 9")
    assert [e.task.id for e in batch.envs[:2]] == ["counter-0000", "counter-0001"]
    assert not batch.all_done
    names = [t["function"]["name"] for t in batch.tools]
    assert names == ["add", "get_count", "submit"]


def test_step_formats_and_rewards(batch: TextEnvBatch) -> None:
    batch.reset(["counter-0000", "counter-0001", "counter-0002"])  # targets 9, 4, ...
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x1", "type": "function", "function": {"name": "add", "arguments": '{"amount": 3}'}},
        {"type": "function", "function": {"name": "add", "arguments": {"amount": 1}}},
    ]}
    outs = batch.step([hermes("add", amount=5), message, '{"name": "get_count", "arguments": {}}'])
    assert all(isinstance(o, StepOut) for o in outs)
    # Hermes text: one call, a step cost, the changed resource appended to the tool message.
    o = outs[0]
    assert [m["role"] for m in o.messages] == ["tool"] and o.messages[0]["name"] == "add"
    assert '"count": 5' in o.messages[0]["content"] and "count=5 target=9" in o.messages[0]["content"]
    assert o.reward == pytest.approx(-0.01) and not o.done and o.info["parse_status"] == "ok"
    assert o.info["tool_calls"][0]["function"] == {"name": "add", "arguments": {"amount": 5}}
    # An OpenAI assistant message with two calls (JSON-string and dict arguments) reaching the target of 4.
    o = outs[1]
    assert [m["tool_call_id"] for m in o.messages] == ["call_0_0", "call_0_1"]  # the chat view's ids, always
    assert o.done and o.reward == pytest.approx(0.99) and o.info["success"] is True
    assert o.info["terminated"] and o.info["termination"] == "done" and o.info["episode_return"] == pytest.approx(0.99)
    # Bare JSON, a read-only tool: no reward, resource unchanged so nothing appended.
    o = outs[2]
    assert o.messages[0]["content"].strip() == "0" and o.reward == 0.0 and not o.done
    # A done episode is skipped; the others go on.
    outs = batch.step([hermes("add", amount=4), hermes("add", amount=1), hermes("add", amount=1)])
    assert outs[0].done and outs[0].reward == pytest.approx(1.0)
    assert outs[1].info["skipped"]
    assert outs[1].messages == [] and outs[1].reward == 0.0 and outs[1].done
    assert batch.returns[0] == pytest.approx(0.99)
    hist = batch.histories[0]
    assert [m["role"] for m in hist] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert hist[2]["tool_calls"][0]["function"]["arguments"] == {"amount": 5}


def test_unparseable_text_is_an_error_message_never_a_crash(batch: TextEnvBatch) -> None:
    batch.reset(["counter-0000"] * 3)
    garbage = ["I think I should add five.", '<tool_call>{"name": "add", "arguments": {"amount": </tool_call>',
               None]
    outs = batch.step(garbage)  # type: ignore[list-item]
    for o, reason in zip(outs, ["contains no tool call", "is not valid JSON", "contains no tool call"], strict=True):
        assert o.messages == [{"role": "user", "content": no_call_feedback(o.info["parse_status"])}]
        assert reason in o.messages[0]["content"] and "call `submit`" in o.messages[0]["content"]
        assert not o.done and o.info["errors"][0]["kind"] == "parse_error"
    assert [m["role"] for m in batch.histories[0]] == ["system", "user", "assistant", "user"]
    assert batch.histories[0][2] == {"role": "assistant", "content": "I think I should add five."}
    assert [o.info["parse_status"] for o in outs] == ["no_tool_call", "invalid_json", "no_tool_call"]
    assert [e.steps for e in batch.envs] == [1, 1, 1]  # the turn counts toward max_steps
    # Invalid arguments and unknown tools come back as the env's error text.
    outs = batch.step([hermes("add", amount=99), hermes("nope"), hermes("add", wrong=1)])
    assert "greater than the maximum of 5" in outs[0].messages[0]["content"]
    assert "unknown tool 'nope'" in outs[1].messages[0]["content"]
    assert all(o.info["errors"] and not o.done for o in outs)


def test_never_calling_a_tool_is_truncated() -> None:
    with TextEnvBatch("Counter", n=2, env_kwargs={"max_steps": 3}) as b:
        b.reset(["counter-0000", "counter-0001"])
        for _ in range(3):
            outs = b.step(["hmm", "still thinking"])
        assert all(o.done and o.info["truncated"] and o.info["termination"] == "max_steps" for o in outs)
        assert b.all_done


def test_no_tool_call_submit_mode_and_extra_calls() -> None:
    with TextEnvBatch("Counter", n=2, no_tool_call="submit", max_calls_per_turn=2, system_prompt=None) as b:
        convs = b.reset(["counter-0001", "counter-0000"])
        assert [m["role"] for m in convs[0]] == ["user"]
        calls = "\n".join([hermes("add", amount=1)] * 3)
        outs = b.step([hermes("add", amount=4), calls])
        assert outs[0].done and outs[0].info["success"] is True
        assert len(outs[1].messages) == 3 and "at most 2 tool calls" in outs[1].messages[2]["content"]
        assert b.envs[1].steps == 2
        outs = b.step(["ignored", "The count is 2."])
        assert outs[0].info["skipped"] and outs[1].done and outs[1].messages == []
        assert outs[1].info["termination"] == "submit" and outs[1].info["final_answer"] == "The count is 2."
        assert outs[1].info["success"] is False and outs[1].reward == 0.0


def test_episodes_run_concurrently() -> None:
    """Four episodes' tool calls are in flight at the same time (the server counts calls running at once). Each call
    waits until all four are in (not a fixed sleep, which a loaded machine could outlast before the fourth began)."""
    import anyio
    from mcp.server.mcpserver import MCPServer

    from mcp_gym.client.specs import InProcess

    server = MCPServer("overlap")
    running = {"now": 0, "most": 0}

    @server.tool()
    async def slow(seconds: float) -> str:
        """Wait until four calls run at once, or `seconds` (a bound: one after another, they never do)."""
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        try:
            with anyio.move_on_after(seconds):
                while running["most"] < 4:
                    await anyio.sleep(0.01)
        finally:
            running["now"] -= 1
        return "four at once" if running["most"] == 4 else f"alone after {seconds} s"

    with TextEnvBatch(lambda: mcp_gym.MCPEnv(InProcess(server)), n=4) as b:
        b.reset()
        outs = b.step([hermes("slow", seconds=60)] * 4)
        assert [o.messages[0]["content"] for o in outs] == ["four at once"] * 4
    assert running["most"] == 4  # one after another, it would be 1


def test_async_face_from_another_loop(batch: TextEnvBatch) -> None:
    async def run() -> list[StepOut]:
        await batch.areset(["counter-0001"] * 3)
        return await batch.astep([hermes("add", amount=4)] * 3)

    outs = asyncio.run(run())
    assert all(o.done and o.reward == pytest.approx(1.0) for o in outs)


def test_helpers() -> None:
    env = mcp_gym.make_env("Counter")
    try:
        prompt = env.tasks[3].prompt
        assert reset_options(env, None) is None
        assert reset_options(env, env.tasks[3].id) == {"task_id": env.tasks[3].id}
        row = {"prompt": [{"role": "system", "content": "x"}, {"role": "user", "content": prompt}]}
        assert reset_options(env, row) == {"task_id": env.tasks[3].id}
        assert reset_options(env, {"prompt": [{"role": "user", "content": ""}]}) is None
        adhoc = reset_options(env, "Make it 3.")
        assert adhoc is not None and adhoc["task"]["prompt"] == "Make it 3."
        assert reset_options(env, {"id": "t1", "prompt": "p"}) == {"task": {"id": "t1", "prompt": "p"}}
    finally:
        env.close()
    assert render_resources({"a://x": "1", "b://y": "2"}, {"a://x": "1"}) == "[resource b://y]\n2"
    content, calls, status, error = parse_model_output("Let me add.\n" + hermes("add", amount=2))
    assert content == "Let me add." and calls[0]["function"]["arguments"] == {"amount": 2} and status == "ok"
    assert parse_model_output(42)[2] == "no_tool_call"  # type: ignore[arg-type]


ADHOC_ID = """
import mcp_gym
from mcp_gym.textenv import reset_options
env = mcp_gym.make_env("Counter")
try:
    print(reset_options(env, "Make it 3.")["task"]["id"])
finally:
    env.close()
"""


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_an_adhoc_task_has_one_id_in_every_process() -> None:
    """The id of an ad-hoc task (a prompt that is no task of the env) depends on the prompt only: workers that record
    or group episodes by task id agree on it. It was ``hash(prompt)``, which differs between processes (Python
    randomises str hashes per process): two workers gave one prompt two ids."""
    procs = [subprocess.Popen([sys.executable, "-c", ADHOC_ID], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    ids = set()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        ids.add(out.strip())
    assert len(ids) == 1 and ids.pop().startswith("adhoc-"), ids


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        TextEnvBatch("Counter")
    with pytest.raises(ValueError):
        TextEnvBatch("Counter", n=1, no_tool_call="ignore")  # type: ignore[arg-type]
    with TextEnvBatch("Counter", n=2) as b:
        with pytest.raises(ValueError):
            b.reset(["counter-0000"])
        b.reset()
        with pytest.raises(ValueError):
            b.step(["a"])


def test_env_by_import_path() -> None:
    """A trainer's YAML can name an env factory as ``package.module:function`` (``env_kwargs`` are its arguments)."""
    with TextEnvBatch("mcp_gym.envs:make_env", n=1, env_kwargs={"name": "Counter", "max_steps": 3}) as b:
        b.reset(["counter-0000"])
        assert b.envs[0].max_steps == 3 and b.envs[0].task.id == "counter-0000"
    with pytest.raises(ValueError, match=r"env 'mcp_gym.envs:nope': cannot import 'nope' from 'mcp_gym.envs'"):
        TextEnvBatch("mcp_gym.envs:nope", n=1)
    with pytest.raises(ValueError, match=r"env 'no_such_module:f': cannot import"):
        TextEnvBatch("no_such_module:f", n=1)
    with pytest.raises(TypeError, match=r"^env 'os:getcwd' returned str, not an MCPEnv"):  # was AttributeError
        TextEnvBatch("os:getcwd", n=1)


def test_a_tool_added_mid_episode_is_named_when_the_listed_tools_lack_it() -> None:
    """The fast cover of the verl/SkyRL faces' warning (tests/test_verl.py, tests/test_skyrl.py): Maze's key reveals
    ``unlock``; a face that rendered the first tools once names it in one ``UserWarning``."""
    import warnings

    from mcp_gym.envs import load_env_tasks
    from mcp_gym.textenv import warn_unlisted_tools

    task = next(t for t in load_env_tasks("Maze", None, 0) if t.id == "maze-5x5-0003")
    with TextEnvBatch("Maze", n=1) as b:
        b.reset([task.id])
        listed = b.tools
        added: list[str] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for call in task.solution:
                (out,) = b.step([hermes(call["tool"], **call["arguments"])])
                added += warn_unlisted_tools("face", b.envs[0], listed, out.info)
                assert warn_unlisted_tools("face", b.envs[0], b.tools, out.info) == []  # listed now: no warning
    assert added == ["unlock"] and "unlock" not in [t["function"]["name"] for t in listed]
    (w,) = [w for w in caught if "unlock" in str(w.message)]
    assert "face: env 'mcp_gym/Maze-v0' added tool(s) unlock mid-trajectory" in str(w.message)
