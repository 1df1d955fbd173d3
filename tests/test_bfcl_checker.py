"""BFCL's checker process (``mcp_gym.envs.bfcl.forked``): BFCL imported once, one forked child per check, on a real
copy of ``bfcl-eval`` (the fixture of tests/test_bfcl.py). Its verdicts equal the one-shot subprocess's, every check
starts from fresh BFCL state, a hanging check is killed, a killed checker process is replaced, and none outlives its
job (checked by looking at processes, never at how long anything takes)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mcp_gym.envs.bfcl import check, forked, grade

sys.path.insert(0, str(Path(__file__).parent))
from bfcl_harness import perturbations  # noqa: E402
from test_bfcl import bfcl_root, imported  # noqa: E402, F401 - the fixtures
from test_spare_servers import alive, wait_for  # noqa: E402

HANGS = "multi_turn_base_1"
"""The task whose check never ends in the :func:`probed` copy."""


@pytest.fixture(autouse=True)
def _no_checker_left() -> Any:
    forked.close_all()  # one left by an earlier module's grades outside any env (the last env's close stops it)
    yield
    forked.close_all()


@pytest.fixture(scope="module")
def probed(bfcl_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A copy of BFCL's ``base`` category whose ``multi_turn_checker`` counts its calls in a module global (and says
    the count in its ``error_message``) and never returns on :data:`HANGS`."""
    dest = tmp_path_factory.mktemp("probed")

    def ignore(folder: str, names: list[str]) -> list[str]:
        skip = {"model_handler", "unused_datasets", "memory_prereq_conversation", "scripts"}
        return [n for n in names if n in skip or (n.startswith("BFCL_v") and "multi_turn_base" not in n)]

    shutil.copytree(bfcl_root / "bfcl_eval", dest / "bfcl_eval", ignore=ignore)
    source = dest / "bfcl_eval" / "eval_checker" / "multi_turn_eval" / "multi_turn_checker.py"
    source.write_text(source.read_text(encoding="utf-8") + textwrap.dedent(f'''

        _probe_calls = []
        _probe_real = multi_turn_checker


        def multi_turn_checker(decoded, ground_truth, test_entry, category, model):
            _probe_calls.append(test_entry["id"])
            if test_entry["id"] == {HANGS!r}:
                import time
                time.sleep(3600)
            out = dict(_probe_real(decoded, ground_truth, test_entry, category, model))
            out["error_message"] = f"call {{len(_probe_calls)}} in this process"
            return out
    '''), encoding="utf-8")
    return dest


def _gt(root: Path, task_id: str) -> dict[str, Any]:
    return {"id": task_id, "strings": check.entry(root, task_id)[1]}


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_forked_verdicts_equal_the_one_shot_checkers_one_request_at_a_time_and_several_at_once(
        bfcl_root: Path) -> None:  # noqa: F811
    """Ground truth and perturbed trajectories of 12 tasks (3 per category): the verdicts (valid, error type and
    message, details) from the checker process, one request per check, sequential and from 4 threads at once, are
    exactly the one-shot subprocess's."""
    rng = random.Random(40)
    checks = []
    for category in check.CATEGORIES:
        for i in sorted(rng.sample(range(200), 3)):
            task_id = f"multi_turn_{category}_{i}"
            entry, gt = check.entry(bfcl_root, task_id)
            for strings in perturbations(gt, rng, entry.get("missed_function") or {}).values():
                checks.append({"id": task_id, "strings": strings})
    one_shot = grade.run_checks(bfcl_root, checks, fork=False, timeout=600)
    sequential = [forked.run(bfcl_root, [c], 600) for c in checks]
    assert all(v is not None for v in sequential)  # from the checker process, not the fallback
    assert [v[0] for v in sequential if v is not None] == one_shot
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda c: forked.run(bfcl_root, [c], 600), checks))
    assert [v[0] if v is not None else None for v in together] == one_shot
    assert len(forked.checker_pids()) == 1
    assert any(v["valid"] for v in one_shot) and any(v["valid"] is False and v["error_type"] for v in one_shot)


def test_every_check_starts_from_fresh_bfcl_state(probed: Path) -> None:
    """The probed copy counts its checker's calls in a module global: in one process (the one-shot subprocess given
    two checks) the second sees the first's; from the checker process every check is the first its process ran, and
    a second check of the same task gives the first's verdict."""
    twice = [_gt(probed, "multi_turn_base_0")] * 2
    one_process = grade.run_checks(probed, twice, fork=False)
    assert [v["error_message"] for v in one_process] == ["call 1 in this process", "call 2 in this process"]
    first, second = (forked.run(probed, [_gt(probed, "multi_turn_base_0")], 60) for _ in range(2))
    assert first == second == [one_process[0]] and first is not None and first[0]["valid"] is True


