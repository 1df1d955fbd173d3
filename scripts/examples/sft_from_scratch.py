"""SFT from scratch: a tiny transformer trained from random initialisation on exported oracle episodes beats random
on the unseen test tasks of a bundled env (CleanRL-style: one readable file, CPU only, nothing downloaded).

Phases, top to bottom:

1. **collect**: the ``oracle`` policy (the tasks' reference solutions) on the env's *train* split, recorded to Parquet
   by the ``collect`` job (the same code as ``mcp-gym collect``).
2. **export**: :func:`mcp_gym.sft.export` turns the run into a chat dataset (the chat view the policies send a model).
3. **tokenizer**: a byte-level BPE (``tokenizers``) trained on the exported conversations rendered by a compact
   Qwen-style chat template (tools as signatures, Hermes ``<tool_call>`` blocks, ``{% generation %}`` markers).
4. **train**: a tiny Qwen2-architecture model, randomly initialised, with TRL's ``SFTTrainer`` and
   ``assistant_only_loss`` (loss on the model's own turns only: its tool calls, never tool output or prompt). Every
   ``--eval-every`` steps (and at the last) the model is evaluated greedily on a validation slice, the first
   ``--val-tasks`` train tasks (never trained on); the best checkpoint (earliest on ties) is kept as ``DIR/model``: a
   long run on few examples can over-train and collapse (``--env counter --steps 900``: test success 0.00 with
   transformers 5.25 / TRL 1.16, where 300 steps reach ~0.4).
5. **evaluate**: ``policy=hf`` (the trained model, greedy decoding, the same chat view and parser) and ``policy=random``
   on the env's *test* split with the ``eval`` job; a table of success rates and wall time per phase.

``--env lookup`` (default): copy the account name from the task text into ``lookup``, then the ``colour-animal`` code
from its result into ``submit``. 800 distinct train tasks and 200 test tasks whose (account, code) pairs never occur in
training, so the code can only come from the tool result; random success is 0. The model needs a copy mechanism
(attention from the answer to the code in the tool result): a 2-layer model with 8 heads per layer finds it within the
default budget, where 4 layers of 4 heads stayed on the "guess the code" plateau far longer.

``--env counter``: read the target from the task text and the count from the ``counter://state`` resource and the
``add`` results, then emit ``add(min(5, left))`` until ``done``. Only 24 distinct targets, so test tasks share their
targets with train tasks, and random success is ~6 %.

    python scripts/examples/sft_from_scratch.py                          # full budget (see the flags' defaults)
    python scripts/examples/sft_from_scratch.py --steps 120 --random-samples 2 --out /tmp/sft-scratch

``--tasks FILE --server ALIAS=COMMAND``: any task file with ``train``/``validation``/``test`` splits over any MCP
servers instead of a bundled env, e.g. what ``mcp-gym tasks generate`` wrote for your server (the env is ``env=custom``
with those servers and ``env.tasks=FILE``). The validation slice is then the first ``--val-tasks`` tasks of the file's
``validation`` split, and the model trains on the whole ``train`` split::

    python scripts/examples/sft_from_scratch.py --tasks gen/everything/tasks.jsonl \
        --server 'everything=mcp-server-everything stdio' --out runs/sft-everything

The output is one progress bar and one line per validation while training; the evaluation tables at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import datasets
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import SFTConfig, SFTTrainer
except ModuleNotFoundError as e:  # one line, not a traceback
    raise SystemExit(f"sft_from_scratch.py needs the [train] extra (no module {e.name!r}): "
                     "pip install -e '.[train]'") from None

from mcp_gym import Connection, MCPEnv, sft  # noqa: E402
from mcp_gym.cli import main as mcp_gym_cli  # noqa: E402
from mcp_gym.envs import load_env_tasks  # noqa: E402
from mcp_gym.graders import Grading  # noqa: E402
from mcp_gym.tasks import Task, load_task_source  # noqa: E402

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>",  # the template's markers, one token each
                  "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# A compact Qwen-style chat template: the tools as one-line signatures (the full JSON schemas would make every example
# ~600 tokens, mostly constant), Hermes <tool_call> blocks the parser reads, and {% generation %} markers around the
# assistant turns for SFTTrainer's assistant_only_loss. Training and policy=hf render with this same template.
TEMPLATE = """\
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0].role == 'system' %}{% set ns.system = messages[0].content + '\n' %}{% endif -%}
<|im_start|>system
{{ ns.system }}Tools:{% for t in tools or [] %} {{ t.function.name }}({{ (t.function.parameters.properties or {}) \
| list | join(', ') }}){% endfor %}<|im_end|>
{% for m in messages %}
{%- if m.role == 'user' %}<|im_start|>user
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{% generation %}{{ m.content or '' }}{% for c in m.tool_calls or [] %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>{% endgeneration %}{{ '\\n' }}
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags (all have defaults, so the script runs as is)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/sft-from-scratch", help="directory for runs, data and the model")
    p.add_argument("--env", default="lookup", help="bundled env config name (conf/env)")
    add_task_flags(p)
    p.add_argument("--samples", type=int, default=1, help="oracle episodes per train task")
    p.add_argument("--vocab", type=int, default=600, help="BPE vocabulary size")
    p.add_argument("--hidden", type=int, default=128, help="model width")
    p.add_argument("--layers", type=int, default=2, help="transformer layers")
    p.add_argument("--heads", type=int, default=8, help="attention heads per layer")
    p.add_argument("--steps", type=int, default=1200, help="SFT optimisation steps")
    p.add_argument("--val-tasks", type=int, default=50,
                   help="first train tasks kept out of training: the validation slice that picks the checkpoint")
    p.add_argument("--eval-every", type=int, default=100, help="validate (and maybe keep) the model every N steps")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--max-length", type=int, default=384, help="tokens per training example")
    p.add_argument("--max-new-tokens", type=int, default=40, help="tokens per model reply at evaluation")
    p.add_argument("--random-samples", type=int, default=4, help="random-policy episodes per test task")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for a model this small)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    return p.parse_args(argv)


