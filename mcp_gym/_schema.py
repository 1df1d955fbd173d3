"""JSON Schema validator classes that are safe on hostile schemas: no fetched ``$ref``, and bounded regex matching.

Tool schemas come from servers and argument values from models, so neither can be trusted. jsonschema's defaults
are not safe here:

* its default ``referencing`` registry retrieves any remote ``$ref`` (urlopen, no timeout). Validators made by
  :func:`validator` resolve ``$ref`` only inside the schema and the bundled metaschemas (an empty registry, as the
  MCP SDK does).
* ``pattern`` and ``patternProperties`` use :func:`re.search`, which can backtrack for hours on a short value
  (``^(a|aa)+$`` against 40 ``a`` and a ``!``), and Python cannot interrupt it. Here both keywords match with the
  ``regex`` module and a :data:`PATTERN_TIMEOUT`: a match that takes longer fails validation with an error that names
  the pattern, so the action is refused instead of hanging the training loop.

:func:`bounded_search` is that bounded matcher, and the one every regex of mcp-gym that comes from outside goes
through: schema patterns here, and the ``regex`` grader and the ``files`` grader's ``{"regex": ...}`` checks
(:mod:`mcp_gym.graders`), whose patterns come from task files and whose subjects are the agent's answer or files it
wrote. ``^(\\d+,?)+$`` against 24 digits and a ``!`` took 6 s with :mod:`re` (doubling per character, holding the GIL
for every other episode); here it gives up after :data:`PATTERN_TIMEOUT`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import regex
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.validators import Draft202012Validator
from referencing import Registry

from mcp_gym._memo import BoundedCache

__all__ = ["PATTERN_TIMEOUT", "bounded_search", "check_schema", "validator", "validator_class"]

PATTERN_TIMEOUT = 0.1
"""Seconds one match of :func:`bounded_search` may take (a schema's ``pattern`` / ``patternProperties``, a regex
grader's pattern) before it is given up: the value is refused, the grade failed."""

_MAX_SHOWN = 80


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str, ignore_case: bool = False) -> Any:
    return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)


def _shown(value: str) -> str:
    return repr(value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "…")


def bounded_search(pattern: str, value: str, *, ignore_case: bool = False) -> tuple[bool, str | None]:
    """Whether ``pattern`` is found in ``value`` (like :func:`re.search`, with the ``regex`` module), given at most
    :data:`PATTERN_TIMEOUT` seconds: ``(matched, None)``, or ``(False, why)`` when the match took longer (``why``
    names the pattern, the start of the value and the bound). Raises ``ValueError`` naming the pattern when it does
    not compile."""
    try:
        rx = _compiled(pattern, ignore_case)
    except (regex.error, TypeError, ValueError) as e:
        raise ValueError(f"pattern {pattern!r} cannot be used: {e}") from None
    try:
        return rx.search(value, timeout=PATTERN_TIMEOUT) is not None, None
    except TimeoutError:
        return False, (f"matching {_shown(value)} against pattern {pattern!r} took longer than {PATTERN_TIMEOUT:g} s "
                       "(the pattern backtracks without end on this value)")


def _search(pattern: str, value: str) -> tuple[bool, str | None]:
    """(matched, why it could not be decided)."""
    try:
        return bounded_search(pattern, value)
    except (ValueError, TypeError) as e:
        return False, str(e)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    matched, why = _search(pattern, instance)
    if why is not None:
        yield ValidationError(why)
    elif not matched:
        yield ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            matched, why = _search(pattern, key)
            if why is not None:
                yield ValidationError(why, path=[key])
            elif matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


@functools.cache
def _bounded(cls: type) -> type:
    keywords = {k: fn for k, fn in (("pattern", _pattern), ("patternProperties", _pattern_properties))
                if k in cls.VALIDATORS}  # type: ignore[attr-defined]  # cls: a jsonschema validator class
    return validators.extend(cls, keywords) if keywords else cls


def validator_class(schema: Any) -> Any:
    """The validator class for ``schema`` (from its ``$schema``, default Draft 2020-12) with bounded ``pattern`` and
    ``patternProperties``. Its ``check_schema`` is the original class's."""
    return _bounded(validators.validator_for(schema, default=Draft202012Validator))


def validator(cls: Any, schema: Any) -> Any:
    """An instance of ``cls`` (from :func:`validator_class`) for ``schema`` that never fetches a ``$ref``."""
    return cls(schema, registry=Registry())


_CHECKED = BoundedCache(2048)  # mcp_gym._memo


def check_schema(cls: Any, schema: Any) -> None:
    """``cls.check_schema(schema)`` (raises jsonschema's ``SchemaError``), once per class and schema (by its canonical
    JSON) in a process: a tool listing checks each schema, then the action space compiles the same ones (each check
    costs milliseconds). A schema that has no canonical JSON is checked every time."""
    try:
        key: tuple[Any, str] | None = (cls, json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _CHECKED:
        return
    cls.check_schema(schema)
    if key is not None:
        _CHECKED.put(key, None)
