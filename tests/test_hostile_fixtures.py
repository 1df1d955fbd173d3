"""Fixtures and benchmark checkouts whose files are not plain files: a hard link to a host file (a tarball extracted
as root, by GNU tar or Python's ``tarfile`` without a filter, can link ``/etc/shadow`` or ``~/.ssh/id_rsa`` into a
dataset; ``protected_hardlinks`` does not stop root), a named pipe, a device node. Copying one into a workspace (or
reading it as a prompt) hands the host file, or a disk, to the server and the agent, and from them to the run, the
report and the SFT export; a pipe blocks the copy. Attacked on real parts: ``mcp-gym eval`` with a real stdio
filesystem server and the oracle reading the file, ``make_workspace`` on a Python-built task (not checked at load),
and ``mcp-gym tasks import mcpmark``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import PEAK_MB, ROOT

from mcp_gym.cli import main

FS_SERVER = ROOT / "tests" / "servers" / "fs_server.py"
FS = f'+env.servers.fs="{sys.executable} {FS_SERVER} {{workspace}}"'
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- host secret\n"
root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod needs root (CI is)")


@pytest.fixture
def host_key(tmp_path: Path) -> Path:
    """A private key of the host, outside every task folder (on the same file system, so it can be hard-linked)."""
    home = tmp_path / "root" / ".ssh"
    home.mkdir(parents=True)
    (home / "id_rsa").write_text(KEY)
    return home / "id_rsa"


def _plant(fixture: Path, kind: str, host_key: Path) -> str:
    """Put a ``kind`` entry into ``fixture``; its name."""
    if kind == "hard link":
        os.link(host_key, fixture / "notes.txt")
        return "notes.txt"
    if kind == "named pipe":
        os.mkfifo(fixture / "notes.txt")
        return "notes.txt"
    os.mknod(fixture / "notes.txt", 0o644 | 0o020000, os.makedev(1, 3))  # a character device (/dev/null's numbers)
    return "notes.txt"


@pytest.mark.parametrize("kind", ["hard link", "named pipe", pytest.param("character device", marks=root_only)])
def test_eval_refuses_a_fixture_whose_copy_would_read_a_host_file(tmp_path: Path, host_key: Path, kind: str) -> None:
    """Before: the hard-linked key was copied into every workspace, read by the oracle through the server and
    recorded in the run (exit 0); a device was read as a file (``/dev/zero``'s numbers: without end)."""
    bench = tmp_path / "bench"
    (bench / "initial" / "docs").mkdir(parents=True)
    (bench / "initial" / "in.txt").write_text("hello")
    name = _plant(bench / "initial" / "docs", kind, host_key)
    tasks = bench / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "peek-1", "prompt": "What do the notes say?", "fixture": "initial",
                                 "answer": KEY, "solution": [{"tool": "read_file", "arguments": {
                                     "path": f"{{workspace}}/docs/{name}"}}]}) + "\n")
    out = tmp_path / "eval"
    code = main(["eval", "env=custom", FS, f"env.tasks={tasks}", "policy=oracle", "samples=1", f"out={out}",
                 "launcher.progress=false", "plots=false", "env.max_steps=3"])
    assert code == 2
    leaked = [p for p in out.rglob("*") if p.is_file() and b"host secret" in p.read_bytes()] if out.exists() else []
    assert not leaked


@pytest.mark.parametrize("kind", ["hard link", "named pipe", pytest.param("character device", marks=root_only)])
def test_the_refusal_is_one_line_naming_the_task_file_and_entry(tmp_path: Path, host_key: Path, kind: str) -> None:
    from mcp_gym.tasks import TaskDataError, load_tasks

    bench = tmp_path / "bench"
    (bench / "initial" / "docs").mkdir(parents=True)
    _plant(bench / "initial" / "docs", kind, host_key)
    tasks = bench / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "peek-1", "prompt": "p", "fixture": "initial"}) + "\n")
    with pytest.raises(TaskDataError) as e:
        load_tasks(tasks)
    line = str(e.value)
    assert "\n" not in line and "'peek-1'" in line and str(tasks) in line and "docs/notes.txt" in line
    assert kind in line and "host secret" not in line


