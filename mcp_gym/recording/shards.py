"""Parquet shards: writing one part (a steps shard and an episodes shard) atomically, listing and reading them.

A part is written to hidden ``.part-….parquet.tmp`` files (readers and ``datasets`` skip names starting with a dot)
and becomes visible only in :meth:`PartWriter.commit`: close, fsync, ``os.replace`` (steps first, then episodes), fsync
the directories. A process killed before that leaves only hidden files, never a torn visible shard.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mcp_gym.errors import MCPGymError
from mcp_gym.recording._contained import RunFileRefused, check_run_file
from mcp_gym.recording.schema import EPISODES_DIR, EPISODES_SCHEMA, STEPS_DIR, STEPS_SCHEMA, check_version

__all__: list[str] = []  # internal to mcp_gym.recording: used by its sibling modules only

_log = logging.getLogger("mcp_gym.recording")
TABLES: dict[str, pa.Schema] = {STEPS_DIR: STEPS_SCHEMA, EPISODES_DIR: EPISODES_SCHEMA}


def part_name(writer_id: str, seq: int) -> str:
    """File name of a writer's ``seq``-th part (the same in ``steps/`` and ``episodes/``)."""
    return f"part-{writer_id}-{seq:05d}.parquet"


def _scrub(value: Any) -> Any:
    """A string with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value


def _value(value: Any, typ: pa.DataType) -> Any:
    """``value`` if the column type can hold it, else ``None``."""
    try:
        pa.array([value], type=typ)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return None
    return value


def _array(column: Sequence[Any], typ: pa.DataType, name: str = "") -> pa.Array:
    try:
        return pa.array(column, type=typ)
    except UnicodeEncodeError:  # a lone surrogate (e.g. from a "\\ud800" JSON escape) must not block the writer
        return pa.array([_scrub(v) for v in column], type=typ)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
        # A value the column cannot hold (e.g. a turn >= 2**31 in a WAL written before the recorder checked it):
        # it becomes null rather than failing the shard, and with it every later write and read of the run.
        kept = [_value(v, typ) for v in column]
        _log.warning("column %s: %d value(s) its type %s cannot hold stored as null (%s)", name or "?",
                     sum(k is None and v is not None for k, v in zip(kept, column, strict=True)), typ, exc)
        return pa.array(kept, type=typ)


def rows_to_batch(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """A record batch of row tuples under an explicit schema (no type inference)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [_array(col, field.type, field.name) for col, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename in it is durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class PartWriter:
    """Writes one part of a run: row groups go to hidden temp files until :meth:`commit`."""

    def __init__(
        self,
        root: Path,
        writer_id: str,
        seq: int,
        *,
        compression: str = "zstd",
        compression_level: int | None = None,
        fsync: bool = True,
    ) -> None:
        self.root = root
        self.name = part_name(writer_id, seq)
        self.compression = compression
        self.compression_level = compression_level
        self.fsync = fsync
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.rows = 0

    def _tmp(self, table: str) -> Path:
        return self.root / table / f".{self.name}.tmp"

    def _open(self, table: str) -> pq.ParquetWriter:
        w = self._writers.get(table)
        if w is None:  # a path, not a Python file object: Arrow then writes natively, without the GIL
            w = self._writers[table] = pq.ParquetWriter(
                str(self._tmp(table)), TABLES[table], compression=self.compression,
                compression_level=self.compression_level,
            )
        return w

    def write(self, steps: Sequence[tuple[Any, ...]], episodes: Sequence[tuple[Any, ...]]) -> None:
        """Write the rows as one row group per table."""
        if steps:
            self._open(STEPS_DIR).write_batch(rows_to_batch(steps, STEPS_SCHEMA), row_group_size=len(steps))
            self.rows += len(steps)
        if episodes:
            self._open(EPISODES_DIR).write_batch(rows_to_batch(episodes, EPISODES_SCHEMA),
                                                 row_group_size=len(episodes))

    @property
    def bytes_written(self) -> int:
        """Bytes written to the steps shard so far."""
        return self._tmp(STEPS_DIR).stat().st_size if STEPS_DIR in self._writers else 0

    @property
    def empty(self) -> bool:
        """Nothing was written."""
        return not self._writers

    def commit(self) -> None:
        """Close, fsync and atomically rename the temp files to their visible names (steps first)."""
        for table in (STEPS_DIR, EPISODES_DIR):
            w = self._writers.pop(table, None)
            if w is None:
                continue
            w.close()
            tmp = self._tmp(table)
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, self.root / table / self.name)
            if self.fsync:
                fsync_dir(self.root / table)

    def abort(self) -> None:
        """Close and delete the temp files (never raises: it cleans up after a failed write, e.g. a full disk)."""
        for table in (STEPS_DIR, EPISODES_DIR):
            w = self._writers.pop(table, None)
            if w is not None:
                with contextlib.suppress(Exception):  # a writer broken by the failure cannot flush its footer
                    w.close()
            with contextlib.suppress(OSError):
                self._tmp(table).unlink(missing_ok=True)