def add_task_flags(p: argparse.ArgumentParser) -> None:
    """``--tasks FILE``, ``--server ALIAS=COMMAND`` and ``--max-steps``: train on a task file over MCP servers."""
    p.add_argument("--tasks", default=None, metavar="FILE",
                   help="a task file with train/validation/test splits (e.g. OUT/tasks.jsonl of `mcp-gym tasks "
                        "generate`) instead of --env; its servers come from --server")
    p.add_argument("--server", action="append", default=[], metavar="ALIAS=COMMAND",
                   help="with --tasks: an MCP server (a command line or URL, as +env.servers.ALIAS=...); repeatable")
    p.add_argument("--max-steps", type=int, default=20, help="with --tasks: steps per episode (env.max_steps)")
    p.add_argument("--include-tool", action="append", default=None, metavar="NAME",
                   help="with --tasks: show the agent only this tool (repeatable; env.include_tools): in the "
                        "training examples, the RL rollouts and every evaluation alike")
    p.add_argument("--exclude-tool", action="append", default=[], metavar="NAME",
                   help="with --tasks: hide this tool from the agent (repeatable; env.exclude_tools)")


class TaskSet:
    """What the script trains and evaluates on: a bundled env (``--env``), or a task file over MCP servers
    (``--tasks FILE --server ALIAS=COMMAND``, the ``custom`` env). The same tasks, servers and budget reach the
    ``mcp-gym`` jobs (:attr:`overrides`), the training data (:meth:`tasks`) and the RL environment (:meth:`factory`).
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.file = Path(args.tasks).resolve() if args.tasks else None
        self.servers: dict[str, str] = {}
        for entry in args.server:
            alias, sep, command = entry.partition("=")
            if not sep or not alias.strip() or not command.strip():
                raise SystemExit(f"--server {entry!r}: expected ALIAS=COMMAND, e.g. 'everything=mcp-server-everything "
                                 "stdio'")
            self.servers[alias.strip()] = command.strip()
        if self.file is None:
            if self.servers or args.include_tool is not None or args.exclude_tool:
                raise SystemExit("--server, --include-tool and --exclude-tool need --tasks FILE")
            self.name = args.env
            self.overrides = [f"env={args.env}", "env.transport=inprocess"]
            self.val_split = "train"  # a bundled env has no validation split: the first train tasks are held out
            return
        if not self.file.is_file():
            raise SystemExit(f"--tasks {args.tasks}: no such file")
        if not self.servers:
            raise SystemExit(f"--tasks {args.tasks}: name its MCP servers with --server ALIAS=COMMAND")
        self.name = str(args.tasks)
        self.max_steps = args.max_steps
        self.include_tools: list[str] | None = args.include_tool
        self.exclude_tools: list[str] = args.exclude_tool
        quoted = {a: c.replace("\\", "\\\\").replace('"', '\\"') for a, c in self.servers.items()}
        self.overrides = ["env=custom", *(f'+env.servers.{a}="{c}"' for a, c in quoted.items()),
                          f"env.tasks={self.file}", f"env.max_steps={args.max_steps}"]
        if self.include_tools is not None:
            self.overrides.append(f"env.include_tools={json.dumps(self.include_tools)}")
        if self.exclude_tools:
            self.overrides.append(f"env.exclude_tools={json.dumps(self.exclude_tools)}")
        self.val_split = "validation"

    def tasks(self, split: str) -> list[Task]:
        """The tasks of one split."""
        if self.file is None:
            return load_env_tasks(self.name, split)
        return load_task_source(str(self.file), split)

    def factory(self) -> str | Callable[[], MCPEnv]:
        """What :func:`mcp_gym.trl.environment_factory` takes: the bundled env's name, or a function making the
        ``custom`` env of the task file (its train split; graded as ``mcp-gym eval`` grades it)."""
        if self.file is None:
            return self.name
        servers, tasks, folder, max_steps = dict(self.servers), self.tasks("train"), self.file.parent, self.max_steps
        shown = Connection(include_tools=self.include_tools, exclude_tools=self.exclude_tools)  # as the jobs show it
        return lambda: MCPEnv(servers, tasks, max_steps=max_steps, grader=Grading(None, task_dir=folder),
                              env_id="mcp_gym/custom", connection=shown)


def cli(*overrides: str) -> None:
    """Run an ``mcp-gym`` job in this process (raises on a non-zero exit code)."""
    code = mcp_gym_cli(list(overrides))
    if code not in (0, None):
        raise SystemExit(f"mcp-gym {' '.join(overrides)} exited with {code}")


def eval_summary(out: Path) -> dict[str, Any]:
    """The summary an ``eval`` job wrote (success rate, episodes, steps, ...)."""
    return json.loads((out / "report" / "results.json").read_text(encoding="utf-8"))["summary"]


def evaluate(out: Path, model: Path, common: list[str], *extra: str, quiet: bool = False) -> dict[str, Any]:
    """``mcp-gym eval policy=hf`` (greedy) of a saved model into a fresh run directory ``out``; its summary.
    ``quiet``: the job's table is not printed (its report is in ``out/report``)."""
    shutil.rmtree(out, ignore_errors=True)
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        cli("eval", *common, "policy=hf", f"policy.model={model}", "policy.temperature=0", "policy.no_call=end",
            "samples=1", "launcher.num_envs=1", "plots=false", f"out={out}", *extra)
    return eval_summary(out)


