"""Benchmark of trajectory recording (mcp_gym.recording), in one run:

1. Writer throughput: TrajectoryWriter steps/s against a bare pyarrow ``ParquetWriter`` writing the same records
   (same explicit schema, zstd, row-group size) without WAL or atomic shards, in two flavours: the usual code
   (``json.dumps`` + ``RecordBatch.from_pylist``) and a tuned one that builds rows exactly like the recorder (so the
   ratio to it is the price of the WAL and the episode bookkeeping alone). Target: >= 0.8x.
2. Wrapper overhead: ``RecordTrajectories`` around the in-process Counter env against the same env unwrapped, on
   ``env.step`` (and on whole episodes, resets included), plus the recorder's own time inside ``step`` measured on the
   same steps. Target: <= 5%.

The machine may be shared and noisy: the sides alternate within each round (order rotated every round) and the
report is the median of per-round ratios.

    python scripts/bench/recorder.py [--rounds 11] [--episodes 2000] [--steps 10] [--env-episodes 400] [--part all]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import pyarrow as pa
import pyarrow.parquet as pq

import mcp_gym
from mcp_gym.recording import (
    EPISODES_SCHEMA,
    STEPS_SCHEMA,
    EpisodeRecord,
    RecordTrajectories,
    TrajectoryWriter,
)
from mcp_gym.recording.schema import dumps

Record = dict[str, Any]


def make_records(episodes: int, steps: int) -> list[list[Record]]:
    """Step records shaped like MCPEnv step infos (text + structured result, logs, resources)."""
    out = []
    for e in range(episodes):
        ep = []
        for i in range(steps):
            sc = {"count": i, "target": 7, "reward": -0.01, "done": False, "note": f"step {i} of episode {e} — ok"}
            ep.append({
                "tool": "add", "server": "testing", "server_tool": "add",
                "arguments": {"amount": (i % 5) + 1, "comment": "héllo"},
                "content": [{"type": "text", "text": dumps(sc)}], "structured_content": sc,
                "is_error": False, "error": None, "reward": -0.01, "terminated": i == steps - 1, "truncated": False,
                "duration": 0.0012, "timestamp": time.time(), "observation": dumps(sc),
                "resources": '{"counter://state":"count=3 target=7"}',
                "info": {"tools_changed": False, "logs": [], "progress": [], "termination": None},
            })
        out.append(ep)
    return out


def _tuned_row(eid: str, i: int, r: Record) -> tuple[Any, ...]:
    sc = r["structured_content"]
    return (  # StepRecord.COLUMNS order, positional as the writer builds it
        eid, i, int(r["timestamp"] * 1e6), r["tool"], r["server"], r["server_tool"], dumps(r["arguments"]),
        dumps(r["content"]), dumps(sc) if sc is not None else None, r["is_error"],
        dumps(r["error"]) if r["error"] else None, None, r["reward"], r["terminated"], r["truncated"],
        r["duration"], r["observation"], r["resources"], None, None, False, 0, dumps(r["info"]), None, None,
    )


def _natural_row(eid: str, i: int, r: Record) -> dict[str, Any]:
    sc, err = r["structured_content"], r["error"]
    return {
        "episode_id": eid, "step_index": i, "timestamp": int(r["timestamp"] * 1e6), "tool": r["tool"],
        "server": r["server"], "server_tool": r["server_tool"],
        "arguments": json.dumps(r["arguments"], ensure_ascii=False),
        "content": json.dumps(r["content"], ensure_ascii=False),
        "structured_content": json.dumps(sc, ensure_ascii=False) if sc is not None else None,
        "is_error": r["is_error"], "error": json.dumps(err, ensure_ascii=False) if err else None,
        "reward": r["reward"], "terminated": r["terminated"], "truncated": r["truncated"], "duration": r["duration"],
        "observation": r["observation"], "resources": r["resources"], "result_truncated": False, "result_bytes": 0,
        "info": json.dumps(r["info"], ensure_ascii=False),
    }


def _tuples_batch(rows: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)],
                                      schema=schema)


def write_plain(path: Path, records: list[list[Record]], row_group_rows: int, tuned: bool) -> None:
    """The same records with a bare ParquetWriter (explicit schema, zstd): no WAL, no atomic publish.

    ``tuned=False``: the usual way, ``json.dumps`` and ``RecordBatch.from_pylist`` of row dicts. ``tuned=True``: the
    recorder's own row building (its C JSON encoder, row tuples transposed into typed arrays), i.e. the recorder
    minus its safety.
    """
    path.mkdir(parents=True)
    sw = pq.ParquetWriter(path / "steps.parquet", STEPS_SCHEMA, compression="zstd")
    ew = pq.ParquetWriter(path / "episodes.parquet", EPISODES_SCHEMA, compression="zstd")
    make_row = _tuned_row if tuned else _natural_row
    make_batch = _tuples_batch if tuned else (lambda rows, schema: pa.RecordBatch.from_pylist(rows, schema=schema))
    steps: list[Any] = []
    episodes: list[Any] = []

    def write() -> None:
        sw.write_batch(make_batch(steps, STEPS_SCHEMA), row_group_size=len(steps))
        ew.write_batch(make_batch(episodes, EPISODES_SCHEMA), row_group_size=len(episodes))

    for e, ep in enumerate(records):
        eid = f"episode-{e}"
        steps.extend(make_row(eid, i, r) for i, r in enumerate(ep))
        now = int(time.time() * 1e6)
        record = EpisodeRecord(episode_id=eid, episode_key=str(e), env_id="bench", task_id="t", task_prompt="prompt",
                               seed=e, policy="bench", total_reward=0.0, length=len(ep), termination="done",
                               started_at=now, ended_at=now, recorder="env", library_version="0")
        episodes.append(record.row() if tuned else dict(zip(EPISODES_SCHEMA.names, record.row(), strict=True)))
        if len(steps) >= row_group_rows:
            write()
            steps, episodes = [], []
    if steps:
        write()
    sw.close()
    ew.close()


def record_episodes(w: TrajectoryWriter, records: list[list[Record]], offset: int = 0) -> None:
    """The records through a TrajectoryWriter, one EpisodeWriter per episode (WAL frame per finished episode)."""
    for e, ep in enumerate(records, offset):
        rec = w.start_episode(key=str(e), env_id="bench", task_id="t", task_prompt="prompt", seed=e, policy="bench")
        for r in ep:
            rec.add_step(
                r["tool"], r["arguments"], server=r["server"], server_tool=r["server_tool"], content=r["content"],
                structured_content=r["structured_content"], is_error=r["is_error"], error=r["error"],
                reward=r["reward"], terminated=r["terminated"], truncated=r["truncated"], duration=r["duration"],
                timestamp=r["timestamp"], observation=r["observation"], resources=r["resources"], info=r["info"],
            )
        rec.finish(termination="done")


def write_recorder(path: Path, records: list[list[Record]], row_group_rows: int, fsync: str) -> None:
    """A whole run: open a writer, record, close (publishes the shard: close, fsync, rename)."""
    with TrajectoryWriter(path, row_group_rows=row_group_rows, fsync=fsync) as w:  # type: ignore[arg-type]
        record_episodes(w, records)


def timed(fn: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn()``."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _writer_rounds(args: argparse.Namespace, tmp: Path, fsync: str, records: list[list[Record]], rounds: int
                   ) -> dict[str, list[tuple[float, float]]]:
    """Per side, the (wall, CPU) seconds of each counted round; sides rotate their order every round."""
    live = TrajectoryWriter(tmp / f"live-{fsync}", row_group_rows=args.row_group_rows, fsync=fsync)  # type: ignore
    times: dict[str, list[tuple[float, float]]] = {}
    for k in range(rounds + 1):  # round 0 warms up and is not counted
        d = tmp / f"w-{fsync}-{k}"
        runs: dict[str, Callable[[], None]] = {
            "natural": lambda d=d: write_plain(d / "natural", records, args.row_group_rows, tuned=False),
            "tuned": lambda d=d: write_plain(d / "tuned", records, args.row_group_rows, tuned=True),
            "steady": lambda k=k, w=live: (record_episodes(w, records, k * len(records)), w.flush()),
            "whole run": lambda d=d: write_recorder(d / "rec", records, args.row_group_rows, fsync),
        }
        names = list(runs)
        for name in names[k % 4 :] + names[: k % 4]:
            t = timed(runs[name])
            if k:
                times.setdefault(name, []).append(t)
        shutil.rmtree(d, ignore_errors=True)
    live.close()
    return times


def bench_writer(args: argparse.Namespace, tmp: Path) -> None:
    print(f"1. writer throughput: episodes of {args.steps} steps, row groups of {args.row_group_rows}, interleaved "
          "rounds; ratios are medians of per-round ratios, wall-clock [CPU time]")
    print("   plain 'natural' = ParquetWriter fed by json.dumps + RecordBatch.from_pylist; plain 'tuned' = the "
          "recorder's own row building without WAL or publish (its floor)")
    print("   recorder 'steady' = a long-lived writer records the round then flush()es (shards publish every 128 MiB); "
          "'whole run' = open, record, close + publish (fsync, rename) inside the round")
    for fsync, episodes, rounds in (("shard", args.episodes, args.rounds), ("episode", args.episodes // 10, 5)):
        records = make_records(episodes, args.steps)
        n = episodes * args.steps
        times = _writer_rounds(args, tmp, fsync, records, rounds)
        rate = {name: statistics.median(n / w for w, _ in v) for name, v in times.items()}
        label = "default" if fsync == "shard" else "fsync per episode: survives power loss at once"
        print(f"   fsync={fsync!r} ({label}), {episodes} episodes x {rounds} rounds: plain natural "
              f"{rate['natural']:,.0f} steps/s, plain tuned {rate['tuned']:,.0f} steps/s")
        for name in ("steady", "whole run"):
            parts = []
            for base in ("natural", "tuned"):
                pairs = list(zip(times[base], times[name], strict=True))
                wall = statistics.median(b[0] / r[0] for b, r in pairs)
                cpu = statistics.median(b[1] / r[1] for b, r in pairs)
                parts.append(f"{wall:.2f}x [{cpu:.2f}x] of {base}")
            print(f"     recorder {name:9}: {rate[name]:9,.0f} steps/s = {', '.join(parts)}  (target >= 0.8x)")


def _policy(task: Any, sample: int) -> list[dict[str, Any]]:
    actions = [dict(a) for a in task.solution]
    if sample % 2:
        actions.insert(0, {"tool": "get_count", "arguments": {}})
    return actions


class StepTimer(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Adds up the time spent in the wrapped env's ``step`` (to split the recorder's own time from the env's)."""

    def __init__(self, env: gymnasium.Env[Any, Any]) -> None:
        super().__init__(env)
        self.seconds = 0.0

    def step(self, action: Any) -> Any:
        t0 = time.perf_counter()
        out = self.env.step(action)
        self.seconds += time.perf_counter() - t0
        return out


