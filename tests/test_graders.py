"""Graders on real third-party MCP servers (npm server-everything, server-memory, server-filesystem; a stdio SQLite
server), the LLM judge against a scripted chat-completions endpoint on 127.0.0.1, pass^k, task sources, ``mcp-gym
tasks validate`` and the docs' benchmark commands (docs/benchmarks.md)."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shlex
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _chat_server import serve_chat_completions
from conftest import ROOT, npm_bin

from mcp_gym import MCPEnv, Stdio
from mcp_gym.cli import main
from mcp_gym.graders import Grade, Grading
from mcp_gym.graders.base import GradeContext, GraderError, normalise_answer
from mcp_gym.graders.spec import make_grader
from mcp_gym.graders.state import subset_match
from mcp_gym.jobs.metrics import judge_agreement, pass_at_k, pass_hat_k
from mcp_gym.recording import load
from mcp_gym.tasks import Task, load_task_source

EXAMPLE = ROOT / "scripts" / "examples" / "tasks" / "everything.jsonl"
SUBMIT = "submit"


def everything() -> Stdio:
    return Stdio(npm_bin("mcp-server-everything"), ["stdio"])


def memory() -> Stdio:
    return Stdio(npm_bin("mcp-server-memory"), env={"MEMORY_FILE_PATH": "{workspace}/memory.jsonl"})


@pytest.fixture
def make_env() -> Iterator[Callable[..., MCPEnv]]:
    envs: list[MCPEnv] = []

    def make(servers: Any, tasks: list[Any], **kw: Any) -> MCPEnv:
        kw.setdefault("call_timeout", 20.0)
        env = MCPEnv(servers, tasks, **kw)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def run(env: MCPEnv, task_id: str, calls: list[dict[str, Any]], answer: str | None) -> dict[str, Any]:
    """One episode: reset to the task, the calls, then submit (unless answer is None); returns the last info."""
    env.reset(seed=0, options={"task_id": task_id})
    info: dict[str, Any] = {}
    for call in calls:
        _, _, terminated, truncated, info = env.step(call)
        assert not info["error"], info["error"]
        assert not (terminated or truncated)
    if answer is not None:
        _, reward, terminated, _, info = env.step({"tool": SUBMIT, "arguments": {"answer": answer}})
        assert terminated
        info["reward"] = reward
    return info


def get_sum(a: float, b: float) -> dict[str, Any]:
    return {"tool": "get-sum", "arguments": {"a": a, "b": b}}


# -- answer matchers (stateless server) --------------------------------------------------------------------------------
@pytest.mark.thirdparty
def test_answer_matchers_on_everything(make_env: Callable[..., MCPEnv]) -> None:
    tasks = [
        {"id": "exact", "prompt": "17+25", "answer": "42"},
        {"id": "numeric", "prompt": "1.1+2.2", "answer": "3.3", "grader": {"kind": "numeric", "abs_tol": 1e-3}},
        {"id": "regex", "prompt": "echo ping", "answer": r"^Echo: .*\bping\b", "grader": "regex"},
        {"id": "one_of", "prompt": "2+2", "answer": ["4", "four"], "grader": "one_of"},
        {"id": "set", "prompt": "1+1, 2+2", "answer": ["2", "4"], "grader": "set"},
    ]
    env = make_env({"everything": everything()}, tasks)
    texts = []
    # exact: the default for a task with an answer; the normalisation forgives case, spaces, quotes, a final period
    env.reset(seed=0, options={"task_id": "exact"})
    obs, *_ = env.step(get_sum(17, 25))
    texts.append(obs["result"])
    assert obs["result"] == "The sum of 17 and 25 is 42."
    _, reward, _, _, info = env.step({"tool": SUBMIT, "arguments": {"answer": ' "42." '}})
    assert (reward, info["success"], info["grade"]["kind"]) == (1.0, True, "exact")
    info = run(env, "exact", [], "43")
    assert (info["reward"], info["success"]) == (0.0, False) and "43" in info["grade"]["reason"]

    # numeric: the last number of the server's own sentence, within the tolerance
    env.reset(seed=0, options={"task_id": "numeric"})
    obs, *_ = env.step(get_sum(1.1, 2.2))
    _, _, _, _, info = env.step({"tool": SUBMIT, "arguments": {"answer": obs["result"]}})
    assert info["success"] is True and math.isclose(info["grade"]["details"]["got"], 3.3, abs_tol=1e-3)
    assert run(env, "numeric", [], "about 3.4")["success"] is False
    assert run(env, "numeric", [], "no idea")["grade"]["reason"].startswith("no number")

    # regex on the echo tool's reply
    env.reset(seed=0, options={"task_id": "regex"})
    obs, *_ = env.step({"tool": "echo", "arguments": {"message": "ping pong"}})
    _, _, _, _, info = env.step({"tool": SUBMIT, "arguments": {"answer": obs["result"]}})
    assert obs["result"] == "Echo: ping pong" and info["success"] is True
    assert run(env, "regex", [], "Echo: pingpong")["success"] is False

    assert run(env, "one_of", [get_sum(2, 2)], "Four")["success"] is True
    assert run(env, "one_of", [], "5")["success"] is False

    info = run(env, "set", [get_sum(1, 1), get_sum(2, 2)], "[4, 2]")
    assert info["success"] is True and info["grade"]["score"] == 1.0
    info = run(env, "set", [], "2, 5")
    assert info["success"] is False and info["grade"]["score"] == pytest.approx(1 / 3)  # Jaccard {2} / {2, 4, 5}


@pytest.mark.thirdparty
def test_no_answer_no_grade_and_truncation(make_env: Callable[..., MCPEnv]) -> None:
    env = make_env({"everything": everything()}, [{"id": "free", "prompt": "explore"},
                                                   {"id": "sum", "prompt": "2+3", "answer": "5"}], max_steps=1)
    info = run(env, "free", [], "anything")
    assert info["success"] is None and "grade" not in info  # nothing to grade against: ungraded, not failed
    assert env.graded is False
    env.reset(seed=0, options={"task_id": "sum"})
    assert env.graded is True
    *_, truncated, info = env.step(get_sum(2, 3))
    assert truncated and info["success"] is False and info["grade"]["reason"] == "no answer submitted"


# -- python verifier ---------------------------------------------------------------------------------------------------
def sum_verifier(task: Task, answer: str | None, state: Any) -> float:
    """(task, answer, state): half credit for an even answer, full credit for the task's own answer."""
    assert state == {}  # server-everything has no mcp_gym_state tool
    if answer == task.answer:
        return 1.0
    return 0.5 if answer is not None and answer.isdigit() and int(answer) % 2 == 0 else 0.0


