"""Why an action is refused: :class:`ActionError`, the JSON checks every MCP server needs (:func:`json_error`) and
the bounded renderings used in one-line messages (:func:`safe_repr`)."""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Iterable
from typing import Any

from mcp_gym.protocol import ToolCallError

__all__ = ["MAX_ARGUMENT_DEPTH", "ActionError", "json_error", "safe_repr"]


class ActionError(ToolCallError):
    """Why an action is not in a :class:`~mcp_gym.spaces.ToolCallSpace`: a :class:`~mcp_gym.protocol.ToolCallError`
    (the one error shape; ``server`` is ``None``, the space knows no servers) made as ``ActionError(kind, tool,
    argument, message)``.

    Attributes:
        kind: one of ``"malformed"`` (not ``{"tool": str, "arguments": dict}``), ``"unknown_tool"``,
            ``"invalid_arguments"`` (schema violation or non-JSON value) and ``"too_large"``.
        tool: the tool name, when the action names one (``None`` for malformed actions without a usable name).
        argument: path of the offending argument, like ``items[2].name``, or ``None`` when not specific to one.
        message: one-line human/LLM-readable explanation naming the tool and argument.

    >>> e = ActionError("unknown_tool", "frob", None, "unknown tool 'frob' (available: add)")
    >>> str(e), e.as_dict()["kind"], isinstance(e, ToolCallError)
    ("unknown tool 'frob' (available: add)", 'unknown_tool', True)
    """

    def __init__(self, kind: str, tool: str | None, argument: str | None, message: str) -> None:
        super().__init__(kind, message, tool=tool, argument=argument)

    def __str__(self) -> str:
        """Return :attr:`message`."""
        return self.message


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_MAX_MESSAGE = 300
_MAX_VALUE = 60
_MAX_LISTED_TOOLS = 20


def _render_path(parts: Iterable[Any]) -> str:
    """Render a JSON path (sequence of keys / indices) like ``items[2].name``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not out:
            out = str(part)
        elif _IDENT.match(str(part)):
            out += f".{part}"
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out


def _shorten(text: str, limit: int) -> str:
    """Collapse whitespace runs containing newlines and truncate ``text`` to ``limit`` characters."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render_value(value: Any) -> str:
    """Short JSON-ish rendering of a value for error messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except Exception:  # noqa: BLE001 - not JSON (set, cycle, deep nesting, ...): a bounded repr instead
        text = safe_repr(value)
    return _shorten(text, _MAX_VALUE)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, _MAX_VALUE, _MAX_VALUE, _MAX_VALUE


def safe_repr(value: Any) -> str:
    """A short ``repr`` of any value that never raises: nesting cut after 3 levels (``[[[...]]]``), long texts
    shortened, and ``<Foo object>`` for a value whose ``__repr__`` raises (or an int too long to print)."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__, an int beyond sys.get_int_max_str_digits()
        return f"<{_type_name(value)} object>"


def _fmt_bytes(n: int) -> str:
    """Human-readable byte count: ``512 bytes``, ``12.3 kB``, ``1.3 MB``."""
    if n < 1000:
        return f"{n} bytes"
    if n < 1_000_000:
        return f"{n / 1000:.1f} kB"
    return f"{n / 1_000_000:.1f} MB"


def _type_name(x: Any) -> str:
    """Name of ``x``'s type for messages (``numpy.int64`` rather than ``int64``)."""
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__.split('.')[0]}.{t.__name__}"


MAX_ARGUMENT_DEPTH = 100
"""Deepest nesting of containers accepted in tool arguments (the arguments object is level 1). MCP servers' JSON
parsers stop near 200 levels (the Python SDK's servers then drop the message, so the call would only time out) and
encoders near 255, so deeper arguments are refused before anything is sent."""
_MAX_INT_BITS = 14_284  # below 10**4300: Python's default limit on int <-> str conversion (deeper ints cannot be sent)


def _has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (not UTF-8: no server can read it); encoding runs in C over the
    whole string at once, faster than a regex search over its code points."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class _TooDeep(ValueError):
    """Raised by :func:`_json_size_bound` past :data:`MAX_ARGUMENT_DEPTH`."""


