"""BFCL multi-turn: ``mcp-gym tasks import bfcl``, the BFCL server and grader, on a real copy of ``bfcl-eval``
(downloaded with ``pip download --no-deps`` into ``.mcp-gym-cache/bfcl`` on first use, never installed)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_gym.envs.bfcl import check, grade
from mcp_gym.graders.base import EpisodeContext
from mcp_gym.jobs import bfcl as bfcl_import
from mcp_gym.jobs._untrusted import UntrustedInput
from mcp_gym.tasks import Task

ROOT = Path(__file__).resolve().parents[1]
BFCL_VERSION = "2026.3.23"
CACHE = Path(os.environ.get("MCP_GYM_BFCL_DIR") or ROOT / ".mcp-gym-cache" / "bfcl")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def bfcl_root() -> Path:
    """An unpacked ``bfcl-eval`` wheel (cached); skips (fails in CI) when the package index is unreachable."""
    pytest.importorskip("mpmath", reason="BFCL's MathAPI needs mpmath (pip install mpmath)")
    target = CACHE / BFCL_VERSION
    if not (target / "bfcl_eval").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        wheels = CACHE / f"wheel-{os.getpid()}"
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"bfcl-eval=={BFCL_VERSION}",
                            "-d", str(wheels)], check=True, timeout=300, capture_output=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            _unavailable(f"pip download bfcl-eval=={BFCL_VERSION} failed (package index unreachable?): {e}")
        staging = CACHE / f"unpacking-{os.getpid()}"
        with zipfile.ZipFile(next(wheels.glob("bfcl_eval-*.whl"))) as z:
            z.extractall(staging)
        shutil.rmtree(wheels, ignore_errors=True)
        try:
            staging.rename(target)  # atomic: a concurrent worker's copy may have won
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def imported(bfcl_root: Path, tmp_path_factory: pytest.TempPathFactory) -> bfcl_import.ImportResult:
    return bfcl_import.import_bfcl(bfcl_root, tmp_path_factory.mktemp("bfcl") / "out")


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_category_imports_with_turns_ground_truth_and_held_back_functions(imported) -> None:
    assert imported.counts == {c: 200 for c in check.CATEGORIES}
    rows = {c: _records(p) for c, p in imported.files.items()}
    ids = [r["id"] for rs in rows.values() for r in rs]
    assert len(set(ids)) == 800
    miss = next(r for r in rows["miss_func"] if r["id"] == "multi_turn_miss_func_0")
    assert miss["data"]["bfcl"]["missed_function"] == {"3": ["sort"]}
    assert miss["turns"][2]["solution"] == []  # sort is not there yet: BFCL's ground truth is no call
    assert miss["turns"][3] == {"prompt": "I have updated some more functions you can choose from. What about now?",
                                "solution": [{"tool": "sort", "arguments": {"file_name": "final_report.pdf"}}]}
    assert miss["prompt"] == miss["turns"][0]["prompt"] and miss["tags"][:2] == ["bfcl", "miss_func"]
    assert miss["grader"] == {"kind": "python", "function": "mcp_gym.envs.bfcl.grade:verify"}
    assert all(r["data"]["bfcl"]["long_context"] for r in rows["long_context"])


def test_the_ground_truth_of_every_task_passes_bfcls_checker_as_imported(bfcl_root, imported) -> None:
    """The import's solutions (positional arguments named, tuples as lists) are what BFCL's checker accepts, for all
    800 tasks, and a solution with a turn's calls dropped is refused."""
    checks = [{"id": r["id"], "turns": [t["solution"] for t in r["turns"]]}
              for p in imported.files.values() for r in _records(p)]
    verdicts = grade.run_checks(bfcl_root, checks, timeout=600)
    failed = [(c["id"], v) for c, v in zip(checks, verdicts, strict=True) if v["valid"] is not True]
    assert not failed, failed[:5]
    dropped = [{"id": c["id"], "turns": [[] for _ in c["turns"]]} for c in checks[:20]]
    assert all(v["valid"] is False and v["error_type"] == "multi_turn:empty_turn_model_response"
               for v in grade.run_checks(bfcl_root, dropped))


