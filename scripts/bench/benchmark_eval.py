"""An ``eval`` job over a per-episode-server task set, pool off vs on, side by side in one run (issue 40).

An MCPMark-like task set: ``@modelcontextprotocol/server-filesystem`` rooted in each episode's workspace
(``{workspace}`` on its command line), a fixture folder (``--files`` files in four sub-folders) copied into every
workspace, each task writing one file and submitting, graded by a ``files`` state check after the episode. The policy
is ``oracle`` (the reference solutions), so the numbers are mcp-gym's and the servers', not a model's. Each job is
``mcp-gym eval`` with the defaults (run in this process through the CLI's ``main``; ``--process``: as a process of its
own, ``python -m mcp_gym.cli``, as the ``mcp-gym`` program runs, its imports and set-up included) at
``launcher.num_envs`` slots;
the ``off`` arm adds ``env.spare_servers=0`` (a server started per episode, as before the pool), the ``on`` arm is
the default. The arms alternate, round by round, so machine noise hits both alike. Each job starts as a job of its own
process does: what npx ran for an earlier job (``mcp_gym.client._npx``) is forgotten, so its first starts run npx.

Per arm and server (``local``: the tests' npm install in ``.mcp-gym-cache/npm``; ``npx``: ``npx -y``, resolved from
the npm cache those fill, as the MCPMark import prints; ``--no-resolve-npx``: through npx at every start, not only at
the job's first): episodes per second over the job's wall time (start to
report), the job's own "server start-up share" (``results.json``: servers' start-up time over the episodes' whole
time, resets included) and success rate, and the ratio on/off.

``--fixtures K`` spreads the tasks over ``K`` fixture folders (task ``i`` copies fixture ``i % K``; the plan
interleaves them, as MCPMark's filesystem tasks over their several starting states do), each fixture's own file
checked by the grader, so a server in another task's copy fails the episode. ``--fresh-servers`` gives the server a
second, empty allowed directory on its command line, which keeps it from being re-rooted: every episode then needs a
server process of its own, as a server without MCP roots does, and the pool's spare processes must be for the right
fixture. ``--spare-servers N`` sets ``env.spare_servers`` in the ``on`` arm (a job's spares share that budget:
``N = launcher.num_envs`` gives every slot its spare).

``--model-latency S`` puts a model in the loop instead of ``oracle``: ``policy=openai`` against a scripted
OpenAI-compatible chat-completions server on 127.0.0.1 (the tests' own, ``tests/_chat_server.py``) that answers each
request after ``S`` seconds with the task's two calls (``write_file``, then ``submit``), as an endpoint serving a model
would, so the start-up share is that of an evaluation whose episodes take a model's time.

    python scripts/bench/benchmark_eval.py                       # both servers, 3 rounds, 24 episodes per job
    python scripts/bench/benchmark_eval.py --server npx --rounds 2 --num-envs 4
    python scripts/bench/benchmark_eval.py --model-latency 0.5   # a model answering in 0.5 s per reply
    python scripts/bench/benchmark_eval.py --server local --fixtures 3 --fresh-servers --spare-servers 2

``--bench bfcl``, ``--bench git``, ``--bench mcpmark`` and ``--bench conv`` run other real benchmarks instead of the
server-filesystem set (``--bench fs``, the default), with the same arms, each job reporting also the time to first
step, the seconds per episode (the job's slots times its wall over its episodes), the mean reset, server start-up and
episode (steps and grading) per episode, and the job's CPU (its own process, and its children: servers, graders):

Without ``--process`` one untimed job of ``--num-envs`` episodes warms this process's imports first.

- ``bfcl``: BFCL multi-turn ``base`` (``mcp-gym tasks import bfcl`` of the copy ``--bfcl``, default the tests'
  ``.mcp-gym-cache/bfcl/2026.3.23``), the first ``--tasks`` tasks, on ``python -m mcp_gym.servers.bfcl`` (one process
  per slot, reset between episodes by ``mcp_gym_reset``: the pool does not apply, so the arms differ only by noise),
  graded by BFCL's own checker;
- ``git``: PyPI ``mcp-server-git`` (``--git-server``, default the one on this Python's ``PATH``) started per episode on
  ``{workspace}`` (a copy of a 3-commit repository with a change and an untracked file), its tasks made by
  ``mcp-gym tasks generate`` (the explore generator, ``--tasks`` tasks; once per run, not timed), as
  docs/benchmarks.md and docs/tasks-generate.md do;
- ``mcpmark``: ``mcp-gym tasks import mcpmark`` of a checkout in MCPMark's layout made here (the tests' kind:
  ``--tasks`` tasks, ``easy/`` and ``standard/`` levels over four categories whose initial states hold ``--files``
  files each; each task's ``verify.py`` walks the workspace and passes when ``answer.txt`` is there), on the tests'
  pinned ``server-filesystem`` (``.mcp-gym-cache/npm``) on ``{workspace}``, each task given a ``solution`` (even
  tasks write ``answer.txt`` and pass, odd ones ``other.txt`` and fail), ``env.trust_task_code=true`` as the import
  prints: each grade runs the task's ``verify.py`` as a process of its own;
- ``conv``: ``--tasks`` two-turn conversations (tests/_turns_server.py's task: a tool shown by the turn hook at the
  second turn) on ``python tests/_turns_server.py`` (a stdio ``EpisodeServer``), graded by its Python grader
  ``_turns_server:grade_turns`` from ``ctx.turns``, as docs/conversations.md's example is.

With ``--compare``, each side also records every episode's grade (episode key, task, success, reward) and the output
says whether all jobs of both sides graded every episode alike.

    python scripts/bench/benchmark_eval.py --bench bfcl --tasks 40 --samples 1 --rounds 2
    python scripts/bench/benchmark_eval.py --bench git --tasks 8 --samples 2 --rounds 2
    python scripts/bench/benchmark_eval.py --bench mcpmark --tasks 40 --samples 1 --rounds 2
    python scripts/bench/benchmark_eval.py --bench conv --tasks 40 --samples 1 --rounds 2

``--compare DIR`` (any ``--bench``; ``fs``: one ``--server``, the default arm, ``--spare-servers 0`` for no pool):
instead of the pool's arms, ``before`` (the checkout DIR, e.g. a detached
worktree of main) and ``after`` (this checkout), each job in a process of its own that imports ``mcp_gym`` and its
``envs/``, ``servers/`` and ``conf/`` from its checkout (first on ``PYTHONPATH``; a finder put ahead of the editable
install's) and warms up with one untimed job first, the sides alternating round by round. The servers the jobs
start get the MCP SDK's default environment, not ``PYTHONPATH``: they run the installed checkout's code on both sides,
except BFCL's (``python -m mcp_gym.servers.bfcl``, run by ``_checkout.py`` from each side's checkout) and BFCL's
checker process (the side's own ``envs/bfcl/check.py``, run as a script).

    git worktree add --detach /tmp/base main
    python scripts/bench/benchmark_eval.py --bench bfcl --tasks 40 --samples 1 --rounds 3 --compare /tmp/base
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_VARIABLE = "MCP_GYM_BENCH_CHECKOUT"
"""Set by ``--compare`` for each side's process: the checkout whose mcp_gym (and envs/, servers/, conf/) it runs."""