def dict_verifier(task: Task, answer: str | None, state: Any) -> dict[str, Any]:
    return {"passed": answer == "yes", "score": 0.25 if answer != "yes" else 1.0, "reason": f"said {answer}"}


def broken_verifier(task: Task, answer: str | None, state: Any) -> float:
    raise KeyError("boom")


@pytest.mark.thirdparty
def test_python_verifier_by_import_path(make_env: Callable[..., MCPEnv]) -> None:
    tasks = [{"id": "t", "prompt": "2+2", "answer": "4"},
             {"id": "d", "prompt": "say yes", "grader": {"kind": "python", "function": "test_graders:dict_verifier"}},
             {"id": "b", "prompt": "x", "grader": "test_graders:broken_verifier"}]
    env = make_env({"everything": everything()}, tasks, grader="test_graders:sum_verifier")
    info = run(env, "t", [get_sum(2, 2)], "4")
    assert (info["reward"], info["success"], info["grade"]["grader"]) == (1.0, True, "sum_verifier")
    info = run(env, "t", [], "6")
    assert (info["reward"], info["success"]) == (0.5, False)
    info = run(env, "d", [], "no")
    assert (info["reward"], info["success"], info["grade"]["reason"]) == (0.25, False, "said no")
    info = run(env, "b", [], "x")  # a broken verifier: ungraded with the error, not a silent failure
    assert info["success"] is None and info["grade"] is None
    assert info["error"]["kind"] == "verifier_error" and "test_graders:broken_verifier" in info["error"]["message"]
    with pytest.raises(ValueError, match="cannot import"):
        make_grader("no_such_module_xyz:fn")


