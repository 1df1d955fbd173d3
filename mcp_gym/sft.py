"""SFT export: recorded trajectories as chat-format datasets for TRL's ``SFTTrainer`` (and any OpenAI-style trainer).

    ds = mcp_gym.sft.export("runs/counter-*", "data/counter-sft", min_reward=1.0, test_size=0.2)
    ds["train"][0]["messages"]
    # [{"role": "system", "content": ...}, {"role": "user", "content": <task + observed resources>},
    #  {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0_0", "type": "function",
    #                                                       "function": {"name": "add", "arguments": {"amount": 2}}}]},
    #  {"role": "tool", "tool_call_id": "call_0_0", "name": "add", "content": "2\n\n[resource counter://state]..."},
    #  ..., {"role": "assistant", "content": "", "tool_calls": [<the submit call>]}]

One example per recorded episode, in the chat view of :mod:`mcp_gym.chat`: ``messages`` are exactly the messages the
chat policies sent the model in the episode's last request (system prompt, the task with the observed resources, per
model reply an assistant turn with the model's own text and its calls, their tool messages with the resources that
changed, the feedback on replies without a usable call, the note on tools that changed), followed by the final reply
-- normally the ``submit`` call (``final_answer="tool_call"``, the default). ``tools`` are the OpenAI function schemas
offered, ``submit`` included: an episode whose tools changed mid-episode keeps the reset's tools, each change told in
the messages by :func:`mcp_gym.chat.tools_note` (``ExportOptions.tools_changed``). Metadata columns say where each
came from.

Every message is stored with the ``datasets`` :class:`~datasets.Json` feature: it round-trips through Parquet, JSONL
and ``save_to_disk`` exactly as written -- tool-call ``arguments`` stay JSON objects (a JSON *string* would be encoded a
second time by the Qwen 2.5, Llama 3.1 and Hermes templates), and messages carry only their own keys (an Arrow struct
would give every message every key, set to null).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from mcp_gym import chat
from mcp_gym._sft_runs import RunSource, _read, _run_paths
from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT
from mcp_gym.errors import MCPGymError
from mcp_gym.protocol import SERVER_ERROR_KINDS
from mcp_gym.recording import conversation as recorded
from mcp_gym.recording.atomic import replace_dir, staging_dir, sweep_staging
from mcp_gym.recording.schema import dumps

if TYPE_CHECKING:
    import datasets
    import gymnasium as gym

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "ExportOptions",
    "NothingToExport",
    "build",
    "export",
    "features",
    "actions",
    "replay",
]

log = logging.getLogger(__name__)


class NothingToExport(MCPGymError, ValueError):
    """Runs with episodes gave no example: every one was dropped (the message names the counts per filter, and the
    option to change when their success is unknown)."""


FinalAnswer = Literal["message", "tool_call"]
Layout = Literal["messages", "prompt_completion"]
OutputFormat = Literal["parquet", "jsonl", "disk"]


FIELDS: dict[str, str] = {
    "messages": "The conversation (layout `messages`) exactly as the chat policies send it to the model "
    "(`mcp_gym.chat`): system prompt, task with the observed resources, per model reply an assistant message (the "
    "model's own text; `tool_calls` with `id`, `type: function`, `function.name`, `function.arguments` as a JSON "
    "object) and its `tool` messages (`tool_call_id`, `name`, result plus changed resources), then the final reply "
    "(the `submit` call). Each message is a JSON object.",
    "prompt": "Layout `prompt_completion`: the system and user messages.",
    "completion": "Layout `prompt_completion`: every message after the user turn.",
    "tools": "OpenAI function schemas (`type`, `function.name`, `function.description`, `function.parameters`) of the "
    "tools offered, `submit` included: for an episode whose tools changed between replies, those offered at reset "
    "(the messages tell each change where the model was told of it, as verl and SkyRL render a trajectory; "
    "`sft.tools_changed`: `split` gives one example per tool list, `last` the last request's).",
    "episode_id": "Recorded episode id.",
    "task_id": "Task id (train/test splits never share one).",
    "env_id": "Environment id, e.g. `mcp_gym/Counter-v0` (`gymnasium.make` builds it).",
    "seed": "Seed of the episode's reset (replay resets with it).",
    "policy": "Policy or model that acted.",
    "reward": "Episode return (sum of step rewards).",
    "success": "Verifier verdict (null without a verifier).",
    "num_tool_calls": "Tool calls in the conversation (`submit` included).",
    "final_answer": "The submitted answer (null if the episode ended otherwise).",
    "source_run": "Run directory the episode was read from.",
}
"""Column -> description (the dataset card's field table)."""


def features(layout: Layout = "messages") -> datasets.Features:
    """The explicit features of an exported dataset of the given layout."""
    from datasets import Features, Json, List, Value

    conversation = {"messages": List(Json())} if layout == "messages" else {
        "prompt": List(Json()), "completion": List(Json())}
    tool = {"type": Value("string"),
            "function": {"name": Value("string"), "description": Value("string"), "parameters": Json()}}
    return Features({
        **conversation,
        "tools": List(tool),
        "episode_id": Value("string"),
        "task_id": Value("string"),
        "env_id": Value("string"),
        "seed": Value("int64"),
        "policy": Value("string"),
        "reward": Value("float64"),
        "success": Value("bool"),
        "num_tool_calls": Value("int32"),
        "final_answer": Value("string"),
        "source_run": Value("string"),
    })


_DECODER = json.JSONDecoder()
_TOOL_MARKUP = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)|<\|python_tag\|>.*|\[TOOL_CALLS\].*", re.S)


