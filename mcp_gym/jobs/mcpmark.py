"""``mcp-gym tasks import mcpmark PATH``: a local checkout of MCPMark's filesystem tasks as an mcp-gym task file.

MCPMark (https://github.com/eval-sys/mcpmark) keeps each filesystem task in ``tasks/filesystem/[<level>/]<category>/
<task>/`` (the levels are ``easy/`` and ``standard/``): ``description.md`` (the prompt), ``meta.json`` (``task_id``,
``category_id``, ``difficulty``, ``tags``, and the URL of the category's initial state, a zip) and ``verify.py``
(checks the final file tree under the directory named by ``$FILESYSTEM_TEST_DIR``; exit status 0 is a pass). A
category's initial state is the folder ``<category>/`` or the zip ``<category>.zip`` in ``--states DIR`` or, failing
that, in the checkout's ``test_environments/``.

The import writes, into ``--out`` (default ``mcpmark-filesystem``)::

    tasks.jsonl           # one task per MCPMark task: prompt, fixture, tags (category, level:<level>, difficulty, ...)
    states/<category>/    # each category's initial state (a task's fixture, copied into every episode's workspace)
    verify/<id>.py        # each task's own verify.py, unchanged
    mcpmark_grader.py     # the grader: runs verify/<id>.py on the episode's workspace (python grader)

A task's id is ``<level>__<category>__<task>`` (``<category>__<task>`` in a checkout without levels); a task whose
category has no initial state is skipped and listed with the reason. The checkout is untrusted data: every file and
field used as a path must stay inside it (:mod:`mcp_gym.jobs._untrusted`), two tasks mapping to one id are refused,
and state zips are extracted within :class:`~mcp_gym.jobs._untrusted.ZipLimits`. Nothing of the benchmark ships with
mcp-gym: everything is read from the user's checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mcp_gym._terminal import printable
from mcp_gym.jobs._untrusted import (
    UniqueIds,
    UntrustedInput,
    ZipLimits,
    check_tree,
    contained_path,
    extract_zip,
    read_file,
)
from mcp_gym.recording.atomic import new_file, write_text_atomic

__all__ = ["import_mcpmark", "main"]

GRADER_MODULE = "mcpmark_grader"
PROMPT_SUFFIX = "\n\nThe files of this task are in the directory {workspace}."
"""Appended to each description: MCPMark's descriptions do not say where the files are (its agent learns the test
directory from the filesystem server)."""

GRADER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
              "PYTHONDONTWRITEBYTECODE": "1"}
"""The environment a task's ``verify.py`` runs with, besides ``FILESYSTEM_TEST_DIR`` (the episode's workspace, the
only variable MCPMark's filesystem verify scripts read) and ``HOME`` = ``TMPDIR`` (a fresh empty folder, removed
after): nothing of the caller's environment (no API keys)."""

_GRADER = '''"""Grades the tasks imported by ``mcp-gym tasks import mcpmark``: runs the task's own
``verify/<id>.py`` (MCPMark's verify.py, unchanged) on the episode's workspace, ``$FILESYSTEM_TEST_DIR``; exit status
0 is a pass.

The script is looked up by task id in this file's own ``verify/`` folder, never at a path the task file names. It runs
as a separate Python process in isolated mode (``-I``), in the workspace, with only the environment below: none of
the caller's variables (API keys stay out), ``HOME`` and ``TMPDIR`` a fresh empty folder removed afterwards."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMEOUT = 120  # seconds a verify.py may run
ENV = __ENV__


def verify(task, answer, state):
    """``{score, passed, reason}`` of the episode: verify.py's exit status and the last lines it printed."""
    script = HERE / "verify" / (re.sub(r"[^A-Za-z0-9_.-]", "_", task.id) + ".py")
    if not script.is_file():
        raise FileNotFoundError(f"no verify script {script} for task {task.id!r}")
    workspace = task.data["workspace"]
    with tempfile.TemporaryDirectory(prefix="mcpmark-verify-") as home:
        env = {**ENV, "HOME": home, "TMPDIR": home, "FILESYSTEM_TEST_DIR": workspace}
        try:
            done = subprocess.run([sys.executable, "-I", str(script)], cwd=workspace, env=env, capture_output=True,
                                  text=True, errors="replace", timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"score": 0.0, "passed": False, "reason": f"verify.py ran over {TIMEOUT} s"}
    lines = [x.strip() for x in (done.stdout + "\\n" + done.stderr).splitlines() if x.strip()]
    tail = " | ".join(lines[-3:])[-2000:]
    passed = done.returncode == 0
    return {"score": 1.0 if passed else 0.0, "passed": passed, "reason": f"verify.py exit {done.returncode}: {tail}"}
'''