def _checkout_first() -> None:
    """In a ``--compare`` side's process: ``mcp_gym`` and its ``envs/``, ``servers/`` and ``conf/`` packages from the
    checkout :data:`CHECKOUT_VARIABLE` names, whatever the installed (editable) mcp-gym maps them to (``_checkout.py``:
    ``mcp_gym.envs`` is the checkout's top-level ``envs/``, so ``PYTHONPATH`` alone would mix the two checkouts)."""
    top = os.environ.get(CHECKOUT_VARIABLE)
    if not top:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _checkout import install

    install(top)


_checkout_first()
sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import make_fixture, server_command  # noqa: E402 - the same fixture and server lines as startup.py

sys.path.insert(0, str(ROOT / "tests"))
from _chat_server import chat_completion, serve_chat_completions  # noqa: E402 - the tests' scripted endpoint
from _git_fixture import make_git_repo  # noqa: E402 - the tests' git fixture

from mcp_gym.cli import main as cli  # noqa: E402
from mcp_gym.client import _npx  # noqa: E402 - forgotten between jobs (each job a process of its own)


def fixture_name(i: int, fixtures: int) -> str:
    """Task ``i``'s fixture folder (beside the task file): ``fixture`` alone, else ``fixture<i % fixtures>``."""
    return "fixture" if fixtures <= 1 else f"fixture{i % fixtures}"


