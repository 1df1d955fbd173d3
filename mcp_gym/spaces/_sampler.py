"""Sampling values valid under a JSON Schema (:func:`sample_from_schema`, used by ``ToolCallSpace.sample``)."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from jsonschema.exceptions import best_match

from mcp_gym.spaces._compile import _compile
from mcp_gym.spaces._random import _random_text, _random_word
from mcp_gym.spaces._strings import _StringSampler, _Unsatisfiable
from mcp_gym.spaces.errors import _shorten

_SAMPLE_ATTEMPTS = 16
_PREFER_GIVEN = 0.75
"""How often the sampler takes a schema's ``default``/``examples`` (when present) and a small integer (0..10, when the
bounds allow) rather than a uniformly random value."""

_OBJECT_KEYS = ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
                "maxProperties", "dependentRequired", "propertyNames")
_ARRAY_KEYS = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "additionalItems")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_LOWER_BOUNDS = ("minLength", "minItems", "minProperties", "minContains")
_UPPER_BOUNDS = ("maxLength", "maxItems", "maxProperties", "maxContains")
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "contains", "propertyNames", "additionalItems",
                   "unevaluatedProperties", "unevaluatedItems")


def _as_types(value: Any) -> list[str]:
    """Normalise a ``type`` keyword to a list."""
    return [value] if isinstance(value, str) else list(value)


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Best-effort conjunction of two object schemas (used for ``allOf``, ``$ref`` siblings and union branches)."""
    out = dict(a)
    for key, bv in b.items():
        if key not in out:
            out[key] = bv
            continue
        av = out[key]
        if av == bv:
            continue
        if key == "properties" and isinstance(av, Mapping) and isinstance(bv, Mapping):
            merged = dict(av)
            for prop, sub in bv.items():
                merged[prop] = {"allOf": [merged[prop], sub]} if prop in merged else sub
            out[key] = merged
        elif key == "required":
            out[key] = list(dict.fromkeys([*av, *bv]))
        elif key == "type":
            at, bt = _as_types(av), _as_types(bv)
            types = [t for t in at if t in bt or (t == "integer" and "number" in bt)]
            types += [t for t in bt if t == "integer" and "number" in at and t not in types]
            if not types:
                raise _Unsatisfiable(f"incompatible types {av!r} and {bv!r}")
            out[key] = types
        elif key == "enum":
            out[key] = [x for x in av if x in bv]
        elif key in ("minimum", *_LOWER_BOUNDS) and not isinstance(av, bool) and not isinstance(bv, bool):
            out[key] = max(av, bv)
        elif key in ("maximum", *_UPPER_BOUNDS) and not isinstance(av, bool) and not isinstance(bv, bool):
            out[key] = min(av, bv)
        elif key == "exclusiveMinimum" and not isinstance(av, bool) and not isinstance(bv, bool):
            out[key] = max(av, bv)
        elif key == "exclusiveMaximum" and not isinstance(av, bool) and not isinstance(bv, bool):
            out[key] = min(av, bv)
        elif key == "allOf":
            out[key] = [*av, *bv]
        elif key == "$ref":
            out["allOf"] = [*out.get("allOf", []), {"$ref": bv}]
        elif key in _SUBSCHEMA_KEYS:
            if av is False or bv is False:
                out[key] = False
            elif av is True or av == {}:
                out[key] = bv
            elif not (bv is True or bv == {}):
                out[key] = {"allOf": [av, bv]}
        elif key == "multipleOf" and isinstance(av, int) and isinstance(bv, int):
            out[key] = math.lcm(av, bv)
        elif key == "uniqueItems":
            out[key] = bool(av) or bool(bv)
        # anything else: first wins (validation of the result catches conflicts)
    return out


def _unescape_pointer(token: str) -> str:
    """Decode one JSON-pointer token."""
    from urllib.parse import unquote

    return unquote(token).replace("~1", "/").replace("~0", "~")


