"""Replacing a whole directory atomically (an SFT export over an earlier one): readers see the old tree or the new one,
complete, whatever moment the writer is killed at.

The new tree is written in a hidden sibling (:func:`staging_dir`), fsynced file by file, then swapped with the old one
in one ``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+, on local filesystems); the old tree, now at the sibling's name, is
deleted afterwards. Where the exchange is not available, the old tree is renamed aside and the new one renamed into
place: a kill between those two renames leaves the path missing (never half-filled), with both trees complete beside
it. Each staging sibling is ``flock``-ed by its writer, so :func:`sweep_staging` deletes only the leftovers of killed
writers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # Windows has no fcntl: no locking

__all__ = ["staging_dir", "replace_dir", "sweep_staging", "new_file", "write_text_atomic"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _siblings(out: Path) -> list[Path]:
    prefix = f".{out.name}.tmp-"
    return [p for p in out.parent.iterdir() if p.name.startswith(prefix)] if out.parent.is_dir() else []


def sweep_staging(out: Path) -> int:
    """Delete the hidden staging siblings of ``out`` that no live writer holds (left by killed writers); returns how
    many."""
    removed = 0
    for p in _siblings(out):
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            continue
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live writer's
            shutil.rmtree(p, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def new_file(out: Path) -> Iterator[Path]:
    """A new empty hidden sibling of ``out`` to write (by path: Parquet, a figure), renamed over ``out`` when the
    ``with`` block ends without an error (removed otherwise).

    The sibling is made with a random name and ``O_EXCL`` (``tempfile.mkstemp``), so nothing already in the folder
    is written through: a folder handed over by someone else (a run directory ``mcp-gym view`` writes its page into,
    or a job resumes) may hold a symlink at any predictable name, pointing at ``/root/.bashrc`` or ``/etc/shadow``.
    ``out`` itself, if it is a symlink, is replaced, never followed. The file gets mode ``0644``."""
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        os.fchmod(fd, 0o644)
        os.close(fd)
        yield Path(name)
        os.replace(name, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def write_text_atomic(out: Path, text: str, *, fsync: bool = False) -> None:
    """Write ``out`` whole or not at all, never through anything planted at a predictable name (:func:`new_file`);
    ``fsync`` flushes it before the rename."""
    with new_file(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


@contextlib.contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A new hidden sibling of ``out`` to write the tree in, locked while the ``with`` block runs; deleted on leaving
    unless :func:`replace_dir` moved it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}"
    tmp.mkdir()  # (not tempfile.mkdtemp: its 0700 mode would stay on the tree)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # after replace_dir: the old tree (exchanged), or nothing
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # directories on some filesystems
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync(Path(folder) / name)
        _fsync(Path(folder))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``); ``False`` where that is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # pragma: no cover - not glibc/musl
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this filesystem/kernel cannot; anything else is real
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(tmp: Path, out: Path) -> None:
    """Make the complete tree ``tmp`` (from :func:`staging_dir`) appear at ``out`` in one step, replacing what is
    there (see the module docs); fsyncs the tree first, so it is complete on disk before it is visible."""
    _fsync_tree(tmp)
    if out.is_dir() and not out.is_symlink() and any(out.iterdir()):
        if not _exchange(tmp, out):
            aside = out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}"
            os.rename(out, aside)
            os.rename(tmp, out)
            shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, out)  # absent, or an empty directory
    _fsync(out.parent)