def test_a_hard_link_inside_the_fixture_is_fine(tmp_path: Path) -> None:
    from mcp_gym._workspace import make_workspace
    from mcp_gym.tasks import load_tasks

    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "a.txt").write_text("same")
    os.link(tmp_path / "fx" / "a.txt", tmp_path / "fx" / "b.txt")
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t", "prompt": "p", "fixture": "fx"}) + "\n")
    workspace = make_workspace(load_tasks(tmp_path / "tasks.jsonl")[0])
    try:
        assert (workspace / "b.txt").read_text() == "same" and (workspace / "b.txt").stat().st_nlink == 1
    finally:
        import shutil

        shutil.rmtree(workspace)


@pytest.mark.parametrize("kind", ["named pipe", pytest.param("character device", marks=root_only)])
def test_the_copy_itself_never_reads_a_pipe_or_device(tmp_path: Path, host_key: Path, kind: str) -> None:
    """A ``Task`` built in Python is not checked at load, and a fixture can change after it: the copy refuses
    anything but a regular file before reading it (a pipe's open does not block), naming the task and file, and
    leaves no workspace behind."""
    import tempfile

    from mcp_gym._workspace import make_workspace
    from mcp_gym.tasks import Task, TaskDataError

    (tmp_path / "fx" / "deep").mkdir(parents=True)
    _plant(tmp_path / "fx" / "deep", kind, host_key)
    (tmp_path / "tmp").mkdir()
    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path / "tmp")
    try:
        with pytest.raises(TaskDataError, match=f"task 't': fixture file .*deep/notes.txt is a {kind}"):
            make_workspace(Task(id="t", prompt="p", fixture=str(tmp_path / "fx")))
    finally:
        tempfile.tempdir = before
    assert not list((tmp_path / "tmp").iterdir())


def _links_back_in(fixture: Path, how: str) -> None:
    """A fixture ``fixture/`` (its folder named ``fixture``) with a link that leaves it and comes back in by its name:
    it resolves inside the fixture, and copied into a workspace leads to ``<tmp>/fixture/notes.txt``."""
    (fixture / "sub").mkdir(parents=True)
    (fixture / "notes.txt").write_text("the task's notes\n")
    if how == "up and back":
        os.symlink("../fixture/notes.txt", fixture / "notes-link")
    elif how == "through a link to the top":  # sub/top -> .. is inside; sub/x -> top/../fixture/... is inside lexically
        os.symlink("..", fixture / "sub" / "top")
        os.symlink("top/../fixture/notes.txt", fixture / "sub" / "notes-link")
    else:  # absolute, into the fixture: in a workspace it leads to the fixture itself, shared by every episode
        os.symlink(fixture / "notes.txt", fixture / "sub" / "notes-link")


@pytest.mark.parametrize("how", ["up and back", "through a link to the top", "absolute"])
def test_a_fixture_link_that_leaves_and_comes_back_is_refused(tmp_path: Path, how: str) -> None:
    """Round 8: a fixture symlink was judged by where it resolves in the fixture, so ``../fixture/notes.txt`` in a
    fixture named ``fixture`` passed; copied as a link into the workspace ``<tmp>/mcp-gym-ws-.../`` it led to
    ``<tmp>/fixture/notes.txt``, a path in the shared temporary directory any local user can create (the episode's
    reads came from it, its writes went there), and an absolute link into the fixture had every episode write the
    dataset's own file. Now a link is followed step by step and refused once a step leaves the fixture, at load (one
    line naming the task, the file and the link) and again at the copy (a ``Task`` built in Python)."""
    import shutil
    import tempfile

    from mcp_gym._workspace import make_workspace
    from mcp_gym.tasks import Task, TaskDataError, load_tasks

    _links_back_in(tmp_path / "fixture", how)
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t", "prompt": "p", "fixture": "fixture"}) + "\n")
    with pytest.raises(TaskDataError) as e:
        load_tasks(tmp_path / "tasks.jsonl")
    assert "notes-link points out of the fixture" in str(e.value) and "'t'" in str(e.value), e.value
    assert "\n" not in str(e.value)
    (tmp_path / "tmp" / "fixture").mkdir(parents=True)  # what another local user plants in the shared folder
    (tmp_path / "tmp" / "fixture" / "notes.txt").write_text("planted\n")
    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path / "tmp")
    try:
        with pytest.raises(TaskDataError, match="task 't': fixture symlink .*notes-link points out of the fixture"):
            workspace = make_workspace(Task(id="t", prompt="p", fixture=str(tmp_path / "fixture")))
            shutil.rmtree(workspace)
    finally:
        tempfile.tempdir = before
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == ["fixture"]


