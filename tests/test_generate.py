"""``mcp-gym tasks generate`` on real third-party servers (npm server-memory and server-filesystem, PyPI
mcp-server-git): the explore generator's tasks pass ``tasks validate`` and the oracle, fail ``policy=noop``, and the
same seed gives the same file; the llm generator against a scripted chat-completions server keeps exactly the good
proposals."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from _chat_server import chat_completion, serve_chat_completions
from _git_fixture import make_git_repo
from conftest import ROOT, npm_bin

from mcp_gym.cli import main

pytestmark = pytest.mark.thirdparty


def memory_server() -> str:
    return f'+env.servers.memory="env MEMORY_FILE_PATH={{workspace}}/m.jsonl {npm_bin("mcp-server-memory")}"'


def filesystem_server() -> str:
    return f'+env.servers.fs="{npm_bin("mcp-server-filesystem")} {{workspace}}"'


def git_server() -> str:
    """mcp-server-git with its clock pinned for commits: a commit's hash depends on its time, and a hash is no date
    the generator can recognise and set aside (GitPython's own format: it refuses a trailing ``Z``)."""
    date = "2026-01-03T00:00:00"
    return f'+env.servers.git="env GIT_AUTHOR_DATE={date} GIT_COMMITTER_DATE={date} mcp-server-git --repository ' \
        '{workspace}"'


def generate(out: Path, server: str, *extra: str, code: int = 0) -> list[dict[str, Any]]:
    """Run ``tasks generate``, check its exit status (1: no task kept), and return the task file's rows."""
    assert main(["tasks", "generate", "env=custom", server, f"out={out}", *extra]) == code
    return [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]


def rates(tmp: Path, server: str, tasks: Path, *extra: str) -> tuple[float, float]:
    """validate's pass share and the noop policy's success rate on a task file."""
    assert main(["tasks", "validate", "env=custom", server, f"env.tasks={tasks}", f"out={tmp / 'validate'}",
                 *extra]) == 0
    checks = json.loads((tmp / "validate" / "validation.json").read_text())
    passed = sum(c["status"] == "passed" for c in checks) / len(checks)
    out = {}
    for policy in ("oracle", "noop"):
        assert main(["eval", "env=custom", server, f"env.tasks={tasks}", "split=null", "samples=1",
                     f"policy={policy}", f"out={tmp / policy}", "launcher.progress=false", "plots=false",
                     *extra]) == 0
        out[policy] = json.loads((tmp / policy / "report" / "results.json").read_text())["summary"]["success_rate"]
    assert out["oracle"] == 1.0
    return passed, out["noop"]


@pytest.mark.slow  # ~40 s of server-memory restarts (quiet): the heavy lane
@pytest.mark.timeout(1200)  # five generate jobs: over 300 s at load 20 (a fresh-clone heavy lane)
def test_explore_memory_small(tmp_path: Path) -> None:
    """The fast lane: a few tasks on server-memory pass validate and the oracle, fail noop; a rerun with a larger n
    extends the file (no duplicates); same seed, same file; a dry run writes nothing."""
    rows = generate(tmp_path / "a", memory_server(), "n=6", "seed=3")
    assert len(rows) == 6 and len({r["id"] for r in rows}) == 6
    assert all(any(t.startswith("calls:") for t in r["tags"]) and any(t.startswith("tool:") for t in r["tags"])
               for r in rows)
    assert {r["split"] for r in rows} <= {"train", "validation", "test"}
    by_solution: dict[str, set[str]] = {}
    for r in rows:
        by_solution.setdefault(r["solution"], set()).add(r["split"])
    assert all(len(s) == 1 for s in by_solution.values())  # no solution shared across splits
    passed, noop = rates(tmp_path, memory_server(), tmp_path / "a" / "tasks.jsonl")
    assert (passed, noop) == (1.0, 0.0)
    assert (tmp_path / "b").exists() is False
    rows_b = generate(tmp_path / "b", memory_server(), "n=6", "seed=3")
    assert rows_b == rows
    more = generate(tmp_path / "a", memory_server(), "n=8", "seed=3")
    assert more[:6] == rows and len(more) == 8 and len({r["id"] for r in more}) == 8
    ledger = [json.loads(line) for line in (tmp_path / "a" / "proposals.jsonl").read_text().splitlines()]
    assert sum(r["verdict"] == "kept" for r in ledger) == 8
    assert main(["tasks", "generate", "env=custom", memory_server(), f"out={tmp_path / 'dry'}", "dry_run=true"]) == 0
    assert not (tmp_path / "dry" / "tasks.jsonl").exists()


def stamp_server(tmp: Path, every: int) -> str:
    """A server whose results carry "now" on a clock the test sets: ``every`` server starts share a second (1: a slow
    machine, every fresh run in a later second; 10**6: a fast one, all runs in one second)."""
    env = f"STAMP_COUNTER={tmp / f'starts-{every}'} STAMP_EVERY={every}"
    server = ROOT / "tests" / "servers" / "stamp_server.py"
    return f'+env.servers.notes="env {env} {sys.executable} {server} {{workspace}}"'


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two generations on a Python server restarted for every fresh run
def test_explore_does_not_depend_on_the_clock(tmp_path: Path) -> None:
    """Results stamped with the time make neither answers nor checks, and runs are compared without them: a machine
    where every fresh run falls in a later second and one where all fall in the same second keep the same tasks."""
    args = ["n=3", "seed=1", '+generator.fixed.name="memo"', "generator.walk_length=3"]
    slow = generate(tmp_path / "slow", stamp_server(tmp_path, 1), *args)
    fast = generate(tmp_path / "fast", stamp_server(tmp_path, 10**6), *args)
    assert len(slow) == 3 and fast == slow
    from mcp_gym.jobs.proposers import clocklike

    assert not any(clocklike(json.dumps([r["answer"], r["grader"]])) for r in slow)


@pytest.mark.slow  # walks until max_proposals on a restarted server: the heavy lane
def test_explore_ends_when_no_walk_proposes_anything(tmp_path: Path) -> None:
    """A server whose every result differs between runs (a fresh random token) gives walks that propose nothing: the
    run ends after ``max_proposals`` walks with what it has (here nothing: exit 1), instead of walking forever; its
    calls succeed, so ``generator.max_failed_walks`` does not end it sooner."""
    clock = f'+env.servers.clock="{sys.executable} {ROOT / "tests" / "servers" / "clock_server.py"}"'
    assert generate(tmp_path / "out", clock, "n=2", "max_proposals=3", "generator.max_failed_walks=1", code=1) == []


def git_fixture(tmp: Path) -> Path:
    return make_git_repo(tmp / "repo")


def files_fixture(tmp: Path) -> Path:
    root = tmp / "files"
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").write_text("buy milk\ncall Ada\n")
    (root / "docs" / "readme.md").write_text("# Project\nversion: 1.2\nowner: Ada\n")
    (root / "docs" / "todo.txt").write_text("write tests\n")
    return root


SERVERS = {
    "memory": (memory_server, lambda tmp: []),
    "filesystem": (filesystem_server,
                   lambda tmp: [f"fixture={files_fixture(tmp)}", 'generator.values=["{workspace}"]']),
    "git": (git_server, lambda tmp: [f"fixture={git_fixture(tmp)}", '+generator.fixed.repo_path="{workspace}"',
                                     "+generator.fixed.branch_type=local"]),
}


CI_TASKS = {"memory": 50, "filesystem": 20, "git": 10}
"""Tasks per server in CI's heavy lane (a 50-task run restarts its server about 250 times: 5 min on memory, 9 to 17
on git). ``MCP_GYM_GENERATE_N=50`` runs the docs' table (all three at 50: 42 min on 2 workers)."""


@pytest.mark.slow
@pytest.mark.timeout(3600)  # two generations of n tasks (about 5 fresh server starts per task each), validate, eval
@pytest.mark.parametrize("name", list(SERVERS))
def test_explore_fifty_tasks(tmp_path: Path, name: str) -> None:
    """The issue's bar: >= 50 tasks on each third-party server (``MCP_GYM_GENERATE_N=50``; CI: :data:`CI_TASKS`),
    validate 100 %, oracle 100 %, noop 0 %, the same seed twice gives the same file."""
    server, extra = SERVERS[name]
    args = extra(tmp_path)
    n = int(os.environ.get("MCP_GYM_GENERATE_N") or CI_TASKS[name])
    rows = generate(tmp_path / "a", server(), f"n={n}", "seed=0", *args)
    assert len(rows) == n
    passed, noop = rates(tmp_path, server(), tmp_path / "a" / "tasks.jsonl")
    assert (passed, noop) == (1.0, 0.0)
    again = generate(tmp_path / "b", server(), f"n={n}", "seed=0", *args)
    assert again == rows


def _entity(name: str, obs: str = "likes tea") -> dict[str, Any]:
    return {"tool": "memory__create_entities", "arguments": {"entities": [{"name": name, "entityType": "person",
                                                                   "observations": [obs]}]}}


READ_GRAPH = {"tool": "memory__read_graph", "arguments": {}}
PROPOSALS: list[tuple[str | None, Any]] = [  # (the reason it is dropped, or None: kept), the proposal
    (None, {"prompt": "Record that Alice (a person) likes tea.", "solution": [_entity("Alice")],
            "check": {"state": READ_GRAPH}}),
    (None, {"prompt": "Create Bob (a person who likes jazz), remove that observation, and report the message the "
                      "server answers the removal with.",
            "solution": [_entity("Bob", "likes jazz"), {"tool": "memory__delete_observations", "arguments": {
                "deletions": [{"entityName": "Bob", "observations": ["likes jazz"]}]}}],
            "check": {"answer": {"step": 2, "path": "$.message"}}, "answer": "a guess, ignored"}),
    ("solution failed", {"prompt": "Call a tool that does not take these arguments.",
                         "solution": [{"tool": "memory__delete_relations", "arguments": {"relations": [
                             {"from": "Nobody", "to": "Nowhere", "relationType": "knows"}]}}, {
                             "tool": "memory__add_observations", "arguments": {"observations": [
                                 {"entityName": "Nobody", "contents": ["x"]}]}}],
                         "check": {"state": READ_GRAPH}}),
    ("passes with no action", {"prompt": "Report what read_graph returns for relations.", "solution": [READ_GRAPH],
                               "check": {"state": READ_GRAPH}}),
    ("duplicate", {"prompt": "Store that Alice (a person) likes tea.", "solution": [_entity("Alice")],
                   "check": {"state": READ_GRAPH}}),
    ("malformed", {"prompt": "No solution at all", "check": {"state": READ_GRAPH}}),
    ("flaky", {"prompt": "Get a token and report it.", "solution": [{"tool": "clock__token", "arguments": {}}],
               "check": {"answer": {"step": 1, "path": "text"}}}),
    ("check not derivable", {"prompt": "Create Carol and report a field her result does not have.",
                             "solution": [_entity("Carol")],
                             "check": {"answer": {"step": 1, "path": "$.entities[0].age"}}}),
]


# Heavy lane (11 s: an llm generate job over a scripted endpoint and its validation); its fast cover:
# test_facts_about_now_make_no_answer (the llm generator end to end) and the explore tests for what is kept.
@pytest.mark.slow
def test_llm_generator_keeps_exactly_the_good_proposals(tmp_path: Path) -> None:
    """A scripted chat-completions server proposes good tasks, malformed JSON, a failing solution, a task that passes
    with no action, a flaky check (a token that differs in every run) and duplicates: exactly the good ones are kept,
    every drop has its reason."""
    requests: list[dict[str, Any]] = []
    clock = f'+env.servers.clock="{sys.executable} {ROOT / "tests" / "servers" / "clock_server.py"}"'

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        requests.append(body)
        if len(requests) == 1:
            return chat_completion(body, {"role": "assistant", "content": "here are tasks: [{oops"})
        if len(requests) == 2:
            content = "```json\n" + json.dumps([p for _, p in PROPOSALS]) + "\n```"
            return chat_completion(body, {"role": "assistant", "content": content})
        return chat_completion(body, {"role": "assistant", "content": "[]"})

    with serve_chat_completions(reply) as url:
        rows = generate(tmp_path / "out", memory_server(), clock, "generator=llm", f"generator.base_url={url}",
                        "generator.model=proposer", "generator.rounds=3", "n=5")
    assert sorted(r["prompt"] for r in rows) == sorted(p["prompt"] for reason, p in PROPOSALS if reason is None)
    bob = next(r for r in rows if r["prompt"].startswith("Create Bob"))
    assert bob["answer"] == "Observations deleted successfully"  # from the real result, not the proposer's guess
    ledger = [json.loads(line) for line in (tmp_path / "out" / "proposals.jsonl").read_text().splitlines()]
    verdicts = [r["verdict"] for r in ledger]
    assert verdicts[0] == "malformed"  # the reply that is not JSON
    assert verdicts[1:] == ["kept" if reason is None else reason for reason, _ in PROPOSALS]
    assert all(r.get("detail") for r in ledger if r["verdict"] != "kept")
    # the proposer saw the tools and, in later requests, the kept tasks
    assert "memory__create_entities" in requests[0]["messages"][1]["content"]
    assert "Record that Alice" in requests[2]["messages"][1]["content"]
    assert "tools" not in requests[0]
    passed, noop = rates(tmp_path, memory_server(), tmp_path / "out" / "tasks.jsonl", clock)
    assert (passed, noop) == (1.0, 0.0)


@pytest.mark.slow  # two generate runs over npm server-everything: 36 s of the fast lane's 5 minutes
@pytest.mark.timeout(600)
def test_generator_seed_varies_the_walks_not_the_splits(tmp_path: Path) -> None:
    """Runs with one job ``seed`` and different ``generator.seed`` (side by side, e.g. on several cores) propose
    different tasks whose splits hash with the job's seed: the same solution lands in the same split in every run."""
    from types import SimpleNamespace

    from mcp_gym.jobs.generate import _Checker

    server = f'+env.servers.everything="{npm_bin("mcp-server-everything")} stdio"'
    args = ["env.include_tools=[get-sum,echo]", "n=4", "seed=0", "generator.walk_length=2", "generator.max_calls=1",
            "splits={train: 0.5, validation: 0.25, test: 0.25}", "launcher.progress=false"]
    a = generate(tmp_path / "a", server, *args, "generator.seed=1")
    b = generate(tmp_path / "b", server, *args, "generator.seed=2")
    assert {r["solution"] for r in a}.isdisjoint(r["solution"] for r in b)  # other walks
    splits = {"train": 0.5, "validation": 0.25, "test": 0.25}
    job_seed = _Checker(SimpleNamespace(env=None), "custom", 0, splits, None)  # type: ignore[arg-type]
    walk_seed = _Checker(SimpleNamespace(env=None), "custom", 1, splits, None)  # type: ignore[arg-type]
    for r in a + b:
        key = json.dumps(json.loads(r["solution"]), sort_keys=True)
        assert r["split"] == job_seed._split(key)
    assert any(job_seed._split(k) != walk_seed._split(k) for k in (str(i) for i in range(20)))  # seeds matter


TIME_SERVER = shutil.which("mcp-server-time") or Path(sys.executable).parent / "mcp-server-time"  # the test extra's


def _time_server() -> Path:
    """PyPI mcp-server-time (the test extra), or a skip saying it is missing (a failure under .ci/run)."""
    if not Path(TIME_SERVER).exists():
        pytest.skip("mcp-server-time is not installed (pip install -e '.[test]')")
    return Path(TIME_SERVER)


def _now(tool: str, arguments: dict[str, Any], path: str) -> dict[str, Any]:
    return {"prompt": f"Call {tool} with {json.dumps(arguments)} and report {path}.",
            "solution": [{"tool": tool, "arguments": arguments}], "check": {"answer": {"step": 1, "path": path}}}


@pytest.mark.slow  # ~12 s: a fresh mcp-server-time per run; fast cover: test_facts_about_now_are_no_answer_fields
def test_facts_about_now_make_no_answer(tmp_path: Path) -> None:
    """PyPI mcp-server-time answers ``{timezone, datetime, day_of_week, is_dst}``: ``day_of_week`` and ``is_dst`` do
    not look like a date, but they are facts about the moment in ``datetime`` and change with the clock (a task
    "Tokyo's day of the week is Sunday" fails the next day, ``is_dst`` every spring; ``time_difference`` between Paris
    and Tokyo with summer time). A value of an object that holds a date or time is no answer, for the llm and the
    explore generator alike."""
    paris = {"source_timezone": "Europe/Paris", "time": "12:30", "target_timezone": "Asia/Tokyo"}
    proposals = [
        ("check not derivable", _now("get_current_time", {"timezone": "Asia/Tokyo"}, "$.day_of_week")),
        ("check not derivable", _now("convert_time", paris, "$.target.is_dst")),
        ("check not derivable", _now("convert_time", paris, "$.time_difference")),
    ]

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        content = "[]" if replied else json.dumps([p for _, p in proposals])
        replied.append(1)
        return chat_completion(body, {"role": "assistant", "content": content})

    replied: list[int] = []
    time_server = f'+env.servers.time="{_time_server()} --local-timezone UTC"'
    with serve_chat_completions(reply) as url:
        rows = generate(tmp_path / "llm", time_server, "generator=llm", f"generator.base_url={url}",
                        "generator.model=proposer", "generator.rounds=1", "n=3", code=1)
    assert rows == []
    ledger = [json.loads(line) for line in (tmp_path / "llm" / "proposals.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in ledger] == ["kept" if why is None else why for why, _ in proposals]
    assert all("is in an object that holds a date or time" in r["detail"] for r in ledger), ledger
    assert "at $.day_of_week" in ledger[0]["detail"] and "at $.time_difference" in ledger[2]["detail"]


def test_facts_about_now_are_no_answer_fields() -> None:
    """The fast cover of the test above: in what the real mcp-server-time returns, no value of an object holding a
    date or time (itself or in an object it holds) is a place an answer or a chained value is drawn from (``fields``)
    or may be named (``beside_clock``); a record in a list is judged on its own."""
    from mcp_gym import MCPEnv, Stdio
    from mcp_gym.jobs.proposers import beside_clock, fields

    env = MCPEnv({"time": Stdio(str(_time_server()), ["--local-timezone", "UTC"])}, ["What time is it?"])
    try:
        env.reset(seed=0)
        *_, info = env.step({"tool": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}})
        now = info["structured_content"]
        *_, info = env.step({"tool": "convert_time", "arguments": {
            "source_timezone": "UTC", "time": "12:30", "target_timezone": "Asia/Tokyo"}})
        converted = info["structured_content"]
    finally:
        env.close()
    assert set(now) == {"timezone", "datetime", "day_of_week", "is_dst"}, now
    assert list(fields(now)) == [] and list(fields(converted)) == []
    assert beside_clock(now, "$.day_of_week") and beside_clock(converted, "$.target.is_dst")
    assert beside_clock(converted, "$.time_difference")  # moves with summer time: "+9.0h" is luck of the zones
    listed = {"files": [{"name": "a.txt", "modified": now["datetime"]}], "zone": now["timezone"]}  # records in a list
    assert list(fields(listed)) == [("$.zone", "Asia/Tokyo")]


def test_generate_refuses_a_server_that_cannot_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that cannot start (a typo in its command) ends ``tasks generate`` in one line naming it and why: it
    was a traceback, or with the llm generator a table of zeros and exit 0."""
    typo = f'+env.servers.time="{tmp_path / "mcp-server-tim"} --local-timezone UTC"'
    for generator in (["generator=explore"], ["generator=llm", "generator.base_url=http://127.0.0.1:9/v1"]):
        assert main(["tasks", "generate", "env=custom", typo, f"out={tmp_path / 'typo'}", "n=1", *generator]) == 1
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mcp-gym tasks generate:")]
        assert len(err) == 1 and "server 'time' is unavailable" in err[0] and "mcp-server-tim'" in err[0], err


def test_generate_refuses_a_fixture_no_server_sees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``fixture=`` with no server started on ``{workspace}`` (PyPI mcp-text-editor, which takes no directory) ends
    ``tasks generate`` in one line naming the fixture and the servers, before anything is written: it was a
    traceback ending in ``task 'proposal' has a fixture but no server command line names {workspace}``, a task the
    user never wrote."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.txt").write_text("alpha\n")
    clock = f'+env.servers.clock="{sys.executable} {ROOT / "tests" / "servers" / "clock_server.py"}"'
    out = tmp_path / "gen"
    assert main(["tasks", "generate", "env=custom", clock, f"fixture={tmp_path / 'files'}", "n=1",
                 f"out={out}"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mcp-gym tasks generate:")]
    assert len(err) == 1 and "no server command line names {workspace} (servers: clock)" in err[0], err
    assert not (out / "fixture").exists() and not (out / "tasks.jsonl").exists()


def test_an_answer_that_other_tasks_change_is_not_kept(tmp_path: Path) -> None:
    """On a server without ``{workspace}`` that keeps state (PyPI mcp-server-duckdb on a fixed ``--db-path``), a task
    "call `query` with SELECT count(*) FROM orders, answer with line 1" was kept with the count of that moment; the
    INSERTs of the other kept tasks then moved it, and ``tasks validate`` and the oracle (which submits the stored
    answer) still passed it while the right answer failed. Every kept answer is now read again after the kept
    solutions ran once more; one that moved is dropped as flaky."""
    tally = f'+env.servers.t="{sys.executable} {ROOT / "tests" / "servers" / "tally_server.py"}"'
    read = {"prompt": "Report the total.", "solution": [{"tool": "total", "arguments": {}}],
            "check": {"answer": {"step": 1, "path": "text"}}}
    write = {"prompt": "Add 2 to the total.", "solution": [{"tool": "add", "arguments": {"amount": 2}}],
             "check": {"answer": {"step": 1, "path": "text"}}}

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        return chat_completion(body, {"role": "assistant", "content": json.dumps([read, write])})

    with serve_chat_completions(reply) as url:
        rows = generate(tmp_path / "out", tally, "generator=llm", f"generator.base_url={url}",
                        "generator.model=proposer", "generator.rounds=1", "n=2")
    assert [r["prompt"] for r in rows] == ["Add 2 to the total."]
    ledger = {r["prompt"]: r for r in map(json.loads, (tmp_path / "out" / "proposals.jsonl").read_text().splitlines())}
    assert ledger["Report the total."]["verdict"] == "flaky", ledger
    assert "keeps state between runs" in ledger["Report the total."]["detail"]


def test_generate_says_why_no_walk_proposed_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Walks whose every call fails (random time zones for mcp-server-time) end the job with exit 1 and one line
    saying so, the first error and what to set, not only a table of zeros; the progress bar counts the failed calls
    as it goes (a run of the default 30 x n walks showed an empty bar for minutes)."""
    time_server = f'+env.servers.time="{_time_server()} --local-timezone UTC"'
    assert generate(tmp_path / "none", time_server, "n=1", "max_proposals=1", "generator.walk_length=1",
                    code=1) == []
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.startswith("mcp-gym tasks generate:")]
    assert len(err) == 1, captured.err
    assert "no proposal: all 2 calls failed (first: " in err[0] and "Invalid timezone" in err[0], err
    assert "generator.fixed or generator.values" in err[0]
    assert "walk 1/1, calls failed 2/2" in captured.err  # the progress bar says it while the walks go on


@pytest.mark.parametrize("walks", [2, pytest.param(10, marks=pytest.mark.slow)])  # 10: the default (20 starts)
def test_generate_gives_up_when_every_call_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 walks: int) -> None:
    """A server none of whose calls succeeds (mcp-server-time with random time zones; PyPI mcp-server-calculator with
    random expressions) stops the walks after ``generator.max_failed_walks`` (default 10) walks, not 30 x n: exit 1,
    one line saying why and which keys to set. It walked 30 x n walks (3,600 calls for n=10) and exited 0."""
    time_server = f'+env.servers.time="{_time_server()} --local-timezone UTC"'
    extra = [] if walks == 10 else [f"generator.max_failed_walks={walks}"]
    out = tmp_path / "gave-up"
    assert generate(out, time_server, "n=1", "generator.walk_length=1", *extra, code=1) == []
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.startswith("mcp-gym tasks generate:")]
    assert len(err) == 1, captured.err
    assert f"no proposal: all {2 * walks} calls of the first {walks} walks failed, so the walks stopped " \
           "(generator.max_failed_walks; first: " in err[0] and "Invalid timezone" in err[0], err
    assert err[0].endswith("give the arguments the server accepts with generator.fixed or generator.values")
    assert f"walk {walks}/30," in captured.err and f"walk {walks + 1}/30" not in captured.err
    assert (out / "proposals.jsonl").read_text() == ""
    if walks == 2:  # a bound below 0 is refused in one line
        assert main(["tasks", "generate", "env=custom", time_server, f"out={tmp_path / 'bad'}", "n=1",
                     "generator.max_failed_walks=-1"]) == 2
        assert "generator.max_failed_walks must be an integer, 0 (never give up) or more, not -1" in \
            capsys.readouterr().err