@dataclass
class ImportResult:
    """What an import wrote: the task file, the number of tasks per category, and the tasks skipped (each with the
    reason)."""

    tasks_file: Path
    categories: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(task folder in the checkout, reason)`` of each task not imported."""

    @property
    def imported(self) -> int:
        """How many tasks the task file holds."""
        return sum(self.categories.values())


@dataclass
class _Task:
    source: str  # the task's folder, relative to the checkout
    id: str
    level: str | None
    category: str
    prompt: str
    verify: bytes
    tags: list[str]
    state_url: str | None = None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _read(root: Path, rel: PurePosixPath, name: str, task: str) -> bytes:
    """The bytes of the checkout's file ``rel/name``: refused when it (or a folder on the way) leads out of it."""
    path = contained_path(root, f"{rel}/{name}", what=name, task=task)
    return read_file(path, what=name, task=task)  # a regular file with one name: no pipe, device or hard link


def _tasks(root: Path) -> list[_Task]:
    """Every task of the checkout's ``tasks/filesystem/``, checked (see the module); refuses the first task at fault."""
    base = contained_path(root, "tasks/filesystem", what="tasks/filesystem folder")
    if not base.is_dir():
        raise FileNotFoundError(f"{root}: no tasks/filesystem/ folder (is it a checkout of MCPMark?)")
    for dirpath, dirnames, filenames in os.walk(base):  # a symlink anywhere under it: refused if it leads out
        for name in dirnames + filenames:
            entry = Path(dirpath) / name
            if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                where = entry.relative_to(root).as_posix()
                who = f"folder {where}" if name in dirnames else f"task {Path(where).parent.as_posix()}: {name}"
                raise UntrustedInput(f"{who} leads out of {root} (through a symlink to {entry.resolve()})")
    ids, found = UniqueIds(), []
    for desc in sorted(base.rglob("description.md")):
        rel = PurePosixPath(desc.parent.relative_to(root).as_posix())
        parts = rel.parts[2:]  # [level,] category, task
        if len(parts) not in (2, 3):
            raise UntrustedInput(f"task {rel}: not in MCPMark's layout tasks/filesystem/[<level>/]<category>/<task>/")
        who = str(rel)
        meta_bytes = _read(root, rel, "meta.json", who) if (desc.parent / "meta.json").exists() \
            or (desc.parent / "meta.json").is_symlink() else b"{}"
        try:
            meta = json.loads(meta_bytes)
        except ValueError as e:
            raise UntrustedInput(f"task {who}: meta.json is not JSON ({e})") from None
        if not isinstance(meta, dict):
            raise UntrustedInput(f"task {who}: meta.json is not an object")
        for key, kind in (("category_id", str), ("task_id", str), ("difficulty", str), ("tags", list)):
            if meta.get(key) is not None and not isinstance(meta[key], kind):
                raise UntrustedInput(f"task {who}: meta.json {key} is not a {'string' if kind is str else 'list'}: "
                                     f"{str(meta[key])[:80]!r}")
        if not all(isinstance(t, str) for t in meta.get("tags") or ()):
            raise UntrustedInput(f"task {who}: meta.json tags must be strings: {str(meta['tags'])[:80]!r}")
        category = str(meta.get("category_id") or parts[-2])
        name = str(meta.get("task_id") or parts[-1])
        contained_path(root / "test_environments", category, what="meta.json category_id", task=who)
        if len(PurePosixPath(category).parts) != 1:
            raise UntrustedInput(f"task {who}: meta.json category_id {category!r} is not one folder name")
        level = parts[0] if len(parts) == 3 else None
        task_id = "__".join(_safe(p) for p in ([level] if level else []) + [category, name])
        ids.add(task_id, who)
        try:
            prompt = _read(root, rel, "description.md", who).decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise UntrustedInput(f"task {who}: description.md is not UTF-8 ({e.reason} at byte {e.start})") from None
        tags = [category, *([f"level:{level}"] if level else []),
                *([str(meta["difficulty"])] if meta.get("difficulty") else []),
                *(str(t) for t in meta.get("tags") or ())]
        url = (meta.get("meta_data") or {}).get("stateUrl") if isinstance(meta.get("meta_data"), dict) else None
        found.append(_Task(who, task_id, level, category, prompt, _read(root, rel, "verify.py", who),
                           list(dict.fromkeys(tags)), str(url) if url else None))
    return found


