"""The trajectory file format: two explicit, versioned Arrow schemas (steps and episodes) and the run-directory layout.

Free-form values (tool arguments, content blocks, structured results, info) are JSON strings, never inferred structs:
Arrow's struct inference unions keys across rows and files and silently loses fields (see the project's research
notes). Every Parquet shard carries :data:`SCHEMA_VERSION` in its file metadata.

Layout of a run directory::

    run/
      manifest.json                       # format, schema version, planned episode keys
      steps/part-<writer>-<seq>.parquet   # one row per tool call
      episodes/part-<writer>-<seq>.parquet
      steps/.part-....parquet.tmp         # shard being written (hidden: readers skip it)
      .wal/<writer>-<seq>.wal             # write-ahead log of finished episodes not yet in a published shard
      .wal/<writer>.lock                  # held (flock) by a live writer; free once it died
      .job.lock                           # flock: exclusive for the job writing the run, shared by every writer
"""

from __future__ import annotations

import json
import operator
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

import orjson
import pyarrow as pa

from mcp_gym._compat import stdlib as stdlib_compat
from mcp_gym.protocol import catalogue_fingerprint, json_default

__all__ = [
    "StepRecord",
    "EpisodeRecord",
    "STEPS_SCHEMA",
    "EPISODES_SCHEMA",
    "STEPS_DIR",
    "EPISODES_DIR",
    "MANIFEST",
    "dumps",
]

SCHEMA_VERSION = "1.2"
"""``major.minor`` of the file format. A minor bump only adds nullable columns (older files read with nulls); a major
bump changes meaning, and readers refuse files of another major version."""

VERSION_KEY = b"mcp_gym.schema_version"
TABLE_KEY = b"mcp_gym.table"
LIBRARY_KEY = b"mcp_gym.library_version"

STEPS_DIR = "steps"
EPISODES_DIR = "episodes"
WAL_DIR = ".wal"
MANIFEST = "manifest.json"

_TS = pa.timestamp("us", tz="UTC")

def column(arrow: pa.DataType, doc: str, *, nullable: bool = True) -> Any:
    """One column of a record class: its Arrow type, nullability and description (stored as the Arrow field's
    ``description`` metadata). Every column defaults to ``None``."""
    return field(default=None, metadata={"arrow": arrow, "doc": doc, "nullable": nullable})


class _Record:
    """Base of the record classes: a row of a table as a typed object, and the table's Arrow schema generated from it.

    A row on disk (a WAL frame) and in the writer's buffers is a plain tuple of the record's fields in declaration
    order: :meth:`row` makes one, :meth:`from_row` reads one back (rows of an older minor version, which lack the
    columns added since, get nulls for them); :attr:`ROW` makes one from a mapping by column name. The column order
    lives only in the class (the writer's per-step tuple, positional for speed, is tested against it).
    """

    __slots__ = ()
    TABLE: ClassVar[str]
    COLUMNS: ClassVar[tuple[str, ...]]
    """Column names in order."""
    ROW: ClassVar[Callable[[Mapping[str, Any]], tuple[Any, ...]]]
    """``ROW({column: value, ...})``: the row tuple of a mapping holding every column (``KeyError`` names a missing
    one)."""
    SCHEMA: ClassVar[pa.Schema]
    """The table's Arrow schema (all columns nullable; schema version and table name in its metadata)."""

    _GET: ClassVar[Callable[[Any], tuple[Any, ...]]]

    def row(self) -> tuple[Any, ...]:
        """This record as a row tuple (the WAL and Parquet writer's form)."""
        return type(self)._GET(self)

    @classmethod
    def pad(cls, row: Sequence[Any]) -> tuple[Any, ...]:
        """A row tuple of any minor version in the current column order: columns added since are null (and columns
        of a newer minor version dropped, as when reading its Parquet shards)."""
        width = len(cls.COLUMNS)
        row = tuple(row)
        return row if len(row) == width else (row + (None,) * (width - len(row)))[:width]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Any:
        """The record of a row tuple (see :meth:`pad`)."""
        return cls(*cls.pad(row))


_R = TypeVar("_R", bound=_Record)


