"""The types of the job config's keys, as OmegaConf structured configs, and the check that applies them.

The YAML files in ``conf/`` keep the defaults and their descriptions (``mcp-gym <job> --help`` reads them);
the dataclasses here declare each key's type. :func:`check_job_config` merges the composed config into them, so
OmegaConf itself refuses ``episodes=abc`` or a ``+key`` no config declares, and the CLI says so in one line naming
the key (``mcp-gym collect: episodes must be an integer or null, not 'abc'``).

Mappings whose keys are the user's (``env.servers``, ``env.task_columns``, ``policy.extra_body``,
``launcher.runtime_env``) are open; every other node is closed. An option that is not mcp-gym's own (a policy
``kind`` or a launcher ``kind`` it does not know) is not checked.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from mcp_gym.errors import MCPGymError

__all__ = ["ConfigError", "check_job_config"]


def to_dict(node: Any) -> dict[str, Any]:
    """A config node as a plain dict (interpolations resolved)."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]  # a DictConfig converts to a dict
    return dict(node or {})


class ConfigError(MCPGymError, ValueError):
    """A job config key of the wrong type, or one no config declares; the message is one line naming the key."""


# -- the jobs (the root of the config) --------------------------------------------------------------------------------
@dataclass
class _Job:
    command: str = MISSING
    seed: int = MISSING
    out: str = MISSING


@dataclass
class _Episodes(_Job):
    split: str | None = MISSING
    samples: int = MISSING
    episodes: int | None = MISSING


@dataclass
class _Collect(_Episodes):
    pass


@dataclass
class _Eval(_Episodes):
    pass_k: list[int] = MISSING
    plots: bool = MISSING


@dataclass
class _DemoOptions:
    policies: list[str] = MISSING
    eval_split: str | None = MISSING
    eval_samples: int = MISSING
    pass_k: list[int] = MISSING


@dataclass
class _Demo(_Episodes):
    demo: _DemoOptions = field(default_factory=_DemoOptions)


@dataclass
class _ExportOptions:
    success_only: bool = MISSING
    min_reward: float | None = MISSING
    max_turns: int | None = MISSING
    drop_errors: bool = MISSING
    drop_tool_errors: bool = MISSING
    dedupe: bool = MISSING
    special_tokens: Any = MISSING  # a list of strings, or null
    tokenizer: str | None = MISSING
    final_answer: str = MISSING
    layout: str = MISSING
    test_size: float | None = MISSING
    seed: int = MISSING
    tools_changed: str | None = MISSING


@dataclass
class _ExportSft(_Job):
    runs: Any = MISSING  # a list of runs or globs, or one as a string
    format: str = MISSING
    overwrite: bool = MISSING
    sft: _ExportOptions = field(default_factory=_ExportOptions)


@dataclass
class _ValidateTasks(_Job):
    split: str | None = MISSING
    replay: bool = MISSING


@dataclass
class _GenerateTasks(_Job):
    n: int = MISSING
    fixture: str | None = MISSING
    splits: dict[str, float] = MISSING
    dry_run: bool = MISSING
    samples: int = MISSING
    max_proposals: int | None = MISSING
    generator: dict[str, Any] = MISSING  # the generator's options (checked by the generator)


JOBS: dict[str, type] = {"collect": _Collect, "eval": _Eval, "demo": _Demo, "export-sft": _ExportSft,
                         "tasks-validate": _ValidateTasks,
                         "tasks-generate": _GenerateTasks}
"""``command`` -> the schema of the job's own keys (the root of the config, groups aside)."""


# -- the groups -------------------------------------------------------------------------------------------------------
@dataclass
class _Env:
    name: str = MISSING
    max_steps: int | None = MISSING
    call_timeout: float = MISSING
    connect_timeout: float | None = MISSING
    error_text: str | None = MISSING  # a regex: results whose text matches are tool errors (checked below)
    task_ids: list[str] | None = None  # the job's slice of the task set (mcp_gym.jobs.config.select_tasks)
    max_tasks: int | None = None  # a positive integer (checked below)


@dataclass
class _BundledEnv(_Env):
    transport: str = MISSING
    url: str | None = MISSING


@dataclass
class _Judge:
    model: str = MISSING
    base_url: str = MISSING
    api_key: str | None = MISSING
    system_prompt: str | None = MISSING
    prompt: str | None = MISSING
    temperature: float = MISSING


@dataclass
class _CustomEnv(_Env):
    servers: dict[str, Any] = MISSING
    tasks: str | None = MISSING
    task_columns: dict[str, str] | None = MISSING
    task_env_allow: list[str] = MISSING
    trust_task_code: bool = MISSING
    max_turns: int | None = MISSING
    max_tool_calls: int | None = MISSING
    grader: Any = MISSING  # a grader spec: a name, or a mapping
    grader_timeout: float | None = MISSING
    judge: _Judge = field(default_factory=_Judge)
    include_tools: list[str] | None = MISSING
    exclude_tools: list[str] = MISSING
    reset_mode: str = MISSING
    spare_servers: int = MISSING
    resolve_npx: bool = MISSING


# Keys a policy's YAML leaves out (its constructor's other parameters) default to None: added with +policy.<key>=...
@dataclass
class _Policy:
    kind: str = MISSING


@dataclass
class _RandomPolicy(_Policy):
    fixed: dict[str, Any] | None = None


@dataclass
class _ChatPolicy(_Policy):
    model: str = MISSING
    temperature: float = MISSING
    system_prompt: str | None = None


@dataclass
class _OpenAIPolicy(_ChatPolicy):
    base_url: str = MISSING
    api_key: str | None = MISSING
    max_tokens: int = MISSING
    tool_choice: str | None = MISSING
    timeout: float = MISSING
    retries: int = MISSING
    max_concurrency: int = MISSING
    send_seed: bool = MISSING
    extra_body: dict[str, Any] = MISSING


