"""Hostile agents: actions no real JSON encoder, MCP server or recorder can take must never crash the env.

Each attack (arguments 1,000+ levels deep, a tool "name" that is a deep list, a `submit` answer that is a set, bytes or
a cyclic object, values whose `repr` raises, lone surrogates, huge ints, dict subclasses that raise) must give an
error observation with `info["error"]` (strict mode: `InvalidAction`), and with `RecordTrajectories` every finished
episode must be recorded. A hypothesis fuzz test throws arbitrary values at `step`, bare and recorded.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_gym import InProcess, InvalidAction, MCPEnv, Stdio
from mcp_gym.parsing import split_action
from mcp_gym.protocol import ACTION_ERROR_KINDS, SERVER_ERROR_KINDS
from mcp_gym.recording import RecordTrajectories, TrajectoryWriter, load
from mcp_gym.recording.schema import UNENCODABLE_KEY, dumps
from mcp_gym.servers.counter import make_server
from mcp_gym.spaces import MAX_ARGUMENT_DEPTH, ToolCallSpace, json_error

ERROR_KINDS = ACTION_ERROR_KINDS


# -- hostile values ---------------------------------------------------------------------------------------------------
class BadRepr:
    """A value whose repr, str and equality all raise."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq for you")

    __hash__ = object.__hash__


class HostileDict(dict):
    """A dict subclass whose every reading method raises."""

    def _boom(self, *a: Any, **k: Any) -> Any:
        raise RuntimeError("hostile mapping")

    get = items = keys = values = __iter__ = __len__ = __getitem__ = __contains__ = __repr__ = _boom


def nest(leaf: Any, depth: int, kind: str = "list") -> Any:
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"a": leaf}
    return leaf


def cyclic_list() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def cyclic_dict() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = {"again": loop}
    return loop


def make_env(**kw: Any) -> MCPEnv:
    return MCPEnv({"counter": InProcess(make_server())}, max_steps=50, **kw)


# (name, action, expected error kind, expected argument or None)
ATTACKS: list[tuple[str, Any, str, str | None]] = [
    ("arguments 1,000 deep", {"tool": "add", "arguments": {"amount": nest(1, 1000)}}, "too_large", "amount"),
    ("arguments 100,000 deep (dicts)", {"tool": "add", "arguments": nest(1, 100_000, "dict")}, "too_large", "a"),
    ("tool name a 1,000-deep list", {"tool": nest("add", 1000), "arguments": {}}, "malformed", None),
    ("tool name whose repr raises", {"tool": BadRepr(), "arguments": {}}, "malformed", None),
    ("submit a set", {"tool": "submit", "arguments": {"answer": {1, 2}}}, "invalid_arguments", "answer"),
    ("submit bytes", {"tool": "submit", "arguments": {"answer": b"\xff\x00"}}, "invalid_arguments", "answer"),
    ("submit a cyclic list", {"tool": "submit", "arguments": {"answer": cyclic_list()}}, "invalid_arguments",
     "answer[0]"),
    ("submit a cyclic dict", {"tool": "submit", "arguments": {"answer": cyclic_dict()}}, "invalid_arguments",
     "answer.self.again"),
    ("submit 100,000 deep", {"tool": "submit", "arguments": {"answer": nest(1, 100_000)}}, "too_large", "answer"),
    ("submit arguments not a dict", {"tool": "submit", "arguments": BadRepr()}, "malformed", None),
    ("submit with a hostile dict", {"tool": "submit", "arguments": HostileDict(answer="x")}, "invalid_arguments",
     None),
    ("argument whose repr raises", {"tool": "add", "arguments": {"amount": BadRepr()}}, "invalid_arguments",
     "amount"),
    ("key whose repr raises", {"tool": "add", "arguments": {BadRepr(): 1}}, "invalid_arguments", None),
    ("extra action key whose repr raises", {"tool": "add", "arguments": {}, BadRepr(): 1}, "malformed", None),
    ("action whose repr raises", BadRepr(), "malformed", None),
    ("hostile dict as the action", HostileDict(tool="add"), "malformed", None),
    ("cyclic arguments", {"tool": "add", "arguments": cyclic_dict()}, "invalid_arguments", "self.again"),
    ("lone surrogate", {"tool": "add", "arguments": {"amount": "\ud800"}}, "invalid_arguments", "amount"),
    ("int of 5,000 digits", {"tool": "add", "arguments": {"amount": 10**5000}}, "invalid_arguments", "amount"),
    ("nan", {"tool": "add", "arguments": {"amount": math.nan}}, "invalid_arguments", "amount"),
]