def test_import_refuses_what_does_not_fit_in_one_line(bfcl_root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(bfcl_root / "bfcl_eval", copy / "bfcl_eval", ignore=shutil.ignore_patterns("model_handler"))
    data = copy / "bfcl_eval" / "data" / "BFCL_v4_multi_turn_base.json"
    lines = data.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["involved_classes"] = ["NoSuchAPI"]
    data.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(UntrustedInput, match=r"task multi_turn_base_0: class 'NoSuchAPI' has no module"):
        bfcl_import.import_bfcl(copy, tmp_path / "out", ["base"])
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = copy / "bfcl_eval" / "data" / "multi_turn_func_doc" / "gorilla_file_system.json"
    outside = tmp_path / "outside.json"
    shutil.move(doc, outside)
    doc.symlink_to(outside)
    with pytest.raises(UntrustedInput, match="leads out of"):
        bfcl_import.import_bfcl(copy, tmp_path / "out", ["base"])
    assert bfcl_import.main([str(tmp_path / "nothing")]) == 1


def test_the_cli_prints_runnable_commands(bfcl_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert bfcl_import.main([str(bfcl_root), "--out", str(tmp_path / "o"), "--category", "miss_param"]) == 0
    out = capsys.readouterr().out
    assert "wrote " in out and "200 tasks (multi_turn_miss_param)" in out
    run = next(line for line in out.splitlines() if line.startswith("evaluate with: "))
    assert "mcp_gym.servers.bfcl --bfcl" in run and "multi_turn_miss_param.jsonl" in run
    assert run.endswith("policy=noop") and "env.max_steps=" in run
    first = next(line for line in out.splitlines() if line.startswith("a first look ("))
    assert first.endswith(f": {run.removeprefix('evaluate with: ')} env.max_tasks=5 samples=1")  # a slice first


def test_the_server_plays_a_task_and_shows_held_back_functions_at_their_turn(bfcl_root: Path) -> None:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "mcp_gym.servers.bfcl", "--bfcl", str(bfcl_root)])

    async def main() -> None:
        async with Client(params) as client:
            await client.call_tool("mcp_gym_reset", {"task_id": "multi_turn_miss_func_0", "seed": 0})
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"cd", "mv", "post_tweet"} <= names and "sort" not in names and "buy_stock" not in names
            refused = await client.call_tool("sort", {"file_name": "final_report.pdf"})
            assert refused.is_error
            out = await client.call_tool("cd", {"folder": "document"})
            assert out.content[0].text == '{"current_working_directory": "document"}'  # BFCL's text for a dict
            bad = await client.call_tool("cd", {"nope": 1})
            assert bad.content[0].text.startswith("Error during execution: ")
            await client.call_tool("mcp_gym_turn", {"turn": 3})
            assert "sort" in {t.name for t in (await client.list_tools()).tools}
            state = json.loads((await client.call_tool("mcp_gym_state", {})).content[0].text)["bfcl"]
            assert state["turn"] == 3 and state["turns"] == 5
            assert state["calls"][0] == [{"tool": "cd", "arguments": {"folder": "document"}},
                                         {"tool": "cd", "arguments": {"nope": 1}}]
            assert state["state"]["GorillaFileSystem"]["root"]
            missing = await client.call_tool("mcp_gym_reset", {"task_id": "multi_turn_base_9999", "seed": 0})
            assert missing.is_error and "multi_turn_base_9999" in missing.content[0].text

    anyio.run(main)


