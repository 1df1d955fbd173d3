"""The cassette file format (``mcp-gym-cassette`` version 1, described in :mod:`mcp_gym.cassette`): its
constants, the canonical form of request params (the matching key on replay), and where cassettes live."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp import MCPError

from mcp_gym.client.connection import ConnectionLost
from mcp_gym.protocol import EPISODE_META_KEY, SEED_META_KEY, TASK_META_KEY

__all__ = [
    "FORMAT", "VERSION", "REPLAY_MISS", "CASSETTES_DIR", "canonical_params", "canonical_json", "cassette_path",
    "cassette_dir"
]

FORMAT = "mcp-gym-cassette"
VERSION = 1
REPLAY_MISS = -32042
"""JSON-RPC error code of a request the cassette has no answer for."""
CASSETTES_DIR = "cassettes"
"""Conventional sub-directory of a run directory holding its cassettes."""

_VOLATILE_META = frozenset({EPISODE_META_KEY, TASK_META_KEY, SEED_META_KEY, "progressToken"})
_SDK_META_PREFIX = "io.modelcontextprotocol/"
_LISTINGS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})
_REPEATABLE = _LISTINGS | {"resources/read"}
_NOT_RECORDED = frozenset({"notifications/progress", "notifications/cancelled"})


# -- canonical form -----------------------------------------------------------------------------------------------
def _clean_meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        return {}
    return {k: v for k, v in meta.items() if k not in _VOLATILE_META and not str(k).startswith(_SDK_META_PREFIX)}


def canonical_params(method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Request params without the ``_meta`` keys that differ between runs (episode id, task, seed, progress token,
    SDK envelope keys), without ``null`` values, and with ``tools/call`` arguments defaulting to ``{}``."""
    out = {k: v for k, v in dict(params or {}).items() if v is not None and k != "_meta"}
    meta = _clean_meta((params or {}).get("_meta"))
    if meta:
        out["_meta"] = meta
    if method == "tools/call":
        out.setdefault("arguments", {})
    return out


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: the matching key of params."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _result_dict(result: Any) -> dict[str, Any]:
    data = dict(_dump(result) or {})
    meta = data.get("_meta")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if not k.startswith(_SDK_META_PREFIX)}
        if meta:
            data["_meta"] = meta
        else:
            data.pop("_meta")
    return data


def _error_dict(e: BaseException) -> dict[str, Any]:
    if isinstance(e, MCPError):
        err: dict[str, Any] = {"code": e.code, "message": e.error.message}
        if e.error.data is not None:
            err["data"] = _dump(e.error.data)
        return err
    if isinstance(e, ConnectionLost):
        return {"code": -32000, "message": str(e), "data": {"exception": "ConnectionLost"}}
    return {"code": -32603, "message": f"{type(e).__name__}: {e}", "data": {"exception": type(e).__name__}}


def cassette_path(record: str | os.PathLike[str], alias: str) -> Path:
    """The cassette file for ``record=`` of server ``alias``: the path itself if it ends in ``.jsonl``, else
    ``<record>/<alias>.jsonl``."""
    p = Path(record)
    return p if p.suffix == ".jsonl" else p / f"{alias}.jsonl"


def cassette_dir(run_dir: str | os.PathLike[str]) -> Path:
    """Where a run directory keeps its cassettes (``<run>/cassettes``)."""
    return Path(run_dir) / CASSETTES_DIR


