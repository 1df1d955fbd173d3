"""Trajectory recording: every step of every episode to Parquet, crash-safe and resumable.

Two entry points write the same files: the Gymnasium wrapper :class:`RecordTrajectories` and the MCP client
middlewares :class:`RecordingClient` / :class:`RecordingHost`. :func:`load` reads a run directory back as
``datasets.Dataset`` objects; :class:`RunDirectory` plans episode keys and resumes killed collections;
:class:`RunStore` is the same run directory for jobs, on this machine or any ``pyarrow.fs`` location.
:class:`TrajectoryWriter` is the Parquet writer under both entry points (one :class:`EpisodeWriter` per episode).
:class:`StepRecord` and :class:`EpisodeRecord` define the columns (the Arrow schemas are generated from them); see
:mod:`mcp_gym.recording.schema` for the directory layout.

The names below are imported on first use, so reading a run (``mcp-gym export-sft``) does not import the MCP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_gym._lazy import lazy_names

_EXPORTS: dict[str, str] = {
    "RecordTrajectories": "mcp_gym.recording.wrapper",
    "RecordingClient": "mcp_gym.recording.client",
    "RecordingHost": "mcp_gym.recording.client",
    "TrajectoryWriter": "mcp_gym.recording.writer",
    "EpisodeWriter": "mcp_gym.recording.writer",
    "RunDirectory": "mcp_gym.recording.run",
    "RunStore": "mcp_gym.recording.store",
    "Recording": "mcp_gym.recording.reader",
    "load": "mcp_gym.recording.reader",
    "read_tables": "mcp_gym.recording.reader",
    "StepRecord": "mcp_gym.recording.schema",
    "EpisodeRecord": "mcp_gym.recording.schema",
    "STEPS_SCHEMA": "mcp_gym.recording.schema",
    "EPISODES_SCHEMA": "mcp_gym.recording.schema",
}
__all__ = [
    "RecordTrajectories",
    "RecordingClient",
    "RecordingHost",
    "TrajectoryWriter",
    "EpisodeWriter",
    "RunDirectory",
    "RunStore",
    "Recording",
    "load",
    "read_tables",
    "StepRecord",
    "EpisodeRecord",
    "STEPS_SCHEMA",
    "EPISODES_SCHEMA",
]

if TYPE_CHECKING:
    from mcp_gym.recording.client import RecordingClient, RecordingHost
    from mcp_gym.recording.reader import Recording, load, read_tables
    from mcp_gym.recording.run import RunDirectory
    from mcp_gym.recording.schema import EPISODES_SCHEMA, STEPS_SCHEMA, EpisodeRecord, StepRecord
    from mcp_gym.recording.store import RunStore
    from mcp_gym.recording.wrapper import RecordTrajectories
    from mcp_gym.recording.writer import EpisodeWriter, TrajectoryWriter


__getattr__ = lazy_names(__name__, _EXPORTS)
