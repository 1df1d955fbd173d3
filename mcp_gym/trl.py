"""TRL GRPO adapter: an mcp-gym env as a TRL ``environment_factory`` class.

TRL's ``GRPOTrainer(environment_factory=...)`` wants a class whose instances are environments: ``reset(**row)``
starts an episode from a dataset row (its return value, if a string, is appended to the prompt), every other public
method is a *tool* the model may call during generation (TRL builds the tool schemas from the methods' type hints and
Google-style docstrings), and an optional ``get_reward()`` scores the finished rollout. :func:`environment_factory`
builds such a class from any :class:`~mcp_gym.env.MCPEnv`, generating one method per MCP tool with a real
``inspect.Signature``, annotations derived from the tool's JSON Schema and an ``Args:`` docstring::

    from trl import GRPOConfig
    from mcp_gym.trl import GRPOTrainer, environment_factory, task_dataset

    trainer = GRPOTrainer(
        model="Qwen/Qwen3-0.6B",
        train_dataset=task_dataset("Counter", split="train"),   # columns: prompt, task_id
        environment_factory=environment_factory("Counter"),
        args=GRPOConfig(max_completion_length=256, ...),
    )

Each instance owns one :class:`MCPEnv` (bundled servers run in-process and keep per-episode state, so instances are
cheap); a tool method steps it and returns the result text (plus observed resources that changed). ``get_reward()``
returns the episode return (server rewards plus the verifier's grade on ``submit``) or, with ``reward="verifier"``,
the verifier's grade of the final server state even without ``submit``.

With a chat template TRL does not ship (a tokenizer built in code, a fine-tuned model's own template), pass the
tokenizer through :func:`prepare_tokenizer` first: ``GRPOTrainer`` otherwise refuses it ("Unrecognized chat template").
``GRPOConfig(max_tool_calling_iterations=Env.max_steps)`` gives rollouts the env's own step budget. This module's
``GRPOTrainer`` (TRL's, imported on first use) ends each rollout when its episode ends: TRL's own loop would append
the ending call's result and let the model reply again until a reply has no call.

Conversations (a task with several user turns, ``Task.turns``): ``submit`` ends a user turn, and its result -- the
tool message TRL appends -- is the next user message; the ``submit`` of the last turn ends the episode. The probe
episode plays through every user turn (submitting empty answers), so the class also offers the tools a server adds at
a later turn (the ``mcp_gym_turn`` hook); called before their turn, they return the env's error text.

Limits: TRL fixes the tool list per class, so the class offers the tools listed at the start of a probe episode (and
at each of its user turns; ``submit`` included); tools a server reveals mid-episode (``tools/list_changed``) are not
offered, and calling a tool absent from the current episode returns the env's error text. A task whose tools the
class does not offer (per-task tools, BFCL) says so in a ``UserWarning`` at ``reset``. A model's bad call (a missing
or extra argument; in this module's ``GRPOTrainer``, a tool the class does not offer) reaches the env, which answers
it as in ``mcp-gym eval``.
"""

from __future__ import annotations

import inspect
import keyword
import re
import textwrap
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, cast

from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT, result_content, user_content
from mcp_gym.env import MCPEnv
from mcp_gym.graders.episode import verifier_score
from mcp_gym.protocol import SUBMIT_DESCRIPTION, SUBMIT_SCHEMA
from mcp_gym.textenv import _message_text, reset_options, resolve_env_factory

__all__ = ["GRPOTrainer", "environment_factory", "prepare_tokenizer", "task_dataset"]  # noqa: F822 - GRPOTrainer: __getattr__

RewardMode = Literal["return", "verifier"]
RESERVED_NAMES = frozenset({"reset", "get_reward"})
_JSON_SCALARS = (str, int, float, bool, type(None))
_SIMPLE_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_DOC_SECTION = re.compile(r"\b(Args|Arguments|Returns|Raises|Yields|Examples?)\s*:")


