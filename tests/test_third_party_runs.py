"""A new user's run on third-party PyPI servers mcp-gym was never tried on (PyPI ``mcp-server-git`` per episode on a
fixture repository, ``mcp-server-time`` shared by concurrent episodes): a job none of whose episodes ran fails in one
line, and concurrent sessions of one server hand their tool listings over without a false alarm."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.lowlevel import checkpoint
from mcp import Client, StdioServerParameters
from mcp.client.caching import CacheConfig

from mcp_gym.client import _tools
from mcp_gym.client._tools import ListingHandOver, list_tools_checked

pytestmark = pytest.mark.thirdparty

BIN = Path(sys.executable).parent


def _server(name: str) -> str:
    """A PyPI server of the test extra, or a skip saying it is missing."""
    found = shutil.which(name) or BIN / name
    if not Path(found).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return str(found)


def _repo(path: Path) -> Path:
    """A one-commit git repository with an untracked ``notes.txt``: the fixture of a commit task."""
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "a@b.c"], ["config", "user.name", "A"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "add", "."], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=path, check=True)
    (path / "notes.txt").write_text("new file\n")
    return path


def test_a_run_none_of_whose_episodes_ran_fails_naming_the_first_error(tmp_path: Path) -> None:
    """What the job checks at its end: no episode of this run finished and some failed to run -> ``JobFailed`` with
    the first error; one finished episode among failed ones is a run that ran (the failed ones are logged)."""
    from mcp_gym.jobs import CollectResult, JobFailed
    from mcp_gym.vector import EpisodeResult

    def failed(key: str) -> EpisodeResult:
        return EpisodeResult(key, key.split("#")[0], None, 0.0, None, 0, None, 0.0, error=f"ValueError: task {key}")

    run = CollectResult(out=tmp_path, planned=2, already_done=0)
    run.add(failed("a#0"))
    run.add(failed("b#0"))
    with pytest.raises(JobFailed, match=r"^all 2 episodes of this run failed to run \(none recorded\); first error: "
                                        r"ValueError: task a#0$"):
        run.check_servers()
    run.add(EpisodeResult("c#0", "c", "e1", 1.0, True, 2, "submit", 0.1))
    run.check_servers()


@pytest.mark.slow  # ~3-4 s (Hydra and the job in this process); fast cover: the test above (CollectResult's check)
def test_an_eval_none_of_whose_episodes_ran_exits_1_naming_the_first_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tasks with a ``fixture`` on a server whose command line names no ``{workspace}``: every episode fails to run.
    Before, the job printed an empty table and exited 0; now its last line says so, with the first error."""
    git = _server("mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = _repo(tmp_path / "fixture" / "repo")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "commit", "prompt": "Commit notes.txt.", "fixture": "fixture/repo", "answer": "ok"}\n'
                     '{"id": "log", "prompt": "Last commit message?", "fixture": "fixture/repo", "answer": "init"}\n')
    from mcp_gym.cli import main

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HYDRA_FULL_ERROR", "0")
        code = main(["eval", "env=custom", f'+env.servers.git="{git} --repository {repo}"', f"env.tasks={tasks}",
                     "policy=oracle", "samples=1", "launcher.progress=false", f"out={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mcp-gym eval: all 2 episodes of this run failed to run (none recorded); first error: "
                           "ValueError: task '"), err
    assert last.endswith("' has a fixture but no server command line names {workspace}"), err
    assert not list((tmp_path / "run").glob("episodes/*.parquet"))


class _PausedHandOver(ListingHandOver):
    """The hand-over store, with its ``get`` of a handed-over listing held while :attr:`paused` (the SDK's
    ``Client.list_tools`` reads it): the test chooses how concurrent hand-overs interleave, on the scheduler's order,
    not on the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = True
        self.resume = anyio.Event()
        self.waiting: list[str] = []

    async def get(self, key: Any) -> Any:
        name, resume = anyio.get_current_task().name, self.resume
        if self.paused and self.pending is not None:  # a handed-over listing, not yet taken
            self.waiting.append(name)
            try:
                await resume.wait()
            finally:
                self.waiting.remove(name)
        return await super().get(key)

    def step(self, paused: bool = True) -> None:
        """Let the held ``get``s go on; hold later ones while ``paused``."""
        self.paused = False
        self.resume.set()
        self.resume, self.paused = anyio.Event(), paused


@pytest.mark.slow  # 12 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_concurrent_listings_on_one_session_hand_over_without_a_false_alarm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes sharing one session of PyPI ``mcp-server-time`` (a ``collect`` of a server without ``{workspace}``)
    list its tools at once. Before, one hand-over could take another's listing while a third was under way, and the
    job printed "this mcp SDK's Client.list_tools did not take the listing ... (mcp_gym/client/_tools.py needs an
    update)" mid-progress-bar and turned the hand-over off for the rest of the process; the hand-overs now take
    turns."""
    command = _server("mcp-server-time")
    monkeypatch.setattr(_tools, "_handover_failed", False)
    store = _PausedHandOver()
    params = StdioServerParameters(command=command, args=["--local-timezone", "UTC"])
    done: dict[str, list[str]] = {}

    async def main() -> None:
        cache = CacheConfig(store=store, partition="mcp-gym", target_id="mcp-gym")
        async with Client(params, cache=cache) as client, anyio.create_task_group() as tg:
            store.step(paused=False)
            tools, _, _ = await list_tools_checked(client, None, 60)  # the checked listing each episode hands over
            store.paused = True

            async def hand_over(name: str) -> None:
                done[name] = sorted(await _tools.hand_to_session(client, tools) or ())

            async def settle(until: Any) -> None:
                with anyio.fail_after(60):  # a bound: each wait is for a state the scheduler reaches, not a time
                    while not until():
                        await checkpoint()

            tg.start_soon(hand_over, "A", name="A")
            await settle(lambda: store.waiting == ["A"])
            tg.start_soon(hand_over, "B", name="B")
            await anyio.wait_all_tasks_blocked()  # B handed its listing over and waits in get, or waits its turn
            store.step()  # A (and B, if it handed over) go on
            await settle(lambda: "A" in done)  # B, if A took its listing, now lists tools from the server
            tg.start_soon(hand_over, "C", name="C")
            await settle(lambda: "B" in done or "B" in store.waiting)
            store.step(paused=False)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        anyio.run(main)
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []
    assert not _tools._handover_failed
    assert done.keys() == {"A", "B", "C"} and all(names == ["convert_time", "get_current_time"]
                                                  for names in done.values()), done


def test_job_config_sends_the_stateful_server_warning_and_failed_episodes_to_stderr() -> None:
    """The fast cover of the test below: the jobs' logging config sends those two loggers to the stderr handler."""
    from omegaconf import OmegaConf

    conf = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "config.yaml")
    logging_conf = conf.hydra.job_logging
    assert logging_conf.handlers.stderr.stream == "ext://sys.stderr"
    for name in ("mcp_gym._stateful", "mcp_gym.jobs.collect"):
        assert logging_conf.loggers[name] == {"handlers": ["stderr"], "propagate": False}, name


