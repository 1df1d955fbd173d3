"""An ``eval`` job over a per-episode-server task set, pool off vs on, side by side in one run (issue 40).

An MCPMark-like task set: ``@modelcontextprotocol/server-filesystem`` rooted in each episode's workspace
(``{workspace}`` on its command line), a fixture folder (``--files`` files in four sub-folders) copied into every
workspace, each task writing one file and submitting, graded by a ``files`` state check after the episode. The policy
is ``oracle`` (the reference solutions), so the numbers are mcp-gym's and the servers', not a model's. Each job is
``mcp-gym eval`` with the defaults (run in this process through the CLI's ``main``) at ``launcher.num_envs`` slots;
the ``off`` arm adds ``env.spare_servers=0`` (a server started per episode, as before the pool), the ``on`` arm is
the default. The arms alternate, round by round, so machine noise hits both alike.

Per arm and server (``local``: the tests' npm install in ``.mcp-gym-cache/npm``; ``npx``: ``npx -y``, resolved from
the npm cache those fill, as the MCPMark import prints): episodes per second over the job's wall time (start to
report), the job's own "server start-up share" (``results.json``: servers' start-up time over that plus the
episodes' time) and success rate, and the ratio on/off.

``--model-latency S`` puts a model in the loop instead of ``oracle``: ``policy=openai`` against a scripted
OpenAI-compatible chat-completions server on 127.0.0.1 (the tests' own, ``tests/_chat_server.py``) that answers each
request after ``S`` seconds with the task's two calls (``write_file``, then ``submit``), as an endpoint serving a model
would, so the start-up share is that of an evaluation whose episodes take a model's time.

    python scripts/bench/benchmark_eval.py                       # both servers, 3 rounds, 24 episodes per job
    python scripts/bench/benchmark_eval.py --server npx --rounds 2 --num-envs 4
    python scripts/bench/benchmark_eval.py --model-latency 0.5   # a model answering in 0.5 s per reply
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import make_fixture, server_command  # noqa: E402 - the same fixture and server lines as startup.py

sys.path.insert(0, str(ROOT / "tests"))
from _chat_server import chat_completion, serve_chat_completions  # noqa: E402 - the tests' scripted endpoint

from mcp_gym.cli import main as cli  # noqa: E402


def write_tasks(folder: Path, n: int) -> Path:
    write = [{"tool": "write_file", "arguments": {"path": "{workspace}/out.txt", "content": f"answer {i}"}}
             for i in range(n)]
    rows = [{"id": f"t{i}", "prompt": f"Write 'answer {i}' to out.txt in the workspace.", "fixture": "fixture",
             "grader": {"kind": "files", "expect": {"out.txt": f"answer {i}"}},
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


def job(kind: str, arm: str, a: argparse.Namespace, tasks: Path, out: Path,
        base_url: str | None = None) -> dict[str, float]:
    command = " ".join(server_command(kind))
    policy = ["policy=oracle"] if base_url is None else \
        ["policy=openai", f"policy.base_url={base_url}", "policy.model=scripted", "policy.api_key=sk-bench"]
    args = ["eval", "env=custom", f'+env.servers.fs="{command}"', f"env.tasks={tasks}", *policy,
            f"samples={a.samples}", f"launcher.num_envs={a.num_envs}", "launcher.progress=false", "plots=false",
            f"out={out}", "env.connect_timeout=120"]
    if arm == "off":
        args.append("env.spare_servers=0")
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli(args)
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"{kind}/{arm}: eval exited {code}")
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    shutil.rmtree(out, ignore_errors=True)
    episodes = a.tasks * a.samples
    return {"eps": episodes / wall, "share": float(summary.get("startup_share") or 0.0),
            "success": float(summary.get("success_rate") or 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["local", "npx", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=3, help="jobs per arm, alternating")
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--samples", type=int, default=2, help="episodes per task")
    ap.add_argument("--num-envs", type=int, default=2, help="launcher.num_envs (the same in both arms)")
    ap.add_argument("--files", type=int, default=40, help="files in the fixture")
    ap.add_argument("--model-latency", type=float, default=None, metavar="S",
                    help="policy=openai against a scripted endpoint answering in S seconds (default: oracle)")
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-bench-eval-"))
    with contextlib.ExitStack() as stack:
        base_url = None if a.model_latency is None else \
            stack.enter_context(serve_chat_completions(scripted_model, delay=a.model_latency))
        run(a, tmp, base_url)


def run(a: argparse.Namespace, tmp: Path, base_url: str | None) -> None:
    """Both arms of every server kind, alternating, and their table."""
    try:
        make_fixture(tmp / "fixture", a.files)
        tasks = write_tasks(tmp, a.tasks)
        for kind in (["local", "npx"] if a.server == "both" else [a.server]):
            rows: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
            loads = [os.getloadavg()[0]]
            for r in range(a.rounds):
                for arm in rows:
                    rows[arm].append(job(kind, arm, a, tasks, tmp / f"run-{kind}-{arm}-{r}", base_url))
                loads.append(os.getloadavg()[0])
            print(f"\neval, server-filesystem per episode ({kind}: {' '.join(server_command(kind)[:3])}), "
                  f"{a.tasks} tasks x {a.samples} samples, launcher.num_envs={a.num_envs}, fixture {a.files} files, "
                  f"policy {'oracle' if base_url is None else f'openai (scripted, {a.model_latency:g} s per reply)'}, "
                  f"{a.rounds} jobs per arm; load average {min(loads):.2f}-{max(loads):.2f} (1 min), "
                  f"{os.cpu_count()} cores")
            print(f"{'arm':>4} {'episodes/s':>11} {'start-up share':>15} {'success':>8}")
            med = {arm: {k: statistics.median(x[k] for x in xs) for k in xs[0]} for arm, xs in rows.items()}
            for arm, m in med.items():
                print(f"{arm:>4} {m['eps']:>11.2f} {m['share']:>14.1%} {m['success']:>8.0%}")
            ratios = [on["eps"] / off["eps"] for on, off in zip(rows["on"], rows["off"], strict=True)]
            print(f"on/off: episodes/s x{statistics.median(ratios):.2f} (median of per-round ratios; "
                  f"{min(ratios):.2f}-{max(ratios):.2f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
