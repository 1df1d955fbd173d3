"""SkyRL-Gym face (mcp_gym.skyrl): envs made by ``skyrl_gym.make`` from a row's ``env_class`` play a scripted model's
replies to the same success and the same recorded episode as the same replies through ``MCPEnv`` directly (the chat
policy), on a bundled env and on server-everything."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import npm_bin
from episodes import MAZE_TEXTS, hermes, recorded_episode, run_policy

from mcp_gym import MCPEnv, Stdio, make_env

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the [skyrl] extra (pip install 'mcp-gym[skyrl]')")
from omegaconf import OmegaConf  # noqa: E402

mcp_skyrl = pytest.importorskip("mcp_gym.skyrl")

pytestmark = pytest.mark.skyrl

MAZE_TASK = "maze-5x5-0000"
COUNTER_TASK = "counter-0000"  # reach 9
COUNTER_TEXTS = ["Hmm.", hermes(("add", {"amount": 5})), hermes(("get_count", {})), hermes(("add", {"amount": 4}))]
SUM_TASK = {"id": "sum-3-4", "prompt": "Add 3 and 4 with the tools, then submit the sum.", "answer": "7"}
SUM_TEXTS = ['{"name": "echo", "arguments": {"message": "start"}}', "Let me add.",
             hermes(("get-sum", {"a": 3, "b": 4})), hermes(("submit", {"answer": "7"}))]


@pytest.fixture
def registered() -> Iterator[Callable[..., str]]:
    """Register env classes for one test (deregistered afterwards)."""
    ids: list[str] = []

    def register(id: str, env: Any, **settings: Any) -> str:
        ids.append(mcp_skyrl.register(id, env, **settings))
        return id

    yield register
    for id in ids:
        skyrl_gym.envs.registration.deregister(id)


def everything_env() -> MCPEnv:
    return MCPEnv({"everything": Stdio(npm_bin("mcp-server-everything"), ["stdio"])}, [SUM_TASK], call_timeout=10.0,
                  env_id="everything")


def play(env_class: str, row: dict[str, Any], texts: Sequence[str], env_config: Any = None
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float, Any]:
    """Drive a SkyRL env as SkyRL's generator does: make it from the row, ``init`` with the row's prompt, ``step``
    each reply until ``done``, ``close``. Returns (the generator's chat history, the step outputs, the summed
    reward, the env's metrics)."""
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(env_class, env_config=env_config if env_config is not None else {}, extras=extras)
    assert isinstance(env, skyrl_gym.Env)
    try:
        history, meta = env.init(list(row["prompt"]))
        assert [t["function"]["name"] for t in meta["tools"]][-1] == "submit"
        outs = []
        for text in texts:
            out = env.step(text)
            outs.append(out)
            history += [{"role": "assistant", "content": text}, *out["observations"]]  # what the generator appends
            if out["done"]:
                break
        return history, outs, sum(o["reward"] for o in outs), env.get_metrics()
    finally:
        env.close()


@pytest.mark.parametrize(("name", "task_id", "texts"), [("Maze", MAZE_TASK, MAZE_TEXTS),
                                                         ("Counter", COUNTER_TASK, COUNTER_TEXTS)])
def test_bundled_env_plays_and_records_like_mcpenv(name: str, task_id: str, texts: list[str], tmp_path: Path,
                                                   registered: Callable[..., str]) -> None:
    policy = run_policy(lambda: make_env(name), task_id, texts, tmp_path / "direct")
    env_class = registered(f"test_{name.lower()}", name, record_to=str(tmp_path / "skyrl"))
    (row,) = [r for r in mcp_skyrl.task_rows(name, None, env_class=env_class) if r["task_id"] == task_id]
    history, outs, total, metrics = play(env_class, {**row, "seed": 5}, texts)
    assert len(outs) == len(texts) and outs[-1]["done"] and not any(o["done"] for o in outs[:-1])
    direct, skyrl = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "skyrl")
    assert skyrl == direct  # messages, tool calls, rewards, success, termination, raw texts and turns
    assert total == pytest.approx(direct["total_reward"])
    assert metrics["return"] == pytest.approx(direct["total_reward"])
    assert metrics["success"] == float(direct["success"]) and (name == "Counter") == direct["success"]
    # The generator's conversation is the chat view's, with the model's raw text as the assistant turns.
    expected = policy.requests[-1][0]
    assert history[:2] == expected[:2]
    assert [m for m in history if m["role"] != "assistant"][:-1] == [m for m in expected if m["role"] != "assistant"]
    assert [m["content"] for m in history if m["role"] == "assistant"] == texts


