"""Bounded memo tables: a plain ``dict`` that holds at most a given number of entries, forgetting its oldest first.

The action space's argument checks made once per validator (:mod:`mcp_gym.spaces`: ``quick_check``, ``fast_check``)
and the ``server/discover`` answers sessions reuse memoise what is costly to make again in module-level dicts;
:func:`keep` is how each adds an entry, so none of them grows without bound in a long-running process. A lookup
stays the dict's own (``table.get(key)``): only a miss, which is about to do the costly work, calls :func:`keep`.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["keep"]

K = TypeVar("K")
V = TypeVar("V")


def keep(table: dict[K, V], key: K, value: V, most: int) -> V:
    """Put ``value`` under ``key`` in ``table``, first forgetting the entry put in first when ``table`` holds ``most``
    entries already (insertion order: the oldest goes); returns ``value``."""
    if len(table) >= most:
        table.pop(next(iter(table)))
    table[key] = value
    return value
