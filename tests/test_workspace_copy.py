"""A task's fixture copied into an episode's workspace: the same files, modes and times, symlinks kept as links, and
the copy independent of the fixture (``make_workspace``; the copy shares blocks where the file system can)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from mcp_gym._workspace import clone_file, make_workspace
from mcp_gym.tasks import Task


def fixture(root: Path) -> Path:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "empty").write_bytes(b"")
    (root / "sub" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # more than one copy round
    tool = root / "sub" / "deep" / "run.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o750)
    os.utime(root / "a.txt", (1_000_000_000, 1_000_000_000))
    (root / "link").symlink_to("a.txt")
    return root


def files(root: Path) -> dict[str, tuple[bytes | str, int, int]]:
    out: dict[str, tuple[bytes | str, int, int]] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p.relative_to(root))] = (os.readlink(p), 0, 0)
        elif p.is_file():
            out[str(p.relative_to(root))] = (p.read_bytes(), st.st_mode, int(st.st_mtime))
    return out


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_the_workspace_is_an_exact_independent_copy_of_the_fixture(tmp_path: Path) -> None:
    src = fixture(tmp_path / "fixture")
    before = files(src)
    workspace = make_workspace(Task(id="t", prompt="p", fixture=str(src)))
    try:
        assert files(workspace) == before  # content, mode and modification time of every file; links as links
        assert (workspace / "link").is_symlink() and os.readlink(workspace / "link") == "a.txt"
        (workspace / "a.txt").write_text("changed")  # a write in the episode never reaches the fixture
        with open(workspace / "sub" / "big.bin", "r+b") as f:
            f.write(b"XXXX")
        assert files(src) == before
    finally:
        shutil.rmtree(workspace)


def test_clone_file_copies_what_copy2_copies(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"\x00\x01" * 70_000)
    src.chmod(0o640)
    os.utime(src, (1_500_000_000, 1_500_000_000))
    assert clone_file(str(src), str(tmp_path / "a")) == str(tmp_path / "a")
    shutil.copy2(src, tmp_path / "b")
    for name in ("a", "b"):
        st = (tmp_path / name).stat()
        assert (tmp_path / name).read_bytes() == src.read_bytes()
        assert (st.st_mode, int(st.st_mtime)) == (src.stat().st_mode, 1_500_000_000)
