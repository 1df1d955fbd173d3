"""BFCL's own multi-turn checker, run from a local copy of BFCL (the standard library only).

The Berkeley Function Calling Leaderboard ships as ``bfcl-eval`` (its pins clash with mcp-gym's, so it is never
installed): ``PATH`` is an unpacked wheel or sdist, or the gorilla repository's ``berkeley-function-call-leaderboard/``,
any folder holding ``bfcl_eval/``. This module loads only the pieces the multi-turn categories need straight from
those files (the simulated API classes, ``multi_turn_utils``, ``multi_turn_checker`` and two constant modules), without
running any package ``__init__`` and without BFCL's other dependencies (only ``MathAPI`` needs ``mpmath``).

It is the BFCL server's loader (:mod:`mcp_gym.servers.bfcl`) and, run as a script in a subprocess with a minimal
environment, the grader's checker (:mod:`mcp_gym.envs.bfcl.grade`): it reads ``{"root", "checks": [{"id", "turns"}]}``
on stdin, where each turn is the list of ``{"tool", "arguments"}`` calls an episode made in that turn, and writes one
verdict per check (``{"valid", "error_type", "error_message"}``, BFCL's own) as JSON on stdout. The task's initial
state and ground truth are read from the copy's own data files by BFCL id, never from a task file.

Code in the copy runs (BFCL's checker ``eval``\\ s its ground truth): name only a copy you trust.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib
import json
import keyword
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["find_root", "inside", "load_bfcl", "data_file", "entries", "entry", "category_of", "call_string", "check",
           "check_strings", "run_all", "preload", "serve", "CATEGORIES", "MAX_DATA_BYTES"]

PACKAGE = "bfcl_eval"
CHECKER_FILE = ("eval_checker", "multi_turn_eval", "multi_turn_checker.py")
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
"""BFCL's multi-turn categories (``multi_turn_<category>``)."""
MAX_DATA_BYTES = 64 * 2**20
"""Largest BFCL data file read (the biggest multi-turn file is about 2 MB)."""
_PACKAGES = ("bfcl_eval", "bfcl_eval.constants", "bfcl_eval.eval_checker", "bfcl_eval.eval_checker.multi_turn_eval",
             "bfcl_eval.eval_checker.multi_turn_eval.func_source_code")
_ENTRY_ID = re.compile(r"multi_turn_[a-z_]+_\d+")


def find_root(path: str | Path) -> Path:
    """The folder holding ``bfcl_eval/`` among ``path``, its parent (``path`` is ``bfcl_eval/`` itself) and its
    sub-folders (an unpacked sdist's ``bfcl_eval-<version>/``, gorilla's ``berkeley-function-call-leaderboard/``).
    Raises ``FileNotFoundError`` naming what is missing."""
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise FileNotFoundError(f"{path}: not a folder (want an unpacked bfcl-eval wheel or sdist)")
    candidates = [p, p.parent, *sorted(c for c in p.iterdir() if c.is_dir())]
    for c in candidates:
        if c.joinpath(PACKAGE, *CHECKER_FILE).is_file():
            return c
    raise FileNotFoundError(f"{path}: no {PACKAGE}/{'/'.join(CHECKER_FILE)} in it (want an unpacked bfcl-eval wheel "
                            "or sdist, or gorilla's berkeley-function-call-leaderboard/)")


def inside(root: Path, *parts: str) -> Path:
    """``root/parts`` if it resolves inside ``root`` (no symlink out of the copy), else ``ValueError``."""
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{path} leads out of the BFCL copy {root} (through a symlink)")
    return path