class _Generator(_StringSampler):
    """Random value generator for one root schema (keeps the root for ``$ref`` resolution)."""

    def __init__(self, root: Any, rng: np.random.Generator, max_depth: int) -> None:
        super().__init__(rng)
        self.root = root
        self.max_depth = max_depth

    # -- plumbing -----------------------------------------------------------------------------------------------

    def generate(self, as_object: bool = False) -> Any:
        """Generate one value for the root schema (may raise :class:`_Unsatisfiable`).

        With ``as_object`` an untyped root (``{}``, ``true``, ``{"properties": ...}``) is generated as an object, as
        tool arguments must be one.
        """
        schema = self.root
        if as_object:
            if schema is True:
                schema = {"type": "object"}
            elif isinstance(schema, Mapping) and "type" not in schema and "$ref" not in schema:
                schema = {**schema, "type": "object"}
        return self.gen(schema, 0)

    def lookup(self, ref: str) -> Any:
        """Resolve a local ``$ref`` (``#``, ``#/$defs/X``, ``#/definitions/X`` or any JSON pointer)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _Unsatisfiable(f"unsupported $ref {ref!r}")
        target = self.root
        for token in ref[1:].split("/")[1:] if ref != "#" else []:
            token = _unescape_pointer(token)
            if isinstance(target, Mapping) and token in target:
                target = target[token]
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                raise _Unsatisfiable(f"unresolvable $ref {ref!r}")
        return target

    def resolve(self, schema: Mapping[str, Any]) -> Any:
        """Inline ``$ref`` (merged with sibling keywords) and ``allOf`` until neither is left at the top."""
        for _ in range(64):
            if "$ref" in schema:
                target = self.lookup(schema["$ref"])
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                if target is False:
                    raise _Unsatisfiable("$ref to false schema")
                if target is True or not isinstance(target, Mapping):
                    target = {}
                schema = _merge(target, rest) if rest else target
            elif "allOf" in schema:
                merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
                for sub in schema["allOf"]:
                    if sub is False:
                        raise _Unsatisfiable("allOf contains false")
                    if isinstance(sub, Mapping):
                        merged = _merge(merged, sub)
                schema = merged
            else:
                return schema
        raise _Unsatisfiable("$ref/allOf nesting too deep")

    # -- dispatch -----------------------------------------------------------------------------------------------

    def gen(self, schema: Any, depth: int) -> Any:
        """Generate a value for ``schema`` at nesting ``depth``."""
        if depth > self.max_depth + 16:
            raise _Unsatisfiable("schema requires nesting deeper than max_depth + 16")
        if schema is False:
            raise _Unsatisfiable("false schema")
        if not isinstance(schema, Mapping):
            return self.any_value()
        schema = self.resolve(schema)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        # plausible before random: the schema's own default or examples, most of the time (an invalid one is
        # caught by the caller's validation and redrawn)
        if "default" in schema and self.rng.random() < _PREFER_GIVEN:
            return copy.deepcopy(schema["default"])
        examples = schema.get("examples")
        if isinstance(examples, list) and examples and self.rng.random() < _PREFER_GIVEN:
            return copy.deepcopy(self.choice(examples))
        if "enum" in schema:
            options = list(schema["enum"])
            if "type" in schema:
                types = _as_types(schema["type"])
                typed = [o for o in options if _json_type(o) in types or (_json_type(o) == "integer"
                                                                          and "number" in types)]
                options = typed or options
            if not options:
                raise _Unsatisfiable("empty enum")
            return copy.deepcopy(self.choice(options))
        for key in ("oneOf", "anyOf"):
            if key in schema:
                branches = [b for b in schema[key] if b is not False]
                if not branches:
                    raise _Unsatisfiable(f"no usable {key} branch")
                rest = {k: v for k, v in schema.items() if k != key}
                branch = self.choice(branches)
                if branch is True or not isinstance(branch, Mapping):
                    branch = {}
                return self.gen(_merge(rest, branch), depth)
        if "type" in schema:
            types = _as_types(schema["type"])
            if not types:
                raise _Unsatisfiable("empty type list")
            kind = self.choice(types)
        elif any(k in schema for k in _OBJECT_KEYS):
            kind = "object"
        elif any(k in schema for k in _ARRAY_KEYS):
            kind = "array"
        elif any(k in schema for k in _STRING_KEYS):
            kind = "string"
        elif any(k in schema for k in _NUMBER_KEYS):
            kind = "number"
        else:
            return self.any_value()
        if kind == "string":
            return self.gen_string(schema)
        if kind == "integer":
            return self.gen_integer(schema)
        if kind == "number":
            return self.gen_number(schema)
        if kind == "boolean":
            return bool(self.rng.random() < 0.5)
        if kind == "null":
            return None
        if kind == "array":
            return self.gen_array(schema, depth)
        if kind == "object":
            return self.gen_object(schema, depth)
        raise _Unsatisfiable(f"unknown type {kind!r}")

    def any_value(self) -> Any:
        """A simple JSON value for an unconstrained schema: short string, small number, bool or null."""
        k = int(self.rng.integers(5))
        if k == 0:
            return _random_text(self.rng, int(self.rng.integers(3, 9)))
        if k == 1:
            return int(self.rng.integers(0, 101))
        if k == 2:
            return round(float(self.rng.random() * 100), 2)
        if k == 3:
            return bool(self.rng.random() < 0.5)
        return None

    # -- numbers ------------------------------------------------------------------------------------------------

    @staticmethod
    def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
        """(low, low_exclusive, high, high_exclusive) from minimum/maximum/exclusive* (draft 4 booleans too)."""
        lo, hi = schema.get("minimum"), schema.get("maximum")
        lo_x = hi_x = False
        emin, emax = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if isinstance(emin, bool):
            lo_x = emin and lo is not None
        elif isinstance(emin, (int, float)) and (lo is None or emin >= lo):
            lo, lo_x = emin, True
        if isinstance(emax, bool):
            hi_x = emax and hi is not None
        elif isinstance(emax, (int, float)) and (hi is None or emax <= hi):
            hi, hi_x = emax, True
        if isinstance(lo, float) and math.isnan(lo):
            lo = None
        if isinstance(hi, float) and math.isnan(hi):
            hi = None
        return lo, lo_x, hi, hi_x

    def _int_range(self, schema: Mapping[str, Any]) -> tuple[int, int]:
        """Integer sampling window honouring bounds (defaults to 100 wide, starting at 0)."""
        lo, lo_x, hi, hi_x = self._bounds(schema)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
        if ilo is None:  # no bounds at all: 0..100
            ilo = 0 if ihi is None else min(0, ihi) if ihi >= -100 else ihi - 100
        if ihi is None:
            ihi = max(ilo + 100, 100) if ilo <= 100 else ilo + 100
        if ilo > ihi:
            raise _Unsatisfiable("empty integer range")
        return ilo, ihi

    def gen_integer(self, schema: Mapping[str, Any]) -> int:
        """Generate an integer honouring bounds and multipleOf; mostly a small one (0..10 where the bounds allow)."""
        lo, hi = self._int_range(schema)
        small_lo, small_hi = max(lo, 0), min(hi, 10)
        if small_lo <= small_hi and not schema.get("multipleOf") and self.rng.random() < _PREFER_GIVEN:
            lo, hi = small_lo, small_hi
        m = schema.get("multipleOf")
        if not m or isinstance(m, bool):
            return self.randint(lo, hi)
        if float(m).is_integer():
            m = int(m)
            klo, khi = -((-lo) // m), hi // m
            if klo > khi:
                raise _Unsatisfiable("no multiple in range")
            return self.randint(klo, khi) * m
        for _ in range(32):
            v = self.randint(lo, hi)
            if _is_multiple(v, m):
                return v
        raise _Unsatisfiable("no multiple found")

    def gen_number(self, schema: Mapping[str, Any]) -> float | int:
        """Generate a number (sometimes an integer) honouring bounds and multipleOf."""
        lo, lo_x, hi, hi_x = self._bounds(schema)
        m = schema.get("multipleOf")
        if m and not isinstance(m, bool):
            flo = -100.0 * abs(m) if lo is None else float(lo)
            fhi = (flo + 100.0 * abs(m)) if hi is None else float(hi)
            if lo is None and hi is not None:
                flo = fhi - 100.0 * abs(m)
            klo, khi = math.ceil(flo / m), math.floor(fhi / m)
            if lo is None and hi is None:
                klo, khi = 0, 100
            for _ in range(32):
                if klo > khi:
                    break
                k = self.randint(klo, khi)
                v: float | int = k * m
                if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
                    v = int(v)
                if _in_bounds(v, lo, lo_x, hi, hi_x) and _is_multiple(v, m):
                    return v
            raise _Unsatisfiable("no multiple found")
        flo = float(lo) if lo is not None else (min(0.0, float(hi) - 100.0) if hi is not None else 0.0)
        fhi = float(hi) if hi is not None else max(flo + 100.0, 100.0)
        if flo > fhi or (flo == fhi and (lo_x or hi_x)):
            raise _Unsatisfiable("empty number range")
        if self.rng.random() < 0.25 and math.isfinite(flo) and math.isfinite(fhi):
            ilo = math.floor(flo) + 1 if lo_x else math.ceil(flo)
            ihi = math.ceil(fhi) - 1 if hi_x else math.floor(fhi)
            if ilo <= ihi:
                return self.randint(ilo, ihi)
        for _ in range(8):
            v = flo + float(self.rng.random()) * (fhi - flo)
            for candidate in (round(v, 2), round(v, 6), v):
                if _in_bounds(candidate, lo, lo_x, hi, hi_x):
                    return candidate
        if _in_bounds(flo, lo, lo_x, hi, hi_x):
            return flo
        mid = float(np.nextafter(flo, fhi))
        if _in_bounds(mid, lo, lo_x, hi, hi_x):
            return mid
        raise _Unsatisfiable("no number in range")

    # -- containers ---------------------------------------------------------------------------------------------

    def gen_array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        """Generate a short array honouring prefixItems/items, min/maxItems, uniqueItems and contains."""
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", True)
        if isinstance(items, list):  # draft <= 2019-09 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        lo = int(schema.get("minItems", 0) or 0)
        hi_raw = schema.get("maxItems")
        hi = None if hi_raw is None else int(hi_raw)
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and hi < lo:
            raise _Unsatisfiable("maxItems < minItems")
        contains = schema.get("contains")
        if contains is not None and lo == 0 and (hi is None or hi >= 1):
            lo = 1
        if depth >= self.max_depth:
            n = lo
        else:
            upper = max(lo, 3) if hi is None else min(hi, max(lo, 3))
            n = self.randint(lo, upper)
        unique = bool(schema.get("uniqueItems"))
        out: list[Any] = []
        seen: set[str] = set()
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else items
            for _ in range(12 if unique else 1):
                value = self.gen(sub, depth + 1)
                key = _canonical(value) if unique else ""
                if not unique or key not in seen:
                    break
            else:
                if len(out) >= lo:  # the item schema has few distinct values: stop short instead of failing
                    break
                raise _Unsatisfiable("could not generate unique items")
            seen.add(key)
            out.append(value)
        if contains is not None and out and contains is not True:
            i = self.randint(0, len(out) - 1)
            sub = prefix[i] if i < len(prefix) else items
            merged = _merge(sub, contains) if isinstance(sub, Mapping) and isinstance(contains, Mapping) else contains
            out[i] = self.gen(merged, depth + 1)
        return out

    def gen_object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        """Generate an object: all required properties, each optional one with probability 0.5 (none past depth)."""
        props = schema.get("properties") or {}
        required = list(dict.fromkeys(schema.get("required") or []))
        additional = schema.get("additionalProperties", True)
        patterns = schema.get("patternProperties") or {}
        min_p = int(schema.get("minProperties", 0) or 0)
        max_p = schema.get("maxProperties")
        dependent = schema.get("dependentRequired") or {}

        def subschema(name: str) -> Any:
            if name in props:
                return props[name]
            for pattern, sub in patterns.items():
                with contextlib.suppress(re.error):
                    if re.search(pattern, name):
                        return sub
            return additional

        out: dict[str, Any] = {}
        for name in required:
            out[name] = self.gen(subschema(name), depth + 1)
        optional = [p for p in props if p not in out]
        if depth < self.max_depth:
            for name in optional:
                if self.rng.random() < 0.5 and (max_p is None or len(out) < max_p):
                    with contextlib.suppress(_Unsatisfiable):
                        out[name] = self.gen(props[name], depth + 1)
        for name in list(out):
            for dep in dependent.get(name, []):
                if dep not in out:
                    out[dep] = self.gen(subschema(dep), depth + 1)
        # Free-form maps (e.g. pydantic dict[str, int]) get a couple of entries; minProperties is topped up.
        wants_extra = (not props and isinstance(additional, Mapping) and additional != {} and depth < self.max_depth
                       and self.rng.random() < 0.5)
        target = max(min_p, len(out) + (self.randint(1, 2) if wants_extra else 0))
        if max_p is not None:
            target = min(target, int(max_p))
        for name in optional:
            if len(out) >= target:
                break
            if name not in out:
                out[name] = self.gen(props[name], depth + 1)
        attempts = 0
        while len(out) < target and attempts < 20:
            attempts += 1
            if additional is not False:
                key = _random_word(self.rng, 3, 8)
                if key not in out and key not in props:
                    out[key] = self.gen(subschema(key), depth + 1)
            elif patterns:
                pattern = self.choice(list(patterns))
                try:
                    key = self.from_pattern(pattern)
                except _Unsatisfiable:
                    continue
                if key not in out and key not in props and re.search(pattern, key):
                    out[key] = self.gen(patterns[pattern], depth + 1)
            else:
                break
        return out


def _json_type(value: Any) -> str:
    """JSON type name of a Python value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _canonical(value: Any) -> str:
    """Key for uniqueItems comparisons (jsonschema treats 1 and 1.0 as equal, true and 1 as different)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True, default=repr)


def _is_multiple(value: float | int, m: float | int) -> bool:
    """Mirror jsonschema's multipleOf check."""
    if isinstance(m, float):
        q = value / m
        return math.isfinite(q) and int(q) == q
    return value % m == 0