def make_fixtures(folder: Path, fixtures: int, files: int) -> None:
    """The fixture folders, each ``files`` files and (several) its own ``which.txt`` naming it."""
    for k in range(max(1, fixtures)):
        make_fixture(folder / fixture_name(k, fixtures), files)
        if fixtures > 1:
            (folder / fixture_name(k, fixtures) / "which.txt").write_text(fixture_name(k, fixtures))


def write_tasks(folder: Path, n: int, fixtures: int = 1) -> Path:
    write = [{"tool": "write_file", "arguments": {"path": "{workspace}/out.txt", "content": f"answer {i}"}}
             for i in range(n)]
    expect = [{"out.txt": f"answer {i}", **({"which.txt": fixture_name(i, fixtures)} if fixtures > 1 else {})}
              for i in range(n)]
    rows = [{"id": f"t{i}", "prompt": f"Write 'answer {i}' to out.txt in the workspace.",
             "fixture": fixture_name(i, fixtures), "grader": {"kind": "files", "expect": expect[i]},
             "solution": [write[i], {"tool": "submit", "arguments": {"answer": "done"}}]} for i in range(n)]
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def scripted_model(body: dict[str, Any], headers: Any) -> dict[str, Any]:
    """A model that solves ``write_tasks``' tasks: ``write_file`` with the prompt's quoted text, then ``submit``."""
    messages = body["messages"]
    if any(m.get("role") == "tool" for m in messages):
        call = {"name": "submit", "arguments": json.dumps({"answer": "done"})}
    else:
        prompt = next(m["content"] for m in messages if m.get("role") == "user")
        text = re.search(r"Write '([^']*)'", prompt if isinstance(prompt, str) else json.dumps(prompt))
        call = {"name": "write_file",
                "arguments": json.dumps({"path": "{workspace}/out.txt", "content": text.group(1) if text else ""})}
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": f"call-{len(messages)}", "type": "function", "function": call}]}
    return chat_completion(body, message)


GIT_DATE = "2026-01-03T00:00:00"  # the server's commit clock (GitPython's format), as docs/tasks-generate.md pins it


def bfcl_server(a: argparse.Namespace) -> str:
    """The BFCL server; in a ``--compare`` side's process, run by ``_checkout.py`` from that side's checkout."""
    top = os.environ.get(CHECKOUT_VARIABLE)
    run = f"{Path(__file__).resolve().parent / '_checkout.py'} {top}" if top else "-m"
    return f'+env.servers.bfcl="{sys.executable} {run} mcp_gym.servers.bfcl --bfcl {a.bfcl}"'


def git_server(a: argparse.Namespace) -> str:
    return f'+env.servers.git="env GIT_AUTHOR_DATE={GIT_DATE} GIT_COMMITTER_DATE={GIT_DATE} {a.git_server} ' \
        '--repository {workspace}"'


MCPMARK_VERIFY = '''import os, sys
from pathlib import Path
root = Path(os.environ["FILESYSTEM_TEST_DIR"])
names = sorted(p.name for p in root.rglob("*") if p.is_file())
if (root / "answer.txt").is_file():
    print("answer.txt written;", len(names), "files"); sys.exit(0)
print("answer.txt missing;", len(names), "files"); sys.exit(1)
'''


def mcpmark_server() -> str:
    return f'+env.servers.fs="{" ".join(server_command("local"))}"'


def conv_server() -> str:
    return f'+env.servers.t="{sys.executable} {ROOT / "tests" / "_turns_server.py"}"'