@pytest.mark.slow  # ~3-4 s (Hydra and the job in this process); fast cover: the config test above
def test_a_jobs_warnings_go_to_stderr_and_its_stdout_stays_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A collect on PyPI mcp-server-git without ``{workspace}``: ``git_create_branch`` (not annotated read-only)
    changes the repository, and the one-time ``StatefulServerWarning`` says so. Before, that line (and each
    "episode ... failed (not recorded)") went to stdout, into the job's report; it goes to stderr, as the notices of
    servers that failed to start do."""
    from mcp_gym import _stateful
    from mcp_gym.cli import main

    git = _server("mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.setattr(_stateful, "_warned", set())
    repo = _repo(tmp_path / "repo")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "branch", "prompt": "Create branch feature.", "answer": "ok", "solution": [{"tool": '
                     f'"git_create_branch", "arguments": {{"repo_path": "{repo}", "branch_name": "feature"}}}}]}}\n')
    capsys.readouterr()
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    code = main(["collect", "env=custom", f'+env.servers.git="{git} --repository {repo}"', f"env.tasks={tasks}",
                 "policy=oracle", "episodes=1", "launcher.progress=false", f"out={tmp_path / 'run'}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "server 'git' has no mcp_gym_reset tool" in err, (out, err)
    assert out.strip().splitlines() == [f"{tmp_path / 'run'}: 1 of 1 planned episodes recorded (1 new, 2 steps in "
                                        + out.split(" steps in ")[-1].strip()], out


@pytest.mark.parametrize("override", ["env.max_steps=0", "env.max_steps=-1", "env.max_turns=0",
                                      "env.max_tool_calls=0"])
def test_a_budget_below_one_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, override: str) -> None:
    """``env.max_steps=0`` ran one step of every episode, then cut it off (``termination: max_steps``), and
    ``env.max_turns=0`` ended the job in a traceback; each is refused before anything runs (exit status 2), and
    ``MCPEnv(max_steps=0)`` raises as ``MCPEnv(max_turns=0)`` does."""
    from mcp_gym import MCPEnv
    from mcp_gym.cli import main

    git = _server("mcp-server-git")
    key, value = override.split("=")
    with pytest.raises(ValueError, match=rf"^{key[4:]} must be a positive integer or None, got {value}$"):
        MCPEnv({"git": f"{git} --repository {tmp_path}"}, ["t"], **{key[4:]: int(value)})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "t", "prompt": "Say ok.", "answer": "ok"}\n')
    capsys.readouterr()
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    code = main(["collect", "env=custom", f'+env.servers.git="{git} --repository {tmp_path}"', f"env.tasks={tasks}",
                 override, "policy=oracle", "launcher.progress=false", f"out={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines() == [f"mcp-gym collect: {key} must be a positive integer or null, not {value}"]
    assert not (tmp_path / "run" / "episodes").exists()


def _documented_git_pin() -> str:
    """The mcp-server-git command line with a pinned clock that docs/tasks-generate.md gives."""
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "tasks-generate.md").read_text(encoding="utf-8")
    documented = re.search(r"'\+env\.servers\.git=\"(env GIT_AUTHOR_DATE=[^\"]*)\"'", page)
    assert documented is not None
    return documented[1]


def test_the_documented_clock_pin_is_a_date_gitpython_reads() -> None:
    """The fast cover of the test below: mcp-server-git commits through GitPython, whose date parser must read the
    documented ``GIT_AUTHOR_DATE``/``GIT_COMMITTER_DATE`` (it refused the ``...Z`` the page gave)."""
    import shlex

    from git.objects.util import parse_date  # GitPython: what mcp-server-git commits with (the test extra)

    values = dict(word.split("=", 1) for word in shlex.split(_documented_git_pin()) if "=" in word)
    assert set(values) == {"GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"}
    for value in values.values():
        assert parse_date(value) == (1767398400, 0), value  # 2026-01-03 00:00 UTC


@pytest.mark.slow  # ~5 s: two episodes, each starting mcp-server-git; fast cover: the GitPython test above
def test_the_documented_clock_pin_of_mcp_server_git_commits_alike_in_every_episode(tmp_path: Path) -> None:
    """docs/tasks-generate.md pins mcp-server-git's clock so that a commit's hash is the same in every episode. With
    the ``...T00:00:00Z`` it gave, GitPython refused the date and every ``git_commit`` failed ("Unsupported date format
    or type"): a commit task could never be solved, and the generator never proposed one."""
    import shlex

    from mcp_gym import MCPEnv
    from mcp_gym.tasks import load_task_source

    git = _server("mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    command = shlex.split(_documented_git_pin().replace("mcp-server-git", git))
    _repo(tmp_path / "fixture")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "commit", "prompt": "Commit notes.txt.", "fixture": "fixture", "answer": "ok"}\n')
    env = MCPEnv({"git": " ".join(shlex.quote(c) for c in command)}, load_task_source(tasks), call_timeout=60)
    results = []
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            env.step({"tool": "git_add", "arguments": {"repo_path": "{workspace}", "files": ["notes.txt"]}})
            obs, _, _, _, info = env.step({"tool": "git_commit", "arguments": {"repo_path": "{workspace}",
                                                                                "message": "add notes"}})
            assert info["error"] is None, obs["result"]
            results.append(obs["result"])
    finally:
        env.close()
    assert results[0].startswith("Changes committed successfully with hash ") and results[0] == results[1], results


def test_every_logger_the_jobs_route_is_put_back_after_each_test() -> None:
    """An in-process job's Hydra ``dictConfig`` sets these loggers up (a handler on the stderr pytest captured, not
    propagating): ``conftest.logging_kept`` must undo each, or a later test's ``caplog`` sees none of its records."""
    from conftest import KEPT_LOGGERS
    from omegaconf import OmegaConf

    conf = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "config.yaml")
    routed = [name for name, spec in conf.hydra.job_logging.loggers.items() if "handlers" in spec]
    assert routed and set(routed) <= set(KEPT_LOGGERS), routed