def load_bfcl(root: str | Path) -> types.SimpleNamespace:
    """BFCL's multi-turn modules from ``root`` (see :func:`find_root`): ``backend`` (``executable_backend_config``),
    ``utils`` (``multi_turn_utils``), ``checker`` (``multi_turn_checker``). Its packages are made as plain module
    objects pointing at the copy's folders, so no ``__init__`` of the copy runs and nothing else of it is imported.
    One copy per process: a second root raises ``RuntimeError``."""
    root = Path(root).resolve()
    top = sys.modules.get(PACKAGE)
    if top is not None and list(getattr(top, "__path__", [])) != [str(root / PACKAGE)]:
        raise RuntimeError(f"BFCL from {getattr(top, '__path__', '?')} is already loaded; one copy per process")
    if top is None:
        for name in _PACKAGES:
            folder = inside(root, *name.split("."))
            mod = types.ModuleType(name)
            mod.__path__ = [str(folder)]
            mod.__package__ = name
            sys.modules[name] = mod
    for name in ("bfcl_eval.constants.executable_backend_config", "bfcl_eval.eval_checker.multi_turn_eval."
                 "multi_turn_utils", "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"):
        inside(root, *name.split(".")[:-1], name.rsplit(".", 1)[1] + ".py")
    return types.SimpleNamespace(
        root=root,
        backend=importlib.import_module("bfcl_eval.constants.executable_backend_config"),
        utils=importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"),
        checker=importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"),
    )


def category_of(entry_id: str) -> str:
    """The category of a BFCL multi-turn id (``multi_turn_miss_func_12`` -> ``miss_func``)."""
    if not _ENTRY_ID.fullmatch(entry_id):
        raise ValueError(f"{entry_id!r} is not a BFCL multi-turn id (multi_turn_<category>_<n>)")
    return entry_id[len("multi_turn_"):].rsplit("_", 1)[0]


def data_file(root: str | Path, category: str, *, answers: bool = False) -> Path:
    """BFCL's data file of a multi-turn category (``answers``: its ``possible_answer/`` file), the newest version
    (``BFCL_v4_...`` over ``BFCL_v3_...``). Raises ``FileNotFoundError`` when there is none."""
    root = Path(root)
    folder = inside(root, PACKAGE, "data", *(["possible_answer"] if answers else []))
    found = []
    for p in folder.glob(f"BFCL_v*_multi_turn_{category}.json") if folder.is_dir() else ():
        m = re.fullmatch(rf"BFCL_v(\d+)_multi_turn_{re.escape(category)}\.json", p.name)
        if m:
            found.append((int(m.group(1)), p))
    if not found:
        raise FileNotFoundError(f"{folder}: no BFCL_v*_multi_turn_{category}.json")
    path = inside(root, str(max(found)[1].relative_to(root)))
    if path.stat().st_size > MAX_DATA_BYTES:
        raise ValueError(f"{path} is over {MAX_DATA_BYTES} bytes")
    return path