MATH_TASK = "multi_turn_base_15"
"""A ``base`` task whose involved classes include ``MathAPI`` (the module that fails to import in :func:`preloaded`)."""


@pytest.fixture(scope="module")
def preloaded(bfcl_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A copy of BFCL's ``base`` category whose ``gorilla_file_system`` module records the process that imported it
    and counts the ``GorillaFileSystem`` instances made since, whose ``math_api`` module does not import, and whose
    ``multi_turn_checker`` says both in its ``error_message``."""
    dest = tmp_path_factory.mktemp("preloaded")

    def ignore(folder: str, names: list[str]) -> list[str]:
        skip = {"model_handler", "unused_datasets", "memory_prereq_conversation", "scripts", "__pycache__"}
        return [n for n in names if n in skip or (n.startswith("BFCL_v") and "multi_turn_base" not in n)]

    shutil.copytree(bfcl_root / "bfcl_eval", dest / "bfcl_eval", ignore=ignore)
    apis = dest / "bfcl_eval" / "eval_checker" / "multi_turn_eval" / "func_source_code"
    fs = apis / "gorilla_file_system.py"
    fs.write_text(fs.read_text(encoding="utf-8") + textwrap.dedent("""

        import os as _probe_os

        _probe_imported_in = _probe_os.getpid()
        _probe_made = []
        _probe_init = GorillaFileSystem.__init__


        def _probe_counted_init(self, *args, **kwargs):
            _probe_made.append(1)
            _probe_init(self, *args, **kwargs)


        GorillaFileSystem.__init__ = _probe_counted_init
    """), encoding="utf-8")
    (apis / "math_api.py").write_text("import mcp_gym_no_such_module  # noqa\n", encoding="utf-8")
    source = dest / "bfcl_eval" / "eval_checker" / "multi_turn_eval" / "multi_turn_checker.py"
    source.write_text(source.read_text(encoding="utf-8") + textwrap.dedent("""

        _probe_real = multi_turn_checker


        def multi_turn_checker(decoded, ground_truth, test_entry, category, model):
            import os
            import sys

            out = dict(_probe_real(decoded, ground_truth, test_entry, category, model))
            fs = sys.modules["bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system"]
            where = "this process" if fs._probe_imported_in == os.getpid() else f"process {fs._probe_imported_in}"
            out["error_message"] = f"imported in {where}; {len(fs._probe_made)} made"
            return out
    """), encoding="utf-8")
    return dest


def test_the_checker_process_imports_the_api_classes_once_and_every_check_still_starts_fresh(preloaded: Path) -> None:
    """The checker process imports the modules of the classes the copy's tasks involve before its first fork (the
    one-shot subprocess imports them during its check), each forked check sees the instance count of a first check
    (the one-shot subprocess's), twice in a row; a class whose module does not import fails the checks that need it
    with the same verdict as the one-shot's, and the checker process goes on grading."""
    one_shot = grade.run_checks(preloaded, [_gt(preloaded, "multi_turn_base_0")], fork=False)
    assert one_shot[0]["valid"] is True and one_shot[0]["error_message"].startswith("imported in this process; ")
    made = one_shot[0]["error_message"].split("; ")[1]
    first, second = (forked.run(preloaded, [_gt(preloaded, "multi_turn_base_0")], 60) for _ in range(2))
    (pid,) = forked.checker_pids()
    assert first == second == [{**one_shot[0], "error_message": f"imported in process {pid}; {made}"}]
    broken = grade.run_checks(preloaded, [_gt(preloaded, MATH_TASK)], fork=False)
    assert broken[0]["valid"] is None and "mcp_gym_no_such_module" in broken[0]["error"]
    assert forked.run(preloaded, [_gt(preloaded, MATH_TASK)], 60) == broken
    assert forked.run(preloaded, [_gt(preloaded, "multi_turn_base_0")], 60) == first and forked.checker_pids() == [pid]


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_hanging_check_is_killed_and_fails_in_one_line_naming_the_task(probed: Path) -> None:
    with pytest.raises(RuntimeError, match=rf"^BFCL's checker ran over 1 s on {HANGS} \(killed\)$"):
        grade.run_checks(probed, [_gt(probed, HANGS)], timeout=1.0)
    (pid,) = forked.checker_pids()
    assert _children(pid) == []  # the child was killed and reaped
    assert grade.run_checks(probed, [_gt(probed, "multi_turn_base_0")])[0]["valid"] is True
    assert forked.checker_pids() == [pid]  # the same checker process
    with pytest.raises(RuntimeError, match=rf"^BFCL's checker ran over 1 s on {HANGS} \(killed\)$"):
        grade.run_checks(probed, [_gt(probed, HANGS)], timeout=1.0, fork=False)  # the one-shot path: the same


def test_a_killed_checker_process_is_replaced_and_no_verdict_is_lost(bfcl_root: Path) -> None:  # noqa: F811
    want = grade.run_checks(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], fork=False)
    assert forked.run(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], 60) == want
    (old,) = forked.checker_pids()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alive(old))
    # the first request after the kill may be the one that finds it dead: it is then graded by the one-shot checker
    assert grade.run_checks(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")]) == want
    assert forked.run(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], 60) == want
    (new,) = forked.checker_pids()
    assert new != old and alive(new)


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_stuck_checker_process_is_killed_at_the_jobs_bound_and_replaced(bfcl_root: Path,  # noqa: F811
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A checker process that never answers (stopped with SIGSTOP): the job waits the request's timeout plus
    ``MARGIN``, kills it, fails that grade in one line naming the task, and the next grade gets a new one."""
    want = grade.run_checks(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], fork=False)
    assert forked.run(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], 60) == want
    (old,) = forked.checker_pids()
    monkeypatch.setattr(forked, "MARGIN", 0.5)
    os.kill(old, signal.SIGSTOP)
    with pytest.raises(RuntimeError, match=r"^BFCL's checker process gave no verdict on multi_turn_base_0 in 1.5 s "
                                           r"\(killed\)$"):
        grade.run_checks(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], timeout=1.0)
    assert not alive(old) and forked.checker_pids() == []
    assert forked.run(bfcl_root, [_gt(bfcl_root, "multi_turn_base_0")], 60) == want
    (new,) = forked.checker_pids()
    assert new != old


def test_close_all_stops_the_checker_process_and_its_children(probed: Path) -> None:
    with ThreadPoolExecutor(1) as pool:
        hanging = pool.submit(grade.run_checks, probed, [_gt(probed, HANGS)], timeout=600)
        pid = wait_for(lambda: forked.checker_pids())[0]
        child = wait_for(lambda: _children(pid))[0]
        forked.close_all()
        with pytest.raises(RuntimeError, match=rf"^BFCL's checker process was stopped \(the job's end\) while checking "
                                               rf"{HANGS}$"):  # not run again by a one-shot subprocess
            hanging.result(timeout=300)
    assert not alive(pid) and not alive(child) and forked.checker_pids() == []


_JOB = """
import os, signal, sys, threading
from pathlib import Path
from mcp_gym.envs.bfcl import check, forked, grade
root = Path(sys.argv[1])
hang = [{{"id": {hangs!r}, "strings": check.entry(root, {hangs!r})[1]}}]
threading.Thread(target=grade.run_checks, args=(root, hang), kwargs={{"timeout": 600}}, daemon=True).start()
while not forked.checker_pids():
    threading.Event().wait(0.01)
print(forked.checker_pids()[0], flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("end", ["sigkill", "ctrl-c"])
def test_no_checker_process_outlives_a_job_killed_or_interrupted(probed: Path, end: str) -> None:
    """A process grading BFCL (a check in flight that never ends) is SIGKILLed, or gets a Ctrl-C (SIGINT to its
    process group, as a terminal sends: a KeyboardInterrupt, then the interpreter's exit): its checker process and the
    check's child are gone."""
    proc = subprocess.Popen([sys.executable, "-c", _JOB.format(hangs=HANGS), str(probed)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        pid = int(proc.stdout.readline())
        child = wait_for(lambda: _children(pid))[0]
        if end == "sigkill":
            proc.stdin.write("\n")
            proc.stdin.flush()
        else:
            os.killpg(proc.pid, signal.SIGINT)  # it waits in sys.stdin.readline(): a KeyboardInterrupt there
        assert proc.wait(timeout=120) == -(signal.SIGKILL if end == "sigkill" else signal.SIGINT)  # atexit ran
        wait_for(lambda: not alive(pid) and not alive(child))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _checkers_of(owner: int) -> list[int]:
    """Live checker processes started by the process ``owner`` (their command line ends ``--serve ROOT OWNER``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--serve" in argv and argv[-2:] == [str(owner).encode(), b""] and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_an_eval_job_stops_its_checker_process_at_its_end(bfcl_root: Path, tmp_path: Path,  # noqa: F811
                                                          capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``mcp-gym eval`` of two BFCL tasks run in this process (as scripts/bench/benchmark_eval.py runs its jobs): the
    episodes are graded (by the checker process), and once the job has returned no checker process of this process
    is left (this process lives on: not the interpreter's exit, the job's end)."""
    from mcp_gym.cli import main as cli
    from mcp_gym.jobs import bfcl as bfcl_import

    tasks = bfcl_import.import_bfcl(bfcl_root, tmp_path / "tasks", ["base"]).files["base"]
    answered = []

    def counted(*args: Any) -> Any:
        out = real(*args)
        answered.append((out is not None, forked.checker_pids()))
        return out

    real = forked.run
    monkeypatch.setattr(forked, "run", counted)
    server = f'+env.servers.bfcl="{sys.executable} -m mcp_gym.servers.bfcl --bfcl {bfcl_root}"'
    code = cli(["eval", "env=custom", server, f"env.tasks={tasks}", "split=null", "episodes=2", "samples=1",
                "env.max_steps=168", "policy=oracle", "launcher.num_envs=2", "launcher.progress=false", "plots=false",
                f"out={tmp_path / 'run'}"])
    assert code == 0, capsys.readouterr()
    assert "success rate" in capsys.readouterr().out
    assert [ok for ok, _ in answered] == [True, True] and len({tuple(p) for _, p in answered}) == 1  # one process
    assert forked.checker_pids() == [] and _checkers_of(os.getpid()) == []
    import json

    summary = json.loads((tmp_path / "run" / "report" / "results.json").read_text())["summary"]
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 2
    assert _checkers_of(os.getpid()) == [] and answered[0][1] and not alive(answered[0][1][0])


@pytest.mark.slow  # two BFCL servers and a checker process: about 10 s at load 9
def test_the_checker_process_stops_when_the_last_env_that_graded_with_it_closes(
        bfcl_root: Path, imported: Any) -> None:  # noqa: F811
    """Two envs grade through the checker process (one process for both): closing the first leaves it running for
    the second, closing the second stops it (and its folder goes); a grade then starts a new one."""
    from mcp_gym.client.specs import Stdio
    from mcp_gym.env import MCPEnv
    from mcp_gym.graders import _shared
    from mcp_gym.tasks import load_tasks

    tasks = [t for t in load_tasks(imported.files["base"]) if t.id == "multi_turn_base_0"]
    spec = Stdio(sys.executable, ["-m", "mcp_gym.servers.bfcl", "--bfcl", str(bfcl_root)])
    envs = [MCPEnv({"bfcl": spec}, tasks, max_steps=50) for _ in range(2)]
    try:
        for env in envs:
            env.reset()
            for _ in tasks[0].turns:
                _, _, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": ""}})
            assert terminated and info["grade"]["reason"].startswith("BFCL multi_turn:"), info
        (pid,) = forked.checker_pids()
        assert _shared.holders(("bfcl-checker", str(bfcl_root.resolve()))) == 2
        envs[0].close()
        assert forked.checker_pids() == [pid] and alive(pid)  # the second env still holds it
        envs[1].close()
        assert forked.checker_pids() == [] and not alive(pid)  # stopped (and reaped) by the last close
        assert _shared.holders(("bfcl-checker", str(bfcl_root.resolve()))) == 0
    finally:
        for env in envs:
            env.close()


@pytest.mark.slow  # a BFCL server and a checker process loading BFCL: 25 s at load 15
def test_the_server_and_the_checker_process_exit_frozen(bfcl_root: Path, tmp_path: Path) -> None:  # noqa: F811
    """BFCL's server and checker process reach their exit with their objects frozen (``gc.freeze()``: no last
    garbage collection over what they imported, which the end of a job waits for): each run to the end of its stdin,
    with an ``atexit`` hook that prints the frozen count (run after ``main`` returns or ``sys.exit``)."""
    hook = ("import atexit, gc, runpy, sys; "
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), flush=True)); ")
    server = subprocess.run(
        [sys.executable, "-c", hook + "sys.argv = ['bfcl', '--bfcl', sys.argv[1]]; "
         "runpy.run_module('mcp_gym.servers.bfcl', run_name='__main__')", str(bfcl_root)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    script = str(Path(check.__file__).resolve())
    checker = subprocess.run(  # its owner is the shell-less python it runs in: its parent, this process's child
        [sys.executable, "-I", "-c", hook + "import os; sys.argv = [sys.argv[1], '--serve', sys.argv[2], "
         "str(os.getppid())]; runpy.run_path(sys.argv[0], run_name='__main__')", script, str(bfcl_root)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    for done in (server, checker):
        said = done.stdout + done.stderr  # (the checker process prints to stderr: its stdout carries its answers)
        frozen = [int(line.split()[1]) for line in said.splitlines() if line.startswith("frozen ")]
        assert done.returncode == 0 and frozen and frozen[0] > 10_000, (done.returncode, done.stdout, done.stderr)
    assert '"ready"' in checker.stdout  # it loaded BFCL and answered before its stdin ended
