"""``mcp-gym tasks import mcpmark PATH``: a local checkout of MCPMark's filesystem tasks as an mcp-gym task file.

MCPMark (https://github.com/eval-sys/mcpmark) keeps each filesystem task in ``tasks/filesystem/[standard/]<category>/
<task>/``: ``description.md`` (the prompt), ``meta.json`` (``task_id``, ``category_id``, ``difficulty``, ``tags``, and
the URL of the category's initial state, a zip) and ``verify.py`` (checks the final file tree under the directory named
by ``$FILESYSTEM_TEST_DIR``; exit status 0 is a pass). A category's initial state is the folder
``test_environments/<category>/`` of the checkout, or ``<category>.zip`` the user downloaded (``--states DIR``).

The import writes, into ``--out`` (default ``mcpmark-filesystem``)::

    tasks.jsonl           # one task per MCPMark task: prompt, fixture, tags (category, difficulty, MCPMark's tags)
    states/<category>/    # each category's initial state (a task's fixture, copied into every episode's workspace)
    verify/<id>.py        # each task's own verify.py, unchanged
    mcpmark_grader.py     # the grader: runs verify/<id>.py on the episode's workspace (python grader)

Nothing of the benchmark ships with mcp-gym: everything is read from the user's checkout.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["import_mcpmark", "main"]

GRADER_MODULE = "mcpmark_grader"
PROMPT_SUFFIX = "\n\nThe files of this task are in the directory {workspace}."
"""Appended to each description: MCPMark's descriptions do not say where the files are (its agent learns the test
directory from the filesystem server)."""

_GRADER = '''"""Grades the tasks imported by ``mcp-gym tasks import mcpmark``: runs the task's own
``verify/<id>.py`` (MCPMark's verify.py, unchanged) on the episode's workspace, ``$FILESYSTEM_TEST_DIR``; exit status
0 is a pass.

The script is looked up by task id in this file's own ``verify/`` folder, never at a path the task file names."""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMEOUT = 120  # seconds a verify.py may run


def verify(task, answer, state):
    """``{score, passed, reason}`` of the episode: verify.py's exit status and the last lines it printed."""
    script = HERE / "verify" / (re.sub(r"[^A-Za-z0-9_.-]", "_", task.id) + ".py")
    workspace = task.data["workspace"]
    env = {**os.environ, "FILESYSTEM_TEST_DIR": workspace}
    try:
        done = subprocess.run([sys.executable, str(script)], cwd=workspace, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"score": 0.0, "passed": False, "reason": f"verify.py ran over {TIMEOUT} s"}
    lines = [x.strip() for x in (done.stdout + "\\n" + done.stderr).splitlines() if x.strip()]
    tail = " | ".join(lines[-3:])
    passed = done.returncode == 0
    return {"score": 1.0 if passed else 0.0, "passed": passed, "reason": f"verify.py exit {done.returncode}: {tail}"}
'''


@dataclass
class ImportResult:
    """What an import wrote: the task file and the number of tasks per category."""

    tasks_file: Path
    categories: dict[str, int] = field(default_factory=dict)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _task_dirs(root: Path) -> list[Path]:
    base = root / "tasks" / "filesystem"
    if not base.is_dir():
        raise FileNotFoundError(f"{root}: no tasks/filesystem/ folder (is it a checkout of MCPMark?)")
    return sorted(p.parent for p in base.rglob("description.md") if (p.parent / "verify.py").is_file())


def _extract(archive: Path, category: str, target: Path) -> None:
    """Extract a state zip into ``target``: its ``<category>/`` folder if it has one, else everything in it."""
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if not n.startswith("__MACOSX/")]
        top = {PurePosixPath(n).parts[0] for n in names if PurePosixPath(n).parts}
        prefix = f"{category}/" if top == {category} else ""
        for info in z.infolist():
            if info.filename not in names or not info.filename.startswith(prefix) or info.is_dir():
                continue
            rel = PurePosixPath(info.filename[len(prefix):])
            if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                raise ValueError(f"{archive}: entry {info.filename!r} leads out of the state folder")
            dest = target.joinpath(*rel.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, dest.open("wb") as out:
                shutil.copyfileobj(src, out)


def _state(root: Path, states: Path | None, category: str, out: Path) -> str:
    """Copy a category's initial state into ``out/states/<category>`` (once) and return that fixture path."""
    rel = f"states/{_safe(category)}"
    target = out / rel
    if target.is_dir():
        return rel
    folders = [d / category for d in (states, root / "test_environments") if d is not None]
    zips = [d / f"{category}.zip" for d in (states, root / "test_environments", root) if d is not None]
    folder = next((f for f in folders if f.is_dir()), None)
    archive = next((z for z in zips if z.is_file()), None)
    if folder is not None:
        shutil.copytree(folder, target, symlinks=True)  # the task file's checks see them
    elif archive is not None:
        target.mkdir(parents=True)
        try:
            _extract(archive, category, target)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    else:
        raise FileNotFoundError(f"no initial state for category {category!r}: none of "
                                f"{', '.join(str(p) for p in folders + zips)} exists (download it from the task's "
                                "meta.json stateUrl)")
    return rel


def import_mcpmark(path: str | Path, out: str | Path = "mcpmark-filesystem", *,
                   states: str | Path | None = None) -> ImportResult:
    """Import the filesystem tasks of the MCPMark checkout at ``path`` into the folder ``out`` (see the module).

    ``states`` is a folder holding the categories' initial states (``<category>/`` folders or ``<category>.zip``);
    by default they are looked up in the checkout's ``test_environments/``. Raises ``FileNotFoundError`` naming what is
    missing (no ``tasks/filesystem/``, a category without an initial state)."""
    root, out = Path(path).expanduser().resolve(), Path(out)
    states_dir = Path(states).expanduser().resolve() if states is not None else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify").mkdir(exist_ok=True)
    result = ImportResult(out / "tasks.jsonl")
    rows: list[dict[str, Any]] = []
    for folder in _task_dirs(root):
        meta_file = folder / "meta.json"
        meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
        category = str(meta.get("category_id") or folder.parent.name)
        name = str(meta.get("task_id") or folder.name)
        task_id = f"{_safe(category)}__{_safe(name)}"
        fixture = _state(root, states_dir, category, out)
        shutil.copyfile(folder / "verify.py", out / "verify" / f"{task_id}.py")
        tags = [category, *([str(meta["difficulty"])] if meta.get("difficulty") else []),
                *(str(t) for t in meta.get("tags") or ())]
        rows.append({"id": task_id, "prompt": (folder / "description.md").read_text(encoding="utf-8").strip()
                     + PROMPT_SUFFIX, "fixture": fixture, "tags": list(dict.fromkeys(tags)),
                     "grader": f"{GRADER_MODULE}:verify",  # a python grader
                     "data": {"workspace": "{workspace}"}})
        result.categories[category] = result.categories.get(category, 0) + 1
    (out / f"{GRADER_MODULE}.py").write_text(_GRADER, encoding="utf-8")
    tmp = out / ".tasks.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(result.tasks_file)
    return result


def main(argv: list[str]) -> int:
    """``mcp-gym tasks import mcpmark PATH [--out DIR] [--states DIR]``; returns the exit status."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="mcp-gym tasks import", description="Import a local checkout of a public "
                                "benchmark as an mcp-gym task file (MCPMark's filesystem tasks).")
    p.add_argument("benchmark", choices=["mcpmark"], help="the benchmark's layout")
    p.add_argument("path", help="the local checkout (holding tasks/filesystem/)")
    p.add_argument("--out", default="mcpmark-filesystem", help="the folder to write (default mcpmark-filesystem)")
    p.add_argument("--states", help="a folder with the initial states (<category>/ or <category>.zip); default: "
                   "the checkout's test_environments/")
    a = p.parse_args(argv)
    try:
        result = import_mcpmark(a.path, a.out, states=a.states)
    except (FileNotFoundError, ValueError, OSError, zipfile.BadZipFile) as e:
        print(f"mcp-gym tasks import: {e}", file=sys.stderr)
        return 1
    n = sum(result.categories.values())
    print(f"wrote {result.tasks_file}: {n} tasks ({', '.join(f'{c} {k}' for c, k in result.categories.items())})")
    print(f"evaluate with: PYTHONPATH={Path(a.out).resolve()} mcp-gym eval env=custom "
          f"'+env.servers.fs=\"npx -y @modelcontextprotocol/server-filesystem {{workspace}}\"' "
          f"env.tasks={result.tasks_file} policy=noop")
    return 0
