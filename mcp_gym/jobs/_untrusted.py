"""Containment checks shared by the benchmark importers (``mcp-gym tasks import ...``).

A benchmark checkout is untrusted data: a file in it may be a symlink to ``~/.ssh/id_rsa``, a field used as a path
(MCPMark's ``meta.json`` ``category_id``) may be absolute or hold ``..``, two tasks may map to the same id, and a
state zip may be a zip bomb. An importer reads the checkout only through these helpers, so none of that reaches a
task file, a prompt or an episode's workspace:

- :func:`contained_path` joins a relative name from the checkout to a folder and refuses an absolute name, a ``..``,
  or a path that (through a symlink anywhere on the way) resolves outside the folder.
- :func:`check_tree` refuses a folder holding a symlink that resolves outside it, a named pipe, socket or device
  node, or a file with a hard link outside it (before it is copied).
- :func:`read_file` reads one file only if it is a regular file with one name (no pipe, device or hard link) of at
  most :data:`MAX_FILE_BYTES`.
- :func:`too_deep` says whether a server's JSON result nests deeper than :data:`MAX_RESULT_DEPTH` (``tasks generate``).
- :func:`extract_zip` extracts a zip within :class:`ZipLimits` (total uncompressed bytes, members, bytes per member,
  compression ratio), refusing absolute or ``..`` member names and symlink members; bytes are counted as they are
  written, so a member whose header under-states its size is stopped too. Files keep the members' modification
  times.
- :class:`UniqueIds` refuses two tasks mapping to one id (or to ids equal but for case, which share a file name on a
  case-insensitive disk), naming both.

Every refusal is an :class:`UntrustedInput` (a ``ValueError``) whose message is one line naming the task and the path.
"""

from __future__ import annotations

import os
import stat
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from mcp_gym._wsdir import link_stays_inside
from mcp_gym.errors import MCPGymError
from mcp_gym.tasks import _foreign_entry, _not_regular

__all__: list[str] = []  # internal to mcp_gym.jobs: the importers' shared helpers (tasks import mcpmark, bfcl, ...)


class UntrustedInput(MCPGymError, ValueError):
    """A benchmark checkout holds something an importer refuses (the message is one line naming the task and path)."""


def _who(task: str | None) -> str:
    return f"task {task}: " if task else ""


def contained_path(root: str | Path, rel: str | Path, *, what: str, task: str | None = None) -> Path:
    """``root / rel`` if it stays inside ``root``: ``rel`` is relative, has no ``..`` part, and the joined path does
    not resolve (through a symlink at any level) outside ``root``. ``what`` names the field or file in the error
    (e.g. ``"meta.json category_id"``), ``task`` the task. The path need not exist. Raises :class:`UntrustedInput`."""
    base = Path(root).resolve()
    text = str(rel)
    if not text or "\x00" in text:
        raise UntrustedInput(f"{_who(task)}{what} {text!r} is not a usable relative path")
    parts = PurePosixPath(text.replace("\\", "/")).parts
    if (PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or PureWindowsPath(text).drive
            or text.startswith(("/", "\\", "~")) or ".." in parts):
        raise UntrustedInput(f"{_who(task)}{what} {text!r} leads out of {base} (absolute, '~' or '..')")
    path = base.joinpath(*[p for p in parts if p not in ("", ".")])
    if not path.resolve().is_relative_to(base):
        raise UntrustedInput(f"{_who(task)}{what} {path} leads out of {base} (through a symlink)")
    return path


def check_tree(root: str | Path, folder: str | Path, *, what: str, task: str | None = None) -> Path:
    """``folder`` (resolved) if it and everything in it stays inside ``root`` and ``folder``: no symlink in it
    resolves outside ``folder``. Raises :class:`UntrustedInput` naming the first one that does."""
    base, top = Path(root).resolve(), Path(folder)
    real = top.resolve()
    if not real.is_relative_to(base):
        raise UntrustedInput(f"{_who(task)}{what} {top} leads out of {base} (through a symlink)")
    for entry in real.rglob("*"):  # step by step: a link out and back in by the folder's name leaves its copy
        if entry.is_symlink() and not link_stays_inside(real, entry):
            raise UntrustedInput(f"{_who(task)}{what}: symlink {entry} points out of {real}")
    if (foreign := _foreign_entry(real)) is not None:
        raise UntrustedInput(f"{_who(task)}{what} {real}: {foreign}")
    return real


