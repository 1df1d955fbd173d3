"""The two test lanes stay honest: ``python -m pytest`` (the README's test command) is the fast lane, pyproject.toml's
``addopts`` leave the heavy markers out of it, ``.ci/run`` runs that command exactly and then the heavy lane, the
README says how to run the heavy lane, and every test file still has tests in the fast lane unless it is heavy as a
whole. Static checks (no test collection): this file runs in well under a second."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("slow", "train", "browser")
"""The markers of the heavy lane (what the fast lane leaves out), in the order the commands name them."""
NEEDS = ("ray", "openenv", "skyrl", "verl", "verifiers", "bwrap", "extras")
"""The markers of fast-lane tests that need an optional extra or a system tool (they skip without it): ``.ci/run``
runs them again once it has installed everything."""
NOT_NEEDS = {"thirdparty"}  # npm/PyPI servers: the tests install them themselves, in the first stage too
INSTALLS = ("pip install", "apt-get", "npm", "pytest", "venv")


def _pytest_options() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def _fast_lane_expression() -> str:
    addopts = _pytest_options()["addopts"]
    args = shlex.split(addopts) if isinstance(addopts, str) else list(addopts)
    assert args.count("-m") == 1, f"pyproject.toml's addopts need exactly one -m: {args}"
    return args[args.index("-m") + 1]


def _heavy_lane_command() -> str:
    return f'python -m pytest -m "{" or ".join(HEAVY)}"'


def _readme_test_command() -> str:
    """The README's test command: the second command of its first bash block, without its comment."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block, "README.md has no bash block"
    lines = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2 and lines[1].endswith("python -m pytest"), lines
    return lines[1]


def test_the_fast_lane_leaves_out_exactly_the_heavy_markers() -> None:
    expression = _fast_lane_expression()
    assert expression == " and ".join(f"not {m}" for m in HEAVY), expression
    registered = {m.split(":", 1)[0] for m in _pytest_options()["markers"]}
    assert registered >= set(HEAVY), set(HEAVY) - registered


def test_ci_runs_the_readme_test_command_exactly_and_then_the_heavy_lane() -> None:
    readme_command = _readme_test_command()
    assert readme_command == 'pip install -e ".[test]" && python -m pytest'
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert readme_command in commands, ".ci/run does not run the README's test command as written"
    assert _heavy_lane_command() in commands, f".ci/run does not run the heavy lane: {_heavy_lane_command()}"
    assert commands.index(_heavy_lane_command()) > commands.index(readme_command)


def _ci_commands() -> list[str]:
    return [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _second_stage_command() -> str:
    fast = _fast_lane_expression()
    return f'python -m pytest -m "{fast} and ({" or ".join(NEEDS)})"'


def test_ci_runs_the_readme_test_command_before_it_installs_anything() -> None:
    """CI sees what a user sees: the README's command runs first, on the fresh machine (no extra, no system tool, no
    npm server installed yet); the rule that nothing may be missing (``MCP_GYM_CI_FULL=1``) starts after it."""
    commands = _ci_commands()
    first = commands.index(_readme_test_command())
    before = [c for c in commands[:first] if any(word in c for word in INSTALLS)]
    assert not before, f".ci/run installs or tests something before the README's test command: {before}"
    assert "export MCP_GYM_CI_FULL=1" in commands[first + 1:]
    full = commands.index("export MCP_GYM_CI_FULL=1")
    assert full < commands.index(_heavy_lane_command()) and full < commands.index(_second_stage_command())


def test_ci_runs_the_tests_that_need_an_extra_again_once_it_is_installed() -> None:
    """Every registered marker that says what a test needs is in the second stage's selection (a new one must be)."""
    assert _second_stage_command() in _ci_commands(), f".ci/run does not run: {_second_stage_command()}"
    registered = {m.split(":", 1)[0] for m in _pytest_options()["markers"]}
    assert set(NEEDS) <= registered, set(NEEDS) - registered
    assert registered - set(HEAVY) - set(NEEDS) - NOT_NEEDS == set(), "a new marker: add it to NEEDS or NOT_NEEDS"


def test_ci_runs_the_lowest_and_the_newest_core_versions() -> None:
    commands = _ci_commands()
    assert "./.ci/lowest" in commands and "./.ci/newest" in commands
    core_tests = [re.findall(r"tests/test_\w+\.py", (ROOT / ".ci" / name).read_text()) for name in ("lowest", "newest")]
    assert core_tests[0] == core_tests[1] and len(core_tests[0]) >= 5, core_tests


def test_the_docs_say_how_to_run_the_heavy_lane() -> None:
    development = (ROOT / "docs" / "development.md").read_text()
    assert _heavy_lane_command() in development


def _marks(decorators: list[ast.expr]) -> set[str]:
    """The ``pytest.mark.<name>`` names among decorators (or a ``pytestmark`` value)."""
    names = set()
    for node in decorators:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark":
                names.add(sub.attr)
    return names


def test_every_test_file_has_fast_tests_or_is_heavy_as_a_whole() -> None:
    """A file marked heavy module-wide (``pytestmark``) runs in the heavy lane only; any other file keeps at least one
    test without a heavy marker, so the fast lane still exercises what it tests."""
    files = sorted((ROOT / "tests").glob("test_*.py"))
    assert len(files) > 40  # the scan sees the suite
    offenders, heavy_files = [], []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        module_marks: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                module_marks |= _marks([node.value])
        if module_marks & set(HEAVY):
            heavy_files.append(path.name)
            continue
        tests = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name.startswith("test_")]
        if not any(not (_marks(t.decorator_list) & set(HEAVY)) for t in tests):
            offenders.append(path.name)
    assert not offenders, f"these files have no fast test: mark the file (pytestmark) or keep one fast: {offenders}"
    assert {"test_sft_from_scratch.py", "test_rl_from_sft.py", "test_sft_train.py"} <= set(heavy_files)
