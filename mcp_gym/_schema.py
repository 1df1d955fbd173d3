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
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import regex
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.validators import Draft202012Validator
from referencing import Registry

__all__ = ["PATTERN_TIMEOUT", "validator", "validator_class"]

PATTERN_TIMEOUT = 0.1
"""Seconds one ``pattern`` / ``patternProperties`` match may take before the value is refused."""

_MAX_SHOWN = 80


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def _shown(value: str) -> str:
    return repr(value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "…")


def _search(pattern: str, value: str) -> tuple[bool, str | None]:
    """(matched, why it could not be decided)."""
    try:
        return _compiled(pattern).search(value, timeout=PATTERN_TIMEOUT) is not None, None
    except TimeoutError:
        return False, (f"matching {_shown(value)} against pattern {pattern!r} took longer than {PATTERN_TIMEOUT:g} s "
                       "(the pattern backtracks without end on this value)")
    except (regex.error, TypeError, ValueError) as e:
        return False, f"pattern {pattern!r} cannot be used: {e}"


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
                if k in cls.VALIDATORS}  # type: ignore[attr-defined]
    return validators.extend(cls, keywords) if keywords else cls


def validator_class(schema: Any) -> Any:
    """The validator class for ``schema`` (from its ``$schema``, default Draft 2020-12) with bounded ``pattern`` and
    ``patternProperties``. Its ``check_schema`` is the original class's."""
    return _bounded(validators.validator_for(schema, default=Draft202012Validator))


def validator(cls: Any, schema: Any) -> Any:
    """An instance of ``cls`` (from :func:`validator_class`) for ``schema`` that never fetches a ``$ref``."""
    return cls(schema, registry=Registry())
