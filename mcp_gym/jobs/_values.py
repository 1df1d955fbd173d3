"""Values in the results of ``mcp-gym tasks generate``'s calls (:mod:`mcp_gym.jobs.proposers`): a result as a JSON
value, whether it says it failed, the places in it (``fields``, ``extract``) and what looks like a clock there.

Places in a result (``path`` of an answer check): a JSONPath (``$.entities[0].name``) into a JSON result, or for a
text result ``line:N`` (the N-th non-empty line), ``field:KEY`` (the value after ``KEY:`` on a line), ``word:N``
(the last word of line N) or ``text`` (all of it).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from mcp_gym.jobs._untrusted import too_deep

__all__: list[str] = []  # internal to mcp_gym.jobs.proposers

MAX_ANSWER_CHARS = 100
"""Longest answer (and chained value) an answer task asks for."""
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_CLOCK = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"  # ISO 8601 dates, times
    rf"|\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? )?(?:{_MONTH} \d{{1,2}},? \d{{4}}|\d{{1,2}} {_MONTH},? \d{{4}})"
    r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"  # a time of day
    r"|(?<![\d.])1\d{9}(?:\d{3})?(?:\.\d+)?(?![\d.])",  # Unix time in seconds or milliseconds (2001-2033)
)
"""What looks like a date, a time or a Unix timestamp: such values change from run to run (file times, "now"), so they
never make an answer or a check, and runs are compared without them."""
_MASK = "\ue000"
_PLACEHOLDER = re.compile(r"\[(?:image|audio|resource|resource link): .*\]$")
"""A line ``render_content`` writes for a non-text content block (``[image: image/png, 4035 bytes]``, ``[resource:
URI (MIME)]``, ``[resource link: URI NAME]``): its words are mcp-gym's, so it makes no answer or chained value."""




# -- values in results ------------------------------------------------------------------------------------------------
def result_value(structured: Any, text: str) -> Any:
    """What a call returned, as a JSON value: its structured content, else its text parsed as JSON, else the text.

    The text is parsed whole, never line by line. A structured content that only wraps a string, ``{"result": TEXT}``
    (what the Python SDK makes of a tool returning ``str``), is that string parsed as JSON when it holds a JSON object
    or array: its members make answers, not one multi-line string that makes none. A value nested deeper than
    :data:`MAX_RESULT_DEPTH` is the text."""
    if structured is not None:
        from mcp_gym.graders.state import wrapped_json

        if too_deep(structured):
            return text
        inner = wrapped_json(structured)
        return structured if inner is not structured and too_deep(inner) else inner
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return text if too_deep(parsed) else parsed


_FAILED = frozenset({"error", "failed", "failure", "invalid"})
"""Words of a ``status`` or ``result`` that says its call failed (with ``not found``)."""
_VERDICTS = frozenset({"success", "ok"})
"""Members by which a JSON result says whether its call worked: a call that made a task worked, so they are ``true``
there, and an answer "`success`: true" could be given without reading anything (@cyanheads/git-mcp-server)."""


def reports_failure(value: Any, depth: int = 2) -> str | None:
    """Why a JSON result says its call failed although ``isError`` is false, or ``None``: an object (or an object in
    it, one level down) with ``"success": false`` or ``"ok": false``, a non-empty ``"error"``, or a ``"status"`` /
    ``"result"`` that says it failed (``error``, ``failed``, ``task_not_found``: :func:`_failed`). PyPI
    mcp-server-motherduck: ``{"success": false, "error": "Table or view not found: ..."}``; mcp-text-editor, per
    file: ``{"result": "error", "reason": "Hash mismatch ..."}``. Such a result makes no task: its answer would be an
    error message."""
    if not isinstance(value, dict) or depth <= 0:
        return None
    for key in ("success", "ok"):
        if value.get(key) is False:
            return f'"{key}": false'
    for key in ("status", "result"):
        v = value.get(key)
        if isinstance(v, str) and _failed(v):
            return f'"{key}": "{v}"'
    if value.get("error") not in (None, "", False, [], {}):
        return '"error"'
    return next((why for v in value.values() if (why := reports_failure(v, depth - 1)) is not None), None)


