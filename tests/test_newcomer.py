"""A new user's remaining potholes (issue 28, items 7-10): config keys of the wrong type or unknown are refused in one
line, a job whose servers never started fails, and the README's promises hold (help is quick to load, the examples
say what they need)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_gym.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "HYDRA_FULL_ERROR": "0", **env})


def _run(capsys: pytest.CaptureFixture[str], *args: str, subprocess_run: bool) -> tuple[int, str]:
    """``(exit code, stderr)`` of ``mcp-gym ARGS``: as a process (one case of each refusal, end to end), else through
    ``mcp_gym.cli.main`` in this process (the same code after the interpreter's start, ~10x cheaper)."""
    if subprocess_run:
        done = _cli(*args)
        return done.returncode, done.stderr
    from mcp_gym.cli import main

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HYDRA_FULL_ERROR", "0")
        code = main(list(args))
    return code, capsys.readouterr().err


# -- item 7: a value of the wrong type names the key and the type ------------------------------------------------------
@pytest.mark.parametrize(("command", "override", "line"), [
    ("collect", "episodes=abc", "episodes must be an integer or null, not 'abc'"),
    ("eval", "samples=two", "samples must be an integer, not 'two'"),
    ("collect", "env.max_steps=ten", "env.max_steps must be an integer or null, not 'ten'"),
    ("collect", "launcher.num_envs=many", "launcher.num_envs must be an integer, not 'many'"),
    ("collect", "seed=abc", "seed must be an integer, not 'abc'"),
    ("eval", "pass_k=[1,a]", "pass_k[1] must be an integer, not 'a'"),
])
def test_a_value_of_the_wrong_type_is_refused_in_one_line_naming_key_and_type(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, override: str, line: str) -> None:
    out = tmp_path / "run"
    code, stderr = _run(capsys, command, "env=counter", "policy=oracle", override, f"out={out}",
                        "launcher.progress=false", subprocess_run=override == "episodes=abc")
    assert code == 2, stderr
    assert stderr.strip().splitlines() == [f"mcp-gym {command}: {line}"]
    assert not (out / "episodes").exists()  # refused before anything ran
    assert not (out / ".hydra").exists()


# -- item 8: Hydra's advice after a typo (+key) does not silently drop the key -----------------------------------------
@pytest.mark.parametrize(("override", "line"), [
    ("+episods=5", "unknown key 'episods' (did you mean 'episodes'?)"),
    ("+env.max_step=5", "unknown key 'env.max_step' (did you mean 'env.max_steps'?)"),
    ("+launcher.num_env=4", "unknown key 'launcher.num_env' (did you mean 'launcher.num_envs'?)"),
])
def test_an_unknown_added_key_is_refused_with_the_closest_known_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, line: str) -> None:
    out = tmp_path / "run"
    code, stderr = _run(capsys, "collect", "env=counter", "policy=oracle", override, f"out={out}",
                        "launcher.progress=false", subprocess_run=override == "+episods=5")
    assert code == 2, stderr
    assert stderr.strip().splitlines() == [f"mcp-gym collect: {line}"]
    assert not (out / "episodes").exists()


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_the_documented_added_keys_and_every_shipped_option_pass_the_check() -> None:
    from hydra import compose, initialize_config_module

    from mcp_gym.jobs.schema import check_job_config

    conf = ROOT / "conf"
    options = {g: sorted(p.stem for p in (conf / g).glob("*.yaml")) for g in ("env", "policy", "recorder", "launcher")}
    with initialize_config_module("mcp_gym.conf", version_base="1.3"):
        for job in sorted(p.stem for p in (conf / "job").glob("*.yaml")):
            check_job_config(compose("config", overrides=[f"job={job}"]))
        for group, names in options.items():
            for name in names:
                check_job_config(compose("config", overrides=["job=collect", f"{group}={name}"]))
        check_job_config(compose("config", overrides=[
            "job=eval", "env=custom", "policy=openai", "+policy.system_prompt=Be brief.",
            '+env.servers.fs="mcp-server-filesystem {workspace}"', "+env.servers.api.url=https://host/mcp",
            "+env.servers.api.headers.Authorization=Bearer x", "+env.task_columns.prompt=question",
            "+policy.extra_body.top_k=20"]))
        check_job_config(compose("config", overrides=["job=export_sft", "runs=one/run"]))  # a string: one run
        check_job_config(compose("config", overrides=["job=collect", "+policy.fixed.repo_path=/abs/repo"]))


