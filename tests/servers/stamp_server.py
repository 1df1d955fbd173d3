"""A stdio MCP server for tests whose results carry the time, on a clock the test sets: notes kept as files in the
workspace (``stamp_server.py WORKSPACE``), every result stamped with "now".

"Now" is ``STAMP_EPOCH + (number of server starts so far) // STAMP_EVERY`` seconds, the starts counted in the file
``STAMP_COUNTER``: ``STAMP_EVERY=1`` is a slow machine (every fresh run in a later second), a large ``STAMP_EVERY`` a
fast one (every run in the same second). Whatever a test asserts about such results is then independent of real
timing, and two settings show whether a generator's output depends on it.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
NOTES = ROOT / "notes"
_counter = Path(os.environ["STAMP_COUNTER"])
_starts = int(_counter.read_text() or 0) if _counter.exists() else 0
_counter.write_text(str(_starts + 1))
NOW = datetime.fromtimestamp(int(os.environ.get("STAMP_EPOCH", "1767000000"))
                             + _starts // int(os.environ.get("STAMP_EVERY", "1")), timezone.utc)

server = MCPServer("stamp-test")
READ = ToolAnnotations(readOnlyHint=True)


@server.tool()
def save(name: str, text: str) -> str:
    """Save a note ``name`` with ``text``."""
    if not name.isidentifier():
        raise ValueError(f"bad note name {name!r}: letters, digits and _ only")
    NOTES.mkdir(exist_ok=True)
    (NOTES / name).write_text(text, encoding="utf-8")
    return f"saved {name} ({len(text)} characters) at {NOW.isoformat()}"


@server.tool(annotations=READ)
def notes() -> str:
    """The notes, one a line: name, size, time listed."""
    names = sorted(p.name for p in NOTES.iterdir()) if NOTES.is_dir() else []
    return "\n".join([f"listed: {NOW.isoformat()}", *(f"{n} {len((NOTES / n).read_text())}" for n in names)])


@server.tool(annotations=READ)
def info(name: str) -> str:
    """A note's text and when it was read."""
    path = NOTES / name
    if not name.isidentifier() or not path.is_file():
        raise ValueError(f"no note {name!r}")
    return f"name: {name}\ntext: {path.read_text()}\nread: {NOW.ctime()}\nepoch: {int(NOW.timestamp())}"


if __name__ == "__main__":
    server.run()
