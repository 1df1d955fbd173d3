"""GRPO with TRL on a bundled mcp-gym env (CleanRL-style: one readable file; runs on a CPU).

:func:`mcp_gym.trl.environment_factory` turns the env into the class TRL's ``GRPOTrainer(environment_factory=...)``
expects: one method per MCP tool (signature and docstring generated from the tool's JSON Schema, so TRL can render
the tool schemas into the chat template), ``reset(**row)`` starting the dataset row's task, and ``get_reward()``
scoring the rollout (here the task verifier's grade of the final server state; ``--reward return`` uses the episode
return). TRL generates, parses the model's ``<tool_call>`` blocks, calls the methods (real MCP calls) and feeds the
results back until the model stops calling tools or the episode ends (``mcp_gym.trl.GRPOTrainer``: TRL's, ending
each rollout with its episode); the env's reward then drives GRPO.

By default the model is a *tiny randomly initialised* Qwen2-architecture model (~0.14 M parameters) with a byte-level
BPE tokenizer trained in a second on the env's rendered conversations, all built here in code: no download, so the
script is a smoke test of the whole loop that CI can afford. ``--sft-warmup N`` (default 60) first teaches that tiny
model the tool-call format with N supervised steps on the env's reference solutions, so GRPO then sees real tool
calls and rewards. ``--model`` takes any Hugging Face causal LM with a Qwen-style tool-calling chat template::

    python scripts/examples/grpo_trl.py                                  # tiny model: 60 SFT steps, 2 GRPO steps
    python scripts/examples/grpo_trl.py --sft-warmup 0                   # the untrained model: no tool calls
    python scripts/examples/grpo_trl.py --sft-warmup 100 --steps 16 --num-generations 8 --learning-rate 3e-4
    python scripts/examples/grpo_trl.py --model Qwen/Qwen2.5-0.5B-Instruct --steps 100 --max-completion-length 256
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is flagged experimental in TRL 1.x
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

try:
    import torch
    import trl  # noqa: F401 - imported in main(); checked here
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
except ModuleNotFoundError as e:  # one line, not a traceback
    raise SystemExit(f"grpo_trl.py needs the [train] extra (no module {e.name!r}): pip install -e '.[train]'") from None

from mcp_gym.trl import environment_factory, task_dataset  # noqa: E402

TINY = "tiny-random"
VOCAB = 2000
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
SYSTEM_PROMPT = "Solve the task with the tools. Call submit with the final answer."


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags (all have defaults, so the script runs as is)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Counter", help="bundled env name")
    p.add_argument("--model", default=TINY, help=f"'{TINY}' (built in code) or a HF model id / local path")
    p.add_argument("--steps", type=int, default=2, help="GRPO optimisation steps")
    p.add_argument("--num-generations", type=int, default=4, help="completions per prompt (the GRPO group)")
    p.add_argument("--prompts-per-step", type=int, default=1, help="distinct tasks per step")
    p.add_argument("--max-completion-length", type=int, default=96, help="tokens per episode (all turns)")
    p.add_argument("--max-tool-calls", type=int, default=4, help="tool-calling rounds per episode")
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--reward", choices=["verifier", "return"], default="verifier",
                   help="get_reward(): the verifier's grade of the final state, or the episode return")
    p.add_argument("--sft-warmup", type=int, default=60,
                   help=f"supervised steps on reference solutions before GRPO ('{TINY}' only; 0: none)")
    p.add_argument("--tasks", type=int, default=32, help="train tasks in the dataset")
    p.add_argument("--output-dir", default="runs/grpo_trl", help="TRL output directory (no checkpoints saved)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help=f"torch CPU threads (default: 1 for '{TINY}', whose ops are too small to share; else torch's)")
    return p.parse_args(argv)


# -- a tiny model and tokenizer, built in code ----------------------------------------------------------------------
def tokenizer_corpus(env_cls: type, dataset: Any, template: str) -> list[str]:
    """Text the tiny tokenizer is trained on: the dataset's prompts rendered by the chat template with the tools,
    followed by each task's reference solution as tool calls (so whole words and JSON keys become single tokens)."""
    render = _bpe_tokenizer([], 0, template)  # a byte-level tokenizer, only used to render the template
    env, texts = env_cls(), []
    for row in dataset:
        prompt = [dict(m) for m in row["prompt"]]
        prompt[-1]["content"] += env.reset(**row) or ""
        calls = [{"type": "function", "function": {"name": c["tool"], "arguments": c["arguments"]}}
                 for c in env.env.task.solution]
        answer = {"role": "assistant", "content": "", "tool_calls": calls}
        texts.append(render.apply_chat_template([*prompt, answer], tools=env_cls.openai_tools, tokenize=False))
    env._close()
    return texts


def _bpe_tokenizer(corpus: list[str], vocab_size: int, template: str) -> PreTrainedTokenizerFast:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)  # merges span words
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 bos_token=None, padding_side="left")
    hf.chat_template = template
    return hf


