"""The code in README.md and in every page of the docs (docs/**/*.md) runs as written.

Per page, the ```python blocks run in document order, in one namespace, from an empty directory, in a process of their
own (one test item per page, so xdist spreads them). A block that cannot run here (it downloads a model, or stands for
the reader's own LLM) is preceded by a visible ``<!-- not-run: reason -->`` line; those are listed and counted so they
stay few. A block that needs an optional extra (a trainer framework) is preceded by ``<!-- needs: MODULE (how to
install it) -->``: it runs where ``MODULE`` imports, and is left out (and named) where it does not, except in .ci/run's
second stage (``MCP_GYM_CI_FULL=1``), which installs them all. The ```bash blocks' ``mcp-gym`` commands name commands
the CLI has.
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
DOCS = ROOT / "docs"
NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>\S.*?) -->$")
NEEDS = re.compile(r"^<!-- needs: (?P<module>[\w.]+) \((?P<install>\S.*?)\) -->$")
MAX_NOT_RUN = 3
"""Across README.md and every docs page."""


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)]


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


# Runs every block in one namespace; a block with top-level ``await`` runs under asyncio (as in a notebook).
RUNNER = r"""
import ast, asyncio, inspect, json, sys, traceback
page, blocks = sys.argv[2], json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for b in blocks:
    print(f"--- {page} line {b['line']}", flush=True)
    src = "\n" * b["line"] + b["code"]  # tracebacks name the page's own line numbers
    code = compile(src, page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, ns))
    else:
        exec(code, ns)
print("--- all blocks ran", flush=True)
"""


def fenced(page: Path, lang: str) -> list[tuple[int, str, str]]:
    """``(first line of the code, code, the nearest non-blank line before the fence)`` of each ```lang block."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith("```"):
            start = i + 1
            end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
            if lines[i].strip() == f"```{lang}":
                prev = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
                found.append((start, "\n".join(lines[start:end]) + "\n", prev))
            i = end
        i += 1
    return found


def page_blocks(page: Path) -> tuple[list[dict[str, object]], list[tuple[int, str]]]:
    """(blocks to run: ``{line, code}``, not-run blocks: ``(line, reason)``), in document order."""
    run: list[dict[str, object]] = []
    skipped: list[tuple[int, str]] = []
    for start, code, prev in fenced(page, "python"):
        m, needs = NOT_RUN.match(prev), NEEDS.match(prev)
        if m:
            skipped.append((start, m["reason"]))
        else:
            run.append({"line": start, "code": code,
                        **({"needs": needs["module"], "install": needs["install"]} if needs else {})})
    return run, skipped


PAGES_WITH_CODE = [name(p) for p in pages() if page_blocks(p)[0]]


def test_not_run_markers_are_few_and_give_a_reason() -> None:
    total_run, total_skipped = 0, []
    for page in pages():
        run, skipped = page_blocks(page)
        total_run += len(run)
        total_skipped += [(name(page), line, reason) for line, reason in skipped]
        for line, reason in skipped:
            assert len(reason) > 10, f"{name(page)}:{line}: say why the block does not run"
        # a marker only counts right before a fence; elsewhere it is a typo that would hide nothing
        text = page.read_text(encoding="utf-8")
        assert text.count("<!-- not-run:") == len(skipped), name(page)
        assert text.count("<!-- needs:") == len([b for b in run if "needs" in b]), name(page)
    assert total_run >= 16
    assert len(total_skipped) <= MAX_NOT_RUN, f"too many blocks marked not-run: {total_skipped}"


def runnable(page: str, blocks: list[dict[str, object]]) -> tuple[list[dict[str, object]], list[str]]:
    """The blocks whose ``needs`` module imports here, and the others' reasons (none in CI: it installs them)."""
    import importlib.util

    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except ModuleNotFoundError:  # a dotted name whose parent package is not installed
            return True

    missing = [b for b in blocks if "needs" in b and absent(str(b["needs"]))]
    if os.environ.get(CI_FULL_ENV) == "1":  # .ci/run's second stage: every extra is installed
        assert not missing, [f"{page}:{b['line']} needs {b['needs']}: {b['install']}" for b in missing]
    return [b for b in blocks if b not in missing], [f"line {b['line']}: {b['install']}" for b in missing]