# -- JSON Schema -> Python annotations ---------------------------------------------------------------------------------
def _union(types: Sequence[Any]) -> Any:
    unique: list[Any] = []
    for t in types:
        if t not in unique:
            unique.append(t)
    if not unique:
        return Any
    if Any in unique:
        return Any
    return unique[0] if len(unique) == 1 else Union[tuple(unique)]  # noqa: UP007 - built from a runtime list


def schema_to_annotation(schema: Any) -> Any:
    """A Python type hint for a JSON Schema, in the subset ``transformers.utils.get_json_schema`` converts back.

    ``string``/``integer``/``number``/``boolean``/``null`` -> ``str``/``int``/``float``/``bool``/``None``; ``enum`` and
    ``const`` -> ``Literal[...]``; ``array`` -> ``list[item]``; ``object`` -> ``dict`` (``dict[str, v]`` with an
    ``additionalProperties`` schema); type lists, ``anyOf`` and ``oneOf`` -> unions; anything else -> ``Any``.
    """
    if not isinstance(schema, Mapping):
        return Any
    if "const" in schema and isinstance(schema["const"], _JSON_SCALARS):
        return Literal[schema["const"]]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, _JSON_SCALARS) for v in enum):
        return Literal[tuple(enum)]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _union([schema_to_annotation(s) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([schema_to_annotation({**schema, "type": k}) for k in kind])
    if kind in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind]
    if kind == "array":
        items = schema.get("items")
        item_type = schema_to_annotation(items) if isinstance(items, Mapping) else Any
        return list if item_type is Any else types.GenericAlias(list, (item_type,))  # list[item_type]
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            value_type = schema_to_annotation(extra)
            return dict if value_type is Any else types.GenericAlias(dict, (str, value_type))
        return dict
    return Any


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_allows_null(s) for key in ("anyOf", "oneOf") for s in schema.get(key) or [])


def _one_line(text: str) -> str:
    """Whitespace collapsed to single spaces, with docstring section headers defused (they would cut the parse)."""
    return _DOC_SECTION.sub(lambda m: f"{m.group(1)} -", " ".join(str(text).split()))


_GOOGLE_SECTION = re.compile(r"^[ \t]*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?)[ \t]*:[ \t]*$",
                             re.MULTILINE)
_GOOGLE_ARG = re.compile(r"^(\w+)(?:\s*\([^()]*\))?\s*:\s*(.*)$")


def split_google_docstring(text: str) -> tuple[str, dict[str, str], str]:
    """``(summary, {argument: description}, returns)`` of a tool description written as a Google docstring.

    MCP servers built from Python functions often ship their docstring as the description, with an ``Args:``
    section; its per-argument texts fill in arguments whose schema has no ``description``. Section headers left in
    the summary are defused (``transformers`` would cut the description at them).
    """
    lines = inspect.cleandoc(text or "").splitlines()
    kept: list[str] = []
    args: dict[str, str] = {}
    returns = ""
    i = 0
    while i < len(lines):
        header = _GOOGLE_SECTION.match(lines[i])
        if header is None:
            kept.append(lines[i])
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        kind = header.group(1).lower()
        if kind in ("args", "arguments", "parameters"):
            current = None
            for line in textwrap.dedent("\n".join(body)).splitlines():
                hit = _GOOGLE_ARG.match(line)
                if hit and not line[:1].isspace():
                    current = hit.group(1)
                    args[current] = hit.group(2).strip()
                elif current and line.strip():
                    args[current] = f"{args[current]} {line.strip()}"
        elif kind in ("returns", "yields"):
            returns = " ".join(" ".join(body).split())
        else:
            kept.extend([lines[i - len(body) - 1], *body])
    summary = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    summary = "\n".join(_DOC_SECTION.sub(lambda m: f"{m.group(1)} -", line) for line in summary.splitlines())
    return summary, args, returns


