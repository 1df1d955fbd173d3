"""Conventions shared with the ecosystem: success from the reward convention when there is no verifier (env, eval,
SFT export) and Gymnasium's standard wrappers on every bundled env."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import with_code_marked
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from mcp_gym import InProcess, MCPEnv
from mcp_gym.cli import main
from mcp_gym.sft import NothingToExport, export

SERVER = textwrap.dedent('''
    """An MCP server without verifier that follows the reward convention: `finish` reports reward and `done`."""
    import sys

    from mcp.server.mcpserver import MCPServer
    from pydantic import BaseModel


    class Outcome(BaseModel):
        reward: float
        done: bool


    server = MCPServer("convention", log_level="WARNING")


    @server.tool()
    def echo(text: str) -> str:
        """Repeat the text."""
        return text


    if "--done" in sys.argv:
        @server.tool()
        def finish() -> Outcome:
            """Finish the game (you win)."""
            return Outcome(reward=1.0, done=True)

    server.run()
''')


class Outcome(BaseModel):
    reward: float
    done: bool


def convention_server() -> MCPServer:
    """In process: ``step(cost)`` costs ``cost`` and goes on; ``finish(score)`` reports ``score`` and ``done``."""
    server = MCPServer("convention", log_level="WARNING")

    @server.tool()
    def step(cost: float) -> Outcome:
        """A move that costs ``cost``."""
        return Outcome(reward=-cost, done=False)

    @server.tool()
    def finish(score: float) -> Outcome:
        """End the game with ``score``."""
        return Outcome(reward=score, done=True)

    return server


def test_done_without_verifier_succeeds_from_the_return() -> None:
    env = MCPEnv(InProcess(convention_server()), ["play"], max_steps=5)
    try:
        env.reset(seed=0)
        *_, terminated, _, info = env.step({"tool": "finish", "arguments": {"score": 1.0}})
        assert terminated and info["success"] is True and info["termination"] == "done"
        env.reset(seed=0)
        *_, info = env.step({"tool": "finish", "arguments": {"score": 0.4}})
        assert info["success"] is False  # below the default success_threshold of 1.0
        env.reset(seed=0)
        for _ in range(3):  # rewarding moves
            env.step({"tool": "step", "arguments": {"cost": -0.3}})
        *_, info = env.step({"tool": "finish", "arguments": {"score": 0.1}})
        assert info["summary"]["return"] < 1.0  # 0.3 + 0.3 + 0.3 + 0.1 == 0.9999999999999999
        assert info["success"] is True and info["summary"]["return"] == pytest.approx(1.0)
        env.reset(seed=0)
        *_, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "x"}})
        assert terminated and info["success"] is None  # no verifier, no done: unknown
        env.reset(seed=0)
        for _ in range(5):
            *_, truncated, info = env.step({"tool": "step", "arguments": {"cost": 0.0}})
        assert truncated and info["success"] is None
    finally:
        env.close()
    lenient = MCPEnv(InProcess(convention_server()), ["play"], success_threshold=0.3)
    try:
        lenient.reset(seed=0)
        lenient.step({"tool": "step", "arguments": {"cost": 0.05}})
        *_, info = lenient.step({"tool": "finish", "arguments": {"score": 0.4}})
        assert info["success"] is True  # return 0.35 >= 0.3
    finally:
        lenient.close()


def _eval(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, *server_args: str,
          episodes: int = 12) -> tuple[Path, dict, str]:
    """``mcp-gym eval`` (through ``main``, in this process) of the convention server, as a stdio subprocess."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    out = tmp_path / name
    args = ["eval", "env=custom", f"+env.servers.game={sys.executable} {script}"
            + "".join(f" {a}" for a in server_args), "env.max_steps=4", "policy=random", f"episodes={episodes}",
            "samples=1", "plots=false", "launcher.progress=false", f"out={out}"]
    capsys.readouterr()
    code = main(args)
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    return out, json.loads((out / "report" / "results.json").read_text())["summary"], printed.out


def test_eval_and_export_when_success_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server with no verifier and no `done`: eval shows `-` for success (not 0 %), export says why it is empty."""
    out, summary, table = _eval(tmp_path, capsys, "unknown", episodes=4)
    assert summary["episodes"] == 4 and summary["success_rate"] is None and summary["success_unknown"] == 4
    row = next(line for line in table.splitlines() if "success rate" in line)
    assert row.split("│")[2].strip() == "-" and "%" not in row
    with pytest.raises(NothingToExport, match=r"4 of 4 episodes have no known success.*success_only=False"):
        export(out, tmp_path / "sft")
    assert not (tmp_path / "sft").exists()
    capsys.readouterr()
    # through main in this process (a refusal as a process: test_jobs' test_rerun_with_another_model_refuses)
    assert main(["export-sft", f"runs=[{out}]", f"out={tmp_path / 'sft'}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "sft.success_only=false" in err
    ds = export(out, tmp_path / "sft", success_only=False)
    assert len(ds) > 0


def test_eval_with_done_and_no_verifier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same server with a `finish` tool reporting reward 1 and `done`: those episodes succeed, the others (submit,
    max_steps) count as failures, and the success-only export keeps exactly the successful ones."""
    out, summary, table = _eval(tmp_path, capsys, "done", "--done")
    from mcp_gym.recording import load

    episodes = load(out).episodes
    finished = sum(t == "done" for t in episodes["termination"])
    assert 0 < finished < 12  # random play: some episodes call finish, others submit or run out of steps
    assert summary["success_rate"] == pytest.approx(finished / 12)
    assert summary["success_unknown"] == 12 - finished and "success unknown" in table  # submit or max_steps
    assert all(s is True for s, t in zip(episodes["success"], episodes["termination"], strict=True) if t == "done")
    assert len(export(out, tmp_path / "sft", dedupe=False)) == finished


