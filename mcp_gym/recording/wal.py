"""Write-ahead log: finished episodes appended as length-prefixed, CRC-checked frames.

One frame holds one finished episode: ``(episode_row, step_rows)`` where rows are tuples of plain values (str, int,
float, bool, None) in the column order of :data:`~mcp_gym.recording.schema.EPISODES_SCHEMA` /
:data:`~mcp_gym.recording.schema.STEPS_SCHEMA`. Frames are pickled (several times faster than JSON for such rows)
and read back by an unpickler that refuses every global, so a WAL can only ever yield plain data, never run code.

A frame is handed to the OS with a single unbuffered ``write``, so it is in the page cache and survives ``kill -9`` of
the writer; ``fsync`` (for power loss) follows the writer's policy. A process killed mid-frame leaves a torn tail, which
:func:`read_frames` detects (short read or CRC mismatch) and ignores.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["WalFile", "read_frames", "Frame"]

_HEADER = struct.Struct("<II")  # payload length, crc32 of payload
Frame = tuple[tuple[Any, ...], list[tuple[Any, ...]]]
"""``(episode_row, step_rows)``."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a WAL frame may hold only plain values, not {module}.{name}")


class WalFile:
    """An append-only WAL segment."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.frames = 0
        self._buf = io.BytesIO()
        self._pickler = pickle.Pickler(self._buf, protocol=pickle.HIGHEST_PROTOCOL)
        with contextlib.suppress(AttributeError):
            # No memo: frames are flat tuples of plain values (no cycles), and memoising every string costs ~40%.
            self._pickler.fast = True

    def _dumps(self, frame: Frame) -> bytes:
        self._buf.seek(0)
        self._buf.truncate()
        self._pickler.clear_memo()
        self._pickler.dump(frame)
        return self._buf.getvalue()

    def append(self, frame: Frame) -> None:
        """Hand one frame to the OS in one unbuffered ``write`` (then fsync if configured)."""
        assert self._fd is not None, "WAL segment is closed"
        payload = self._dumps(frame)
        data = memoryview(_HEADER.pack(len(payload), zlib.crc32(payload)) + payload)
        while data:  # a regular file takes it all at once unless the disk is full or a signal interrupts
            data = data[os.write(self._fd, data) :]
        if self.fsync:
            os.fsync(self._fd)
        self.frames += 1

    def sync(self) -> None:
        """fsync the segment."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file (the segment stays on disk)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Close and delete the segment (its episodes are in a finished shard)."""
        self.close()
        self.path.unlink(missing_ok=True)


def read_frames(path: Path) -> Iterator[Frame]:
    """The intact frames of a WAL segment, stopping quietly at a torn or corrupt tail."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    pos, end = 0, len(data)
    while pos + _HEADER.size <= end:
        size, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        payload = data[start : start + size]
        if len(payload) < size or zlib.crc32(payload) != crc:
            return
        try:
            episode, steps = _PlainUnpickler(io.BytesIO(payload)).load()
        except (pickle.UnpicklingError, ValueError, TypeError, EOFError):
            return
        yield tuple(episode), [tuple(s) for s in steps]
        pos = start + size