# Heavy lane (11 s: a job of fresh servers per walk); its fast cover: every explore test whose calls succeed (they
# walk on to max_proposals), and test_generate_gives_up_when_every_call_fails[2] for the give-up bound.
@pytest.mark.slow
def test_generate_walks_on_while_some_calls_succeed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Calls that fail only sometimes (random time zones, and with ``generator.values`` now and then a real one) do
    not stop the walks: once a call has succeeded, walks go on to the job's other bounds."""
    time_server = f'+env.servers.time="{_time_server()} --local-timezone UTC"'
    generate(tmp_path / "some", time_server, "n=1", "max_proposals=3", "generator.max_failed_walks=1",
             "generator.walk_length=3", "generator.values=[Europe/Paris]", "generator.exclude_tools=[convert_time]",
             code=1)
    captured = capsys.readouterr()
    assert "walk 1/3, calls failed 2/6" in captured.err and "walk 3/3," in captured.err  # walk 1: 2 of 6 failed
    err = [line for line in captured.err.splitlines() if line.startswith("mcp-gym tasks generate:")]
    assert len(err) == 1 and "no proposal: no result made a task" in err[0], captured.err


def test_placeholders_for_images_and_resources_make_no_answer() -> None:
    """npm server-everything's ``get-tiny-image`` and ``get-resource-reference`` return an image and a blob resource
    between text lines; the env shows them as mcp-gym's placeholders (``[image: image/png, 4035 bytes]``), whose words
    are not the server's: explore drew tasks such as "answer with the last word of line 2" (``bytes]``, and from
    excel-mcp-server's ``export_workbook`` ``(application/vnd...sheet)]``). Such lines make no answer, for the explore
    and the llm generator (``extract``); the server's own lines around them still do."""
    from mcp_gym import MCPEnv, Stdio
    from mcp_gym.jobs.proposers import extract, fields, result_value

    env = MCPEnv({"ev": Stdio(npm_bin("mcp-server-everything"), ["stdio"])}, ["Look."])
    try:
        env.reset(seed=0)
        values = []
        for call in ({"tool": "get-tiny-image", "arguments": {}},
                     {"tool": "get-resource-reference", "arguments": {"resourceType": "Blob", "resourceId": 2}}):
            obs, *_, info = env.step(call)
            assert obs["result"].splitlines()[1].startswith(("[image: ", "[resource: ")), obs["result"]
            values.append(result_value(info["structured_content"], obs["result"]))
    finally:
        env.close()
    image, blob = values
    assert list(fields(image)) == [("line:1", "Here's the image you requested:"),
                                   ("line:3", "The image above is the MCP logo.")]
    assert [path for path, _ in fields(blob)] == ["line:1", "line:3"]
    assert extract(image, "line:2") is None and extract(blob, "word:2") is None
    assert extract(image, "line:3") == "The image above is the MCP logo."