# -- state checks ------------------------------------------------------------------------------------------------------
@pytest.mark.thirdparty
def test_files_grader_with_fixture_on_filesystem(make_env: Callable[..., MCPEnv], tmp_path: Path) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "seed.txt").write_text("seed data\n")
    task = {"id": "write", "prompt": "Write hello to {workspace}/out.txt", "fixture": str(fixture),
            "grader": {"kind": "files", "expect": {"out.txt": "hello", "seed.txt": {"contains": "seed"},
                                                   "tmp.txt": None}, "globs": {"*.txt": 2}}}
    env = make_env({"fs": Stdio(npm_bin("mcp-server-filesystem"), ["{workspace}"])}, [task])
    obs, info = env.reset(seed=0)
    ws = env.workspace
    assert ws is not None and obs["task"] == "Write hello to {workspace}/out.txt"  # the agent sees no temp path
    assert info["servers"]["fs"]["status"] == "ready" and "{workspace}" in info["servers"]["fs"]["target"]
    assert env.unwrapped.task.prompt == f"Write hello to {ws}/out.txt"  # the graders and the oracle see the real one
    obs, *_ = env.step({"tool": "read_text_file", "arguments": {"path": f"{ws}/seed.txt"}})
    assert obs["result"].strip() == "seed data"  # the fixture was copied into the workspace
    env.step({"tool": "write_file", "arguments": {"path": f"{ws}/out.txt", "content": "hello"}})
    _, reward, _, _, info = env.step({"tool": SUBMIT, "arguments": {"answer": "done"}})
    assert info["success"] is True and reward == 1.0 and info["grade"]["details"]["checks"]["*.txt: 2 files"]

    # the next episode starts in a fresh workspace: the file written above is gone, the fixture is back
    env.reset(seed=0)
    assert env.workspace != ws and not ws.exists() and (env.workspace / "seed.txt").exists()
    env.step({"tool": "write_file", "arguments": {"path": f"{env.workspace}/tmp.txt", "content": "x"}})
    _, reward, _, _, info = env.step({"tool": SUBMIT, "arguments": {"answer": "done"}})
    assert info["success"] is False and reward == pytest.approx(2 / 4)  # seed.txt and the glob count still hold
    assert "out.txt missing" in info["grade"]["reason"] and "tmp.txt absent" in info["grade"]["reason"]


@pytest.mark.thirdparty
def test_sqlite_grader(make_env: Callable[..., MCPEnv], tmp_path: Path) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    with sqlite3.connect(fixture / "shop.sqlite") as con:
        con.execute("CREATE TABLE items (name TEXT, qty INTEGER)")
        con.execute("INSERT INTO items VALUES ('apple', 3)")
    server = Stdio(sys.executable, [str(ROOT / "tests" / "_sqlite_server.py"), "{workspace}/shop.sqlite"])
    grader = {"kind": "sqlite", "db": "{workspace}/shop.sqlite", "query": "SELECT name, qty FROM items"}
    tasks = [{"id": "add-pear", "prompt": "Add 2 pears", "fixture": str(fixture), "data": {"rows": [["pear", 2],
                                                                                                   ["apple", 3]]}}]
    env = make_env({"db": server}, tasks, grader=grader)
    info = run(env, "add-pear", [{"tool": "execute", "arguments": {"sql": "INSERT INTO items VALUES ('pear', 2)"}}],
               "done")
    assert info["success"] is True and sorted(info["grade"]["details"]["rows"]) == [["apple", 3], ["pear", 2]]
    info = run(env, "add-pear", [{"tool": "execute", "arguments": {"sql": "INSERT INTO items VALUES ('pear', 5)"}}],
               "done")
    assert info["success"] is False  # and the first episode's pear did not leak into this one:
    assert sorted(info["grade"]["details"]["rows"]) == [["apple", 3], ["pear", 5]]


