"""Tests for mcp_gym.recording: schema round trip, truncation, exact free-form values, crash safety and resume.

Everything runs against real MCP servers in process (an EpisodeServer defined here) and real subprocesses (a collector
killed with SIGKILL). No wall-clock thresholds: scripts/bench/recorder.py measures speed.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import gymnasium
import mcp.types as mt
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

import mcp_gym
from mcp_gym.client.host import MCPHost
from mcp_gym.client.specs import InProcess
from mcp_gym.env import MCPEnv
from mcp_gym.protocol import catalogue_fingerprint
from mcp_gym.recording import (
    RecordingClient,
    RecordingHost,
    RecordTrajectories,
    RunDirectory,
    TrajectoryWriter,
    load,
)
from mcp_gym.recording.schema import (
    EPISODES_SCHEMA,
    SCHEMA_VERSION,
    STEPS_SCHEMA,
    VERSION_KEY,
    EpisodeRecord,
    StepRecord,
)
from mcp_gym.recording.wal import WalFile, read_frames
from mcp_gym.serverkit import EpisodeServer
from mcp_gym.tasks import Task

ROOT = Path(__file__).resolve().parents[1]
COLLECTOR = ROOT / "tests" / "_collector.py"
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
TEXT = "héllo — 日本語テキスト 🎉 «ü» \u200b tab\there\nnewline \"quotes\" \\ backslash"


def make_server() -> EpisodeServer[dict[str, Any]]:
    """A server with every kind of result the recorder must keep."""
    srv: EpisodeServer[dict[str, Any]] = EpisodeServer("recording-test", lambda task_id, seed: {}, version="2.0.1")

    @srv.tool(read_only=True)
    async def echo(text: str) -> str:
        """Return `text`."""
        return text

    @srv.tool(read_only=True)
    async def image() -> list[Any]:
        """A PNG and a non-ASCII caption."""
        return [mt.ImageContent(type="image", data=base64.b64encode(PIXEL).decode(), mime_type="image/png"),
                mt.TextContent(type="text", text="un pixel — 画素")]

    @srv.tool(read_only=True)
    async def big(n: int, char: str = "x") -> str:
        """`char` repeated `n` times."""
        return char * n

    @srv.tool(read_only=True)
    async def record(values: dict[str, Any]) -> dict[str, Any]:
        """Return `values` as structured content (rewards by convention when it has `reward`)."""
        return values

    @srv.tool(read_only=True)
    async def fail() -> str:
        """An isError result."""
        raise ToolError("boom ✗")

    @srv.tool(read_only=True)
    async def rpc_error() -> str:
        """A JSON-RPC error."""
        raise MCPError(code=-32602, message="bad params ✗")

    @srv.tool()
    async def unlock(ctx: Context) -> str:
        """Offer `bonus` (tools/list_changed)."""
        srv.show_tool("bonus")
        await srv.notify_tools_changed(ctx)
        return "unlocked"

    @srv.tool(hidden_until_shown=True, read_only=True)
    async def bonus() -> dict[str, Any]:
        """Reward 0.5."""
        return {"reward": 0.5, "done": False}

    return srv


def make_env(**kw: Any) -> MCPEnv:
    task = Task(id="t1", prompt="Dis bonjour — 挨拶して", answer="日本")
    return MCPEnv({"t": InProcess(make_server())}, [task], env_id="test/Recording-v0",
                  verifier=lambda t, answer, state: 1.0 if answer == t.answer else 0.0, **kw)


def run_episode(env: gymnasium.Env, actions: list[dict[str, Any]], **reset_kw: Any) -> list[tuple[Any, ...]]:
    env.reset(**reset_kw)
    out = []
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return out


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types, recursively (1 != 1.0 != True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# -- schema round trip ------------------------------------------------------------------------------------------------
def test_round_trip_non_ascii_images_errors_and_catalogue_changes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = RecordTrajectories(make_env(), run, policy="policy-α", metadata={"run": "α"})
    actions = [
        {"tool": "echo", "arguments": {"text": TEXT}, "raw_text": f"<tool_call>{TEXT}</tool_call>",
         "parse_status": "ok"},
        {"tool": "image", "arguments": {}},
        {"tool": "fail", "arguments": {}},
        {"tool": "rpc_error", "arguments": {}},
        {"tool": "nope", "arguments": {"x": [1, 2.5]}, "raw_text": "nope(x)", "parse_status": "unknown_tool"},
        {"tool": "unlock", "arguments": {}},
        {"tool": "bonus", "arguments": {}},
        {"tool": "submit", "arguments": {"answer": "日本"}},
    ]
    results = run_episode(env, actions, seed=3, options={"episode_key": "t1#0", "metadata": {"note": "ü"}})
    env.close()
    assert results[-1][2] is True

    rec = load(run)
    assert rec.episodes.num_rows == 1 and rec.steps.num_rows == len(actions)
    ep = rec.episodes[0]
    steps = sorted(rec.steps, key=lambda r: r["step_index"])
    assert [s["step_index"] for s in steps] == list(range(len(actions)))
    for s, a, (obs, reward, terminated, truncated, info) in zip(steps, actions, results, strict=True):
        assert s["episode_id"] == ep["episode_id"] == info["episode_id"]
        assert s["tool"] == a["tool"] and same(json.loads(s["arguments"]), a["arguments"])
        assert (s["server"], s["server_tool"]) == (info["server"], info["server_tool"])
        assert same(json.loads(s["content"]), info["content"])
        assert same(json.loads(s["structured_content"]) if s["structured_content"] else None,
                    info["structured_content"])
        assert s["is_error"] == info["is_error"]
        assert same(json.loads(s["error"]) if s["error"] else None, info["error"])
        assert (s["reward"], s["terminated"], s["truncated"]) == (reward, terminated, truncated)
        assert s["duration"] == info["duration"] and s["observation"] == obs["result"]
        assert (s["raw_text"], s["parse_status"]) == (a.get("raw_text"), a.get("parse_status"))
        assert s["result_truncated"] is False and s["timestamp"] is not None
        assert json.loads(s["info"])["tools_changed"] == info["tools_changed"]

    echo, img, fail, rpc, nope, unlock = steps[:6]
    assert json.loads(echo["content"]) == [{"type": "text", "text": TEXT}] and TEXT in echo["observation"]
    blocks = json.loads(img["content"])
    assert base64.b64decode(blocks[0]["data"]) == PIXEL and blocks[0]["mimeType"] == "image/png"
    assert blocks[1]["text"] == "un pixel — 画素"
    assert fail["is_error"] and "boom ✗" in json.loads(fail["content"])[0]["text"]
    assert rpc["error_code"] == -32602 and json.loads(rpc["error"])["kind"] == "jsonrpc"
    assert json.loads(nope["error"])["kind"] == "unknown_tool" and nope["server"] is None

    # episode row: task, policy, catalogue with submit, the change after `unlock`, servers, versions
    assert (ep["episode_key"], ep["env_id"], ep["task_id"], ep["seed"]) == ("t1#0", "test/Recording-v0", "t1", 3)
    assert ep["task_prompt"] == "Dis bonjour — 挨拶して" and json.loads(ep["task"])["answer"] == "日本"
    metadata = json.loads(ep["metadata"])
    budget = metadata.pop("budget")  # the env's budgets and what the episode used of them
    assert metadata.pop("reset_seconds") > 0  # the reset's time (the job's time to first step)
    assert ep["policy"] == "policy-α" and metadata == {"run": "α", "note": "ü"}
    assert budget["steps"] == ep["length"] and budget["max_turns"] is None and budget["turns"] == ep["length"]
    assert (ep["final_answer"], ep["success"], ep["termination"]) == ("日本", True, "submit")
    assert ep["length"] == len(actions) and ep["total_reward"] == pytest.approx(sum(r[1] for r in results))
    tools = json.loads(ep["tools"])
    names = [t["name"] for t in tools]
    assert "submit" in names and "echo" in names and "bonus" not in names
    assert ep["catalogue_hash"] == catalogue_fingerprint(tools)
    (change,) = json.loads(ep["catalogue_changes"])
    assert change["step_index"] == 5 and "bonus" in [t["name"] for t in change["tools"]]
    assert change["hash"] == catalogue_fingerprint(change["tools"]) != ep["catalogue_hash"]
    server = json.loads(ep["servers"])["t"]
    assert (server["name"], server["version"]) == ("recording-test", "2.0.1") and server["protocol_version"]
    assert ep["library_version"] == mcp_gym.__version__ and ep["recorder"] == "env"
    assert json.loads(ep["initial_observation"])["task"] == "Dis bonjour — 挨拶して"

    # the shards are plain Parquet with the version in the file metadata, readable by datasets directly
    shards = sorted((run / "steps").glob("*.parquet"))
    assert shards and pq.read_schema(shards[0]).metadata[VERSION_KEY] == SCHEMA_VERSION.encode()
    import datasets

    direct = datasets.load_dataset("parquet", data_files=str(run / "steps" / "*.parquet"), split="train",
                                   cache_dir=str(tmp_path / "hf"))
    assert direct.to_list() == rec.steps.to_list()


def test_result_over_limit_is_truncated_and_flagged(tmp_path: Path) -> None:
    env = RecordTrajectories(make_env(), tmp_path / "default")  # default limit: 10 MiB
    run_episode(env, [{"tool": "big", "arguments": {"n": 11_000_000}}, {"tool": "submit", "arguments": {"answer": ""}}])
    env.close()
    s = load(tmp_path / "default").steps[0]
    assert s["result_truncated"] and s["result_bytes"] > 22_000_000  # text block + structured {"result": ...}
    assert len(s["content"].encode()) <= 10 * 2**20 and s["structured_content"] is None
    (block,) = json.loads(s["content"])
    assert block["text"].startswith("xxxx") and block["text"].endswith("bytes]")

    env = RecordTrajectories(make_env(), tmp_path / "small", max_result_bytes=2000)
    run_episode(env, [{"tool": "big", "arguments": {"n": 3000, "char": "é"}}, {"tool": "image", "arguments": {}},
                      {"tool": "echo", "arguments": {"text": "short"}},
                      {"tool": "submit", "arguments": {"answer": ""}}])
    env.close()
    cut, img, short, _ = sorted(load(tmp_path / "small").steps, key=lambda r: r["step_index"])
    assert cut["result_truncated"] and len(cut["content"].encode()) <= 2000
    assert cut["result_bytes"] > 2 * 3000 * 2  # bytes, not characters: "é" is 2 bytes, in text and structured
    assert json.loads(cut["content"])[0]["text"].startswith("éééé")  # cut on a UTF-8 boundary
    assert not img["result_truncated"] and not short["result_truncated"]
    assert json.loads(short["structured_content"]) == {"result": "short"}


# -- free-form values come back exactly -------------------------------------------------------------------------------
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(st.dictionaries(_text, _json, max_size=5), _json), min_size=1, max_size=20))
def test_free_form_values_round_trip_exactly_across_rows_and_shards(tmp_path_factory: Any, calls: list) -> None:
    run = tmp_path_factory.mktemp("run")
    with TrajectoryWriter(run, row_group_rows=3, shard_bytes=1, fsync="never") as w:
        for i in range(0, len(calls), 3):
            ep = w.start_episode(key=f"k{i}", metadata={"i": i})
            for args, value in calls[i : i + 3]:
                ep.add_step("tool", args, structured_content=value, info={"value": value})
            ep.finish()
    steps = load(run).steps  # shards in write order
    got = [(json.loads(a), json.loads(v) if v is not None else None)
           for a, v in zip(steps["arguments"], steps["structured_content"], strict=True)]
    assert len(got) == len(calls)
    assert all(same(g[0], args) and same(g[1], value) for g, (args, value) in zip(got, calls, strict=True))


def test_heterogeneous_arguments_across_shards_read_by_load_dataset(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rows = [{"a": 1}, {"b": "x", "c": [1, 2]}, {"a": "now a string"}, {}, {"nested": {"k": None, "f": 1.5}},
            {"a": 1.0}, {"a": True}]
    with TrajectoryWriter(run, row_group_rows=1, shard_bytes=1, fsync="never") as w:
        for i, args in enumerate(rows):
            ep = w.start_episode(key=str(i))
            ep.add_step("t", args, structured_content=args or None)
            ep.finish()
    assert len(list((run / "steps").glob("*.parquet"))) == len(rows)  # one shard each: no shared inference
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(run / "steps" / "*.parquet"), split="train",
                               cache_dir=str(tmp_path / "hf"))
    eps = datasets.load_dataset("parquet", data_files=str(run / "episodes" / "*.parquet"), split="train",
                                cache_dir=str(tmp_path / "hf"))
    by_id = {e["episode_id"]: int(e["episode_key"]) for e in eps}
    got = {by_id[s["episode_id"]]: json.loads(s["arguments"]) for s in ds}
    assert all(same(got[i], args) for i, args in enumerate(rows))


def test_lone_surrogate_does_not_block_the_writer(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path, fsync="never") as w:
        ep = w.start_episode()
        ep.add_step("t", {"s": "ok"}, observation="bad \ud800 text")
        ep.finish()
    assert load(tmp_path).steps[0]["observation"] == "bad \ufffd text"


# -- crash safety and resume ------------------------------------------------------------------------------------------
def _collect(run: Path, *, kill_after: int | None, shard_bytes: int = 1) -> list[str]:
    """Run the collector; SIGKILL it after ``kill_after`` finished episodes. Returns the keys it reported."""
    cmd = [sys.executable, str(COLLECTOR), str(run), "--tasks", "12", "--samples", "4", "--shard-bytes",
           str(shard_bytes)]
    if kill_after is not None:
        cmd += ["--sleep", "0.01"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    done: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("done "):
            done.append(line.split()[1])
        if kill_after is not None and len(done) >= kill_after:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.stdout.close()
    code = proc.wait(timeout=60)
    assert code == (-signal.SIGKILL if kill_after is not None else 0)
    return done


def _check_consistent(run: Path) -> list[str]:
    rec = load(run)
    keys = rec.episodes["episode_key"]
    assert len(keys) == len(set(keys)), "duplicate episodes"
    lengths = dict(zip(rec.episodes["episode_id"], rec.episodes["length"], strict=True))
    counts: dict[str, list[int]] = {}
    for eid, idx in zip(rec.steps["episode_id"], rec.steps["step_index"], strict=True):
        counts.setdefault(eid, []).append(idx)
    assert {e: sorted(v) for e, v in counts.items()} == {e: list(range(n)) for e, n in lengths.items()}
    assert all(s["parse_status"] == "ok" and s["raw_text"].startswith("call ") for s in rec.steps)
    return keys


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_gives_exactly_the_planned_episodes(tmp_path: Path) -> None:
    import datasets

    run = tmp_path / "run"
    reported: list[str] = []
    # 1st kill: a shard is published every row group; 2nd kill: nothing published, all in the WAL and a hidden shard
    for kill_after, shard_bytes in ((9, 1), (14, 10**9)):
        reported += _collect(run, kill_after=kill_after, shard_bytes=shard_bytes)
        keys = _check_consistent(run)  # a killed run reads as is, WAL included
        assert set(reported) <= set(keys)
        wal = sorted((run / ".wal").glob("*.wal"))
        if shard_bytes > 1:
            assert sum(1 for p in wal for _ in read_frames(p)) >= kill_after
            assert list(run.glob("steps/.part-*.parquet.tmp"))
        if wal:  # a torn tail (killed mid-frame) is ignored
            with open(wal[-1], "ab") as f:
                f.write(b"\x40\x00\x00\x00garbage")
            assert set(reported) <= set(_check_consistent(run))
        if list((run / "episodes").glob("*.parquet")):  # published shards alone read fine next to hidden files
            datasets.load_dataset("parquet", data_files=str(run / "episodes" / "*.parquet"), split="train",
                                  cache_dir=str(tmp_path / "hf"))
    rest = _collect(run, kill_after=None)
    planned = RunDirectory(run).planned
    assert planned is not None and len(planned) == 48
    assert not set(rest) & set(reported)
    keys = _check_consistent(run)
    assert sorted(keys) == sorted(planned) and RunDirectory(run).is_complete()
    assert not list((run / ".wal").iterdir())
    assert not [p for p in run.rglob(".*") if p.is_file()]
    assert sorted(load(run, include_wal=False).episodes["episode_key"]) == sorted(planned)


def test_live_writer_wal_is_not_recovered_and_torn_frames_are_ignored(tmp_path: Path) -> None:
    w1 = TrajectoryWriter(tmp_path, fsync="never")
    ep = w1.start_episode(key="a")
    ep.add_step("t", {"x": 1})
    ep.finish()
    w2 = TrajectoryWriter(tmp_path, fsync="never")
    assert w2.recovered == 0 and len(list((tmp_path / ".wal").glob("*.wal"))) == 1
    assert RunDirectory(tmp_path).done_keys() == {"a"} and load(tmp_path).episodes["episode_key"] == ["a"]
    w1.close()
    w2.close()
    assert not list((tmp_path / ".wal").iterdir()) and load(tmp_path).steps.num_rows == 1

    seg = tmp_path / "seg.wal"
    wal = WalFile(seg, fsync=False)
    wal.append((("e1",), [("s1",)]))
    wal.append((("e2",), []))
    wal.close()
    with open(seg, "ab") as f:  # a frame whose payload names a global must never be loaded
        import pickle
        import struct
        import zlib

        evil = pickle.dumps(os.system)
        f.write(struct.pack("<II", len(evil), zlib.crc32(evil)) + evil)
    assert [e for e, _ in read_frames(seg)] == [("e1",), ("e2",)]


def test_wal_segment_is_mapped_preallocated_read_live_and_cut_on_close(tmp_path: Path) -> None:
    seg = tmp_path / "seg.wal"
    wal = WalFile(seg, fsync=True)
    nan_step = ("s", float("nan"), float("-inf"))
    frames = [
        (("e1", 1, 2.5, None, True, TEXT), [("s1", -0.01, 2**62)]),  # JSON frame
        (("e2", 0.0), [nan_step]),  # non-finite floats: pickled, kept exactly
        (("e3", "\ud800"), []),  # a lone surrogate: pickled
        (("e4", "x" * (5 << 20)), []),  # bigger than a preallocated chunk: the mapping grows
    ]
    for frame in frames[:3]:
        wal.append(frame)
    assert seg.stat().st_size >= 4 << 20  # preallocated; the zeros after the frames end the log
    assert [f[0] for f in read_frames(seg)] == [f[0] for f in frames[:3]]  # read while the writer lives
    wal.append(frames[3])
    wal.close()
    got = list(read_frames(seg))
    assert seg.stat().st_size < 6 << 20 and [f[0] for f in got] == [f[0] for f in frames]
    assert got[0][1] == frames[0][1] and got[1][1][0][0] == "s"
    assert got[1][1][0][1] != got[1][1][0][1] and got[1][1][0][2] == float("-inf")  # NaN, -inf
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) - 10])  # killed mid-copy: the torn last frame is dropped
    assert [f[0][0] for f in read_frames(seg)] == ["e1", "e2", "e3"]


def test_non_finite_rewards_survive_the_wal(tmp_path: Path) -> None:
    w = TrajectoryWriter(tmp_path, fsync="never")
    for key, reward in (("a", 1.0), ("b", float("nan")), ("c", float("inf"))):
        ep = w.start_episode(key=key)
        ep.add_step("t", {"x": 1}, reward=reward, duration=0.5)
        ep.finish()
    live = load(tmp_path)  # still only in the WAL
    rewards = dict(zip(live.episodes["episode_key"], live.episodes["total_reward"], strict=True))
    assert rewards["a"] == 1.0 and rewards["b"] != rewards["b"] and rewards["c"] == float("inf")
    w.close()
    assert load(tmp_path).steps.num_rows == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_cannot_use_the_parents_writer(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path, fsync="never") as w:
        pid = os.fork()
        if pid == 0:  # child: refused, and its exit does not close the parent's writer
            try:
                w.start_episode()
            except RuntimeError:
                os._exit(0)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        ep = w.start_episode(key="parent")
        ep.add_step("t", {})
        ep.finish()
    assert load(tmp_path).episodes["episode_key"] == ["parent"]


def test_recovery_dedupes_by_key(tmp_path: Path) -> None:
    run, other = tmp_path / "run", tmp_path / "other"

    def record(w: TrajectoryWriter, key: str) -> None:
        ep = w.start_episode(key=key)
        ep.add_step("t", {"key": key})
        ep.finish()

    with TrajectoryWriter(run, fsync="never") as w:
        record(w, "a")
    src = TrajectoryWriter(other, fsync="never")
    record(src, "a")  # already published in `run`
    record(src, "b")
    record(src, "b")  # twice in the same log
    (wal,) = (other / ".wal").glob("*.wal")
    for seq in (0, 1):  # a dead writer (no lock holder) left two segments with the same episodes
        shutil.copy(wal, run / ".wal" / f"20000101T000000-1-dead00-{seq:05d}.wal")
    src.close()
    with TrajectoryWriter(run, fsync="never") as w:
        assert w.recovered == 1
    rec = load(run)
    assert sorted(rec.episodes["episode_key"]) == ["a", "b"] and rec.steps.num_rows == 2
    assert not list((run / ".wal").iterdir())


def test_plan_and_pending(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    keys = run.plan(["a", "b", "c"])
    assert run.pending() == keys and run.plan(["a", "b", "c"]) == keys
    with pytest.raises(ValueError):
        run.plan(["a", "b"])
    with pytest.raises(ValueError):
        run.plan(["x", "x"], replace=True)
    with TrajectoryWriter(run.path, fsync="never") as w:
        for k in ("b", "zz"):
            e = w.start_episode(key=k)
            e.finish()
    assert run.pending() == ["a", "c"] and not run.is_complete()
    assert json.loads((run.path / "manifest.json").read_text())["schema_version"] == SCHEMA_VERSION


def test_other_major_version_refused_older_minor_read_with_nulls(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path, fsync="never") as w:
        e = w.start_episode(key="k")
        e.add_step("t", {})
        e.finish()
    (shard,) = (tmp_path / "episodes").glob("*.parquet")
    table = pq.read_table(shard)
    old = table.drop_columns(["metadata"]).replace_schema_metadata({VERSION_KEY: b"1.0"})
    pq.write_table(old, shard)
    assert load(tmp_path).episodes[0]["metadata"] is None
    pq.write_table(table.replace_schema_metadata({VERSION_KEY: b"2.0"}), shard)
    with pytest.raises(ValueError, match="schema version 2.0"):
        load(tmp_path)


def test_wal_of_an_older_minor_version_loads_and_recovers_with_nulls(tmp_path: Path) -> None:
    """A dead 1.0 writer's WAL (step rows without the 1.1 columns ``turn``, ``assistant_content``) reads and
    recovers by column name, the missing columns as nulls."""
    run = tmp_path / "run"
    RunDirectory(run)
    episode = EpisodeRecord(episode_id="e0", episode_key="old#0", task_id="t", total_reward=1.5, length=1,
                            recorder="env", started_at=0, ended_at=1).row()
    step = StepRecord(episode_id="e0", step_index=0, timestamp=0, tool="add", arguments='{"n":1}', is_error=False,
                      reward=1.5).row()
    old_width = StepRecord.COLUMNS.index("turn")  # 1.0 ended before 'turn'
    wal = WalFile(run / ".wal" / "20000101T000000-1-dead00-00000.wal", fsync=False)
    wal.append((episode, [step[:old_width]]))
    wal.close()
    rec = load(run)
    (row,) = rec.steps
    assert row["tool"] == "add" and row["reward"] == 1.5 and row["turn"] is None and row["assistant_content"] is None
    assert RunDirectory(run).done_keys() == {"old#0"}
    with TrajectoryWriter(run, fsync="never") as w:
        assert w.recovered == 1
    assert not list((run / ".wal").glob("*.wal"))
    rec = load(run)
    assert rec.episodes[0]["episode_key"] == "old#0" and rec.steps[0]["turn"] is None


def test_add_step_fills_every_column_by_name(tmp_path: Path) -> None:
    """The writer builds a step row positionally (it runs per step): every add_step argument lands in the column of
    its name, as StepRecord reads it back, in the WAL and in the Parquet shard."""
    args: dict[str, Any] = {
        "server": "srv", "server_tool": "stool", "content": [{"type": "text", "text": "c"}],
        "structured_content": {"s": 1}, "is_error": True, "error": {"kind": "k", "code": -32602}, "reward": 0.25,
        "terminated": False, "truncated": True, "duration": 0.5, "timestamp": 2.0, "observation": "obs",
        "resources": {"u": "r"}, "raw_text": "raw", "parse_status": "ok", "info": {"i": 1}, "turn": 3,
        "assistant_content": "said", "user_turn": 2,
    }
    with TrajectoryWriter(tmp_path, fsync="never") as w:
        e = w.start_episode(episode_id="ep", key="k")
        e.add_step("tool", {"a": 1}, **args)
        (row,) = e._rows
        e.finish()
    step = StepRecord.from_row(row)
    expected = {
        "episode_id": "ep", "step_index": 0, "timestamp": 2_000_000, "tool": "tool", "server": "srv",
        "server_tool": "stool", "arguments": '{"a":1}', "content": '[{"type":"text","text":"c"}]',
        "structured_content": '{"s":1}', "is_error": True, "error": '{"kind":"k","code":-32602}',
        "error_code": -32602, "reward": 0.25, "terminated": False, "truncated": True, "duration": 0.5,
        "observation": "obs", "resources": '{"u":"r"}', "raw_text": "raw", "parse_status": "ok",
        "result_truncated": False, "result_bytes": len('[{"type":"text","text":"c"}]') + len('{"s":1}'),
        "info": '{"i":1}', "turn": 3, "assistant_content": "said", "user_turn": 2,
    }
    assert dataclasses.asdict(step) == expected and set(expected) == set(StepRecord.COLUMNS)
    shard = load(tmp_path).steps[0]
    assert {k: shard[k] for k in expected if k != "timestamp"} == {k: expected[k] for k in expected if k != "timestamp"}
    for flag in ("is_error", "terminated", "truncated"):  # the flags one at a time: a swap of two shows
        with TrajectoryWriter(tmp_path / flag, fsync="never", max_result_bytes=1) as w:
            e = w.start_episode()
            e.add_step("t", {}, content=[{"type": "text", "text": "long"}], **{flag: True})
            step = StepRecord.from_row(e._rows[0])
            e.discard()
        assert [step.is_error, step.terminated, step.truncated, step.result_truncated] == [
            flag == "is_error", flag == "terminated", flag == "truncated", True]


def test_records_define_the_schemas(tmp_path: Path) -> None:
    """The Arrow schemas are generated from the record classes (name, type, nullability, description), in field
    order, and a row the writer made reads back by name."""
    for record, schema in ((StepRecord, STEPS_SCHEMA), (EpisodeRecord, EPISODES_SCHEMA)):
        assert tuple(schema.names) == record.COLUMNS == tuple(f.name for f in dataclasses.fields(record))
        for f in dataclasses.fields(record):
            arrow = schema.field(f.name)
            assert arrow.type == f.metadata["arrow"] and arrow.nullable
            assert arrow.metadata[b"description"].decode() == f.metadata["doc"]
    assert StepRecord.ROW({n: n for n in reversed(StepRecord.COLUMNS)}) == StepRecord.COLUMNS  # by name
    with pytest.raises(KeyError, match="turn"):
        StepRecord.ROW({n: None for n in StepRecord.COLUMNS if n != "turn"})
    with TrajectoryWriter(tmp_path, fsync="never") as w:
        e = w.start_episode(key="k", task_id="t")
        e.add_step("add", {"n": 1}, server="s", reward=0.5, turn=2, assistant_content="ok")
        steps = list(e._rows)
        e.finish(termination="done")
        episode = e.record
    (step,) = (StepRecord.from_row(r) for r in steps)
    assert (step.tool, step.server, step.arguments, step.reward, step.turn, step.assistant_content) == (
        "add", "s", '{"n":1}', 0.5, 2, "ok")
    assert (episode.episode_key, episode.task_id, episode.length, episode.termination) == ("k", "t", 1, "done")
    assert load(tmp_path).episodes[0]["termination"] == "done"


# -- other entry points -----------------------------------------------------------------------------------------------
def test_client_and_host_middleware_write_the_same_format(tmp_path: Path) -> None:
    run = tmp_path / "run"

    async def main() -> None:
        async with RecordingClient(Client(make_server().mcp), run, policy="agent", env_id="raw") as client:
            await client.start_episode(key="c#0", task_id="t1", prompt="say hi ✓")
            await client.call_tool("echo", {"text": TEXT})
            await client.call_tool("record", {"values": {"reward": 0.25, "done": True}})
            with pytest.raises(MCPError):
                await client.call_tool("rpc_error", {})
            client.end_episode(final_answer="hi", success=True)
            await client.call_tool("image", {})  # opens an implicit episode, finished on close

        host = MCPHost({"a": InProcess(make_server()), "b": InProcess(make_server())})
        async with anyio.create_task_group() as tg:
            await host.start(tg)
            recorder = RecordingHost(host, run)
            await recorder.start_episode(key="h#0")
            out = await recorder.call("b__echo", {"text": "via host"}, timeout=10)
            assert out.server == "b"
            recorder.end_episode()
            recorder.close()
            await host.close()

    anyio.run(main)
    env = RecordTrajectories(make_env(), run)
    run_episode(env, [{"tool": "submit", "arguments": {"answer": "x"}}], options={"episode_key": "e#0"})
    env.close()

    rec = load(run)
    eps = {e["episode_key"]: e for e in rec.episodes}
    assert set(eps) == {"c#0", None, "h#0", "e#0"}
    c = eps["c#0"]
    assert (c["recorder"], c["policy"], c["env_id"], c["task_prompt"]) == ("client", "agent", "raw", "say hi ✓")
    assert c["length"] == 3 and c["total_reward"] == 0.25 and c["success"] and c["final_answer"] == "hi"
    assert json.loads(c["servers"])["server"]["name"] == "recording-test"
    assert "echo" in [t["name"] for t in json.loads(c["tools"])]
    steps = sorted(rec.episode_steps(c["episode_id"]), key=lambda s: s["step_index"])
    assert json.loads(steps[0]["content"]) == [{"type": "text", "text": TEXT}]
    assert steps[1]["reward"] == 0.25 and steps[1]["terminated"]
    assert steps[2]["error_code"] == -32602 and steps[2]["is_error"] and steps[0]["reward"] is None
    assert eps[None]["termination"] == "closed" and eps[None]["length"] == 1
    (h,) = rec.episode_steps(eps["h#0"]["episode_id"])
    assert (h["tool"], h["server"], h["server_tool"]) == ("b__echo", "b", "echo")
    assert set(json.loads(eps["h#0"]["servers"])) == {"a", "b"}


def test_gym_make_wrapper_strips_keys_and_drops_unfinished_episodes(tmp_path: Path) -> None:
    env = RecordTrajectories(gymnasium.make("mcp_gym/Counter-v0"), tmp_path, policy="p")
    env.reset(seed=0, options={"task_id": "counter-0000", "episode_key": "k0", "policy": "other"})
    env.step({"tool": "get_count", "arguments": {}, "raw_text": "get_count()", "parse_status": "ok"})
    with pytest.warns(UserWarning, match="not recorded"):  # k0 is unfinished: dropped
        env.reset(seed=1, options={"task_id": "counter-0001", "episode_key": "k1"})
    env.step({"tool": "submit", "arguments": {"answer": "4"}})
    env.close()
    (ep,) = load(tmp_path).episodes
    assert (ep["episode_key"], ep["policy"], ep["env_id"], ep["termination"]) == ("k1", "p", "mcp_gym/Counter-v0",
                                                                                    "submit")


def test_end_episode_records_an_episode_the_caller_cut(tmp_path: Path) -> None:
    """A trainer's turn limit ends an episode the env did not end: ``end_episode`` records it with that termination
    (a reset or close would drop it); without a step there is nothing to record."""
    env = RecordTrajectories(mcp_gym.make_env("Counter"), tmp_path / "run")
    env.reset(options={"task_id": "counter-0000"})
    env.end_episode("max_turns")  # no step yet: nothing
    env.step({"tool": "add", "arguments": {"amount": 2}})
    env.end_episode("max_turns")
    env.end_episode("again")  # already recorded: no-op
    env.reset(options={"task_id": "counter-0001"})
    env.close()  # this one has no step: dropped silently
    (episode,) = load(tmp_path / "run").episodes
    assert (episode["task_id"], episode["termination"], episode["success"], episode["length"]) == (
        "counter-0000", "max_turns", None, 1)
    assert episode["total_reward"] == pytest.approx(-0.01)
