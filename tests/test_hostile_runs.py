"""Runs stay whole against hostile input (issue 26, items 5, 6, 7 and 11).

A policy-supplied value a typed column cannot hold is refused (null, the reason recorded), never written; a run
directory has one job at a time; an SFT export replaces the previous one atomically, even under SIGKILL; readers
refuse a shard that would inflate to an absurd size. Real servers (the bundled Counter env in process), real
subprocesses killed with SIGKILL; no wall-clock thresholds.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import socket
import struct
import subprocess
import sys
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcp_gym import RecordTrajectories, make_env
from mcp_gym.recording import RunDirectory, TrajectoryWriter, load
from mcp_gym.recording.run import JOB_LOCK, RunBusy, RunLock
from mcp_gym.recording.schema import EpisodeRecord, StepRecord
from mcp_gym.recording.wal import WalFile
from mcp_gym.recording.writer import REFUSED_KEY


def _collect(run: Path, turns: list[Any], policy: str = "oracle") -> None:
    """One Counter episode per ``turn`` value, every action of it carrying that ``turn``."""
    env = RecordTrajectories(make_env("Counter"), run, policy=policy)
    try:
        for i, turn in enumerate(turns):
            env.reset(seed=i, options={"episode_key": f"k{i}"})
            for call in env.unwrapped.task.solution:
                *_, terminated, truncated, _ = env.step({**call, "turn": turn})
                if terminated or truncated:
                    break
    finally:
        env.close()


BAD_TURNS = [2**31, 2**63, -1, 1.5, "3", True, math.nan, [1], np.int64(2**40)]


def test_a_turn_the_column_cannot_hold_is_refused_and_the_run_stays_whole(tmp_path: Path) -> None:
    """Item 5: ``turn`` >= 2**31 (and every other value that is not a 0-based index) is stored as null with the
    reason in the step's info; the episodes before and after it are published and load, view and resume read them."""
    run = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _collect(run, [0, *BAD_TURNS, np.int32(7)])
    refusals = [w for w in caught if "refused turn" in str(w.message)]
    assert len(refusals) == 1, [str(w.message) for w in caught]  # said once per writer
    assert not [w for w in caught if "could not publish" in str(w.message) or "failed" in str(w.message)]
    assert not list((run / ".wal").glob("*.wal")), "every episode is in a published shard"
    rec = load(run)
    assert rec.episodes.num_rows == len(BAD_TURNS) + 2
    by_key = {e["episode_key"]: e["episode_id"] for e in rec.episodes}
    first = rec.episode_steps(by_key["k0"])[0]
    assert first["turn"] == 0 and REFUSED_KEY not in json.loads(first["info"])
    last = rec.episode_steps(by_key[f"k{len(BAD_TURNS) + 1}"])[0]
    assert last["turn"] == 7
    for i, bad in enumerate(BAD_TURNS, start=1):
        step = rec.episode_steps(by_key[f"k{i}"])[0]
        assert step["turn"] is None, bad
        assert "turn" in json.loads(step["info"])[REFUSED_KEY], bad
    assert RunDirectory(run).done_keys() == set(by_key)
    with TrajectoryWriter(run, fsync="never") as w:  # the next writer resumes
        assert w.recovered == 0


def test_a_wal_holding_an_unwritable_turn_still_loads_and_recovers(tmp_path: Path) -> None:
    """Item 5, runs recorded before the check: a dead writer's WAL frame with ``turn`` = 2**31 reads (the value as
    null) and the next writer publishes it instead of failing on it forever."""
    run = tmp_path / "run"
    RunDirectory(run)
    episode = EpisodeRecord(episode_id="e0", episode_key="bad#0", length=1, recorder="env", started_at=0,
                            ended_at=1).row()
    good = StepRecord(episode_id="e0", step_index=0, timestamp=0, tool="add", turn=0).row()
    bad = StepRecord(episode_id="e0", step_index=1, timestamp=0, tool="add", turn=2**31).row()
    wal = WalFile(run / ".wal" / "20000101T000000-1-dead00-00000.wal", fsync=False)
    wal.append((episode, [good, bad]))
    wal.close()
    assert [s["turn"] for s in load(run).steps] == [0, None]
    with TrajectoryWriter(run, fsync="never") as w:
        assert w.recovered == 1
    assert not list((run / ".wal").glob("*.wal"))
    assert [s["turn"] for s in load(run, include_wal=False).steps] == [0, None]


