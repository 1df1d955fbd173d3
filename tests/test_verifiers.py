"""verifiers (prime-rl, ``vf-eval``) through its built-in OpenEnv taskset pointed at ``mcp-gym serve-openenv``.

verifiers 0.4 pins ``mcp==2.0.0`` (mcp-gym needs ``mcp>=2.3``), so it lives in its own venv, with ``mcp>=2.3`` and
``openenv-core`` installed over it: ``MCP_GYM_VERIFIERS_PYTHON`` names that venv's python (.ci/run makes it; the
tests skip without it). There, verifiers' ``OpenEnvEnv`` (its ``GenericEnvClient`` session, ``/schema``,
``list_tools``, ``parse_action`` of the model's reply, the per-step rewards summed into ``openenv_reward``) plays
scripted replies against an mcp-gym OpenEnv server running here; the episode it plays reaches the same success and
the same recorded episode as the same calls through ``MCPEnv`` directly, on a bundled env and on server-everything."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from episodes import recorded_episode

PYTHON = os.environ.get("MCP_GYM_VERIFIERS_PYTHON", "")
if not PYTHON or not Path(PYTHON).is_file():
    pytest.skip("needs verifiers in its own venv: set MCP_GYM_VERIFIERS_PYTHON to its python (.ci/run makes one)",
                allow_module_level=True)
import test_openenv  # noqa: E402
from test_openenv import COUNTER_CALLS, MAZE_CALLS, SUM_CALLS, SUM_TASK, Calls, everything_env, run_direct  # noqa: E402

from mcp_gym import make_env  # noqa: E402

pytestmark = pytest.mark.verifiers

serve = test_openenv.serve  # the OpenEnv server fixture (an mcp-gym OpenEnv server in a thread here)
PLAYER = Path(__file__).with_name("verifiers_player.py")


def replies(calls: Calls) -> list[str]:
    """The calls as a model writes OpenEnv actions for verifiers: JSON, the first one in a fenced block."""
    out = [json.dumps({"type": "call_tool", "tool_name": tool, "arguments": args}) for tool, args, _ in calls]
    out[0] = f"```json\n{out[0]}\n```"
    return out


def play(url: str, resets: list[dict[str, Any]], texts: list[list[str]]) -> list[dict[str, Any]]:
    """verifiers' OpenEnv taskset and env, in the verifiers venv, on each reset with its replies."""
    taskset = {"id": "openenv", "base_url": url, "resets": resets}
    done = subprocess.run([PYTHON, str(PLAYER), json.dumps(taskset), json.dumps(texts)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize(("name", "task_id", "calls"), [("Maze", "maze-5x5-0000", MAZE_CALLS),
                                                         ("Counter", "counter-0000", COUNTER_CALLS)])
def test_bundled_env_plays_and_records_like_mcpenv(name: str, task_id: str, calls: Calls, tmp_path: Path,
                                                   serve: Any) -> None:
    run_direct(lambda: make_env(name), task_id, calls, tmp_path / "direct")
    server = serve(name, record_to=str(tmp_path / "vf"))
    (result,) = play(server.url, [{"task_id": task_id, "seed": 5}], [replies(calls)])
    server.stop()
    direct, served = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "vf")
    assert served == direct  # messages, tool calls, rewards, success
    assert result["rewards"]["openenv_reward"] == pytest.approx(direct["total_reward"])
    first = result["payloads"][0]
    assert first["observation"]["task_id"] == task_id  # the chat view's opening, the tools verifiers lists
    assert [t["name"] for t in first["action_schema"]["available_tools"]][-1] == "submit"
    assert len(result["payloads"]) == len(calls)  # the last call ended the episode


@pytest.mark.thirdparty
def test_server_everything_plays_and_records_like_mcpenv(tmp_path: Path, serve: Any) -> None:
    run_direct(everything_env, SUM_TASK["id"], SUM_CALLS, tmp_path / "direct")
    server = serve(everything_env, record_to=str(tmp_path / "vf"))
    (result,) = play(server.url, [{"prompt": SUM_TASK["prompt"], "seed": 5}], [replies(SUM_CALLS)])
    server.stop()
    direct, served = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "vf")
    assert served == direct and direct["success"] is True
    assert result["rewards"]["openenv_reward"] == pytest.approx(direct["total_reward"])
    assert result["payloads"][-1]["observation"]["result"] == "The sum of 3 and 4 is 7."


@pytest.mark.filterwarnings("ignore:.*it is not recorded")  # the cut episode, as asserted below
def test_many_tasks_and_a_reply_that_is_no_action(tmp_path: Path, serve: Any) -> None:
    """One taskset of several resets (verifiers' finite tasks), each its own session and recorded episode; an empty
    reply ends verifiers' run (its ``empty_action`` stop) and leaves the episode unfinished (not recorded)."""
    from mcp_gym.envs import load_env_tasks
    from mcp_gym.recording import load

    tasks = load_env_tasks("Counter", None, 0)[:3]
    server = serve("Counter", record_to=str(tmp_path / "vf"))
    texts = [replies([(c["tool"], c["arguments"], "") for c in t.solution]) for t in tasks[:2]] + [
        [replies([("get_count", {}, "")])[0], ""]]
    results = play(server.url, [{"task_id": t.id} for t in tasks], texts)
    server.stop()
    assert [r["reset"]["task_id"] for r in results] == [t.id for t in tasks]
    assert [r["stop"] for r in results] == [None, None, "empty_action"]
    episodes = load(tmp_path / "vf").episodes
    assert sorted(episodes["task_id"]) == sorted(t.id for t in tasks[:2]) and all(episodes["success"])


def test_the_docs_config(tmp_path: Path, serve: Any) -> None:
    """The verifiers page (docs/training/verifiers.md): its ``eval.toml`` passes ``vf-eval --dry-run`` (the command as
    written, a model named), and its taskset, pointed at a server here, plays its tasks."""
    from mcp_gym.envs import load_env_tasks

    tomllib = pytest.importorskip("tomllib")

    section = (Path(__file__).resolve().parents[1] / "docs" / "training" / "verifiers.md").read_text(encoding="utf-8")
    toml = re.search(r"cat > eval.toml <<'EOF'\n(.*?)\nEOF\n", section, re.S)
    command = re.search(r"^vf/bin/(vf-eval @ eval.toml .*)$", section, re.M)
    assert toml is not None and command is not None
    (tmp_path / "eval.toml").write_text(toml[1], encoding="utf-8")
    args = command[1].replace("YOUR_MODEL", "some/model").split()
    dry = subprocess.run([str(Path(PYTHON).with_name(args[0])), *args[1:], "--dry-run", "-o", str(tmp_path / "out")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    taskset = tomllib.loads(toml[1])["env"]["taskset"]
    solutions = {t.id: [(c["tool"], c["arguments"], "") for c in t.solution] for t in load_env_tasks("Counter")}
    server = serve("Counter", record_to=str(tmp_path / "vf"))
    results = play(server.url, taskset["resets"], [replies(solutions[r["task_id"]]) for r in taskset["resets"]])
    server.stop()
    assert [r["reset"] for r in results] == taskset["resets"]
    assert all(r["rewards"]["openenv_reward"] > 0.9 for r in results)  # each task solved: the verifier's grade
