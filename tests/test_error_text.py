"""``error_text`` (``Scoring.error_text``, the jobs' ``env.error_text``): servers that report a failure as an ordinary
result (``isError`` false, ``Error: ...`` in the text, as PyPI ``mcp-server-sqlite``) get their failures counted as
tool errors: ``info["is_error"]``, ``error_penalty``, eval's tool-error rate, the recording and ``tasks validate``.
Off (the default), such a result stays a success, as the server says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer
from omegaconf import OmegaConf

from mcp_gym import InProcess, MCPEnv, Scoring
from mcp_gym.cli import main
from mcp_gym.recording import load

SERVER = Path(__file__).resolve().parent / "servers" / "error_text_server.py"
PATTERN = r"^\W*(\w+ )?error\W?:"  # the generator's default (conf/generator/explore.yaml)
REFUSED = {"tool": "read_query", "arguments": {"query": "DELETE FROM t"}}
ROWS = {"tool": "read_query", "arguments": {"query": "SELECT count(*) FROM t"}}


def _db() -> MCPServer:
    db = MCPServer("db")

    @db.tool()
    def read_query(query: str) -> str:
        """Run a SELECT query."""
        return "Error: Only SELECT queries are allowed" if not query.startswith("SELECT") else "3"

    return db


def _steps(**settings: object) -> list[tuple[str, bool, float, dict[str, object] | None]]:
    env = MCPEnv({"db": InProcess(_db())}, ["q"], reset_mode="none", **settings)  # type: ignore[arg-type]
    try:
        env.reset(seed=0)
        out = []
        for action in (REFUSED, ROWS):
            obs, reward, _, _, info = env.step(action)
            out.append((obs["result"], info["is_error"], reward, info["error"]))
        return out
    finally:
        env.close()


def test_a_matching_result_is_a_tool_error() -> None:
    (text, is_error, reward, error), rows = _steps(scoring=Scoring(error_penalty=0.5, error_text=PATTERN))
    assert (text, is_error, reward) == ("Error: Only SELECT queries are allowed", True, -0.5)
    assert error is not None and error["kind"] == "tool_error" and error["tool"] == "read_query"
    assert error["message"] == ("tool 'read_query' on server 'db' returned an error (its text matches error_text): "
                                "Error: Only SELECT queries are allowed")
    assert rows == ("3", False, 0.0, None)  # a result that does not match stays a success


def test_the_keyword_form_and_case_insensitivity() -> None:
    (_, is_error, reward, _), _ = _steps(error_penalty=0.5, error_text="^ERROR:")
    assert (is_error, reward) == (True, -0.5)


def test_off_by_default_the_server_is_taken_at_its_word() -> None:
    for settings in ({}, {"error_text": None}, {"error_text": ""}):
        (text, is_error, reward, error), rows = _steps(error_penalty=0.5, **settings)
        assert (text, is_error, reward, error) == ("Error: Only SELECT queries are allowed", False, 0.0, None)
        assert rows == ("3", False, 0.0, None)


@pytest.mark.parametrize(("value", "kind", "message"), [
    ("(", ValueError, r"^error_text is not a regular expression \(.*\): '\('$"),
    (3, TypeError, r"^error_text must be a regular expression or null, not 3$"),
])
def test_a_bad_error_text_is_refused_naming_the_keyword(value: object, kind: type[Exception], message: str) -> None:
    for settings in ({"error_text": value}, {"scoring": Scoring(error_text=value)},  # type: ignore[arg-type]
                     {"scoring": {"error_text": value}}):
        with pytest.raises(kind, match=message):
            MCPEnv({"db": InProcess(_db())}, ["q"], **settings)  # type: ignore[arg-type]


def _task_file(tmp_path: Path) -> Path:
    """One task whose solution makes a call the server refuses (as text), then submits the right answer."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "count", "prompt": "How many rows has t?", "answer": "3",
                                 "solution": [REFUSED, ROWS, {"tool": "submit", "arguments": {"answer": "3"}}]}) + "\n")
    return tasks


def _common(tmp_path: Path) -> list[str]:
    return ["env=custom", f'+env.servers.db="{sys.executable} {SERVER}"', f"env.tasks={_task_file(tmp_path)}",
            "env.reset_mode=none"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("error_text", [None, PATTERN])
def test_eval_counts_and_records_the_tool_error(tmp_path: Path, error_text: str | None) -> None:
    """The oracle plays the solution: with ``env.error_text`` the refused call is a tool error in eval's report (1
    of 3 steps) and in the recording; without it, none (the server said it succeeded)."""
    setting = [] if error_text is None else [f"env.error_text='{error_text}'"]
    out = tmp_path / "run"
    assert main(["eval", *_common(tmp_path), *setting, "policy=oracle", "samples=1", "plots=false",
                 "launcher.progress=false", f"out={out}"]) == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert summary["tool_error_rate"] == (0.0 if error_text is None else pytest.approx(1 / 3))
    steps = sorted(load(out).steps, key=lambda s: s["step_index"])
    assert [(s["tool"], s["is_error"]) for s in steps] == [
        ("read_query", error_text is not None), ("read_query", False), ("submit", False)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("error_text", [None, PATTERN])
def test_tasks_validate_fails_a_solution_relying_on_the_call(tmp_path: Path, error_text: str | None) -> None:
    setting = [] if error_text is None else [f"env.error_text='{error_text}'"]
    code = main(["tasks", "validate", *_common(tmp_path), *setting, f"out={tmp_path / 'validate'}"])
    checks = json.loads((tmp_path / "validate" / "validation.json").read_text())
    if error_text is None:
        assert (code, [c["status"] for c in checks]) == (0, ["passed"])
        return
    assert code != 0
    [check] = checks
    assert check["status"] == "failed"
    assert "a call of the solution failed" in check["reason"]
    assert check["failed_call"]["step"] == 1 and "its text matches error_text" in check["failed_call"]["error"]


@pytest.mark.parametrize(("value", "message"), [
    ("'('", "env.error_text is not a regular expression (missing ), unterminated subpattern at position 0): '('"),
    ("[3]", "env.error_text must be a string or null, not [3]"),
])
def test_a_bad_env_error_text_stops_the_job_in_one_line(tmp_path: Path, value: str, message: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", *_common(tmp_path), f"env.error_text={value}", "policy=oracle", "plots=false",
                 f"out={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err, err
    assert not any((tmp_path / "run").rglob("*"))  # refused before anything starts: no server, no recording


def test_the_generator_reads_env_error_text_when_set() -> None:
    """``tasks generate``: ``generator.error_text`` (on by default) unless the user sets ``env.error_text``."""
    from mcp_gym.jobs.generate import _runner_error_text

    gen = OmegaConf.create({"env": {"error_text": None}, "generator": {"error_text": PATTERN}})
    assert _runner_error_text(gen).pattern == PATTERN  # type: ignore[union-attr]
    gen.env.error_text = "^failed"
    pattern = _runner_error_text(gen)
    assert pattern is not None and pattern.pattern == "^failed" and pattern.search("FAILED: nope")
    gen.env.error_text = "("
    with pytest.raises(ValueError, match=r"^env.error_text is not a regular expression"):
        _runner_error_text(gen)
