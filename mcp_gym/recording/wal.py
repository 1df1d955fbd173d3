"""Write-ahead log: finished episodes appended as length-prefixed, CRC-checked frames.

One frame holds one finished episode: ``(episode_row, step_rows)`` where rows are tuples of plain values (str, int,
float, bool, None) in the column order of :class:`~mcp_gym.recording.schema.EpisodeRecord` /
:class:`~mcp_gym.recording.schema.StepRecord` (their ``from_row`` reads them by name, also rows of an older minor
version). A frame's payload is the pair as JSON (orjson: its code is warm, the writer has just used it for the JSON
columns); a frame JSON cannot carry exactly (NaN or infinite floats, lone surrogates) is pickled instead and read back
by an unpickler that refuses every global. Either way a WAL can only ever yield plain data, never run code.

A segment is a file mapped into memory (``MAP_SHARED``), preallocated and pre-faulted in chunks of
:data:`CHUNK_BYTES`: appending a frame is a ``memcpy`` into the page cache, with no system call. The page cache belongs
to the kernel, so a frame is safe from ``kill -9`` of the writer the moment :meth:`WalFile.append` returns (measured
right after an env step, when the CPU caches are cold: ~7 µs against ~60 µs for an unbuffered ``write``);
``fsync`` (for power loss) follows the writer's policy. The payload is copied before its header, so a process killed
mid-frame leaves a torn tail or zeros, which :func:`read_frames` detects (zero length, short read or CRC mismatch)
and ignores. :meth:`WalFile.close` truncates the file to its frames.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import mmap
import os
import pickle
import pickletools
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from mcp_gym.recording._contained import RunFileRefused, open_run_file

__all__: list[str] = []  # internal to mcp_gym.recording: used by its sibling modules only

_log = logging.getLogger("mcp_gym.recording")
_HEADER = struct.Struct("<II")  # payload length, crc32 of payload
Frame = tuple[tuple[Any, ...], list[tuple[Any, ...]]]
"""``(episode_row, step_rows)``."""
CHUNK_BYTES = 4 << 20
"""A segment grows by this much at a time (allocated on disk and pre-faulted: ~5 ms per chunk)."""
WAL_SEGMENT_LIMIT = 2 << 30
"""Bytes of a WAL segment :func:`read_frames` reads at most (a larger one is refused). A writer starts a new segment
(publishing its shard) once one holds :data:`WAL_ROLL_BYTES`, so only an episode of over a gigabyte comes near it."""
WAL_ROLL_BYTES = 256 << 20
"""A writer publishes its shard, and so starts a new WAL segment, once the segment holds this many bytes."""
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform == "linux" else None)


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a WAL frame may hold only plain values, not {module}.{name}")


def _all_finite(row: tuple[Any, ...]) -> bool:
    """True if ``row`` has no NaN or infinite float (JSON carries those as null)."""
    return all(v - v == 0.0 for v in row if v.__class__ is float)


class WalFile:
    """An append-only WAL segment (a new file: one writer per segment)."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._map: mmap.mmap | None = None
        self._size = 0  # bytes of frames (the segment's size once closed)
        self._capacity = 0
        self.frames = 0
        self._buf = io.BytesIO()
        self._pickler = pickle.Pickler(self._buf, protocol=pickle.HIGHEST_PROTOCOL)
        with contextlib.suppress(AttributeError):
            # No memo: frames are flat tuples of plain values (no cycles), and memoising every string costs ~40%.
            self._pickler.fast = True

    def _dumps(self, frame: Frame, finite: bool | None) -> bytes:
        if finite is None:
            finite = _all_finite(frame[0]) and all(_all_finite(row) for row in frame[1])
        if finite:
            try:
                return orjson.dumps(frame)
            except TypeError:  # lone surrogates, ints beyond 64 bits
                pass
        self._buf.seek(0)
        self._buf.truncate()
        self._pickler.clear_memo()
        self._pickler.dump(frame)
        return self._buf.getvalue()

    def _grow(self, needed: int) -> mmap.mmap:
        """Extend the file and the mapping to hold ``needed`` bytes: allocate the blocks now (a full disk fails here
        with ``OSError``, not later with ``SIGBUS``) and pre-fault the pages so appends do not trap into the kernel."""
        assert self._fd is not None, "WAL segment is closed"
        old = self._capacity
        new = old + max(CHUNK_BYTES, -(-(needed - old) // mmap.PAGESIZE) * mmap.PAGESIZE)
        if hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(self._fd, old, new - old)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate
                    raise
                os.ftruncate(self._fd, new)
        else:  # pragma: no cover - macOS
            os.ftruncate(self._fd, new)
        if self._map is None:
            self._map = mmap.mmap(self._fd, new)
        else:
            self._map.resize(new)
        self._capacity = new
        try:
            if _MADV_POPULATE_WRITE is None:
                raise OSError("no MADV_POPULATE_WRITE")
            self._map.madvise(_MADV_POPULATE_WRITE, old, new - old)
        except (OSError, ValueError):  # older kernels: dirty one byte per page
            for offset in range(old, new, mmap.PAGESIZE):
                self._map[offset] = 0
        return self._map

    def append(self, frame: Frame, *, finite: bool | None = None) -> None:
        """Copy one frame into the mapped segment (then msync if configured). ``finite``: whether every float in the
        frame is finite, if the caller knows (else it is checked)."""
        payload = self._dumps(frame, finite)
        start = self._size
        end = start + _HEADER.size + len(payload)
        m = self._map
        if m is None or end > self._capacity:
            m = self._grow(end)
        m[start + _HEADER.size : end] = payload
        m[start : start + _HEADER.size] = _HEADER.pack(len(payload), zlib.crc32(payload))
        self._size = end
        self.frames += 1  # the frame is in the page cache: safe from kill -9 even if the msync below fails
        if self.fsync:
            page = start - start % mmap.ALLOCATIONGRANULARITY
            m.flush(page, end - page)

    @property
    def size(self) -> int:
        """Bytes of the frames appended."""
        return self._size

    def sync(self) -> None:
        """fsync the segment."""
        if self._map is not None:
            self._map.flush()

    def close(self) -> None:
        """Unmap and close the file, cut to its frames (the segment stays on disk)."""
        if self._fd is None:
            return
        if self._map is not None:
            self._map.close()
            self._map = None
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)
        os.close(self._fd)
        self._fd = None

    def remove(self) -> None:
        """Close and delete the segment (its episodes are in a finished shard)."""
        self.close()
        self.path.unlink(missing_ok=True)


def read_frames(path: Path, *, root: Path | None = None, limit: int | None = None) -> Iterator[Frame]:
    """The intact frames of a WAL segment, stopping quietly at a torn or corrupt tail.

    Read frame by frame, never more than the segment's size when opened, and at most ``limit`` bytes (default
    :data:`WAL_SEGMENT_LIMIT`): a larger segment is refused in one line (``RunFileRefused``, a ``ValueError``), so a
    handed-over run's huge or still-growing segment costs neither all memory nor a read without end. ``root``: the
    run directory the segment must stay in (a segment of someone else's run is checked like its other files)."""
    limit = WAL_SEGMENT_LIMIT if limit is None else limit
    try:
        f = open_run_file(path.parent if root is None else root, path)
    except FileNotFoundError:
        return
    with f:
        end = os.fstat(f.fileno()).st_size
        if end > limit:
            raise RunFileRefused(f"{path}: refusing to read this write-ahead-log segment of the run: {end} bytes, "
                                 f"over the {limit} allowed")
        pos = 0
        while pos + _HEADER.size <= end:
            header = f.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            size, crc = _HEADER.unpack(header)
            start = pos + _HEADER.size
            if size == 0 or start + size > end:  # the zeroed, preallocated end of a segment, or a torn tail
                return
            payload = f.read(size)
            if len(payload) < size or zlib.crc32(payload) != crc:
                return
            try:
                if payload[:1] == b"[":
                    episode, steps = orjson.loads(payload)
                else:
                    _no_references(payload)
                    episode, steps = _PlainUnpickler(io.BytesIO(payload)).load()
                frame = tuple(episode), [tuple(s) for s in steps]
            except (pickle.UnpicklingError, orjson.JSONDecodeError, ValueError, TypeError, EOFError) as e:
                # CRC-intact but not a frame this module writes (crafted, or another program's): not a torn tail
                _log.warning("%s: the frame at byte %d is not a write-ahead-log frame (%s); the rest of the segment "
                             "is ignored", path, pos, e)
                return
            del payload
            yield frame
            pos = start + size


_REFERENCES = frozenset({"GET", "BINGET", "LONG_BINGET"})


def _no_references(payload: bytes) -> None:
    """Refuse a pickled frame that repeats a value by reference: the writer's pickler keeps no memo, so only a crafted
    frame does, and a few bytes could then name one long string a million times (a bomb once written to Arrow)."""
    for op, _, _ in pickletools.genops(payload):
        if op.name in _REFERENCES:
            raise pickle.UnpicklingError("a frame repeats a value by reference (the writer never does)")
