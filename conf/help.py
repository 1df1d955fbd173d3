"""``mcp-gym <job> --help``: one readable page of the job's config keys, their defaults and what they do.

The page is built from the Hydra config files themselves (``conf/``): a key's description is its trailing
``# comment`` (comment lines just above a key add to it), an option's description is its file's first comment lines.
So the help cannot drift from the defaults; ``tests/test_first_hour.py`` checks that every key has a description.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

__all__ = ["job_help"]

JOB_GROUPS: dict[str, tuple[str, ...]] = {
    "collect": ("env", "policy", "recorder", "launcher"),
    "eval": ("env", "policy", "recorder", "launcher"),
    "demo": ("env", "launcher"),
    "export_sft": (),
    "validate_tasks": ("env",),
    "generate_tasks": ("env", "generator", "policy"),
}
"""Per job (option of the ``job`` group): the config groups it reads."""
DEFAULTS = {"env": "sql", "policy": "random", "recorder": "parquet", "launcher": "local", "generator": "explore"}
SKIP = ("defaults", "hydra")  # Hydra's own blocks: not job keys
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?P<rest>.*)$")
_COMMENTED_KEY = re.compile(r"^(?P<key>[a-z_]+): (?P<doc>.+)$")  # "# system_prompt: ..." documents an optional key
WIDTH = 118


@dataclass
class ConfKey:
    """One key of a config file: dotted path (inside its group), default as written, description."""

    path: str
    default: str
    doc: str


@dataclass
class ConfFile:
    """A config file's description (its leading comment) and keys, in file order."""

    doc: str
    keys: list[ConfKey] = field(default_factory=list)


def _split_comment(rest: str) -> tuple[str, str]:
    m = re.search(r"(^|\s)#\s?(.*)$", rest)
    if m is None:
        return rest.strip(), ""
    return rest[: m.start()].strip(), m.group(2).strip()


def read_conf(relpath: str) -> ConfFile:
    """Parse ``conf/<relpath>`` (simple Hydra YAML: ``key: value  # comment``, nested mappings)."""
    text = resources.files("mcp_gym.conf").joinpath(relpath).read_text(encoding="utf-8")
    out = ConfFile(doc="")
    header: list[str] = []
    pending: list[str] = []  # comment lines above the next key
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    skip_indent: int | None = None
    seen_key = False
    trailing: tuple[int, ConfKey, str] | None = None  # the last key line's own comment: its column, the key, its text
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            raw = stripped[1:]
            comment = raw.strip()
            if trailing is not None and line.index("#") == trailing[0] > 0:  # continues the key's comment above
                col, key, own = trailing
                key.doc = f"{own} {comment}" + key.doc[len(own):]  # before the notes that were above the key
                trailing = (col, key, f"{own} {comment}")
                continue
            trailing = None
            if comment.startswith("@package") or raw.startswith("  "):  # indented lines are examples
                continue
            m = _COMMENTED_KEY.match(comment)
            if seen_key and m:
                out.keys.append(ConfKey(".".join([*(k for _, k in stack), "+" + m["key"]]), "", m["doc"]))
            else:
                (pending if seen_key else header).append(comment)
            continue
        m = _KEY.match(line)
        trailing = None
        if m is None:
            continue
        seen_key = True
        indent = len(m["indent"])
        if skip_indent is not None and indent > skip_indent:
            continue
        skip_indent = None
        if indent == 0 and m["key"] in SKIP:
            skip_indent, pending = 0, []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, own = _split_comment(m["rest"])
        doc = " ".join([own, *pending]).strip()  # the key's own comment first, then the notes above it
        pending = []
        path = ".".join([*(k for _, k in stack), m["key"]])
        if value == "":  # a mapping: its keys follow (an empty value with no nested keys reads as null)
            stack.append((indent, m["key"]))
            if doc:
                out.keys.append(ConfKey(path, "", doc))
            continue
        if value[:1] in "[{":  # as an override is typed: 'pass_k=[1,2,4]'
            value = re.sub(r",\s+", ",", value)
        out.keys.append(ConfKey(path, value, doc))
        hash_at = line.find("#", len(line) - len(m["rest"]))
        if own and hash_at > 0 and line[hash_at - 1].isspace():  # lines below at that column continue it
            trailing = (hash_at, out.keys[-1], own)
    out.doc = " ".join(c for c in header if c).rstrip(":")
    return out


def _options(group: str) -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("mcp_gym.conf").joinpath(group).iterdir()
                  if p.name.endswith(".yaml"))


def _first_sentence(text: str, limit: int = 70) -> str:
    m = re.match(r"(.+?)\.(\s|$)", text)
    s = m.group(1) if m else text
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False) or [indent.rstrip()]


def _rows(prefix: str, keys: Sequence[ConfKey]) -> list[str]:
    cells = [((f"+{prefix}{k.path.replace('+', '')}" if "+" in k.path else f"{prefix}{k.path}")
              + (f"={k.default}" if k.default else ""), k.doc) for k in keys]
    width = min(max((len(c) for c, _ in cells), default=0), 36)
    lines = []
    for c, doc in cells:
        pad = " " * (width + 4)
        if len(c) > width:
            lines.append(f"  {c}")
            lines += _wrap(doc, pad) if doc else []
        else:
            wrapped = _wrap(doc, pad) if doc else [""]
            lines.append(f"  {c:{width}}  {wrapped[0].strip()}".rstrip())
            lines += wrapped[1:]
    return lines


def job_help(command: str, job: str, overrides: Sequence[str] = ()) -> str:
    """The help page of ``mcp-gym <command>`` (``job``: its option of the ``job`` group). Group choices among the
    ``overrides`` (``policy=openai``) select which option's keys are shown."""
    chosen = dict(DEFAULTS)
    for o in overrides:
        group, _, option = o.partition("=")
        if group in chosen and option in _options(group):
            chosen[group] = option
    spec = read_conf(f"job/{job}.yaml")
    top = read_conf("config.yaml")
    lines = [f"usage: mcp-gym {command} [group=option ...] [key=value ...]", "", *_wrap(spec.doc), "",
             *_wrap("Set a key with key=value (Hydra overrides: a list as 'runs=[a,b]'; '+key=value' adds a key the "
                    "config does not have; -m key=a,b runs each value). Defaults are shown; ${...} is filled in from "
                    "another key or an environment variable."), "", "Job keys:"]
    lines += _rows("", [k for k in spec.keys if k.path != "command"] + top.keys)
    for group in JOB_GROUPS.get(job, ()):
        option = chosen[group]
        conf = read_conf(f"{group}/{option}.yaml")
        lines += ["", *_wrap(f"{group}={option}: {conf.doc}")]
        others = [f"{o} ({_first_sentence(read_conf(f'{group}/{o}.yaml').doc)})" for o in _options(group)
                  if o != option]
        lines += _rows(f"{group}.", [k for k in conf.keys if k.path != "kind"])
        if others:
            lines += _wrap(f"other options: {'; '.join(others)}", "  ")
    groups = f"mcp-gym {command} <group>=<option> --help shows that option's keys; " if JOB_GROUPS.get(job) else ""
    lines += ["", *_wrap(f"{groups}--cfg job prints the composed config; --hydra-help shows Hydra's own flags. "
                         "docs/jobs.md has examples.")]
    return "\n".join(lines)