def strip_tool_calls(raw_text: str) -> str:
    """Recorded model text without its tool-call markup (the call itself is in ``tool_calls``).

    Removes Hermes/Qwen ``<tool_call>…</tool_call>`` blocks, Llama ``<|python_tag|>`` and Mistral ``[TOOL_CALLS]``
    tails, and a trailing JSON call object (``{"name": ..., ...}``, Llama 3.1's plain JSON calls); keeps reasoning
    such as ``<think>…</think>``.
    """
    text = _TOOL_MARKUP.sub("", raw_text).strip()
    start = text.find("{")
    while start != -1:
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except ValueError:
            obj, end = None, -1
        if end == len(text) and isinstance(obj, dict) and "name" in obj:
            return text[:start].strip()
        start = text.find("{", start + 1)
    return text


@dataclass(frozen=True)
class ExportOptions:
    """How episodes become examples, and which episodes are kept.

    Attributes:
        system_prompt: Content of the system message (``None``: no system message); the default is the chat
            policies' (:data:`mcp_gym.chat.DEFAULT_SYSTEM_PROMPT`).
        final_answer: ``"tool_call"`` (default): the conversation ends with the assistant's ``submit`` call, as the
            policies end an episode. ``"message"``: a final reply that is only the ``submit`` call becomes a plain
            assistant message (its text, then the answer) -- a model trained so answers in plain text, which the
            chat policies treat as a reply without a call (only ``TextEnvBatch(no_tool_call="submit")`` accepts it).
        layout: ``"messages"`` (one ``messages`` column) or ``"prompt_completion"`` (``prompt``: system and user
            messages; ``completion``: the rest).
        assistant_text: For runs recorded before the ``assistant_content`` column: turns the recorded raw model
            output of a reply with calls into assistant content (default :func:`strip_tool_calls`); ``None`` drops
            it. Newer runs record the content the policy sent back and use it as is.
        success_only: Keep only successful episodes (``success`` true: graded by a verifier, or ended by the
            server's ``done`` with a return reaching the env's ``success_threshold``). Episodes of unknown success are
            dropped too; when that leaves nothing, the export raises :class:`NothingToExport` saying so.
        min_reward: Keep only episodes whose return is at least this.
        max_turns: Keep only episodes of at most this many steps (tool calls, ``submit`` included).
        task_ids: Keep only these task ids.
        drop_errors: Drop episodes with a parse failure (``parse_status`` other than ``"ok"``) or a server-side
            error (:data:`SERVER_ERROR_KINDS`, dead servers). With ``False``, replies without a usable call are kept
            with the feedback the model was given.
        drop_tool_errors: Also drop episodes with any failed step (tool errors, invalid calls).
        dedupe: Keep one of several identical examples (same messages and tools).
        special_tokens: More control tokens (strings) than the common ones the chat view neutralises
            (:func:`mcp_gym.chat.neutralize_control_tokens`): an episode whose task, results or resources hold one is
            dropped (``control_tokens``), since the model was shown it as is.
        tokenizer: The tokenizer the data is for (an object, or a local path or name loaded with
            ``transformers.AutoTokenizer``, never downloaded): its special tokens count as ``special_tokens``.
        test_size: Hold out this fraction (float) or number (int) of task ids as a ``test`` split.
        seed: Seed of the train/test assignment of task ids.
        tools_changed: An episode whose offered tools changed between model replies (Maze's ``unlock``, BFCL
            ``miss_func``): its messages always hold the chat view's :func:`~mcp_gym.chat.tools_note` where the model
            was told of each change. ``"initial"`` (the default of layout ``messages``): one example whose ``tools``
            are those offered at reset, as verl and SkyRL render a trajectory (the tools once, then the notes).
            ``"split"`` (the default of layout ``prompt_completion``, which it needs): one example per tool list, its
            ``prompt`` the request as sent and its ``completion`` only the replies made with its ``tools``.
            ``"last"``: one example with the last request's tools (eval's last request).
    """

    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    final_answer: FinalAnswer = "tool_call"
    layout: Layout = "messages"
    assistant_text: Callable[[str], str] | None = strip_tool_calls
    success_only: bool = True
    min_reward: float | None = None
    max_turns: int | None = None
    task_ids: Collection[str] | None = None
    drop_errors: bool = True
    drop_tool_errors: bool = False
    dedupe: bool = True
    special_tokens: Collection[str] | None = None
    tokenizer: Any = None
    test_size: float | int | None = None
    seed: int = 0
    tools_changed: Literal["initial", "split", "last"] | None = None

    def __post_init__(self) -> None:
        if self.tools_changed not in (None, "initial", "split", "last"):
            raise ValueError(f"tools_changed must be 'initial', 'split' or 'last', not {self.tools_changed!r}")
        if self.final_answer not in ("message", "tool_call"):
            raise ValueError(f"final_answer must be 'message' or 'tool_call', not {self.final_answer!r}")
        if self.layout not in ("messages", "prompt_completion"):
            raise ValueError(f"layout must be 'messages' or 'prompt_completion', not {self.layout!r}")
        if self.tools_changed is None:
            object.__setattr__(self, "tools_changed", "initial" if self.layout == "messages" else "split")
        elif self.tools_changed == "split" and self.layout == "messages":
            raise ValueError("tools_changed='split' needs layout='prompt_completion' (an example per tool list); one "
                             "`messages` example per episode takes tools_changed='initial' (the reset's tools, every "
                             "change noted where the model was told of it) or 'last'")
        if self.test_size is not None and not (
            (isinstance(self.test_size, int) and self.test_size >= 0) or 0.0 <= float(self.test_size) < 1.0
        ):
            raise ValueError(f"test_size must be a fraction in [0, 1) or a count >= 0, not {self.test_size!r}")
        if isinstance(self.special_tokens, str):
            object.__setattr__(self, "special_tokens", [self.special_tokens])
        if self.task_ids is not None:
            ids = [self.task_ids] if isinstance(self.task_ids, str) else self.task_ids
            object.__setattr__(self, "task_ids", frozenset(ids))

    def describe(self) -> dict[str, Any]:
        """The options as JSON-able values (for the dataset card)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "tokenizer" and v is not None and not isinstance(v, str):
                v = getattr(v, "name_or_path", type(v).__name__)
            elif f.name == "assistant_text":
                v = getattr(v, "__qualname__", repr(v)) if v is not None else None
            elif isinstance(v, frozenset):
                v = sorted(v)
            out[f.name] = v
        return out


@dataclass
class _Report:
    """What an export read and kept (the dataset card's provenance section)."""

    runs: dict[str, int] = field(default_factory=dict)  # run -> episodes read
    kept: Counter[str] = field(default_factory=Counter)  # run -> examples kept
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> episodes
    neutralized: int = 0  # examples kept whose task, results or resources held chat-template control tokens


# -- one episode ------------------------------------------------------------------------------------------------------
def _drop_reason(ep: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], opts: ExportOptions) -> str | None:
    """Why a filter drops the episode (``None``: kept)."""
    if any((not s["tool"] and s["parse_status"] in (None, "ok")) or (s["tool"] and s["arguments"][:1] != "{")
           for s in steps):
        return "malformed"  # an action without a tool name (not a model reply) or JSON-object arguments: no chat form
    if opts.task_ids is not None and ep["task_id"] not in opts.task_ids:
        return "task_ids"
    if opts.success_only and ep["success"] is None:
        return "success_unknown"  # no verifier graded it and the server did not end it with `done`
    if opts.success_only and not ep["success"]:
        return "success_only"
    if opts.min_reward is not None and (ep["total_reward"] is None or ep["total_reward"] < opts.min_reward):
        return "min_reward"
    if opts.max_turns is not None and len(steps) > opts.max_turns:
        return "max_turns"
    if opts.drop_errors:
        if ep["termination"] == "servers_dead" or any(s["parse_status"] not in (None, "ok") for s in steps):
            return "drop_errors"
        if any(s["error"] is not None and json.loads(s["error"]).get("kind") in SERVER_ERROR_KINDS for s in steps):
            return "drop_errors"
    if opts.drop_tool_errors and any(s["is_error"] for s in steps):
        return "drop_tool_errors"
    if not steps and ep["final_answer"] is None:
        return "empty"
    return None