def run_episode(env: Any, task: Any, sample: int, key: str) -> tuple[float, float]:
    """One scripted Counter episode: (seconds in ``env.step``, seconds for the whole episode incl. reset)."""
    t_all = time.perf_counter()
    env.reset(seed=sample, options={"task_id": task.id, "episode_key": key})
    step_time = 0.0
    for action in _policy(task, sample):
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        step_time += time.perf_counter() - t0
        if terminated or truncated:
            break
    return step_time, time.perf_counter() - t_all


def bench_wrapper(args: argparse.Namespace, tmp: Path) -> None:
    # Both sides drive the same env (same server, same StepTimer): the bare side steps `timer`, the recorded side the
    # RecordTrajectories around it. A round is one episode on each side (same task and seed, order alternating), so
    # drift on a shared machine cancels within a few milliseconds.
    timer = StepTimer(mcp_gym.make_env("Counter"))
    wrapped = RecordTrajectories(timer, tmp / "env-run", policy="scripted")
    tasks = timer.unwrapped.tasks
    step_ratios, loop_ratios, own_ratios, inner_ratios = [], [], [], []
    own = inner = 0.0
    for k in range(args.env_episodes + 10):  # the first 10 rounds warm up and are not counted
        task = tasks[k % len(tasks)]
        res = {}
        for env in ((timer, wrapped) if k % 2 == 0 else (wrapped, timer)):
            timer.seconds = 0.0
            res[id(env)] = (*run_episode(env, task, k, f"{task.id}#{k}"), timer.seconds)
        (bare_step, bare_all, _), (rec_step, rec_all, rec_inner) = res[id(timer)], res[id(wrapped)]
        if k >= 10:
            step_ratios.append(rec_step / bare_step)
            loop_ratios.append(rec_all / bare_all)
            own_ratios.append((rec_step - rec_inner) / rec_inner)
            inner_ratios.append(rec_inner / bare_step)
            own += rec_step - rec_inner
            inner += rec_inner
    wrapped.close()
    q = statistics.quantiles(step_ratios, n=4)
    print(f"2. RecordTrajectories on the in-process Counter env: {args.env_episodes} rounds of one scripted episode "
          "(1-3 steps) per side, same env, order alternating")
    print(f"   recorder's own time inside env.step (same steps): median {100 * statistics.median(own_ratios):.1f}% "
          f"of the env's step time; in total {100 * own / inner:.1f}% (target <= 5%)")
    print(f"   env.step time, recorded vs bare: {100 * (statistics.median(step_ratios) - 1):+.1f}% (median of "
          f"per-round ratios, quartiles {q[0]:.2f}-{q[2]:.2f}); whole episodes incl. reset: "
          f"{100 * (statistics.median(loop_ratios) - 1):+.1f}%")
    inner = 100 * (statistics.median(inner_ratios) - 1)
    print(f"   of which the env's own step (inside the recorder) vs bare: {inner:+.1f}% (the same code, slower "
          "after the recorder's work: cold CPU caches)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--episodes", type=int, default=2000, help="episodes per side per writer round")
    ap.add_argument("--steps", type=int, default=10, help="steps per episode (writer benchmark)")
    ap.add_argument("--row-group-rows", type=int, default=4096)
    ap.add_argument("--env-episodes", type=int, default=400, help="rounds of the wrapper benchmark")
    ap.add_argument("--part", choices=["all", "writer", "env"], default="all")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-bench-"))
    try:
        if args.part in ("all", "writer"):
            bench_writer(args, tmp)
        if args.part in ("all", "env"):
            bench_wrapper(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