def test_every_policy_option_of_the_constructors_is_a_declared_key() -> None:
    import dataclasses
    import inspect

    from mcp_gym.jobs.schema import POLICIES as SCHEMAS
    from mcp_gym.policies import POLICIES

    for kind, cls in POLICIES.items():
        declared = {f.name for f in dataclasses.fields(SCHEMAS[kind])} - {"kind"}
        assert declared == set(inspect.signature(cls).parameters), kind


# -- item 9: a job whose server never started fails, and says why in its last line -------------------------------------
@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_a_collect_whose_server_never_started_exits_non_zero_with_the_reason_last(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "t1", "prompt": "Say hi", "answer": "hi"}\n{"id": "t2", "prompt": "Say ho", "answer": '
                     '"ho"}\n')
    server = f"{sys.executable} -c \\\"import sys; sys.exit('no such database: prod.db')\\\""
    out = tmp_path / "run"
    done = _cli("collect", "env=custom", f'+env.servers.db="{server}"', f"env.tasks={tasks}", "policy=random",
                "launcher.progress=false", f"out={out}")
    assert done.returncode == 1, (done.stdout, done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("mcp-gym collect: all 2 episodes of this run started without a server: server 'db' is "
                           "unavailable (failed: "), last
    assert "no such database: prod.db" in last and str(out) in last
    # the per-episode notice is a clean log line, not a warnings.warn source dump
    assert "ServerUnavailableWarning" not in done.stderr and "env.py" not in done.stderr
    assert "mcp-gym: server 'db' is unavailable" in done.stderr.splitlines()[0]


# -- item 10: job help does not import the jobs (it took 7-14 s on a busy machine) -------------------------------------
def test_job_help_reads_the_config_files_without_importing_the_jobs_or_the_mcp_sdk() -> None:
    code = ("import sys; from mcp_gym.cli import main; main(['eval', 'policy=openai', '--help']); "
            "print('loaded:', *sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'hydra', 'omegaconf') "
            "or m == 'mcp_gym.env' or m.startswith(('mcp_gym.jobs', 'mcp_gym.vector', 'mcp_gym.client'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    page, _, loaded = done.stdout.rpartition("loaded:")
    assert page.startswith("usage: mcp-gym eval ") and "policy.base_url=" in page
    assert loaded.split() == [], f"job help imported {len(loaded.split())} modules: {loaded.split()[:8]}..."


@pytest.mark.slow  # 15 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_make_vec_async_says_how_to_run_and_then_runs() -> None:
    code = """if True:
        import gymnasium as gym, mcp_gym
        try:
            gym.make_vec("mcp_gym/Counter-v0", num_envs=2, vectorization_mode="async")
        except ValueError as e:
            print("refused:", e)
        vec = gym.make_vec("mcp_gym/Counter-v0", num_envs=2, vectorization_mode="async",
                           vector_kwargs={"shared_memory": False})
        obs, infos = vec.reset(seed=0)
        obs, rewards, terminated, truncated, infos = vec.step([{"tool": "add", "arguments": {"amount": 1}}] * 2)
        print(type(vec).__name__, [r.splitlines()[1].strip() for r in obs["result"]])
        vec.close()
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    refused, ran = done.stdout.strip().splitlines()
    assert refused.startswith("refused: TextMapping() observations are text of any length, which cannot live in "
                              "shared memory: use gym.make_vec(..., vectorization_mode='async', "
                              "vector_kwargs={'shared_memory': False})"), refused
    assert ran == "AsyncVectorEnv ['\"count\": 1,', '\"count\": 1,']"


@pytest.mark.parametrize("script", ["sft_from_scratch.py", "grpo_trl.py"])
def test_a_training_example_without_the_train_extra_says_what_to_install(script: str) -> None:
    path = ROOT / "scripts" / "examples" / script
    code = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1], '--help']; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")  # as if torch were not installed
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"{script} needs the [train] extra (no module 'torch'): pip install -e '.[train]'"]


def test_an_sse_url_without_sse_plus_says_to_add_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import start_server, stop_process

    from mcp_gym.cli import main

    proc, port = start_server([sys.executable, str(ROOT / "tests" / "servers" / "hosted.py"), "--port", "0",
                               "--transport", "sse", "--token", "t0ken", "--log", str(tmp_path / "requests.log")])
    try:
        url = f"http://127.0.0.1:{port}/sse"
        capsys.readouterr()
        assert main(["inspect", url, "--header", "Authorization: Bearer t0ken", "--timeout", "60"]) == 1
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"(a server of the older HTTP+SSE transport? then use sse+{url})" in last, last
        assert main(["inspect", f"sse+{url}", "--header", "Authorization: Bearer t0ken", "--json"]) == 0
    finally:
        stop_process(proc)


# -- item 10: the README's and the docs' promises ----------------------------------------------------------------------
def test_the_readme_counts_the_bundled_envs_and_names_what_the_full_suite_and_the_examples_need() -> None:
    import re

    from mcp_gym.envs import BUNDLED_ENVS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md")))
    numbers = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
    counts = [numbers[w.lower()] for w in re.findall(r"\b(\w+) real MCP servers", readme + docs)]
    assert counts and set(counts) == {len(BUNDLED_ENVS)}, counts
    intro = readme[: readme.index("## What it does")]
    assert "bubblewrap" in intro and "chromium" in intro.lower()  # the full suite's system packages
    training = (ROOT / "docs" / "training" / "trl.md").read_text(encoding="utf-8")
    for script in ("grpo_trl.py", "sft_from_scratch.py"):
        first = training.index(f"python scripts/examples/{script}")
        assert 'pip install -e ".[train]"' in training[first - 200:first], script


# -- the oracle on tasks without a reference (MCPMark's imported tasks carry no solution) ------------------------------
@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_the_oracle_refuses_tasks_without_a_reference_and_warns_for_some(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``policy=oracle`` on MCPMark's imported filesystem tasks (no solution, no answer: a ``python`` grader reads the
    workspace) played an empty ``submit`` in each of 160 episodes and reported "success rate 0.0%", as if the
    reference failed. Now a task file with no reference at all is refused in one line before anything runs; one
    where only some tasks lack it runs and says how many."""
    server = f'+env.servers.c="{sys.executable} -m mcp_gym.servers.counter"'
    bare = {"id": "bare", "prompt": "Count to one.", "grader": {"kind": "mcp", "tool": "get_count",
                                                                 "equals": 1}}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(bare) + "\n")
    out = tmp_path / "run"
    code, stderr = _run(capsys, "eval", "env=custom", server, f"env.tasks={tasks}", "split=null", "policy=oracle",
                        f"out={out}", "launcher.progress=false", subprocess_run=False)
    assert code == 2, stderr
    assert stderr.strip().splitlines() == [
        "mcp-gym eval: policy=oracle plays each task's reference solution, but none of the 1 tasks has one (no "
        "solution calls, no answer): every episode would submit nothing and be graded on its starting state; "
        "policy=noop is that baseline"]
    assert not (out / "episodes").exists()
    solved = {"id": "solved", "prompt": "Count to one.", "grader": bare["grader"],
              "solution": [{"tool": "add", "arguments": {"amount": 1}}]}
    tasks.write_text(json.dumps(bare) + "\n" + json.dumps(solved) + "\n")
    code, stderr = _run(capsys, "collect", "env=custom", server, f"env.tasks={tasks}", "split=null", "policy=oracle",
                        f"out={out}", "launcher.progress=false", subprocess_run=True)  # the job's log on stderr
    assert code == 0, stderr
    assert "policy=oracle: 1 of 2 tasks have no reference solution or answer (first: 'bare')" in stderr
