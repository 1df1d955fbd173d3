"""``mcp-gym tasks generate`` on servers mcp-gym was not written against (PyPI ``mcp-server-sqlite``, which reports a
failed query as an ordinary result, and ``mcp-server-fetch``, whose text names URLs): a failure the server calls a
success makes no task, and a URL's ``scheme://`` is no ``key: value`` field."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer
from omegaconf import OmegaConf

from mcp_gym import InProcess, MCPEnv
from mcp_gym.jobs.generate import _error_text, _Runner
from mcp_gym.jobs.proposers import extract, fields

ROOT = Path(__file__).resolve().parents[1]


def _default_error_text() -> str:
    """``generator.error_text`` as conf/generator/explore.yaml sets it (llm.yaml sets the same)."""
    explore = OmegaConf.load(ROOT / "conf" / "generator" / "explore.yaml").error_text
    assert OmegaConf.load(ROOT / "conf" / "generator" / "llm.yaml").error_text == explore
    return str(explore)


def _sqlite_like() -> MCPServer:
    """What PyPI mcp-server-sqlite (mcp 1.x) answers, with isError false every time: rows, or its error texts."""
    db = MCPServer("db")

    @db.tool()
    def read_query(query: str) -> str:
        """Run a SELECT query."""
        if not query.upper().startswith("SELECT"):
            return "Error: Only SELECT queries are allowed for read_query"
        return "Database error: no such table: nope" if "nope" in query else "[{'n': 3}]"

    return db


def test_a_result_that_reads_as_an_error_is_a_failed_call() -> None:
    """mcp-server-sqlite answers ``read_query {"query": "zæH"}`` with ``Error: Only SELECT queries are allowed ...``
    and isError false. The generator took that for a success: it kept tasks whose answer is that error text ("answer
    with the `Error` field of what step 2 returned"), and its progress bar said "calls failed 0/52" while most calls
    failed. With ``generator.error_text`` (its default) such a result is a failed call, counted and named."""
    env = MCPEnv({"db": InProcess(_sqlite_like())}, [], reset_mode="none")
    runner = _Runner(env, None, _error_text(_default_error_text()))
    try:
        s = runner.session()
        assert s.step({"tool": "read_query", "arguments": {"query": "SELECT n FROM t"}})[0]
        for query in ("zæH", "SELECT * FROM nope"):
            ok, _ = s.step({"tool": "read_query", "arguments": {"query": query}})
            assert not ok, query
    finally:
        env.close()
    assert (runner.calls, runner.failed) == (3, 2)
    assert runner.first_error == ("read_query: the result reads as an error (generator.error_text): Error: Only SELECT "
                                  "queries are allowed for read_query")
    assert _error_text(None) is None and _error_text("") is None  # null: isError alone decides


@pytest.mark.parametrize("text", ["Database error: no such table: x", "Error: Unknown tool: y",
                                  '{"error": "bad"}'])
def test_the_default_error_text_matches_failures(text: str) -> None:
    assert _error_text(_default_error_text()).search(text)  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["[{'n': 3}]", "Errors found: 0", "Insight added to memo", "no error here",
                                  "Error handling: on", '{"error_count": 0}', "Terror: a film"])
def test_the_default_error_text_leaves_results_alone(text: str) -> None:
    assert not _error_text(_default_error_text()).search(text)  # type: ignore[union-attr]


def test_a_bad_error_text_is_refused_in_one_line() -> None:
    from mcp_gym.jobs.schema import ConfigError

    with pytest.raises(ConfigError, match=r"^generator.error_text is not a regular expression \(.*\): '\('$"):
        _error_text("(")
    with pytest.raises(ConfigError, match=r"^generator.error_text must be a regular expression or null, not 3$"):
        _error_text(3)


# What PyPI mcp-server-fetch (2026.10.24) returns for a page of a loopback HTTP server (its first lines).
FETCHED = ("Contents of http://127.0.0.1:8765/index.html:\n# Fruits\n\n* apple\n* pear\n\nPrices: apple 3, pear 4.")


def test_a_url_is_no_key_value_field() -> None:
    """The generator read ``Contents of http://127.0.0.1:8765/a.txt:`` as the field ``Contents of http`` with the
    value ``//127.0.0.1:8765/a.txt:``, and kept the task "answer with the `Contents of http` field of what step 1
    returned". A ``:`` that starts ``://`` separates no key from a value."""
    found = dict(fields(FETCHED))
    assert "field:Contents of http" not in found, found
    assert found["field:Prices"] == "apple 3, pear 4."
    assert found["line:1"] == "Contents of http://127.0.0.1:8765/index.html:"
    assert extract(FETCHED, "field:Contents of http") is None  # an llm proposal naming it gets no answer either
    assert extract(FETCHED, "field:Prices") == "apple 3, pear 4."


SQLITE = os.environ.get("MCP_GYM_SQLITE_SERVER") or shutil.which("mcp-server-sqlite")


# Heavy lane (~1 min: a fresh mcp-server-sqlite per run); fast cover:
# test_a_result_that_reads_as_an_error_is_a_failed_call
@pytest.mark.slow
@pytest.mark.thirdparty
@pytest.mark.skipif(SQLITE is None, reason="needs PyPI mcp-server-sqlite in a venv of its own (it pins mcp<2): "
                                           "python -m venv sq && sq/bin/pip install mcp-server-sqlite 'mcp<2', then "
                                           "MCP_GYM_SQLITE_SERVER=sq/bin/mcp-server-sqlite")
def test_generated_sqlite_tasks_have_no_error_text_for_an_answer(tmp_path: Path) -> None:
    """The real mcp-server-sqlite on a fixture database: no kept task's answer is one of its error texts."""
    from mcp_gym.cli import main

    fixture = tmp_path / "fixture"
    fixture.mkdir()
    with sqlite3.connect(fixture / "db.sqlite") as c:
        c.executescript("create table products(id integer primary key, name text, price real);"
                        "insert into products(name, price) values ('apple', 3.0), ('pear', 4.5);")
    out = tmp_path / "gen"
    assert main(["tasks", "generate", "env=custom", f'+env.servers.db="{SQLITE} --db-path {{workspace}}/db.sqlite"',
                 f"fixture={fixture}", "generator.values=[products,SELECT name FROM products ORDER BY id]",
                 "n=3", "seed=0", f"out={out}"]) == 0
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    error = _error_text(_default_error_text())
    assert not [r["answer"] for r in rows if r["answer"] and error.search(r["answer"])]  # type: ignore[union-attr]
    ledger = [json.loads(line) for line in (out / "proposals.jsonl").read_text().splitlines()]
    assert not [p for p in ledger if p["verdict"] == "kept" and "Error" in p["prompt"]]


# What the explore generator proposed for npm server-sequential-thinking (2026.8.31), whose one tool echoes its
# arguments and adds ``thoughtHistoryLength``, the only value a task can ask for.
THOUGHT = ('Step 1: call `sequentialthinking` with {"branchFromThought": 2, "branchId": "lajg9cm rv", '
           '"nextThoughtNeeded": true, "thought": "iba", "thoughtNumber": 7, "totalThoughts": 8}.\n'
           "Then answer with `thoughtHistoryLength` of what step 1 returned.")


def test_the_prompts_own_step_numbers_give_no_answer() -> None:
    """An answer counted as "given in the prompt" if it was a substring of it: ``thoughtHistoryLength`` 1 was given
    by "Step 1", so all 173 proposals of 51 walks on server-sequential-thinking were dropped and the run would have
    walked 300 walks (about 30 minutes) to keep nothing. An answer is given when it stands in the prompt as a whole
    value, outside the prompt's own step and line numbers."""
    from mcp_gym.jobs.generate import given_in

    assert not given_in("1", THOUGHT)  # "Step 1", "step 1": the template's words
    assert [a for a in ("7", "8", "2", "true", "iba", "lajg9cm rv", "TRUE") if not given_in(a, THOUGHT)] == []
    assert not given_in("ib", THOUGHT) and not given_in("memo", "call `append_insight`: added to memory")
    assert not given_in("0", "answer with `values[0][0]` of line 2") and given_in("0", '{"start_index": 0}')


def _history_server() -> str:
    return f'+env.servers.think="{sys.executable} {ROOT / "tests" / "servers" / "history_server.py"}"'


def test_a_walk_on_a_process_kept_between_runs_proposes_no_growing_value() -> None:
    """The fast cover of the test below: the explore walk on one in-process server kept from run to run (as
    ``reset_mode=auto`` keeps a process) proposes no answer from a value that grew between its two runs."""
    import runpy

    from mcp_gym.jobs.proposers import ExploreProposer

    server = runpy.run_path(str(ROOT / "tests" / "servers" / "history_server.py"))["server"]
    env = MCPEnv({"think": InProcess(server)}, [], reset_mode="auto")
    try:
        explorer = ExploreProposer(seed=0, walk_length=2, values=["plan"], chain=0.0)
        walk = explorer.walk(_Runner(env, None), env, 0)
        proposals = list(explorer.proposals(walk, 0))
    finally:
        env.close()
    assert [s.value["historyLength"] for s in walk.steps] == [101, 102]  # the second run saw 103 and 104
    assert walk.stable == [None, None]
    assert not [p for p in proposals if "historyLength" in json.dumps(p.check)], proposals


# Heavy lane (~4.5 s: Hydra and a Python stdio server); fast cover:
# test_a_walk_on_a_process_kept_between_runs_proposes_no_growing_value
@pytest.mark.slow
def test_a_value_that_grows_from_episode_to_episode_makes_no_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """npm server-sequential-thinking keeps every thought in its process and marks its tool read-only: in an ``eval``
    (``reset_mode=auto``: one process for many episodes) ``thoughtHistoryLength`` went 1, 2, ..., 24 over 24 episodes.
    The generator ran every proposal on a new process and kept "answer with `thoughtHistoryLength`" tasks (answer 1),
    which ``tasks validate`` and the oracle (it submits the known answer) passed, while an agent reading the result
    could not, and the SFT export showed a tool saying 17 and an assistant answering 1. Proposals are now judged under
    the env's reset_mode, as the jobs run them: such a value makes no task, and the message says how to get one."""
    from mcp_gym.cli import main

    out = tmp_path / "gen"
    assert main(["tasks", "generate", "env=custom", _history_server(), "n=1", "max_proposals=1",
                 "generator.walk_length=1", f"out={out}"]) == 1
    assert (out / "tasks.jsonl").read_text() == ""
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mcp-gym tasks generate:")]
    assert len(err) == 1 and "no result made a task" in err[0] and "env.reset_mode=restart" in err[0], err