@dataclass
class _HFPolicy(_ChatPolicy):
    max_new_tokens: int = MISSING
    top_p: float = MISSING
    device: str | None = MISSING
    no_call: str = MISSING  # "feedback" or "end" (HFPolicy checks the value)
    tokenizer: str | None = None
    chat_template: str | None = None
    name: str | None = None
    generate_kwargs: dict[str, Any] | None = None


POLICIES: dict[str, type] = {"random": _RandomPolicy, "oracle": _Policy, "noop": _Policy, "openai": _OpenAIPolicy,
                             "hf": _HFPolicy}


@dataclass
class _Recorder:
    enabled: bool = MISSING
    fsync: str = MISSING
    max_result_bytes: int = MISSING


@dataclass
class _Launcher:
    kind: str = MISSING
    num_envs: int = MISSING
    share_servers: int | None = MISSING
    max_connecting: int = MISSING
    episode_timeout: float | None = MISSING
    max_errors: int = MISSING
    progress: bool = MISSING


@dataclass
class _RayLauncher(_Launcher):
    address: str | None = MISSING
    num_cpus: int | None = MISSING
    num_workers: int = MISSING
    cpus_per_worker: float = MISSING
    chunk_size: int | None = MISSING
    max_worker_restarts: int | None = MISSING
    storage: str | None = MISSING
    staging_dir: str | None = MISSING
    runtime_env: dict[str, Any] | None = MISSING
    poll_interval: float = MISSING


LAUNCHERS: dict[str, type] = {"local": _Launcher, "ray": _RayLauncher}


def _group_schema(group: str, node: Any) -> type | None:
    """The schema of a group's chosen option, from what the option says it is (``None``: not one of mcp-gym's)."""
    if not isinstance(node, DictConfig):
        return None
    if group == "env":
        return _CustomEnv if "servers" in node else _BundledEnv
    if group == "policy":
        return POLICIES.get(str(node.get("kind")))
    if group == "launcher":
        return LAUNCHERS.get(str(node.get("kind", "local")))
    return _Recorder if group == "recorder" else None


GROUPS = ("env", "policy", "recorder", "launcher")


# -- the check --------------------------------------------------------------------------------------------------------
def check_job_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` (one line naming the key) if a key of the job config has the wrong type or is
    unknown (e.g. ``+episods=5``: the closest known key is suggested). Unknown jobs and options are not checked."""
    job = JOBS.get(str(cfg.get("command")))
    if job is None:
        return
    root = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k not in GROUPS])
    _merge(job, root, "")
    for group in GROUPS:
        schema = _group_schema(group, cfg.get(group))
        if schema is not None:
            _merge(schema, cfg[group], f"{group}.")
    env = cfg.get("env")
    for key in (*_BUDGETS, "max_tasks"):  # a budget of 0 or less ran one step of every episode, then cut it off
        value = env.get(key) if env is not None else None
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ConfigError(f"env.{key} must be a positive integer or null, not {value}")
    if env is not None and env.get("error_text") is not None:  # a bad regex: refused before anything starts
        from mcp_gym.options import compile_error_text

        try:
            compile_error_text(env.get("error_text"), "env.error_text")
        except (TypeError, ValueError) as e:
            raise ConfigError(str(e)) from None


_BUDGETS = ("max_steps", "max_turns", "max_tool_calls")
"""The env's budget keys: a positive integer or null (no limit)."""


def _merge(schema: type, node: DictConfig, prefix: str) -> None:
    try:
        OmegaConf.merge(OmegaConf.structured(schema), node)
    except ValidationError as e:
        key = f"{prefix}{e.full_key}"
        raise ConfigError(f"{key} must be {_describe(_field_type(schema, str(e.full_key)))}, not "
                          f"{_value(e.value)}") from None
    except ConfigKeyError as e:
        key = str(e.full_key)
        parent, _, name = key.rpartition(".")
        known = _names(_field_type(schema, parent) if parent else schema)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        where = f"{prefix}{parent}." if parent else prefix
        hint = (f"did you mean '{where}{close[0]}'?" if close else
                f"known keys: {', '.join(where + k for k in known)}")
        raise ConfigError(f"unknown key '{prefix}{key}' ({hint})") from None


def _names(schema: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else []


def _field_type(schema: type, dotted: str) -> Any:
    """The annotation (a string, under ``from __future__ import annotations``) or dataclass of a dotted key."""
    item = re.fullmatch(r"(.+)\[\d+\]", dotted)  # an item of a list: its element type
    if item is not None:
        outer = str(_field_type(schema, item[1]))
        return outer[5:-1] if outer.startswith("list[") else "Any"
    t: Any = schema
    for part in dotted.split("."):
        fields = {f.name: f for f in dataclasses.fields(t)} if dataclasses.is_dataclass(t) else {}
        if part not in fields:
            return "Any"
        f = fields[part]
        t = f.default_factory() if dataclasses.is_dataclass(f.default_factory) else f.type
        t = type(t) if dataclasses.is_dataclass(t) and not isinstance(t, type) else t
    return t


_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "None": "null",
          "list[int]": "a list of integers", "list[str]": "a list of strings", "Any": "a value"}


def _describe(annotation: Any) -> str:
    """``'int | None'`` -> ``'an integer or null'``."""
    if dataclasses.is_dataclass(annotation):
        return "a mapping"
    parts = [p.strip() for p in str(annotation).split("|")]
    return " or ".join(_WORDS.get(p, "a mapping" if p.startswith("dict") else p) for p in parts)


def _value(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return re.sub(r"\s+", " ", text)[:80]
