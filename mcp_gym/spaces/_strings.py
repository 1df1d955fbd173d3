"""Random strings for JSON Schema ``string`` schemas: length bounds, common ``format`` values and (simple) regular
expression patterns, drawn only from one numpy Generator. The base of the schema sampler (:mod:`._sampler`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

from mcp_gym._compat.stdlib import sre_parse
from mcp_gym.spaces._random import _ANY_POOL, _DIGITS, _LOWER, _UPPER, _random_text, _random_word


class _Unsatisfiable(Exception):
    """The generator cannot produce a value for this (sub)schema."""


class _StringSampler:
    """Draws from ``rng``: uniform choices, integers of any size, and strings honouring a string schema."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choice(self, seq: Sequence[Any]) -> Any:
        """Uniform choice from a non-empty sequence."""
        return seq[int(self.rng.integers(len(seq)))]

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in ``[lo, hi]`` (Python ints, any size)."""
        span = hi - lo
        if span <= 0:
            return lo
        if span < 2**62:
            return lo + int(self.rng.integers(0, span + 1))
        return lo + int(self.rng.integers(0, 2**62))

    # -- strings ------------------------------------------------------------------------------------------------

    def gen_string(self, schema: Mapping[str, Any]) -> str:
        """Generate a string honouring length, pattern (best effort) and format (best effort)."""
        lo = int(schema.get("minLength", 0) or 0)
        hi_raw = schema.get("maxLength")
        hi = None if hi_raw is None else int(hi_raw)
        if hi is not None and hi < lo:
            raise _Unsatisfiable("maxLength < minLength")

        def fits(s: str | None) -> TypeGuard[str]:
            return s is not None and len(s) >= lo and (hi is None or len(s) <= hi)

        pattern = schema.get("pattern")
        compiled = None
        if isinstance(pattern, str):
            try:
                compiled = re.compile(pattern)
            except re.error:
                compiled = None
        if compiled is not None:
            for _ in range(6):
                try:
                    candidate = self.from_pattern(compiled.pattern)
                except _Unsatisfiable:
                    break
                if fits(candidate) and compiled.search(candidate):
                    return candidate
        fmt = schema.get("format")
        if isinstance(fmt, str):
            formatted = self.from_format(fmt)
            if fits(formatted) and (compiled is None or compiled.search(formatted)):
                return formatted
        upper = max(lo, 12) if hi is None else min(hi, max(lo, 12))
        lower = max(lo, min(3, upper))
        return _random_text(self.rng, self.randint(lower, upper))

    def from_format(self, fmt: str) -> str | None:
        """Best-effort value for common ``format`` values (None if unknown)."""
        r = self.rng
        y, mo, d = int(r.integers(2000, 2031)), int(r.integers(1, 13)), int(r.integers(1, 29))
        h, mi, s = int(r.integers(0, 24)), int(r.integers(0, 60)), int(r.integers(0, 60))
        word = _random_word(r)
        if fmt == "date-time":
            return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z"
        if fmt == "date":
            return f"{y:04d}-{mo:02d}-{d:02d}"
        if fmt == "time":
            return f"{h:02d}:{mi:02d}:{s:02d}Z"
        if fmt in ("email", "idn-email"):
            return f"{word}@example.com"
        if fmt in ("uri", "url", "iri"):
            return f"https://example.com/{word}"
        if fmt in ("uri-reference", "iri-reference", "uri-template"):
            return f"/{word}"
        if fmt in ("hostname", "idn-hostname"):
            return f"{word}.example.com"
        if fmt == "ipv4":
            return ".".join(str(int(x)) for x in r.integers(1, 255, size=4))
        if fmt == "ipv6":
            return "2001:db8::" + format(int(r.integers(1, 0xFFFF)), "x")
        if fmt == "uuid":
            h32 = "".join(format(int(x), "x") for x in r.integers(0, 16, size=32))
            return f"{h32[:8]}-{h32[8:12]}-4{h32[13:16]}-a{h32[17:20]}-{h32[20:]}"
        if fmt == "duration":
            return f"P{int(r.integers(1, 30))}D"
        if fmt == "json-pointer":
            return f"/{word}"
        if fmt == "relative-json-pointer":
            return f"0/{word}"
        if fmt == "regex":
            return f"^{word}$"
        return None

    def from_pattern(self, pattern: str) -> str:
        """Generate a string matching a (simple) regular expression; raises _Unsatisfiable on unsupported syntax."""
        try:
            parsed = sre_parse.parse(pattern)
        except Exception as exc:  # noqa: BLE001 - any parser failure means "can't generate"
            raise _Unsatisfiable(f"cannot parse pattern: {exc}") from exc
        return self._emit(parsed.data, {})

    def _emit(self, items: Iterable[tuple[Any, Any]], groups: dict[int, str]) -> str:
        """Emit text for parsed regex items."""
        parts: list[str] = []
        for op, av in items:
            name = str(op)
            if name == "LITERAL":
                parts.append(chr(av))
            elif name == "NOT_LITERAL":
                parts.append(self._char_from(lambda c, av=av: c != chr(av)))
            elif name == "ANY":
                parts.append(self._char_from(lambda c: c != "\n"))
            elif name == "IN":
                parts.append(self._emit_in(av))
            elif name == "BRANCH":
                parts.append(self._emit(self.choice(av[1]), groups))
            elif name == "SUBPATTERN":
                group, sub = av[0], av[-1]
                text = self._emit(sub, groups)
                if group:
                    groups[group] = text
                parts.append(text)
            elif name == "ATOMIC_GROUP":
                parts.append(self._emit(av, groups))
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                lo, hi, sub = av
                hi = min(hi, lo + 4)
                parts.extend(self._emit(sub, groups) for _ in range(self.randint(lo, hi)))
            elif name == "AT":
                continue  # anchors / boundaries: the final regex check catches a mismatch
            elif name == "GROUPREF":
                parts.append(groups.get(av, ""))
            else:
                raise _Unsatisfiable(f"unsupported regex construct {name}")
        return "".join(parts)

    def _char_from(self, accept: Any) -> str:
        """A random character from the fallback pool accepted by ``accept``."""
        options = [c for c in _ANY_POOL if accept(c)]
        if not options:
            raise _Unsatisfiable("no character satisfies the pattern class")
        return self.choice(options)

    def _emit_in(self, members: list[tuple[Any, Any]]) -> str:
        """Emit one character for a character class ``[...]``."""
        negate = any(str(op) == "NEGATE" for op, _ in members)
        members = [(str(op), av) for op, av in members if str(op) != "NEGATE"]
        if negate:
            return self._char_from(lambda c: not any(_class_member(c, op, av) for op, av in members))
        op, av = self.choice(members)
        if op == "LITERAL":
            return chr(av)
        if op == "RANGE":
            lo, hi = av
            return chr(self.randint(lo, min(hi, lo + 2000)))
        if op == "CATEGORY":
            category = str(av)
            if category == "CATEGORY_DIGIT":
                return self.choice(_DIGITS)
            if category == "CATEGORY_WORD":
                return self.choice(_LOWER + _UPPER + _DIGITS + "_")
            if category == "CATEGORY_SPACE":
                return " "
            return self._char_from(lambda c: _class_member(c, "CATEGORY", av))
        raise _Unsatisfiable(f"unsupported character class member {op}")


def _class_member(c: str, op: str, av: Any) -> bool:
    """Whether character ``c`` belongs to one parsed character-class member."""
    op = str(op)
    if op == "LITERAL":
        return c == chr(av)
    if op == "RANGE":
        return av[0] <= ord(c) <= av[1]
    if op == "CATEGORY":
        category = str(av)
        negated = category.startswith("CATEGORY_NOT_")
        base = category.replace("CATEGORY_NOT_", "CATEGORY_")
        if base == "CATEGORY_DIGIT":
            hit = c.isdigit()
        elif base == "CATEGORY_WORD":
            hit = c.isalnum() or c == "_"
        elif base == "CATEGORY_SPACE":
            hit = c.isspace()
        else:
            hit = False
        return hit != negated
    return False