@pytest.mark.thirdparty
def test_server_everything_plays_and_records_like_mcpenv(tmp_path: Path, registered: Callable[..., str]) -> None:
    run_policy(everything_env, SUM_TASK["id"], SUM_TEXTS, tmp_path / "direct")
    env_class = registered("test_everything", everything_env, record_to=str(tmp_path / "skyrl"))
    row = {"prompt": [{"role": "user", "content": SUM_TASK["prompt"]}], "env_class": env_class, "seed": 5}
    history, outs, total, metrics = play(env_class, row, SUM_TEXTS)  # the task picked by its prompt
    direct, skyrl = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "skyrl")
    assert skyrl == direct
    assert direct["success"] is True and metrics["success"] == 1.0
    assert [s["tool"] for s in skyrl["steps"]] == ["echo", "", "get-sum", "submit"]
    assert "The sum of 3 and 4 is 7." in outs[2]["observations"][0]["content"]
    assert total == pytest.approx(direct["total_reward"])


def test_settings_from_the_trainer_config_and_the_row(tmp_path: Path, registered: Callable[..., str]) -> None:
    # The generic env class: the trainer config names the env (an import path with keyword arguments) and overrides
    # the registered settings; the row's task_id picks the task.
    config = OmegaConf.create({"env": "mcp_gym.envs:make_env", "env_kwargs": {"name": "Counter", "max_steps": 2},
                               "system_prompt": None})
    history, outs, _, metrics = play("mcp_gym", {"prompt": [], "task_id": COUNTER_TASK}, COUNTER_TEXTS, config)
    assert history[0]["role"] == "user" and "reach exactly 9" in history[0]["content"]
    assert len(outs) == 2 and outs[-1]["metadata"]["termination"] == "max_steps" and metrics["steps"] == 2
    # A row may name a bundled env for the generic class.
    _, outs, _, _ = play("mcp_gym", {"prompt": [], "env": "Counter", "task_id": COUNTER_TASK}, COUNTER_TEXTS)
    assert outs[-1]["metadata"]["success"] is True
    # SkyRL's generator passes max_turns: the episode ends after that many replies, recorded as cut there.
    env_class = registered("test_turns", "Counter", record_to=str(tmp_path / "turns"))
    history, outs, _, metrics = play(env_class, {"prompt": [], "task_id": COUNTER_TASK, "max_turns": 2},
                                     COUNTER_TEXTS)
    assert [o["done"] for o in outs] == [False, True] and outs[-1]["metadata"]["termination"] == "max_turns"
    assert metrics["turns"] == 2 and "success" not in metrics
    episode = recorded_episode(tmp_path / "turns")
    assert (episode["termination"], episode["success"], episode["length"]) == ("max_turns", None, 2)
    assert [m["role"] for m in episode["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert episode["messages"][:4] == history[:2] + [{"role": "assistant", "content": "Hmm."}, history[3]]


def test_bad_settings_are_named(registered: Callable[..., str]) -> None:
    with pytest.raises(ValueError, match=r"register\('test_bad'\): unknown setting\(s\) \['max_step'\]"):
        registered("test_bad", "Counter", max_step=3)
    with pytest.raises(ValueError, match=r"skyrl_gym env_config: unknown setting\(s\) \['recrd_to'\]"):
        skyrl_gym.make("mcp_gym", env_config={"env": "Counter", "recrd_to": "x"}, extras={})
    with pytest.raises(ValueError, match="no env; register"):
        skyrl_gym.make("mcp_gym", env_config={}, extras={})
    with pytest.raises(ValueError, match=r"env 'mcp_gym.envs:nope': cannot import 'nope'"):
        skyrl_gym.make("mcp_gym", env_config={"env": "mcp_gym.envs:nope"}, extras={})
    registered("test_twice", "Counter")
    with pytest.raises(skyrl_gym.error.RegistrationError):
        mcp_skyrl.register("test_twice", "Maze")
    mcp_skyrl.register("test_twice", "Maze", replace=True)
    assert skyrl_gym.registry["test_twice"].kwargs["env"] == "Maze"


def test_trajectories_in_worker_threads_at_once(tmp_path: Path, registered: Callable[..., str]) -> None:
    """SkyRL's generator runs init/step/close of many trajectories in a thread pool: each env keeps its own episode."""
    from concurrent.futures import ThreadPoolExecutor

    from mcp_gym.envs import load_env_tasks
    from mcp_gym.parsing import ToolCall, format_tool_calls
    from mcp_gym.recording import load

    env_class = registered("test_threads", "Counter", record_to=str(tmp_path / "run"))
    rows = mcp_skyrl.task_rows("Counter", None, env_class=env_class)[:6]

    def one(row: dict[str, Any]) -> float:
        solution = next(t for t in load_env_tasks("Counter", None, 0) if t.id == row["task_id"]).solution
        texts = [format_tool_calls([ToolCall(c["tool"], c["arguments"])]) for c in solution]
        return play(env_class, row, texts)[3]["success"]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, rows)) == [1.0] * len(rows)
    episodes = load(tmp_path / "run").episodes
    assert sorted(episodes["task_id"]) == sorted(r["task_id"] for r in rows) and all(episodes["success"])


