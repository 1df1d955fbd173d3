"""VectorMCPEnv as a Gymnasium vector env, on real servers (bundled Counter through gym.make, in-process MCPServer)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from mcp.server.mcpserver import MCPServer

import mcp_gym
from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.client.runtime import default_runtime
from mcp_gym.envs import make_env
from mcp_gym.vector import VectorMCPEnv


def add(n: int) -> dict[str, Any]:
    return {"tool": "add", "arguments": {"amount": n}}


SUBMIT = {"tool": "submit", "arguments": {"answer": "0"}}


def counts(obs: dict[str, Any]) -> list[int]:
    """Each env's counter value, from its observed ``counter://state`` resource."""
    return [int(r["counter://state"].split()[0].removeprefix("count=")) for r in obs["resources"]]


@pytest.fixture
def vec() -> Any:
    v = VectorMCPEnv(lambda i: gym.make("mcp_gym/Counter-v0"), 3)
    yield v
    v.close()


def test_a_gymnasium_vector_env_with_batched_spaces(vec: VectorMCPEnv) -> None:
    assert isinstance(vec, gym.vector.VectorEnv)
    assert vec.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert vec.num_envs == 3 and vec.spec is not None and vec.spec.id == "mcp_gym/Counter-v0"
    # connected at construction: the tools are known before the first reset, as in any Gymnasium env
    assert {"add", "get_count", "submit"} <= set(vec.single_action_space.tool_names)
    assert vec.observation_space == gym.vector.utils.batch_space(vec.single_observation_space, 3)
    assert len(vec.action_space) == 3 and vec.action_space[1] is vec.envs[1].action_space


def test_each_env_steps_with_its_own_action_and_keeps_its_own_state(vec: VectorMCPEnv) -> None:
    obs, infos = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)
    assert counts(obs) == [0, 0, 0] and list(infos["seed"]) == [0, 1, 2] and infos["_seed"].all()
    assert len(set(infos["episode_id"])) == 3
    for _ in range(2):
        obs, rewards, terminated, truncated, infos = vec.step([add(1), add(2), add(3)])
    assert counts(obs) == [2, 4, 6]
    assert rewards.dtype == np.float64 and rewards.shape == (3,)
    assert terminated.dtype == np.bool_ and not terminated.any() and not truncated.any()
    assert list(infos["error"]) == [None, None, None] and infos["error"].dtype == object
    assert vec.observation_space.contains(obs)
    # one env's bad action is its own error; the others step normally
    obs, _, _, _, infos = vec.step([add(99), add(1), add(1)])
    assert infos["error"][0]["kind"] == "invalid_arguments" and infos["error"][0]["argument"] == "amount"
    assert infos["error"][1] is None and counts(obs) == [2, 5, 7]


def test_sampled_actions_and_observations_stay_in_their_spaces(vec: VectorMCPEnv) -> None:
    """env_checker-style: sampled batched actions step, observations are in the space, batches are fresh objects."""
    vec.action_space.seed(0)
    first, _ = vec.reset(seed=0)
    kept = repr(first)
    for _ in range(5):
        actions = vec.action_space.sample()
        assert all(vec.envs[i].action_space.contains(a) for i, a in enumerate(actions))
        obs, rewards, terminated, truncated, infos = vec.step(actions)
        assert vec.observation_space.contains(obs) and obs is not first
    assert repr(first) == kept  # a returned batch is not mutated by later steps


def test_seeding_is_deterministic_and_matches_gymnasiums_sync_vector_env(vec: VectorMCPEnv) -> None:
    obs_a, _ = vec.reset(seed=5)
    obs_b, infos = vec.reset(seed=[5, 6, 7])
    assert obs_a["task"] == obs_b["task"] and list(infos["seed"]) == [5, 6, 7]
    sync = SyncVectorEnv([lambda: gym.make("mcp_gym/Counter-v0")] * 3)
    try:
        ref, ref_infos = sync.reset(seed=5)
        assert ref["task"] == obs_a["task"]  # same tasks, same batch layout (a dict of per-env tuples)
        assert type(ref["resources"]) is type(obs_a["resources"]) is tuple
        step = [add(1), add(1), add(1)]
        ref_out, out = sync.step(step), vec.step(step)
        assert ref_out[0]["resources"] == out[0]["resources"]
        for r, o in zip(ref_out[1:4], out[1:4], strict=True):
            assert r.dtype == o.dtype and r.shape == o.shape and (r == o).all()
        assert list(ref_out[4]["tool"]) == list(out[4]["tool"]) and (ref_out[4]["_tool"] == out[4]["_tool"]).all()
    finally:
        sync.close()