def _example(ep: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], source: str, opts: ExportOptions,
             tools: list[dict[str, Any]], cut: int | None = None) -> dict[str, Any]:
    """One example in storage form: messages (and tool parameters) as JSON strings, the ``Json`` feature's storage.
    ``cut``: where the completion starts (default: after the first user message)."""
    messages = recorded.conversation(ep, steps, system_prompt=opts.system_prompt, final_answer=opts.final_answer,
                                     assistant_text=opts.assistant_text)
    encoded = [dumps(m) for m in messages]
    if opts.layout == "messages":
        conversation: dict[str, Any] = {"messages": encoded}
    else:
        if cut is None:
            cut = next(i for i, m in enumerate(messages) if m["role"] == "user") + 1
        conversation = {"prompt": encoded[:cut], "completion": encoded[cut:]}
    return {
        **conversation,
        "tools": tools,
        "episode_id": ep["episode_id"],
        "task_id": ep["task_id"],
        "env_id": ep["env_id"],
        "seed": ep["seed"],
        "policy": ep["policy"],
        "reward": ep["total_reward"],
        "success": ep["success"],
        "num_tool_calls": sum(len(m.get("tool_calls") or ()) for m in messages),
        "final_answer": ep["final_answer"],
        "source_run": source,
    }


# -- building ---------------------------------------------------------------------------------------------------------
def _examples(runs: RunSource | Iterable[RunSource], opts: ExportOptions, report: _Report) -> list[dict[str, Any]]:
    examples: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    # (tools JSON, catalogue changes JSON, change number) -> (catalogue number, tools in storage form); most episodes
    # share one
    catalogues: dict[tuple[str | None, str | None, int], tuple[bytes, list[dict[str, Any]]]] = {}
    numbers: dict[str, bytes] = {}
    extra = chat.unhandled_special_tokens(opts.tokenizer, opts.special_tokens or ())
    for run in _run_paths(runs):
        source, episodes, steps_by_episode = _read(run)
        report.runs[source] = len(episodes)
        for ep in episodes:
            steps = steps_by_episode.get(ep["episode_id"], [])
            reason = _drop_reason(ep, steps, opts)
            text = recorded.outside_text(ep, steps) if reason is None else ""
            found = (chat.control_tokens(text), sum(text.count(t) for t in extra))
            if found[1]:
                reason = "control_tokens"  # a token of the tokenizer's own the chat view does not neutralise
            if reason is not None:
                report.dropped[reason] += 1
                continue
            groups = recorded.turns(steps)
            split = opts.tools_changed == "split"
            segments: list[tuple[int | None, int, str | None]] = [*recorded.tool_segments(ep, groups)] if split else []
            if len(segments) <= 1:  # one example: the tools of the last request, or (initial) of the first
                last = opts.tools_changed == "last" or split
                segments = [(len(groups) - 1 if groups and last else None, len(steps), None)]
            for first, end, answer in segments:
                change, catalogue = recorded.catalogue_at(ep, None if first is None else groups[first][0]["step_index"])
                key = (ep["tools"], ep["catalogue_changes"] if change >= 0 else None, change)
                if key not in catalogues:
                    tools = [{**t, "function": {**t["function"], "parameters": dumps(t["function"]["parameters"])}}
                             for t in recorded.offered_tools(ep, catalogue)]
                    number = numbers.setdefault(dumps(tools), str(len(numbers)).encode())
                    catalogues[key] = (number, tools)
                number, tools = catalogues[key]
                part = ep if end == len(steps) else {**ep, "final_answer": answer}
                cut = None if len(segments) == 1 or first is None else recorded.request_length(
                    ep, steps, groups[first], opts.system_prompt, opts.assistant_text)
                example = _example(part, steps[:end], source, opts, tools, cut)
                if opts.dedupe:
                    conversation = example.get("messages") or example["prompt"] + example["completion"]
                    digest = hashlib.blake2b("\x1e".join(conversation).encode(), digest_size=16, key=number).digest()
                    if digest in seen:
                        report.dropped["dedupe"] += 1
                        continue
                    seen.add(digest)
                report.kept[source] += 1
                report.neutralized += bool(found[0])  # kept: its text shows them broken, as the chat view showed it
                examples.append(example)
    return examples


