"""Trajectory recording: every step of every episode to Parquet, crash-safe and resumable.

Two entry points write the same files: the Gymnasium wrapper :class:`RecordTrajectories` and the MCP client
middlewares :class:`RecordingClient` / :class:`RecordingHost`. :func:`load` reads a run directory back as
``datasets.Dataset`` objects; :class:`RunDirectory` plans episode keys and resumes killed collections;
:class:`RunStore` is the same run directory for jobs, on this machine or any ``pyarrow.fs`` location.
See :mod:`mcp_gym.recording.schema` for the columns and the directory layout.
"""

from mcp_gym.recording.client import RecordingClient, RecordingHost
from mcp_gym.recording.reader import Recording, load, read_tables
from mcp_gym.recording.run import RunDirectory
from mcp_gym.recording.schema import EPISODES_SCHEMA, SCHEMA_VERSION, STEPS_SCHEMA, catalogue_fingerprint
from mcp_gym.recording.store import RunStore
from mcp_gym.recording.wrapper import RecordTrajectories
from mcp_gym.recording.writer import EpisodeRecorder, TrajectoryWriter

__all__ = [
    "RecordTrajectories",
    "RecordingClient",
    "RecordingHost",
    "TrajectoryWriter",
    "EpisodeRecorder",
    "RunDirectory",
    "RunStore",
    "Recording",
    "load",
    "read_tables",
    "SCHEMA_VERSION",
    "STEPS_SCHEMA",
    "EPISODES_SCHEMA",
    "catalogue_fingerprint",
]
