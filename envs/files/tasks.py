"""Files environment: tasks in a sandboxed per-episode workspace served by ``mcp_gym.servers.files``.

Three task kinds, generated deterministically (no data files); ``Task.data["files"]`` is the initial tree
``{relative path: content}`` (plus ``data["dirs"]`` for empty folders):

* ``organise`` — move every file of the workspace root into a folder named after its extension.
* ``find`` — answer which file mentions a code, or which order number belongs to a customer (needs search).
* ``edit`` — change one value in one of several similar config files, leaving everything else unchanged.

The verifier grades the final tree from the server's ``mcp_gym_state`` snapshot (``{"files": {path: content}}``)
and/or the submitted answer.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any

from mcp_gym.envs._common import call, cycle_tasks, submit, task_lookup
from mcp_gym.tasks import Task, normalise_answer

__all__ = ["SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "OBSERVE_RESOURCES", "generate_tasks", "verify"]

SERVER = "files"
MAX_STEPS = 30
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = []
N_TASKS = 150
KINDS = ("organise", "find", "edit")

BASENAMES = (
    "report", "budget", "notes", "todo", "summary", "draft", "invoice", "readme", "agenda", "backup", "roadmap",
    "minutes", "metrics", "changelog", "schedule", "inventory", "contacts", "ideas"
)
EXTENSIONS = ("txt", "md", "csv", "json", "py", "log")
FOLDERS = ("docs", "reports/2023", "reports/2024", "src", "notes", "data", "projects/alpha", "projects/beta")
NAMES = (
    "Ada Okafor",
    "Bruno Lindqvist",
    "Chloe Moreau",
    "Dario Tanaka",
    "Elena Novak",
    "Farid Haddad",
    "Greta Kowalski",
    "Hiro Brennan",
    "Ines Castillo",
    "Jonas Larsen",
    "Keiko Rossi",
    "Luca Vargas",
)
TOPICS = ("the release", "the migration", "hiring", "the audit", "pricing", "the offsite", "onboarding", "support")
VERBS = ("reviewed", "postponed", "discussed", "approved", "drafted", "summarised")


# -- content generation ----------------------------------------------------------------------------------------
def _sentence(rng: random.Random) -> str:
    return f"{rng.choice(NAMES).split()[0]} {rng.choice(VERBS)} {rng.choice(TOPICS)} on day {rng.randint(1, 28)}."


def _content(rng: random.Random, ext: str, extra: str | None = None) -> str:
    """Plausible text for a file of type ``ext``; ``extra`` (a line) is embedded somewhere if given."""
    if ext == "csv":
        lines = ["id,name,amount"] + [f"{i},{rng.choice(NAMES)},{rng.randint(5, 900)}" for i in range(1, 5)]
    elif ext == "json":
        obj = {"name": rng.choice(BASENAMES), "version": rng.randint(1, 9), "owner": rng.choice(NAMES)}
        lines = json.dumps(obj, indent=2).splitlines()
    elif ext == "py":
        lines = [f"def {rng.choice(BASENAMES)}_total(items):", "    return sum(items)"]
    elif ext == "log":
        lines = [f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} INFO {_sentence(rng)}" for _ in range(3)]
    else:
        lines = [_sentence(rng) for _ in range(rng.randint(2, 4))]
    if extra is not None:
        lines.insert(rng.randint(0, len(lines)), extra if ext not in ("json", "py") else f"# {extra}")
    return "\n".join(lines) + "\n"


def _unique_names(rng: random.Random, n: int, exts: tuple[str, ...]) -> list[tuple[str, str]]:
    """``n`` distinct ``(basename, extension)`` pairs."""
    pairs = [(b, e) for b in BASENAMES for e in exts]
    return rng.sample(pairs, n)


# -- task kinds ------------------------------------------------------------------------------------------------
def _organise(rng: random.Random, task_id: str, split: str) -> Task:
    exts = tuple(rng.sample(EXTENSIONS, rng.randint(2, 4)))
    names = _unique_names(rng, rng.randint(6, 9), exts)
    files = {f"{b}.{e}": _content(rng, e) for b, e in names}
    for b, e in _unique_names(rng, rng.randint(1, 2), EXTENSIONS):
        files[f"archive/{b}-old.{e}"] = _content(rng, e)
    moves = {f"{b}.{e}": f"{e}/{b}.{e}" for b, e in names}
    prompt = (
        "Tidy up the workspace: move every file that sits directly in the workspace root into a folder named after "
        "its extension, without the dot (for example 'notes.txt' -> 'txt/notes.txt'). Do not change file contents "
        "and leave files that are already in subfolders where they are. Submit 'done' when finished."
    )
    solution = (*(call("move_file", source=s, destination=d) for s, d in moves.items()), submit("done"))
    return Task(task_id, prompt, split, solution, None, {"kind": "organise", "files": files, "moves": moves})


def _find(rng: random.Random, task_id: str, split: str) -> Task:
    paths = [f"{rng.choice(FOLDERS)}/{b}.{e}" for b, e in _unique_names(rng, rng.randint(8, len(NAMES)), EXTENSIONS)]
    by_code = rng.random() < 0.5
    customers = rng.sample(NAMES, len(paths))
    codes = rng.sample(range(10000, 99999), len(paths))
    files = {}
    for i, p in enumerate(paths):
        line = (
            f"Invoice INV-{codes[i]} was sent to accounting."
            if by_code
            else f"Customer {customers[i]} placed order ORD-{codes[i]}."
        )
        # Most files carry a look-alike line, so the answer needs a precise search, not a guess.
        files[p] = _content(rng, p.rsplit(".", 1)[1], line if i == 0 or rng.random() < 0.7 else None)
    if by_code:
        query = f"INV-{codes[0]}"
        prompt = (
            f"Which file mentions invoice {query}? Answer with the file's path relative to the workspace root "
            "(for example docs/readme.md)."
        )
        answer = paths[0]
    else:
        query = customers[0]
        prompt = f"One of the files says which order the customer {query} placed. What is the order number?"
        answer = f"ORD-{codes[0]}"
    solution = (call("search_files", query=query), submit(answer))
    return Task(task_id, prompt, split, solution, answer, {"kind": "find", "files": files, "source": paths[0]})


_INI_SECTIONS = {
    "server": {"listen_port": (8000, 9000), "workers": (2, 16), "request_timeout": (10, 120)},
    "database": {"db_port": (5000, 6000), "max_connections": (20, 200), "pool_size": (2, 30)},
    "cache": {"cache_ttl": (60, 3600), "cache_size_mb": (64, 1024)},
}


def _config(rng: random.Random, fmt: str) -> tuple[str, dict[str, int]]:
    """A config file text in ``fmt`` (ini, env or json) and its integer settings."""
    values = {k: rng.randint(*span) for sec in _INI_SECTIONS.values() for k, span in sec.items()}
    if fmt == "ini":
        blocks = [
            f"[{name}]\n" + "".join(f"{k} = {values[k]}\n" for k in keys) for name, keys in _INI_SECTIONS.items()
        ]
        return "# service settings\n" + "\n".join(blocks), values
    if fmt == "env":
        return "".join(f"{k.upper()}={v}\n" for k, v in values.items()), values
    return json.dumps(values, indent=2) + "\n", values


def _set_value(text: str, fmt: str, key: str, value: int) -> str:
    """``text`` with ``key`` set to ``value`` (the file's own layout kept)."""
    if fmt == "json":
        data = json.loads(text)
        data[key] = value
        return json.dumps(data, indent=2) + "\n"
    name = key.upper() if fmt == "env" else key
    pattern = re.compile(rf"^({re.escape(name)}\s*=\s*).*$", re.MULTILINE)
    return pattern.sub(lambda m: f"{m.group(1)}{value}", text, count=1)


def _edit(rng: random.Random, task_id: str, split: str) -> Task:
    fmt = rng.choice(("ini", "env", "json"))
    ext = {"ini": "ini", "env": "env", "json": "json"}[fmt]
    envs = rng.sample(("production", "staging", "development", "testing"), 3)
    files: dict[str, str] = {}
    settings: dict[str, dict[str, int]] = {}
    for env in envs:
        files[f"config/{env}.{ext}"], settings[env] = _config(rng, fmt)
    files["README.md"] = f"# Service\n\nSettings live in config/*.{ext}, one file per environment.\n"
    target_env = envs[0]
    path = f"config/{target_env}.{ext}"
    key = rng.choice(sorted(settings[target_env]))
    old = settings[target_env][key]
    new = old + rng.choice((-1, 1)) * rng.randint(1, max(2, old // 2))
    shown = key.upper() if fmt == "env" else key
    prompt = (
        f"In {path}, change the setting {shown} from {old} to {new}. Leave everything else in that file and all "
        "other files unchanged. Submit 'done' when finished."
    )
    expected = _set_value(files[path], fmt, key, new)
    solution = (call("read_file", path=path), call("write_file", path=path, content=expected), submit("done"))
    data = {"kind": "edit", "files": files, "path": path, "format": fmt, "expected": expected}
    return Task(task_id, prompt, split, solution, None, data)


_MAKERS = {"organise": _organise, "find": _find, "edit": _edit}


def generate_tasks(seed: int = 0) -> list[Task]:
    """The Files task set: :data:`N_TASKS` tasks cycling through :data:`KINDS`, reproducible from ``seed``.

    Every 5th task is in the ``"test"`` split, the rest in ``"train"``.
    """
    return cycle_tasks(SERVER, seed, N_TASKS, KINDS, _MAKERS)


task_by_id = task_lookup(generate_tasks)


# -- verification ----------------------------------------------------------------------------------------------
def normalize_path(path: str | None) -> str:
    """A workspace path in canonical form for comparison: forward slashes, no leading ``/`` or ``./``."""
    p = normalise_answer(path).replace("\\", "/")
    while p.startswith(("./", "/")):
        p = p[1:] if p.startswith("/") else p[2:]
    return p


def _same_text(a: str | None, b: str | None) -> bool:
    """Equal up to line endings and trailing whitespace at line ends / file end."""
    if a is None or b is None:
        return False

    def canon(s: str) -> list[str]:
        return [ln.rstrip() for ln in s.replace("\r\n", "\n").rstrip().split("\n")]

    return canon(a) == canon(b)


def _same_config(a: str | None, b: str | None, fmt: str) -> bool:
    """Equal as settings: JSON by value, ini/env line by line ignoring spaces around ``=``."""
    if a is None or b is None:
        return False
    if fmt == "json":
        try:
            return json.loads(a) == json.loads(b)
        except ValueError:
            return False

    def canon(s: str) -> list[str]:
        return [re.sub(r"\s*=\s*", "=", ln.strip(), count=1) for ln in s.splitlines() if ln.strip()]

    return canon(a) == canon(b)


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """Reward in [0, 1] for ``task`` given the final ``answer`` and the server's snapshot ``state``.

    * ``find``: 1 iff the answer equals the expected path (normalised) or order number.
    * ``organise``: fraction of root files found at ``<ext>/<name>`` with their original content and gone from the
      root, times the fraction of files already in subfolders that stayed unchanged (doing nothing scores 0).
    * ``edit``: 1 iff the target file has the new value and otherwise the same settings, and every other original
      file is unchanged.
    """
    data = task.data
    files: Mapping[str, str] = state.get("files", {})
    kind = data.get("kind")
    if kind == "find":
        return float(task.answer is not None and normalize_path(answer) == normalize_path(task.answer))
    if kind == "organise":
        moves: Mapping[str, str] = data["moves"]
        original: Mapping[str, str] = data["files"]
        moved = sum(src not in files and _same_text(files.get(dst), original[src]) for src, dst in moves.items())
        kept = [p for p in original if p not in moves]
        intact = sum(_same_text(files.get(p), original[p]) for p in kept)
        return moved / len(moves) * (intact / len(kept) if kept else 1.0)
    if kind == "edit":
        target = data["path"]
        if not _same_config(files.get(target), data["expected"], data["format"]):
            return 0.0
        others = (p for p in data["files"] if p != target)
        return float(all(_same_text(files.get(p), data["files"][p]) for p in others))
    return 0.0