def _failed(status: str) -> bool:
    """Whether a ``status`` says its call failed: one of its words is in :data:`_FAILED` (``error``,
    ``validation_failed``), or it says ``not found`` (npm @kazuph/mcp-taskmanager's ``"status": "task_not_found"``,
    with ``isError`` false)."""
    said = [w for w in re.split(r"[^a-z]+", status.casefold()) if w]
    pairs = zip(said, said[1:], strict=False)
    return bool(_FAILED.intersection(said)) or any(a == "not" and b == "found" for a, b in pairs)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _scalar(v: Any) -> str | None:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, str) and v.strip() and len(v) <= MAX_ANSWER_CHARS and "\n" not in v:
        return v.strip()
    return None


def clocklike(text: str) -> bool:
    """Whether ``text`` holds a date, a time or a Unix timestamp (a value that depends on when a run happened)."""
    return _CLOCK.search(text) is not None


def _stamped(record: Mapping[str, Any]) -> bool:
    """Whether a JSON object holds a date, a time or a timestamp as one of its own values, or holds an object that
    does: its other values are then taken for facts about that moment (``day_of_week`` and ``is_dst`` beside
    ``datetime``; ``time_difference`` beside ``source`` and ``target`` times, which moves with summer time), which
    change with the clock although they do not look like it. Items of a list are records of their own."""
    return any(_stamped(v) if isinstance(v, dict) else not isinstance(v, list) and clocklike(_scalar(v) or "")
               for v in record.values())


def beside_clock(value: Any, path: str) -> bool:
    """Whether the JSONPath ``path`` of a result ``value`` names a value of an object that also holds a date or time
    (:func:`_stamped`): such a value never makes an answer."""
    if not isinstance(path, str) or not path.startswith("$") or isinstance(value, str):
        return False
    from jsonpath_ng.ext import parse as jsonpath

    try:
        matches = jsonpath(path).find(value)
    except Exception:  # noqa: BLE001 - a bad path has no value at all (extract says so)
        return False
    parent = matches[0].context.value if len(matches) == 1 and matches[0].context is not None else None
    return isinstance(parent, dict) and _stamped(parent)