def validate(out: Path, model: Path, common: list[str], val_tasks: int, split: str = "train") -> float:
    """Greedy success of a saved model on the validation slice: the first ``val_tasks`` tasks of ``split`` (quiet:
    the caller prints one line per validation)."""
    return evaluate(out, model, common, f"split={split}", f"episodes={val_tasks}", quiet=True)["success_rate"]


class QuietProgress(ProgressCallback):
    """The training progress bar without a printed line per log: the latest logged values (loss, reward) are shown
    on the bar instead, and every log stays in ``trainer.state.log_history``."""

    KEYS = ("loss", "reward")

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        shown = {k: f"{v:.3g}" for k, v in (logs or {}).items() if k in self.KEYS and isinstance(v, (int, float))}
        if self.training_bar is not None and shown:
            self.training_bar.set_postfix(shown, refresh=False)


def quiet_progress(trainer: Any) -> Any:
    """Give a trainer the progress bar of :class:`QuietProgress` instead of a dict printed per logging step."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(QuietProgress())
    return trainer


VALIDATION_BOUND_S = 1800.0
"""Seconds training waits for one background validation (each is an ``mcp-gym eval`` of a few seconds here): past it
the worker process is killed and training stops with a ``TimeoutError`` naming the checkpoint."""


class Validate(TrainerCallback):
    """Every ``every`` steps (from ``first`` on, and at the last step): save the model to ``run/checkpoints``,
    evaluate it greedily on the validation slice and remember the best; with ``stop_at``, stop training at the first
    validation success >= ``stop_at`` (:attr:`stop_step` names that checkpoint).

    ``background=True`` runs the evaluations in one worker process, in step order, while training goes on (the second
    CPU core's work); a result ``>= stop_at`` stops training a few steps later, and the checkpoint it measured is the
    one to keep. The checkpoints and their scores are the same either way; only the wall time differs. ``bound``:
    seconds to wait for one background result (then the worker is killed and ``TimeoutError`` raised). ``split``:
    the split whose first ``val_tasks`` tasks are the validation slice.
    """

    def __init__(self, run: Path, tokenizer: Any, common: list[str], val_tasks: int, every: int, first: int = 0,
                 stop_at: float | None = None, start: float | None = None, background: bool = False,
                 bound: float = VALIDATION_BOUND_S, split: str = "train") -> None:
        self.run, self.tokenizer, self.common, self.val_tasks = run, tokenizer, common, val_tasks
        self.split = split
        self.every, self.first, self.stop_at = every, first, stop_at
        self.curve: list[tuple[int, float]] = [] if start is None else [(0, start)]
        self.best = (-1.0, 0) if start is None else (start, 0)
        self.stop_step: int | None = None
        self.seconds = 0.0  # time training waited for validation (saving, and evaluating unless in the background)
        self._pool: ProcessPoolExecutor | None = None
        if background:  # spawn: a fresh interpreter (no forked torch or event-loop state), one torch thread
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=torch.set_num_threads, initargs=(1,))
        self._pending: list[tuple[int, Future[float]]] = []
        self.bound = bound
        self._workers: list[multiprocessing.process.BaseProcess] = []  # the pool's process, once it started it

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        step = state.global_step
        t = time.perf_counter()
        if step == state.max_steps or (step >= self.first and (step - self.first) % self.every == 0):
            path = self.run / "checkpoints" / f"step-{step:04d}"
            model.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
            args_ = (self.run / "val" / path.name, path, self.common, self.val_tasks, self.split)
            if self._pool is None:
                self._record(step, validate(*args_))
                model.train()
            else:
                self._submit(step, validate, *args_)
        self._harvest(wait=step == state.max_steps)
        if self.stop_step is not None:
            control.should_training_stop = True
        self.seconds += time.perf_counter() - t

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        t = time.perf_counter()
        self._harvest(wait=True)
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        self.seconds += time.perf_counter() - t

    def _submit(self, step: int, fn: Any, *args: Any) -> None:
        """Queue ``fn(*args)`` (a validation) on the worker process as the check of ``step``."""
        assert self._pool is not None
        before = set(multiprocessing.active_children())
        self._pending.append((step, self._pool.submit(fn, *args)))
        if not self._workers:  # the pool starts its process at the first submit
            self._workers = [p for p in multiprocessing.active_children() if p not in before]

    def _harvest(self, wait: bool) -> None:
        """Record the background results that are in, in step order (all of them with ``wait``); after a stop, the
        checks of later steps are dropped. A result not in within ``bound`` seconds: the worker is killed and
        ``TimeoutError`` raised."""
        while self._pending and self.stop_step is None and (wait or self._pending[0][1].done()):
            step, future = self._pending.pop(0)
            try:
                val = future.result(timeout=self.bound)
            except FutureTimeout:
                for worker in self._workers:
                    worker.kill()  # (the pool then fails what is queued: BrokenProcessPool, and shuts down at once)
                assert self._pool is not None
                # Reaped here, not some time later: the pool's manager thread joins its (killed) process, and this
                # waits for that thread, so the worker is dead and reaped (exitcode set) once the error is raised.
                self._pool.shutdown(wait=True, cancel_futures=True)
                raise TimeoutError(f"validation of checkpoint step-{step:04d} gave no result within {self.bound:g} s: "
                                   "its worker process was killed") from None
            self._record(step, val)
        if self.stop_step is not None:
            for _, future in self._pending:
                future.cancel()
            self._pending.clear()

    def _record(self, step: int, val: float) -> None:
        self.curve.append((step, val))
        if val > self.best[0]:
            self.best = (val, step)
        if self.stop_at is not None and val >= self.stop_at and self.stop_step is None:
            self.stop_step = step
        print(f"validation at step {step}: success {val:.2f} (best {self.best[0]:.2f} at step {self.best[1]})",
              flush=True)


def render(tokenizer: Any, example: dict[str, Any], template: str) -> str:
    """An exported example as the text the model is trained on (and, up to the last reply, prompted with)."""
    return tokenizer.apply_chat_template(example["messages"], tools=example["tools"], chat_template=template,
                                         tokenize=False)


def train_tokenizer(ds: datasets.Dataset, template: str, vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the rendered export, with the template's special tokens; digits split one by one."""
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")))
    corpus = [render(plain, ex, template) for ex in ds]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = template
    return tok


def tiny_model(tokenizer: PreTrainedTokenizerFast, hidden: int, layers: int, heads: int) -> Qwen2ForCausalLM:
    """A Qwen2-architecture causal LM with random weights (full multi-head attention: one key/value head per head)."""
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None)
    return Qwen2ForCausalLM(config)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    bench = TaskSet(args)
    common = [*bench.overrides, f"seed={args.seed}", "launcher.progress=false"]
    times: dict[str, float] = {}
    load = {"start": os.getloadavg()[0]}

    # 1. collect: oracle episodes on the train split -------------------------------------------------------------------
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its summary line: the export below counts what matters
        cli("collect", *common, "policy=oracle", "split=train", f"samples={args.samples}", f"out={out / 'oracle'}")
    times["collect"] = time.perf_counter() - t

    # 2. export: the chat dataset (successful episodes, deduplicated) --------------------------------------------------
    t = time.perf_counter()
    train_ids = [task.id for task in bench.tasks("train")]
    val_pool = train_ids if bench.val_split == "train" else [task.id for task in bench.tasks(bench.val_split)]
    if bench.val_split == "train" and not 0 < args.val_tasks <= len(train_ids) // 2:
        raise SystemExit(f"--val-tasks {args.val_tasks}: {args.env} has {len(train_ids)} train tasks; keep between 1 "
                         f"and half of them for validation")
    if bench.val_split != "train":
        if not val_pool or not bench.tasks("test"):
            raise SystemExit(f"--tasks {args.tasks}: no {'validation' if not val_pool else 'test'} tasks (the file's "
                             "`split` fields: train, validation, test)")
        args.val_tasks = min(args.val_tasks, len(val_pool))
    val_ids = set(val_pool[: args.val_tasks])  # what `eval split=S episodes=N` runs: the first N tasks of split S
    ds = sft.export(out / "oracle", out / "data", overwrite=True,  # a rerun replaces the earlier export
                    task_ids=[i for i in train_ids if i not in val_ids])
    times["export"] = time.perf_counter() - t
    print(f"export: {len(ds)} distinct successful episodes, tasks {len(set(ds['task_id']))}; validation: the first "
          f"{args.val_tasks} {bench.val_split} tasks")
    leaked = set(ds["task_id"]) & ({task.id for task in bench.tasks("test")} | val_ids)
    if leaked:  # the evaluation would be meaningless
        raise SystemExit(f"test or validation tasks in the training data: {sorted(leaked)}")

    # 3. tokenizer: BPE trained on the rendered export -----------------------------------------------------------------
    t = time.perf_counter()
    template = TEMPLATE
    tokenizer = train_tokenizer(ds, template, args.vocab)
    lengths = [len(tokenizer(render(tokenizer, ex, template), add_special_tokens=False)["input_ids"]) for ex in ds]
    times["tokenizer"] = time.perf_counter() - t
    print(f"tokenizer: vocab {len(tokenizer)}, example lengths {min(lengths)}..{max(lengths)} tokens")
    if max(lengths) > args.max_length:
        raise SystemExit(f"an example has {max(lengths)} tokens > --max-length {args.max_length}: raise it")

    # 4. train: a tiny model from random initialisation, loss on the assistant turns only ------------------------------
    t = time.perf_counter()
    model = tiny_model(tokenizer, args.hidden, args.layers, args.heads)
    params = sum(p.numel() for p in model.parameters())
    config = SFTConfig(output_dir=str(out / "trainer"), max_steps=args.steps,
                       per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
                       lr_scheduler_type="cosine", warmup_steps=max(1, args.steps // 20),
                       weight_decay=0.0, assistant_only_loss=True, max_length=args.max_length, use_cpu=True,
                       bf16=False, report_to=[], logging_steps=max(1, args.steps // 10), save_strategy="no",
                       activation_checkpointing=False, seed=args.seed, dataloader_num_workers=0,
                       disable_tqdm=False)  # the training progress bar (on stderr): most of the script's time
    check = Validate(out / "val", tokenizer, common, args.val_tasks, args.eval_every, split=bench.val_split)
    trainer = quiet_progress(SFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tokenizer,
                                        callbacks=[check]))
    result = trainer.train()
    model_dir = out / "model"  # the checkpoint the validation slice prefers (a long run can over-train and collapse)
    shutil.rmtree(model_dir, ignore_errors=True)
    shutil.copytree(out / "val" / "checkpoints" / f"step-{check.best[1]:04d}", model_dir)
    times["train"] = time.perf_counter() - t - check.seconds
    times["validation"] = check.seconds
    print(f"train: {params / 1e6:.2f} M parameters, {result.global_step} steps, final loss "
          f"{[log['loss'] for log in trainer.state.log_history if 'loss' in log][-1]:.4f}; kept step "
          f"{check.best[1]} (validation success {check.best[0]:.2f}; curve {check.curve})")

    # 5. evaluate: the trained model (greedy) and the random policy on the unseen test tasks ---------------------------
    for old in ("eval-hf", "eval-random"):  # a fresh evaluation of this run's model (a rerun would refuse anyway:
        shutil.rmtree(out / old, ignore_errors=True)  # the model's files are part of the eval's run identity)
    t = time.perf_counter()
    cli("eval", *common, "policy=hf", f"policy.model={model_dir}", f"policy.max_new_tokens={args.max_new_tokens}",
        "policy.temperature=0", "samples=1", "launcher.num_envs=1", "plots=false", f"out={out / 'eval-hf'}")
    times["eval (trained model)"] = time.perf_counter() - t
    t = time.perf_counter()
    cli("eval", *common, "policy=random", f"samples={args.random_samples}", "plots=false", f"out={out / 'eval-random'}")
    times["eval (random)"] = time.perf_counter() - t
    load["end"] = os.getloadavg()[0]

    trained, rand = eval_summary(out / "eval-hf"), eval_summary(out / "eval-random")
    results = {"env": bench.name, "params": params, "train_examples": len(ds), "steps": result.global_step,
               "kept_step": check.best[1], "validation": check.curve,
               "success_trained": trained["success_rate"], "episodes_trained": trained["episodes"],
               "success_random": rand["success_rate"], "episodes_random": rand["episodes"],
               "seconds": {**times, "total": sum(times.values())}, "load_average": load}
    print("\n| policy | test episodes | success |\n|---|---|---|")
    print(f"| trained from scratch (greedy) | {trained['episodes']} | {trained['success_rate']:.2f} |")
    print(f"| random | {rand['episodes']} | {rand['success_rate']:.2f} |")
    print("\n| phase | wall time (s) |\n|---|---|")
    for phase, seconds in results["seconds"].items():
        print(f"| {phase} | {seconds:.1f} |")
    print(f"load average (1 min): {load['start']:.2f} at the start, {load['end']:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
