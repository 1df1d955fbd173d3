"""Reading the files of a run directory someone else handed over: only what is the run's own.

A run directory is untrusted data. Its ``report/`` may hold ``x.png`` linked to ``~/.ssh/id_rsa`` (``mcp-gym view``
then embedded the key in the page it wrote into the run), its ``manifest.json`` or a shard may be a link into another
run of yours, and any of them may be a named pipe (a read that never ends) or ``/dev/zero`` (one that never stops
growing). Every reader of a run's files goes through :func:`check_run_file` or :func:`read_run_file`:

- the file must resolve (through symlinks at any level, the run's own folders included) inside the run directory,
- it must be a regular file (no pipe, socket or device is ever opened for reading: a pipe would block),
- :func:`read_run_file` reads at most ``limit`` bytes: a larger file is refused, not cut;
- a file whose content goes into what mcp-gym shows or writes (the manifest, the page's inputs) must have one name:
  a hard link's other name may be a file of the user's outside the run (shards and write-ahead logs, whose content
  must pass their own format's checks, may have several: hard-link backups make them).

Each refusal is a :class:`RunFileRefused` (a ``ValueError``) whose message is one line naming the file and why.
Symlinks that stay inside the run are followed (a run copied with its links is still whole).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from mcp_gym.errors import MCPGymError

__all__ = ["read_run_file", "RunFileRefused"]  # check_run_file, open_run_file: used inside mcp_gym.recording only


class RunFileRefused(MCPGymError, ValueError):
    """A file of a run directory leads out of the run, is not a regular file, or is too big (one line naming it)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    return "not a regular file"


def check_run_file(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """``path`` resolved, if it is a regular file inside the run directory ``root``; else :class:`RunFileRefused`
    (``FileNotFoundError`` when it does not exist). Never opens the file."""
    base, p = Path(root).resolve(), Path(path)
    real = p.resolve()
    if not real.is_relative_to(base):
        raise RunFileRefused(f"{p}: refusing to read this file of the run: it leads out of the run directory "
                             f"{base} (to {real}, through a symlink)")
    mode = os.stat(real).st_mode  # FileNotFoundError for a dangling name
    if not stat.S_ISREG(mode):
        raise RunFileRefused(f"{p}: refusing to read this file of the run: it is {_kind(mode)}, not a regular file")
    return real


def open_run_file(root: str | os.PathLike[str], path: str | os.PathLike[str], *, one_name: bool = False) -> BinaryIO:
    """The run's file ``path`` (checked by :func:`check_run_file`), open for reading. It is opened without following a
    last symlink and without blocking, and checked again once open (so a name swapped for a pipe after the check is
    not read either). ``one_name``: refuse a file with other names (hard links), for the files whose content goes
    into what mcp-gym shows or writes (the page's inputs, the manifest): another name may be outside the run."""
    real = check_run_file(root, path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise RunFileRefused(f"{path}: refusing to read this file of the run: {exc.strerror}") from None
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise RunFileRefused(f"{path}: refusing to read this file of the run: it is {_kind(st.st_mode)}, not a "
                                 "regular file")
        if one_name and st.st_nlink > 1:
            raise RunFileRefused(f"{path}: refusing to read this file of the run: it has {st.st_nlink} names (a hard "
                                 "link, whose other name may be a file of yours outside the run); mcp-gym writes it "
                                 "with one: copy the run without its links (cp -r) to read it")
    except BaseException:
        f.close()
        raise
    return f


def read_run_file(root: str | os.PathLike[str], path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The bytes of the run's file ``path`` (opened by :func:`open_run_file`, which refuses a file with other names:
    these files are mcp-gym's own, written with one name), at most ``limit`` of them: a larger file is refused in
    one line."""
    with open_run_file(root, path, one_name=True) as f:
        st = os.fstat(f.fileno())
        if st.st_size > limit:
            raise RunFileRefused(f"{path}: refusing to read this file of the run: {st.st_size} bytes, over the "
                                 f"{limit} allowed")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise RunFileRefused(f"{path}: refusing to read this file of the run: over the {limit} bytes allowed")
    return data
