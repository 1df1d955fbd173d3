"""SSE ``retry:`` fields read as the SSE specification says, on the SDK's path: a line the spec ignores is removed from
the byte stream before httpx2's SSE decoder reads it (:class:`RetryLines`, used by :mod:`mcp_gym.client._http`).

httpx2's decoder (the SDK's Streamable HTTP and SSE transports read through it) takes whatever ``int()`` reads from a
``retry:`` field (``-5``, 400 digits), which the SDK then sleeps on before resuming a stream: a negative or
overflowing sleep ends the connection. The HTTP fast lane parses SSE itself and checks the same way
(:func:`sse_retry_ok`).
"""

from __future__ import annotations

__all__ = ["MAX_SSE_RETRY_MS", "sse_retry_ok", "RetryLines"]

MAX_SSE_RETRY_MS = 600_000
"""The longest SSE ``retry:`` a server may ask for (10 minutes); a longer one is ignored, as a malformed one is."""


def sse_retry_ok(value: str) -> bool:
    """Whether an SSE ``retry:`` value is one to obey: ASCII digits only, as the SSE spec says (``"²"`` passes
    ``str.isdigit`` and fails ``int``), and at most :data:`MAX_SSE_RETRY_MS` (400 digits would overflow a sleep)."""
    return value.isascii() and value.isdigit() and len(value) <= 7 and int(value) <= MAX_SSE_RETRY_MS


_RETRY = b"retry:"
_RETRY_LINE_MAX = len(_RETRY) + 1 + 7  # "retry:", a space, 7 digits: a longer retry line is refused unread


class RetryLines:
    """Removes the ``retry:`` lines :func:`sse_retry_ok` refuses from an SSE byte stream, chunk by chunk.

    httpx2's SSE decoder (the SDK's Streamable HTTP and SSE transports read through it) takes whatever ``int()``
    reads from a ``retry:`` field (``-5``, 400 digits), which the SDK then sleeps on before resuming a stream (a
    negative or overflowing sleep ends the connection); the SSE spec ignores a value that is not ASCII digits. A
    dropped line is one the decoder ignores anyway (it is not the blank line that ends an event). Lines end with
    ``\\r\\n``, ``\\n`` or ``\\r`` (also across chunks); only a line that may be a ``retry:`` line is held until
    its end, and one past :data:`_RETRY_LINE_MAX` bytes is dropped as it comes."""

    __slots__ = ("_held", "_start", "_dropping", "_skip_lf")

    def __init__(self) -> None:
        self._held = b""
        self._start = True  # at the start of a line
        self._dropping = False  # inside a refused retry line: drop up to its end
        self._skip_lf = False  # a dropped line ended with \r at a chunk's end: a \n first in the next is its end too

    def feed(self, chunk: bytes) -> bytes:
        """The part of ``chunk`` (after what came before) to pass on."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not self._held and not self._dropping and _RETRY not in chunk:  # the common case: no retry line in it
            k = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            tail = chunk[k + 1:] if k >= 0 else chunk if self._start else b""
            if not tail or not _RETRY.startswith(tail):  # nor the start of one at its end
                if chunk:
                    self._start = k == len(chunk) - 1
                return chunk
        data = self._held + chunk
        self._held = b""
        out = bytearray()
        i, n = 0, len(data)
        while i < n:
            j = _line_end(data, i)
            if self._dropping or (self._start and (data.startswith(_RETRY, i) or
                                                   _RETRY.startswith(data[i:j if j >= 0 else n]))):
                if j < 0:  # the line goes on in the next chunk
                    if self._dropping or n - i > _RETRY_LINE_MAX:
                        self._dropping, self._start = True, False
                    else:
                        self._held = data[i:]
                    break
                line = data[i:j]
                keep = not self._dropping and (not line.startswith(_RETRY) or _retry_value_ok(line))
                end = _after_end(data, j)
                if keep:
                    out += data[i:end]
                elif end == n and data[j:j + 1] == b"\r":
                    self._skip_lf = True
                self._dropping, self._start, i = False, True, end
                continue
            if j < 0:
                out += data[i:]
                self._start = False
                break
            end = _after_end(data, j)
            out += data[i:end]
            self._start, i = True, end
        return bytes(out)

    def flush(self) -> bytes:
        """What is held at the end of the stream (a last line without its end)."""
        held, self._held = self._held, b""
        return held if not held.startswith(_RETRY) or _retry_value_ok(held) else b""


def _line_end(data: bytes, start: int) -> int:
    """The index of the first ``\\r`` or ``\\n`` from ``start`` (-1: none)."""
    cr, lf = data.find(b"\r", start), data.find(b"\n", start)
    return lf if cr < 0 else cr if lf < 0 else min(cr, lf)


def _after_end(data: bytes, j: int) -> int:
    """The index after the line end at ``j`` (``\\r\\n`` is one)."""
    return j + 2 if data[j:j + 2] == b"\r\n" else j + 1


def _retry_value_ok(line: bytes) -> bool:
    value = line[len(_RETRY):]
    value = value[1:] if value[:1] == b" " else value
    return len(value) <= 7 and sse_retry_ok(value.decode("ascii", "replace"))