def test_links_inside_a_fixture_still_copy(tmp_path: Path) -> None:
    import shutil

    from mcp_gym._workspace import make_workspace
    from mcp_gym.tasks import load_tasks

    (tmp_path / "fixture" / "sub").mkdir(parents=True)
    (tmp_path / "fixture" / "notes.txt").write_text("n\n")
    os.symlink("notes.txt", tmp_path / "fixture" / "a")
    os.symlink("../notes.txt", tmp_path / "fixture" / "sub" / "b")
    os.symlink("../sub", tmp_path / "fixture" / "sub" / "self")
    os.symlink("self/b", tmp_path / "fixture" / "sub" / "c")
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t", "prompt": "p", "fixture": "fixture"}) + "\n")
    workspace = make_workspace(load_tasks(tmp_path / "tasks.jsonl")[0])
    try:
        assert [(workspace / p).read_text() for p in ("a", "sub/b", "sub/c")] == ["n\n"] * 3
    finally:
        shutil.rmtree(workspace)


# -- MCPMark checkouts ------------------------------------------------------------------------------------------------
def _mcpmark(checkout: Path) -> Path:
    folder = checkout / "tasks" / "filesystem" / "standard" / "notes" / "shout"
    folder.mkdir(parents=True)
    (folder / "description.md").write_text("Shout.\n")
    (folder / "verify.py").write_text("import sys\nsys.exit(0)\n")
    (folder / "meta.json").write_text(json.dumps({"task_id": "shout", "category_id": "notes"}))
    (checkout / "test_environments" / "notes").mkdir(parents=True)
    (checkout / "test_environments" / "notes" / "a.txt").write_text("a\n")
    return folder


def _import(checkout: Path, out: Path) -> tuple[int, str]:
    import contextlib
    import io

    e = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(e):
        code = main(["tasks", "import", "mcpmark", str(checkout), "--out", str(out)])
    return code, e.getvalue()


@pytest.mark.parametrize("name", ["description.md", "verify.py", "meta.json"])
def test_mcpmark_never_reads_a_hard_linked_task_file(tmp_path: Path, host_key: Path, name: str) -> None:
    """Before: a ``description.md`` hard-linked to the key became the prompt (sent to the model, recorded)."""
    checkout = tmp_path / "mcpmark"
    folder = _mcpmark(checkout)
    (folder / name).unlink()
    os.link(host_key, folder / name)
    code, err = _import(checkout, tmp_path / "bench")
    assert code == 1 and err.count("\n") == 1, err
    assert f"task tasks/filesystem/standard/notes/shout: {name}" in err and "is a hard link (2 names)" in err
    assert not [p for p in tmp_path.joinpath("bench").rglob("*") if p.is_file() and b"host secret" in p.read_bytes()]