# -- Gymnasium's standard wrappers on every bundled env ----------------------------------------------------------------
BUNDLED = ["Counter", "Notes", "Files", "SQL", "Code", "Maze", "Lookup"]


@pytest.mark.parametrize("name", with_code_marked(BUNDLED))
def test_standard_wrappers_on_every_bundled_env(name: str) -> None:
    """gymnasium.make adds TimeLimit (at the env's own limit), OrderEnforcing and the env checker; with
    RecordEpisodeStatistics on top, an episode ended by the env (the reference solution: submit, or the server's
    done) and one cut off by TimeLimit both report Gymnasium's info["episode"] next to mcp-gym's info["summary"]."""
    import gymnasium as gym
    from gymnasium.wrappers import OrderEnforcing, RecordEpisodeStatistics, TimeLimit

    from mcp_gym.envs import env_module

    env_id = f"mcp_gym/{name}-v0"
    assert gym.spec(env_id).max_episode_steps == env_module(name).MAX_STEPS
    env = RecordEpisodeStatistics(gym.make(env_id))
    try:
        assert isinstance(env.env, TimeLimit) and env.spec.max_episode_steps == env.unwrapped.max_steps
        assert any(isinstance(w, OrderEnforcing) for w in _chain(env))
        with pytest.raises(gym.error.ResetNeeded):
            env.step({"tool": "submit", "arguments": {"answer": "x"}})
        obs, info = env.reset(seed=0)
        task = env.unwrapped.task
        total, n = 0.0, 0
        for call in task.solution:
            obs, reward, terminated, truncated, info = env.step(call)
            total, n = total + float(reward), n + 1
            if terminated or truncated:
                break
        assert terminated and not truncated and info["success"] is True
        assert info["termination"] in ("submit", "done")
        assert info["episode"]["r"] == pytest.approx(total) and info["episode"]["l"] == n
        submitted = info["termination"] == "submit"  # submit is answered by the env, not a server: not a tool call
        assert info["summary"] == {"return": pytest.approx(total), "length": n, "termination": info["termination"],
                                   "turns": n, "tool_calls": n - submitted}
        assert env.episode_count == 1
    finally:
        env.close()

    short = RecordEpisodeStatistics(gym.make(env_id, max_episode_steps=2))  # Gymnasium's TimeLimit cuts it off
    try:
        short.reset(seed=1)
        call = short.unwrapped.task.solution[0]
        *_, terminated, truncated, info = short.step(call)
        if not terminated:
            *_, terminated, truncated, info = short.step(call)
            assert truncated and info["episode"]["l"] == 2
    finally:
        short.close()


def _chain(env):  # type: ignore[no-untyped-def]
    while True:
        yield env
        if env is env.unwrapped:
            return
        env = env.env


def test_record_episode_statistics_on_counter_submit_and_done() -> None:
    """The issue's example: RecordEpisodeStatistics(gym.make("mcp_gym/Counter-v0")) over episodes ended by submit
    and by the server's done."""
    import gymnasium as gym
    from gymnasium.wrappers import RecordEpisodeStatistics

    env = RecordEpisodeStatistics(gym.make("mcp_gym/Counter-v0"))
    try:
        env.reset(seed=0, options={"task_id": "counter-0000"})
        *_, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "0"}})
        assert terminated and info["termination"] == "submit" and info["episode"]["l"] == 1
        env.reset(seed=0, options={"task_id": "counter-0000"})
        for call in env.unwrapped.task.solution:  # adds up to the target: the server says done before submit
            *_, terminated, _, info = env.step(call)
            if terminated:
                break
        assert info["termination"] == "done" and info["success"] is True
        assert info["episode"]["r"] == pytest.approx(info["summary"]["return"]) and info["episode"]["r"] > 0
        assert env.episode_count == 2 and len(env.return_queue) == 2
    finally:
        env.close()


def test_async_face_through_gymnasium_wrappers(tmp_path: Path) -> None:
    """mcp_gym.areset/astep drive a chain of Gymnasium wrappers around an MCPEnv (their sync logic in a worker thread),
    and RecordTrajectories (an AsyncWrapper) keeps its async face on top of such a chain."""
    import asyncio

    import gymnasium as gym
    from gymnasium.wrappers import RecordEpisodeStatistics

    import mcp_gym
    from mcp_gym.recording import RecordTrajectories, load

    async def main() -> dict:
        env = RecordTrajectories(RecordEpisodeStatistics(gym.make("mcp_gym/Counter-v0")), tmp_path / "run",
                                 policy="oracle")
        assert not hasattr(env.env, "astep")  # Gymnasium's wrapper has no async face of its own
        try:
            await env.areset(seed=0, options={"task_id": "counter-0003", "episode_key": "k"})
            for call in env.unwrapped.task.solution:
                *_, terminated, truncated, info = await env.astep(call)
                if terminated or truncated:
                    return info
            raise AssertionError("the reference solution did not end the episode")
        finally:
            await mcp_gym.aclose(env)

    info = asyncio.run(main())
    assert info["episode"]["l"] == info["summary"]["length"] and info["success"] is True
    episodes = load(tmp_path / "run").episodes
    assert len(episodes) == 1 and episodes[0]["success"] and episodes[0]["termination"] == info["termination"]
