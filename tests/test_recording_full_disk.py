"""The recorder on a real full file system (a tiny tmpfs): nothing raises, nothing is lost, it recovers when space
returns.

Before the fix, one ENOSPC left the shard writer closed: every later episode end raised "Operation on closed file",
even after space was freed, and close() raised. Needs permission to mount (root in CI); skipped otherwise.
"""

from __future__ import annotations

import errno
import os
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_gym import InProcess, MCPEnv
from mcp_gym.recording import RecordTrajectories, TrajectoryWriter, load
from mcp_gym.servers.counter import make_server


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs mounted for the test."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True,
                              text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill(root: Path) -> Path:
    """Fill the file system; return the filler file (delete it to free the space)."""
    filler = root / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def record(env: RecordTrajectories, keys: list[str], answer_bytes: int = 10) -> None:
    for key in keys:
        env.reset(options={"episode_key": key})
        env.step({"tool": "add", "arguments": {"amount": 1}})
        _, _, terminated, _, _ = env.step({"tool": "submit", "arguments": {"answer": "x" * answer_bytes}})
        assert terminated


def failures(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "failed" in str(w.message)]


def keys_of(run: Path, *, include_wal: bool) -> list[str]:
    return sorted(load(run, include_wal=include_wal).episodes["episode_key"])


def make_env() -> MCPEnv:
    return MCPEnv({"counter": InProcess(make_server())}, max_steps=5)


def test_shard_writes_fail_then_recover_when_space_returns(disk: Path) -> None:
    run = disk / "run"
    writer = TrajectoryWriter(run, row_group_rows=4)
    env = RecordTrajectories(make_env(), writer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record(env, [f"before-{i}" for i in range(5)])
        filler = fill(disk)
        record(env, [f"full-{i}" for i in range(30)])  # row groups fail: no exception, one warning
        assert len(failures(caught)) == 1 and "No space left" in failures(caught)[0]
        assert len(keys_of(run, include_wal=True)) == 35  # the WAL has every finished episode
        filler.unlink()
        record(env, [f"after-{i}" for i in range(5)])
        writer.publish()  # space is back: the part is rewritten from the WAL and published
        assert len(keys_of(run, include_wal=False)) == 40
        assert not list((run / ".wal").glob("*.wal"))
        record(env, [f"last-{i}" for i in range(3)])
        env.close()
        writer.close()
        assert len(failures(caught)) == 1  # warned once
    assert len(keys_of(run, include_wal=False)) == 43
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]


def test_wal_cannot_grow_episodes_wait_in_memory(disk: Path) -> None:
    """Large episodes outgrow the WAL's preallocated chunk on a full disk: they are kept in memory, written to the WAL
    and published once space returns."""
    run = disk / "run"
    writer = TrajectoryWriter(run, row_group_rows=10_000)
    env = RecordTrajectories(make_env(), writer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record(env, ["first"])
        filler = fill(disk)
        record(env, [f"big-{i}" for i in range(12)], answer_bytes=150_000)  # > the 4 MiB WAL chunk in all
        assert len(failures(caught)) == 1
        in_wal = len(keys_of(run, include_wal=True))
        assert in_wal < 13  # some episodes could only be kept in memory
        filler.unlink()
        record(env, ["after"])  # the WAL grows again and takes the waiting episodes
        assert len(keys_of(run, include_wal=True)) == 14
        env.close()
        writer.close()
    assert keys_of(run, include_wal=False) == sorted(["first", "after", *[f"big-{i}" for i in range(12)]])


def test_close_on_a_full_disk_does_not_raise_and_keeps_the_wal(disk: Path) -> None:
    run = disk / "run"
    env = RecordTrajectories(make_env(), run, row_group_rows=4)
    record(env, ["a", "b"])
    filler = fill(disk)
    with pytest.warns(RuntimeWarning, match="No space left"):
        record(env, ["c", "d", "e"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.close()  # publishing fails: a warning, no exception
    assert any("write-ahead log" in str(w.message) for w in caught)
    assert keys_of(run, include_wal=True) == ["a", "b", "c", "d", "e"]
    os.unlink(filler)
    with TrajectoryWriter(run) as w:  # the next writer publishes them
        assert w.recovered == 5
    assert keys_of(run, include_wal=False) == ["a", "b", "c", "d", "e"]