def test_the_grader_refuses_task_data_that_differ_from_bfcls(bfcl_root: Path, imported,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(grade.COPY_VARIABLE, str(bfcl_root))  # graded outside an env: the copy named to the grader
    rec = _records(imported.files["base"])[0]
    rec["data"]["bfcl"]["initial_config"] = {}
    task = Task.from_record(rec)
    state = {"bfcl": {"root": str(bfcl_root), "task_id": task.id, "turn": 3, "turns": 4, "calls": [[]] * 4}}
    ctx = EpisodeContext(task, "", None, ("bfcl",), (), None, "submit", state)
    with pytest.raises(RuntimeError, match="differs from BFCL's own"):
        grade.verify(ctx)
    ctx = EpisodeContext(Task(id=task.id, prompt=""), "", None, ("bfcl",), (), None, "max_steps",
                         {**state, "bfcl": {**state["bfcl"], "turn": 1}})
    cut = grade.verify(ctx)
    assert not cut["passed"] and "force_terminated" in cut["reason"] and "turn 2 of 4" in cut["reason"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 480 episodes, each graded by a child of the checker process
def test_mcp_gym_verdict_equals_bfcls_own_on_120_tasks(bfcl_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ground truth and perturbed trajectories (a dropped call, a changed argument, a later turn's call done early)
    played through the server and graded by mcp-gym equal BFCL's checker run directly on the same calls."""
    monkeypatch.setenv(grade.COPY_VARIABLE, str(bfcl_root))  # graded outside an env: the copy named to the grader
    sys.path.insert(0, str(Path(__file__).parent))
    from bfcl_harness import compare

    rng = random.Random(38)
    ids = [f"multi_turn_{c}_{i}" for c in check.CATEGORIES for i in sorted(rng.sample(range(200), 30))]
    rows = compare(bfcl_root, ids)
    assert len({r["id"] for r in rows}) == 120
    differ = [(r["id"], r["kind"], r["reason"], r["bfcl_reason"]) for r in rows if r["mcp_gym"] != r["bfcl"]]
    assert not differ, differ[:5]
    assert all(r["mcp_gym"] for r in rows if r["kind"] == "ground_truth")
    for kind in ("dropped", "changed", "early"):
        assert any(not r["bfcl"] for r in rows if r["kind"] == kind), kind


def test_a_conversation_plays_through_the_env_and_is_graded_by_bfcl(bfcl_root: Path, imported) -> None:
    """A miss_func task through MCPEnv: the held-back function appears at its turn, the ground truth played turn by
    turn passes, and ending every turn at once fails with BFCL's reason."""
    from mcp_gym.client.specs import Stdio
    from mcp_gym.env import MCPEnv
    from mcp_gym.tasks import load_tasks

    tasks = [t for t in load_tasks(imported.files["miss_func"]) if t.id == "multi_turn_miss_func_0"]
    spec = Stdio(sys.executable, ["-m", "mcp_gym.servers.bfcl", "--bfcl", str(bfcl_root)])
    env = MCPEnv({"bfcl": spec}, tasks, max_steps=168)
    try:
        obs, info = env.reset(options={"task_id": "multi_turn_miss_func_0"})
        assert (info["turn"], info["turns"]) == (0, 5) and "sort" not in env.action_space.tool_names
        for n, turn in enumerate(tasks[0].turns):
            assert ("sort" in env.action_space.tool_names) == (n >= 3)
            for call in turn["solution"]:
                obs, reward, terminated, truncated, info = env.step(dict(call))
                assert info["error"] is None, info["error"]
            obs, reward, terminated, truncated, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})
        assert terminated and info["success"] is True and info["grade"]["reason"] == "BFCL: valid"
        env.reset(options={"task_id": "multi_turn_miss_func_0"})
        for _ in tasks[0].turns:
            obs, reward, terminated, truncated, info = env.step({"tool": "submit", "arguments": {"answer": ""}})
        assert terminated and info["success"] is False
        assert info["grade"]["reason"].startswith("BFCL multi_turn:empty_turn_model_response")
    finally:
        env.close()


def test_a_miss_func_episode_exports_one_example_per_tool_list(bfcl_root: Path, imported, tmp_path: Path) -> None:
    """The ground truth of miss_func_0 recorded and exported: `sort` (held back until turn 3) is never offered to the
    replies made before it was there: `prompt_completion` splits the episode per tool list, the default `messages`
    layout keeps the reset's tools and tells `sort` in the tools note at its turn."""
    from mcp_gym import sft
    from mcp_gym.client.specs import Stdio
    from mcp_gym.env import MCPEnv
    from mcp_gym.recording import RecordTrajectories
    from mcp_gym.tasks import load_tasks

    tasks = [t for t in load_tasks(imported.files["miss_func"]) if t.id == "multi_turn_miss_func_0"]
    spec = Stdio(sys.executable, ["-m", "mcp_gym.servers.bfcl", "--bfcl", str(bfcl_root)])
    env = RecordTrajectories(MCPEnv({"bfcl": spec}, tasks, max_steps=168), tmp_path / "run", policy="oracle")
    try:
        env.reset(options={"task_id": "multi_turn_miss_func_0"})
        for turn in tasks[0].turns:
            for call in turn["solution"]:
                env.step(dict(call))
            *_, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})
        assert info["success"] is True
    finally:
        env.close()
    first, second = sft.build(tmp_path / "run", layout="prompt_completion")
    assert "sort" not in {t["function"]["name"] for t in first["tools"]}
    assert "sort" in {t["function"]["name"] for t in second["tools"]}
    assert second["prompt"][-1]["content"].startswith("I have updated some more functions")  # BFCL's own turn
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert second["prompt"][:len(first["prompt"]) + len(first["completion"]) - 1] == (
        first["prompt"] + first["completion"])[:-1]  # the same conversation, the first's final reply aside
    for ex in (first, second):
        offered = {t["function"]["name"] for t in ex["tools"]}
        assert {c["function"]["name"] for m in ex["completion"] for c in m.get("tool_calls") or ()} <= offered
    (whole,) = sft.build(tmp_path / "run")  # one `messages` example: the reset's tools, `sort` told at its turn
    assert whole["tools"] == first["tools"]
    assert whole["messages"][:len(second["prompt"])] == second["prompt"]
    (noted,) = [m for m in whole["messages"] if "[tools changed]" in (m.get("content") or "")]
    assert noted["role"] == "user" and '"name": "sort"' in noted["content"]