def _table(name: str) -> Callable[[type[_R]], type[_R]]:
    """Class decorator (outside ``@dataclass``): the table's column names, row builder and Arrow schema."""

    def make(cls: type[_R]) -> type[_R]:
        from mcp_gym._version import __version__

        cols = fields(cls)  # type: ignore[arg-type]  # applied to dataclasses only (the records)
        cls.TABLE = name
        cls.COLUMNS = tuple(f.name for f in cols)
        cls.ROW = operator.itemgetter(*cls.COLUMNS)
        cls._GET = operator.attrgetter(*cls.COLUMNS)
        cls.SCHEMA = pa.schema(
            [pa.field(f.name, f.metadata["arrow"], nullable=f.metadata["nullable"],
                      metadata={b"description": f.metadata["doc"].encode()}) for f in cols],
            metadata={VERSION_KEY: SCHEMA_VERSION.encode(), TABLE_KEY: name.encode(),
                      LIBRARY_KEY: __version__.encode()},
        )
        return cls

    return make


@_table("steps")
@dataclass(slots=True)
class StepRecord(_Record):
    """One row of the ``steps`` table: one tool call (or ``submit``). Timestamps are microseconds since the epoch
    (UTC), JSON columns are JSON text (see :func:`dumps`). The fields' order is the column order."""

    episode_id: str | None = column(pa.string(), "Episode this call belongs to (joins episodes.episode_id).")
    step_index: int | None = column(pa.int32(), "0-based position of the call in its episode.")
    timestamp: int | None = column(_TS, "When the call started (UTC).")
    tool: str | None = column(pa.string(), "Tool name as the agent saw and called it (e.g. 'fs__read_file', or "
                              "'submit').")
    server: str | None = column(pa.string(), "Alias of the server that served the call (null for submit and "
                                "unroutable calls).")
    server_tool: str | None = column(pa.string(), "The server's own name of the tool.")
    arguments: str | None = column(pa.string(), "JSON: the arguments the agent sent.")
    content: str | None = column(pa.string(), "JSON list of MCP content blocks of the result (text, image/audio as "
                                 "base64, ...).")
    structured_content: str | None = column(pa.string(), "JSON: the result's structuredContent (null if none).")
    is_error: bool | None = column(pa.bool_(), "The call failed: isError result, JSON-RPC error, invalid action, ...")
    error: str | None = column(pa.string(), "JSON {kind, tool, server, argument, code, message} when the call "
                               "failed.")
    error_code: int | None = column(pa.int32(), "JSON-RPC error code, when the server answered with one.")
    reward: float | None = column(pa.float64(), "Reward of this step (null when the recorder had none).")
    terminated: bool | None = column(pa.bool_(), "Gymnasium terminated flag.")
    truncated: bool | None = column(pa.bool_(), "Gymnasium truncated flag.")
    duration: float | None = column(pa.float64(), "Seconds the tool call took.")
    observation: str | None = column(pa.string(), "The result text the agent was shown (null outside the Gym loop).")
    resources: str | None = column(pa.string(), "JSON {uri: text} of observed resources after the step (null if "
                                   "none).")
    raw_text: str | None = column(pa.string(), "Model output the action was parsed from (null if not given).")
    parse_status: str | None = column(pa.string(), "Outcome of parsing raw_text into the action, e.g. 'ok' (null if "
                                      "not given).")
    result_truncated: bool | None = column(pa.bool_(), "content/structured_content were cut to the recording size "
                                           "limit.")
    result_bytes: int | None = column(pa.int64(), "Size in bytes of the result JSON before any truncation.")
    info: str | None = column(pa.string(), "JSON: the remaining step info (logs, progress, tools_changed, "
                              "termination, ...).")
    # 1.1
    turn: int | None = column(pa.int32(), "0-based index of the model reply the action came from (steps of one reply "
                              "share it; null if not from a model).")
    assistant_content: str | None = column(pa.string(), "The reply's own text as the chat view shows it back: "
                                           "content without tool-call markup, or the whole text of a reply without a "
                                           "call (null if not from a model).")
    # 1.2
    user_turn: int | None = column(pa.int32(), "0-based user turn of a multi-turn task the step was taken in (a "
                                   "submit that ends a turn belongs to it; null for a single-turn task).")