def _tally(report: _Report) -> str:
    """The counts a user should see: duplicates dropped, examples with control tokens neutralised or dropped."""
    return (f"{report.dropped.get('dedupe', 0)} duplicate examples dropped (sft.dedupe), {report.neutralized} examples "
            "with chat-template control tokens in task, result or resource text kept with them neutralised, "
            f"{report.dropped.get('control_tokens', 0)} dropped for a tokenizer's own special tokens")


def _split(examples: list[dict[str, Any]], opts: ExportOptions) -> dict[str, list[dict[str, Any]]]:
    """``{"train": ..., "test": ...}`` by task (env id + task id), or ``{"train": all}`` without ``test_size``."""
    if opts.test_size is None:
        return {"train": examples}
    tasks = sorted({(e["env_id"] or "", e["task_id"] or "") for e in examples})
    random.Random(opts.seed).shuffle(tasks)
    n = opts.test_size if isinstance(opts.test_size, int) else math.ceil(opts.test_size * len(tasks))
    if len(tasks) >= 2 and opts.test_size:
        n = min(max(n, 1), len(tasks) - 1)  # both sides keep at least one task
    test = set(tasks[:n])
    return {"train": [e for e in examples if (e["env_id"] or "", e["task_id"] or "") not in test],
            "test": [e for e in examples if (e["env_id"] or "", e["task_id"] or "") in test]}


