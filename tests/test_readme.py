"""README.md's Python examples run as written, in document order, in one namespace, from an empty directory.

A block that cannot run here (it downloads a model, or stands for the reader's own LLM) is preceded in the README by
a visible ``<!-- not-run: reason -->`` line; those are listed and counted so they stay few. A block that needs an
optional extra (a trainer framework) is preceded by ``<!-- needs: MODULE (how to install it) -->``: it runs where
``MODULE`` imports, and is left out (and named) where it does not, except in .ci/run's second stage
(``MCP_GYM_CI_FULL=1``), which installs them all.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CI_FULL_ENV, NPM_DIR, npm_bin

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>\S.*?) -->$")
NEEDS = re.compile(r"^<!-- needs: (?P<module>[\w.]+) \((?P<install>\S.*?)\) -->$")
MAX_NOT_RUN = 3

# Runs every block in one namespace; a block with top-level ``await`` runs under asyncio (as in a notebook).
RUNNER = r"""
import ast, asyncio, inspect, json, sys, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for b in blocks:
    print(f"--- README.md line {b['line']}", flush=True)
    src = "\n" * b["line"] + b["code"]  # tracebacks name README.md's own line numbers
    code = compile(src, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, ns))
    else:
        exec(code, ns)
print("--- all blocks ran", flush=True)
"""


def readme_blocks() -> tuple[list[dict[str, object]], list[tuple[int, str]]]:
    """(blocks to run: ``{line, code}``, not-run blocks: ``(line, reason)``), in document order."""
    lines = README.read_text(encoding="utf-8").splitlines()
    run: list[dict[str, object]] = []
    skipped: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = lines.index("```", start)
            prev = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
            m, needs = NOT_RUN.match(prev), NEEDS.match(prev)
            if m:
                skipped.append((start, m["reason"]))
            else:
                run.append({"line": start, "code": "\n".join(lines[start:end]) + "\n",
                            **({"needs": needs["module"], "install": needs["install"]} if needs else {})})
            i = end
        i += 1
    return run, skipped


def test_not_run_markers_are_few_and_give_a_reason() -> None:
    run, skipped = readme_blocks()
    assert len(run) >= 8
    assert len(skipped) <= MAX_NOT_RUN, f"too many README blocks marked not-run: {skipped}"
    for line, reason in skipped:
        assert len(reason) > 10, f"README.md:{line}: say why the block does not run"
    # a marker only counts right before a fence; elsewhere it is a typo that would hide nothing
    text = README.read_text(encoding="utf-8")
    assert text.count("<!-- not-run:") == len(skipped)
    assert text.count("<!-- needs:") == len([b for b in run if "needs" in b])


def runnable(blocks: list[dict[str, object]]) -> tuple[list[dict[str, object]], list[str]]:
    """The blocks whose ``needs`` module imports here, and the others' reasons (none in CI: it installs them)."""
    import importlib.util

    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except ModuleNotFoundError:  # find_spec("a.b") imports a, which is not installed either
            return True

    missing = [b for b in blocks if "needs" in b and absent(str(b["needs"]))]
    if os.environ.get(CI_FULL_ENV) == "1":  # .ci/run's second stage: every extra is installed
        assert not missing, [f"README.md:{b['line']} needs {b['needs']}: {b['install']}" for b in missing]
    return [b for b in blocks if b not in missing], [f"line {b['line']}: {b['install']}" for b in missing]


@pytest.mark.extras  # the blocks marked <!-- needs: MODULE --> run where their extra is installed
@pytest.mark.thirdparty  # the quickstart's filesystem server (npx) and the cassette example's memory server
def test_readme_python_examples_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks, skipped = readme_blocks()
    blocks, absent = runnable(blocks)
    skipped = [*skipped, *absent]
    npm_bin("mcp-server-memory")  # the cassette example starts the npm reference servers by name
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "runner.py").write_text(RUNNER)
    cwd = tmp_path / "empty"
    cwd.mkdir()
    env = {**os.environ, "PATH": f"{NPM_DIR / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900)
    ran = re.findall(r"^--- README.md line (\d+)$", done.stdout, re.M)
    assert done.returncode == 0, f"README example at line {ran[-1] if ran else '?'} failed:\n{done.stderr[-4000:]}"
    assert "--- all blocks ran" in done.stdout
    assert [int(x) for x in ran] == [b["line"] for b in blocks]
    print(f"{len(blocks)} README blocks ran; not run: {skipped}")
    # the CLI alternative given right after the SFT example exports the run that example recorded
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## From a run to a TRL training command"):]
    command = re.search(r"or `(mcp-gym export-sft [^`]+)`", section)
    assert command is not None
    args = shlex.split(command[1])[1:]
    run = re.search(r"runs=\[([^\]]+)\]", command[1])
    assert run is not None and (cwd / run[1]).is_dir(), f"{command[1]} names a run the README does not create"
    from mcp_gym.cli import main  # the `mcp-gym` entry point, run in this process from the examples' folder

    monkeypatch.chdir(cwd)
    assert main([*args, "out=data/sql-sft-cli"]) == 0
    assert sorted(p.name.split("-")[0] for p in (cwd / "data" / "sql-sft-cli" / "data").glob("*.parquet")) == [
        "test", "train"]