MAX_FILE_BYTES = 64 << 20
"""Largest file of a checkout :func:`read_file` reads (BFCL's largest data file is 4 MB): a larger one, a sparse file
of gigabytes that uses no disk among them, would be read whole into memory (and into the task file)."""


def read_file(path: str | Path, *, what: str, task: str | None = None) -> bytes:
    """The bytes of the checkout's file ``path`` (already contained: :func:`contained_path`) if it is a regular file
    with one name of at most :data:`MAX_FILE_BYTES`: a named pipe or device (a read that blocks, never ends, or reads
    a disk), a hard link (whose other name may be ``~/.ssh/id_rsa``: its content would become a prompt or a script)
    or a larger file is refused, never read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)  # a pipe's open never blocks
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise UntrustedInput(f"{_who(task)}{what} {path} is not a readable file ({e.strerror})") from None
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            kind = _not_regular(st.st_mode) or "folder"
            raise UntrustedInput(f"{_who(task)}{what} {path} is a {kind}, not a regular file")
        if st.st_nlink > 1:
            raise UntrustedInput(f"{_who(task)}{what} {path} is a hard link ({st.st_nlink} names): its content may be "
                                 "another file's; copy it (cp) to import it")
        if st.st_size > MAX_FILE_BYTES:
            raise UntrustedInput(f"{_who(task)}{what} {path} holds {st.st_size} bytes, over the {MAX_FILE_BYTES} an "
                                 "import reads of one file: not a benchmark's file")
        data = f.read(MAX_FILE_BYTES + 1)  # a file that grows meanwhile is still read no further
        if len(data) > MAX_FILE_BYTES:
            raise UntrustedInput(f"{_who(task)}{what} {path} grew past the {MAX_FILE_BYTES} bytes an import reads of "
                                 "one file while it was read")
        return data


MAX_RESULT_DEPTH = 64
"""Deepest nesting of a server's result (a JSON value) that makes answers in ``mcp-gym tasks generate``: a deeper one
(a hostile server's ``[[[[...]]]]``, or ``{"result": TEXT}`` wrapping it) is taken as its text, which makes none
(before, it ended the job with a ``RecursionError`` traceback)."""


def too_deep(value: Any, limit: int = MAX_RESULT_DEPTH) -> bool:
    """Whether ``value`` nests objects and arrays deeper than ``limit`` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        if depth > limit:
            return True
        stack.extend((item, depth + 1) for item in items)
    return False


@dataclass(frozen=True)
class ZipLimits:
    """Bounds on what :func:`extract_zip` writes (each a refusal when crossed). The defaults fit MCPMark's states
    (the largest, a code repository, is tens of MB) and stop a zip bomb."""

    max_total_bytes: int = 512 * 2**20
    """Uncompressed bytes of all members together (default 512 MiB)."""
    max_files: int = 20_000
    """Members (files and folders; default 20,000)."""
    max_file_bytes: int = 256 * 2**20
    """Uncompressed bytes of one member (default 256 MiB)."""
    max_ratio: float = 200.0
    """Uncompressed / compressed size of a member over 1 MiB (default 200; a zip bomb is ~1,000)."""


_CHUNK = 1 << 16


def extract_zip(archive: str | Path, target: str | Path, *, limits: ZipLimits = ZipLimits(), prefix: str = "",
                task: str | None = None) -> int:
    """Extract the members of ``archive`` whose names start with ``prefix`` (stripped) into ``target``, within
    ``limits``; ``__MACOSX/`` members are skipped. Returns the bytes written. Raises :class:`UntrustedInput` for a
    member named absolutely or with ``..``, a symlink member, or a crossed limit (what is already written stays:
    the caller removes ``target``); ``zipfile.BadZipFile`` for a damaged archive."""
    archive, target = Path(archive), Path(target)
    where = f"{_who(task)}{archive}"
    written = 0
    with zipfile.ZipFile(archive) as z:
        infos = [i for i in z.infolist() if not i.filename.startswith("__MACOSX/")]
        if len(infos) > limits.max_files:
            raise UntrustedInput(f"{where}: {len(infos)} members, over the limit of {limits.max_files}")
        declared = sum(i.file_size for i in infos if i.filename.startswith(prefix))
        if declared > limits.max_total_bytes:
            raise UntrustedInput(f"{where}: declares {declared} bytes in all, over the limit of "
                                 f"{limits.max_total_bytes}")
        for info in infos:
            name = info.filename
            parts = PurePosixPath(name.replace("\\", "/")).parts
            if name.startswith(("/", "\\")) or PureWindowsPath(name).drive or ".." in parts:
                raise UntrustedInput(f"{where}: member {name!r} leads out of the folder (absolute or '..')")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise UntrustedInput(f"{where}: member {name!r} is a symlink")
            if not name.startswith(prefix) or info.is_dir():
                continue
            rel = [p for p in PurePosixPath(name[len(prefix):]).parts if p not in ("", ".")]
            if not rel:
                continue
            if info.file_size > limits.max_file_bytes:
                raise UntrustedInput(f"{where}: member {name!r} is {info.file_size} bytes, over the limit of "
                                     f"{limits.max_file_bytes}")
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size > 2**20 and ratio > limits.max_ratio:
                raise UntrustedInput(f"{where}: member {name!r} expands {ratio:.0f} times, over the limit of "
                                     f"{limits.max_ratio:g} (a zip bomb?)")
            dest = target.joinpath(*rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            mine = 0
            with z.open(info) as src, dest.open("wb") as out:
                while chunk := src.read(_CHUNK):
                    mine += len(chunk)
                    written += len(chunk)
                    if mine > limits.max_file_bytes:
                        raise UntrustedInput(f"{where}: member {name!r} expands past the limit of "
                                             f"{limits.max_file_bytes} bytes")
                    if written > limits.max_total_bytes:
                        raise UntrustedInput(f"{where}: expands past the limit of {limits.max_total_bytes} bytes "
                                             "in all")
                    out.write(chunk)
            _keep_mtime(dest, info)
    return written


def _keep_mtime(path: Path, info: zipfile.ZipInfo) -> None:
    """Give ``path`` the member's modification time (local time, as ``unzip`` reads it): some benchmarks' checks
    sort or group files by it (MCPMark's ``file_property``)."""
    try:
        when = time.mktime((*info.date_time, 0, 0, -1))
        os.utime(path, (when, when))
    except (OverflowError, ValueError, OSError):
        pass  # a member dated outside what the platform represents keeps the extraction time


class UniqueIds:
    """The ids an import has given, each with the task it came from; :meth:`add` refuses a second task mapping to an
    id already given (or to one equal but for case), naming both tasks."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, str]] = {}

    def add(self, task_id: str, source: str) -> str:
        """Record ``task_id`` for the task ``source`` (e.g. its folder in the checkout) and return it; raises
        :class:`UntrustedInput` if another task already has it."""
        key = task_id.casefold()
        if key in self._seen:
            other_id, other = self._seen[key]
            raise UntrustedInput(f"tasks {other} and {source} both map to the id {task_id!r}"
                                 + ("" if other_id == task_id else f" (as {other_id!r}: ids differing only in case)")
                                 + "; refusing to import either over the other")
        self._seen[key] = (task_id, source)
        return task_id

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, str) and task_id.casefold() in self._seen

    def __len__(self) -> int:
        return len(self._seen)
