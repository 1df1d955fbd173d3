"""TrajectoryWriter: buffered, crash-safe Parquet recording of episodes.

Per step, an :class:`EpisodeWriter` serialises the free-form fields to JSON once and appends a row tuple to the
episode (in the column order of :class:`~mcp_gym.recording.schema.StepRecord`; the episode's row is an
:class:`~mcp_gym.recording.schema.EpisodeRecord` filled in by name). When the episode finishes, the writer appends it
to the write-ahead log (one frame, flushed: it survives ``kill -9``), then to in-memory column buffers, written as a
zstd row group every ``row_group_rows`` steps into a hidden shard, which is published atomically once it reaches
``shard_bytes`` (and on :meth:`TrajectoryWriter.close`). Publishing a shard deletes its WAL segment. Episodes cut
short (never finished) are not recorded.

Use one writer per process and run directory (:meth:`TrajectoryWriter.shared` hands out the process's writer);
several processes may write to the same run directory, each with its own writer.

Fsync policy (``fsync=``): ``"shard"`` (default) fsyncs shards before publishing them; finished episodes survive the
death of the process at once, and power loss once their shard is published (SQLite's ``synchronous=NORMAL``).
``"episode"`` also fsyncs the WAL after every episode (survives power loss at once; costs one fsync per episode).
``"never"`` never fsyncs.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import operator
import os
import secrets
import threading
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from mcp_gym._version import __version__
from mcp_gym.protocol import catalogue_fingerprint
from mcp_gym.recording.run import RunDirectory, RunLock, WriterLock
from mcp_gym.recording.schema import Catalogue, EpisodeRecord, dumps, safe_text
from mcp_gym.recording.shards import PartWriter
from mcp_gym.recording.wal import WAL_ROLL_BYTES, WalFile, read_frames

__all__ = ["TrajectoryWriter", "EpisodeWriter", "FsyncPolicy"]

FsyncPolicy = Literal["episode", "shard", "never"]
MiB = 1 << 20
_log = logging.getLogger("mcp_gym.recording")
_RETRY_SECONDS = 2.0  # after a failed shard write, episode ends retry it at most this often (publish/close: always)


_PID = [os.getpid()]
"""This process's id, kept current across ``fork`` (``os.getpid`` is a system call: too slow for every episode)."""
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def new_writer_id() -> str:
    """A unique writer id that sorts by start time (``20260101T120000-<pid>-<random>``)."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{secrets.token_hex(3)}"


def _nbytes(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", errors="replace"))


def _text(value: Any) -> str | None:
    """``None`` or a str (rows hold only plain values: the WAL refuses anything else); never raises."""
    if value is None or value.__class__ is str:
        return value
    if isinstance(value, (int, float, str)):
        try:
            return str(value)
        except ValueError:  # an int too long to print
            pass
    return safe_text(value)


def _micros(t: float) -> int:
    return int(t * 1_000_000)


REFUSED_KEY = "mcp_gym_refused"
"""Step ``info`` key naming the policy-supplied values the recorder refused: ``{field: reason}`` (column null)."""
_INT32 = 1 << 31
_MAX_MICROS = 253_402_300_800 * 1_000_000  # 10000-01-01: past any timestamp Arrow can print


def _turn(value: Any, refused: dict[str, str]) -> int | None:
    """A policy-supplied ``turn`` as the int32 column takes it (a 0-based index below 2**31), else ``None`` with
    the reason in ``refused``: a value the column cannot hold must never reach a shard (it would fail every write
    and every read of the run)."""
    if value is None or (value.__class__ is int and 0 <= value < _INT32):
        return value
    try:
        if isinstance(value, bool):
            raise TypeError
        turn = operator.index(value)  # ints and numpy ints; not floats, not text
    except Exception:  # noqa: BLE001 - TypeError, or a hostile __index__
        refused["turn"] = f"not an integer: {safe_text(value, 80)}"
        return None
    if 0 <= turn < _INT32:
        return turn
    refused["turn"] = f"{safe_text(turn, 80)} is not a 0-based reply index below 2**31"
    return None


def _timestamp(value: Any, refused: dict[str, str]) -> int:
    """A step's start (seconds since the epoch) in microseconds; now (and the reason in ``refused``) if the given
    value is not a time the timestamp column can hold."""
    if value is None:
        return int(time.time() * 1_000_000)
    try:
        micros = int(float(value) * 1_000_000)
        if 0 <= micros < _MAX_MICROS:
            return micros
    except Exception:  # noqa: BLE001 - OverflowError (inf), ValueError (nan), TypeError
        pass
    refused["timestamp"] = f"not a time: {safe_text(value, 80)}"
    return int(time.time() * 1_000_000)


def _seed(value: Any) -> int | None:
    """A seed the int64 column can hold, else ``None`` (never raises)."""
    try:
        seed = operator.index(value)
    except Exception:  # noqa: BLE001 - None, a float, text, a hostile __index__
        return None
    return seed if -(2**63) <= seed < 2**63 else None


def truncate_result(content: Sequence[Any], structured: Any, limit: int) -> tuple[str, str | None]:
    """Content blocks and structured content cut to ``limit`` bytes of JSON.

    Blocks are kept in order while they fit; a text block that does not fit is cut (marked ``…[mcp-gym: truncated N
    bytes]``), any other block is replaced by a text placeholder naming its type and size. Structured content is kept
    only if it fits in what remains.
    """
    budget = limit
    blocks: list[Any] = []
    for block in content:
        n = _nbytes(dumps(block))
        if n <= budget:
            blocks.append(block)
            budget -= n
            continue
        text = block.get("text") if isinstance(block, Mapping) else None
        if isinstance(text, str) and block.get("type") == "text":
            room = max(0, budget - 256)
            kept = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
            blocks.append({**block, "text": kept + f"…[mcp-gym: truncated {n - room} bytes]"})
        else:
            kind = block.get("type", "content") if isinstance(block, Mapping) else type(block).__name__
            mime = block.get("mimeType", "") if isinstance(block, Mapping) else ""
            blocks.append({"type": "text", "text": f"[mcp-gym: {kind} {mime} block of {n} bytes omitted]"})
        budget = 0
    sc_json = dumps(structured) if structured is not None else None
    if sc_json is not None and _nbytes(sc_json) > budget:
        sc_json = None
    return dumps(blocks), sc_json


class EpisodeWriter:
    """One episode being recorded: call :meth:`add_step` per tool call, then :meth:`finish` (or :meth:`discard`).

    Made by :meth:`TrajectoryWriter.start_episode`. Not thread-safe: one episode belongs to one actor.
    """

    __slots__ = ("writer", "episode_id", "key", "max_result_bytes", "record", "_rows", "_reward", "_bytes", "_changes",
                 "_floats", "done")

    def __init__(self, writer: TrajectoryWriter, record: EpisodeRecord) -> None:
        self.writer = writer
        self.max_result_bytes = writer.max_result_bytes
        self.record = record  # the episode's row: its head now, the rest filled in by finish()
        self.episode_id: str = record.episode_id  # type: ignore[assignment]  # set for every episode written
        self.key = record.episode_key
        self._rows: list[tuple[Any, ...]] = []
        self._reward = 0.0
        self._bytes = 0
        self._changes: list[dict[str, Any]] = []
        self._floats = 0.0  # sum of the durations: non-finite iff one of them is (as the sum of rewards for rewards)
        self.done = False

    @property
    def length(self) -> int:
        """Steps recorded so far."""
        return len(self._rows)

    def add_step(
        self,
        tool: str | None,
        arguments: Any,
        *,
        server: str | None = None,
        server_tool: str | None = None,
        content: Sequence[Any] = (),
        structured_content: Any = None,
        is_error: bool = False,
        error: Mapping[str, Any] | None = None,
        reward: float | None = None,
        terminated: bool = False,
        truncated: bool = False,
        duration: float | None = None,
        timestamp: float | None = None,
        observation: str | None = None,
        resources: str | None = None,
        raw_text: str | None = None,
        parse_status: str | None = None,
        info: Mapping[str, Any] | None = None,
        turn: int | None = None,
        assistant_content: str | None = None,
        user_turn: int | None = None,
    ) -> None:
        """Record one tool call.

        ``content`` is the list of MCP content blocks as JSON dicts (``block.model_dump(mode="json", by_alias=True,
        exclude_none=True)``), ``resources`` a ``{uri: text}`` dict or its JSON string, ``timestamp`` the call's start
        (``time.time()``, default now). Results larger than the writer's ``max_result_bytes`` are truncated and
        flagged.
        """
        content_json = dumps(content)
        size = len(content_json) if content_json.isascii() else len(content_json.encode("utf-8", "replace"))
        if structured_content is None:
            sc_json = None
        else:
            sc_json = dumps(structured_content)
            size += len(sc_json) if sc_json.isascii() else len(sc_json.encode("utf-8", "replace"))
        cut = size > self.max_result_bytes
        if cut:
            content_json, sc_json = truncate_result(content, structured_content, self.max_result_bytes)
        if observation is not None and observation.__class__ is not str:
            observation = dumps(observation)
        refused: dict[str, str] = {}
        if turn is not None:
            turn = _turn(turn, refused)
        stamp = _timestamp(timestamp, refused)
        if refused:
            self._refused(refused)
            info = {**(info or {}), REFUSED_KEY: refused}
        self._bytes += size  # the variable part; drives row groups of at most ~row_group_bytes
        if reward is not None:
            reward = float(reward)
            self._reward += reward
        if duration is not None:
            duration = float(duration)
            self._floats += duration
        # The row in StepRecord.COLUMNS order, written out positionally: this runs per step, and building it by name
        # (StepRecord.ROW over a dict) made the writer ~20% slower (scripts/bench/recorder.py). The order is checked
        # by tests/test_recording.py::test_add_step_fills_every_column_by_name.
        self._rows.append((
            self.episode_id,
            len(self._rows),
            stamp,
            tool if tool is None or tool.__class__ is str else _text(tool),
            server if server is None or server.__class__ is str else _text(server),
            server_tool if server_tool is None or server_tool.__class__ is str else _text(server_tool),
            dumps(arguments),
            content_json,
            sc_json,
            bool(is_error),
            dumps(error) if error is not None else None,
            _error_code(error) if error is not None else None,
            reward,
            bool(terminated),
            bool(truncated),
            duration,
            observation,
            resources if resources is None or isinstance(resources, str) else dumps(resources),
            _text(raw_text),
            _text(parse_status),
            cut,
            size,
            dumps(info) if info is not None else None,
            turn,
            _text(assistant_content),
            user_turn if user_turn.__class__ is int else None,
        ))

    def _refused(self, refused: Mapping[str, str]) -> None:
        """Say once per writer that a policy-supplied value was refused (each step's ``info`` names its own)."""
        if not self.writer.refused_warned:
            self.writer.refused_warned = True
            fields = ", ".join(f"{k} ({v})" for k, v in refused.items())
            warnings.warn(f"recording to {self.writer.path}: step {len(self._rows)} of episode {self.episode_id}: "
                          f"refused {fields}; stored as null, the reason in the step's info[{REFUSED_KEY!r}] (said "
                          "once per writer)", RuntimeWarning, stacklevel=3)

    def catalogue_changed(self, tools: Sequence[Mapping[str, Any]], step_index: int | None = None) -> None:
        """Record that the tool catalogue changed after step ``step_index`` (default: the last recorded step)."""
        index = len(self._rows) - 1 if step_index is None else step_index
        self._changes.append({"step_index": index, "hash": catalogue_fingerprint(tools), "tools": list(tools)})

    def finish(
        self,
        *,
        total_reward: float | None = None,
        success: bool | None = None,
        termination: str | None = None,
        final_answer: str | None = None,
        catalogue_changes: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Finish the episode and hand it to the writer (WAL first). ``total_reward`` defaults to the sum of rewards;
        ``catalogue_changes`` (``{step_index, hash, tools}`` dicts) replaces those given to :meth:`catalogue_changed`.
        """
        if self.done:
            return
        self.done = True
        changes = list(catalogue_changes) if catalogue_changes is not None else self._changes
        record = self.record
        record.total_reward = float(total_reward) if total_reward is not None else self._reward
        record.success = None if success is None else bool(success)
        record.length = len(self._rows)
        record.termination = _text(termination)
        record.final_answer = _text(final_answer)
        record.catalogue_changes = dumps(changes) if changes else None
        record.ended_at = _micros(time.time())
        check = record.total_reward + self._reward + self._floats  # NaN/inf anywhere -> not finite: the WAL pickles
        self.writer._add_episode(record.row(), self._rows, self._bytes, check - check == 0.0)

    def discard(self) -> None:
        """Drop the episode without recording it."""
        self.done = True
        self._rows = []


def _error_code(error: Mapping[str, Any]) -> int | None:
    code = error.get("code")
    return code if isinstance(code, int) and -(2**31) <= code < 2**31 else None


_SHARED: dict[tuple[int, str], list[Any]] = {}  # (pid, run dir) -> [writer, references]
_SHARED_LOCK = threading.Lock()
_OPEN: weakref.WeakSet[TrajectoryWriter] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for w in list(_OPEN):
        with contextlib.suppress(Exception):  # at exit the WAL keeps what could not be published
            w.close()


class TrajectoryWriter:
    """Writes episodes into a run directory (see the module doc for buffering, WAL and fsync policy).

    Args:
        path: The run directory (created if missing).
        row_group_rows: Step rows per Parquet row group.
        row_group_bytes: Also write a row group once the buffered rows hold about this many bytes.
        shard_bytes: Publish the shard and start a new one once it reaches this size.
        compression: Parquet codec (``zstd``); ``compression_level`` its level.
        fsync: ``"shard"`` (default), ``"episode"`` or ``"never"``.
        max_result_bytes: Results (content + structured content JSON) larger than this are truncated and flagged.
        recover: Recover killed writers' WAL segments in this directory first.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        row_group_rows: int = 4096,
        row_group_bytes: int = 64 * MiB,
        shard_bytes: int = 128 * MiB,
        compression: str = "zstd",
        compression_level: int | None = None,
        fsync: FsyncPolicy = "shard",
        max_result_bytes: int = 10 * MiB,
        recover: bool = True,
    ) -> None:
        if fsync not in ("episode", "shard", "never"):
            raise ValueError(f"fsync must be 'episode', 'shard' or 'never', not {fsync!r}")
        self.run = RunDirectory(path)
        self.path = self.run.path
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.shard_bytes = shard_bytes
        self.compression = compression
        self.compression_level = compression_level
        self.fsync: FsyncPolicy = fsync
        self.max_result_bytes = max_result_bytes
        self.writer_id = new_writer_id()
        self._pid = os.getpid()
        self._job = RunLock(self.path, shared=True).acquire()  # refuses a directory another process's job holds
        try:
            self._lock = WriterLock(self.run.lock_path(self.writer_id))
            self._lock.acquire(blocking=True)
            self.recovered = (
                self.run.recover(compression=compression, compression_level=compression_level,
                                 fsync=fsync != "never", exclude=[self.writer_id])
                if recover else 0
            )
        except BaseException:
            self._job.release()
            raise
        self._mutex = threading.Lock()
        self._seq = 0
        self._part: PartWriter | None = None
        self._wal: WalFile | None = None
        # After a failed write (a full disk, ...): episodes of the current part not in its WAL segment (kept in
        # memory until published), whether the part must be rewritten from the WAL segment, and when to retry.
        self._unlogged: list[tuple[tuple[Any, ...], list[tuple[Any, ...]]]] = []
        self._rebuild = False
        self._failing = False
        self._retry_at = 0.0
        self._steps: list[tuple[Any, ...]] = []
        self._episodes: list[tuple[Any, ...]] = []
        self._buffered_bytes = 0
        self._shared_key: tuple[int, str] | None = None
        self.episodes_written = 0
        self.steps_written = 0
        self.refused_warned = False
        self.closed = False
        _OPEN.add(self)

    @classmethod
    def shared(cls, path: str | os.PathLike[str], **options: Any) -> TrajectoryWriter:
        """The writer of this process for ``path`` (created with ``options`` on first use); :meth:`release` it."""
        key = (os.getpid(), str(Path(path).resolve()))
        with _SHARED_LOCK:
            entry = _SHARED.get(key)
            if entry is None or entry[0].closed:
                writer = cls(path, **options)
                writer._shared_key = key
                entry = _SHARED[key] = [writer, 0]
            entry[1] += 1
            shared: TrajectoryWriter = entry[0]
            return shared

    def release(self) -> None:
        """Drop one reference to a :meth:`shared` writer, closing it with the last one (plain writers: close)."""
        key = self._shared_key
        if key is not None:
            with _SHARED_LOCK:
                entry = _SHARED.get(key)
                if entry is not None and entry[0] is self:
                    entry[1] -= 1
                    if entry[1] > 0:
                        return
                    del _SHARED[key]
        self.close()

    # -- episodes -------------------------------------------------------------------------------------------------
    def start_episode(
        self,
        *,
        episode_id: str | None = None,
        key: str | None = None,
        env_id: str | None = None,
        task_id: str | None = None,
        task_prompt: str | None = None,
        task: Mapping[str, Any] | str | None = None,
        seed: int | None = None,
        policy: str | None = None,
        tools: Sequence[Mapping[str, Any]] | Catalogue | None = None,
        servers: Mapping[str, Any] | None = None,
        initial_observation: Any = None,
        recorder: str = "env",
        metadata: Mapping[str, Any] | None = None,
    ) -> EpisodeWriter:
        """Begin recording an episode; ``key`` is its resume key, ``tools`` the JSON tool schemas the agent sees (or
        a :class:`Catalogue` of them), ``task`` the task record (a dict, or its JSON string)."""
        self._check_usable()
        episode_id = _text(episode_id) or secrets.token_hex(16)
        key = _text(key)
        catalogue = tools if isinstance(tools, Catalogue) or tools is None else Catalogue.of(tools)
        record = EpisodeRecord(
            episode_id=episode_id,
            episode_key=key,
            env_id=_text(env_id),
            task_id=_text(task_id),
            task_prompt=_text(task_prompt),
            task=task if task is None or isinstance(task, str) else dumps(task),
            seed=_seed(seed),
            policy=_text(policy),
            tools=catalogue.json if catalogue is not None else None,
            catalogue_hash=catalogue.hash if catalogue is not None else None,
            servers=dumps(servers) if servers is not None else None,
            initial_observation=dumps(initial_observation) if initial_observation is not None else None,
            started_at=_micros(time.time()),
            recorder=recorder,
            library_version=__version__,
            metadata=dumps(metadata) if metadata else None,
        )
        return EpisodeWriter(self, record)

    def _check_usable(self) -> None:
        if self.closed:
            raise RuntimeError(f"the trajectory writer for {self.path} is closed")
        if _PID[0] != self._pid:
            raise RuntimeError("a TrajectoryWriter cannot be used in a forked child: create one per process")

    def _add_episode(self, episode: tuple[Any, ...], steps: list[tuple[Any, ...]], nbytes: int, finite: bool) -> None:
        with self._mutex:
            self._check_usable()
            if self._log((episode, steps), finite):
                if self._unlogged:
                    self._relog()
            else:
                self._unlogged.append((episode, steps))
            self._episodes.append(episode)
            self._steps.extend(steps)
            self._buffered_bytes += nbytes
            self.episodes_written += 1
            self.steps_written += len(steps)
            if self._rebuild:
                if time.monotonic() >= self._retry_at:
                    self._guard(self._write_row_group)
            elif len(self._steps) >= self.row_group_rows or self._buffered_bytes >= self.row_group_bytes:
                self._guard(self._write_row_group)

    # -- failures -------------------------------------------------------------------------------------------------
    def _log(self, frame: tuple[Any, ...], finite: bool | None) -> bool:
        """Append a finished episode to the WAL segment; ``False`` if it is not in it (the disk is full, ...)."""
        wal = self._wal
        before = wal.frames if wal is not None else 0
        try:
            if wal is None:
                wal = self._wal = WalFile(self.run.wal_path(self.writer_id, self._seq), fsync=self.fsync == "episode")
            wal.append(frame, finite=finite)
            return True
        except Exception as exc:  # noqa: BLE001 - OSError (ENOSPC, EIO, ...): keep the episode in memory instead
            self._failed(exc)
            return wal is not None and wal.frames > before  # the frame is in, only its msync failed

    def _relog(self) -> None:
        """Move episodes kept in memory into the WAL segment, now that it takes frames again."""
        while self._unlogged and self._log(self._unlogged[0], None):
            self._unlogged.pop(0)

    def _guard(self, write: Any, *, reraise: bool = False) -> bool:
        """Run a shard write; on failure (a full disk, ...) warn once, drop the broken part and keep every episode:
        the part is rewritten from its WAL segment and the episodes kept in memory on the next attempt."""
        try:
            write()
        except Exception as exc:
            self._failed(exc)
            if self._part is not None:
                self._part.abort()
                self._part = None
            self._steps, self._episodes, self._buffered_bytes = [], [], 0  # all in the WAL or in _unlogged
            self._rebuild = True
            self._retry_at = time.monotonic() + _RETRY_SECONDS
            if reraise:
                raise
            return False
        if self._failing and not self._rebuild and not self._unlogged:
            self._failing = False
            _log.info("recording to %s works again; no episode was lost", self.path)
        return True

    def _failed(self, exc: BaseException) -> None:
        if not self._failing:
            self._failing = True
            warnings.warn(f"recording to {self.path} failed ({type(exc).__name__}: {exc}); finished episodes are kept "
                          "(in the write-ahead log, or in memory) and written once it works again", RuntimeWarning,
                          stacklevel=5)

    def _rewrite_part(self) -> None:
        """Write the current part anew from its WAL segment and the episodes kept in memory (after a failure)."""
        part = PartWriter(self.path, self.writer_id, self._seq, compression=self.compression,
                          compression_level=self.compression_level, fsync=self.fsync != "never")
        try:
            steps: list[tuple[Any, ...]] = []
            episodes: list[tuple[Any, ...]] = []
            frames = read_frames(self._wal.path) if self._wal is not None and self._wal.frames else ()
            for episode, rows in itertools.chain(frames, self._unlogged):
                episodes.append(episode)
                steps.extend(rows)
                if len(steps) >= self.row_group_rows:
                    part.write(steps, episodes)
                    steps, episodes = [], []
            part.write(steps, episodes)
        except BaseException:
            part.abort()
            raise
        self._part = part
        self._steps, self._episodes, self._buffered_bytes = [], [], 0
        self._rebuild = False

    # -- shards ---------------------------------------------------------------------------------------------------
    def _write_buffered(self) -> None:
        if self._rebuild:
            self._rewrite_part()
            return
        if not self._steps and not self._episodes:
            return
        if self._part is None:
            self._part = PartWriter(self.path, self.writer_id, self._seq, compression=self.compression,
                                    compression_level=self.compression_level, fsync=self.fsync != "never")
        self._part.write(self._steps, self._episodes)
        self._steps, self._episodes, self._buffered_bytes = [], [], 0

    def _write_row_group(self) -> None:
        self._write_buffered()
        if self._part is not None and (self._part.bytes_written >= self.shard_bytes
                                       or (self._wal is not None and self._wal.size >= WAL_ROLL_BYTES)):
            self._publish()  # a segment past WAL_ROLL_BYTES too: readers refuse one past WAL_SEGMENT_LIMIT

    def _publish(self) -> None:
        """Publish the current part with every buffered episode, delete its WAL segment, start the next part."""
        self._write_buffered()  # a published part must hold every episode of its WAL segment
        if self._part is None and self._wal is None:
            return
        if self._part is not None:
            self._part.commit()
            with contextlib.suppress(OSError):  # the card only refreshes datasets' cache key; the shard is published
                self.run.write_card()
        self._part = None
        if self._wal is not None:
            with contextlib.suppress(OSError):  # its episodes are published: a stale segment is skipped on reading
                self._wal.remove()
        self._wal = None
        self._unlogged = []
        self._seq += 1

    def flush(self) -> None:
        """Write buffered episodes as a row group of the current (still hidden) shard.

        Raises what the write raised (e.g. ``OSError`` on a full disk); no episode is lost to it."""
        with self._mutex:
            self._check_usable()
            self._guard(self._write_buffered, reraise=True)

    def publish(self) -> None:
        """Write buffered episodes and publish the current shard now (readers then need no WAL for them).

        Raises what the write raised (e.g. ``OSError`` on a full disk); no episode is lost to it, and a later
        :meth:`publish` or :meth:`close` publishes them."""
        with self._mutex:
            self._check_usable()
            if self._unlogged:
                self._relog()
            self._guard(self._publish, reraise=True)

    def close(self) -> None:
        """Publish everything and release the run directory (idempotent; a no-op in a forked child).

        Never raises: if publishing fails (a disk still full), a warning says so; the episodes stay in the WAL, where
        :func:`~mcp_gym.recording.load` reads them and the next writer of the directory publishes them. Only
        episodes that never reached the WAL either (kept in memory) are then lost, and the warning counts them.
        """
        with self._mutex:
            if self.closed or os.getpid() != self._pid:
                return
            try:
                if self._unlogged:
                    self._relog()
                if not self._guard(self._publish):
                    lost = len(self._unlogged)
                    if self._wal is not None:
                        with contextlib.suppress(Exception):
                            self._wal.close()
                    warnings.warn(
                        f"closing the trajectory writer for {self.path}: could not publish its last shard; its "
                        "episodes stay in the write-ahead log (load() reads them, the next writer publishes them)"
                        + (f"; {lost} episode(s) that could not be written anywhere are lost" if lost else ""),
                        RuntimeWarning, stacklevel=2)
            finally:
                self.closed = True
                self._lock.release(unlink=True)
                self._job.release()
                _OPEN.discard(self)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"TrajectoryWriter({str(self.path)!r}, writer_id={self.writer_id!r}, "
                f"episodes={self.episodes_written}, steps={self.steps_written})")


def writer_for(target: str | os.PathLike[str] | TrajectoryWriter, **options: Any) -> tuple[TrajectoryWriter, bool]:
    """``(writer, owned)``: the given writer (not owned), or the process's shared writer for a run directory (owned:
    call :meth:`TrajectoryWriter.release` when done)."""
    if isinstance(target, TrajectoryWriter):
        return target, False
    return TrajectoryWriter.shared(target, **options), True