def _lines(path: Path, read: Callable[[Path], str] | None = None) -> list[dict[str, Any]]:
    out = []
    text = read(path) if read is not None else path.read_text(encoding="utf-8")
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            rec = json.loads(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                raise ValueError(f"{path} line {n}: not an object with a string id")
            out.append(rec)
    return out


_CACHE: dict[tuple[Any, ...], dict[str, tuple[dict[str, Any], list[list[str]]]]] = {}


def entries(root: str | Path, category: str,
            read: Callable[[Path], str] | None = None) -> dict[str, tuple[dict[str, Any], list[list[str]]]]:
    """BFCL id -> (test entry, ground truth per turn) of a category, read once per process (again when a file
    changes). ``read`` (the importer's: it refuses a pipe, device or hard link) reads the two data files afresh."""
    questions, answer_file = data_file(root, category), data_file(root, category, answers=True)
    key = (str(Path(root).resolve()), category, *((p.stat().st_mtime_ns, p.stat().st_size)
                                                   for p in (questions, answer_file)))
    if key not in _CACHE or read is not None:
        answers = {a["id"]: a.get("ground_truth") for a in _lines(answer_file, read)}
        out = {}
        for e in _lines(questions, read):
            gt = answers.get(e["id"])
            if not isinstance(gt, list) or not all(isinstance(t, list) and all(isinstance(c, str) for c in t)
                                                   for t in gt):
                raise ValueError(f"{e['id']}: no ground truth (a list of lists of calls) in possible_answer/")
            out[e["id"]] = (e, gt)
        if read is not None:
            return out
        _CACHE[key] = out
    return _CACHE[key]


def entry(root: str | Path, entry_id: str) -> tuple[dict[str, Any], list[list[str]]]:
    """The test entry and ground truth of one BFCL id; ``KeyError`` naming it when the copy has no such task."""
    table = entries(root, category_of(entry_id))
    if entry_id not in table:
        raise KeyError(f"BFCL task {entry_id!r} is not in {data_file(root, category_of(entry_id))}")
    return table[entry_id]


def call_string(tool: str, arguments: dict[str, Any]) -> str:
    """One call as BFCL's decoder writes it (``tool(k=repr(v),...)``, ``convert_to_function_call``). An argument name
    that is not a Python identifier (which BFCL would paste into code) is passed as ``tool(**{...})`` instead, so it
    fails as a call, never runs as code; a tool name that is not an identifier raises ``ValueError``."""
    if not isinstance(tool, str) or not tool.isidentifier() or keyword.iskeyword(tool):
        raise ValueError(f"tool name {tool!r} is not a Python identifier")
    if all(isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) for k in arguments):
        return f"{tool}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"
    return f"{tool}(**{dict(arguments)!r})"


_runs = 0


def check_strings(bfcl: types.SimpleNamespace, entry_id: str, turns: list[list[str]]) -> dict[str, Any]:
    """BFCL's ``multi_turn_checker`` on decoded calls (a list per turn of call strings, each its own step), as BFCL's
    ``_evaluate_single_multi_turn_entry`` runs it: a turn count other than the ground truth's is BFCL's
    ``multi_turn:force_terminated``. Returns ``{"valid", "error_type", "error_message"}``."""
    global _runs
    test_entry, ground_truth = entry(bfcl.root, entry_id)
    if len(turns) != len(ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"Model was force-terminated during inference phase. The length of the model result "
                                 f"turns ({len(turns)}) does not match the length of the ground truth turns "
                                 f"({len(ground_truth)})."}
    _runs += 1
    model = f"mcpgym{_runs}"
    decoded = [[[c] for c in turn] for turn in turns]
    try:
        out = bfcl.checker.multi_turn_checker(decoded, ground_truth, copy.deepcopy(test_entry),
                                              "multi_turn_" + category_of(entry_id), model)
    finally:  # BFCL keeps each run's instances in multi_turn_utils' globals, by model name: drop this run's
        space = vars(bfcl.utils)
        for name in [n for n in space if n.startswith(model + "_")]:
            del space[name]
    verdict = {"valid": bool(out.get("valid")), "error_type": out.get("error_type"),
               "error_message": out.get("error_message")}
    details = out.get("details") or {}
    if not verdict["valid"] and isinstance(details, dict):
        short = {k: details[k] for k in ("differences", "missing_items") if k in details}
        if short:
            verdict["details"] = json.loads(json.dumps(short, default=str))
    return verdict


