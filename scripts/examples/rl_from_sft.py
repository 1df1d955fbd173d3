"""Reinforcement learning that teaches: GRPO against the live env raises a weak SFT model's success on unseen test
tasks (CleanRL-style: one readable file, CPU only, nothing downloaded).

Phases, top to bottom:

1. **collect + export**: ``oracle`` episodes of the env's *train* split (``mcp-gym collect``), exported to a chat
   dataset with :func:`mcp_gym.sft.export`. The first ``--val-tasks`` train tasks are a validation slice: never
   trained on, they pick the RL checkpoint.
2. **SFT start**: a tiny Qwen2-architecture model from random initialisation (the tokenizer, template and model of
   ``sft_from_scratch.py``) trained with TRL's ``SFTTrainer`` on those episodes until it first solves
   ``--sft-target`` (20 %) of the first ``--sft-val-tasks`` validation tasks (checked every ``--sft-check-every``
   steps from ``--sft-min-steps`` on): a start that succeeds sometimes but not reliably, whatever the seed's loss
   plateau.
   The checkpoint that met the target is saved to ``DIR/model-sft`` (``--start DIR`` starts from a saved model
   instead). Validation runs in a second process while training goes on (``--no-background-validation``: in the
   training process); the checkpoints and their scores are the same, the run takes less wall time on 2 cores.
3. **RL**: :class:`mcp_gym.trl.GRPOTrainer` (TRL's, with each rollout ending where its episode ends) with
   :func:`mcp_gym.trl.environment_factory`: every rollout is a real episode of the env on a *train* task (validation
   slice excluded), the reward is the task verifier's grade of the final state (``reward="verifier"``: 1 if solved,
   else 0). Every ``--eval-every`` steps the model is evaluated greedily on the
   validation slice (``mcp-gym eval policy=hf split=train``); the best checkpoint (earliest on ties, the SFT start
   included) is kept as ``DIR/model-rl``.
4. **evaluate**: ``mcp-gym eval policy=hf`` (greedy) of both models and ``policy=random`` on the *test* split;
   ``DIR/summary.json`` with the success rates and the wall time of each phase, and learning curves as PNGs
   (``DIR/*.png``, also in ``DIR/eval-rl/report/`` so ``mcp-gym view DIR/eval-rl`` shows them).

One step budget and one feedback rule for training and evaluation: a training rollout runs at most the env's
``max_steps`` tool-calling rounds (``Env.max_steps``, the same limit ``eval`` applies), and a reply without a tool call
ends it in both (TRL's tool loop stops there; ``eval`` runs ``policy.no_call=end``); so does the end of the episode
(``submit``): ``mcp_gym.trl.GRPOTrainer`` stops the rollout there, as ``eval`` stops the episode.

``--env lookup`` (default): ``lookup(account)`` named in the prompt, then ``submit`` the ``colour-animal`` code its
result shows. The 200 test tasks ask (account, code) pairs that never occur in training, so the code can only come
from the tool result.

    python scripts/examples/rl_from_sft.py                                # default budget (see the flags)
    python scripts/examples/rl_from_sft.py --seed 1 --out runs/rl-from-sft-1

``--tasks FILE --server ALIAS=COMMAND`` (as in ``sft_from_scratch.py``): a task file with ``train``/``validation``/
``test`` splits over any MCP servers, e.g. what ``mcp-gym tasks generate`` wrote for your server; the validation slice
is then the first ``--val-tasks`` tasks of its ``validation`` split, and RL rollouts run on its ``train`` split.

While it runs: a progress bar per training phase and one line per validation (step, validation success, best so far);
the test tables at the end, everything in ``DIR/summary.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is flagged experimental in TRL 1.x

import datasets  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, SFTConfig, SFTTrainer  # noqa: E402

from mcp_gym import sft  # noqa: E402
from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT  # noqa: E402
from mcp_gym.trl import GRPOTrainer, environment_factory, prepare_tokenizer, task_dataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sft_from_scratch import (  # noqa: E402
    TEMPLATE,
    TaskSet,
    Validate,
    add_task_flags,
    cli,
    eval_summary,
    evaluate,
    quiet_progress,
    tiny_model,
    train_tokenizer,
    validate,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags (all have defaults, so the script runs as is)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/rl-from-sft", help="directory for runs, models, curves and the summary")
    p.add_argument("--env", default="lookup", help="bundled env config name (conf/env)")
    add_task_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val-tasks", type=int, default=100,
                   help="first train tasks kept out of training (validation: picks the RL checkpoint)")
    p.add_argument("--sft-val-tasks", type=int, default=50,
                   help="the first N of the validation tasks that decide when SFT stops (checked often: kept small)")
    p.add_argument("--sft-tasks", type=int, default=800, help="oracle episodes in the SFT slice")
    p.add_argument("--start", default=None, help="an SFT model directory to start RL from (skips phases 1-2)")
    p.add_argument("--sft-max-steps", type=int, default=1500, help="SFT optimisation steps at most")
    p.add_argument("--sft-min-steps", type=int, default=200, help="SFT steps before the first validation")
    p.add_argument("--sft-check-every", type=int, default=25, help="validate the SFT model every N steps")
    p.add_argument("--sft-target", type=float, default=0.2,
                   help="stop SFT at the first validation success >= this (the weak start)")
    p.add_argument("--sft-batch-size", type=int, default=16)
    p.add_argument("--sft-learning-rate", type=float, default=3e-3)
    p.add_argument("--sft-max-length", type=int, default=512, help="tokens per SFT example (longer ones refused)")
    p.add_argument("--vocab", type=int, default=600, help="BPE vocabulary size")
    p.add_argument("--hidden", type=int, default=128, help="model width")
    p.add_argument("--layers", type=int, default=2, help="transformer layers")
    p.add_argument("--heads", type=int, default=8, help="attention heads per layer")
    p.add_argument("--rl-steps", type=int, default=600, help="GRPO optimisation steps")
    p.add_argument("--num-generations", type=int, default=8, help="rollouts per task (the GRPO group)")
    p.add_argument("--prompts-per-step", type=int, default=4, help="distinct tasks per GRPO step")
    p.add_argument("--rl-learning-rate", type=float, default=3e-4)
    p.add_argument("--rl-warmup-steps", type=int, default=10,
                   help="learning-rate warm-up (Adam's first steps move every weight by the full rate)")
    p.add_argument("--beta", type=float, default=0.04, help="KL penalty towards the SFT start")
    p.add_argument("--loss-type", default="dapo", help="GRPOConfig.loss_type")
    p.add_argument("--scale-rewards", default="group", help="GRPOConfig.scale_rewards (group, batch, none)")
    p.add_argument("--num-iterations", type=int, default=1, help="optimisation passes over each batch of rollouts")
    p.add_argument("--temperature", type=float, default=0.5, help="sampling temperature of the rollouts")
    p.add_argument("--max-completion-length", type=int, default=192, help="tokens per rollout (all turns)")
    p.add_argument("--eval-every", type=int, default=100, help="validate (and maybe keep) every N GRPO steps")
    p.add_argument("--max-new-tokens", type=int, default=40, help="tokens per model reply at evaluation")
    p.add_argument("--random-samples", type=int, default=2, help="random-policy episodes per test task")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for a model this small)")
    p.add_argument("--background-validation", action=argparse.BooleanOptionalAction, default=True,
                   help="validate in a second process while training goes on (same checkpoints, same scores)")
    return p.parse_args(argv)


def plot_curves(out: Path, steps: list[dict[str, Any]], val: list[tuple[int, float]],
                test: dict[str, float]) -> list[Path]:
    """Learning curves as PNGs: training reward and success per GRPO step, validation success, test before/after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [s["step"] for s in steps]
    ax.plot(xs, [s["reward"] for s in steps], lw=0.8, alpha=0.5, label="training reward (mean of the step's rollouts)")
    k = max(1, len(steps) // 20)
    smooth = [sum(s["success"] for s in steps[max(0, i - k + 1): i + 1]) / len(steps[max(0, i - k + 1): i + 1])
              for i in range(len(steps))]
    ax.plot(xs, smooth, lw=2, label=f"training success (rollouts solved, {k}-step mean)")
    ax.plot([v[0] for v in val], [v[1] for v in val], "o-", label="validation success (greedy, train split)")
    ax.set(xlabel="GRPO step", ylabel="success / reward", ylim=(-0.02, 1.02), title="RL learning curve")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    paths.append(out / "rl_learning_curve.png")
    fig.savefig(paths[-1], dpi=120, metadata={"Title": "RL learning curve"})
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = list(test)
    bars = ax.bar(names, [test[n] for n in names], color=["#999999", "#4c72b0", "#55a868"][: len(names)])
    ax.bar_label(bars, fmt="%.2f")
    ax.set(ylabel="success on the test split", ylim=(0, 1.05), title="Test success before and after RL")
    fig.tight_layout()
    paths.append(out / "test_success.png")
    fig.savefig(paths[-1], dpi=120, metadata={"Title": "Test success before and after RL"})
    plt.close(fig)
    return paths


def sft_start(args: argparse.Namespace, out: Path, common: list[str], val_ids: set[str],
              times: dict[str, float], val_split: str = "train") -> tuple[Any, Any, Validate]:
    """Phases 1-2: oracle episodes of the train split (validation slice excluded), a tokenizer trained on them, and a
    tiny model from random initialisation trained on them until it first solves ``--sft-target`` of the validation
    tasks; saved to ``out/model-sft``."""
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its summary line: the export's count is printed below
        cli("collect", *common, "policy=oracle", "split=train", "samples=1", f"out={out / 'oracle'}")
    ds = sft.export(out / "oracle", out / "data", overwrite=True)
    ds = ds.filter(lambda ex: ex["task_id"] not in val_ids).shuffle(seed=args.seed)
    ds = ds.select(range(min(args.sft_tasks, len(ds))))
    times["collect + export"] = time.perf_counter() - t
    print(f"SFT data: {len(ds)} oracle episodes of the train split", flush=True)

    t = time.perf_counter()
    tokenizer = train_tokenizer(ds, TEMPLATE, args.vocab)
    longest = max(len(tokenizer(tokenizer.apply_chat_template(ex["messages"], tools=ex["tools"], tokenize=False),
                                add_special_tokens=False)["input_ids"]) for ex in ds)
    if longest > args.sft_max_length:  # truncation would cut the final answer off
        raise SystemExit(f"an SFT example has {longest} tokens > --sft-max-length {args.sft_max_length}: raise it")
    model = tiny_model(tokenizer, args.hidden, args.layers, args.heads)
    config = SFTConfig(output_dir=str(out / "trainer-sft"), max_steps=args.sft_max_steps,
                       per_device_train_batch_size=args.sft_batch_size, learning_rate=args.sft_learning_rate,
                       lr_scheduler_type="constant_with_warmup", warmup_steps=50, weight_decay=0.0,
                       assistant_only_loss=True, max_length=args.sft_max_length, use_cpu=True, bf16=False, report_to=[],
                       logging_steps=50, save_strategy="no", seed=args.seed, dataloader_num_workers=0,
                       disable_tqdm=False, activation_checkpointing=False)
    check = Validate(out / "sft", tokenizer, common, args.sft_val_tasks, args.sft_check_every, args.sft_min_steps,
                     stop_at=args.sft_target, background=args.background_validation, split=val_split)
    print(f"SFT until validation success >= {args.sft_target:g} on {args.sft_val_tasks} {val_split} tasks:", flush=True)
    quiet_progress(SFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tokenizer,
                              callbacks=[check])).train()
    kept = check.stop_step if check.stop_step is not None else check.curve[-1][0]  # the target met, else the last step
    shutil.rmtree(out / "model-sft", ignore_errors=True)
    shutil.copytree(out / "sft" / "checkpoints" / f"step-{kept:04d}", out / "model-sft")
    times["sft"] = time.perf_counter() - t - check.seconds
    times["sft validation"] = check.seconds
    return tokenizer, model, check


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    bench = TaskSet(args)
    common = [*bench.overrides, f"seed={args.seed}", "launcher.progress=false"]
    times: dict[str, float] = {}
    load = {"start": os.getloadavg()[0]}
    train_ids = [t.id for t in bench.tasks("train")]
    if bench.val_split == "train":
        val_pool = train_ids
    else:  # a task file: its validation split (all of it at most)
        val_pool = [t.id for t in bench.tasks(bench.val_split)]
        if not val_pool or not bench.tasks("test"):
            raise SystemExit(f"--tasks {args.tasks}: no {'validation' if not val_pool else 'test'} tasks (the file's "
                             "`split` fields: train, validation, test)")
        args.val_tasks = min(args.val_tasks, len(val_pool))
        args.sft_val_tasks = min(args.sft_val_tasks, args.val_tasks)
    val_ids = set(val_pool[: args.val_tasks])  # what `eval split=S episodes=N` runs: the first N tasks of split S

    model_sft = out / "model-sft"
    if args.start:  # an SFT model made earlier (e.g. by this script): skip phases 1-2
        shutil.rmtree(model_sft, ignore_errors=True)
        shutil.copytree(args.start, model_sft)
        tokenizer = AutoTokenizer.from_pretrained(model_sft)
        sft_curve = []
    else:
        tokenizer, _, check = sft_start(args, out, common, val_ids, times, bench.val_split)
        sft_curve = check.curve
    t = time.perf_counter()
    start_val = validate(out / "val" / "sft", model_sft, common, args.val_tasks, bench.val_split)  # RL's step 0
    times["sft validation"] = times.get("sft validation", 0.0) + time.perf_counter() - t
    print(f"SFT start: validation success {start_val:.2f} ({args.val_tasks} {bench.val_split} tasks); GRPO, "
          f"{args.rl_steps} steps, validation every {args.eval_every}:", flush=True)

    # 3. RL: GRPO on the train split's tasks (validation slice excluded), reward = the verifier's grade ---------------
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_sft)  # from its directory: TRL loads the KL reference from it
    # reward: the verifier's grade of the final state (a bundled env); a task file's grade of the submitted answer
    # or the final state is the episode's return (its only reward)
    Base = environment_factory(bench.factory(), reward="verifier" if bench.file is None else "return")
    outcomes: list[float] = []

    class Env(Base):  # the same environment, recording each rollout's reward for the learning curve
        def get_reward(self) -> float:
            reward = super().get_reward()
            outcomes.append(reward)
            return reward

    if bench.file is None:
        dataset = task_dataset(args.env, "train")
    else:  # the same conversational prompts task_dataset makes for a bundled env
        tasks = bench.tasks("train")
        dataset = datasets.Dataset.from_dict({
            "prompt": [[{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": t.prompt}]
                       for t in tasks],
            "task_id": [t.id for t in tasks]})
    dataset = dataset.filter(lambda row: row["task_id"] not in val_ids)
    validate_rl = Validate(out / "rl", tokenizer, common, args.val_tasks, args.eval_every, start=start_val,
                           background=args.background_validation, split=bench.val_split)
    grpo = GRPOConfig(output_dir=str(out / "trainer-rl"), max_steps=args.rl_steps, learning_rate=args.rl_learning_rate,
                      lr_scheduler_type="constant_with_warmup", warmup_steps=args.rl_warmup_steps,
                      num_generations=args.num_generations,
                      per_device_train_batch_size=args.num_generations * args.prompts_per_step,
                      max_completion_length=args.max_completion_length, max_tool_calling_iterations=Env.max_steps,
                      temperature=args.temperature, beta=args.beta, loss_type=args.loss_type,
                      scale_rewards=args.scale_rewards, num_iterations=args.num_iterations,
                      logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=args.seed,
                      disable_tqdm=False, dataloader_num_workers=0, activation_checkpointing=False)
    trainer = quiet_progress(GRPOTrainer(model=model, processing_class=prepare_tokenizer(tokenizer), args=grpo,
                                         train_dataset=dataset, environment_factory=Env, callbacks=[validate_rl]))
    trainer.train()
    for env in (e for pool in trainer._environment_pool.values() for e in pool):
        env._close()
    model_rl = out / "model-rl"
    shutil.rmtree(model_rl, ignore_errors=True)
    best_val, best_step = validate_rl.best
    shutil.copytree(model_sft if best_step == 0 else out / "rl" / "checkpoints" / f"step-{best_step:04d}", model_rl)
    times["rl"] = time.perf_counter() - t - validate_rl.seconds
    times["rl validation"] = validate_rl.seconds
    load["after rl"] = os.getloadavg()[0]

    # 4. evaluate both models (greedy) and the random policy on the unseen test tasks ----------------------------------
    t = time.perf_counter()
    sft_test = evaluate(out / "eval-sft", model_sft, common, quiet=True)  # its table is in eval-sft/report
    rl_test = evaluate(out / "eval-rl", model_rl, common)
    shutil.rmtree(out / "eval-random", ignore_errors=True)
    with contextlib.redirect_stdout(io.StringIO()):  # its table is in eval-random/report
        cli("eval", *common, "policy=random", f"samples={args.random_samples}", "plots=false",
            f"out={out / 'eval-random'}")
    rand = eval_summary(out / "eval-random")
    times["test eval"] = time.perf_counter() - t
    load["end"] = os.getloadavg()[0]

    per = args.num_generations * args.prompts_per_step
    steps = [{"step": h["step"], "reward": h["reward"],
              "success": sum(r >= 1 for r in outcomes[(h["step"] - 1) * per: h["step"] * per]) / per}
             for h in trainer.state.log_history if "reward" in h]
    summary = {"env": bench.name, "seed": args.seed, "test_success": {"sft": sft_test["success_rate"],
               "rl": rl_test["success_rate"], "random": rand["success_rate"]},
               "test_episodes": sft_test["episodes"], "kept_step": best_step,
               "validation": {"sft": sft_curve, "rl": validate_rl.curve},
               "rl_steps": steps, "seconds": {**times, "total": sum(times.values())}, "load_average": load,
               "args": vars(args)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    test = {"random": rand["success_rate"], "SFT start": sft_test["success_rate"], "after RL": rl_test["success_rate"]}
    for png in plot_curves(out, steps, validate_rl.curve, test):
        shutil.copy(png, out / "eval-rl" / "report" / png.name)
    print(f"\n| {bench.name}, seed {args.seed} | test success ({sft_test['episodes']} tasks) |\n|---|---|")
    for name, value in test.items():
        print(f"| {name} | {value:.2f} |")
    print(f"kept checkpoint: step {best_step} (validation {best_val:.2f}); load average {load}")
    print("\n| phase | wall time (s) |\n|---|---|")
    for phase, seconds in summary["seconds"].items():
        print(f"| {phase} | {seconds:.1f} |")
    return summary


if __name__ == "__main__":
    main()