def _constraints(schema: Mapping[str, Any]) -> str:
    parts = []
    for key, label in (("minimum", "min"), ("maximum", "max"), ("exclusiveMinimum", "> "), ("exclusiveMaximum", "< "),
                       ("minLength", "min length"), ("maxLength", "max length"), ("minItems", "min items"),
                       ("maxItems", "max items"), ("pattern", "pattern"), ("format", "format")):
        if key in schema and isinstance(schema[key], (int, float, str)):
            sep = "" if label.endswith(" ") and label.strip() in "<>" else " "
            parts.append(f"{label.strip()}{sep}{schema[key]}")
    if schema.get("default") is not None and isinstance(schema["default"], _JSON_SCALARS):
        parts.append(f"default {schema['default']!r}")
    return "; ".join(parts)


def _identifier(name: str, taken: set[str], reserved: frozenset[str] = frozenset()) -> str:
    """A valid, unused, non-keyword Python identifier for ``name``."""
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident if ident else "arg"
    if ident.startswith("_"):
        ident = "t" + ident
    if keyword.iskeyword(ident) or ident in reserved or ident == "self":
        ident += "_"
    base, k = ident, 2
    while ident in taken:
        ident, k = f"{base}_{k}", k + 1
    taken.add(ident)
    return ident


# -- tool methods ------------------------------------------------------------------------------------------------------
_RENAMED_SAID: set[str] = set()
"""Tools whose renamed arguments were said (once per tool and process)."""


@dataclass(frozen=True)
class ToolMethodSpec:
    """How a generated method maps to its MCP tool.

    Attributes:
        method_name: The attribute's Python name (a valid identifier). The model sees the env's own name, ``tool_name``
            (the method's ``__name__``, which TRL names the tool by), as ``mcp-gym eval`` and SFT exports show it.
        tool_name: The env's tool name (``MCPEnv.tools`` / ``submit``).
        params: Python parameter name -> JSON argument name.
        nullable: Python parameter names whose schema allows ``null`` (``None`` is sent, not dropped).
        optional: Python parameter names that are not required (``None`` means "omit").
    """

    method_name: str
    tool_name: str
    params: Mapping[str, str]
    nullable: frozenset[str]
    optional: frozenset[str]