@_table("episodes")
@dataclass(slots=True)
class EpisodeRecord(_Record):
    """One row of the ``episodes`` table: one finished episode. Timestamps are microseconds since the epoch (UTC),
    JSON columns are JSON text (see :func:`dumps`). The fields' order is the column order."""

    episode_id: str | None = column(pa.string(), "Unique id of the episode.")
    episode_key: str | None = column(pa.string(), "Collector-provided stable key (e.g. 'task-7#2'); resume skips "
                                     "recorded keys.")
    env_id: str | None = column(pa.string(), "Environment id (e.g. 'mcp_gym/Counter-v0').")
    task_id: str | None = column(pa.string(), "Task id.")
    task_prompt: str | None = column(pa.string(), "The task prompt the agent received.")
    task: str | None = column(pa.string(), "JSON: the full task record (solution, answer, data, resources).")
    seed: int | None = column(pa.int64(), "Seed of the episode's reset.")
    policy: str | None = column(pa.string(), "Name of the policy/model that acted.")
    total_reward: float | None = column(pa.float64(), "Sum of step rewards (the episode return).")
    success: bool | None = column(pa.bool_(), "Verifier verdict (null without a verifier).")
    length: int | None = column(pa.int32(), "Number of steps.")
    termination: str | None = column(pa.string(), "Why it ended: submit, done, max_steps, servers_dead, ...")
    final_answer: str | None = column(pa.string(), "The submitted answer (null if none).")
    tools: str | None = column(pa.string(), "JSON list of the tool schemas the agent saw at the start (incl. "
                               "submit).")
    catalogue_hash: str | None = column(pa.string(), "Fingerprint of `tools` (catalogue_fingerprint): compare across "
                                        "runs for drift.")
    catalogue_changes: str | None = column(pa.string(), "JSON list of {step_index, hash, tools} for every change "
                                           "during the episode.")
    servers: str | None = column(pa.string(), "JSON {alias: {name, version, protocol_version, transport, target, "
                                 "status}}.")
    initial_observation: str | None = column(pa.string(), "JSON: the observation returned by reset (task, "
                                             "resources).")
    started_at: int | None = column(_TS, "When the episode started (UTC).")
    ended_at: int | None = column(_TS, "When the episode finished (UTC).")
    recorder: str | None = column(pa.string(), "Entry point that recorded it: 'env' (Gym wrapper) or 'client' (MCP "
                                  "middleware).")
    library_version: str | None = column(pa.string(), "mcp-gym version of the recorder.")
    metadata: str | None = column(pa.string(), "JSON: free-form metadata given by the collector.")


STEPS_SCHEMA: pa.Schema = StepRecord.SCHEMA
"""One row per tool call (or ``submit``): the columns of :class:`StepRecord`."""
EPISODES_SCHEMA: pa.Schema = EpisodeRecord.SCHEMA
"""One row per finished episode: the columns of :class:`EpisodeRecord`."""


UNENCODABLE_KEY = "mcp_gym_unencodable"
"""A value the writer could not encode as JSON is stored as ``{"mcp_gym_unencodable": "<reason>"}`` in its place."""
_MAX_DEPTH = 400  # the fallback encoder's nesting limit (it recurses; deeper subtrees become markers)
_MAX_INT_BITS = 14_284  # ints below 10**4300 (Python's int <-> str limit) are written as numbers


def unencodable(reason: str) -> dict[str, str]:
    """The marker stored in place of a value that cannot be encoded (see :data:`UNENCODABLE_KEY`)."""
    return {UNENCODABLE_KEY: reason}


def safe_text(value: Any, limit: int = 200) -> str:
    """A short printable text of any value that never raises (``reprlib``-bounded; ``<Foo object>`` when even
    that fails): for names and labels that must be strings (e.g. a tool "name" that is a nested list)."""
    if value.__class__ is str:
        return value if len(value) <= limit else value[: limit - 1] + "…"
    try:
        return _REPR.repr(value)[:limit]
    except Exception:  # noqa: BLE001 - a hostile __repr__, an int too long to print
        return f"<{type(value).__name__} object>"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 100, 100, 100


def _fallback(o: Any) -> Any:
    """JSON for values the json module does not know (:func:`mcp_gym.protocol.json_default`: numpy scalars/arrays,
    pydantic models, bytes, sets); anything else as its (safe, bounded) text."""
    try:
        return json_default(o)
    except Exception:  # noqa: BLE001 - a hostile __str__/model_dump: record what we can say about it
        return safe_text(o)


def _key(k: Any) -> str:
    """A dict key as JSON text, as orjson's ``OPT_NON_STR_KEYS`` writes it."""
    if k.__class__ is str:
        return k
    if k is None or isinstance(k, bool):
        return "null" if k is None else ("true" if k else "false")
    if isinstance(k, (int, float)) and (not isinstance(k, int) or k.bit_length() <= _MAX_INT_BITS):
        return json.dumps(k) if k - k == 0 else "null"
    return safe_text(k)