@pytest.mark.extras  # the blocks marked <!-- needs: MODULE --> run where their extra is installed
@pytest.mark.thirdparty  # the quickstart's filesystem server (npx) and the cassette example's memory server
@pytest.mark.parametrize("page", PAGES_WITH_CODE)
def test_page_python_examples_run_in_order(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks, skipped_lines = page_blocks(ROOT / page)
    blocks, absent = runnable(page, blocks)
    skipped = [*skipped_lines, *absent]
    if any("mcp-server-memory" in str(b["code"]) for b in blocks):
        npm_bin("mcp-server-memory")  # the cassette example starts the npm reference server by name
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "runner.py").write_text(RUNNER)
    cwd = tmp_path / "empty"
    cwd.mkdir()
    env = {**os.environ, "PATH": f"{NPM_DIR / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json"), page],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    ran = re.findall(rf"^--- {re.escape(page)} line (\d+)$", done.stdout, re.M)
    assert done.returncode == 0, f"{page}: the example at line {ran[-1] if ran else '?'} failed:\n{done.stderr[-4000:]}"
    assert "--- all blocks ran" in done.stdout
    assert [int(x) for x in ran] == [b["line"] for b in blocks]
    print(f"{page}: {len(blocks)} blocks ran; not run: {skipped}")
    if page == "docs/recording.md":
        export_cli_alternative(ROOT / page, cwd, monkeypatch)


def export_cli_alternative(page: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI alternative given right after the SFT example exports the run that example recorded."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index("## SFT export"):]
    command = re.search(r"or `(mcp-gym export-sft [^`]+)`", section)
    assert command is not None
    args = shlex.split(command[1])[1:]
    run = re.search(r"runs=\[([^\]]+)\]", command[1])
    assert run is not None and (cwd / run[1]).is_dir(), f"{command[1]} names a run the page does not create"
    from mcp_gym.cli import main  # the `mcp-gym` entry point, run in this process from the examples' folder

    monkeypatch.chdir(cwd)
    assert main([*args, "out=data/sql-sft-cli"]) == 0
    assert sorted(p.name.split("-")[0] for p in (cwd / "data" / "sql-sft-cli" / "data").glob("*.parquet")) == [
        "test", "train"]


def cli_commands() -> set[str]:
    """The commands ``mcp-gym --help`` lists in its usage line (``tasks validate`` as one)."""
    done = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "--help"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    usage = re.search(r"usage: mcp-gym \{([^}]*)\}", done.stdout)
    assert usage is not None, done.stdout[:500] + done.stderr[-2000:]
    return {c.strip() for c in usage[1].split(",")}


def test_bash_blocks_name_commands_the_cli_has() -> None:
    """Every ``mcp-gym`` line of a ```bash block in the README and the docs names a command ``mcp-gym --help`` lists
    (or is ``--version`` / ``--help``): a renamed or removed command cannot linger in the docs."""
    commands = cli_commands()
    wrong = []
    for page in pages():
        for start, code, _ in fenced(page, "bash"):
            for offset, line in enumerate(code.replace("\\\n", " ").splitlines()):
                for part in re.split(r"&&|\|\||;", line.split("  #", 1)[0]):
                    words = part.split()
                    if not words or words[0] != "mcp-gym" or len(words) < 2 or words[1].startswith("-"):
                        continue
                    if words[1] not in commands and " ".join(words[1:3]) not in commands:
                        wrong.append(f"{name(page)}:{start + offset + 1}: {part.strip()}")
    assert not wrong, f"commands mcp-gym does not have: {wrong}"