def _json_size_bound(value: Any, depth: int = 0) -> int:
    """Upper bound on the UTF-8 size of ``json.dumps(value, ensure_ascii=False)``; raises if ``value`` is not JSON.

    Much cheaper than serialising large strings (a string of n characters takes at most 6n + 2 bytes). Raises
    TypeError for non-JSON types and non-str keys, ValueError for NaN/infinity, lone surrogates (not UTF-8) and ints
    too long to print, :class:`_TooDeep` for nesting past :data:`MAX_ARGUMENT_DEPTH` (cycles included). The
    recursion is bounded by that depth, so it never exhausts the stack.
    """
    if isinstance(value, str):
        if not value.isascii() and _has_surrogate(value):
            raise ValueError("lone surrogate")
        return 6 * len(value) + 2
    if value is None or isinstance(value, bool):
        return 5
    if isinstance(value, int):
        bits = value.bit_length()
        if bits > _MAX_INT_BITS:
            raise ValueError("integer too long")
        return bits // 3 + 2
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite float")
        return 24
    if isinstance(value, dict):
        if depth >= MAX_ARGUMENT_DEPTH:
            raise _TooDeep
        total = 2
        for key, item in value.items():
            if not isinstance(key, str) or (not key.isascii() and _has_surrogate(key)):
                raise TypeError("bad key")
            if item.__class__ is str and item.isascii():  # the commonest value, without a call
                total += 6 * len(key) + 6 + 6 * len(item) + 2
            else:
                total += 6 * len(key) + 6 + _json_size_bound(item, depth + 1)
        return total
    if isinstance(value, (list, tuple)):
        if depth >= MAX_ARGUMENT_DEPTH:
            raise _TooDeep
        return 2 + sum(_json_size_bound(item, depth + 1) + 2 for item in value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _find_non_json(value: Any, path: list[Any], active: set[int]) -> tuple[list[Any], str] | None:
    """Locate the first value JSON (as MCP servers read it) cannot carry; return (path, reason) or None.

    Only used on the error path. Recursion stops at :data:`MAX_ARGUMENT_DEPTH` (a cycle is named as such first).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not value.isascii() and _has_surrogate(value):
            return path, "the string contains a lone surrogate (not valid UTF-8)"
        return None
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            return path, "the integer has more than 4300 digits"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, f"{value!r} is not a finite number")
    if isinstance(value, (dict, list, tuple)):
        if id(value) in active:
            return path, "circular reference"
        if len(path) >= MAX_ARGUMENT_DEPTH:
            return path, f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        active.add(id(value))
        try:
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str):
                        return path, f"key {safe_repr(key)} ({_type_name(key)}) is not a string"
                    if not key.isascii() and _has_surrogate(key):
                        return path, f"key {key!r} contains a lone surrogate (not valid UTF-8)"
                    found = _find_non_json(item, [*path, key], active)
                    if found:
                        return found
            else:
                for i, item in enumerate(value):
                    found = _find_non_json(item, [*path, i], active)
                    if found:
                        return found
        finally:
            active.discard(id(value))
        return None
    return path, f"{_shorten(safe_repr(value), _MAX_VALUE)} ({_type_name(value)}) is not JSON-serialisable"


def json_error(tool: str, arguments: Any, max_bytes: int | None = None) -> ActionError | None:
    """Why ``arguments`` cannot be sent as the JSON arguments of ``tool`` (``None`` if they can).

    Checks what every MCP server needs, whatever the tool's schema: JSON types only (str keys, finite floats, no
    cycles, no lone surrogates, ints of at most 4300 digits), at most :data:`MAX_ARGUMENT_DEPTH` levels of nesting
    (kind ``too_large``) and, given ``max_bytes``, at most that many bytes of UTF-8 JSON (``too_large``).
    Never raises, whatever ``arguments`` holds.
    """
    try:
        bound = _json_size_bound(arguments)
    except Exception:  # noqa: BLE001 - not JSON (or a container that raises when walked): find out why and where
        try:
            found = _find_non_json(arguments, [], set())
        except Exception as exc:  # noqa: BLE001 - e.g. a dict subclass whose items() raises
            found = ([], f"could not be read ({type(exc).__name__})")
        path, reason = found if found else ([], "arguments are not JSON-serialisable")
        kind = "invalid_arguments"
        if reason.startswith("nested deeper"):  # name the top-level argument, not a path of 100 indices
            kind, path = "too_large", path[:1]
        rendered = _shorten(_render_path(path), 100) or None
        where = f"argument {rendered!r}" if rendered else "arguments"
        return ActionError(kind, tool, rendered, _shorten(f"tool {tool!r}: {where}: {reason}", _MAX_MESSAGE))
    if max_bytes is not None and bound > max_bytes:  # only serialise when the cheap bound says it might be too big
        size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            actual, limit = _fmt_bytes(size), _fmt_bytes(max_bytes)
            if actual == limit:
                actual, limit = f"{size} bytes", f"{max_bytes} bytes"
            return ActionError("too_large", tool, None,
                               f"tool {tool!r}: arguments are {actual} of JSON, over the {limit} limit")
    return None
