"""Untrusted data read back (issue 36, items 8, 9 and 10): run directories, exported content, view manifests.

A mangled run directory (a shard without its key column, a shard copied under another name) is refused in one line
naming the file; an export that keeps nothing of a non-empty run says why and fails; a corrupt shard, a full disk and
a malformed ``manifest.json`` give one line, not a traceback. Real recordings of the bundled Counter env, the real
``mcp-gym`` command line; no wall-clock thresholds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mcp_gym import RecordTrajectories, make_env, sft
from mcp_gym.recording import load
from mcp_gym.recording.shards import ShardRefused


def collect(run: Path, episodes: int = 20) -> None:
    """``episodes`` successful Counter episodes (the oracle's calls), each under its own key."""
    env = RecordTrajectories(make_env("Counter"), run, policy="oracle")
    try:
        for i in range(episodes):
            env.reset(seed=i, options={"episode_key": f"k{i}"})
            for call in env.unwrapped.task.solution:
                *_, terminated, truncated, _ = env.step(call)
                if terminated or truncated:
                    break
    finally:
        env.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_gym.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "HYDRA_FULL_ERROR": "0"})


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error a command printed: one line on stderr (warnings aside), no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if "Warning" not in line]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("rec") / "run"
    collect(run)
    return run


def copy_of(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


# -- item 8: run directories -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("table", "column"), [("steps", "episode_id"), ("steps", "step_index"),
                                               ("episodes", "episode_id")])
def test_a_shard_without_a_key_column_is_refused_naming_it(recorded: Path, tmp_path: Path, table: str,
                                                          column: str) -> None:
    run = copy_of(recorded, tmp_path)
    (shard,) = sorted((run / table).glob("*.parquet"))
    t = pq.read_table(shard)
    pq.write_table(t.drop_columns([column]), shard)  # the schema's metadata (its version) kept
    with pytest.raises(ShardRefused) as caught:
        load(run)
    message = str(caught.value)
    assert str(shard) in message and f"no {column} column" in message and "\n" not in message
    done = cli("export-sft", f"runs={run}", f"out={tmp_path / 'sft'}")
    assert done.returncode != 0 and not (tmp_path / "sft" / "data").exists()
    line = one_line(done)
    assert str(shard) in line and f"no {column} column" in line


def test_a_shard_whose_key_is_null_is_refused(recorded: Path, tmp_path: Path) -> None:
    import pyarrow as pa

    run = copy_of(recorded, tmp_path)
    (shard,) = sorted((run / "steps").glob("*.parquet"))
    t = pq.read_table(shard)
    i = t.schema.get_field_index("episode_id")
    pq.write_table(t.set_column(i, t.schema.field(i), pa.nulls(t.num_rows, pa.string())), shard)
    with pytest.raises(ShardRefused, match=f"{shard}: .* rows have no episode_id"):
        load(run)


@pytest.mark.parametrize("tables", [("episodes",), ("steps",), ("steps", "episodes")])
def test_a_repeated_shard_is_refused_naming_both_files(recorded: Path, tmp_path: Path, tables: tuple[str, ...]
                                                       ) -> None:
    run = copy_of(recorded, tmp_path)
    for table in tables:
        (shard,) = sorted((run / table).glob("*.parquet"))
        shutil.copy(shard, shard.with_name("part-29990101T000000-1-c0ffee-00000.parquet"))  # sorts after it
    copy = run / tables[-1] / "part-29990101T000000-1-c0ffee-00000.parquet"  # episodes are checked first
    with pytest.raises(ShardRefused) as caught:
        load(run)
    message = str(caught.value)
    assert message.startswith(f"{copy}: ") and "is also in" in message and "\n" not in message, message
    done = cli("export-sft", f"runs={run}", f"out={tmp_path / 'sft'}")
    assert done.returncode != 0 and "is also in" in one_line(done)
    for table in tables:
        (run / table / copy.name).unlink()
    assert load(run).episodes.num_rows == 20


def test_an_export_that_keeps_nothing_of_a_run_says_why_and_fails(recorded: Path, tmp_path: Path) -> None:
    with pytest.raises(sft.NothingToExport, match=r"all 20 episodes read were dropped \(min_reward: 20\)"):
        sft.export(recorded, tmp_path / "sft", min_reward=1000.0)
    done = cli("export-sft", f"runs={recorded}", f"out={tmp_path / 'sft'}", "sft.min_reward=1000")
    assert done.returncode != 0 and not (tmp_path / "sft" / "data").exists()
    assert "all 20 episodes read were dropped (min_reward: 20)" in one_line(done)