def mcpmark_tasks(a: argparse.Namespace, tmp: Path) -> Path:
    """``--bench mcpmark``: a checkout in MCPMark's layout (``--tasks`` tasks over four categories, the first 3 of
    each ``easy``), imported as the docs say, each task given a solution (even: passes; odd: fails)."""
    checkout = tmp / "mcpmark"
    for i in range(a.tasks):
        category, level = f"cat{i % 4}", "easy" if i // 4 < 3 else "standard"
        folder = checkout / "tasks" / "filesystem" / level / category / f"task{i // 4}"
        folder.mkdir(parents=True)
        (folder / "description.md").write_text(f"# Task\n\nWrite answer.txt ({category}, task {i // 4}).\n")
        (folder / "verify.py").write_text(MCPMARK_VERIFY)
        (folder / "meta.json").write_text(json.dumps({"task_id": f"task{i // 4}", "category_id": category,
                                                      "difficulty": "L1", "tags": ["bench"]}))
    for k in range(min(4, a.tasks)):
        make_fixture(checkout / "test_environments" / f"cat{k}", a.files)
    if cli(["tasks", "import", "mcpmark", str(checkout), "--out", str(tmp / "mcpmark-fs")]) != 0:
        raise SystemExit("tasks import mcpmark failed")
    path = tmp / "mcpmark-fs" / "tasks.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        name = "answer.txt" if i % 2 == 0 else "other.txt"
        row["solution"] = [{"tool": "write_file", "arguments": {"path": "{workspace}/" + name, "content": "x"}},
                           {"tool": "submit", "arguments": {"answer": "done"}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bench_tasks(a: argparse.Namespace, tmp: Path) -> Path:
    """The task file of ``--bench bfcl``, ``mcpmark`` (imported), ``conv`` (written) or ``git`` (generated), made
    once, before the timed jobs."""
    with contextlib.redirect_stdout(io.StringIO()):
        if a.bench == "mcpmark":
            return mcpmark_tasks(a, tmp)
        if a.bench == "conv":
            import dataclasses

            from _turns_server import TASK

            from mcp_gym.tasks import save_tasks
            return save_tasks([dataclasses.replace(TASK, id=f"conv-{i}") for i in range(a.tasks)],
                              tmp / "conv" / "tasks.jsonl")
        if a.bench == "bfcl":
            if cli(["tasks", "import", "bfcl", str(a.bfcl), "--category", "base", "--out", str(tmp / "bfcl")]) != 0:
                raise SystemExit(f"tasks import bfcl {a.bfcl} failed")
            return tmp / "bfcl" / "multi_turn_base.jsonl"
        make_git_repo(tmp / "repo")  # tests/test_generate.py's git fixture
        code = cli(["tasks", "generate", "env=custom", git_server(a), f"fixture={tmp / 'repo'}",
                    '+generator.fixed.repo_path="{workspace}"', "+generator.fixed.branch_type=local",
                    f"n={a.tasks}", f"out={tmp / 'gen'}"])
        if code != 0:
            raise SystemExit(f"tasks generate (mcp-server-git) exited {code}")
        return tmp / "gen" / "tasks.jsonl"


def cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its waited-for children (servers, graders, jobs run with --process)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def breakdown(out: Path, summary: dict[str, Any]) -> dict[str, float]:
    """Per episode, from the run's episodes: mean reset (``reset_seconds``), server start-up (``startup_seconds``)
    and episode (steps and grading: start to end), and the time to first step (p50, from ``results.json``)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "episodes", columns=["metadata", "started_at", "ended_at"]).to_pylist()
    metas = [json.loads(r["metadata"]) if r["metadata"] else {} for r in rows]

    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    return {"reset": mean([float(m.get("reset_seconds") or 0.0) for m in metas]),
            "startup": mean([float(m.get("startup_seconds") or 0.0) for m in metas]),
            "episode": mean([(r["ended_at"] - r["started_at"]).total_seconds() for r in rows]),
            "first_step": float((summary.get("first_step_s") or {}).get("p50") or 0.0)}


def grades(out: Path) -> list[list[Any]]:
    """Every episode's grade, in episode-key order: ``[episode_key, task_id, success, total_reward]``."""
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "episodes", columns=["episode_key", "task_id", "success", "total_reward"]).to_pylist()
    return sorted([r["episode_key"], r["task_id"], r["success"], r["total_reward"]] for r in rows)


def job(kind: str, arm: str, a: argparse.Namespace, tasks: Path, out: Path,
        base_url: str | None = None, graded: list[list[Any]] | None = None) -> dict[str, float]:
    policy = ["policy=oracle"] if base_url is None else \
        ["policy=openai", f"policy.base_url={base_url}", "policy.model=scripted", "policy.api_key=sk-bench"]
    if a.bench == "fs":
        command = " ".join(server_command(kind) + ([str(tasks.parent / "empty")] if a.fresh_servers else []))
        bench = [f'+env.servers.fs="{command}"', f"env.tasks={tasks}", f"samples={a.samples}"]
    else:  # the first --tasks tasks of the imported/generated file, --samples episodes each
        server = {"bfcl": bfcl_server, "git": git_server, "mcpmark": lambda _: mcpmark_server(),
                  "conv": lambda _: conv_server()}[a.bench](a)
        bench = [server, f"env.tasks={tasks}", "split=null", f"episodes={a.tasks * a.samples}", f"samples={a.samples}"]
        bench += {"bfcl": ["env.max_steps=168"], "mcpmark": ["env.trust_task_code=true"],
                  "conv": ["env.grader=_turns_server:grade_turns"]}.get(a.bench, [])
    args = ["eval", "env=custom", *bench, *policy,
            f"launcher.num_envs={a.num_envs}", "launcher.progress=false", "plots=false",
            f"out={out}", "env.connect_timeout=120"]
    if a.no_resolve_npx:
        args.append("env.resolve_npx=false")
    if arm == "off":
        args.append("env.spare_servers=0")
    elif a.spare_servers is not None:
        args.append(f"env.spare_servers={a.spare_servers}")
    _npx.resolutions.clear()  # each job as its own process: its first starts run npx (what it ran is not known yet)
    c0 = cpu()
    t0 = time.perf_counter()
    if a.process:  # as the mcp-gym program: a fresh interpreter, its imports on the job's path
        code = subprocess.run([sys.executable, "-m", "mcp_gym.cli", *args], stdout=subprocess.DEVNULL, timeout=900,
                              cwd=tasks.parent).returncode  # (-m puts its cwd first on sys.path: not a checkout)
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(args)
    wall = time.perf_counter() - t0
    c1 = cpu()
    if code != 0:
        raise SystemExit(f"{kind}/{arm}: eval exited {code}")
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    parts = breakdown(out, summary)
    if graded is not None:
        graded.extend(grades(out))
    shutil.rmtree(out, ignore_errors=True)
    episodes = int(summary.get("episodes") or a.tasks * a.samples)
    return {"eps": episodes / wall, "share": float(summary.get("startup_share") or 0.0),
            "success": float(summary.get("success_rate") or 0.0), **parts,
            "slot_s": wall * a.num_envs / episodes, "job_cpu": (c1[0] - c0[0]) / episodes,
            "child_cpu": (c1[1] - c0[1]) / episodes}


def side(a: argparse.Namespace, arm: str, tasks: Path, folder: Path, kind: str,
         graded: dict[str, list[Any]]) -> dict[str, float]:
    """One ``--compare`` job: this script in a process of its own, the ``before`` (``--compare``) or ``after`` (this)
    checkout first on ``PYTHONPATH`` and its packages imported from there; it warms up with one untimed job, runs one
    timed job and writes its row."""
    top = (a.compare if arm == "before" else ROOT).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if a.bench in ("git", "mcpmark"):  # fixtures (and a grader) named relative to the task file: copied beside it
        shutil.copytree(tasks.parent, folder, dirs_exist_ok=True)
    shutil.copy(tasks, folder / "tasks.jsonl")
    argv = [sys.executable, str(Path(__file__).resolve()), "--bench", a.bench, "--bfcl", str(a.bfcl), "--git-server",
            a.git_server, "--tasks", str(a.tasks), "--samples", str(a.samples), "--num-envs", str(a.num_envs),
            "--side-out", str(folder / f"{arm}.json"), "--server", kind if kind in ("local", "npx") else "local",
            "--files", str(a.files), "--fixtures", str(a.fixtures)]  # (--bench fs: the side makes its own fixtures)
    argv += ["--fresh-servers"] if a.fresh_servers else []
    argv += ["--no-resolve-npx"] if a.no_resolve_npx else []
    argv += ["--spare-servers", str(a.spare_servers)] if a.spare_servers is not None else []
    env = {**os.environ, CHECKOUT_VARIABLE: str(top),
           "PYTHONPATH": os.pathsep.join([str(top), *filter(None, [os.environ.get("PYTHONPATH")])])}
    subprocess.run(argv, env=env, check=True, timeout=1800, cwd=folder)
    row = json.loads((folder / f"{arm}.json").read_text())
    graded.setdefault(arm, []).append(row.pop("grades"))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", choices=["fs", "bfcl", "git", "mcpmark", "conv"], default="fs",
                    help="fs: server-filesystem per episode (default); bfcl: BFCL multi-turn base; git: mcp-server-git "
                         "per episode on generated tasks; mcpmark: an MCPMark-layout import; conv: two-turn "
                         "conversations")
    ap.add_argument("--bfcl", type=Path, default=ROOT / ".mcp-gym-cache" / "bfcl" / "2026.3.23",
                    help="--bench bfcl: the BFCL copy (an unpacked bfcl-eval wheel)")
    ap.add_argument("--git-server", default=shutil.which("mcp-server-git") or "mcp-server-git",
                    help="--bench git: the mcp-server-git program")
    ap.add_argument("--server", choices=["local", "npx", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=3, help="jobs per arm, alternating")
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--samples", type=int, default=2, help="episodes per task")
    ap.add_argument("--num-envs", type=int, default=2, help="launcher.num_envs (the same in both arms)")
    ap.add_argument("--files", type=int, default=40, help="files in the fixture")
    ap.add_argument("--fixtures", type=int, default=1, help="fixture folders, the tasks interleaved over them")
    ap.add_argument("--fresh-servers", action="store_true",
                    help="a second allowed directory on the server's command line: never re-rooted")
    ap.add_argument("--spare-servers", type=int, default=None, metavar="N",
                    help="env.spare_servers in the on arm (default: the default)")
    ap.add_argument("--no-resolve-npx", action="store_true",
                    help="env.resolve_npx=false: npx at every server start, not only at each job's first")
    ap.add_argument("--process", action="store_true",
                    help="run each job as a process of its own (python -m mcp_gym.cli), as the mcp-gym program does, "
                         "not in this process (whose imports are warm after the first job)")
    ap.add_argument("--model-latency", type=float, default=None, metavar="S",
                    help="policy=openai against a scripted endpoint answering in S seconds (default: oracle)")
    ap.add_argument("--compare", type=Path, default=None, metavar="DIR",
                    help="instead of the pool's arms, this checkout (after) against the checkout DIR "
                         "(before), each job in a process of its own with its checkout first on PYTHONPATH, the sides "
                         "alternating (each process warms up with one untimed job first)")
    ap.add_argument("--side-out", type=Path, default=None, help=argparse.SUPPRESS)  # a --compare side's process
    a = ap.parse_args()
    if a.compare is not None and a.model_latency is not None:
        ap.error("--compare runs oracle jobs (no --model-latency)")

    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-bench-eval-"))
    with contextlib.ExitStack() as stack:
        base_url = None if a.model_latency is None else \
            stack.enter_context(serve_chat_completions(scripted_model, delay=a.model_latency))
        run(a, tmp, base_url)


def run(a: argparse.Namespace, tmp: Path, base_url: str | None) -> None:
    """Both arms of every server kind, alternating, and their table."""
    try:
        if a.bench == "fs":  # (a --compare side's own, beside its output)
            base = a.side_out.parent if a.side_out is not None else tmp
            make_fixtures(base, a.fixtures, a.files)
            (base / "empty").mkdir(exist_ok=True)
            tasks = write_tasks(base, a.tasks, a.fixtures)
        else:
            tasks = a.side_out.parent / "tasks.jsonl" if a.side_out is not None else bench_tasks(a, tmp)
        kinds = [a.bench] if a.bench != "fs" else (["local", "npx"] if a.server == "both" else [a.server])
        for kind in kinds:
            rows: dict[str, list[dict[str, float]]] = {"before": [], "after": []} if a.compare else \
                {"off": [], "on": []}
            if (a.bench != "fs" or a.side_out is not None) and not a.process and not a.compare:  # imports, first calls
                job(kind, "on", argparse.Namespace(**{**vars(a), "tasks": 1, "samples": a.num_envs}), tasks,
                    tmp / f"warm-{kind}", base_url)
            if a.side_out is not None:  # one timed job, for the --compare process that started this one
                graded: list[list[Any]] = []
                row: dict[str, Any] = dict(job(kind, "on", a, tasks, tmp / "run", base_url, graded))
                a.side_out.write_text(json.dumps({**row, "grades": graded}))
                return
            sides: dict[str, list[Any]] = {}
            loads = [os.getloadavg()[0]]
            for r in range(a.rounds):
                for arm in rows:
                    rows[arm].append(side(a, arm, tasks, tmp / f"side-{kind}-{r}", kind, sides) if a.compare else
                                     job(kind, arm, a, tasks, tmp / f"run-{kind}-{arm}-{r}", base_url))
                loads.append(os.getloadavg()[0])
            what = {"bfcl": "BFCL multi-turn base (python -m mcp_gym.servers.bfcl, reset per episode)",
                    "git": "mcp-server-git per episode, generated tasks",
                    "mcpmark": "MCPMark-layout import (server-filesystem on {workspace}, verify.py per grade)",
                    "conv": "two-turn conversations (tests/_turns_server.py, turn hook, Python grader)"}.get(
                kind, f"server-filesystem per episode ({kind}: {' '.join(server_command(kind)[:3])})")
            fs = f"{a.fixtures} fixture(s) of {a.files} files, {'never re-rooted, ' if a.fresh_servers else ''}" \
                if a.bench == "fs" else ""
            print(f"\neval, {what}, "
                  f"{a.tasks} tasks x {a.samples} samples, launcher.num_envs={a.num_envs}, {fs}"
                  f"on arm spare_servers={a.spare_servers if a.spare_servers is not None else 'default'}, "
                  f"policy {'oracle' if base_url is None else f'openai (scripted, {a.model_latency:g} s per reply)'}, "
                  f"{'env.resolve_npx=false, ' if a.no_resolve_npx else ''}"
                  f"{'each job a process of its own, ' if a.process else ''}"
                  f"{f'before: {a.compare}, after: {ROOT}, each job in a process of its own, ' if a.compare else ''}"
                  f"{a.rounds} jobs per arm; "
                  f"load average {min(loads):.2f}-{max(loads):.2f} (1 min), "
                  f"{os.cpu_count()} cores")
            print(f"{'arm':>6} {'episodes/s':>11} {'start-up share':>15} {'success':>8} {'first step':>11} "
                  f"{'s/episode':>10} {'reset':>7} {'start-up':>9} {'episode':>8} {'job CPU':>8} {'children':>9}")
            med = {arm: {k: statistics.median(x[k] for x in xs) for k in xs[0]} for arm, xs in rows.items()}
            for arm, m in med.items():
                print(f"{arm:>6} {m['eps']:>11.2f} {m['share']:>14.1%} {m['success']:>8.0%} {m['first_step']:>10.3f}s "
                      f"{m['slot_s']:>9.3f}s {m['reset']:>6.3f}s {m['startup']:>8.3f}s {m['episode']:>7.3f}s "
                      f"{m['job_cpu']:>7.3f}s {m['child_cpu']:>8.3f}s")
            print("(first step: p50 from the reset's start; s/episode: slots x wall / episodes; reset, start-up, "
                  "episode: means per episode; job CPU and children: CPU seconds per episode"
                  f"{', children including the job processes' if a.process else ''})")
            after, before = ("after", "before") if a.compare else ("on", "off")
            ratios = [on["eps"] / off["eps"] for on, off in zip(rows[after], rows[before], strict=True)]
            print(f"{after}/{before}: episodes/s x{statistics.median(ratios):.2f} (median of per-round ratios; "
                  f"{min(ratios):.2f}-{max(ratios):.2f})")
            if a.compare:
                runs = [g for arm in ("before", "after") for g in sides.get(arm, [])]
                same = all(g == runs[0] for g in runs)
                passed = sum(1 for g in runs[0] if g[2]) if runs else 0
                print(f"grades: {'identical' if same else 'DIFFERENT'} episode by episode in all {len(runs)} jobs "
                      f"({len(runs[0]) if runs else 0} episodes each, {passed} passed)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
