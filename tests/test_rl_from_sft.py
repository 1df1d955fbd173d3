"""scripts/examples/rl_from_sft.py with a reduced budget: GRPO through ``mcp_gym.trl.environment_factory`` against the
live Lookup env raises the training reward of a weak SFT start (needs the [train] extra).

The SFT phase stops at the first validation check where the model solves >= 20 % of the validation tasks, so every
run starts RL from a policy that succeeds sometimes; the RL phase's rewards are the verifier's grades of real episodes,
and each rollout ends where its episode ends (mcp_gym.trl.GRPOTrainer).
The assertion compares the mean reward of the last RL steps with that of the first ones (no wall-clock bound: the run
is sized for a loaded 2-core machine and only has a generous timeout against hangs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.train

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(2400)
def test_rl_raises_the_training_reward_of_a_weak_sft_start(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONWARNINGS": "ignore"}
    out = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "scripts" / "examples" / "rl_from_sft.py"), "--out", str(out), "--seed", "0",
           "--rl-steps", "150", "--eval-every", "150", "--random-samples", "1"]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())

    assert summary["env"] == "lookup" and summary["seed"] == 0
    assert summary["test_episodes"] == 200 and summary["test_success"]["random"] == 0.0
    stop_step, stop_val = summary["validation"]["sft"][-1]
    assert stop_val >= 0.2, summary["validation"]  # SFT stopped at its target
    # validation ran in a second process while SFT went on: the start kept is the checkpoint that met the target
    kept = out / "sft" / "checkpoints" / f"step-{stop_step:04d}" / "model.safetensors"
    assert (out / "model-sft" / "model.safetensors").read_bytes() == kept.read_bytes()
    rewards = [s["reward"] for s in summary["rl_steps"]]
    assert len(rewards) == 150
    first, last = sum(rewards[:30]) / 30, sum(rewards[-30:]) / 30
    assert last > first, f"RL did not raise the training reward: first 30 steps {first:.2f}, last 30 {last:.2f}"
    for name in ("model-sft", "model-rl"):
        assert (out / name / "config.json").is_file() and (out / name / "tokenizer.json").is_file()
    for png in ("rl_learning_curve.png", "test_success.png"):  # next to the summary, and where `mcp-gym view` finds it
        assert (out / png).is_file() and (out / "eval-rl" / "report" / png).is_file()
