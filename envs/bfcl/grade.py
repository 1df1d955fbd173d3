"""The grader of BFCL multi-turn tasks: BFCL's own checker on the calls an episode ran, per turn.

``{"kind": "python", "function": "mcp_gym.envs.bfcl.grade:verify"}`` (what ``mcp-gym tasks import bfcl`` writes into
each task). It reads the BFCL server's ``mcp_gym_state`` (the copy the server says it plays, the task, the calls
that ran in each turn), refuses a server naming another copy than the one the user named for it (the ``--bfcl PATH``
of its command line in the env's config, else :data:`COPY_VARIABLE`: the copy's code runs, so never one a server
names), refuses a task whose data differ from the copy's own, and has BFCL's
``multi_turn_checker`` run on them with the task's ground truth from the copy, never in the job's process: by the
job's checker process (:mod:`mcp_gym.envs.bfcl.forked`: BFCL imported once, one forked child per check), or, with
``MCP_GYM_BFCL_CHECKER=oneshot`` and whenever that process is gone, by :mod:`mcp_gym.envs.bfcl.check` as a script in
a subprocess of its own (``python -I``, an empty environment, a fresh temporary folder). Both are bounded by
:data:`CHECK_TIMEOUT`. An episode cut off before its last turn ended fails as BFCL's ``multi_turn:force_terminated``.
The grade's reason is BFCL's ``error_type`` and ``error_message``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcp_gym.client.specs import Stdio
from mcp_gym.envs.bfcl import check, forked
from mcp_gym.graders._shared import grading_env
from mcp_gym.protocol import STATE_TOOL

__all__ = ["verify", "run_checks", "close_checkers", "named_copy", "CHECK_TIMEOUT", "DATA_KEYS", "GRADER_SPEC",
           "CHECKER_VARIABLE", "COPY_VARIABLE"]

GRADER_SPEC = {"kind": "python", "function": "mcp_gym.envs.bfcl.grade:verify"}
"""The grader spec of an imported BFCL task."""

CHECK_TIMEOUT = 50.0
"""Seconds BFCL's checker may take on one episode (under the grader's default 60 s)."""
DATA_KEYS = ("involved_classes", "initial_config")
"""Fields of a task's ``data`` that must equal the BFCL copy's own (the server and checker read the copy's)."""


CHECKER_VARIABLE = "MCP_GYM_BFCL_CHECKER"
"""The environment variable that chooses the checker: ``fork`` (the default: the job's checker process, one forked
child per check) or ``oneshot`` (a new subprocess per check)."""


COPY_VARIABLE = "MCP_GYM_BFCL_COPY"
"""The environment variable naming the BFCL copy to grade with when the env's server command line names none (a BFCL
server over HTTP, started by you; a script calling :func:`verify` itself)."""


def run_checks(root: str | Path, checks: Sequence[Mapping[str, Any]], *, timeout: float | None = CHECK_TIMEOUT,
               fork: bool | None = None) -> list[dict[str, Any]]:
    """BFCL's verdicts on ``checks`` (``{"id", "turns"}``: calls per turn, or ``{"id", "strings"}``: BFCL call strings
    per turn) with the copy at ``root``: by the job's checker process (``fork``; default: unless
    :data:`CHECKER_VARIABLE` is ``oneshot``; never without a ``timeout``), else, or when that process is gone, by
    :mod:`mcp_gym.envs.bfcl.check` in a subprocess of its own. Raises ``RuntimeError`` naming the cause when the
    checker cannot run or runs over ``timeout``."""
    if fork is None:
        choice = os.environ.get(CHECKER_VARIABLE, "fork").strip().lower()
        if choice not in ("fork", "oneshot"):
            raise ValueError(f"{CHECKER_VARIABLE}={choice!r}: want 'fork' or 'oneshot'")
        fork = choice == "fork"
    if fork and timeout is not None:
        found = forked.run(root, checks, timeout)
        if found is not None:
            return found
    return _one_shot(root, checks, timeout)


def close_checkers() -> None:
    """Stop the job's BFCL checker processes (the end of a job does; so does the interpreter's exit)."""
    forked.close_all()


def _one_shot(root: str | Path, checks: Sequence[Mapping[str, Any]], timeout: float | None) -> list[dict[str, Any]]:
    """The verdicts from :mod:`mcp_gym.envs.bfcl.check` run as a script in a subprocess of its own."""
    request = json.dumps({"root": str(root), "checks": list(checks)})
    with tempfile.TemporaryDirectory(prefix="mcp-gym-bfcl-") as tmp:
        try:
            done = subprocess.run([sys.executable, "-I", "-X", "utf8", str(Path(check.__file__).resolve())],
                                  input=request, capture_output=True, text=True, timeout=timeout, cwd=tmp,
                                  env={"PYTHONHASHSEED": "0"}, check=False)
        except subprocess.TimeoutExpired:
            ids = ", ".join(str(c.get("id")) for c in checks)
            raise RuntimeError(f"BFCL's checker ran over {timeout:g} s on {ids} (killed)") from None
    if done.returncode != 0:
        tail = " | ".join(line for line in done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"BFCL's checker exited {done.returncode}: {tail}")
    out = json.loads(done.stdout)
    if not isinstance(out, list) or len(out) != len(checks):
        raise RuntimeError("BFCL's checker answered something other than one verdict per check")
    return out


def _snapshot(state: Mapping[str, Any], servers: Sequence[str]) -> tuple[str | None, Mapping[str, Any]]:
    """The BFCL server's part of the state and its alias (``None``: the one server with a state, not named in it):
    the one server's, else the one alias whose snapshot is BFCL's."""
    if isinstance(state.get("bfcl"), Mapping):
        return (servers[0] if len(servers) == 1 else None), state["bfcl"]
    found = [(a, v["bfcl"]) for a, v in state.items() if isinstance(v, Mapping) and isinstance(v.get("bfcl"), Mapping)]
    if len(found) != 1:
        raise RuntimeError("no BFCL server in the episode (want one server run as python -m "
                           "mcp_gym.servers.bfcl)" if not found else "several BFCL servers in the episode")
    return str(found[0][0]), found[0][1]


def _named_in(spec: Any) -> str | None:
    """The copy a stdio server's command line names (``--bfcl PATH`` or ``--bfcl=PATH``), from its working folder."""
    if not isinstance(spec, Stdio):
        return None
    args, value = list(spec.args), None
    for i, arg in enumerate(args):  # the last one wins, as with argparse
        if arg == "--bfcl" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--bfcl="):
            value = arg.removeprefix("--bfcl=")
    if not value:
        return None
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else Path(spec.cwd or os.getcwd()) / path)