@pytest.mark.thirdparty
def test_mcp_grader_on_memory(make_env: Callable[..., MCPEnv]) -> None:
    alice = {"entities": [{"name": "Alice", "entityType": "person", "observations": ["likes tea"]}]}
    tasks = [
        {"id": "graph", "prompt": "Remember that Alice likes tea",
         "grader": {"kind": "mcp", "tool": "read_graph", "subset": {"entities": [{"name": "Alice",
                                                                                  "observations": ["likes tea"]}]}}},
        {"id": "names", "prompt": "Remember Alice", "data": {"expect": {"equals": ["Alice"]}},
         "grader": {"kind": "mcp", "tool": "read_graph", "path": "$.entities[*].name"}},
        {"id": "resource", "prompt": "Remember Alice",
         "grader": {"kind": "mcp", "resource": "memory://knowledge-graph", "contains": ["Alice", "likes tea"]}},
    ]
    env = make_env({"memory": memory()}, tasks)
    create = {"tool": "create_entities", "arguments": alice}
    for task_id in ("graph", "names", "resource"):
        info = run(env, task_id, [create], "done")
        assert info["success"] is True, info["grade"]
        # a fresh server per episode: nothing of the previous episode's graph is left
        info = run(env, task_id, [], "done")
        assert info["success"] is False, info["grade"]
    info = run(env, "graph", [{"tool": "create_entities", "arguments": {"entities": [
        {"name": "Alice", "entityType": "person", "observations": ["likes coffee"]}]}}], "done")
    assert info["success"] is False and "does not contain" in info["grade"]["reason"]
    assert info["grade"]["details"]["value"]["entities"][0]["observations"] == ["likes coffee"]


def test_subset_match() -> None:
    assert subset_match({"a": [1, {"b": 2}]}, {"a": [{"b": 2, "c": 3}, 1, 5], "z": 0})
    assert not subset_match({"a": [1, 1]}, {"a": [1]})  # each expected item needs its own actual item
    assert not subset_match({"a": True}, {"a": 1}) and subset_match({"a": 1}, {"a": 1.0})
    assert normalise_answer("  “Hello   World.”  ") == "hello world" and normalise_answer("3.5") == "3.5"