def tool_method(
    tool_name: str, description: str, input_schema: Mapping[str, Any], method_name: str | None = None
) -> tuple[Callable[..., str], ToolMethodSpec]:
    """Build the method for one MCP tool: ``def <name>(self, <params>) -> str`` with signature, hints and docstring.

    The method calls ``self._call_tool(tool_name, arguments)``; a keyword call with missing or unknown arguments (a
    model's bad call) goes to the env as given, which answers it as at inference. Optional parameters default to
    ``None`` (or to the schema's scalar default) and are left out of the call when ``None``, so the server applies its
    own default.
    """
    name = method_name or _identifier(tool_name, set(), RESERVED_NAMES)
    summary, doc_args, doc_returns = split_google_docstring(description)
    props = input_schema.get("properties") or {}
    required = [p for p in (input_schema.get("required") or []) if p in props]
    order = required + [p for p in props if p not in required]
    taken: set[str] = set()
    params: dict[str, str] = {}
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    arg_docs: list[str] = []
    nullable: set[str] = set()
    optional: set[str] = set()
    for json_name in order:
        schema = props[json_name] if isinstance(props[json_name], Mapping) else {}
        py_name = _identifier(json_name, taken)
        params[py_name] = json_name
        hint = schema_to_annotation(schema)
        if _allows_null(schema):
            nullable.add(py_name)
        default: Any
        if json_name in required:
            default = inspect.Parameter.empty
        else:
            optional.add(py_name)
            d = schema.get("default", None)
            default = d if isinstance(d, _JSON_SCALARS) else None
            if default is None and hint is not Any:
                hint = Union[hint, None]  # noqa: UP007 - a runtime-built hint
        annotations[py_name] = hint
        sig_params.append(inspect.Parameter(py_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                            annotation=hint))
        text = _one_line(schema.get("description") or doc_args.get(json_name) or schema.get("title")
                         or json_name.replace("_", " "))
        extra = _constraints(schema)
        if py_name != json_name:
            extra = f"{extra}; JSON name {json_name!r}" if extra else f"JSON name {json_name!r}"
        arg_docs.append(f"    {py_name}: {text}" + (f" ({extra})" if extra else ""))
    renamed = [(j, py) for py, j in params.items() if py != j]
    if renamed and tool_name not in _RENAMED_SAID:  # a Python signature cannot carry these names; say so, once
        _RENAMED_SAID.add(tool_name)
        warnings.warn(f"mcp_gym.trl: tool {tool_name!r} shows the model its arguments "
                      f"{', '.join(f'{j!r} as {py!r}' for j, py in renamed)} (TRL takes tools as Python functions, "
                      "whose parameters are identifiers), while eval and SFT exports show the JSON names: a model "
                      "trained on one form sees the other at evaluation", UserWarning, stacklevel=2)
    annotations["return"] = str
    signature = inspect.Signature(sig_params, return_annotation=str)
    returns = f"The tool result as text ({_one_line(doc_returns)})" if doc_returns else "The tool result as text."
    doc = summary or f"Call the MCP tool {tool_name!r}."
    if arg_docs:
        doc += "\n\nArgs:\n" + "\n".join(arg_docs)
    doc += f"\n\nReturns:\n    {returns}"
    spec = ToolMethodSpec(name, tool_name, dict(params), frozenset(nullable), frozenset(optional))

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            if args:  # a positional call is code's, not a model's: its mistake is an error
                raise
            # a model's call with a missing or extra argument (TRL passes the call's arguments as keywords): the env
            # answers it as at inference, with its own error text, and counts the step
            return self._call_tool(spec.tool_name, {spec.params.get(k, k): v for k, v in kwargs.items()})
        arguments: dict[str, Any] = {}
        for py, value in bound.arguments.items():
            if py == "self":
                continue
            if value is None and py in spec.optional and py not in spec.nullable:
                continue
            arguments[spec.params[py]] = value
        return self._call_tool(spec.tool_name, arguments)

    method.__name__ = tool_name  # what TRL shows the model and matches its calls by: the env's name (``get-sum``)
    method.__qualname__ = name
    method.__doc__ = doc
    method.__signature__ = signature  # type: ignore[attr-defined]  # read by inspect.signature
    method.__annotations__ = annotations
    method.__mcp_tool__ = spec  # type: ignore[attr-defined]  # a function takes any attribute
    return method, spec