def named_copy(alias: str | None) -> tuple[str | None, str]:
    """The BFCL copy the user named for the server ``alias`` (``None``: the one with a state tool): the ``--bfcl``
    of its command line in the env grading (:func:`mcp_gym.graders._shared.grading_env`), else
    :data:`COPY_VARIABLE`. ``(path or None, the server as named in errors)``."""
    env = grading_env()
    host: Any = getattr(env, "host", None)
    conns = dict(getattr(host, "connections", None) or {})
    if alias is None:
        with_state = [a for a, c in conns.items() if c.status == "ready" and host.has_tool(a, STATE_TOOL)]
        alias = with_state[0] if len(with_state) == 1 else None
    conn = conns.get(alias) if alias is not None else None
    where = f"server '{alias}'" if conn is None else f"server '{alias}' ({conn.spec.describe()})"
    named = _named_in(conn.spec) if conn is not None else None
    return (named or os.environ.get(COPY_VARIABLE) or None), where


def verify(ctx: Any) -> dict[str, Any]:
    """Grade a finished episode (``ctx``: :class:`~mcp_gym.graders.EpisodeContext`) by BFCL's checker: ``{score,
    passed, reason, details}``."""
    alias, snap = _snapshot(ctx.state, ctx.servers)
    task_id = ctx.task.id
    if snap.get("task_id") != task_id:
        raise RuntimeError(f"the BFCL server played task {snap.get('task_id')!r}, not {task_id!r}")
    named, where = named_copy(alias)
    said = str(snap.get("root"))  # the server's word: only compared, never read or run, shown as repr
    if named is None:
        raise RuntimeError(f"task {task_id!r}: {where} says it plays the BFCL copy {said[:300]!r}, but no copy is "
                           "named to run BFCL's checker from: run the server as 'python -m mcp_gym.servers.bfcl "
                           f"--bfcl PATH', or set {COPY_VARIABLE}=PATH")
    root = check.find_root(named)
    if said != str(root):  # (the server answers its copy's resolved root, as find_root gives it)
        raise RuntimeError(f"task {task_id!r}: {where} says it plays the BFCL copy {said[:300]!r}, not the copy "
                           f"named for it {str(root)!r}; refusing to run BFCL's checker from a folder the server names")
    test_entry, ground_truth = check.entry(root, task_id)
    data = ctx.task.data.get("bfcl") if isinstance(ctx.task.data.get("bfcl"), Mapping) else {}
    for key in DATA_KEYS:
        if key in data and data[key] != test_entry.get(key):
            raise RuntimeError(f"task {task_id!r}: its data {key!r} differs from BFCL's own in {root} (the server "
                               "plays and the checker grades BFCL's): re-import the task file from that copy")
    turns: list[list[dict[str, Any]]] = [list(t) for t in snap.get("calls") or []]
    reached = int(snap.get("turn", 0)) + 1
    if ctx.termination not in ("submit", "done") or reached < len(ground_truth):
        verdict = {"valid": False, "error_type": "multi_turn:force_terminated",
                   "error_message": f"the episode ended ({ctx.termination}) in turn {reached} of "
                                    f"{len(ground_truth)}"}
    else:
        verdict = run_checks(root, [{"id": task_id, "turns": turns}])[0]
        if verdict.get("valid") is None:
            raise RuntimeError(f"BFCL's checker failed: {verdict.get('error')}")
    passed = bool(verdict["valid"])
    reason = "BFCL: valid" if passed else f"BFCL {verdict.get('error_type')}: {verdict.get('error_message')}"
    return {"score": 1.0 if passed else 0.0, "passed": passed, "reason": reason}
