"""Code server: write Python files in a per-episode workspace and run hidden unit tests on them.

See :mod:`mcp_gym.envs.code.tasks` for the tasks and :mod:`mcp_gym.servers._sandbox` for how code is run: always
in its own process, inside a bubblewrap sandbox (an unprivileged host uid even when the server runs as root, no network,
its own PID namespace, no new processes, a read-only view of only the Python standard library, small private writable
tmpfs, killed whole when the run ends) with CPU/memory/wall-clock/output limits. Without a sandbox that passes its
probe the server refuses to start unless ``MCP_GYM_CODE_SANDBOX=unsafe``.

The workspace of an episode is kept in memory (at most :data:`MAX_FILES` files of :data:`MAX_FILE_CHARS` characters),
so memory stays bounded, nothing leaks on disk when an episode is evicted, and the snapshot is self-contained. Each
``run_tests`` call materialises it in the sandbox's private tmpfs (unsafe mode: a temporary directory), gone
after the run. Paths are relative, normalised, and may not leave the workspace.

Grading: ``run_tests`` records ``{passed, failed, total, files_hash}`` as the episode's ``last_run``; the snapshot
reports it with the current ``files_hash``; the verifier pays ``passed / total`` only if the two hashes match (the final
code was tested).

Run: ``python -m mcp_gym.servers.code`` (stdio) or ``... --transport http --port 8000``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from mcp_gym.envs.code.tasks import SOLUTION_FILE, generate_tasks, task_by_id
from mcp_gym.serverkit import EpisodeServer
from mcp_gym.servers._sandbox import Limits, RunResult, canonical_json, detect_isolation, run_function_tests
from mcp_gym.tasks import Task

__all__ = ["server"]

MAX_FILES = 16
"""Most files in a workspace."""
MAX_FILE_CHARS = 64_000
"""Longest file content accepted by write_file."""
MAX_WORKSPACE_CHARS = 256_000
"""Most characters in all files of a workspace (bounds memory per episode)."""
MAX_PATH_CHARS = 120
LIMITS = Limits()
"""Sandbox limits of every run_tests call."""

_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass
class CodeEpisode:
    """One episode: its task, the workspace files and the last test run."""

    task: Task
    files: dict[str, str] = field(default_factory=dict)
    last_run: dict[str, Any] | None = None
    runs: int = 0

    def files_hash(self) -> str:
        """SHA-256 of the whole workspace (paths and contents)."""
        return hashlib.sha256(json.dumps(self.files, sort_keys=True).encode()).hexdigest()


def new_state(task_id: str | None, seed: int) -> CodeEpisode:
    """A fresh, empty workspace for ``task_id`` (without a task: generated task number ``seed``)."""
    if task_id:
        return CodeEpisode(task_by_id(task_id))
    tasks = generate_tasks()
    return CodeEpisode(tasks[seed % len(tasks)])


def snapshot(ep: CodeEpisode) -> dict[str, Any]:
    """State for the verifier: task id, files, their hash, the last test run (with the hash it tested) and run count."""
    return {"task_id": ep.task.id, "files": dict(ep.files), "files_hash": ep.files_hash(), "last_run": ep.last_run,
            "runs": ep.runs}


def clean_path(path: str) -> str:
    """Normalise a workspace path, refusing anything that could leave the workspace."""
    raw = path.strip().replace("\\", "/")
    norm = posixpath.normpath(raw) if raw else ""
    parts = norm.split("/")
    if (not raw or raw.startswith("/") or len(raw) > MAX_PATH_CHARS or len(parts) > 4
            or not all(_PART.fullmatch(p) for p in parts) or any(p == ".." for p in raw.split("/"))):
        raise ToolError(f"Refused: {path!r} is not a valid workspace path. Use a relative path inside the workspace "
                        f"made of letters, digits, '_', '-' and '.', such as '{SOLUTION_FILE}' (no '..', no absolute "
                        "paths).")
    return norm


# ---------------------------------------------------------------------------------------------------------------
# Result models
# ---------------------------------------------------------------------------------------------------------------
class FileInfo(BaseModel):
    """A workspace file."""

    path: str
    size: int = Field(description="Length in characters")


class FileList(BaseModel):
    """The files of the workspace."""

    files: list[FileInfo]


class WriteResult(BaseModel):
    """Outcome of write_file."""

    path: str
    size: int
    created: bool = Field(description="False if an existing file was overwritten")


class RunReport(BaseModel):
    """Outcome of run_tests."""

    passed: int
    failed: int
    total: int
    reward: float = Field(description="passed / total")
    output: str = Field(description="Per-test failures and your code's output (truncated)")


# ---------------------------------------------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------------------------------------------
server: EpisodeServer[CodeEpisode] = EpisodeServer(
    "mcp-gym-code",
    new_state,
    snapshot=snapshot,
    instructions=(
        "A Python workspace for solving one small programming problem (read the resource code://problem). Write "
        f"your code to {SOLUTION_FILE} with write_file, then call run_tests: it runs hidden unit tests in a sandbox "
        "(no network, CPU/memory/time limits) and reports how many pass. Only the final, tested code counts."
    ),
    max_episodes=1024,
    on_reset=lambda ep: {"problem": ep.task.data.get("statement", ep.task.prompt)},
    preflight=detect_isolation,  # no OS sandbox (bubblewrap) and no MCP_GYM_CODE_SANDBOX=unsafe: refuse to start
)


def _files_listing(ep: CodeEpisode) -> list[FileInfo]:
    return [FileInfo(path=p, size=len(c)) for p, c in sorted(ep.files.items())]


@server.tool(destructive=True, idempotent=True)
async def write_file(path: str, content: str) -> WriteResult:
    """Create or overwrite a text file in the workspace (e.g. path='solution.py'). The whole content is replaced.

    Paths are relative to the workspace; '..' and absolute paths are refused. Files are limited to 64,000 characters
    and the workspace to 16 files and 256,000 characters."""
    ep = server.state
    rel = clean_path(path)
    if len(content) > MAX_FILE_CHARS:
        raise ToolError(f"Refused: content has {len(content)} characters; the limit is {MAX_FILE_CHARS}.")
    created = rel not in ep.files
    if created and len(ep.files) >= MAX_FILES:
        raise ToolError(f"Refused: the workspace already has {MAX_FILES} files (the limit).")
    if sum(len(c) for p, c in ep.files.items() if p != rel) + len(content) > MAX_WORKSPACE_CHARS:
        raise ToolError(f"Refused: the workspace would exceed {MAX_WORKSPACE_CHARS} characters in all.")
    ep.files[rel] = content
    return WriteResult(path=rel, size=len(content), created=created)


@server.tool(read_only=True, idempotent=True, structured_output=False)
async def read_file(path: str) -> str:
    """Return the content of a workspace file written earlier with write_file."""
    ep = server.state
    rel = clean_path(path)
    if rel not in ep.files:
        listing = ", ".join(sorted(ep.files)) or "none yet"
        raise ToolError(f"No file {rel!r} in the workspace (files: {listing}).")
    return ep.files[rel]


@server.tool(read_only=True, idempotent=True)
async def list_files() -> FileList:
    """List the workspace files with their sizes."""
    return FileList(files=_files_listing(server.state))


@server.tool(read_only=True, idempotent=True)
async def run_tests() -> RunReport:
    """Run the hidden unit tests of this problem on the current workspace and report how many pass.

    The tests import the required function from solution.py and compare its return values with the expected ones.
    You see pass/fail counts, errors, wrong return values and anything your code prints, but not the test inputs or
    expected outputs. Code runs in a sandbox: no network, no access outside its working directory, 2 s per test,
    5 s of CPU time, 10 s and 512 MB per run."""
    ep = server.state
    files_hash, files = ep.files_hash(), dict(ep.files)
    data = ep.task.data
    tests = data["tests"]
    module_file = str(data.get("file", SOLUTION_FILE))
    if module_file not in files:
        run = RunResult(fatal=f"{module_file} not found: write your code with write_file(path='{module_file}', ...)")
    else:
        run = await run_function_tests(files, module_file.removesuffix(".py"), str(data["entry"]),
                                       [t["args"] for t in tests], LIMITS)
    passed = sum(run.values.get(i) == canonical_json(t["expected"]) for i, t in enumerate(tests))
    ep.runs += 1
    ep.last_run = {"passed": passed, "failed": len(tests) - passed, "total": len(tests), "files_hash": files_hash}
    return RunReport(passed=passed, failed=len(tests) - passed, total=len(tests), reward=passed / len(tests),
                      output=_report_text(run, tests, passed))


def _report_text(run: RunResult, tests: list[dict[str, Any]], passed: int) -> str:
    lines = [f"{passed}/{len(tests)} hidden tests passed."]
    if run.fatal:
        lines.append(f"No test could run: {run.fatal}")
    else:
        for i, t in enumerate(tests):
            got = run.values.get(i)
            if got is not None and got != canonical_json(t["expected"]):
                shown = got if len(got) <= 120 else got[:120] + "..."
                lines.append(f"test {i + 1}: wrong result (returned {shown})")
            elif got is None:
                lines.append(f"test {i + 1}: {run.errors.get(i, 'did not run (the process stopped)')}")
    if run.output.strip():
        lines += ["--- output of your code ---", run.output.strip()]
    return "\n".join(lines)


@server.mcp.resource("code://problem", name="problem", mime_type="text/markdown",
                     description="The programming problem of this episode")
async def problem_resource() -> str:
    """The problem statement."""
    task = server.state.task
    return str(task.data.get("statement", task.prompt))


@server.mcp.resource("code://workspace", name="workspace", mime_type="application/json",
                     description="Workspace files and the result of the last test run")
async def workspace_resource() -> str:
    """Files, the last test result and whether it tested the current code, as JSON."""
    ep = server.state
    run = ep.last_run
    return json.dumps({
        "files": [f.model_dump() for f in _files_listing(ep)],
        "last_run": None if run is None else {k: run[k] for k in ("passed", "failed", "total")},
        "last_run_is_current": run is not None and run["files_hash"] == ep.files_hash(),
    })


if __name__ == "__main__":
    from mcp_gym.envs.serve import main

    main("code")