def build_tiny_tokenizer(env_cls: type, dataset: Any, template: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on the env's rendered conversations, with Qwen's special tokens and the
    given (Qwen2.5) chat template, so TRL recognises the template and parses ``<tool_call>`` blocks."""
    return _bpe_tokenizer(tokenizer_corpus(env_cls, dataset, template), VOCAB, template)


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> Qwen2ForCausalLM:
    """A 2-layer, 64-wide Qwen2 causal LM with random weights (~0.14 M parameters with a 1k vocabulary)."""
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def sft_warmup(model: Any, tokenizer: Any, env_cls: type, dataset: Any, steps: int, lr: float = 3e-3) -> None:
    """Teach the tool-call format: next-token loss on each task's first reference call, rendered by the template.

    The prompts are built exactly as TRL builds them (the row's messages plus what ``reset`` appends); only the
    assistant turn is trained, so the model learns to answer a task with a ``<tool_call>`` block and GRPO starts
    from a policy that calls tools.
    """
    env, examples = env_cls(), []
    for row in dataset:
        prompt = [dict(m) for m in row["prompt"]]
        prompt[-1]["content"] += env.reset(**row) or ""
        task = env.env.task  # the MCPEnv's current task, with its reference solution
        if not task.solution:
            continue
        call = task.solution[0]
        answer = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": call["tool"], "arguments": call["arguments"]}}]}
        p_ids = tokenizer.apply_chat_template(prompt, tools=env_cls.openai_tools, add_generation_prompt=True,
                                              tokenize=True, return_dict=False)
        full = tokenizer.apply_chat_template([*prompt, answer], tools=env_cls.openai_tools, tokenize=True,
                                             return_dict=False)
        full = full[: full.index(tokenizer.eos_token_id, len(p_ids)) + 1]  # up to the assistant's <|im_end|>
        examples.append((full, len(p_ids)))
    env._close()
    optim = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    rng = random.Random(0)
    for step in range(steps):
        batch = rng.sample(examples, k=min(8, len(examples)))
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        for i, (seq, n_prompt) in enumerate(batch):
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, n_prompt: len(seq)] = torch.tensor(seq[n_prompt:])
        loss = model(input_ids=ids, attention_mask=(labels != -100) | (ids != tokenizer.pad_token_id),
                     labels=labels).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
        if step % 25 == 0 or step == steps - 1:
            print(f"sft warm-up step {step:4d}  loss {loss.item():.3f}")


# -- main -----------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train and return the final log entry (TRL's metrics of the last step)."""
    from trl import GRPOConfig
    from trl.chat_template_utils import qwen2_5_chat_template

    from mcp_gym.trl import GRPOTrainer  # TRL's, with each rollout ending where its episode ends

    args = parse_args(argv)
    if args.threads or args.model == TINY:
        torch.set_num_threads(args.threads or 1)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # 1. The environment class: one method per MCP tool, reset(**row), get_reward().
    # reward="verifier" grades the final server state (1 if the counter is on target) whether or not the model
    # submits; "return" sums the server's rewards, whose -0.01 step cost teaches a weak model to stop calling tools.
    Env = environment_factory(args.env, reward=args.reward)
    print(f"{Env.__name__}: tools {', '.join(t['function']['name'] for t in Env.openai_tools)}")

    # 2. The dataset: one conversational prompt per task; reset() reads its task_id.
    dataset = task_dataset(args.env, "train", system_prompt=SYSTEM_PROMPT, limit=args.tasks)

    # 3. The model.
    if args.model == TINY:
        tokenizer = build_tiny_tokenizer(Env, dataset, qwen2_5_chat_template)
        model = build_tiny_model(tokenizer, args.seed)
        if args.sft_warmup:
            sft_warmup(model, tokenizer, Env, dataset, args.sft_warmup)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    # 4. GRPO.
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        learning_rate=args.learning_rate,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.num_generations * args.prompts_per_step,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calls,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        disable_tqdm=False,  # the training progress bar (on stderr)
        activation_checkpointing=args.model != TINY,  # TRL's default for a real model; a tiny one only slows down
    )
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                          environment_factory=Env)
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    logs = [h for h in trainer.state.log_history if "reward" in h]
    for h in logs:
        print(f"step {h['step']:3d}  reward {h['reward']:+.3f} (std {h.get('reward_std', 0):.3f})  "
              f"tool calls/rollout {h.get('tools/call_frequency', 0):.2f}  "
              f"completion tokens {h.get('completions/mean_length', 0):.1f}")
    print(f"{args.steps} GRPO steps in {elapsed:.1f} s")
    if logs and not logs[-1].get("reward_std") and not logs[-1].get("loss") and not logs[-1].get("grad_norm"):
        print(f"reward {logs[-1]['reward']:g}, loss 0, grad_norm 0 are expected here: every rollout of the last step "
              f"scored the same, and GRPO's advantage is a rollout's reward minus its group's mean (beta="
              f"{config.beta:g}: no KL term), so there was nothing to learn from; a tiny model after a short "
              "--sft-warmup rarely solves a task. More --sft-warmup steps, --num-generations or --steps give groups "
              "with mixed rewards")
    for env in (e for pool in trainer._environment_pool.values() for e in pool):
        env._close()
    return logs[-1] if logs else {}


if __name__ == "__main__":
    main()