def _storage_type(t: pa.DataType) -> pa.DataType:
    """``t`` with extension types replaced by their storage (``Json`` -> string): the type Python values convert to."""
    if isinstance(t, pa.BaseExtensionType):
        return _storage_type(t.storage_type)
    if pa.types.is_list(t):
        return pa.list_(_storage_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_storage_type(f.type)) for f in t])
    return t


def _dataset(rows: list[dict[str, Any]], feats: datasets.Features, opts: ExportOptions) -> datasets.Dataset:
    """A dataset of storage-form rows under ``feats`` (an Arrow cast: no per-value Python encoding by ``datasets``).

    Its fingerprint (``datasets``' cache key) comes from the episode ids and the options, not from hashing the table.
    """
    import datasets

    schema = feats.arrow_schema
    storage = pa.schema([f.with_type(_storage_type(f.type)) for f in schema])
    table = pa.Table.from_pylist(rows, schema=storage).cast(schema)
    return datasets.Dataset(table, info=datasets.DatasetInfo(features=feats),
                            fingerprint=_fingerprint([r["episode_id"] for r in rows], opts))


def _fingerprint(episode_ids: Sequence[str], opts: ExportOptions) -> str:
    """16 hex digits that change with the examples (their episodes) and the options that shaped them."""
    return hashlib.blake2b(dumps([list(episode_ids), opts.describe()]).encode(), digest_size=8).hexdigest()