@pytest.mark.slow
def test_the_printed_commands_run_as_printed(bfcl_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The printed ``tasks validate`` command and first look at ``eval``, with another ``env.tasks=`` (miss_func) and
    ``env.max_tasks=3`` appended, run: the ground truth passes, noop scores 0 and both exit as they should."""
    import shlex

    assert bfcl_import.main([str(bfcl_root), "--out", str(tmp_path / "o")]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(x for x in lines if x.startswith("a first look (")).split("): ", 1)[1]
    validate = next(x for x in lines if x.startswith("check the ground truth with: ")).split(": ", 1)[1]
    other = [f"env.tasks={tmp_path / 'o' / 'multi_turn_miss_func.jsonl'}", "env.max_tasks=3"]
    cli = [sys.executable, "-m", "mcp_gym.cli"]
    done = subprocess.run([*cli, *shlex.split(validate)[1:], *other], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "3 of 3 tasks pass" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    done = subprocess.run([*cli, *shlex.split(first)[1:], *other], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"success rate\s*│\s*0\.0%", done.stdout) and re.search(r"grading errors\s*│\s*0", done.stdout)


def _small_copy(bfcl_root: Path, dest: Path) -> Path:
    """The part of the BFCL copy that ``tasks import bfcl --category base`` reads (the rest left out: faster)."""
    def ignore(folder: str, names: list[str]) -> list[str]:
        skip = {"model_handler", "unused_datasets", "memory_prereq_conversation", "scripts"}
        return [n for n in names if n in skip or (n.startswith("BFCL_v") and "multi_turn_base" not in n)]

    shutil.copytree(bfcl_root / "bfcl_eval", dest / "bfcl_eval", ignore=ignore)
    return dest


_READ = {"data": "data/BFCL_v4_multi_turn_base.json", "answers": "data/possible_answer/BFCL_v4_multi_turn_base.json",
         "docs": "data/multi_turn_func_doc/gorilla_file_system.json", "constants": "constants/default_prompts.py",
         "source": "eval_checker/multi_turn_eval/func_source_code/gorilla_file_system.py"}


@pytest.mark.parametrize(("file", "kind"), [*((f, "hard link") for f in _READ), ("data", "named pipe"),
                                            ("answers", "named pipe"), pytest.param("data", "character device",
                                            marks=pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root"))])
def test_import_never_reads_a_hard_linked_or_special_file_of_the_copy(bfcl_root: Path, tmp_path: Path, file: str,
                                                                     kind: str, capsys: pytest.CaptureFixture) -> None:
    """Every file the import reads of the copy is a regular file with one name. Before: a file hard-linked to one
    outside the copy (a tarball extracted as root can link ``~/.ssh/id_rsa`` in) was read as BFCL's and its content
    became prompts and ground truth; a named pipe was read from whatever wrote into it (here: the real data) and a
    device as a file. Now each is refused, never opened for reading, with one line naming the file."""
    import threading

    copy = _small_copy(bfcl_root, tmp_path / "copy")
    target = copy / "bfcl_eval" / _READ[file]
    outside = tmp_path / "outside" / target.name
    outside.parent.mkdir()
    shutil.move(target, outside)
    writer = None
    if kind == "hard link":
        os.link(outside, target)
    elif kind == "named pipe":
        os.mkfifo(target)

        def feed() -> None:  # whoever opens the pipe for reading gets the real file's content
            try:
                with open(target, "wb") as f:
                    f.write(outside.read_bytes())
            except OSError:
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
    else:
        os.mknod(target, 0o644 | 0o020000, os.makedev(1, 3))  # /dev/null's numbers (/dev/zero's: a read without end)
    try:
        code = bfcl_import.main([str(copy), "--out", str(tmp_path / "out"), "--category", "base"])
    finally:
        while writer is not None and writer.is_alive():  # a writer still waiting for a reader: give it one
            os.close(os.open(target, os.O_RDONLY | os.O_NONBLOCK))
            writer.join(0.05)
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert f"{target} is a {kind}" in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
