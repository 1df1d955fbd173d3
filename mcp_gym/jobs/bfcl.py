"""``mcp-gym tasks import bfcl PATH``: BFCL's multi-turn categories as mcp-gym task files.

PATH is a local copy of the Berkeley Function Calling Leaderboard: an unpacked ``bfcl-eval`` wheel or sdist, or the
gorilla repository's ``berkeley-function-call-leaderboard/`` (any folder holding ``bfcl_eval/``). Nothing of BFCL
ships with mcp-gym and ``bfcl-eval`` is never installed. The import reads the copy as data (JSON, and Python source
parsed with ``ast``, never run): each category's ``BFCL_v*_multi_turn_<category>.json`` and its ``possible_answer/``,
the function docs and the API classes' method signatures. It writes, into ``--out`` (default ``bfcl-multi-turn``),
one task file per category, ``multi_turn_<category>.jsonl``, one task per BFCL task:

* ``id``: BFCL's id (``multi_turn_base_0``); ``prompt``: the first user turn; ``split`` ``test``;
* ``turns``: every user turn (``prompt``), each with its ground truth as ``solution`` (``{"tool", "arguments"}``
  calls, positional arguments named from the method's signature); ``miss_func``'s turn that adds the held-back
  functions has BFCL's own user message for it;
* ``data["bfcl"]``: ``involved_classes``, ``initial_config``, ``missed_function`` (turn -> held-back function names),
  ``long_context``, ``category``;
* ``tags``: ``bfcl``, the category, the involved classes;
* ``grader``: :mod:`mcp_gym.envs.bfcl.grade` (BFCL's own checker, run from the copy the server is started on).

The APIs are served by ``python -m mcp_gym.servers.bfcl --bfcl PATH``; the command printed at the end runs an
evaluation. Anything the copy holds that does not fit (a path out of it, an id twice, a class without docs, a ground
truth call that is not a plain call of literals) is refused with one line naming the task and the file.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_gym.envs.bfcl import check, grade
from mcp_gym.jobs._untrusted import UniqueIds, UntrustedInput, contained_path, read_file
from mcp_gym.recording.atomic import write_text_atomic

__all__ = ["main"]

MAX_STEPS_PER_TURN = 21
"""Steps per turn the printed command budgets: BFCL's ``MAXIMUM_STEP_LIMIT`` (20 model steps) plus the ``submit``."""
_ID = re.compile(r"multi_turn_[a-z_]+_\d+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class ImportResult:
    """What an import wrote: the task file and task count of each category, and the largest number of turns."""

    files: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    max_turns: int = 0


def _read(path: Path, what: str, task: str | None = None) -> str:
    """The text of the copy's file ``path``, only if it is a regular file with one name: a named pipe, socket or device
    (a read that blocks or never ends) or a hard link (whose other name may be ``~/.ssh/id_rsa``) is refused."""
    return read_file(path, what=what, task=task).decode("utf-8")


def _constants(path: Path, what: str) -> dict[str, Any]:
    """Module-level constants of a BFCL source file, read with ``ast``: literals, and f-strings of earlier ones."""
    out: dict[str, Any] = {}

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.value.id in out:
                    parts.append(str(out[v.value.id]))
                else:
                    raise ValueError("not a constant f-string")
            return "".join(parts)
        if isinstance(node, ast.Dict):
            return {value(k): value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return value(node.left) + value(node.right)
        return ast.literal_eval(node)

    for stmt in ast.parse(_read(path, what)).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                out[stmt.targets[0].id] = value(stmt.value)
            except (ValueError, TypeError, SyntaxError, KeyError):
                continue
    return out


def _signatures(path: Path, cls: str, task: str) -> dict[str, list[str]]:
    """Method name -> parameter names (without ``self``) of class ``cls`` in a BFCL source file (``ast``)."""
    for node in ast.parse(_read(path, f"the source of {cls}", task)).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {f.name: [a.arg for a in [*f.args.posonlyargs, *f.args.args][1:]]
                    for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    raise ValueError(f"{path}: no class {cls}")


def _json(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(f"{value!r} is not JSON")


def gt_call(text: str, signatures: dict[str, list[str]]) -> dict[str, Any]:
    """One BFCL ground-truth call (``sort('final_report.pdf')``) as ``{"tool", "arguments"}``; positional arguments
    are named from ``signatures`` (method -> parameter names). ``ValueError`` for anything but a plain call of a
    known function with literal arguments."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"ground truth {text!r} is not a plain function call")
    name = node.func.id
    if name not in signatures:
        raise ValueError(f"ground truth {text!r} calls {name!r}, not a function of the task's classes")
    params = signatures[name]
    if len(node.args) > len(params):
        raise ValueError(f"ground truth {text!r} passes {len(node.args)} positional arguments to {name}({params})")
    arguments: dict[str, Any] = {}
    for pname, arg in zip(params, node.args, strict=False):
        arguments[pname] = _json(ast.literal_eval(arg))
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"ground truth {text!r} uses **")
        arguments[kw.arg] = _json(ast.literal_eval(kw.value))
    return {"tool": name, "arguments": arguments}


class _Copy:
    """What the import reads of a BFCL copy besides the task data: class files, function docs, signatures."""

    def __init__(self, root: Path) -> None:
        self.root = root
        pkg = check.PACKAGE
        what = "BFCL's executable_backend_config"
        backend = _constants(contained_path(root, f"{pkg}/constants/executable_backend_config.py", what=what), what)
        self.modules: dict[str, str] = dict(backend.get("CLASS_FILE_PATH_MAPPING") or {})
        self.doc_files: dict[str, str] = dict(backend.get("MULTI_TURN_FUNC_DOC_FILE_MAPPING") or {})
        what = "BFCL's default_prompts"
        prompts = _constants(contained_path(root, f"{pkg}/constants/default_prompts.py", what=what), what)
        self.more_functions = str(prompts.get("DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC") or
                                  "I have updated some more functions you can choose from. What about now?")
        self._docs: dict[str, list[str]] = {}
        self._sigs: dict[str, dict[str, list[str]]] = {}

    def functions(self, cls: str, task: str) -> list[str]:
        """The documented function names of ``cls``."""
        if cls not in self._docs:
            if cls not in self.doc_files or cls not in self.modules:
                raise UntrustedInput(f"task {task}: class {cls!r} has no module or function docs in BFCL's "
                                     "executable_backend_config")
            path = contained_path(self.root, f"{check.PACKAGE}/data/multi_turn_func_doc/{self.doc_files[cls]}",
                                  what="function docs", task=task)
            self._docs[cls] = [str(json.loads(line)["name"]) for line in _read(path, "function docs", task).splitlines()
                               if line.strip()]
        return self._docs[cls]

    def signatures(self, cls: str, task: str) -> dict[str, list[str]]:
        """Method -> parameter names of ``cls``, from its source file."""
        if cls not in self._sigs:
            module = self.modules[cls]
            if not module.startswith(check.PACKAGE + ".") or not all(_NAME.fullmatch(p) for p in module.split(".")):
                raise UntrustedInput(f"task {task}: class {cls!r} lives in {module!r}, not a module of {check.PACKAGE}")
            path = contained_path(self.root, module.replace(".", "/") + ".py", what=f"the source of {cls}", task=task)
            self._sigs[cls] = _signatures(path, cls, task)
        return self._sigs[cls]


def _task(copy: _Copy, category: str, entry: dict[str, Any], ground_truth: list[list[str]]) -> dict[str, Any]:
    task = str(entry["id"])
    if not _ID.fullmatch(task) or check.category_of(task) != category:
        raise UntrustedInput(f"task {task!r} of category {category}: not a BFCL multi-turn id of that category")
    classes = entry.get("involved_classes")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise UntrustedInput(f"task {task}: involved_classes is not a list of class names")
    functions: list[str] = []
    signatures: dict[str, list[str]] = {}
    for cls in classes:
        functions += copy.functions(cls, task)
        signatures.update({k: v for k, v in copy.signatures(cls, task).items() if not k.startswith("_")})
    config = entry.get("initial_config") or {}
    if not isinstance(config, dict):
        raise UntrustedInput(f"task {task}: initial_config is not an object")
    missed_raw = entry.get("missed_function") or {}
    if not isinstance(missed_raw, dict):
        raise UntrustedInput(f"task {task}: missed_function is not an object")
    missed: dict[str, list[str]] = {}
    for turn, names in missed_raw.items():
        if not str(turn).isdigit() or not isinstance(names, list) or not all(n in functions for n in names):
            raise UntrustedInput(f"task {task}: missed_function {turn!r}: {names!r} are not functions of its classes")
        missed[str(int(turn))] = [str(n) for n in names]
    question = entry.get("question")
    if not isinstance(question, list) or len(question) != len(ground_truth):
        raise UntrustedInput(f"task {task}: {len(question) if isinstance(question, list) else 'no'} question turns, "
                             f"{len(ground_truth)} ground-truth turns")
    turns = []
    for i, (messages, calls) in enumerate(zip(question, ground_truth, strict=True)):
        if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                                     for m in messages):
            raise UntrustedInput(f"task {task}: turn {i} is not a list of messages with text content")
        if not messages and str(i) not in missed:
            raise UntrustedInput(f"task {task}: turn {i} has no user message and adds no functions")
        prompt = "\n\n".join(m["content"] for m in messages) if messages else copy.more_functions
        try:
            solution = [gt_call(c, signatures) for c in calls]
        except (ValueError, SyntaxError) as e:
            raise UntrustedInput(f"task {task}: turn {i}: {e}") from None
        turns.append({"prompt": prompt, "solution": solution})
    long_context = "long_context" in category or "composite" in category
    return {"id": task, "prompt": turns[0]["prompt"], "split": "test", "turns": turns,
            "tags": ["bfcl", category, *classes],
            "data": {"bfcl": {"category": category, "involved_classes": classes, "initial_config": config,
                              "missed_function": missed, "long_context": long_context}},
            "grader": dict(grade.GRADER_SPEC)}


def import_bfcl(path: str | Path, out: str | Path = "bfcl-multi-turn",
                categories: Sequence[str] = check.CATEGORIES) -> ImportResult:
    """Import BFCL's multi-turn ``categories`` from the copy at ``path`` into the folder ``out`` (see the module).
    Raises ``FileNotFoundError`` (no BFCL there, a category missing) or
    :class:`~mcp_gym.jobs._untrusted.UntrustedInput` (one line naming the task and file)."""
    root = check.find_root(path)
    copy = _Copy(root)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = UniqueIds()
    result = ImportResult()
    for category in categories:
        if category not in check.CATEGORIES:
            raise ValueError(f"unknown BFCL multi-turn category {category!r}; "
                             f"choose from {', '.join(check.CATEGORIES)}")
        source = check.data_file(root, category)
        rows = []
        data = check.entries(root, category, read=lambda p: _read(p, "BFCL's data file"))
        for task_id, (entry, ground_truth) in data.items():
            rec = _task(copy, category, entry, ground_truth)
            ids.add(rec["id"], f"{source.name}:{task_id}")
            rows.append(rec)
            result.max_turns = max(result.max_turns, len(rec["turns"]))
        target = out / f"multi_turn_{category}.jsonl"
        # through a new randomly named sibling: never through a symlink planted at a predictable name in --out
        write_text_atomic(target, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        result.files[category] = target
        result.counts[category] = len(rows)
    return result


FIRST_LOOK = "env.max_tasks=5 samples=1"
"""The overrides of the printed small slice: the first 5 tasks, one sample each (its run grows into the full one)."""


def server_command(root: Path) -> str:
    """The server command line of the printed commands (this Python, so the server finds mcp-gym)."""
    return f"{shlex.quote(sys.executable)} -m mcp_gym.servers.bfcl --bfcl {shlex.quote(str(root))}"


def commands(root: Path, result: ImportResult, category: str = "base") -> tuple[str, str]:
    """The ``eval`` and ``tasks validate`` commands for one category's task file (another ``env.tasks=`` appended
    picks another)."""
    overrides = (f"env=custom {shlex.quote('+env.servers.bfcl=' + json.dumps(server_command(root)))} "
                 f"env.tasks={shlex.quote(str(result.files[category].resolve()))} "
                 f"env.max_steps={MAX_STEPS_PER_TURN * max(result.max_turns, 1)}")
    return f"mcp-gym eval {overrides} policy=noop", f"mcp-gym tasks validate {overrides}"


def main(argv: list[str]) -> int:
    """``mcp-gym tasks import bfcl PATH [--out DIR] [--category NAME ...]``; returns the exit status."""
    import argparse

    p = argparse.ArgumentParser(prog="mcp-gym tasks import bfcl", description="Import BFCL's multi-turn categories "
                                "from a local copy of BFCL (an unpacked bfcl-eval wheel or sdist) as task files.")
    p.add_argument("path", help="the BFCL copy (holding bfcl_eval/)")
    p.add_argument("--out", default="bfcl-multi-turn", help="the folder to write (default bfcl-multi-turn)")
    p.add_argument("--category", action="append", choices=list(check.CATEGORIES),
                   help="a category to import (repeatable; default: all four)")
    a = p.parse_args(argv)
    try:
        result = import_bfcl(a.path, a.out, a.category or check.CATEGORIES)
    except (FileNotFoundError, ValueError, OSError, KeyError) as e:
        from mcp_gym._terminal import printable

        print(printable(f"mcp-gym tasks import bfcl: {e}"), file=sys.stderr)  # the copy's text: no escapes
        return 1
    root = check.find_root(a.path)
    for category, target in result.files.items():
        print(f"wrote {target}: {result.counts[category]} tasks (multi_turn_{category})")
    first = next(iter(result.files))
    run, validate = commands(root, result, first)
    print(f"evaluate with: {run}")
    print(f"a first look (5 tasks, 1 sample each; the command above then runs only the rest): {run} "
          f"{FIRST_LOOK}")
    print(f"check the ground truth with: {validate}")
    print(f"other categories: append env.tasks={Path(a.out).resolve()}/multi_turn_<category>.jsonl")
    return 0
