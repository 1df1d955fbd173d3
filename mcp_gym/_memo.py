"""Bounded memo tables: the one home of mcp-gym's module-level memos, none of which may grow without bound in a
long-running process.

* :func:`keep` adds an entry to a plain ``dict`` holding at most a given number of entries, forgetting its oldest
  first: the action space's argument checks made once per validator (:mod:`mcp_gym.spaces`: ``quick_check``,
  ``fast_check``) and the ``server/discover`` answers sessions reuse.
* :class:`BoundedCache` is such a dict keyed by a definition's canonical JSON, bounded in entries and in the
  characters of its keys together: checked schemas, compiled validators and checked tool definitions, whose keys a
  server chooses (round 9 of hostile input).

A lookup stays the dict's own (``table.get(key)``): only a miss, which is about to do the costly work, adds."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["BoundedCache", "keep"]

K = TypeVar("K")
V = TypeVar("V")


def keep(table: dict[K, V], key: K, value: V, most: int) -> V:
    """Put ``value`` under ``key`` in ``table``, first forgetting the entry put in first when ``table`` holds ``most``
    entries already (insertion order: the oldest goes); returns ``value``."""
    if len(table) >= most:
        table.pop(next(iter(table)))
    table[key] = value
    return value


class BoundedCache(dict[Any, Any]):  # keys: canonical JSON, or a tuple ending with it
    """A memo keyed by a definition's canonical JSON, bounded in entries and in the characters of its keys together
    (round 9: keyed by whole definitions, a hostile server's 30 MB tools were kept after it was gone). The oldest
    entries go first; a key larger than a quarter of the budget is not kept."""

    def __init__(self, entries: int, chars: int = 64 << 20) -> None:
        super().__init__()
        self.entries, self.chars, self.used = entries, chars, 0

    @staticmethod
    def _size(key: Any) -> int:
        return len(key[-1]) if isinstance(key, tuple) else len(key)

    def put(self, key: Any, value: Any) -> None:
        """Remember ``value`` under ``key`` (evicting the oldest entries), unless the key alone is too large."""
        size = self._size(key)
        if size > self.chars // 4 or key in self:
            return
        while self and (len(self) >= self.entries or self.used + size > self.chars):
            self.used -= self._size(next(iter(self)))
            self.pop(next(iter(self)))
        self[key] = value
        self.used += size
