"""Tables of the docs pages that list names of the code stay true: the recording schema tables of docs/recording.md
list exactly the recorded columns, the custom env's table of docs/benchmarks.md exactly the keys of
conf/env/custom.yaml (the judge row: exactly the judge keys a job accepts), and the serve-openenv table of
docs/training/openenv.md exactly the command's options. Reads the pages, the config and ``--help``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mcp_gym.recording import EpisodeRecord, StepRecord

DOCS = Path(__file__).resolve().parents[1] / "docs"
CONF = Path(__file__).resolve().parents[1] / "conf"


def _section(page: str, start: str, end: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    return text.split(start, 1)[1].split(end, 1)[0]


def _first_column(table: str) -> list[str]:
    """The backticked names in the first column of a Markdown table's rows."""
    names = []
    for line in table.splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return names


def test_recording_tables_list_the_recorded_columns() -> None:
    steps = _first_column(_section("recording.md", "**Steps**", "**Episodes**"))
    episodes = _first_column(_section("recording.md", "**Episodes**", "\n## "))
    assert sorted(steps) == sorted(StepRecord.COLUMNS)
    assert sorted(episodes) == sorted(EpisodeRecord.COLUMNS)


def test_custom_env_table_lists_the_custom_env_keys() -> None:
    table = _section("benchmarks.md", "## The custom env", "\n## ")
    config = yaml.safe_load((CONF / "env" / "custom.yaml").read_text(encoding="utf-8"))
    assert sorted(_first_column(table)) == sorted(k for k in config if k != "defaults")
    judge_row = next(line for line in table.splitlines() if line.startswith("| `judge` |"))
    keys = {k for k in re.findall(r"`([^`]+)`", judge_row.split("|")[2].split(";")[0]) if re.fullmatch(r"[a-z_]+", k)}
    assert keys == set(config["judge"]), "the judge row names the job's judge keys, and only those"


def test_serve_openenv_table_lists_the_command_options(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/training/openenv.md's option table names every option of ``mcp-gym serve-openenv --help`` (``--env-kwargs``
    is in the prose above it), and nothing else."""
    from mcp_gym.cli import main

    assert main(["serve-openenv", "--help"]) == 0
    usage = capsys.readouterr().out.split("positional arguments")[0]
    options = set(re.findall(r"\[(--[a-z-]+)", usage)) - {"--env-kwargs"}
    table = _section("training/openenv.md", "| option | default | meaning |", "\n\n")
    assert set(re.findall(r"^\| `(--[a-z-]+)", table, re.M)) == options


def _top_level_names(cell: str) -> set[str]:
    """The backticked names of a table cell outside parentheses (the info keys, not what each holds)."""
    depth, kept = 0, []
    for ch in cell:
        depth += ch == "("
        if depth == 0:
            kept.append(ch)
        depth -= ch == ")" and depth > 0
    return {n for part in re.findall(r"`([^`]+)`", "".join(kept)) for n in part.split("/")}


def test_env_page_lists_the_info_keys() -> None:
    """docs/env.md's table names every key of a reset's and a step's ``info`` (on the Counter env), and the reset row
    names nothing a reset's ``info`` lacks."""
    from mcp_gym import InProcess, MCPEnv
    from mcp_gym.servers.counter import make_server

    rows = {line.split("|")[1].strip(): line.split("|")[2] for line in _section("env.md", "| | |", "\n\n").splitlines()
            if line.startswith("| `info`")}
    env = MCPEnv({"counter": InProcess(make_server())}, ["Move the counter to 3."])
    try:
        _, reset_info = env.reset(seed=0)
        *_, step_info = env.step({"tool": "add", "arguments": {"amount": 1}})
    finally:
        env.close()
    assert _top_level_names(rows["`info` (reset)"]) == set(reset_info)
    assert set(step_info) <= _top_level_names(rows["`info` (step)"])


def test_env_constructor_table_lists_each_group_fields() -> None:
    """docs/env.md's constructor table names exactly the fields of ``Limits``, ``Scoring`` and ``Connection``."""
    import dataclasses

    from mcp_gym.options import GROUPS

    table = _section("env.md", "| group | fields |", "\n\n")
    for keyword, cls in GROUPS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{keyword}="))
        assert _top_level_names(row.split("|")[2]) == {f.name for f in dataclasses.fields(cls)}, keyword