def test_a_bad_timestamp_is_refused_too(tmp_path: Path) -> None:
    """Item 5, the other typed value a caller hands the writer per step: a start time the timestamp column cannot
    hold (infinite, NaN, past year 9999) is replaced by now, the refusal recorded."""
    run = tmp_path / "run"
    with TrajectoryWriter(run, fsync="never") as w, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = w.start_episode(key="k", seed=2**70)  # a seed the int64 column cannot hold is dropped
        for stamp in (math.inf, math.nan, 1e300, "soon"):
            ep.add_step("add", {}, timestamp=stamp)
        ep.finish()
    steps = load(run).steps
    assert steps.num_rows == 4
    assert all("timestamp" in json.loads(s["info"])[REFUSED_KEY] for s in steps)
    assert load(run).episodes[0]["seed"] is None


# -- item 6: one job per run directory ---------------------------------------------------------------------------------
FAST = ["env=counter", "env.transport=inprocess", "launcher.progress=false", "episodes=3"]
HOLD = ("import sys; from mcp_gym.recording.run import RunLock; RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); sys.stdin.read()")


HOLD_WRITER = ("import sys; from mcp_gym.recording import TrajectoryWriter; w = TrajectoryWriter(sys.argv[1]); "
               "print('held', flush=True); sys.stdin.read()")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcp_gym.cli", *args]


def _holder(run: Path, script: str = HOLD) -> subprocess.Popen[str]:
    """A live process holding the run's job lock (as a running job does; with ``HOLD_WRITER`` a writer's shared hold)
    until its stdin closes or it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow
def test_a_second_job_refuses_in_one_line_naming_the_holder_until_it_dies(tmp_path: Path) -> None:
    """Item 6: while a job holds the run directory, another collect exits 2 with one line naming the holder's pid,
    host and command, recording nothing; after the holder is killed with SIGKILL the kernel has freed the lock and
    the same command runs."""
    out = tmp_path / "run"
    holder = _holder(out)
    try:
        proc = subprocess.run(_cli("collect", *FAST, "policy=random", f"out={out}"), capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "in use by another process (pid" in line and f"pid {holder.pid}" in line and socket.gethostname() in line
        assert "-c" in line  # the holder's command line
        assert not list(out.glob("*/*.parquet")) and not list(out.glob(".wal/*.wal"))
    finally:
        holder.kill()
        holder.wait()
    proc = subprocess.run(_cli("collect", *FAST, "policy=random", f"out={out}"), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert load(out).episodes.num_rows == 3


@pytest.mark.slow
def test_writers_and_jobs_of_other_processes_exclude_each_other(tmp_path: Path) -> None:
    """Item 6, below the jobs: a TrajectoryWriter refuses a directory another process's job holds (naming it); a job
    refuses a directory another process's writer is recording into; writers of several processes still share one
    directory, and a job's own writers (same process) share its lock."""
    run = tmp_path / "run"
    job = _holder(run)
    try:
        with pytest.raises(RunBusy, match=f"in use by another process \\(pid {job.pid}, "):
            TrajectoryWriter(run)
    finally:
        job.kill()
        job.wait()
    writer = _holder(run, HOLD_WRITER)
    try:
        with pytest.raises(RunBusy, match="names no job: a TrajectoryWriter"):
            RunLock(run).acquire()
        with TrajectoryWriter(run, fsync="never") as w:  # writers of two processes: as before
            ep = w.start_episode(key="here")
            ep.add_step("t", {})
            ep.finish()
    finally:
        writer.kill()
        writer.wait()
    with RunLock(run), TrajectoryWriter(run, fsync="never") as w:  # a job and its own writer
        w.start_episode(key="job").finish()
    with TrajectoryWriter(run, fsync="never") as w:  # a writer first, then a job of the same process
        with RunLock(run):
            w.start_episode(key="job2").finish()
        other = subprocess.run([sys.executable, "-c", HOLD, str(run)], capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)  # the job is over, the writer still shares it
        assert other.returncode != 0 and "names no job: a TrajectoryWriter" in other.stderr
    assert RunDirectory(run).done_keys() == {"here", "job", "job2"}


