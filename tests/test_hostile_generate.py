"""``mcp-gym tasks generate out=DIR`` on hostile input (round 7 of docs/security.md).

A rerun extends ``DIR``: it reads ``tasks.jsonl`` and ``proposals.jsonl``, appends to the ledger, rewrites the task
file and copies ``DIR/fixture`` into every episode's workspace. ``DIR`` may be a folder someone handed over (a
generated task set to extend). Before, a symlink at ``.tasks.jsonl.tmp`` had the user's file replaced by the task
file, a dangling ``proposals.jsonl`` link created a file anywhere, and ``fixture -> ~/.ssh`` put the user's keys in
every workspace (listed and read into the tasks' answers). Now each name is refused in one line naming it, and the
task file is written through a new randomly named sibling. A server answering JSON nested thousands of levels deep
ended the job with a ``RecursionError`` traceback; now such a result is text, which makes no answer."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from mcp_gym.cli import main
from mcp_gym.tasks import load_tasks

BASHRC = "export PATH=$HOME/bin:$PATH  # the user's own\n"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIUSERSPRIVATEKEY user@host"


def _fs() -> str:
    return f'+env.servers.fs="{sys.executable} {ROOT / "tests" / "servers" / "fs_server.py"} {{workspace}}"'


def _generate(out: Path, fixture: Path, *extra: str) -> int:
    """One short run on a filesystem server whose workspace holds the fixture (a walk of one call)."""
    return main(["tasks", "generate", "env=custom", _fs(), f"out={out}", f"fixture={fixture}", "n=1",
                 "max_proposals=2", "generator.walk_length=1", 'generator.values=["{workspace}"]', *extra])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The user's files: a ``.bashrc`` and an ``.ssh`` folder with a key."""
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".bashrc").write_text(BASHRC)
    (tmp_path / "home" / ".ssh" / "id_rsa").write_text(KEY + "\n")
    return tmp_path / "home"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("hello\n")
    return tmp_path / "src"


def _written(out: Path) -> str:
    """Everything the run wrote into ``out`` (tasks, ledger), as text."""
    return "".join(p.read_text(errors="replace") for p in sorted(out.glob("*.jsonl")) if p.is_file())


@pytest.mark.slow  # a whole generate run on real servers: 30-40 s at load 15
def test_the_task_file_is_never_written_through_a_planted_temporary_name(tmp_path: Path, home: Path,
                                                                       src: Path) -> None:
    """``.tasks.jsonl.tmp`` (the name the task file was written to before its rename) linked to ``~/.bashrc``: the
    user's file stays as it was, and the task file is a regular file of its own. What tasks generate wrote passes
    a rerun's checks, and the rerun writes the task file back as it was (before, its fixture became an absolute path,
    which the next rerun and eval refused)."""
    out = tmp_path / "gen"
    out.mkdir()
    (out / ".tasks.jsonl.tmp").symlink_to(home / ".bashrc")
    assert _generate(out, src) == 0
    assert (home / ".bashrc").read_text() == BASHRC
    assert not (out / "tasks.jsonl").is_symlink() and (out / "tasks.jsonl").is_file()
    assert (out / ".tasks.jsonl.tmp").is_symlink()  # left as it was: never followed, never removed
    first = (out / "tasks.jsonl").read_text()
    assert first.count("\n") == 1 and '"fixture": "fixture"' in first
    assert _generate(out, src) == 0  # n=1 already there: nothing to propose
    assert (out / "tasks.jsonl").read_text() == first
    assert [t.fixture for t in load_tasks(out / "tasks.jsonl")] == [str((out / "fixture").resolve())]


@pytest.mark.parametrize("plant", ["ledger link", "ledger dangling link", "ledger hard link", "tasks link",
                                   "tasks named pipe", "fixture link", "link in fixture"])