def list_shards(root: Path, table: str) -> list[Path]:
    """Visible (finished) shards of a table, in name order (writers' ids start with their start time)."""
    d = root / table
    if not d.is_dir():
        return []
    shards = sorted(p for p in d.iterdir() if p.name.endswith(".parquet") and not p.name.startswith((".", "_")))
    for p in shards:  # a run is untrusted: a shard linked into another run, a pipe or a device is refused, unread
        try:
            check_run_file(root, p)
        except RunFileRefused as exc:
            raise ShardRefused(str(exc)) from None
    return shards


MAX_INFLATION = 1000
"""A shard whose data decodes to more than this many times its size on disk (and more than :data:`FREE_BYTES`) is
refused unread: recorded JSON compresses 5-20x; a 14 kB file that decodes to 1.5 GB is a compression bomb."""
FREE_BYTES = 256 << 20
"""Decoded bytes every shard may have, whatever its size on disk."""
MAX_FOOTER_BYTES = 64 << 20
"""Longest Parquet footer (the file's metadata) a shard may declare: the reader allocates it whole before parsing it,
so a sparse file (no disk used) declaring a 3 GiB footer cost 3 GiB of memory. mcp-gym's shards hold at most a few
hundred row groups of about 6 kB of metadata each (a few MB)."""


class ShardRefused(MCPGymError, ValueError):
    """A shard is refused: before it is decoded (see :data:`MAX_INFLATION`), without a key column (see
    :data:`KEY_COLUMNS`) or repeating what another shard holds (:func:`check_unique`); the message names it in one
    line."""


KEY_COLUMNS: dict[str, tuple[str, ...]] = {STEPS_DIR: ("episode_id", "step_index"), EPISODES_DIR: ("episode_id",)}
"""Columns every shard of a table has (since schema 1.0) and every row sets: a shard without them is refused (its
rows would join no episode: a run that reads as episodes without steps)."""


def _decoded_bytes(table: pa.Table) -> int:
    """Bytes ``table`` takes once its dictionary columns are decoded (counted without decoding them: the lengths of
    the dictionary entries, summed over the indices, in numpy; a kernel call per chunk cost as much as the read)."""
    total = 0
    for col in table.columns:
        if not pa.types.is_dictionary(col.type):
            total += col.nbytes
            continue
        for chunk in col.chunks:
            total += 4 * len(chunk)
            d = chunk.dictionary
            if len(d) and pa.types.is_string(d.type):
                offsets = np.frombuffer(d.buffers()[1], dtype=np.int32)[d.offset : d.offset + len(d) + 1]
                ind = chunk.indices
                total += int(np.diff(offsets)[(ind.fill_null(0) if ind.null_count else ind).to_numpy()].sum())
            else:
                total += d.nbytes
    return total


def _refuse(path: Path | str, what: str, size: int, limit: int) -> ShardRefused:
    return ShardRefused(f"{path}: refusing to read this shard: {what} from {size} bytes on disk, over the {limit} "
                        f"allowed ({MAX_INFLATION}x its size, at least {FREE_BYTES}): a compression bomb, not a "
                        "recording")


def read_shard(
    path: Path | str, table: str, columns: Sequence[str] | None = None, *, filesystem: Any = None
) -> pa.Table:
    """A shard conformed to the current schema: version checked, columns of older minor versions filled with nulls.

    Raises :class:`ShardRefused` (before decoding what is too much) for a shard whose data would decode to more than
    :data:`MAX_INFLATION` times its size on disk: first by the sizes its metadata declares, then by what its data
    really decodes to, string columns counted while still dictionary-encoded (a one-value dictionary repeated a
    million times is small on disk and in the metadata).

    ``filesystem``: a ``pyarrow.fs.FileSystem`` that ``path`` is in (default: the local one)."""
    try:
        return _read_shard(path, table, columns, filesystem)
    except (pa.ArrowException, OSError) as exc:  # ArrowInvalid is a ValueError, ArrowIOError an OSError
        if isinstance(exc, FileNotFoundError):
            raise
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ShardRefused(f"{path}: refusing to read this shard: not a readable Parquet file ({detail})") from exc