def test_a_tool_added_mid_trajectory_is_named_not_silently_unlisted(registered: Callable[..., str],
                                                                    tmp_path: Path) -> None:
    """Maze's key reveals ``unlock``: SkyRL lists ``init``'s tools once, so the step that adds it says so in one
    ``UserWarning`` and in its metadata (``tools_unlisted``), and its observation tells the model in the tools note
    (:func:`mcp_gym.chat.tools_note`), the very message eval's chat policy is shown; the call still runs. Fast cover:
    tests/test_textenv.py::test_a_tool_added_mid_episode_is_named_when_the_listed_tools_lack_it."""
    from mcp_gym.envs import load_env_tasks

    task = next(t for t in load_env_tasks("Maze", None, 0) if t.id == "maze-5x5-0003")
    env_class = registered("test_maze_unlock", "Maze")
    texts = [hermes((c["tool"], c["arguments"])) for c in task.solution] + [hermes(("submit", {"answer": "x"}))]
    with pytest.warns(UserWarning, match=r"added tool\(s\) unlock mid-trajectory"):
        _, outs, _, metrics = play(env_class, {"prompt": [], "env_class": env_class, "task_id": task.id}, texts)
    assert [o["metadata"].get("tools_unlisted") for o in outs].count(["unlock"]) == 1
    assert metrics["success"] == 1.0  # the unlisted tool was called and worked
    (k,) = [k for k, o in enumerate(outs) if o["metadata"].get("tools_unlisted")]
    (noted,) = [m for o in outs for m in o["observations"] if "[tools changed]" in m["content"]]
    assert noted in outs[k]["observations"] and '"name": "unlock"' in noted["content"]
    shown, _ = run_policy(lambda: make_env("Maze"), task.id, texts, tmp_path / "eval").requests[-1]
    assert [m for m in shown if "[tools changed]" in m["content"]] == [noted]  # what eval's model is shown