def _in_bounds(v: float | int, lo: float | None, lo_x: bool, hi: float | None, hi_x: bool) -> bool:
    """Whether ``v`` respects the (possibly exclusive) bounds."""
    if lo is not None and (v <= lo if lo_x else v < lo):
        return False
    return not (hi is not None and (v >= hi if hi_x else v > hi))

def sample_from_schema(schema: Mapping[str, Any] | bool, rng: np.random.Generator, *, max_depth: int = 4) -> Any:
    """Generate a random value valid under a JSON Schema, drawing only from ``rng``.

    Supports ``type`` (incl. lists and ``"null"``), string length/enum/const/format/pattern (patterns and formats best
    effort), integer/number bounds and ``multipleOf``, arrays (``items``, ``prefixItems``, min/maxItems,
    ``uniqueItems``, ``contains``), objects (``properties``, ``required`` -- all required, each optional property with
    probability 0.5 -- ``additionalProperties``, ``patternProperties``), ``enum``/``const``, ``anyOf``/``oneOf`` (one
    branch), ``allOf`` (merged), local ``$ref`` (``$defs``/``definitions``) and the empty / ``true`` schema (a simple
    value). Strings are short (at most 12 characters unless ``minLength``/``format`` need more). Plausible values
    are preferred: a schema's ``default`` or one of its ``examples`` is taken 3 times in 4 when present, and integers
    are 0..10 3 times in 4 when the bounds allow.

    Each candidate is validated (validator class from ``$schema``, default Draft 2020-12) and regenerated up to 16
    times. ``max_depth`` bounds optional nesting: deeper than that only required properties and ``minItems`` elements
    are generated.

    Raises:
        ValueError: no valid value was found (e.g. an unsupported regex, or an unsatisfiable schema).
    """
    validator = _compile(schema)
    generator = _Generator(schema, rng, max_depth)
    last = "schema is unsatisfiable or unsupported"
    for _ in range(_SAMPLE_ATTEMPTS):
        try:
            value = generator.generate()
        except _Unsatisfiable as exc:
            last = str(exc)
            continue
        try:
            error = best_match(validator.iter_errors(value))
        except Exception as exc:  # noqa: BLE001 - an unresolvable $ref, a bad regex: the schema itself is broken
            raise ValueError(f"could not validate a generated value: {_shorten(str(exc), 200)}") from exc
        if error is None:
            return value
        last = error.message
    raise ValueError(f"could not generate a value valid under the schema: {_shorten(last, 200)}")
