"""Untrusted text shown in the terminal through rich (task ids and tags, graders' reasons, a server's names and
descriptions, run directories' and cassettes' tools): as plain text, never as rich markup, and with its control
characters shown escaped.

Markup would let the text decide what the user sees: a task tag ``[/]`` ends ``mcp-gym eval`` with a ``MarkupError``
after every episode ran, ``[link=https://...]`` plants a hyperlink. Control characters reach the terminal through rich
as they are (it drops only BEL, backspace, vertical tab, form feed and carriage return): an escape sequence from a
tool description could clear the screen, rewrite the lines above (a spoofed success rate), set the window title or,
in terminals that honour OSC 52, the user's clipboard (a command waiting to be pasted). Bidirectional overrides
(U+202A..U+202E, U+2066..U+2069) reorder what is shown. Each becomes ``\\x1b`` / ``\\u202e``; tabs and newlines
stay. Standard library only until a cell is made (rich is imported there)."""

from __future__ import annotations

import logging
import re
from contextlib import suppress
from typing import Any

__all__: list[str] = []  # internal: used by the commands that print tables

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(value: object) -> str:
    """``value`` as text with every control character (but tab and newline) and bidirectional override escaped."""
    return _CONTROL.sub(_escaped, value if isinstance(value, str) else str(value))


def plain(value: object) -> Any:
    """A rich ``Text`` of ``value`` (:func:`printable`): a table cell or title that rich never reads as markup."""
    from rich.text import Text

    return Text(printable(value))


def markup_safe(value: object) -> str:
    """``value`` (:func:`printable`) with rich's markup escaped, to embed in a string that holds markup of its own."""
    from rich.markup import escape

    return escape(printable(value))


def json_printable(value: object, **dumps: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **dumps)`` with every control character and bidirectional override
    written as a JSON ``\\uXXXX`` escape: the JSON reads back the same, and the terminal gets none of them raw (JSON
    itself escapes only U+0000..U+001F)."""
    import json

    text = json.dumps(value, ensure_ascii=False, **dumps)
    return _CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


class PrintableLogs(logging.Filter):
    """A logging filter for handlers that write to the terminal: each record's message (a server's stderr, a task's
    id) is made :func:`printable` before it is formatted (the jobs' handlers, ``conf/config.yaml``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the record's message by its printable form; never drops a record."""
        with suppress(Exception):  # a malformed log call stays as it is: the handler reports it as logging does
            record.msg, record.args = printable(record.getMessage()), None
        return True