@pytest.mark.slow  # two generate runs on a stdio server: the heavy lane (fast cover: the test above)
def test_an_answer_that_the_files_earlier_tasks_change_is_not_kept(tmp_path: Path) -> None:
    """A rerun extends the file: its new answers were checked after the new solutions ran again, not the earlier
    tasks' (an eval plays those too). "Report the total" kept beside an earlier run's "Add 2" held until the eval
    added 2; the earlier tasks' solutions are now played too, and the answer that moved is dropped."""
    tally = f'+env.servers.t="{sys.executable} {ROOT / "tests" / "servers" / "tally_server.py"}"'
    read = {"prompt": "Report the total.", "solution": [{"tool": "total", "arguments": {}}],
            "check": {"answer": {"step": 1, "path": "text"}}}
    write = {"prompt": "Add 2 to the total.", "solution": [{"tool": "add", "arguments": {"amount": 2}}],
             "check": {"answer": {"step": 1, "path": "text"}}}
    out = tmp_path / "out"
    for proposals, n in (([write], 1), ([read], 2)):
        def reply(body: dict[str, Any], headers: Any, proposals: list[Any] = proposals) -> dict[str, Any]:
            return chat_completion(body, {"role": "assistant", "content": json.dumps(proposals)})

        with serve_chat_completions(reply) as url:
            rows = generate(out, tally, "generator=llm", f"generator.base_url={url}", "generator.model=proposer",
                            "generator.rounds=1", f"n={n}", code=0 if n == 1 else 1)
    assert [r["prompt"] for r in rows] == ["Add 2 to the total."]
    ledger = {r["prompt"]: r for r in map(json.loads, (out / "proposals.jsonl").read_text().splitlines())}
    assert ledger["Report the total."]["verdict"] == "flaky", ledger