def _state_source(root: Path, states: Path | None, category: str, task: str) -> tuple[Path | None, list[Path]]:
    """Where a category's initial state is (a checked folder or a zip), and every place looked at."""
    dirs = [d for d in (states, root / "test_environments") if d is not None]
    looked: list[Path] = []
    for d in dirs:
        folder = contained_path(d, category, what="meta.json category_id", task=task)
        archive = contained_path(d, f"{category}.zip", what="state zip", task=task)
        looked += [folder, archive]
        if folder.is_dir():
            return check_tree(d, folder, what="state folder", task=task), looked
        if archive.is_file():
            return archive, looked
    return None, looked


def _write_state(source: Path, category: str, target: Path, limits: ZipLimits, task: str) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)  # checked: no symlink in it leads out of it
        return
    target.mkdir(parents=True)
    try:
        with zipfile.ZipFile(source) as z:
            top = {PurePosixPath(n).parts[0] for n in z.namelist()
                   if not n.startswith("__MACOSX/") and PurePosixPath(n).parts}
        extract_zip(source, target, limits=limits, prefix=f"{category}/" if top == {category} else "", task=task)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def import_mcpmark(path: str | Path, out: str | Path = "mcpmark-filesystem", *, states: str | Path | None = None,
                   limits: ZipLimits | None = None) -> ImportResult:
    """Import the filesystem tasks of the MCPMark checkout at ``path`` (every level) into the folder ``out`` (see the
    module).

    ``states`` is a folder holding the categories' initial states (``<category>/`` folders or ``<category>.zip``);
    else (and by default) in the checkout's ``test_environments/``. A task whose category has none is skipped
    (:attr:`ImportResult.skipped`). ``limits`` bound the extraction of each state zip (default
    :class:`~mcp_gym.jobs._untrusted.ZipLimits`). Raises ``FileNotFoundError`` when there is no ``tasks/filesystem/``
    or ``states`` is not a folder,
    and :class:`~mcp_gym.jobs._untrusted.UntrustedInput` (one line naming the
    task and the path) for a file or field leading out of the checkout, two tasks with one id, or a zip over the
    limits: nothing of such a checkout is imported."""
    root, out = Path(path).expanduser().resolve(), Path(out)
    states_dir = Path(states).expanduser().resolve() if states is not None else None
    if states_dir is not None and not states_dir.is_dir():  # a typo would skip every task, each "no initial state"
        raise FileNotFoundError(f"--states {states}: not a folder (want one holding <category>/ or <category>.zip)")
    tasks = _tasks(root)
    result = ImportResult(out / "tasks.jsonl")
    sources: dict[str, Path] = {}
    chosen: list[_Task] = []
    for t in tasks:
        if t.category not in sources:
            source, looked = _state_source(root, states_dir, t.category, t.source)
            if source is None:
                result.skipped.append((t.source, f"no initial state for category {t.category!r}: none of "
                                       f"{', '.join(str(p) for p in looked)} exists (download "
                                       f"{t.state_url or 'it'} into --states)"))
                continue
            sources[t.category] = source
        chosen.append(t)
    folders: dict[str, str] = {}  # state folder (as a case-insensitive disk sees it) -> the category written there
    for t in chosen:
        other = folders.setdefault(_safe(t.category).casefold(), t.category)
        if other != t.category:
            raise UntrustedInput(f"task {t.source}: categories {other!r} and {t.category!r} both map to the state "
                                 f"folder states/{_safe(t.category)}; refusing to give one's tasks the other's state")
    for folder in (out / "verify", out / "states"):  # a handed-over --out: a link here had the import write (and
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):  # remove) the user's files through it
            kind = "a symlink" if folder.is_symlink() else "not a folder"
            raise UntrustedInput(f"--out {out}: {folder.name} is {kind}; refusing to write through it (remove it, or "
                                 "choose another --out)")
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify").mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    written: set[str] = set()
    for t in chosen:
        rel = f"states/{_safe(t.category)}"
        if t.category not in written:
            target = out / rel
            if target.is_symlink():  # replaced, never followed
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)  # a previous import's copy: this checkout's state replaces it
            _write_state(sources[t.category], t.category, target, limits or ZipLimits(), t.source)
            written.add(t.category)
        with new_file(out / "verify" / f"{t.id}.py") as tmp:  # never written through a link planted in --out
            tmp.write_bytes(t.verify)
        rows.append({"id": t.id, "prompt": t.prompt + PROMPT_SUFFIX, "fixture": rel, "tags": t.tags,
                     "grader": f"{GRADER_MODULE}:verify",  # a python grader
                     "data": {"workspace": "{workspace}", "mcpmark_task": t.source}})
        result.categories[t.category] = result.categories.get(t.category, 0) + 1
    write_text_atomic(out / f"{GRADER_MODULE}.py", _GRADER.replace("__ENV__", repr(GRADER_ENV)))
    write_text_atomic(result.tasks_file, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return result


def eval_command(tasks_file: str | Path) -> str:
    """The ``mcp-gym eval`` command line for an import's task file (the no-op baseline; another ``policy=`` runs a
    model)."""
    return (f"mcp-gym eval env=custom '+env.servers.fs=\"npx -y @modelcontextprotocol/server-filesystem "
            f"{{workspace}}\"' env.tasks={Path(tasks_file).resolve()} env.trust_task_code=true policy=noop")


def main(argv: list[str]) -> int:
    """``mcp-gym tasks import mcpmark PATH [--out DIR] [--states DIR] [--max-state-mb N] [--max-state-files N]
    [--max-state-file-mb N] [--max-state-ratio X]``; returns the exit status."""
    import argparse
    import sys

    d = ZipLimits()
    p = argparse.ArgumentParser(prog="mcp-gym tasks import", description="Import a local checkout of a public "
                                "benchmark as an mcp-gym task file (MCPMark's filesystem tasks).")
    p.add_argument("benchmark", choices=["mcpmark"], help="the benchmark's layout")
    p.add_argument("path", help="the local checkout (holding tasks/filesystem/)")
    p.add_argument("--out", default="mcpmark-filesystem", help="the folder to write (default mcpmark-filesystem)")
    p.add_argument("--states", help="a folder with the initial states (<category>/ or <category>.zip); default: "
                   "the checkout's test_environments/")
    p.add_argument("--max-state-mb", type=float, default=d.max_total_bytes / 2**20,
                   help=f"uncompressed MiB a state zip may hold in all (default {d.max_total_bytes // 2**20})")
    p.add_argument("--max-state-files", type=int, default=d.max_files,
                   help=f"members a state zip may hold (default {d.max_files})")
    p.add_argument("--max-state-file-mb", type=float, default=d.max_file_bytes / 2**20,
                   help=f"uncompressed MiB of one member of a state zip (default {d.max_file_bytes // 2**20})")
    p.add_argument("--max-state-ratio", type=float, default=d.max_ratio,
                   help=f"how many times a member of a state zip over 1 MiB may expand (default {d.max_ratio:g})")
    a = p.parse_args(argv)
    limits = ZipLimits(int(a.max_state_mb * 2**20), a.max_state_files, int(a.max_state_file_mb * 2**20),
                       a.max_state_ratio)
    try:
        result = import_mcpmark(a.path, a.out, states=a.states, limits=limits)
    except (FileNotFoundError, ValueError, OSError, zipfile.BadZipFile) as e:
        print(printable(f"mcp-gym tasks import: {e}"), file=sys.stderr)  # the checkout's names: no escapes
        return 1
    for source, why in result.skipped:
        print(printable(f"skipped {source}: {why}"))
    n = result.imported
    print(printable(f"wrote {result.tasks_file}: {n} tasks ("
                    f"{', '.join(f'{c} {k}' for c, k in result.categories.items())})")
          + (f"; {len(result.skipped)} skipped (listed above)" if result.skipped else ""))
    if not n:
        print("mcp-gym tasks import: no task imported (no category has its initial state)", file=sys.stderr)
        return 1
    print("evaluate with (env.trust_task_code=true: grading runs each task's own verify.py, MCPMark's code, as a "
          "Python process in the episode's workspace with FILESYSTEM_TEST_DIR, a minimal PATH/LANG and an empty "
          "HOME/TMPDIR, none of your environment variables; policy=... picks the agent):")
    print(f"  {eval_command(result.tasks_file)}")
    print("a first look (5 tasks, 1 sample each; the command above then runs only the rest):")
    print(f"  {eval_command(result.tasks_file)} env.max_tasks=5 samples=1")
    return 0