@pytest.mark.parametrize("kind", ["hard link", "named pipe", pytest.param("character device", marks=root_only)])
def test_mcpmark_refuses_a_state_folder_whose_copy_would_read_a_host_file(tmp_path: Path, host_key: Path,
                                                                          kind: str) -> None:
    checkout = tmp_path / "mcpmark"
    _mcpmark(checkout)
    _plant(checkout / "test_environments" / "notes", kind, host_key)
    code, err = _import(checkout, tmp_path / "bench")
    assert code == 1 and err.count("\n") == 1, err
    assert "task tasks/filesystem/standard/notes/shout: state folder" in err and f"notes.txt is a {kind}" in err
    assert not [p for p in tmp_path.joinpath("bench").rglob("*") if p.is_file() and b"host secret" in p.read_bytes()]


@pytest.mark.parametrize("other", ["a_b", "A B"])
def test_mcpmark_refuses_two_categories_sharing_one_state_folder(tmp_path: Path, other: str) -> None:
    """Before: categories ``a b`` and ``a_b`` both wrote ``states/a_b`` (the second over the first), and the tasks of
    ``a b`` silently ran, and were graded, on ``a_b``'s initial state. ``A B`` would share it on a case-insensitive
    disk."""
    checkout = tmp_path / "mcpmark"
    for category, task in (("a b", "t1"), (other, "t2")):
        folder = checkout / "tasks" / "filesystem" / category / task
        folder.mkdir(parents=True)
        (folder / "description.md").write_text(f"Do {task}.\n")
        (folder / "verify.py").write_text("import sys\n")
        (checkout / "test_environments" / category).mkdir(parents=True)
        (checkout / "test_environments" / category / "state.txt").write_text(f"state of {category}\n")
    code, err = _import(checkout, tmp_path / "bench")
    assert code == 1 and err.count("\n") == 1, err
    assert "'a b'" in err and f"'{other}'" in err and "both map to the state folder states/" in err
    assert not (tmp_path / "bench").exists()


def _load_in_subprocess(source: Path, cache: Path) -> tuple[str, int]:
    """``load_task_source(source)`` in a fresh process with its own datasets cache: its output (the task count or the
    error, the old code's datasets errors too) and its peak memory in MB."""
    import subprocess

    code = ("import sys\nfrom mcp_gym.tasks import load_task_source\ntry:\n"
            "    print(len(load_task_source(sys.argv[1])))\nexcept Exception as e:\n    print(e)\n"
            f"print({PEAK_MB})\n")
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(source)], capture_output=True, text=True, timeout=240,
                          env=env)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, done.stdout + done.stderr
    return lines[0], int(lines[1])


def _cached_bytes(cache: Path) -> int:
    return sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0