def test_next_step_autoreset(vec: VectorMCPEnv) -> None:
    vec.reset(seed=0)
    vec.step([add(1), add(1), add(1)])
    ids = None
    obs, rewards, terminated, truncated, infos = vec.step([SUBMIT, add(1), add(1)])
    assert terminated.tolist() == [True, False, False] and infos["_termination"][0]
    ended = infos["episode_id"][0]
    # the next step resets env 0 (its action is ignored: the counter stays 0) and steps the others
    obs, rewards, terminated, truncated, infos = vec.step([add(4), add(1), add(1)])
    assert counts(obs) == [0, 3, 3] and rewards[0] == 0.0 and not terminated.any()
    ids = infos["episode_id"]
    assert ids[0] != ended and "reset_errors" in infos and infos["_reset_errors"].tolist() == [True, False, False]
    obs, *_ = vec.step([add(4), add(1), add(1)])
    assert counts(obs) == [4, 4, 4]


def test_same_step_autoreset_puts_the_last_episode_in_final_obs() -> None:
    vec = VectorMCPEnv(lambda i: gym.make("mcp_gym/Counter-v0"), 2, autoreset_mode="SameStep")
    try:
        assert vec.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        vec.reset(seed=0)
        vec.step([add(2), add(1)])
        obs, rewards, terminated, truncated, infos = vec.step([SUBMIT, add(1)])
        assert terminated.tolist() == [True, False]
        assert counts(obs) == [0, 2]  # env 0 already in its next episode
        assert infos["_final_obs"].tolist() == [True, False]
        assert infos["final_obs"][0]["resources"]["counter://state"].startswith("count=2 ")
        assert infos["final_info"][0]["termination"] == "submit" and "success" in infos["final_info"][0]
        assert infos["episode_id"][0] != infos["final_info"][0]["episode_id"]
    finally:
        vec.close()


def test_disabled_autoreset_and_reset_mask() -> None:
    vec = VectorMCPEnv(lambda i: gym.make("mcp_gym/Counter-v0"), 2, autoreset_mode=AutoresetMode.DISABLED)
    try:
        _, infos = vec.reset(seed=0)
        with pytest.raises(ValueError, match="reset_mask"):
            vec.reset(options={"reset_mask": np.array([False, False])})
        _, _, terminated, truncated, _ = vec.step([SUBMIT, add(3)])
        with pytest.raises(RuntimeError, match=r"envs \[0\] ended"):
            vec.step([add(1), add(1)])
        obs, infos2 = vec.reset(options={"reset_mask": terminated | truncated})
        assert infos2["_episode_id"].tolist() == [True, False] and infos2["episode_id"][0] != infos["episode_id"][0]
        assert counts(obs) == [0, 3]  # env 1's episode goes on untouched
        obs, *_ = vec.step([add(1), add(1)])
        assert counts(obs) == [1, 4]
    finally:
        vec.close()


def test_envs_step_concurrently_on_the_runtime_loop() -> None:
    """Each call waits at a barrier until every env's call has arrived: only concurrent steps get past it."""
    server = MCPServer("barrier")
    arrived = {"n": 0}
    everyone = anyio.Event()

    @server.tool()
    async def meet() -> str:
        """Wait for the other envs' calls."""
        arrived["n"] += 1
        if arrived["n"] == 3:
            everyone.set()
        with anyio.move_on_after(20):  # a bound for a broken (sequential) vector env, not a timing claim
            await everyone.wait()
        return f"met {arrived['n']}"

    vec = VectorMCPEnv(lambda i: MCPEnv(InProcess(server), call_timeout=30), 3)
    try:
        vec.reset(seed=0)
        obs, _, _, _, infos = vec.step([{"tool": "meet", "arguments": {}}] * 3)
        assert obs["result"] == ("met 3",) * 3 and list(infos["error"]) == [None] * 3
    finally:
        vec.close()


