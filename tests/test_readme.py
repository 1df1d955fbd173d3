"""The code in README.md and in every page of the docs (docs/**/*.md) runs as written.

Per page, the ```python blocks run in document order, in one namespace, from an empty directory, in a process of their
own (one test item per page, so xdist spreads them). A block that cannot run here (it downloads a model, or stands for
the reader's own LLM) is preceded by a visible ``<!-- not-run: reason -->`` line; those are listed and counted so they
stay few. A block that needs an optional extra (a trainer framework) is preceded by ``<!-- needs: MODULE (how to
install it) -->``: it runs where ``MODULE`` imports, and is left out (and named) where it does not, except in .ci/run's
second stage (``MCP_GYM_CI_FULL=1``), which installs them all. The ```bash blocks' ``mcp-gym`` commands name commands
the CLI has, and their jobs' ``KEY=VALUE`` overrides compose as written (``--cfg job``, the heavy lane).
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
import ast, asyncio, inspect, json, os, sys, traceback
for page, blocks in json.load(open(sys.argv[1])):
    os.makedirs(page, exist_ok=True)  # each page from an empty folder of its own, in a namespace of its own
    os.chdir(page)
    ns = {"__name__": "__main__"}
    for b in blocks:
        print(f"--- {page} line {b['line']}", flush=True)
        src = "\n" * b["line"] + b["code"]  # tracebacks name the page's own line numbers
        code = compile(src, page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, ns))
        else:
            exec(code, ns)
    os.chdir(os.path.dirname(os.path.abspath(sys.argv[1])) + "/empty")
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


def page_items() -> dict[str, list[str]]:
    """Test item -> its pages: one item per page, except the generated env pages (docs/envs/), which run together in
    one process (the same few lines on each env: one interpreter start instead of seven)."""
    items: dict[str, list[str]] = {}
    for page in pages():
        if page_blocks(page)[0]:
            key = "docs/envs/" if page.parent == DOCS / "envs" else name(page)
            items.setdefault(key, []).append(name(page))
    return items


ITEMS = page_items()
HEAVY_PAGES = {
    "docs/training/verl.md": "test_verl.py::test_batch_of_trajectories_and_the_default_loop runs task_rows' rows",
    "docs/training/openenv.md": "test_openenv.py::test_mcpgym_client_reset_returns_the_task_prompt runs its client",
    "docs/training/skyrl.md": "test_skyrl.py::test_bundled_env_plays_and_records_like_mcpenv registers, makes, plays",
    "docs/jobs.md": "test_jobs_env_config.py composes a --config-dir env; test_skyrl.py registers an env factory",
}
"""Pages whose example only imports a slow extra (verl ~7 s, openenv ~5 s, skyrl ~1.5 s in a fresh interpreter) to do
what a fast test of that extra does in-process (docs/jobs.md: Hydra and skyrl, 35 s at load 14 on 2 cores): run by the
heavy lane (.ci/run), not the fast one."""


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
@pytest.mark.parametrize("item", [pytest.param(i, marks=pytest.mark.slow) if i in HEAVY_PAGES else i for i in ITEMS])
def test_page_python_examples_run_in_order(item: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs, skipped = [], []
    for page in ITEMS[item]:
        blocks, skipped_lines = page_blocks(ROOT / page)
        blocks, absent = runnable(page, blocks)
        skipped += [f"{page} {line}: {reason}" for line, reason in skipped_lines] + [f"{page} {a}" for a in absent]
        runs.append((page, blocks))
    code = " ".join(str(b["code"]) for _, blocks in runs for b in blocks)
    for server in ("mcp-server-memory", "mcp-server-everything"):  # examples start npm reference servers by name
        if server in code:
            npm_bin(server)
    (tmp_path / "blocks.json").write_text(json.dumps(runs))
    (tmp_path / "runner.py").write_text(RUNNER)
    cwd = tmp_path / "empty"
    cwd.mkdir()
    env = {**os.environ, "PATH": f"{NPM_DIR / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    ran = re.findall(r"^--- (\S+) line (\d+)$", done.stdout, re.M)
    where = ":".join(ran[-1]) if ran else "?"
    assert done.returncode == 0, f"the example at {where} failed:\n{done.stderr[-4000:]}"
    assert "--- all blocks ran" in done.stdout
    assert [(p, int(n)) for p, n in ran] == [(page, b["line"]) for page, blocks in runs for b in blocks]
    print(f"{item}: {sum(len(b) for _, b in runs)} blocks ran; not run: {skipped}")
    if item == "docs/recording.md":
        export_cli_alternative(ROOT / item, cwd / item, monkeypatch)


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


@pytest.mark.thirdparty  # server-everything from npm
def test_the_benchmark_config_file_of_the_docs_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """docs/benchmarks.md's config file, written where its first line says, and its commands as written, from a copy
    of the checkout's scripts/examples/tasks/: the reference solutions pass and the oracle's evaluation is named after
    the file."""
    import shutil

    from mcp_gym.cli import main

    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    section = text.split("## Your benchmark as a config file", 1)[1].split("\n## ", 1)[0]
    yaml_block = re.search(r"```yaml\n(.*?)```", section, re.S)
    bash_block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert yaml_block is not None and bash_block is not None
    path = re.match(r"# (\S+\.yaml):", yaml_block[1])
    assert path is not None, "the config block's first line names its file"
    shutil.copytree(ROOT / "scripts" / "examples" / "tasks", tmp_path / "scripts" / "examples" / "tasks")
    (tmp_path / path[1]).parent.mkdir(parents=True)
    (tmp_path / path[1]).write_text(yaml_block[1], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(Path(npm_bin("mcp-server-everything")).parent) + os.pathsep + os.environ["PATH"])
    commands = [ln.split("  #", 1)[0].strip() for ln in bash_block[1].splitlines() if ln.startswith("mcp-gym ")]
    assert len(commands) == 3
    for command in commands[:2]:  # the third asks an LLM endpoint
        assert main(shlex.split(command)[1:]) == 0, command
    assert "8 of 8 tasks pass" in capsys.readouterr().out
    results = json.loads((tmp_path / "runs/eval/everything-oracle/report/results.json").read_text())
    assert results["summary"]["success_rate"] == 1.0


JOBS = ("collect", "eval", "export-sft", "tasks validate", "tasks generate")
"""The Hydra jobs whose overrides ``--cfg job`` composes without running anything."""


def job_lines() -> list[tuple[str, list[str]]]:
    """``(page:line, argv)`` of every ``mcp-gym <job> ...`` of a ```bash block that composes a config (not a multirun,
    ``--cfg`` or ``--help`` line, and not the installed example package's ``env=demo-env``, which the page installs
    first)."""
    found = []
    for page in pages():
        for start, code, _ in fenced(page, "bash"):
            for offset, line in enumerate(code.replace("\\\n", " ").splitlines()):
                for part in re.split(r"&&|\|\||;|&", line.split("  #", 1)[0]):
                    part = re.sub(r"\$[A-Za-z_]\w*", "1", part.strip())  # a shell variable ($w); ${oc.env:..} stays
                    words = shlex.split(part) if part.startswith("mcp-gym ") else []
                    job = next((j for j in JOBS if " ".join(words[1:1 + j.count(" ") + 1]) == j), None)
                    if job is None or {"-m", "--cfg", "--help"} & set(words) or "env=demo-env" in words:
                        continue
                    found.append((f"{name(page)}:{start + offset + 1}", words[1:]))
    return found


@pytest.mark.slow  # ~12 s of Hydra composition on a loaded 2-core machine; fast cover of the commands' names:
# test_bash_blocks_name_commands_the_cli_has, of the custom env's keys: test_docs_claims.py
def test_bash_blocks_job_overrides_name_keys_the_config_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``mcp-gym <job> KEY=VALUE ...`` line of the README and the docs composes as written (``--cfg job``,
    nothing runs): a renamed or removed Hydra key cannot linger in a command a reader copies. The config-file
    commands of docs/benchmarks.md run next to the file that page writes."""
    from mcp_gym.cli import main

    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    yaml_block = re.search(r"```yaml\n(# (\S+\.yaml):.*?)```", text, re.S)
    assert yaml_block is not None
    (tmp_path / yaml_block[2]).parent.mkdir(parents=True)
    (tmp_path / yaml_block[2]).write_text(yaml_block[1], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    lines = job_lines()
    assert len(lines) >= 40
    wrong = []
    for where, argv in lines:
        try:
            code = main([*argv, "--cfg", "job"])
        except SystemExit as e:
            code = e.code
        if code != 0:
            wrong.append(f"{where}: {shlex.join(argv)}: {capsys.readouterr().err.strip()[-300:]}")
        capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert main(["eval", "env=sql", "env.no_such_key=1", "--cfg", "job"]) != 0  # the check can fail