def _build(runs: RunSource | Iterable[RunSource], opts: ExportOptions) -> tuple[dict[str, datasets.Dataset], _Report]:
    report = _Report()
    feats = features(opts.layout)
    examples = _examples(runs, opts, report)
    unknown = report.dropped.get("success_unknown", 0)
    if unknown:
        read = sum(report.runs.values())
        why = (f"{unknown} of {read} episodes have no known success (no verifier graded them and the server did not "
               "end them with done), and success_only=True drops them")
        fix = ("pass success_only=False (CLI: sft.success_only=false), optionally with min_reward=..., or give the "
               "env a verifier or success_threshold")
        if not examples:
            raise NothingToExport(f"nothing to export: {why}; {fix}")
        log.warning("SFT export: %s; to keep them, %s", why, fix)
    read = sum(report.runs.values())
    if not examples and read:  # a non-empty run that gives nothing: say which filters took it, do not write it
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(report.dropped.items()))
        raise NothingToExport(f"nothing to export: all {read} episodes read were dropped ({reasons}); see the sft.* "
                              "filters (success_only, min_reward, max_turns, task_ids, drop_errors, drop_tool_errors)")
    if report.dropped.get("dedupe") or report.neutralized or report.dropped.get("control_tokens"):
        log.warning("SFT export: %s", _tally(report))
    splits = _split(examples, opts)
    return {name: _dataset(rows, feats, opts) for name, rows in splits.items()}, report


def _result(splits: dict[str, datasets.Dataset], opts: ExportOptions) -> datasets.Dataset | datasets.DatasetDict:
    import datasets

    return datasets.DatasetDict(splits) if opts.test_size is not None else splits["train"]


def build(runs: RunSource | Iterable[RunSource], **options: Any) -> datasets.Dataset | datasets.DatasetDict:
    """The SFT dataset of recorded runs, in memory (see :func:`export`, which also writes it)."""
    opts = ExportOptions(**options)
    return _result(_build(runs, opts)[0], opts)