def steady(value: Any) -> Any:
    """``value`` with its dates, times and Unix timestamps masked: what two runs at different times can agree on."""
    if isinstance(value, str):
        return _CLOCK.sub(_MASK, value)
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items()}
    if isinstance(value, list):
        return [steady(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and clocklike(json.dumps(value)):
        return _MASK
    return value


def unmasked(value: Any) -> Any:
    """What of a :func:`steady` value holds no mask (``None``: nothing): masked strings and list items are dropped, and
    so are the keys of a dict whose values are."""
    if isinstance(value, str):
        return None if _MASK in value else value
    if isinstance(value, dict):
        out = {k: u for k, v in value.items() if (u := unmasked(v)) is not None}
        return out or None
    if isinstance(value, list):
        items = [u for v in value if (u := unmasked(v)) is not None]
        return items or None
    return value


def as_text(value: Any) -> str:
    """A value as text (a string itself, else its JSON)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def extract(value: Any, path: str) -> str | None:
    """The answer at ``path`` in a result ``value`` (see the module docstring), or ``None`` if there is none."""
    if not isinstance(path, str):
        return None
    if path.startswith("$"):
        if isinstance(value, str):
            return None
        from jsonpath_ng.ext import parse as jsonpath

        try:
            matches = [m.value for m in jsonpath(path).find(value)]
        except Exception:  # noqa: BLE001 - a bad path is the proposal's fault: no answer
            return None
        return _scalar(matches[0]) if len(matches) == 1 else None
    text = as_text(value)
    kind, _, arg = path.partition(":")
    lines = _lines(text)
    if kind == "text":
        return _scalar(text.strip())
    if kind in ("line", "word") and arg.isdigit() and 1 <= int(arg) <= len(lines):
        line = lines[int(arg) - 1]
        if _PLACEHOLDER.match(line):
            return None
        return _scalar(line if kind == "line" else line.split()[-1])
    if kind == "field" and arg:
        for line in lines:
            m = re.match(rf"{re.escape(arg)}\s*(?::(?!//)|=)\s*(.+)$", line)
            if m:
                return _scalar(m.group(1))
    return None


def describe_path(path: str) -> str:
    """How a prompt names a place in a result."""
    if path.startswith("$"):
        return f"`{path[2:] if path.startswith('$.') else path}`"
    kind, _, arg = path.partition(":")
    return {"line": f"line {arg}", "word": f"the last word of line {arg}", "field": f"the `{arg}` field",
            "text": "the whole text"}.get(kind, path)


def fields(value: Any) -> Iterator[tuple[str, str]]:
    """The places of a result that make answers: ``(path, answer)`` for each short scalar that is not a date, a time
    or a timestamp (:func:`clocklike`), nor another value of a JSON object that holds one (:func:`beside_clock`)."""
    return ((path, answer) for path, answer in _fields(value) if not clocklike(answer))


def _fields(value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, (dict, list)):
        yield from _json_fields(value, "$")
        return
    if isinstance(value, str):
        lines = _lines(value)[:30]
        seen_keys: set[str] = set()
        for n, line in enumerate(lines, 1):
            if _PLACEHOLDER.match(line):  # mcp-gym's stand-in for an image or a resource: not the server's text
                continue
            m = re.match(r"([A-Za-z][\w .-]{0,30}?)\s*:(?!//)\s*(.+)$", line)  # not a URL's scheme://
            if m and m.group(1) not in seen_keys:
                seen_keys.add(m.group(1))
                if (a := _scalar(m.group(2))) is not None:
                    yield f"field:{m.group(1)}", a
                continue
            if (a := _scalar(line)) is not None:
                yield f"line:{n}", a
            words = line.split()
            if 1 < len(words) <= 4 and (w := _scalar(words[-1])) is not None:
                yield f"word:{n}", w


def _json_fields(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        stamped = _stamped(value)  # its scalars are facts about that moment: none makes an answer
        for k, v in value.items():
            if k in _VERDICTS and isinstance(v, bool):  # true in every call kept (reports_failure): no information
                continue
            key = _member(path, str(k))
            if key is not None and not (stamped and not isinstance(v, (dict, list))):
                yield from _json_fields(v, key)
    elif isinstance(value, list):
        for i, v in enumerate(value[:20]):
            yield from _json_fields(v, f"{path}[{i}]")
    elif path != "$" and (a := _scalar(value)) is not None:
        yield path, a


def _member(path: str, key: str) -> str | None:
    """The JSONPath of member ``key`` of the object at ``path``: ``$.name``, or ``$['{workspace}/a.txt']`` for a key
    that is no identifier (PyPI mcp-text-editor keys its results by the file's path: without it no value under such a
    key made an answer or a chained value). ``None`` for a key no JSONPath can name plainly (a quote, a backslash)."""
    if re.fullmatch(r"[A-Za-z_]\w*", key):
        return f"{path}.{key}"
    if not key or len(key) > MAX_ANSWER_CHARS or re.search(r"['\\\x00-\x1f]", key) or not _named(key):
        return None
    return f"{path}['{key}']"


@functools.lru_cache(maxsize=1024)
def _named(key: str) -> bool:
    """Whether ``$['key']`` names member ``key`` and nothing else in jsonpath_ng (``*``, ``$``, ``..``: checked, not
    guessed)."""
    from jsonpath_ng.ext import parse as jsonpath

    try:
        found = jsonpath(f"$['{key}']").find({key: 1, "other": 2})
    except Exception:  # noqa: BLE001 - a key the grammar refuses names nothing
        return False
    return [m.value for m in found] == [1]
