"""From a third-party server to a trained agent, the plumbing: ``mcp-gym tasks generate`` writes a small task set for
the npm ``server-everything`` (nobody here wrote it), and ``scripts/examples/sft_from_scratch.py --tasks FILE --server
ALIAS=COMMAND`` trains on its ``train`` split, validates on its ``validation`` split and evaluates on its ``test``
split (needs the [train] extra). A few steps only: the learning result is measured in docs/tasks-generate.md, not
here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, npm_bin

from mcp_gym.cli import main

pytestmark = [pytest.mark.train, pytest.mark.thirdparty]

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("trl")

# the tools the tasks use and the agent is shown (env.include_tools / --include-tool): short, Lookup-like examples
TOOLS = ["get-sum", "echo"]


@pytest.mark.timeout(900)
def test_sft_script_trains_and_evaluates_on_a_generated_task_set(tmp_path: Path) -> None:
    server = f"{npm_bin('mcp-server-everything')} stdio"
    gen = tmp_path / "gen"
    assert main(["tasks", "generate", "env=custom", f'+env.servers.everything="{server}"', f"out={gen}", "n=10",
                 "seed=0", "splits={train: 0.4, validation: 0.3, test: 0.3}",
                 f"env.include_tools=[{','.join(TOOLS)}]", "generator.walk_length=3",
                 "generator.max_calls=2", "launcher.progress=false"]) == 0
    tasks = [json.loads(line) for line in (gen / "tasks.jsonl").read_text().splitlines()]
    splits = Counter(t["split"] for t in tasks)
    assert len(tasks) == 10 and splits["train"] and splits["validation"] and splits["test"], splits

    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(ROOT / "scripts" / "examples" / "sft_from_scratch.py"), "--out", str(out),
           "--tasks", str(gen / "tasks.jsonl"), "--server", f"everything={server}", "--steps", "4",
           "--eval-every", "2", "--batch-size", "4", "--max-length", "400", "--random-samples", "1",
           *(a for tool in TOOLS for a in ("--include-tool", tool)),
           "--json", str(tmp_path / "results.json")]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())

    assert results["env"] == str(gen / "tasks.jsonl")
    import pyarrow.parquet as pq

    # the training examples show the model the env's tools only
    exported = [row for f in sorted((out / "data").rglob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    assert exported and all(sorted(t["function"]["name"] for t in ex["tools"]) == ["echo", "get-sum", "submit"]
                            for ex in exported)
    assert results["train_examples"] == splits["train"]  # the whole train split, the validation split held out
    assert results["episodes_trained"] == splits["test"] and results["episodes_random"] == splits["test"]
    assert [step for step, _ in results["validation"]] == [2, 4]
    val_runs = sorted(p.name for p in (out / "val" / "val").iterdir())
    assert val_runs == ["step-0002", "step-0004"]
    for run in val_runs:  # each validation ran on the file's validation split, all of its tasks
        summary = json.loads((out / "val" / "val" / run / "report" / "results.json").read_text())["summary"]
        assert summary["episodes"] == splits["validation"]
    assert set(results["load_average"]) == {"start", "end"}
    # one line per validation while training; the evaluation tables only at the end (the test evals)
    assert proc.stdout.count("validation at step ") == 2
    assert proc.stdout.count("Evaluation of ") == 2, proc.stdout
    assert "{'loss'" not in proc.stdout + proc.stderr  # no dict printed per logging step
    assert "| trained from scratch (greedy) |" in proc.stdout
    assert "| 4/4 [" in proc.stderr  # the training progress bar
