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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from mcp_gym.protocol import catalogue_fingerprint, json_default

__all__ = [
    "SCHEMA_VERSION",
    "STEPS_SCHEMA",
    "EPISODES_SCHEMA",
    "VERSION_KEY",
    "TABLE_KEY",
    "LIBRARY_KEY",
    "STEPS_DIR",
    "EPISODES_DIR",
    "WAL_DIR",
    "MANIFEST",
    "catalogue_fingerprint",
    "Catalogue",
    "dumps",
    "check_version",
]

SCHEMA_VERSION = "1.0"
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

_STEP_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("episode_id", pa.string(), "Episode this call belongs to (joins episodes.episode_id)."),
    ("step_index", pa.int32(), "0-based position of the call in its episode."),
    ("timestamp", _TS, "When the call started (UTC)."),
    ("tool", pa.string(), "Tool name as the agent saw and called it (e.g. 'fs__read_file', or 'submit')."),
    ("server", pa.string(), "Alias of the server that served the call (null for submit and unroutable calls)."),
    ("server_tool", pa.string(), "The server's own name of the tool."),
    ("arguments", pa.string(), "JSON: the arguments the agent sent."),
    ("content", pa.string(), "JSON list of MCP content blocks of the result (text, image/audio as base64, ...)."),
    ("structured_content", pa.string(), "JSON: the result's structuredContent (null if none)."),
    ("is_error", pa.bool_(), "The call failed: isError result, JSON-RPC error, invalid action, ..."),
    ("error", pa.string(), "JSON {kind, tool, server, argument, code, message} when the call failed."),
    ("error_code", pa.int32(), "JSON-RPC error code, when the server answered with one."),
    ("reward", pa.float64(), "Reward of this step (null when the recorder had none)."),
    ("terminated", pa.bool_(), "Gymnasium terminated flag."),
    ("truncated", pa.bool_(), "Gymnasium truncated flag."),
    ("duration", pa.float64(), "Seconds the tool call took."),
    ("observation", pa.string(), "The result text the agent was shown (null outside the Gym loop)."),
    ("resources", pa.string(), "JSON {uri: text} of observed resources after the step (null if none)."),
    ("raw_text", pa.string(), "Model output the action was parsed from (null if not given)."),
    ("parse_status", pa.string(), "Outcome of parsing raw_text into the action, e.g. 'ok' (null if not given)."),
    ("result_truncated", pa.bool_(), "content/structured_content were cut to the recording size limit."),
    ("result_bytes", pa.int64(), "Size in bytes of the result JSON before any truncation."),
    ("info", pa.string(), "JSON: the remaining step info (logs, progress, tools_changed, termination, ...)."),
]

_EPISODE_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("episode_id", pa.string(), "Unique id of the episode."),
    ("episode_key", pa.string(), "Collector-provided stable key (e.g. 'task-7#2'); resume skips recorded keys."),
    ("env_id", pa.string(), "Environment id (e.g. 'mcp_gym/Counter-v0')."),
    ("task_id", pa.string(), "Task id."),
    ("task_prompt", pa.string(), "The task prompt the agent received."),
    ("task", pa.string(), "JSON: the full task record (solution, answer, data, resources)."),
    ("seed", pa.int64(), "Seed of the episode's reset."),
    ("policy", pa.string(), "Name of the policy/model that acted."),
    ("total_reward", pa.float64(), "Sum of step rewards (the episode return)."),
    ("success", pa.bool_(), "Verifier verdict (null without a verifier)."),
    ("length", pa.int32(), "Number of steps."),
    ("termination", pa.string(), "Why it ended: submit, done, max_steps, servers_dead, ..."),
    ("final_answer", pa.string(), "The submitted answer (null if none)."),
    ("tools", pa.string(), "JSON list of the tool schemas the agent saw at the start (incl. submit)."),
    ("catalogue_hash", pa.string(), "Fingerprint of `tools` (catalogue_fingerprint): compare across runs for drift."),
    ("catalogue_changes", pa.string(), "JSON list of {step_index, hash, tools} for every change during the episode."),
    ("servers", pa.string(), "JSON {alias: {name, version, protocol_version, transport, target, status}}."),
    ("initial_observation", pa.string(), "JSON: the observation returned by reset (task, resources)."),
    ("started_at", _TS, "When the episode started (UTC)."),
    ("ended_at", _TS, "When the episode finished (UTC)."),
    ("recorder", pa.string(), "Entry point that recorded it: 'env' (Gym wrapper) or 'client' (MCP middleware)."),
    ("library_version", pa.string(), "mcp-gym version of the recorder."),
    ("metadata", pa.string(), "JSON: free-form metadata given by the collector."),
]


def _schema(fields: list[tuple[str, pa.DataType, str]], table: str) -> pa.Schema:
    from mcp_gym._version import __version__

    return pa.schema(
        [pa.field(name, typ, nullable=True, metadata={b"description": doc.encode()}) for name, typ, doc in fields],
        metadata={VERSION_KEY: SCHEMA_VERSION.encode(), TABLE_KEY: table.encode(), LIBRARY_KEY: __version__.encode()},
    )


STEPS_SCHEMA: pa.Schema = _schema(_STEP_FIELDS, "steps")
"""One row per tool call (or ``submit``)."""
EPISODES_SCHEMA: pa.Schema = _schema(_EPISODE_FIELDS, "episodes")
"""One row per finished episode."""


_fallback = json_default


def _make_json_dumps() -> Callable[[Any], str]:
    """The standard-library encoder (the fallback for what orjson refuses: ints beyond 64 bits, lone surrogates)."""
    slow = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_fallback, allow_nan=False).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - Python without the C accelerator
        return lambda obj: slow(_finite(obj))
    # The C encoder built once (JSONEncoder.encode builds one per call). markers=None skips the circular-reference
    # check: a cyclic value raises RecursionError instead of ValueError.
    encode = make(None, _fallback, json.encoder.c_encode_basestring, None, ":", ",", False, False, True)
    escaped = make(None, _fallback, json.encoder.c_encode_basestring_ascii, None, ":", ",", False, False, True)

    def json_dumps(obj: Any) -> str:
        out = "".join(encode(_finite(obj), 0))
        if not out.isascii():
            try:
                out.encode()
            except UnicodeEncodeError:  # a lone surrogate: escape it (\\udXXX) instead of failing at write time
                out = "".join(escaped(_finite(obj), 0))
        return out

    return json_dumps


def _finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities replaced by None (strict JSON, as orjson writes them)."""
    if isinstance(obj, float):
        return obj if obj - obj == 0.0 else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


_json_dumps = _make_json_dumps()
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(obj: Any) -> str:
    """Compact, strict JSON with non-ASCII kept as is: the one serialiser of every JSON column.

    orjson (4-6x the standard library on step-sized values); NaN and infinities are written as ``null``, non-str keys
    as strings, and values JSON does not know (pydantic models, sets, bytes, ...) as :func:`_fallback` makes them.
    """
    try:
        return orjson.dumps(obj, default=_fallback, option=_ORJSON_OPTIONS).decode()
    except (TypeError, ValueError):  # orjson.JSONEncodeError: ints beyond 64 bits, lone surrogates, deep nesting
        return _json_dumps(obj)


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