@pytest.fixture(scope="module")
def env() -> Any:
    e = make_env()
    yield e
    e.close()


@pytest.mark.parametrize(("name", "action", "kind", "argument"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_gives_an_error_observation(env: MCPEnv, name: str, action: Any, kind: str,
                                           argument: str | None) -> None:
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs)
    err = info["error"]
    assert err is not None and err["kind"] == kind and err["argument"] == argument, err
    assert obs["result"] == "Error: " + err["message"] and info["is_error"] is True
    assert set(err) >= {"kind", "tool", "server", "argument", "message"}
    json.dumps(err)  # plain, printable values only (no hostile object leaks into info)
    assert not terminated and not truncated  # an invalid action, even a submit, does not end the episode
    assert not env.action_space.contains(action)
    # the env still works after the attack
    _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
    assert info["error"] is None


@pytest.mark.parametrize(("name", "action", "kind", "argument"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_raises_invalid_action_in_strict_mode(name: str, action: Any, kind: str, argument: str | None) -> None:
    env = make_env(strict=True)
    try:
        env.reset(seed=0)
        with pytest.raises(InvalidAction) as caught:
            env.step(action)
        assert caught.value.error["kind"] == kind
    finally:
        env.close()


def test_depth_limit_is_exact() -> None:
    space = ToolCallSpace({"f": {"type": "object"}})
    ok = nest(1, MAX_ARGUMENT_DEPTH, "dict")  # the arguments object itself is level 1
    assert space.contains({"tool": "f", "arguments": ok})
    err = space.validation_error({"tool": "f", "arguments": nest(1, MAX_ARGUMENT_DEPTH + 1, "dict")})
    assert err is not None and err.kind == "too_large" and f"deeper than {MAX_ARGUMENT_DEPTH} levels" in err.message
    assert json_error("f", {"x": [1, 2.5, "é", None, True]}) is None


def test_stdio_server_survives_a_lone_surrogate_and_deep_arguments() -> None:
    """A lone surrogate used to break the stdio connection (the server died); nesting past ~200 levels made the
    Python SDK server drop the message (the call only timed out). Both are refused before anything is sent."""
    env = MCPEnv({"counter": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, call_timeout=30)
    try:
        env.reset(seed=0)
        _, _, terminated, truncated, info = env.step({"tool": "echo", "arguments": {"text": "a\udcffb"}})
        assert info["error"]["kind"] == "invalid_arguments" and "surrogate" in info["error"]["message"]
        assert info["duration"] == 0.0 and not (terminated or truncated)  # never sent
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": nest("x", 150)}})
        assert info["error"]["kind"] == "too_large" and info["duration"] == 0.0
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "still here"}})
        assert info["error"] is None and "still here" in obs["result"]
        assert env.host.server_info()["counter"]["status"] == "ready"
    finally:
        env.close()


# -- recording --------------------------------------------------------------------------------------------------------
def test_every_attack_is_recorded(tmp_path: Path) -> None:
    env = RecordTrajectories(make_env(), tmp_path)
    for i, (_, action, _, _) in enumerate(ATTACKS):
        env.reset(seed=i, options={"episode_key": f"attack-{i}"})
        _, _, terminated, _, _ = env.step(action)
        assert not terminated
        _, _, terminated, _, _ = env.step({"tool": "submit", "arguments": {"answer": "done"}})
        assert terminated
    env.close()
    rec = load(tmp_path, include_wal=False)
    assert sorted(rec.episodes["episode_key"]) == sorted(f"attack-{i}" for i in range(len(ATTACKS)))
    steps = rec.steps.to_pandas().sort_values(["episode_id", "step_index"])
    first = steps[steps.step_index == 0]
    assert len(first) == len(ATTACKS) and first.is_error.all()
    kinds = sorted(json.loads(e)["kind"] for e in first.error)
    assert kinds == sorted(a[2] for a in ATTACKS)
    for text in steps.arguments:  # every arguments cell is JSON, possibly holding unencodable markers
        json.loads(text)
    markers = [t for t in first.arguments if UNENCODABLE_KEY in t]
    assert any("circular reference" in t for t in markers) and any("nested deeper" in t for t in markers)
    tools = [t for t in first.tool if isinstance(t, str)]
    assert "[[[[...]]]]" in tools and any(t.startswith("<BadRepr ") for t in tools)  # non-str "names", printed safely


class _UnfloatableReward:
    def __float__(self) -> float:
        raise ValueError("not a number")


class _HostileReward(gym.Wrapper[Any, Any, Any, Any]):
    """A wrapper under the recorder whose reward cannot be read: the recorder cannot take the step apart."""

    def step(self, action: Any) -> Any:
        obs, _, terminated, truncated, info = self.env.step(action)
        return obs, _UnfloatableReward(), terminated, truncated, info


def test_a_step_the_recorder_cannot_take_apart_is_recorded_as_unrecordable(tmp_path: Path) -> None:
    env = RecordTrajectories(_HostileReward(MCPEnv({"counter": InProcess(make_server())}, max_steps=1)), tmp_path)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="could not be recorded"):
        env.step({"tool": "add", "arguments": {"amount": 1}})
    env.close()
    steps = load(tmp_path).steps.to_pandas()
    assert len(steps) == 1 and steps.is_error[0]
    err = json.loads(steps.error[0])
    assert err["kind"] == "unrecordable" and err["kind"] in SERVER_ERROR_KINDS and "ValueError" in err["message"]
    assert UNENCODABLE_KEY in json.loads(steps.arguments[0])


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_attacks_survive_in_the_wal_of_a_killed_writer(tmp_path: Path) -> None:
    """Episodes with unencodable arguments are in the WAL when the writer dies, and recovery publishes them."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_hostile_actions import ATTACKS, make_env
        from mcp_gym.recording import RecordTrajectories
        env = RecordTrajectories(make_env(), {str(tmp_path)!r})
        for i, (_, action, _, _) in enumerate(ATTACKS):
            env.reset(seed=i, options={{"episode_key": f"attack-{{i}}"}})
            env.step(action)
            env.step({{"tool": "submit", "arguments": {{"answer": "done"}}}})
        os._exit(0)  # no close(): only the WAL has them
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert not list((tmp_path / "episodes").glob("*.parquet"))
    assert len(load(tmp_path).episodes) == len(ATTACKS)  # read from the WAL
    with TrajectoryWriter(tmp_path) as w:
        assert w.recovered == len(ATTACKS)
    assert len(load(tmp_path, include_wal=False).episodes) == len(ATTACKS)


def test_dumps_never_raises() -> None:
    for value, fragment in [(nest(1, 100_000), "nested deeper"), (cyclic_list(), "circular reference"),
                            ({"n": 10**5000}, "4300 digits")]:
        out = json.loads(dumps(value))
        assert fragment in json.dumps(out)
    out = json.loads(dumps({BadRepr(): BadRepr(), "s": {1}}))
    assert out["s"] == [1] and all(k.startswith("<BadRepr ") and v.startswith("<BadRepr ") for k, v in out.items()
                                   if k != "s")
    assert json.loads(dumps(nest(1, 300))) == nest(1, 300)  # deeper than orjson goes, still exact


# -- fuzz -------------------------------------------------------------------------------------------------------------
json_leaves = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
               | st.text(max_size=20))
hostile_leaves = st.one_of(
    st.sets(st.integers(), max_size=3), st.frozensets(st.text(max_size=3), max_size=2), st.binary(max_size=8),
    st.sampled_from([math.nan, math.inf, -math.inf, 1j, Ellipsis, np.int64(3), np.float32(1.5)]),
    st.integers(4300, 5000).map(lambda n: 10**n), st.builds(np.arange, st.integers(0, 3)),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.builds(BadRepr), st.builds(object),
)
keys = st.text(max_size=8) | st.integers() | st.none() | st.booleans() | st.builds(BadRepr) | st.tuples(st.integers())
json_like = st.recursive(json_leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                          max_size=4), max_leaves=12)
anything = st.recursive(
    json_leaves | hostile_leaves,
    lambda c: st.lists(c, max_size=4) | st.tuples(c, c) | st.dictionaries(keys, c, max_size=4)
    | st.builds(HostileDict, st.dictionaries(st.text(max_size=4), c, max_size=2)),
    max_leaves=12,
)
deep = st.builds(nest, json_like | hostile_leaves, st.integers(90, 1500), st.sampled_from(["list", "dict"]))
cyclic = st.sampled_from([cyclic_list, cyclic_dict]).map(lambda f: f())
values = st.one_of(json_like, anything, deep, cyclic)
tool_names = st.sampled_from(["add", "get_count", "submit", "nope", ""]) | values
arguments = (st.fixed_dictionaries({"amount": values}) | st.dictionaries(st.text(max_size=8), values, max_size=3)
             | values | st.none())
actions = st.one_of(
    st.fixed_dictionaries({"tool": tool_names, "arguments": arguments}),
    st.fixed_dictionaries({"tool": st.just("submit"), "arguments": st.fixed_dictionaries({"answer": values})}),
    st.fixed_dictionaries({"tool": tool_names}, optional={"arguments": arguments, "extra": values}),
    st.dictionaries(keys, values, max_size=3),
    values,
)


def _is_valid_submit(action: Any) -> bool:
    if not (type(action) is dict and all(type(k) is str for k in action) and set(action) <= {"tool", "arguments"}
            and type(action.get("tool")) is str and action["tool"] == "submit"):
        return False
    args = action.get("arguments")
    return args is None or (type(args) is dict and json_error("submit", args) is None)


def _check_step(env: gym.Env, action: Any) -> bool:
    """Step once, check the guarantees; return whether the episode ended."""
    base = env.unwrapped
    if isinstance(env, RecordTrajectories):  # the wrapper strips raw_text/parse_status before the env sees it
        action = split_action(action)[0] if type(action) is dict else action
    valid = base.action_space.contains(action)  # must not raise either
    obs, reward, terminated, truncated, info = env.step(action)
    assert base.observation_space.contains(obs)
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    submitted = _is_valid_submit(action)
    if not valid and not submitted:
        err = info["error"]
        assert err is not None and err["kind"] in ERROR_KINDS and isinstance(err["message"], str), err
        assert err["argument"] is None or isinstance(err["argument"], str)
        assert obs["result"].startswith("Error: ")
    if submitted:
        assert terminated
    json.dumps({k: info[k] for k in ("error", "tool", "server", "step")})
    return terminated or truncated


FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@pytest.mark.slow
def test_fuzz_actions_bare_env() -> None:
    env = make_env()
    try:
        @FUZZ
        @given(st.lists(actions, min_size=1, max_size=3))
        def episode(batch: list[Any]) -> None:
            env.reset(seed=0)
            for action in batch:
                if _check_step(env, action):
                    break

        episode()
    finally:
        env.close()


def test_fuzz_actions_recorded(tmp_path: Path) -> None:
    env = RecordTrajectories(make_env(), tmp_path)
    finished: list[str] = []
    try:
        @FUZZ
        @given(st.lists(actions, min_size=1, max_size=3))
        def episode(batch: list[Any]) -> None:
            _, info = env.reset(seed=0)
            for action in batch:
                if _check_step(env, action):
                    break
            else:
                assert _check_step(env, {"tool": "submit", "arguments": {"answer": "end"}})
            finished.append(info["episode_id"])

        episode()
    finally:
        env.close()
    rec = load(tmp_path, include_wal=False)
    assert sorted(rec.episodes["episode_id"]) == sorted(finished)
    for column in ("arguments", "error", "info"):
        for text in rec.steps[column]:
            assert text is None or json.loads(text) is not None or text == "null"