def test_a_dataset_folder_whose_parquet_decodes_to_gigabytes_is_refused(tmp_path: Path) -> None:
    """Round 8: a task source that is a folder (a downloaded dataset: ``env.tasks=DIR``) went to
    ``datasets.load_dataset``, whose Parquet builder decodes a row group at a time: the 5 kB file of round 7 as
    ``DIR/train.parquet`` cost 2.2 GB of memory. Its Parquet files are now checked first within
    ``PARQUET_MAX_BYTES`` and the folder is refused in one line naming the file; nothing reaches the datasets cache."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, entry = 2048, "x" * (1 << 20)
    prompt = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([entry]))
    folder = tmp_path / "dataset"
    folder.mkdir()
    pq.write_table(pa.table({"id": [f"t{i}" for i in range(rows)], "prompt": prompt}), folder / "train.parquet",
                   compression="zstd", row_group_size=rows)
    message, rss_mb = _load_in_subprocess(folder, tmp_path / "cache")
    assert f"{folder / 'train.parquet'}): refusing to read this Parquet file" in message, message
    assert "\n" not in message and int(rss_mb) < 1024, (message, rss_mb)
    assert _cached_bytes(tmp_path / "cache") < 1 << 20
    small = tmp_path / "small"
    small.mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "prompt": ["one", "two"]}), small / "train.parquet")
    assert _load_in_subprocess(small, tmp_path / "cache")[0] == "2"


def test_a_dataset_folder_with_a_compressed_bomb_is_refused(tmp_path: Path) -> None:
    """Round 8: ``DIR/train.jsonl.gz`` of 300 kB holding 300 MiB of JSON lines was decompressed whole into the
    datasets cache (1 MB of gzip: 1 GiB on disk, 700 MB of memory) before any row was read. A compressed data file
    is now decompressed first as a count within ``PARQUET_MAX_BYTES`` and refused in one line naming it."""
    import gzip

    folder = tmp_path / "dataset"
    folder.mkdir()
    line = json.dumps({"id": "t", "prompt": "x" * (1 << 20)}).encode()
    with gzip.open(folder / "train.jsonl.gz", "wb", compresslevel=1) as f:
        for i in range(300):
            f.write(line.replace(b'"t"', f'"t{i}"'.encode()) + b"\n")
    message, _ = _load_in_subprocess(folder, tmp_path / "cache")
    assert f"{folder / 'train.jsonl.gz'}): refusing to read this compressed file" in message, message
    assert _cached_bytes(tmp_path / "cache") < 1 << 20
    small = tmp_path / "small"
    small.mkdir()
    with gzip.open(small / "train.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "a", "prompt": "one"}) + "\n")
    assert _load_in_subprocess(small, tmp_path / "cache")[0] == "1"


@pytest.mark.parametrize("kind", ["sparse file", "named pipe", "named pipe.parquet"])
def test_a_task_file_that_is_endless_or_a_pipe_is_refused(tmp_path: Path, kind: str) -> None:
    """Round 8: a JSONL task file was read a line at a time without a bound, so a sparse ``tasks.jsonl`` of 600 MiB
    (a tarball's sparse member: no disk used) was one line read whole into memory (1.2 GB, 13 s); a
    ``tasks.jsonl`` (or ``.parquet``) that is a named pipe was not a file, so it went to ``datasets``, which took
    its name for a dataset on the Hub. Now a line is read at most ``JSONL_MAX_LINE`` characters, and a task file
    that is not a regular file is refused unread, each in one line naming it."""
    path = tmp_path / ("tasks.parquet" if kind.endswith(".parquet") else "tasks.jsonl")
    if kind == "sparse file":
        with open(path, "wb") as f:
            f.truncate(600 << 20)
    else:
        os.mkfifo(path)
    message, rss_mb = _load_in_subprocess(path, tmp_path / "cache")
    expected = "line 1 is over 67108864 characters" if kind == "sparse file" else "is a named pipe, not a regular file"
    assert message.startswith(f"task source {str(path)!r}") and expected in message, message
    assert rss_mb < 512, rss_mb


def test_a_parquet_task_file_that_decodes_to_gigabytes_is_refused(tmp_path: Path) -> None:
    """Round 7: a downloaded Parquet task file of 5 kB whose ``prompt`` column repeats one 1 MiB dictionary entry 2,048
    times decoded to 2 GiB of tasks (2.2 GB of memory). It is now read row by row within ``PARQUET_MAX_BYTES`` and
    refused in one line naming it; the loading process stays far below the decoded size."""
    import subprocess

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, entry = 2048, "x" * (1 << 20)
    prompt = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([entry]))
    path = tmp_path / "tasks.parquet"
    pq.write_table(pa.table({"id": [f"t{i}" for i in range(rows)], "prompt": prompt}), path, compression="zstd",
                   row_group_size=rows)
    assert path.stat().st_size < 64 << 10
    code = ("import sys\nfrom mcp_gym.tasks import load_task_source\ntry:\n"
            "    print(len(load_task_source(sys.argv[1])))\nexcept ValueError as e:\n    print(e)\n"
            f"print({PEAK_MB})\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=240)
    message, rss_mb = done.stdout.strip().splitlines()
    assert str(path) in message and "refusing to read this Parquet file" in message, done.stdout + done.stderr
    assert int(rss_mb) < 1024, rss_mb
    small = tmp_path / "small.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "prompt": ["one", "two"], "tags": [["x"], []]}), small)
    from mcp_gym.tasks import load_task_source

    assert [(t.id, t.prompt, t.tags) for t in load_task_source(str(small))] == [("a", "one", ("x",)), ("b", "two", ())]