def _footer_bytes(path: Path | str, size: int, filesystem: Any) -> int:
    """The footer length a Parquet file's last 8 bytes declare (0 when there is no Parquet trailer: pyarrow says why).
    """
    if size < 12:
        return 0
    opened = filesystem.open_input_file(str(path)) if filesystem is not None else open(path, "rb")  # noqa: SIM115
    with opened as f:
        f.seek(size - 8)
        tail = f.read(8)
    return int.from_bytes(tail[:4], "little") if len(tail) == 8 and tail[4:] == b"PAR1" else 0


def _read_shard(path: Path | str, table: str, columns: Sequence[str] | None, filesystem: Any) -> pa.Table:
    schema = TABLES[table]
    size = filesystem.get_file_info(str(path)).size if filesystem is not None else os.path.getsize(path)
    limit = max(FREE_BYTES, MAX_INFLATION * size)
    names = list(columns) if columns is not None else schema.names
    if (footer := _footer_bytes(path, size, filesystem)) > MAX_FOOTER_BYTES:
        raise ShardRefused(f"{path}: refusing to read this shard: its footer declares {footer} bytes of "
                           f"metadata, over the {MAX_FOOTER_BYTES} allowed (a file of {size} bytes, sparse or "
                           "padded): not a recording")
    md = pq.read_metadata(path, filesystem=filesystem)
    on_disk = md.schema.to_arrow_schema()
    check_version(on_disk, str(path))
    lacking = [n for n in KEY_COLUMNS[table] if n not in on_disk.names]
    if lacking:
        raise ShardRefused(f"{path}: refusing to read this shard: it has no {' or '.join(lacking)} column (every "
                           f"{table} shard has it): not an intact recording")
    present = [n for n in names if n in on_disk.names]
    strings = [n for n in present if pa.types.is_string(schema.field(n).type)]
    pf = pq.ParquetFile(path, filesystem=filesystem, metadata=md, read_dictionary=strings)
    wanted = {on_disk.get_field_index(n) for n in present}
    declared = sum(max(0, md.row_group(i).column(j).total_uncompressed_size)
                   for i in range(md.num_row_groups) for j in wanted)
    if declared > limit:
        raise _refuse(path, f"its metadata declares {declared} bytes of data", size, limit)
    t = pf.read(columns=present)  # string columns still dictionary-encoded: as small as on disk
    decoded = _decoded_bytes(t)
    if decoded > limit:
        raise _refuse(path, f"its data decodes to {decoded} bytes", size, limit)
    for n in KEY_COLUMNS[table]:
        if n in present and (nulls := t.column(n).null_count):
            raise ShardRefused(f"{path}: refusing to read this shard: {nulls} of its {t.num_rows} rows have no {n} "
                               "(every recorded row has one): not an intact recording")
    arrays = [
        t.column(n).cast(schema.field(n).type) if n in present else pa.nulls(t.num_rows, schema.field(n).type)
        for n in names
    ]
    return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names], metadata=schema.metadata))


def check_unique(shards: Sequence[tuple[str, pa.Table]], table: str) -> None:
    """Raise :class:`ShardRefused`, naming the file, when a row's key (:data:`KEY_COLUMNS`: an episode, or a step of
    an episode) is in two of ``shards`` (``(path, table)`` pairs, e.g. a shard copied under another name) or twice in
    one: a run read so would count its episodes or steps twice."""
    keys = KEY_COLUMNS[table]
    tables = [t.select(list(keys)) for _, t in shards if all(k in t.column_names for k in keys)]
    if not tables:
        return
    every = pa.concat_tables(tables)
    counts = every.group_by(list(keys)).aggregate([([], "count_all")])
    if counts.num_rows == every.num_rows:
        return  # the usual case: one pass in Arrow
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1)).slice(0, 1).to_pylist()[0]
    key = tuple(repeated[k] for k in keys)
    holders: list[tuple[str, int]] = []
    for path, t in shards:
        mask = pc.and_(*(pc.equal(t.column(k), v) for k, v in zip(keys, key, strict=True))) if len(keys) > 1 \
            else pc.equal(t.column(keys[0]), key[0])
        if n := pc.sum(mask.cast(pa.int64())).as_py() or 0:
            holders.append((path, n))
    what = f"episode {key[0]!r}" + (f" step {key[1]}" if len(key) > 1 else "")
    first = holders[0][0]
    if len(holders) > 1:
        raise ShardRefused(f"{holders[1][0]}: refusing to read this run: {what} is also in {first} (a copied or "
                           f"repeated shard: remove one)")
    raise ShardRefused(f"{first}: refusing to read this run: {what} is in this shard {holders[0][1]} times (repeated "
                       "rows: not an intact recording)")