@pytest.mark.slow
def test_two_jobs_started_together_never_mix(tmp_path: Path) -> None:
    """Item 6, the reported race: oracle and random started at once into one directory. At most one of them runs;
    the other refuses (the lock, or the run's identity), and the run holds one policy's episodes, once per key."""
    out = tmp_path / "run"
    procs = [subprocess.Popen(_cli("collect", *FAST, f"policy={p}", f"out={out}"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p in ("oracle", "random")]
    codes = [p.wait(timeout=180) for p in procs]
    for p in procs:
        p.communicate()
    assert sorted(codes) == [0, 2], codes  # never both
    episodes = load(out).episodes
    assert len(set(episodes["policy"])) == 1
    assert len(episodes["episode_key"]) == len(set(episodes["episode_key"])) == 3


def test_crafted_lock_files_break_nothing(tmp_path: Path) -> None:
    """Item 6: the lock file is data anyone could write. A symlink to a file elsewhere (never written through), a
    FIFO (never blocks), a directory, megabytes of junk: the lock is taken all the same. Held by a live process
    whose lock file names a hostile holder (control characters, huge fields), the refusal is still one short line."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    cases = {
        "symlink": lambda p: p.symlink_to(outside),
        "dangling": lambda p: p.symlink_to(tmp_path / "nowhere"),
        "fifo": lambda p: os.mkfifo(p),
        "directory": lambda p: (p.mkdir(), (p / "x").write_text("x")),
        "junk": lambda p: p.write_bytes(os.urandom(1 << 20)),
        "json list": lambda p: p.write_text("[" * 100_000),
    }
    for name, craft in cases.items():
        run = tmp_path / name
        run.mkdir()
        craft(run / JOB_LOCK)
        with RunLock(run):
            assert (run / JOB_LOCK).is_file() and not (run / JOB_LOCK).is_symlink(), name
        with RunLock(run):  # released: taken again
            pass
    assert outside.read_text() == "keep me" and not (tmp_path / "nowhere").exists()
    run = tmp_path / "hostile"
    holder = _holder(run)
    try:
        (run / JOB_LOCK).write_text(json.dumps({"pid": "1\n\x1b[2Jrm -rf /", "host": "h" * 100_000,
                                                "command": ["x"], "started_at": None}))
        with pytest.raises(RunBusy) as caught:
            RunLock(run).acquire()
        message = str(caught.value)
        assert "\n" not in message and "\x1b" not in message and len(message) < 1000, message
        (run / JOB_LOCK).write_bytes(b"\xff\xfe" * 10)
        with pytest.raises(RunBusy, match="names no job"):
            RunLock(run).acquire()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(run):
        assert json.loads((run / JOB_LOCK).read_text())["pid"] == os.getpid()


# -- item 7: an export replaces the previous one atomically ------------------------------------------------------------
EXPORT = ("import sys; from mcp_gym import sft; "
          "sft.export(sys.argv[1], sys.argv[2], overwrite=True, max_shard_rows=1, success_only=False, "
          "dedupe=False, layout=sys.argv[3])")
LAYOUTS = {"messages": {"messages"}, "prompt_completion": {"prompt", "completion"}}


def _export_state(out: Path) -> str:
    """Which complete export ``out`` holds (its layout), failing on anything else: rows missing, files torn."""
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.load_dataset(str(out), split="train", download_mode="force_redownload")
    assert "mcp-gym-sft" in (out / "README.md").read_text()
    (layout,) = [name for name, cols in LAYOUTS.items() if cols <= set(ds.column_names)]
    assert len(ds) == EXPORT_ROWS and len(set(ds["episode_id"])) == EXPORT_ROWS, (layout, len(ds))
    return layout


EXPORT_ROWS = 120


@pytest.mark.slow
def test_sigkill_during_an_export_over_an_earlier_one_leaves_one_of_them_whole(tmp_path: Path) -> None:
    """Item 7: an export (one shard per row: many files) killed with SIGKILL at many points while it replaces an
    earlier export leaves ``out`` holding the earlier export or the new one, each complete: never a mix, never rows
    missing. Kill points: as soon as anything under ``out`` changes (where deleting the old files used to start),
    and at growing delays after the hidden staging directory appears. Leftovers of killed exports are swept."""
    run, out = tmp_path / "run", tmp_path / "sft"
    _collect(run, [0] * EXPORT_ROWS)
    subprocess.run([sys.executable, "-c", EXPORT, str(run), str(out), "messages"], check=True, timeout=300,
                   capture_output=True)
    state = _export_state(out)
    kills = 0
    plans: list[float | None] = [None, None, 0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8]
    for i, delay in enumerate(plans):
        new = "prompt_completion" if state == "messages" else "messages"
        before = sorted(p.name for p in (out / "data").iterdir())
        proc = subprocess.Popen([sys.executable, "-c", EXPORT, str(run), str(out), new], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            while proc.poll() is None:
                staging = [p for p in tmp_path.iterdir() if p.name.startswith(".sft.tmp-")]
                if delay is None:  # watch out/ itself
                    try:
                        changed = sorted(p.name for p in (out / "data").iterdir()) != before
                    except FileNotFoundError:
                        changed = True
                    if changed:
                        break
                elif staging:
                    time.sleep(delay)
                    break
                time.sleep(0.001)
        finally:
            if proc.poll() is None:
                proc.kill()
                kills += 1
            proc.wait()
        after = _export_state(out)
        assert after in (state, new), (i, after)
        state = after
    assert kills >= 3  # most plans caught the export in flight
    subprocess.run([sys.executable, "-c", EXPORT, str(run), str(out), "messages"], check=True, timeout=300,
                   capture_output=True)
    assert _export_state(out) == "messages"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sft.")]  # killed exports' leftovers swept


# -- item 11: readers refuse compression bombs ---------------------------------------------------------------------
def _bomb(run: Path, encoding: str) -> str:
    """Add a part to ``run`` whose shards are small on disk but decode to 32 MiB: zstd over one repeated character
    (``plain``: the metadata says so) or one 1 MiB dictionary value repeated (``dictionary``: it does not)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = "part-20990101T000000-1-b0mb00-00000.parquet"
    for table, column in (("steps", "content"), ("episodes", "episode_key")):  # the key: what resume reads
        (shard,) = sorted((run / table).glob("*.parquet"))[:1]
        real = pq.read_table(shard).slice(0, 1)
        rows = 32
        big = "a" * (1 << 20)
        if encoding == "plain":
            values = pa.array([big] * rows)
        else:
            values = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([big]))
        cols = {n: (values if n == column else pa.concat_arrays([real.column(n).combine_chunks()] * rows))
                for n in real.column_names}
        cols["episode_id"] = pa.array([f"bomb{i}" for i in range(rows)])
        out = pa.table(cols).replace_schema_metadata(real.schema.metadata)
        pq.write_table(out, run / table / name, compression="zstd", compression_level=19,
                       use_dictionary=encoding == "dictionary", row_group_size=rows)
        assert (run / table / name).stat().st_size * 1000 < rows << 20  # a bomb by the rule
    return name


@pytest.mark.parametrize("encoding", ["plain", "dictionary"])
def test_every_reader_refuses_a_compression_bomb_naming_the_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], encoding: str
) -> None:
    """Item 11: a shard of a few kB that decodes to 1,000x its size is refused before it is decoded, in one line
    naming it, by load(), mcp-gym view, export-sft and the resume of the next job (done keys). (The free allowance
    is lowered to 1 MiB so the bomb needs only 32 MiB here; the rule is the same at 256 MiB.)"""
    from mcp_gym import sft
    from mcp_gym.cli import main
    from mcp_gym.recording import RunStore, shards

    monkeypatch.setattr(shards, "FREE_BYTES", 1 << 20, raising=False)
    run = tmp_path / "run"
    _collect(run, [0, 1])
    name = _bomb(run, encoding)
    readers = {
        "load": lambda: load(run),
        "export-sft": lambda: sft.export(run, tmp_path / "sft"),
        "resume": lambda: RunStore(str(run)).done_keys(),
        "resume (writer)": lambda: RunDirectory(run).done_keys(),
    }
    for reader, read in readers.items():
        with pytest.raises(ValueError) as caught:
            read()
        message = str(caught.value)
        assert name in message and "refusing to read" in message and "\n" not in message, (reader, message)
    assert main(["view", str(run), "--out", str(tmp_path / "view.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert name in err and "refusing to read" in err and len(err.splitlines()) == 1, err
    (run / "steps" / name).unlink()
    (run / "episodes" / name).unlink()
    assert load(run).episodes.num_rows == 2  # the run itself reads as before


def test_a_wal_frame_that_repeats_a_value_by_reference_is_not_read(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Item 11, the write-ahead log: a pickled frame can name one 1 MiB string a thousand times in a few kB (the
    writer's pickler keeps no memo, so only a crafted frame does). It is not read (a warning names the segment); the
    frames before it are, and a frame the writer pickled (a NaN reward) still reads."""
    run = tmp_path / "run"
    RunDirectory(run)
    segment = run / ".wal" / "20000101T000000-1-dead00-00000.wal"
    wal = WalFile(segment, fsync=False)
    ok = EpisodeRecord(episode_id="e0", episode_key="ok#0", length=1, recorder="env", started_at=0, ended_at=1)
    wal.append((ok.row(), [StepRecord(episode_id="e0", step_index=0, timestamp=0, reward=math.nan).row()]))
    wal.close()
    big = "x" * (1 << 20)
    bomb = (EpisodeRecord(episode_id="e1", episode_key="bomb#0").row(),
            [StepRecord(episode_id="e1", step_index=i, timestamp=0, content=big).row() for i in range(1000)])
    payload = pickle.dumps(bomb, protocol=pickle.HIGHEST_PROTOCOL)  # with a memo: `big` once, then references
    assert len(payload) < 1 << 21
    with open(segment, "ab") as f:
        f.write(struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
    with caplog.at_level("WARNING", logger="mcp_gym.recording"):
        rec = load(run)
    assert rec.episodes["episode_key"] == ["ok#0"] and math.isnan(rec.steps[0]["reward"])
    assert str(segment) in caplog.text and "by reference" in caplog.text