# -- LLM judge ---------------------------------------------------------------------------------------------------------
class ScriptedJudge:
    """A chat-completions endpoint that judges: fail when the rubric says STRICT, pass otherwise; replies fenced."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        user = body["messages"][-1]["content"]
        strict = "STRICT" in user.split("Rubric:", 1)[1].split("Reference answer", 1)[0]
        verdict = {"verdict": "fail" if strict else "pass", "score": 0.2 if strict else 0.9,
                   "reasoning": "The rubric demands more." if strict else "The answer follows from the tool call."}
        content = f"Here is my verdict:\n```json\n{json.dumps(verdict)}\n```"
        return {"id": "judge-1", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop"}]}


@contextmanager
def serve_judge() -> Iterator[tuple[str, ScriptedJudge]]:
    judge = ScriptedJudge()
    with serve_chat_completions(lambda body, headers: judge.reply(body)) as url:
        yield url, judge


@pytest.mark.thirdparty
def test_judge_through_eval_cli(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {"id": "j1", "prompt": "What is 2 + 3?", "answer": "5", "rubric": "The answer must be 5.",
         "solution": [{"tool": "get-sum", "arguments": {"a": 2, "b": 3}}]},
        {"id": "j2", "prompt": "What is 4 + 4?", "answer": "8", "rubric": "STRICT: show the working.",
         "solution": [{"tool": "get-sum", "arguments": {"a": 4, "b": 4}}]},
        {"id": "j3", "prompt": "Echo hi", "answer": "Echo: hi", "rubric": "Must echo hi.",
         "solution": [{"tool": "echo", "arguments": {"message": "hi"}}]},
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    with serve_judge() as (url, judge):
        code = main(["eval", "env=custom", f"+env.servers.everything={npm_bin('mcp-server-everything')} stdio",
                     f"env.tasks={tasks}", "env.grader=[exact,judge]", f"env.judge.base_url={url}",
                     "env.judge.model=scripted-judge", "env.judge.api_key=sk-judge", "policy=oracle", "samples=1",
                     f"out={out}", "launcher.progress=false", "plots=false"])
    assert code == 0
    assert len(judge.requests) == 3 and {r["model"] for r in judge.requests} == {"scripted-judge"}
    user = next(r for r in judge.requests if "Must echo hi" in r["messages"][-1]["content"])["messages"][-1]["content"]
    assert "echo(" in user and "Echo: hi" in user  # the trajectory and the final answer reach the judge
    results = json.loads((out / "report" / "results.json").read_text())
    summary = results["summary"]
    assert summary["success_rate"] == pytest.approx(2 / 3)  # all of [exact, judge]: the judge fails j2
    assert summary["graders"]["all/exact"]["pass_rate"] == 1.0
    assert summary["graders"]["all/judge"]["pass_rate"] == pytest.approx(2 / 3)
    agreement = summary["judge_agreement"]
    assert (agreement["pairs"], agreement["agreement"], agreement["judge_fail_exact_pass"]) == (3, 2 / 3, 1)
    grading = results["config"]["grading"]
    assert grading["judge"]["model"] == "scripted-judge" and "{rubric}" in grading["judge"]["prompt"]
    assert "sk-judge" not in json.dumps(results)  # the judge's key is never written
    rec = load(out)
    finals = {}
    for ep in rec.episodes:
        last = rec.episode_steps(ep["episode_id"])[-1]
        finals[ep["task_id"]] = json.loads(last["info"])["grade"]
    judged = {t: next(p for p in g["parts"] if p["kind"] == "judge") for t, g in finals.items()}
    assert judged["j2"]["details"] == {"verdict": "fail", "judge_score": 0.2, "reasoning": "The rubric demands more.",
                                       "model": "scripted-judge"}
    assert judged["j1"]["passed"] and judged["j1"]["details"]["reasoning"] == "The answer follows from the tool call."


@pytest.mark.thirdparty
def test_unreachable_judge_leaves_the_episode_ungraded(make_env: Callable[..., MCPEnv]) -> None:
    sock_port = 9  # discard port on 127.0.0.1: nothing listens there
    env = make_env({"everything": everything()}, [{"id": "t", "prompt": "x", "rubric": "anything"}],
                   grader="judge", judge={"base_url": f"http://127.0.0.1:{sock_port}/v1", "retries": 0})
    info = run(env, "t", [], "x")
    assert info["success"] is None and info["error"]["kind"] == "verifier_error"
    assert "judge gpt-4o-mini" in info["error"]["message"]


# -- combinations ------------------------------------------------------------------------------------------------------
@pytest.mark.thirdparty
def test_combinations(make_env: Callable[..., MCPEnv]) -> None:
    tasks = [
        {"id": "any", "prompt": "2+3", "answer": "5",
         "grader": {"kind": "any", "of": ["exact", {"kind": "regex", "pattern": "five"}]}},
        {"id": "weighted", "prompt": "2+3", "answer": "5", "grader": {
            "kind": "weighted", "threshold": 0.7, "of": [{"kind": "exact", "weight": 3},
                                                         {"kind": "regex", "pattern": "^sum", "weight": 1}]}},
        {"id": "all", "prompt": "2+3", "answer": "5", "grader": ["exact", {"kind": "numeric", "name": "num"}]},
    ]
    env = make_env({"everything": everything()}, tasks)
    assert run(env, "any", [get_sum(2, 3)], "five")["success"] is True
    assert run(env, "any", [], "six")["success"] is False
    info = run(env, "weighted", [get_sum(2, 3)], "5")
    assert info["success"] is True and info["grade"]["score"] == pytest.approx(0.75)
    info = run(env, "weighted", [], "sum 6")
    assert info["success"] is False and info["grade"]["score"] == pytest.approx(0.25)
    info = run(env, "all", [], "5.0")  # numeric passes, exact does not
    assert info["success"] is False and [p["passed"] for p in info["grade"]["parts"]] == [False, True]
    flat = Grade.from_dict(info["grade"]).flat()
    assert list(flat) == ["all", "all/exact", "all/num"]


# -- metrics -----------------------------------------------------------------------------------------------------------
def test_pass_hat_k_matches_counting_subsets() -> None:
    for n, c, k in [(5, 0, 1), (5, 2, 1), (5, 2, 2), (5, 2, 3), (6, 5, 2), (4, 4, 4), (10, 7, 5)]:
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert math.isclose(pass_hat_k(n, c, k), sum(all(s) for s in subsets) / len(subsets))
        assert pass_hat_k(n, c, k) <= pass_at_k(n, c, k) + 1e-12
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)


def test_judge_agreement_counts_pairs() -> None:
    def grade(exact: bool, judge: bool) -> dict[str, Any]:
        return {"grader": "all", "kind": "all", "score": 0, "passed": False, "reason": "", "parts": [
            {"grader": "exact", "kind": "exact", "score": 0, "passed": exact, "reason": ""},
            {"grader": "judge", "kind": "judge", "score": 0, "passed": judge, "reason": ""}]}

    a = judge_agreement([grade(True, True), grade(False, False), grade(True, False), None,
                         {"grader": "exact", "kind": "exact", "score": 1, "passed": True, "reason": ""}])
    assert a is not None and (a["pairs"], a["agreement"], a["judge_fail_exact_pass"]) == (3, 2 / 3, 1)
    assert judge_agreement([{"grader": "exact", "kind": "exact", "score": 1, "passed": True, "reason": ""}]) is None


# -- task sources and validation ---------------------------------------------------------------------------------------
@pytest.mark.thirdparty
def test_task_sources_with_column_mapping(tmp_path: Path) -> None:
    import datasets

    rows = {"qid": ["q1", "q2"], "question": ["What is 2+2?", "Capital of France?"], "gold": ["4", "Paris"],
            "split": ["test", "train"]}
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict(rows).save_to_disk(str(saved))
    mapping = {"id": "qid", "prompt": "question", "answer": "gold"}
    tasks = load_task_source(saved, "test", mapping)
    assert [(t.id, t.prompt, t.answer) for t in tasks] == [("q1", "What is 2+2?", "4")]
    dd = tmp_path / "dd"
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({k: v for k, v in rows.items() if k != "split"})}
                         ).save_to_disk(str(dd))
    assert [t.id for t in load_task_source(dd, "test", mapping)] == ["q1", "q2"]
    parquet = tmp_path / "tasks.parquet"
    pq.write_table(pa.table({"question": ["a?"], "gold": ["b"]}), parquet)
    assert [(t.id, t.answer) for t in load_task_source(parquet, None, {"prompt": "question", "answer": "gold"})] == [
        ("task-0", "b")]
    data_dir = tmp_path / "json-dir"  # a directory `datasets.load_dataset` builds from its data files
    data_dir.mkdir()
    (data_dir / "test.jsonl").write_text(json.dumps({"question": "x?", "gold": "y"}) + "\n")
    assert [t.answer for t in load_task_source(data_dir, "test", {"prompt": "question", "answer": "gold"})] == ["y"]
    with pytest.raises(ValueError, match="no column 'missing'"):
        load_task_source(saved, None, {"prompt": "missing"})
    with pytest.raises(ValueError, match="no task of split 'dev'"):
        load_task_source(saved, "dev", mapping)

    # the eval CLI grades a dataset source with a column mapping (exact match on the mapped answer)
    out = tmp_path / "eval"
    code = main(["eval", "env=custom", f"+env.servers.everything={npm_bin('mcp-server-everything')} stdio",
                 f"env.tasks={saved}", "env.task_columns={id: qid, prompt: question, answer: gold}", "split=null",
                 "policy=oracle", "samples=1", f"out={out}", "launcher.progress=false", "plots=false"])
    assert code == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert (summary["episodes"], summary["success_rate"], summary["graders"]["exact"]["episodes"]) == (2, 1.0, 2)


def test_task_record_round_trip() -> None:
    t = Task(id="a", prompt="p", answer=["x", "y"], grader={"kind": "set"}, rubric="r", fixture="/f",
             env={"K": "{workspace}/v"})
    assert Task.from_record(t.to_record()) == t
    assert Task.from_record({"id": "b", "prompt": "q", "grader": "numeric"}).grader == "numeric"


@pytest.mark.thirdparty
def test_tasks_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = f"+env.servers.everything={npm_bin('mcp-server-everything')} stdio"
    assert main(["tasks", "validate", "env=custom", server, f"env.tasks={EXAMPLE}", f"out={tmp_path / 'ok'}"]) == 0
    assert "8 of 8 tasks pass" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()][:3]
    rows[1]["answer"] = "-6"  # the reference solution computes and submits -5
    rows[1]["solution"].append({"tool": "submit", "arguments": {"answer": "-5"}})
    rows.append({"id": "bad-regex", "prompt": "x", "answer": "(", "grader": "regex",
                 "solution": [{"tool": "echo", "arguments": {"message": "x"}}]})
    rows.append({"id": "no-solution", "prompt": "x", "answer": "1"})
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["tasks", "validate", "env=custom", server, f"env.tasks={bad}", f"out={tmp_path / 'bad'}"]) == 1
    checks = {c["task_id"]: c for c in json.loads((tmp_path / "bad" / "validation.json").read_text())}
    assert {k: c["status"] for k, c in checks.items()} == {
        "sum-small": "passed", "sum-negative": "failed", "sum-decimal": "passed", "bad-regex": "error",
        "no-solution": "skipped"}
    assert "bad regex" in checks["bad-regex"]["reason"]
    assert main(["tasks", "frobnicate"]) == 2


def test_grading_describes_itself() -> None:
    g = Grading({"kind": "weighted", "of": [{"kind": "exact", "weight": 2}, "judge"]}, {"model": "m"})
    d = g.describe()
    assert d["default"]["weights"] == [2.0, 1.0] and d["judge"]["model"] == "m" and "api_key" not in d["judge"]
    with pytest.raises(ValueError, match="unknown kind 'nope'"):
        make_grader({"kind": "nope"})
    with pytest.raises(ValueError, match="unknown option"):
        Grading(None, {"modle": "typo"})


def test_workspace_in_a_grader_without_a_workspace_is_refused() -> None:
    ctx = GradeContext(Task(id="t", prompt=""), None)
    assert ctx.fill({"a": ["plain"]}) == {"a": ["plain"]}
    with pytest.raises(GraderError, match="no workspace"):
        ctx.fill("{workspace}/x")


# -- the docs' example (docs/benchmarks.md) ----------------------------------------------------------------------------
def _readme_commands() -> list[str]:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = text.split("## BFCL multi-turn", 1)[0]  # BFCL's commands: tests/test_bfcl.py runs them
    head, _, rest = section.partition("## Your benchmark as a config file")  # its file: tests/test_readme.py
    section = head + rest.split("\n## ", 1)[-1]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        lines += [ln.split("  #", 1)[0].strip() for ln in joined.splitlines() if ln.strip().startswith("mcp-gym ")]
    return lines


@pytest.mark.slow
@pytest.mark.thirdparty
def test_readme_benchmark_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The benchmarks page's commands, as written, from a copy of the repository's
    scripts/examples/tasks/ (outputs under runs/)."""
    shutil.copytree(ROOT / "scripts" / "examples" / "tasks", tmp_path / "scripts" / "examples" / "tasks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(Path(npm_bin("mcp-server-everything")).parent) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("HOME", str(tmp_path))  # the MCPMark import reads ~/src/mcpmark: a tiny checkout in its layout
    from test_reports import mcpmark_checkout

    checkout = mcpmark_checkout(tmp_path / "src" / "mcpmark")
    shutil.copytree(checkout / "downloads", tmp_path / "mcpmark-states")
    commands = _readme_commands()
    assert len(commands) >= 3
    for command in commands:
        command = command.replace("/home/me/", f"{tmp_path}/")  # the printed eval command names the reader's home
        argv = [os.path.expanduser(a) for a in shlex.split(command)]  # as the shell expands ~
        assert argv[0] == "mcp-gym"
        assert main(argv[1:]) == 0, command
    capsys.readouterr()
    oracle = json.loads((tmp_path / "runs/eval/custom-oracle/report/results.json").read_text())["summary"]
    rand = json.loads((tmp_path / "runs/eval/custom-random/report/results.json").read_text())["summary"]
    readme = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert oracle["success_rate"] == 1.0 and oracle["pass^4"] == 1.0
    memory = json.loads((tmp_path / "runs/eval/memory-oracle/report/results.json").read_text())["summary"]
    assert (memory["episodes"], memory["success_rate"]) == (4, 1.0)  # one knowledge graph per episode
    row = re.search(r"\| success rate \| ([\d.]+)% \| ([\d.]+)% \|", readme)
    assert row is not None
    assert float(row.group(1)) == pytest.approx(oracle["success_rate"] * 100, abs=0.05)
    assert float(row.group(2)) == pytest.approx(rand["success_rate"] * 100, abs=0.05)


@pytest.mark.thirdparty
def test_task_env_reaches_the_server(make_env: Callable[..., MCPEnv]) -> None:
    tasks = [{"id": "with-env", "prompt": "x", "env": {"MCP_GYM_GREETING": "hello-from-the-task"},
              "grader": {"kind": "mcp", "tool": "get-env", "contains": "hello-from-the-task"}},
             {"id": "without", "prompt": "x",
              "grader": {"kind": "mcp", "tool": "get-env", "contains": "hello-from-the-task"}}]
    env = make_env({"everything": everything()}, tasks)
    assert run(env, "with-env", [], "x")["success"] is True
    assert run(env, "without", [], "x")["success"] is False  # the server restarted without the task's variable
    assert run(env, "with-env", [], "x")["success"] is True


@pytest.mark.thirdparty
def test_stateful_eval_cli_isolates_concurrent_episodes(tmp_path: Path) -> None:
    """server-memory with {workspace}, 8 concurrent episodes and the default launcher (which shares sessions between
    episodes otherwise): each episode sees only its own graph."""
    tasks = tmp_path / "memory.jsonl"
    rows = [{"id": f"remember-{i}", "prompt": f"Remember person{i}",
             "solution": [{"tool": "create_entities", "arguments": {"entities": [
                 {"name": f"person{i}", "entityType": "person", "observations": ["exists"]}]}}],
             "data": {"expect": {"equals": [f"person{i}"]}}} for i in range(4)]
    rows.append({"id": "empty", "prompt": "Do nothing", "solution": [{"tool": "read_graph", "arguments": {}}],
                 "data": {"expect": {"equals": []}}})
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    server = f"env MEMORY_FILE_PATH={{workspace}}/graph.jsonl {npm_bin('mcp-server-memory')}"
    code = main(["eval", "env=custom", f'+env.servers.memory="{server}"',
                 f"env.tasks={tasks}", "env.grader={kind: mcp, tool: read_graph, path: '$.entities[*].name'}",
                 "policy=oracle", "samples=2", "launcher.num_envs=4", f"out={out}", "launcher.progress=false",
                 "plots=false"])
    assert code == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert (summary["episodes"], summary["success_rate"], summary["grading_errors"]) == (10, 1.0, 0)
    assert summary["graders"]["mcp"]["episodes"] == 10


def test_judge_prompt_keeps_literal_braces() -> None:
    prompt = 'Reply like {"verdict": "pass"}. Rubric: {rubric}. Answer: {answer}'
    grader: Any = make_grader({"kind": "judge", "prompt": prompt})
    messages = grader._messages(GradeContext(Task(id="t", prompt="p", rubric="be right"), "42"))
    assert messages[1]["content"] == 'Reply like {"verdict": "pass"}. Rubric: be right. Answer: 42'
    with pytest.raises(GraderError, match="no rubric"):
        grader._messages(GradeContext(Task(id="t", prompt="p"), "42"))


def test_a_resource_graders_share_stops_when_the_last_env_that_used_it_closes() -> None:
    """``mcp_gym.graders._shared`` (how the BFCL checker process is owned): a sync Python grader, run in a worker
    thread, asks for a shared resource while it grades, and the env grading holds it. Two envs grade: closing the
    first leaves the resource, closing the second stops it, once. Asked for outside any env's grade, nobody holds
    it."""
    from test_benchmarks import notes_server

    from mcp_gym import InProcess
    from mcp_gym.graders import _shared

    key, stopped = object(), []

    def grader(ctx: Any) -> bool:
        return _shared.use(key, lambda: stopped.append(key))

    assert not _shared.use(key, lambda: stopped.append(key)) and _shared.holders(key) == 0
    envs = [MCPEnv(InProcess(notes_server()), ["keep notes"], grader=grader) for _ in range(2)]
    try:
        for env in envs:
            env.reset(seed=0)
            _, _, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "x"}})
            assert terminated and info["success"] is True, info  # the grader ran in an env's grade
        assert _shared.holders(key) == 2
        envs[0].close()
        assert stopped == [] and _shared.holders(key) == 1
        envs[1].close()
        assert stopped == [key] and _shared.holders(key) == 0
    finally:
        for env in envs:
            env.close()
    assert stopped == [key]