# -- the environment base class ----------------------------------------------------------------------------------------
class MCPToolEnvironment:
    """Base of the classes :func:`environment_factory` builds (public methods other than ``reset`` and
    ``get_reward`` would become tools, so everything else here is private).

    Instance attributes: ``env`` (the :class:`MCPEnv`), ``task`` (the current task), ``episode_return``, ``done``,
    ``last_info`` (info of the last step).
    """

    _make_env: Callable[[], MCPEnv]
    _reward: RewardMode | Callable[[MCPEnv], float] = "return"
    _show_resources: bool = True
    _tool_specs: Mapping[str, ToolMethodSpec] = {}
    _probed: frozenset[str] = frozenset()
    openai_tools: list[dict[str, Any]] = []
    """The tool schemas TRL derives from the methods (computed once, for inspection)."""
    max_steps: int = 20
    """The env's step limit: pass it as ``GRPOConfig(max_tool_calling_iterations=Env.max_steps)`` so a training
    rollout gets the budget ``mcp-gym eval`` gives an episode."""

    def __init__(self) -> None:
        self.env: MCPEnv = type(self)._make_env()
        self.done = False
        self.episode_return = 0.0
        self.last_info: dict[str, Any] = {}
        self._shown: dict[str, str] = {}
        self._answer: str | None = None
        self._started = False

    def reset(self, **row: Any) -> str | None:
        """Start an episode for a dataset row; returns text to append to the prompt (or ``None``).

        The row's ``task_id`` selects the task; otherwise its ``prompt`` (the last user message) is matched against
        the env's task prompts (an unknown prompt becomes an ad-hoc task, an empty one draws a random task). The
        returned text is the task prompt when the row's prompt does not already contain it, plus the observed
        resources.
        """
        options = reset_options(self.env, row if row else None)
        obs, info = self.env.reset(options=options)
        unseen = [n for n in self.env.action_space.tool_names if n not in type(self)._probed]
        if unseen:  # per-task tools (BFCL): this task's are not among the class's, which TRL shows the model
            warnings.warn(f"mcp_gym.trl: {type(self).__name__} offers the tools its probe task listed; this episode's "
                          f"task offers {', '.join(unseen)} too, which the model is not shown (a call still runs): "
                          "build a class per tool set (environment_factory(probe_task=...))", UserWarning,
                          stacklevel=2)
        self.done = False
        self.episode_return = 0.0
        self.last_info = dict(info)
        self._answer = None
        self._started = True
        self._shown = dict(obs["resources"])
        shown = _message_text(row.get("prompt")) if row else ""
        resources = obs["resources"] if self._show_resources else {}
        if obs["task"].strip() and obs["task"].strip() in shown:  # TRL appends the text to the row's user turn
            text = user_content("", resources, obs.get("result") or "")  # a reset notice (servers down), resources
            return ("\n\n" + text) if text else None
        text = user_content(obs["task"], resources, obs.get("result") or "")  # the chat view's user turn
        if not text:
            return None
        return ("\n\n" + text) if shown.strip() else text

    def get_reward(self) -> float:
        """The finished rollout's reward (see :func:`environment_factory`'s ``reward``)."""
        mode = type(self)._reward
        if callable(mode):
            return float(mode(self.env))
        if not self._started:
            return 0.0
        if mode == "verifier" and self.env.verifier is not None and self.env.task is not None:
            if self.last_info.get("termination") == "submit" and "verifier_reward" in self.last_info:
                return float(self.last_info["verifier_reward"])
            try:
                return float(self.env.runtime.call(verifier_score, self.env, self._answer))
            except Exception:  # noqa: BLE001 - a broken verifier scores 0 rather than stopping training
                return 0.0
        return float(self.episode_return)

    def _call_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        if not self._started:
            raise RuntimeError("call reset() before calling a tool")
        if self.done:
            return "Error: the episode is over; no more tool calls are executed."
        obs, reward, terminated, truncated, info = self.env.step({"tool": tool, "arguments": arguments})
        self.episode_return += float(reward)
        self.done = bool(terminated or truncated)
        self.last_info = dict(info)
        if tool == "submit":
            self._answer = info.get("final_answer")
        text = result_content(obs["result"], obs["resources"] if self._show_resources else {}, self._shown)
        self._shown = dict(obs["resources"])
        return text

    def _close(self) -> None:
        """Close the env (stops stdio servers)."""
        self.env.close()


