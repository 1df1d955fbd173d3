"""The ``mcp-gym`` command end to end: collect, eval, export-sft, demo, serve, inspect, multirun, Ctrl-C and resume."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _chat_server import serve_chat_completions
from conftest import bound_socket, logging_kept, no_automatic_gc, start_server
from test_policies import ScriptedChat, serve_chat

from mcp_gym.cli import main
from mcp_gym.jobs.metrics import pass_at_k
from mcp_gym.recording import RunDirectory, load

FAST = ["env=counter", "env.transport=inprocess", "launcher.progress=false"]


def _keyed_actions(run: Path) -> dict[str, list[tuple[str, str]]]:
    """episode key -> its (tool, arguments) calls, from a recording."""
    rec = load(run)
    keys = dict(zip(rec.episodes["episode_id"], rec.episodes["episode_key"], strict=True))
    out: dict[str, list[tuple[int, str, str]]] = {}
    for s in rec.steps:
        out.setdefault(keys[s["episode_id"]], []).append((s["step_index"], s["tool"], s["arguments"]))
    return {k: [(t, a) for _, t, a in sorted(v)] for k, v in out.items()}


def test_pass_at_k_matches_counting_subsets() -> None:
    for n, c, k in [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 5, 2), (4, 4, 4), (10, 3, 5)]:
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert math.isclose(pass_at_k(n, c, k), sum(any(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_collect_eval_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "collect"
    assert main(["collect", *FAST, "policy=oracle", "episodes=8", f"out={run}"]) == 0
    assert RunDirectory(run).is_complete() and len(load(run).episodes) == 8
    assert main(["collect", *FAST, "policy=oracle", "episodes=8", f"out={run}"]) == 0  # nothing left to do
    assert len(load(run).episodes) == 8
    assert (run / ".hydra" / "config.yaml").exists()

    ev = tmp_path / "eval"
    assert main(["eval", *FAST, "policy=oracle", "samples=2", f"out={ev}"]) == 0
    assert "pass@2" in capsys.readouterr().out  # the summary table
    report = ev / "report"
    summary = json.loads((report / "results.json").read_text())["summary"]
    assert (summary["episodes"], summary["tasks"]) == (48, 24)
    assert summary["success_rate"] == summary["pass@1"] == summary["pass@2"] == 1.0
    assert summary["tool_call_ms"]["p50"] > 0 and summary["terminations"] == {"done": 48}
    assert pq.read_table(report / "per_task.parquet").num_rows == 24
    assert all((report / f).stat().st_size > 0 for f in ("success_by_task.png", "reward_hist.png", "steps_hist.png"))

    sft = tmp_path / "sft"
    assert main(["export-sft", f"runs=[{run}]", f"out={sft}", "sft.dedupe=false"]) == 0
    rows = pq.read_table(next((sft / "data").glob("train-*.parquet")))
    assert rows.num_rows == 8 and "messages" in rows.column_names

    assert main(["diff-tools", str(run), str(ev)]) == 0  # same server, same tools
    assert "no changes" in capsys.readouterr().out


@pytest.mark.slow  # 19 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", *FAST, "episodes=6", "demo.eval_samples=2", "demo.pass_k=[1,2]", f"out={out}"]) == 0
    table = capsys.readouterr().out
    assert "oracle" in table and "random" in table and "pass@2" in table
    for kind in ("oracle", "random"):
        assert len(load(out / f"collect-{kind}").episodes) == 6
        assert (out / f"eval-{kind}" / "report" / "results.json").exists()
    oracle = json.loads((out / "eval-oracle" / "report" / "results.json").read_text())["summary"]
    assert oracle["success_rate"] == 1.0
    assert any((out / "sft" / "data").glob("train-*.parquet"))


def test_a_job_run_in_process_leaves_no_logging_set_up_behind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A job configures logging (Hydra: ``mcp_gym.client`` to stderr, not propagating); the suite undoes that after
    each test (``conftest.logging_kept``, autouse), or a later test in the same worker saw no ``mcp_gym.client`` record
    in ``caplog`` (a fresh-clone CI run failed so, by the order xdist gave)."""
    client = logging.getLogger("mcp_gym.client")
    with logging_kept():
        assert main(["collect", *FAST, "policy=oracle", "episodes=1", f"out={tmp_path / 'run'}"]) == 0
        assert client.propagate is False and client.handlers  # what the job set up
    assert client.propagate is True and not [h for h in client.handlers if isinstance(h, logging.StreamHandler)
                                             and not type(h).__module__.startswith("_pytest")]
    caplog.set_level(logging.INFO, logger="mcp_gym.client")
    client.info("seen")
    assert [r.getMessage() for r in caplog.records] == ["seen"]