@pytest.mark.slow  # 12 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_a_hand_over_waiting_its_turn_is_bounded_by_the_listing_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing whose hand-over waits (behind another session's, here held forever) ends at the listing's
    ``timeout`` with ``TimeoutError`` (the connection then reports "timed out ... listing tools"), never hangs, and
    leaves no handed listing behind for a later ``list_tools`` to take."""
    command = _server("mcp-server-time")
    monkeypatch.setattr(_tools, "_handover_failed", False)
    store = _PausedHandOver()
    params = StdioServerParameters(command=command, args=["--local-timezone", "UTC"])

    async def main() -> None:
        cache = CacheConfig(store=store, partition="mcp-gym", target_id="mcp-gym")
        async with Client(params, cache=cache) as client, anyio.create_task_group() as tg:
            store.step(paused=False)
            tools, _, _ = await list_tools_checked(client, None, 60)
            store.paused = True
            tg.start_soon(_tools.hand_to_session, client, tools, name="held")  # waits in get until released
            with anyio.fail_after(60):  # the guard of this test: a hang fails it
                with pytest.raises(TimeoutError):
                    await list_tools_checked(client, None, 0.2)
            assert store.waiting == ["held"]
            store.step(paused=False)

    anyio.run(main)
    assert store.pending is None and not _tools._handover_failed