def check(bfcl: types.SimpleNamespace, entry_id: str, turns: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """BFCL's verdict on an episode's calls: a list per turn of ``{"tool", "arguments"}`` (see :func:`call_string`)."""
    return check_strings(bfcl, entry_id, [[call_string(c["tool"], dict(c.get("arguments") or {})) for c in turn]
                                          for turn in turns])


def run_all(bfcl: types.SimpleNamespace, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdicts of ``checks`` (``{"id", "turns"} | {"id", "strings"}``), in order (a check that raises gives
    ``{"valid": null, "error": ...}``)."""
    results = []
    for item in checks:
        try:
            if "strings" in item:
                results.append(check_strings(bfcl, str(item["id"]), item["strings"]))
            else:
                results.append(check(bfcl, str(item["id"]), item["turns"]))
        except Exception as e:  # noqa: BLE001 - reported per check, with its type
            results.append({"valid": None, "error": f"{type(e).__name__}: {e}"})
    return results


class _Child:
    """A forked check in :func:`serve`: its request id, process, answer pipe (read end), deadline and bytes read."""

    def __init__(self, rid: Any, pid: int, fd: int, limit: float, ids: list[str], work: str) -> None:
        self.rid, self.pid, self.fd, self.limit, self.ids, self.work = rid, pid, fd, limit, ids, work
        self.deadline = time.monotonic() + limit
        self.data = bytearray()


def _threads() -> int:
    """The threads of this process (the kernel's count where it shows one: native threads too)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _write(fd: int, obj: Any) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _in_child(bfcl: types.SimpleNamespace, parent: int, checks: list[dict[str, Any]], limit: float, fd: int,
              work: str) -> None:
    """A forked child: die with the checker process (Linux), and by itself past ``limit``; run ``checks`` in the
    fresh folder ``work``; write their verdicts to ``fd``. Never returns."""
    try:
        os.chdir(work)
        if sys.platform.startswith("linux"):
            import ctypes  # noqa: PLC0415 - imported in the checker process before its first fork

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the checker process died before the prctl
                os._exit(1)
        signal.alarm(int(limit) + 2)  # the checker process kills it at ``limit``: this is the bound if it cannot
        _write(fd, {"results": run_all(bfcl, checks)})
    finally:
        os._exit(0)


def preload(bfcl: types.SimpleNamespace) -> list[str]:
    """Import the modules of the API classes that the copy's multi-turn tasks (the categories' data read so far)
    involve, as BFCL's ``execute_multi_turn_func_call`` would at a check's first call (``CLASS_FILE_PATH_MAPPING``),
    in sorted order; return the classes whose module imported. The checker process runs it before its first fork,
    so no child imports them again (``long_context``'s data, ``mpmath``: ~15 ms of CPU per check); a module's
    import only defines its classes and constants, so each child still starts from a freshly imported copy. A module
    that fails to import is left to the checks that need it (the same error, raised there)."""
    mapping = getattr(bfcl.backend, "CLASS_FILE_PATH_MAPPING", {})
    root = str(Path(bfcl.root).resolve())
    wanted: set[str] = set()
    for key, table in _CACHE.items():
        if key[0] == root:
            for e, _ in table.values():
                classes = e.get("involved_classes")
                if isinstance(classes, list):
                    wanted.update(c for c in classes if isinstance(c, str))
    loaded = []
    for name in sorted(c for c in wanted if isinstance(mapping.get(c), str)):
        try:
            importlib.import_module(mapping[name])
        except Exception:  # noqa: BLE001, S112 - raised again by the check that needs it, as before
            continue
        loaded.append(name)
    return loaded


def serve(bfcl: types.SimpleNamespace, owner: int) -> int:
    """The checker process (:mod:`mcp_gym.envs.bfcl.forked`): BFCL loaded once, its data read and its API classes'
    modules imported (:func:`preload`), then for each request line ``{"rid", "checks", "timeout"}`` on stdin one
    forked child, a fresh copy of this process (which never runs a check itself), whose verdicts come back as
    ``{"rid", "results"}`` on stdout, or ``{"rid", "error"}`` (the child ran over ``timeout`` seconds and was killed,
    or died). Requests run concurrently. Ends, killing its children, when stdin closes (the job ended or died) or the
    ``owner`` process is gone; single-threaded (it refuses to fork otherwise)."""
    import select  # noqa: PLC0415 - the checker process only
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    if sys.platform.startswith("linux"):
        import ctypes  # noqa: F401, PLC0415 - for the children's prctl, imported before any fork
    for category in CATEGORIES:  # the data, read once here: every child starts from it (an error: the child's)
        with contextlib.suppress(OSError, ValueError):
            entries(bfcl.root, category)
    reply = os.dup(1)
    os.dup2(2, 1)  # print() of BFCL's code goes to stderr, never into the answers
    preload(bfcl)  # the API classes' modules, imported once here rather than in every child
    gc.freeze()  # what is loaded now lives until the exit: no collection walks it again, neither a child's (its
    # pages stay shared with this process) nor this process's last one at its exit, which the end of a job waits for
    me, home = os.getpid(), os.getcwd()
    children: dict[int, _Child] = {}
    pending = b""

    def finish(c: _Child, error: str | None) -> None:
        del children[c.fd]
        os.close(c.fd)
        done, status = os.waitpid(c.pid, os.WNOHANG)
        if not done:
            os.kill(c.pid, signal.SIGKILL)  # it wrote its answer (or ran over): its exit is all that is left
            _, status = os.waitpid(c.pid, 0)
        shutil.rmtree(c.work, ignore_errors=True)
        if error is None:
            try:
                answer = json.loads(bytes(c.data))
                _write(reply, {"rid": c.rid, "results": answer["results"]})
                return
            except (ValueError, KeyError, TypeError):
                why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                       else f"exit status {os.WEXITSTATUS(status)}")
                error = f"BFCL's checker ended without a verdict on {', '.join(c.ids)} ({why})"
        _write(reply, {"rid": c.rid, "error": error})

    def start(line: bytes) -> None:
        request = json.loads(line)
        rid, checks, limit = request["rid"], list(request["checks"]), float(request["timeout"])
        ids = [str(c.get("id")) for c in checks]
        if _threads() != 1:  # a fork would copy a lock another thread holds
            _write(reply, {"rid": rid, "error": f"BFCL's checker process has {_threads()} threads: no fork"})
            return
        work = tempfile.mkdtemp(prefix="check-", dir=home)  # its working folder, as a one-shot check's
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            for fd in (reply, *children):
                os.close(fd)
            _in_child(bfcl, me, checks, limit, w, work)
        os.close(w)
        children[r] = _Child(rid, pid, r, limit, ids, work)

    _write(reply, {"ready": me})
    try:
        while True:
            now = time.monotonic()
            soonest = min((c.deadline for c in children.values()), default=now + 1.0)
            ready, _, _ = select.select([0, *children], [], [], max(0.0, min(soonest - now, 1.0)))
            for fd in ready:
                if fd == 0:
                    data = os.read(0, 1 << 16)
                    if not data:
                        return 0  # the job closed its end (or died): the children go in the finally
                    pending += data
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        if line.strip():
                            start(line)
                elif fd in children:
                    data = os.read(fd, 1 << 16)
                    if data:
                        children[fd].data += data
                    else:
                        finish(children[fd], None)
            now = time.monotonic()
            for c in [c for c in children.values() if c.deadline <= now]:
                finish(c, f"BFCL's checker ran over {c.limit:g} s on {', '.join(c.ids)} (killed)")
            if os.getppid() != owner:
                return 0  # the job is gone (its stdin may be held by someone else)
    finally:
        for c in list(children.values()):
            os.kill(c.pid, signal.SIGKILL)
            os.waitpid(c.pid, 0)


def main(argv: list[str] | None = None) -> int:
    """Script entry: ``{"root", "checks": [{"id", "turns"} | {"id", "strings"}]}`` on stdin, a JSON list of verdicts
    on stdout (a check that raises gives ``{"valid": null, "error": ...}``); ``--serve ROOT OWNER``: the job's checker
    process (:mod:`mcp_gym.envs.bfcl.forked`)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"] and len(argv) == 3:
        return serve(load_bfcl(find_root(argv[1])), int(argv[2]))
    request = json.load(sys.stdin)
    bfcl = load_bfcl(find_root(request["root"]))
    json.dump(run_all(bfcl, request["checks"]), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