def _plain(obj: Any, depth: int, active: set[int]) -> Any:
    """``obj`` as plain JSON values for the fallback encoder: NaN and infinities as null, keys as text, unknown
    values through :func:`_fallback`; a cycle, nesting past the limit or an int too long to print becomes a marker
    (:func:`unencodable`) in its place."""
    cls = obj.__class__
    if cls is str or obj is None or cls is bool:
        return obj
    if isinstance(obj, float):
        return obj if obj - obj == 0.0 else None
    if isinstance(obj, int):
        return int(obj) if obj.bit_length() <= _MAX_INT_BITS else unencodable("integer with more than 4300 digits")
    if isinstance(obj, str):
        return str(obj)
    if depth >= _MAX_DEPTH:
        return unencodable(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(obj, (dict, list, tuple)):
        if id(obj) in active:
            return unencodable("circular reference")
        active.add(id(obj))
        try:
            if isinstance(obj, dict):
                out: Any = {}
                for k, v in obj.items():
                    out[_key(k)] = _plain(v, depth + 1, active)
            else:
                out = []
                for v in obj:
                    out.append(_plain(v, depth + 1, active))
        finally:
            active.discard(id(obj))
        return out
    return _plain(_fallback(obj), depth + 1, active)


def _make_json_dumps() -> Callable[[Any], str]:
    """The standard-library encoder (the fallback for what orjson refuses: ints beyond 64 bits, lone surrogates, deep
    nesting, cycles, keys it does not know), over :func:`_plain`'s copy of the value."""
    slow = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_fallback, allow_nan=False).encode
    encoders = stdlib_compat.c_json_encoders(_fallback)  # without their circular-reference check: _plain did that
    if encoders is None:  # Python without the C accelerator (warned once)
        return lambda obj: slow(_plain(obj, 0, set()))
    encode, escaped = encoders

    def json_dumps(obj: Any) -> str:
        plain = _plain(obj, 0, set())
        out = "".join(encode(plain, 0))
        if not out.isascii():
            try:
                out.encode()
            except UnicodeEncodeError:  # a lone surrogate: escape it (\\udXXX) instead of failing at write time
                out = "".join(escaped(plain, 0))
        return out

    return json_dumps


_json_dumps = _make_json_dumps()
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(obj: Any) -> str:
    """Compact, strict JSON with non-ASCII kept as is: the one serialiser of every JSON column. Never raises.

    orjson (4-6x the standard library on step-sized values); NaN and infinities are written as ``null``, non-str keys
    as strings, and values JSON does not know (pydantic models, sets, bytes, ...) as :func:`_fallback` makes them.
    What cannot be encoded at all (a cycle, nesting deeper than 400 levels, an int of more than 4300 digits) is
    written as the marker ``{"mcp_gym_unencodable": "<reason>"}`` in its place, so a record is never lost to it.
    """
    try:
        return orjson.dumps(obj, default=_fallback, option=_ORJSON_OPTIONS).decode()
    except Exception:  # noqa: BLE001 - orjson.JSONEncodeError: big ints, lone surrogates, deep nesting, cycles, ...
        pass
    try:
        return _json_dumps(obj)
    except Exception as exc:  # noqa: BLE001 - e.g. RecursionError on a stack already deep: the whole value
        return orjson.dumps(unencodable(f"{type(exc).__name__} while encoding")).decode()


@dataclass(frozen=True)
class Catalogue:
    """A tool catalogue serialised once: its JSON (the ``tools`` column) and fingerprint (``catalogue_hash``).

    Recorders reuse one while the catalogue is unchanged, so an episode start does not re-serialise every schema.
    """

    json: str
    hash: str

    @classmethod
    def of(cls, tools: Sequence[Mapping[str, Any]]) -> Catalogue:
        """Serialise a list of tool schemas."""
        return cls(dumps(list(tools)), catalogue_fingerprint(tools))


def check_version(schema: pa.Schema, where: str) -> str:
    """The schema version of a file's schema; raises ``ValueError`` on another major version."""
    meta = schema.metadata or {}
    version = meta.get(VERSION_KEY, b"").decode() or "0"
    if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ValueError(f"{where}: schema version {version} is not readable by this mcp-gym (reads {SCHEMA_VERSION})")
    return version