def test_a_rerun_refuses_what_it_did_not_write(tmp_path: Path, home: Path, src: Path, plant: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Each planted name is refused in one line naming it (exit status 2), before any server starts: nothing of the
    user's is read, copied into a workspace, or written."""
    out = tmp_path / "gen"
    out.mkdir()
    name = {"ledger": "proposals.jsonl", "tasks": "tasks.jsonl", "fixture": "fixture",
            "link": "fixture/notes.txt"}[plant.split()[0] if plant != "link in fixture" else "link"]
    if plant == "ledger link":
        (out / name).symlink_to(home / ".bashrc")
    elif plant == "ledger dangling link":
        (out / name).symlink_to(home / ".bash_login")  # a start-up file the user does not have (yet)
    elif plant == "ledger hard link":
        (home / ".hushlogin").write_text("")  # an empty file: its lines are no JSON to fail on
        os.link(home / ".hushlogin", out / name)
    elif plant == "tasks link":
        (out / name).symlink_to(tmp_path / "elsewhere.jsonl")
    elif plant == "tasks named pipe":
        os.mkfifo(out / name)  # its read would wait without end
    elif plant == "fixture link":
        (out / name).symlink_to(home / ".ssh")
    else:
        (out / "fixture").mkdir()
        (out / name).symlink_to(home / ".ssh" / "id_rsa")
    assert _generate(out, src) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out / name) in err[0] and "refusing to" in err[0], err
    assert (home / ".bashrc").read_text() == BASHRC
    assert not (home / ".bash_login").exists() and not (tmp_path / "elsewhere.jsonl").exists()
    assert not (home / ".hushlogin").exists() or (home / ".hushlogin").read_text() == ""
    assert "id_rsa" not in _written(out) and "PRIVATEKEY" not in _written(out)


@pytest.mark.parametrize("depth", [600, 5000])
def test_a_result_nested_without_end_makes_no_answer(tmp_path: Path, depth: int,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A server answering ``[[[...]]]`` 600 levels deep (parsed, then walked recursively) or 5,000 (past the JSON
    parser): the job ends with its one-line "no task" reason (exit status 1), not a ``RecursionError`` traceback."""
    server = f'+env.servers.deep="{sys.executable} {ROOT / "tests" / "servers" / "deep_server.py"} {depth}"'
    code = main(["tasks", "generate", "env=custom", server, f"out={tmp_path / 'gen'}", "n=1", "max_proposals=3",
                 "generator.walk_length=2"])
    captured = capsys.readouterr()
    assert code == 1, captured.err[-2000:]
    assert "RecursionError" not in captured.err + captured.out
    assert "no task kept" in captured.err or "no proposal" in captured.err


def test_validate_never_writes_through_a_planted_validation_json(tmp_path: Path) -> None:
    """``tasks validate out=DIR`` into a folder handed over: ``validation.json`` linked to the user's file is
    replaced, never written through."""
    from conftest import COUNTER_EVAL

    victim = tmp_path / "bashrc"
    victim.write_text(BASHRC)
    out = tmp_path / "validate"
    out.mkdir()
    (out / "validation.json").symlink_to(victim)
    main(["tasks", "validate", *COUNTER_EVAL[:2], "env.max_tasks=1", f"out={out}"])
    assert victim.read_text() == BASHRC
    assert not (out / "validation.json").is_symlink() and (out / "validation.json").read_text().startswith("[")


@pytest.mark.slow  # a whole generate run on real servers: 30-40 s at load 15
def test_a_named_pipe_a_server_leaves_in_its_workspace_is_not_read(tmp_path: Path) -> None:
    """A server that leaves a named pipe in its workspace: the generator's read of the workspace's files (the check of
    a state task) opened it and waited without end. Only regular files are read; the job ends (a bounded run:
    pytest's timeout is the only bound the old code met)."""
    server = f'+env.servers.notes="{sys.executable} {ROOT / "tests" / "servers" / "pipe_server.py"} {{workspace}}"'
    code = main(["tasks", "generate", "env=custom", server, f"out={tmp_path / 'gen'}", "n=1", "max_proposals=2",
                 "generator.walk_length=1"])
    assert code in (0, 1)
    assert (tmp_path / "gen" / "proposals.jsonl").read_text().strip()  # proposals were judged, with the files read