def test_episodes_on_one_shared_session_keep_their_own_state() -> None:
    vec = VectorMCPEnv(lambda i: make_env("Counter"), 4, share_servers=1)
    try:
        assert len(vec._shared) == 1  # one session serves the four envs
        vec.reset(seed=0)
        obs, *_ = vec.step([add(1), add(2), add(3), add(-1)])
        obs, *_ = vec.step([add(1), add(2), add(3), add(-1)])
        assert counts(obs) == [2, 4, 6, -2]
    finally:
        vec.close()


def test_async_face_on_the_runtime_loop() -> None:
    """Jobs make and drive the vector env on the runtime loop; the batches are the same as the sync face's."""

    async def go() -> None:
        async with VectorMCPEnv(lambda i: make_env("Counter"), 2) as vec:
            assert vec.single_action_space.tool_names == []  # made on the loop: envs connect at their first reset
            obs, infos = await vec.areset(seed=0)
            assert "add" in vec.single_action_space.tool_names
            obs, rewards, terminated, truncated, infos = await vec.astep([add(1), add(2)])
            assert counts(obs) == [1, 2] and rewards.dtype == np.float64
        assert vec.closed

    default_runtime().call(go)


def test_bad_batches_are_refused_with_one_clear_line(vec: VectorMCPEnv) -> None:
    with pytest.raises(RuntimeError, match="before reset"):
        vec.step([add(1)] * 3)
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="expected 3 actions"):
        vec.step([add(1)] * 2)
    with pytest.raises(ValueError, match="one seed per env"):
        vec.reset(seed=[1, 2])
    assert mcp_gym.VectorMCPEnv is VectorMCPEnv


def test_make_vec_builds_a_vector_mcp_env_and_time_limits_truncate() -> None:
    vec = gym.make_vec("mcp_gym/Counter-v0", num_envs=2, max_steps=2, max_episode_steps=2)
    try:
        assert isinstance(vec, VectorMCPEnv) and vec.spec.kwargs["vectorization_mode"] == "vector_entry_point"
        vec.reset(seed=0)
        get = {"tool": "get_count", "arguments": {}}
        _, _, terminated, truncated, _ = vec.step([get, get])
        assert not truncated.any()
        _, _, terminated, truncated, infos = vec.step([get, get])
        assert truncated.all() and not terminated.any() and list(infos["termination"]) == ["max_steps"] * 2
        _, _, _, truncated, infos = vec.step([get, get])  # NEXT_STEP: both reset
        assert not truncated.any() and infos["_reset_errors"].all()
    finally:
        vec.close()
    sync = gym.make_vec("mcp_gym/Counter-v0", num_envs=2, vectorization_mode="sync")  # Gymnasium's own still works
    assert isinstance(sync, SyncVectorEnv)
    sync.close()


def test_gymnasiums_vector_wrappers_apply(vec: VectorMCPEnv) -> None:
    """Gymnasium's own vector wrappers work on it, e.g. episode statistics (their ``info["episode"]``)."""
    stats = gym.wrappers.vector.RecordEpisodeStatistics(vec)
    stats.reset(seed=0)
    stats.step([add(1), add(1), add(1)])
    _, _, terminated, _, infos = stats.step([SUBMIT, add(1), add(1)])
    assert terminated.tolist() == [True, False, False]
    assert infos["_episode"].tolist() == [True, False, False] and infos["episode"]["l"][0] == 2


def test_closing_stops_every_envs_servers_side_by_side(tmp_path: Path) -> None:
    """``close`` tells all envs' servers to stop before waiting for any: each of these two servers exits cleanly only
    once the other was told to stop too (one stopped after the other has exited is terminated instead)."""
    script = Path(__file__).parent / "servers" / "peer_exit_server.py"
    names = ["a", "b"]

    def env_fn(i: int) -> MCPEnv:
        args = [str(script), str(tmp_path), names[i], names[1 - i]]
        return MCPEnv({"s": Stdio(sys.executable, args)}, ["a task"])

    vec = VectorMCPEnv(env_fn, 2)
    vec.reset(seed=0)
    assert all("ping" in env.action_space.tool_names for env in vec.envs)  # both servers up
    vec.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.clean", "a.eof", "b.clean", "b.eof"]