# -- writing ----------------------------------------------------------------------------------------------------------
def export(
    runs: RunSource | Iterable[RunSource],
    out: str | os.PathLike[str],
    *,
    format: OutputFormat = "parquet",
    overwrite: bool = False,
    max_shard_rows: int = 100_000,
    **options: Any,
) -> datasets.Dataset | datasets.DatasetDict:
    """Export recorded runs as a chat-format SFT dataset in directory ``out``, with a dataset card (README.md).

    Args:
        runs: Run directories, globs (``"runs/counter-*"``), directories holding runs, or loaded
            :class:`~mcp_gym.recording.Recording` objects — one or a list.
        out: Output directory (must not exist or be empty, unless ``overwrite`` and it holds an earlier export).
        format: ``"parquet"`` (``data/<split>-NNNNN-of-NNNNN-<tag>.parquet`` shards), ``"jsonl"``
            (``data/<split>-<tag>.jsonl``) or ``"disk"`` (``Dataset.save_to_disk``). Parquet and JSONL exports load
            with ``datasets.load_dataset(out)``; Parquet also with ``load_dataset("parquet", data_files=...)``.
        overwrite: Replace an earlier export in ``out``.
        max_shard_rows: Rows per Parquet shard.
        **options: :class:`ExportOptions` fields (filters, system prompt, layout, split).

    Returns:
        The dataset written: a ``Dataset``, or a ``DatasetDict`` with ``train`` and ``test`` when ``test_size`` is set.

    Example (a run recorded with :class:`~mcp_gym.recording.RecordTrajectories`)::

    >>> import tempfile
    >>> from mcp_gym import RecordTrajectories, make_env, sft
    >>> tmp = tempfile.TemporaryDirectory()
    >>> env = RecordTrajectories(make_env("Counter"), f"{tmp.name}/run", policy="oracle")
    >>> _ = env.reset(seed=0)
    >>> _ = env.step(env.unwrapped.task.solution[0])   # reaches the target: the episode succeeds
    >>> env.close()
    >>> ds = sft.export(f"{tmp.name}/run", f"{tmp.name}/sft")
    >>> [m["role"] for m in ds[0]["messages"]]   # the final reply ends it: its result was never shown to the model
    ['system', 'user', 'assistant']
    >>> ds[0]["messages"][2]["tool_calls"][0]["function"]["arguments"]   # an object, never a JSON string
    {'amount': -5}
    >>> tmp.cleanup()
    """
    if format not in ("parquet", "jsonl", "disk"):
        raise ValueError(f"format must be 'parquet', 'jsonl' or 'disk', not {format!r}")
    opts = ExportOptions(**options)
    out = Path(out)
    _check_target(out, overwrite)
    splits, report = _build(runs, opts)
    sweep_staging(out)  # what killed exports left beside it
    with staging_dir(out) as tmp:  # a hidden sibling until complete: the old export stays whole until the swap
        if format == "disk":
            _result(splits, opts).save_to_disk(str(tmp))
        else:
            _write_files(splits, tmp / "data", format, opts, max_shard_rows)
        (tmp / "README.md").write_text(_card(splits, report, opts, format), encoding="utf-8")
        replace_dir(tmp, out)
    return _result(splits, opts)


def _write_files(splits: dict[str, datasets.Dataset], data: Path, format: OutputFormat, opts: ExportOptions,
                 max_shard_rows: int) -> None:
    """``data/<split>-NNNNN-of-NNNNN-<tag>.parquet`` shards or ``data/<split>-<tag>.jsonl``: the Hub's layout, which
    ``load_dataset(dir)`` detects. The tag (the split's fingerprint) changes with the content: ``datasets`` keys its
    cache of a local directory on file names and modification times, which a quick re-export could otherwise repeat.
    """
    data.mkdir()
    for name, ds in splits.items():
        tag = _fingerprint(ds["episode_id"], opts)
        if format == "jsonl":
            ds.to_json(str(data / f"{name}-{tag}.jsonl"), force_ascii=False)
            continue
        n = max(1, math.ceil(len(ds) / max_shard_rows))
        table = ds.with_format("arrow")[:]  # the features' schema (with their metadata), as to_parquet writes
        div, mod = divmod(len(ds), n)  # Dataset.shard(n, i, contiguous=True)'s rows
        for i in range(n):
            # Arrow's own file writer, not to_parquet's: through a Python file object (fsspec) a full disk aborts the
            # process inside Arrow's C++ writer; to a path it raises OSError, which export-sft says in one line.
            shard = table.slice(i * div + min(i, mod), div + (i < mod))
            pq.write_table(shard, str(data / f"{name}-{i:05d}-of-{n:05d}-{tag}.parquet"))


_CARD_TAG = "mcp-gym-sft"