def environment_factory(
    env: str | Callable[[], MCPEnv],
    *,
    tools: Sequence[str] | None = None,
    include_submit: bool = True,
    reward: RewardMode | Callable[[MCPEnv], float] = "return",
    show_resources: bool = True,
    probe_task: str | None = None,
    class_name: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> type[MCPToolEnvironment]:
    """Build a TRL ``environment_factory`` class for an mcp-gym env.

    Args:
        env: A bundled env name (``"Counter"``, ``"SQL"``, ...) or a zero-argument factory returning an
            :class:`MCPEnv`; each instance of the class calls it once.
        tools: Offer only these tools (env tool names; default: every tool listed in the probe episode).
        include_submit: Offer the built-in ``submit(answer)`` tool that ends the episode and is graded.
        reward: ``"return"`` (the episode return: server rewards plus the verifier's grade on ``submit``),
            ``"verifier"`` (the verifier's grade of the final state, even without ``submit``), or a callable
            ``(env) -> float`` called at the end of the rollout.
        show_resources: Append observed resources to the prompt and the changed ones to tool results.
        probe_task: Task id whose first episode lists the tools (default: the env's first task).
        class_name: Name of the class (TRL logs the ``get_reward`` column under it; default ``<Env>Environment``).
        env_kwargs: ``make_env`` keyword arguments (bundled env names only).

    Returns:
        A subclass of :class:`MCPToolEnvironment` with one class-level method per tool.
    """
    if reward not in ("return", "verifier") and not callable(reward):
        raise ValueError(f"reward must be 'return', 'verifier' or a callable, got {reward!r}")
    factory = resolve_env_factory(env, env_kwargs)
    probe = factory()
    try:
        task_ids = [t.id for t in probe.tasks]
        probe.reset(options={"task_id": probe_task or task_ids[0]} if (probe_task or task_ids) else None)
        entries = [(e.name, e.tool.description or "", e.input_schema) for e in probe.tools]
        while probe.episode is not None and not probe.done and not probe.episode.last_turn:  # a conversation's tools
            probe.step({"tool": "submit", "arguments": {"answer": ""}})  # of its later user turns
            seen = {name for name, _, _ in entries}
            entries += [(e.name, e.tool.description or "", e.input_schema) for e in probe.tools if e.name not in seen]
        env_id = probe.env_id
        max_steps = probe.max_steps
    finally:
        probe.close()
    probed = list(entries)  # every tool the probe saw (``tools`` may offer fewer, on purpose)
    if tools is not None:
        known = {name for name, _, _ in entries} | {"submit"}
        unknown = [t for t in tools if t not in known]
        if unknown:
            raise ValueError(f"unknown tool(s) {unknown}; the env offers {sorted(known)}")
        entries = [e for e in entries if e[0] in tools]
    if include_submit and not any(name == "submit" for name, _, _ in entries):
        entries.append(("submit", SUBMIT_DESCRIPTION, SUBMIT_SCHEMA))
    taken: set[str] = set()
    namespace: dict[str, Any] = {}
    specs: dict[str, ToolMethodSpec] = {}
    for name, description, schema in entries:
        method, spec = tool_method(name, description, schema, _identifier(name, taken, RESERVED_NAMES))
        namespace[spec.method_name] = method
        specs[spec.method_name] = spec
    if class_name is None:
        base = env if isinstance(env, str) else (env_id or "MCP").split("/")[-1].split("-v")[0]
        class_name = re.sub(r"\W", "", base.title() if base.islower() else base) + "Environment"
    namespace.update(
        _make_env=staticmethod(factory),
        _reward=staticmethod(reward) if callable(reward) else reward,
        _show_resources=show_resources,
        _tool_specs=specs,
        _probed=frozenset(name for name, _, _ in probed) | {"submit"},
        max_steps=max_steps,
        __doc__=f"TRL environment over the mcp-gym env {env_id or env!r} (tools: {', '.join(specs)}).",
        __module__=__name__,
    )
    cls = cast("type[MCPToolEnvironment]", type(class_name, (MCPToolEnvironment,), namespace))
    cls.openai_tools = _schemas_of(cls)
    return cls


def _schemas_of(cls: type[MCPToolEnvironment]) -> list[dict[str, Any]]:
    """The OpenAI tool schemas transformers derives from the class's tool methods ([] without transformers)."""
    try:
        from transformers.utils import get_json_schema
    except ImportError:
        return []
    return [get_json_schema(getattr(cls, name)) for name in cls._tool_specs]


def task_dataset(
    env: str,
    split: str | None = "train",
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    limit: int | None = None,
    seed: int = 0,
) -> Any:
    """A TRL-ready ``datasets.Dataset`` of a bundled env's tasks: conversational ``prompt`` plus ``task_id``.

    Args:
        env: Bundled env name.
        split: ``"train"``, ``"test"`` or ``None`` for all tasks.
        system_prompt: System message before the task prompt (default: the chat view's, as the policies and the SFT
            export use; ``None``: none).
        limit: Keep the first ``limit`` tasks.
        seed: Task-generation seed.
    """
    import datasets

    from mcp_gym.envs import load_env_tasks

    tasks = load_env_tasks(env, split, seed)[:limit]
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return datasets.Dataset.from_dict({
        "prompt": [[*system, {"role": "user", "content": t.prompt}] for t in tasks],
        "task_id": [t.id for t in tasks],
    })


# -- the tokenizer: TRL's response parser for tool calls ---------------------------------------------------------------
_PROBE_CALL = {"type": "function", "function": {"name": "probe_tool", "arguments": {"x": 1}}}


def _hermes_response_template(tokenizer: Any) -> dict[str, Any]:
    """A ``transformers`` response template for a chat template that writes tool calls as Hermes blocks
    (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), read off the template's own rendering."""
    user = [{"role": "user", "content": "probe"}]
    try:
        bare = tokenizer.apply_chat_template(user, tokenize=False)
        prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template([*user, {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]}],
                                             tokenize=False)
    except Exception as e:  # noqa: BLE001 - any template failure is the same refusal
        raise ValueError(f"prepare_tokenizer: the chat template cannot render a tool call ({type(e).__name__}: "
                         f"{e})") from e
    eos = tokenizer.eos_token
    reply = full[len(prompt):] if full.startswith(prompt) else ""
    block = re.search(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", reply, re.DOTALL)
    anchor = prompt[len(bare):] if prompt.startswith(bare) else ""
    if not (anchor and eos and block and '"probe_tool"' in block.group(1) and eos in reply):
        raise ValueError("prepare_tokenizer: the chat template is not one TRL knows and does not write Hermes "
                         "<tool_call>{json}</tool_call> blocks ending with the EOS token; set tokenizer."
                         "response_template yourself (transformers' chat response parsing)")
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": anchor,
        "fields": {
            "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True,
                           "content": "json", "transform": {"type": "function", "function": "{content}"}},
            "content": {"close_pattern": re.escape(eos) + r"\s*", "content": "text"},
        },
    }


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Make ``tokenizer`` one TRL's ``GRPOTrainer`` can run tools with; returns it.

    TRL parses each generated reply into tool calls with the tokenizer's response parser and sets one itself only for
    the chat templates it ships (Qwen, Llama, ...); any other template stops ``GRPOTrainer`` with "Unrecognized chat
    template, failed to add response schema". This keeps a parser already set, uses TRL's for a known template, and
    otherwise derives one from how the template renders a tool call (Hermes ``<tool_call>`` blocks, as the chat
    templates of the README's examples write them; anything else raises ``ValueError``).
    """
    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None):
        return tokenizer
    from trl.chat_template_utils import add_response_schema

    try:
        return add_response_schema(tokenizer)
    except ValueError:
        pass
    template = _hermes_response_template(tokenizer)
    import transformers

    if tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2]) < (5, 13):
        raise ValueError(f"prepare_tokenizer: parsing this chat template's tool calls needs transformers >= 5.13 "
                         f"(installed: {transformers.__version__})")
    tokenizer.response_template = template
    return tokenizer


# -- the trainer: a rollout ends where its episode ends ----------------------------------------------------------------
class _EnvTools(dict[str, Any]):
    """TRL's tool dict of one rollout over an mcp-gym environment: a name it lacks (a model's unknown or misspelled
    tool) is still called on the env, which answers with its own error text (``Error: unknown tool 'nope'
    (available: ...)``) and counts the step, as in ``mcp-gym eval``; TRL alone shows ``{'error': 'Tool nope not
    found.'}`` and the env never sees the call. Names of the rollout's async tools stay TRL's."""

    def __init__(self, tools: Mapping[str, Any], env: MCPToolEnvironment, async_tools: Mapping[str, Any]) -> None:
        super().__init__(tools)
        self.env, self.async_tools = env, async_tools

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name not in self.async_tools

    def __missing__(self, name: str) -> Callable[..., str]:
        return lambda **arguments: self.env._call_tool(name, arguments)


def _episode_grpo_trainer() -> type:
    """TRL's ``GRPOTrainer`` with rollouts that end when their :class:`MCPToolEnvironment` episode ends.

    TRL's tool loop knows nothing of episodes: after the call that ends one (``submit``, the verifier, the step limit)
    it appends the result and lets the model reply again, until a reply has no tool call, and those tokens share the
    rollout's advantage. Here the loop's tool-result hook reports the turn after an ended episode as past the
    completion budget, which is TRL's own way of ending a rollout: the ending call's result is not appended and the
    model is not asked again (the result stays in ``env.last_info``; the reward comes from the env, as before).
    A call of a tool the class does not offer goes to the env too, which answers as in ``mcp-gym eval`` (see
    :class:`_EnvTools`).
    """
    import trl
    from transformers import ProcessorMixin

    base = trl.GRPOTrainer
    for hook in ("_tool_call_loop", "_get_tool_suffix_ids"):
        if not callable(getattr(base, hook, None)):
            raise ImportError(f"mcp_gym.trl.GRPOTrainer: trl {trl.__version__}'s GRPOTrainer has no {hook}(); "
                              f"use trl.GRPOTrainer (rollouts then continue after the episode ends)")

    class GRPOTrainer(base):  # type: ignore[misc, valid-type]  # trl is untyped here
        __doc__ = _episode_grpo_trainer.__doc__
        _episode_completions: list[list[dict[str, Any]]] | None = None

        def _tool_call_loop(self, prompts: Any, prompt_ids: Any, completion_ids: Any, completions: Any,
                            *args: Any, **kwargs: Any) -> Any:
            self._episode_completions = completions  # each rollout's messages, to find whose tool result this is
            sync_tools: list[Any] | None = getattr(self, "_sync_tool_dicts", None)
            if self.environments and sync_tools:
                self._sync_tool_dicts = [
                    _EnvTools(tools, env, self._async_tool_dicts[i])
                    if isinstance(env, MCPToolEnvironment) and not isinstance(tools, _EnvTools) else tools
                    for i, (tools, env) in enumerate(zip(sync_tools, self.environments, strict=True))]
            try:
                return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, *args, **kwargs)
            finally:
                self._episode_completions = None

        def _get_tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
            env = self._episode_env(tool_messages)
            if env is not None and env.done:  # past the budget: TRL drops this turn's results and ends the rollout
                pad = self.processing_class  # a processor's tokenizer, as TRL takes it (not its private _tokenizer)
                pad = pad.tokenizer if isinstance(pad, ProcessorMixin) else pad
                return [pad.pad_token_id or 0] * (self.max_completion_length + 1)
            return cast("list[int]", super()._get_tool_suffix_ids(tool_messages))

        def _episode_env(self, tool_messages: list[dict[str, Any]]) -> MCPToolEnvironment | None:
            """The environment of the rollout whose messages end with ``tool_messages`` (None: not an mcp-gym one)."""
            if not tool_messages or not self._episode_completions or not self.environments:
                return None
            last = tool_messages[-1]
            for i, messages in enumerate(self._episode_completions):
                if messages and messages[-1] is last:
                    env = self.environments[i]
                    return env if isinstance(env, MCPToolEnvironment) else None
            return None

    GRPOTrainer.__module__ = __name__
    GRPOTrainer.__qualname__ = "GRPOTrainer"
    return GRPOTrainer


_LAZY: dict[str, Callable[[], Any]] = {"GRPOTrainer": _episode_grpo_trainer}


def __getattr__(name: str) -> Any:
    """``GRPOTrainer`` is built on first use, so importing this module needs no torch or TRL."""
    if name in _LAZY:
        value = _LAZY[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
