"""The root of mcp-gym's errors: ``except MCPGymError`` catches every error mcp-gym raises on purpose.

Each error is also the built-in exception it always was (a bad task file is still a ``ValueError``, a dead server's
lost connection an ``Exception`` with a message naming the server), so existing ``except`` clauses keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MCPGymError"]


class MCPGymError(Exception):
    """Base class of every error mcp-gym raises on purpose (strict-mode action errors, bad configs, task files, run
    directories, imports, graders, lost connections).

    Args:
        error: The message, or a structured error (a mapping with ``message`` and, where known, ``kind``, ``tool``,
            ``server`` and ``argument``: what strict mode raises for a refused action).

    Attributes:
        error: The structured error: ``{"message": ...}`` at least.
    """

    error: dict[str, Any]

    def __init__(self, error: Mapping[str, Any] | str = "mcp-gym error", *args: Any) -> None:
        if isinstance(error, Mapping):
            super().__init__(error.get("message", "mcp-gym error"), *args)
            self.error = dict(error)
        else:
            super().__init__(error, *args)
            self.error = {"message": str(error)}