def _check_target(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise FileExistsError(f"{out} is not empty (pass overwrite=True to replace an earlier export)")
    card = out / "README.md"
    if not (card.is_file() and _CARD_TAG in card.read_text(encoding="utf-8", errors="replace")):
        raise FileExistsError(f"{out} does not hold an mcp-gym SFT export: refusing to overwrite it")


def _card(splits: dict[str, datasets.Dataset], report: _Report, opts: ExportOptions, format: OutputFormat) -> str:
    """README.md: YAML metadata (features, splits) and a description of fields, sources and filters.

    No ``configs`` section: with one, ``datasets`` 5.2 keys its cache of a local directory on the card alone and
    serves a stale copy after a re-export."""
    from datasets import DatasetInfo, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    split_dict = SplitDict()
    for name, ds in splits.items():
        split_dict.add(SplitInfo(name=name, num_examples=len(ds)))
    card = DatasetCardData(tags=[_CARD_TAG, "mcp-gym", "sft", "tool-use", "trl"], task_categories=["text-generation"])
    DatasetInfosDict({"default": DatasetInfo(features=features(opts.layout), splits=split_dict)}
                     ).to_dataset_card_data(card)
    column = "messages" if opts.layout == "messages" else "prompt`/`completion"
    files = {"parquet": "`data/<split>-NNNNN-of-NNNNN-<tag>.parquet`", "jsonl": "`data/<split>-<tag>.jsonl`",
             "disk": "`Dataset.save_to_disk` files"}[format]
    load = 'load_from_disk("OUT")' if format == "disk" else 'load_dataset("OUT")'
    counts = ", ".join(f"{name}: {len(ds)}" for name, ds in splits.items())
    fields = [f"| `{name}` | {FIELDS[name]} |" for name in features(opts.layout)]
    runs = [f"| `{run}` | {n} | {report.kept[run]} |" for run, n in report.runs.items()]
    dropped = ", ".join(f"{reason}: {n}" for reason, n in sorted(report.dropped.items())) or "none"
    options = [f"- `{k}`: `{json.dumps(v, ensure_ascii=False)}`" for k, v in opts.describe().items()]
    return "\n".join([
        "---", card.to_yaml(), "---", "",
        "# MCP agent trajectories for SFT", "",
        f"Exported by mcp-gym from {len(report.runs)} recorded run(s): {sum(report.runs.values())} episodes read, "
        f"{sum(len(ds) for ds in splits.values())} examples kept ({counts}), stored as {files}. One example per "
        f"episode (per tool list with `tools_changed=split`), in the chat format of TRL's `SFTTrainer` (`{column}` + "
        "`tools`); every message is a JSON object and tool-call arguments are JSON objects, not strings.", "",
        "## Fields", "", "| column | description |", "|---|---|", *fields, "",
        "## Source runs", "", "| run | episodes | examples |", "|---|---|---|", *runs, "",
        "## Filters and options", "", *options, "", f"Episodes dropped: {dropped}.", "",
        "Examples whose task, results or resources held chat-template control tokens (kept, the tokens neutralised "
        f"as the chat view shows them to the model): {report.neutralized}.", "",
        "## Use", "", "```python", "from datasets import load_dataset, load_from_disk", "",
        f"ds = {load}", "```", "",
        "Train with TRL (`assistant_only_loss` needs `{% generation %}` markers; TRL swaps them in for Qwen 2.5/3):",
        "", "```bash", "trl sft --model_name_or_path Qwen/Qwen3-0.6B --dataset_name OUT --assistant_only_loss true "
        "--output_dir sft-out", "```", "",
    ]).replace("OUT", "<this directory>")


# -- replay -----------------------------------------------------------------------------------------------------------
def actions(example: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The env actions of an exported example: its tool calls, a ``submit`` of each user turn's text reply (multi-turn
    tasks), then ``submit`` of its final answer if not a call."""
    messages = example.get("messages") or [*example.get("prompt", ()), *example.get("completion", ())]
    return recorded.chat_actions(messages, example.get("final_answer"))  # a user turn's text reply: its submit


def replay(example: Mapping[str, Any], env: gym.Env[Any, Any] | None = None) -> float:
    """Step an exported example's actions through ``env`` (default ``gymnasium.make(example["env_id"])``, closed
    afterwards) from a reset with its task and seed; returns the episode's total reward."""
    own = env is None
    if env is None:
        import gymnasium

        from mcp_gym.envs import register_all

        register_all()  # idempotent (importing mcp_gym did it already, unless the registry was cleared)
        env = gymnasium.make(example["env_id"])
    try:
        env.reset(seed=example.get("seed"), options={"task_id": example["task_id"]})
        total = 0.0
        for action in actions(example):
            _, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return total
    finally:
        if own:
            env.close()