def test_multirun(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    assert main(["collect", "-m", *FAST, "policy=random,oracle", "episodes=3", f"hydra.sweep.dir={sweep}"]) == 0
    for i, kind in enumerate(["random", "oracle"]):
        run = sweep / f"{i}-Counter-{kind}"
        assert RunDirectory(run).manifest["metadata"]["policy"]["kind"] == kind
        assert len(load(run).episodes) == 3


def test_jobs_run_from_the_argument_list_not_sys_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``main(args)`` hands Hydra its own arguments: the job sees them while ``sys.argv`` stays the caller's, and
    Hydra's flags keep working (``--cfg job``, parse errors name the command)."""
    import mcp_gym.cli as cli

    seen: list[tuple[list[str], int, str]] = []
    run_job = cli._run_job

    def spy(cfg: object) -> None:
        seen.append((list(sys.argv), cfg.episodes, cfg.command))  # type: ignore[attr-defined]
        run_job(cfg)

    monkeypatch.setattr(cli, "_run_job", spy)
    monkeypatch.setattr(sys, "argv", ["the-caller", "--its-own-flag"])
    assert main(["collect", *FAST, "policy=oracle", "episodes=2", f"out={tmp_path / 'run'}"]) == 0
    assert seen == [(["the-caller", "--its-own-flag"], 2, "collect")]
    assert len(load(tmp_path / "run").episodes) == 2
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file()  # a Hydra run, not just a composed config
    capsys.readouterr()
    assert main(["collect", "--cfg", "job", *FAST, "episodes=5"]) == 0
    assert "episodes: 5" in capsys.readouterr().out and len(seen) == 1
    assert main(["collect", "--no-such-flag"]) == 2
    assert "usage: mcp-gym collect" in capsys.readouterr().err


def test_bad_override_fails(tmp_path: Path) -> None:
    assert main(["collect", *FAST, "no_such_key=1", f"out={tmp_path}"]) != 0
    assert main(["collect", *FAST, "policy=nope", f"out={tmp_path}"]) != 0


def test_same_seed_same_episodes_at_any_concurrency(tmp_path: Path) -> None:
    args = [*FAST, "policy=random", "episodes=12", "seed=3"]
    assert main(["collect", *args, "launcher.num_envs=1", f"out={tmp_path / 'a'}"]) == 0
    assert main(["collect", *args, "launcher.num_envs=6", f"out={tmp_path / 'b'}"]) == 0
    a, b = _keyed_actions(tmp_path / "a"), _keyed_actions(tmp_path / "b")
    assert len(a) == 12 and a == b


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcp_gym.cli", *args]


ANSWERS_BEFORE_SIGINT = 45
"""Chat answers the interrupted job gets: a Counter episode takes 3 to 5 (a first reply without a call, 1 to 3 adds, the
submit), so at least 7 episodes (45 less the 2 x 4 of two unfinished ones, over 5) and at most 15 of the 30 finish."""


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_interrupt_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGINT a collection after some episodes finished; it exits 130 keeping them, and the rerun completes the plan.

    The policy is an LLM behind a local chat-completions server answering in 20 ms, so the run takes seconds. The
    interrupted run is a process (SIGINT); the rerun is the same command through ``main`` in this process. The server
    holds every answer after the first :data:`ANSWERS_BEFORE_SIGINT` until the SIGINT is sent: however long this
    process waits to see five episodes done (a loaded machine), the job cannot finish all 30 meanwhile."""
    run = tmp_path / "run"
    script, sent, answered = ScriptedChat(), threading.Event(), itertools.count(1)

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        if next(answered) > ANSWERS_BEFORE_SIGINT:
            sent.wait(600)
        return script.reply(body, headers.get("Authorization"))

    with serve_chat_completions(reply, delay=0.02) as url:
        args = ["collect", *FAST, "policy=openai", f"policy.base_url={url}", "policy.api_key=sk-test", "episodes=30",
                "launcher.num_envs=2", f"out={run}"]
        cmd = _cli(*args)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 600  # a bound on hangs: a loaded machine may take long for 5 episodes
            while time.monotonic() < deadline and proc.poll() is None:
                if (run / "manifest.json").exists() and len(RunDirectory(run).done_keys()) >= 5:
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            output, _ = proc.communicate(timeout=60)
        finally:
            sent.set()  # the held answers go out (to a job that is gone); the rerun below is answered at once
        assert proc.returncode == 130, output
        done = RunDirectory(run).done_keys()
        assert 5 <= len(done) < 30, output
        assert len(load(run).episodes) == len(done)

        capsys.readouterr()
        assert main(args) == 0
        assert script.problems == []
    assert f"30 of 30 planned episodes recorded ({30 - len(done)} new" in capsys.readouterr().out
    episodes = load(run).episodes
    assert len(episodes) == 30 and sorted(episodes["episode_key"]) == sorted(RunDirectory(run).planned)
    assert all(episodes["success"])


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_serve_and_inspect(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    server, port = start_server(_cli("serve", "counter", "--transport", "http", "--port", "0"))
    try:
        assert main(["inspect", f"http://127.0.0.1:{port}/mcp", "--json"]) == 0
        listing = json.loads(capsys.readouterr().out)
        assert listing["server"]["name"] == "mcp-gym-counter"
        assert {"add", "get_count"} <= {t["name"] for t in listing["tools"]}
        assert [r["uri"] for r in listing["resources"]] == ["counter://state"]
    finally:
        server.terminate()
        server.wait(10)
    monkeypatch.setenv("MCP_GYM_DIAGNOSTICS", "1")  # the server inherits our environment
    # (two -W options make the command line long: the header names it on one line even past a pipe's 80 columns)
    command = (f"{sys.executable} -W ignore::ResourceWarning -W ignore::PendingDeprecationWarning "
               "-m mcp_gym.servers.counter")
    assert main(["inspect", command]) == 0
    shown = capsys.readouterr().out
    assert "Tools (" in shown and "unlock_bonus" in shown and "counter://state" in shown
    assert shown.splitlines()[0].endswith(f"(stdio: {command})"), shown.splitlines()[:2]
    with bound_socket() as held:  # never listening: nothing listens on its port, and nothing else can start to
        assert main(["inspect", f"http://127.0.0.1:{held.getsockname()[1]}/mcp", "--timeout", "3"]) == 1


def test_serve_over_http_on_port_0_says_the_port_it_got() -> None:
    """``mcp-gym serve ... --transport http --port 0`` listens on a free port the kernel picks and, once it listens,
    says which on stderr (it used to say ``http://127.0.0.1:0/mcp``, so a caller could not find it)."""
    import re
    import select
    import socket

    server = subprocess.Popen(_cli("serve", "counter", "--transport", "http", "--port", "0"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        assert select.select([server.stderr], [], [], 120)[0], "mcp-gym serve said nothing within 120 s"
        line = server.stderr.readline().strip()
        said = re.fullmatch(r"serving mcp_gym\.servers\.counter on http://127\.0\.0\.1:(\d+)/mcp", line)
        assert said is not None and int(said[1]) > 0, line
        socket.create_connection(("127.0.0.1", int(said[1])), timeout=10).close()  # it listens there already
    finally:
        server.terminate()
        server.wait(10)


# -- run identity: a rerun with another config refuses, more episodes/samples extend ----------------------------------
def _refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a refused job (exit status 2, no traceback)."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_rerun_with_another_model_refuses(tmp_path: Path) -> None:
    """eval with model A, then model B into the same out=: B refuses (naming policy.model) and A's report stays."""
    out = tmp_path / "eval"
    with serve_chat() as (url, script):
        args = ["eval", *FAST, "policy=openai", f"policy.base_url={url}", "policy.api_key=sk-test", "samples=1",
                "episodes=4", "plots=false", f"out={out}"]
        assert main([*args, "policy.model=good"]) == 0
        before = (out / "report" / "results.json").read_text()
        hydra_config = (out / ".hydra" / "config.yaml").read_text()
        requests = len(script.requests)
        proc = subprocess.run(_cli(*args, "policy.model=bad"), capture_output=True, text=True, timeout=120)
        line = _refusal(proc)
        assert "policy.model: 'good' -> 'bad'" in line and "out=" in line and str(out) in line
        assert len(script.requests) == requests  # model B never ran
        assert (out / "report" / "results.json").read_text() == before  # A's results are not reported as B's
        assert (out / ".hydra" / "config.yaml").read_text() == hydra_config  # and .hydra/ still describes A
        assert "Evaluation" not in proc.stdout
        # Only the API key or the timeout changed: the same run, resumed (nothing to do).
        assert main([*args, "policy.model=good", "policy.api_key=sk-other", "policy.timeout=5"]) == 0
        assert len(script.requests) == requests


@pytest.mark.slow
def test_rerun_with_another_max_steps_or_seed_refuses(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["collect", *FAST, "policy=random", "episodes=3", f"out={out}"]
    assert main(base) == 0
    for change, named in (("env.max_steps=3", "env.max_steps: 10 -> 3"), ("seed=7", "seed: 0 -> 7"),
                          ("split=test", "split: 'train' -> 'test'")):
        assert named in _refusal(subprocess.run(_cli(*base, change), capture_output=True, text=True, timeout=120))
    assert len(load(out).episodes) == 3
    # The env's own limit spelled out, or another transport, is the same run.
    assert main([*base, "env.max_steps=10", "env.transport=stdio"]) == 0
    # HYDRA_FULL_ERROR=1 shows the traceback.
    proc = subprocess.run(_cli(*base, "seed=7"), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "RunConfigMismatch" in proc.stderr


@pytest.mark.slow
def test_growing_episodes_runs_only_the_new_ones(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["collect", *FAST, "policy=random", f"out={out}"]
    assert main([*base, "episodes=4"]) == 0
    first = {r["episode_key"]: r["episode_id"] for r in load(out).episodes}
    proc = subprocess.run(_cli(*base, "episodes=7"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "7 of 7 planned episodes recorded (3 new" in proc.stdout
    after = {r["episode_key"]: r["episode_id"] for r in load(out).episodes}
    assert len(after) == 7 and all(after[k] == v for k, v in first.items())  # the first 4 were not rerun
    assert RunDirectory(out).manifest["metadata"]["identity"]["episodes"] == 7
    # Shrinking is not growing: refused.
    line = _refusal(subprocess.run(_cli(*base, "episodes=5"), capture_output=True, text=True, timeout=120))
    assert "episodes: 7 -> 5" in line


def test_eval_growing_samples_scores_every_sample(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    base = ["eval", *FAST, "policy=oracle", "plots=false", f"out={out}"]
    assert main([*base, "samples=1"]) == 0
    assert main([*base, "samples=2"]) == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert summary["episodes"] == 48 and "pass@2" in summary and "missing_episodes" not in summary


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_rerun_with_changed_tasks_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same task ids, another prompt: the task set's digest is part of the run identity."""
    from mcp_gym.envs import load_env_tasks
    from mcp_gym.tasks import save_tasks

    tasks = load_env_tasks("Counter", "train")[:3]
    path = save_tasks(tasks, tmp_path / "tasks.jsonl")
    out = tmp_path / "run"
    base = ["collect", "env=custom", f"+env.servers.counter={sys.executable} -m mcp_gym.servers.counter",
            f"env.tasks={path}", "split=train", "policy=oracle", "launcher.progress=false", f"out={out}"]
    assert main(base) == 0 and len(load(out).episodes) == 3
    assert main(base) == 0  # unchanged: resumes (nothing to do)
    changed = [dataclasses.replace(tasks[0], prompt=tasks[0].prompt + " Be quick."), *tasks[1:]]
    save_tasks(changed, path)
    capsys.readouterr()
    assert main(base) == 2  # refused (the refusal as a process: test_rerun_with_another_model_refuses)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "env.task_set: '" in line and "policy" not in line


def test_ray_launcher_cleanup_suppresses_errors_but_not_ctrl_c() -> None:
    """Killing dead Ray actors may raise anything; Ctrl-C during that clean-up must still stop the job."""
    from mcp_gym.jobs.ray_launcher import _suppress

    with _suppress():
        raise RuntimeError("actor already dead")
    for stop in (KeyboardInterrupt, SystemExit):
        with pytest.raises(stop), _suppress():
            raise stop()


def test_tasks_help_lists_every_tasks_command(capsys: pytest.CaptureFixture[str]) -> None:
    """``mcp-gym tasks --help`` is a help page naming each subcommand (exit 0); a bare ``mcp-gym tasks`` says the same
    on stderr and exits 2."""
    assert main(["tasks", "--help"]) == 0
    out = capsys.readouterr().out
    for command in ("validate", "generate", "import mcpmark", "import bfcl"):
        assert f"\n  {command} " in out, command
    assert main(["tasks"]) == 2
    assert "import bfcl" in capsys.readouterr().err
    # `tasks import --help` went to MCPMark's parser, whose help listed {mcpmark} alone: a user never learnt of bfcl
    assert main(["tasks", "import", "--help"]) == 0
    out = capsys.readouterr().out
    assert "{mcpmark,bfcl}" in out and "\n  import bfcl PATH" in out and "\n  import mcpmark PATH" in out
    assert main(["tasks", "import"]) == 2
    assert "import bfcl" in capsys.readouterr().err


HELD_HANDSHAKE_SERVER = Path(__file__).parent / "_held_handshake_server.py"


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_ctrl_c_while_a_server_is_in_its_handshake_stops_the_job(tmp_path: Path) -> None:
    """SIGINT an eval job while its first reset waits for a server's answer to ``initialize`` (the server has the
    request: it said so): the job stops with exit 130 and its message at once, and no server process is left. The
    connect timeout is an hour: a job that waited the handshake out (the close of a connecting server used to wait
    for it to connect) would outlive the bound below by far."""
    pids = tmp_path / "pids"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "prompt": "p", "solution": [{"tool": "submit", "arguments": {}}]}) + "\n")
    server = f'+env.servers.s="{sys.executable} {HELD_HANDSHAKE_SERVER} {pids}"'
    cmd = _cli("eval", "env=custom", server, f"env.tasks={tasks}", "env.connect_timeout=3600", "policy=oracle",
               "samples=1", "launcher.progress=false", "plots=false", f"out={tmp_path / 'run'}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a bound on a hang: the job imports, plans and starts its server
        while time.monotonic() < deadline and proc.poll() is None and not (pids.exists() and pids.read_text()):
            time.sleep(0.05)
        assert pids.exists() and pids.read_text(), "the server never got its initialize request"
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, output
    assert "interrupted; finished episodes are saved, rerun the same command to resume" in output
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"server {pid} outlived the job"


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, exited and not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _waiting_line(main_thread: int) -> int | None:
    """The line of run_interruptible where the main thread waits for the job's future, if it does."""
    frame, waiting = sys._current_frames().get(main_thread), False
    while frame is not None:
        if frame.f_code.co_name == "result":
            waiting = True
        if frame.f_code.co_name == "run_interruptible":
            return frame.f_lineno if waiting else None
        frame = frame.f_back
    return None


def _ctrl_c_once_run_interruptible_waits(main_thread: int, then: threading.Event | None = None,
                                        started: threading.Event | None = None) -> threading.Thread:
    """A thread that sends SIGINT to the main thread once it waits for the job's future in run_interruptible (and,
    with ``started``, once the job has started on the loop); with ``then``, it waits until the main thread waits again
    (past handling the interrupt), then sets ``then`` (whatever happens)."""

    def interrupt() -> None:
        try:
            deadline = time.monotonic() + 300  # a bound on hangs only
            if started is not None:
                started.wait(300)
            while (first := _waiting_line(main_thread)) is None and time.monotonic() < deadline:
                time.sleep(0.001)
            signal.pthread_kill(main_thread, signal.SIGINT)
            while then is not None and _waiting_line(main_thread) in (None, first) and time.monotonic() < deadline:
                time.sleep(0.001)  # until it waits again, past handling the interrupt
        finally:
            if then is not None:
                then.set()

    helper = threading.Thread(target=interrupt)
    helper.start()
    return helper


def test_ctrl_c_before_the_loop_starts_a_job_never_starts_it() -> None:
    """A Ctrl-C that lands while the runtime's loop has not yet started the job (busy: here held by a callback until
    the interrupt is handled) stops it all the same: the job never starts and :class:`JobInterrupted` is raised (the
    job's cancellation used to reach only a job already running, so this one ran to its end after the Ctrl-C)."""
    from mcp_gym.client.runtime import Runtime
    from mcp_gym.jobs import JobInterrupted
    from mcp_gym.jobs.collect import run_interruptible

    assert threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    rt = Runtime(threaded=True)
    gate, started = threading.Event(), []
    rt.loop.call_soon_threadsafe(gate.wait, 600)  # the loop is busy until the interrupt is handled

    async def job() -> None:
        started.append(True)

    helper = _ctrl_c_once_run_interruptible_waits(main_thread, gate)
    try:
        with no_automatic_gc(), pytest.raises(JobInterrupted):
            run_interruptible(job, rt)
    finally:
        helper.join(600)
        rt.close()
    assert started == []


def test_an_error_in_the_clean_up_of_an_interrupted_job_does_not_replace_the_ctrl_c(
        caplog: pytest.LogCaptureFixture) -> None:
    """A Ctrl-C during a job whose clean-up then fails (its cancelled episodes' servers fail to stop, a recording
    fails to close) is still :class:`JobInterrupted` (exit status 130), the error logged: the error used to replace
    the interrupt, and the job ended with exit status 1 (Hydra's report of an exception) after a Ctrl-C. The job
    runs until the interrupt is handled (it waits for good) and the Ctrl-C comes once it runs (on a loaded machine
    the main thread could wait before the loop had started the job, which a Ctrl-C then never starts): nothing here
    depends on timing."""
    import anyio

    from mcp_gym.client.runtime import Runtime
    from mcp_gym.jobs import JobInterrupted
    from mcp_gym.jobs.collect import run_interruptible

    assert threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    rt = Runtime(threaded=True)
    cancelled: list[bool] = []
    started = threading.Event()  # a Ctrl-C before the loop starts the job never starts it (the test below)

    async def job() -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            cancelled.append(True)
            raise RuntimeError("server s did not stop")

    helper = _ctrl_c_once_run_interruptible_waits(main_thread, started=started)
    try:
        with (no_automatic_gc(), caplog.at_level(logging.WARNING, logger="mcp_gym.jobs.collect"),
              pytest.raises(JobInterrupted)):
            run_interruptible(job, rt)
    finally:
        helper.join(600)
        rt.close()
    assert cancelled == [True]
    assert "while stopping the interrupted job: RuntimeError: server s did not stop" in caplog.text


def test_a_job_recording_a_workspace_server_is_refused_in_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``record=`` on a server started per episode on ``{workspace}`` (its cassette could not replay) stops the job in
    one line naming the server (exit status 2) before anything is recorded (tests/test_cassette.py: the env's own
    refusal)."""
    import re

    fs = str(Path(__file__).parent / "servers" / "fs_server.py")
    code = main(["eval", "env=custom", f"+env.servers.fs.command={sys.executable}", f"+env.servers.fs.args=[{fs},"
                 "'{workspace}']", f"+env.servers.fs.record={tmp_path / 'cassettes'}", "policy=noop", "samples=1",
                 "plots=false", "launcher.progress=false", f"out={tmp_path / 'job'}"])
    err = capsys.readouterr().err
    refused = (r"mcp-gym eval: server 'fs': record= cannot make a cassette that replays for a server started per "
               r"episode on \{workspace\}")
    assert code == 2 and re.match(refused, err) and err.count("\n") == 1, err  # one line
    assert not (tmp_path / "cassettes").exists()


def _schema_error(text: str) -> Exception:
    from pydantic_core import SchemaError

    return SchemaError(text)


# pydantic-core's error for a Ctrl-C while it builds a model's validator (a job's import of mcp.types, SIGINT to its
# process group: seen in 1 of 15 SIGINTs in test_spare_servers' Ctrl-C job, and in 2 of 12 during `import mcp.types`)
CTRL_C_IN_A_MODEL = ('Error building "model" validator:\n  SchemaError: Error building "model-fields" validator:\n'
                     '  SchemaError: Field "action":\n  SchemaError: Error building "literal" validator:\n'
                     '  KeyboardInterrupt: ')


def _while_a_ctrl_c_is_handled() -> None:
    try:
        raise KeyboardInterrupt
    finally:
        raise OSError("the recording failed to close")  # noqa: B012 - a clean-up error on the way up, as it happens


@pytest.mark.parametrize(("raise_", "code"), [
    (lambda: (_ for _ in ()).throw(_schema_error(CTRL_C_IN_A_MODEL)), 130),
    (_while_a_ctrl_c_is_handled, 130),
    (lambda: (_ for _ in ()).throw(_schema_error('Error building "model" validator: Field "x"')), 1),
], ids=["schema-error-naming-a-ctrl-c", "error-while-a-ctrl-c-is-handled", "a-schema-error-alone"])
def test_a_ctrl_c_that_became_another_error_in_a_job_still_exits_130(
        raise_: Any, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C during a job's set-up that reaches the CLI as another error (pydantic-core turns a KeyboardInterrupt
    raised while it builds a validator into a ``SchemaError`` naming it, with no cause; a clean-up that fails while
    the interrupt is handled) ends the job with exit status 130, as a Ctrl-C: it ended with Hydra's exit status 1 and
    a traceback. An error that is no Ctrl-C is still reported as one (exit status 1)."""
    import mcp_gym.jobs

    def evaluate(*args: Any, **kwargs: Any) -> None:
        raise_()

    monkeypatch.setattr(mcp_gym.jobs, "evaluate", evaluate, raising=False)
    assert main(["eval", "env=counter", "env.transport=inprocess", "launcher.progress=false", "plots=false",
                 f"out={tmp_path / 'run'}"]) == code
    err = capsys.readouterr().err
    assert ("Interrupted" in err) == (code == 130), err
