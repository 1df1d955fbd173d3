"""The tabular Q-learning example learns the Maze env: random-level success at first, >= 90 % at the end."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "scripts" / "examples" / "q_learning_maze.py"


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    """The example script's globals (``run_path`` with a non-``__main__`` name does not start training)."""
    return runpy.run_path(str(EXAMPLE), run_name="q_learning_maze")


@pytest.mark.slow
def test_q_learning_learns_the_maze(example: dict[str, Any], tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    out = example["main"](["--episodes", "120", "--block", "20", "--seed", "0", "--plot", str(plot)])
    blocks = out["blocks"]
    first, last = blocks[0]["success"], blocks[-1]["success"]
    print(f"Q-learning: first block {first:.2f}, last block {last:.2f}, {out['seconds']:.1f} s")
    assert len(out["success"]) == 120 and len(blocks) == 6
    assert first <= 0.2  # epsilon ~1: random level (a random walk rarely finds key, door and goal in 60 steps)
    assert last >= 0.9 and last - first >= 0.7
    assert out["greedy_success"] == 1.0
    assert blocks[-1]["mean_return"] > blocks[0]["mean_return"] + 1.0
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_state_key_reads_the_status_line(example: dict[str, Any]) -> None:
    obs = {"resources": {"maze://state": "Maze 5x5\n. A\nStatus: position (0, 1); key: held; door: locked; goal: "
                                         "not reached\n"}}
    key = example["state_key"]("maze-5x5-0000", obs)
    assert key == ("maze-5x5-0000", "position (0, 1); key: held; door: locked; goal: not reached")
    assert len(example["ACTIONS"]) == 5 and all(a["tool"] in ("move", "unlock") for a in example["ACTIONS"])
