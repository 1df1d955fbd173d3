"""Gymnasium spaces for MCP tool calls and free-form text.

* :class:`Utf8Text` -- any Python ``str`` (unlike ``gymnasium.spaces.Text``, which only contains strings made of its
  charset, so ``"hello world"``, ``""`` or non-ASCII text are rejected there).
* :class:`ToolCallSpace` -- the action space of an MCP server: an action is ``{"tool": name, "arguments": {...}}`` and
  is contained iff the tool exists and the arguments validate against the tool's ``inputSchema``.
* :func:`sample_from_schema` -- generate a random value valid under a JSON Schema (used by ``ToolCallSpace.sample``).

Validation uses :mod:`jsonschema` with the validator class chosen from each schema's ``$schema`` (default Draft
2020-12); one validator is compiled per tool when the catalogue is set and reused on every call. ``format`` is treated
as an annotation (the JSON Schema default), so e.g. a malformed ``date-time`` string is still contained.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
import reprlib
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match

try:  # Python >= 3.11
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older Pythons
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = [
    "ActionError", "MAX_ARGUMENT_DEPTH", "TextMapping", "ToolCallSpace", "Utf8Text", "json_error", "safe_repr",
    "sample_from_schema",
]

# ---------------------------------------------------------------------------------------------------------------------
# Random text helpers
# ---------------------------------------------------------------------------------------------------------------------

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = "0123456789"
_PUNCT = " -_.,:/"
_UNICODE = "éèüößñçøåæłžčäàâîôΩλπждя中文日本語한국😀✓€"
# (pool, cumulative probability) -- mostly lowercase so strings look like words, with a little of everything else.
_POOLS: tuple[tuple[str, float], ...] = (
    (_LOWER, 0.72),
    (_DIGITS, 0.80),
    (_UPPER, 0.86),
    (_PUNCT, 0.93),
    (_UNICODE, 1.0),
)
# Characters used when a regex construct asks for "any character except ...".
_ANY_POOL = _LOWER + _UPPER + _DIGITS + " -_.,:/@#!?()[]{}+=*&%$~'\"<>|;" + "éüßñ中😀"


def _random_text(rng: np.random.Generator, length: int) -> str:
    """Return ``length`` random characters, word-like (mostly lowercase), never starting or ending with a space."""
    chars: list[str] = []
    for i in range(length):
        u = rng.random()
        pool = next(chars_ for chars_, cum in _POOLS if u < cum)
        if pool is _PUNCT and (i == 0 or i == length - 1):
            pool = _LOWER
        chars.append(pool[int(rng.integers(len(pool)))])
    return "".join(chars)


def _random_word(rng: np.random.Generator, low: int = 3, high: int = 8) -> str:
    """Return a random lowercase ASCII word of ``low..high`` letters."""
    n = int(rng.integers(low, high + 1))
    return "".join(_LOWER[int(i)] for i in rng.integers(0, len(_LOWER), size=n))


# ---------------------------------------------------------------------------------------------------------------------
# Utf8Text
# ---------------------------------------------------------------------------------------------------------------------


class Utf8Text(gymnasium.spaces.Space[str]):
    """Any Python ``str`` (UTF-8 / non-ASCII and the empty string included), with an optional maximum length.

    Use this instead of ``gymnasium.spaces.Text`` for LLM prompts and tool outputs: ``Text.contains`` demands every
    character be in its charset. Length is counted in code points (``len(x)``).
    """

    def __init__(self, max_length: int | None = None, seed: int | np.random.Generator | None = None) -> None:
        """Create the space.

        Args:
            max_length: maximum ``len()`` of a contained string, or ``None`` for no limit.
            seed: seed (or Generator) for :meth:`sample`.
        """
        if max_length is not None:
            if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 0:
                raise ValueError(f"max_length must be a non-negative int or None, got {max_length!r}")
            max_length = int(max_length)
        self.max_length: int | None = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Strings cannot be flattened to a Box: always ``False``."""
        return False

    def contains(self, x: Any) -> bool:
        """Return True iff ``x`` is a ``str`` no longer than ``max_length``."""
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> str:
        """Return a short (at most 12 characters) random string drawn from ``self.np_random``.

        Masks are not supported: ``mask``/``probability`` must be ``None``.
        """
        if mask is not None or probability is not None:
            raise ValueError("Utf8Text.sample does not support mask or probability")
        upper = 12 if self.max_length is None else min(12, self.max_length)
        length = int(self.np_random.integers(min(1, upper), upper + 1))
        return _random_text(self.np_random, length)

    def to_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        """Strings are already JSON: return them as a list."""
        return list(sample_n)

    def from_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        """Strings are already JSON: return them as a list."""
        return list(sample_n)

    def __eq__(self, other: object) -> bool:
        """Two Utf8Text spaces are equal iff their ``max_length`` is equal."""
        return isinstance(other, Utf8Text) and other.max_length == self.max_length

    def __repr__(self) -> str:
        """Return ``Utf8Text()`` or ``Utf8Text(max_length=N)``."""
        return "Utf8Text()" if self.max_length is None else f"Utf8Text(max_length={self.max_length})"


# ---------------------------------------------------------------------------------------------------------------------
# ActionError
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionError:
    """Why an action is not in a :class:`ToolCallSpace`.

    Attributes:
        kind: one of ``"malformed"`` (not ``{"tool": str, "arguments": dict}``), ``"unknown_tool"``,
            ``"invalid_arguments"`` (schema violation or non-JSON value) and ``"too_large"``.
        tool: the tool name, when the action names one (``None`` for malformed actions without a usable name).
        argument: path of the offending argument, like ``items[2].name``, or ``None`` when not specific to one.
        message: one-line human/LLM-readable explanation naming the tool and argument.
    """

    kind: str
    tool: str | None
    argument: str | None
    message: str

    def __str__(self) -> str:
        """Return :attr:`message`."""
        return self.message


# ---------------------------------------------------------------------------------------------------------------------
# Message helpers
# ---------------------------------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------------------------------
# Schema compilation
# ---------------------------------------------------------------------------------------------------------------------

_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


_COMPILED: dict[str, tuple[Any, str | None]] = {}
_COMPILED_MAX = 2048


def _compile(schema: Any, name: str | None = None) -> Any:
    """Build the jsonschema validator for ``schema``: class from ``$schema``, default Draft 2020-12.

    ``check_schema`` costs milliseconds, so results are memoised by the schema's canonical JSON (spaces are rebuilt
    when vector envs copy or unpickle them). An invalid schema triggers a warning and falls back to a validator that
    only requires an object, so one broken tool does not make the whole server unusable.
    """
    try:
        key: str | None = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    cached = _COMPILED.get(key) if key is not None else None
    if cached is None:
        cls = validators.validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(schema)
            cached = (cls(schema), None)
        except SchemaError as exc:
            cached = (Draft202012Validator(_OBJECT_SCHEMA), _shorten(exc.message, 200))
        if key is not None:
            if len(_COMPILED) >= _COMPILED_MAX:
                _COMPILED.pop(next(iter(_COMPILED)))
            _COMPILED[key] = cached
    validator, problem = cached
    if problem is not None:
        where = f"tool {name!r}" if name is not None else "schema"
        warnings.warn(f"{where}: invalid JSON Schema ({problem}); only checking that arguments are an object",
                      stacklevel=3)
    return validator


def _normalise_schema(schema: Any, name: str) -> Any:
    """Deep-copy a tool's schema as plain JSON containers; ``None`` means "no parameters" (``{"type": "object"}``)."""
    if schema is None:
        return dict(_OBJECT_SCHEMA)
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, Mapping):
        raise TypeError(f"tool {name!r}: input schema must be a mapping, got {type(schema).__name__}")
    return _plain(schema)


def _plain(value: Any) -> Any:
    """Deep copy turning Mappings into dicts and tuples into lists (so schemas compare and pickle cleanly)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parse_catalogue(tools: Any) -> dict[str, Any]:
    """Accept ``{name: schema}``, or an iterable of MCP ``Tool`` objects / ``{"name", "inputSchema"}`` dicts."""
    if tools is None:
        return {}
    out: dict[str, Any] = {}
    if isinstance(tools, Mapping):
        items: Iterable[tuple[Any, Any]] = tools.items()
    else:
        pairs = []
        for tool in tools:
            if isinstance(tool, Mapping):
                pairs.append((tool.get("name"), tool.get("inputSchema", tool.get("input_schema"))))
            else:
                pairs.append((getattr(tool, "name", None), getattr(tool, "inputSchema", None)))
        items = pairs
    for name, schema in items:
        if not isinstance(name, str) or not name:
            raise TypeError(f"tool names must be non-empty str, got {name!r}")
        if name in out:
            raise ValueError(f"duplicate tool name {name!r}")
        out[name] = _normalise_schema(schema, name)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# ToolCallSpace
# ---------------------------------------------------------------------------------------------------------------------

_ACTION_KEYS = frozenset(("tool", "arguments"))
_SAMPLE_ATTEMPTS = 16


class ToolCallSpace(gymnasium.spaces.Space[dict]):
    """Action space built from an MCP ``tools/list``: an action is ``{"tool": name, "arguments": {...}}``.

    ``arguments`` may be omitted (or ``None``), meaning ``{}``; no other keys are allowed. An action is contained iff
    the tool exists, the arguments are a JSON object whose JSON encoding is at most ``max_argument_bytes`` (UTF-8), and
    they validate against the tool's input schema. :meth:`validate` / :meth:`validation_error` explain rejections.

    Equality compares tool names (in order), schemas and ``max_argument_bytes``, as required by vector envs.
    """

    def __init__(
        self,
        tools: Mapping[str, Mapping[str, Any]] | Iterable[Any] | None = None,
        *,
        seed: int | np.random.Generator | None = None,
        max_argument_bytes: int = 1_000_000,
    ) -> None:
        """Create the space.

        Args:
            tools: tool name -> JSON Schema of its arguments (the MCP ``inputSchema`` dict), order preserved. Also
                accepted: an iterable of MCP ``Tool`` objects or ``{"name": ..., "inputSchema": ...}`` dicts.
                A ``None`` schema means the tool takes no parameters.
            seed: seed (or Generator) for :meth:`sample`.
            max_argument_bytes: largest allowed size of ``json.dumps(arguments)`` in UTF-8 bytes.
        """
        if isinstance(max_argument_bytes, bool) or int(max_argument_bytes) <= 0:
            raise ValueError(f"max_argument_bytes must be a positive int, got {max_argument_bytes!r}")
        self.max_argument_bytes: int = int(max_argument_bytes)
        self._schemas: dict[str, Any] = {}
        self._validators: dict[str, Any] = {}
        self._names: list[str] = []
        super().__init__(shape=None, dtype=None, seed=seed)
        self.update(tools)

    # -- catalogue ------------------------------------------------------------------------------------------------

    @property
    def tool_names(self) -> list[str]:
        """Current tool names, in catalogue order (a new list)."""
        return list(self._names)

    @property
    def schemas(self) -> dict[str, Any]:
        """Tool name -> input schema (a deep copy; mutating it does not affect the space)."""
        return copy.deepcopy(self._schemas)

    def update(self, tools: Mapping[str, Mapping[str, Any]] | Iterable[Any] | None) -> bool:
        """Replace the catalogue (e.g. after ``notifications/tools/list_changed``).

        Validators of tools whose schema did not change are reused. Returns True iff names, order or schemas changed.
        """
        new = _parse_catalogue(tools)
        if list(new) == self._names and new == self._schemas:
            return False
        compiled = {}
        for name, schema in new.items():
            if name in self._schemas and self._schemas[name] == schema:
                compiled[name] = self._validators[name]
            else:
                compiled[name] = _compile(schema, name)
        self._schemas, self._validators, self._names = new, compiled, list(new)
        return True

    # -- validation -----------------------------------------------------------------------------------------------

    def validation_error(self, action: Any) -> ActionError | None:
        """Return ``None`` if ``action`` is valid, else a structured :class:`ActionError`. Never raises, whatever
        ``action`` holds (deep nesting, cycles, objects whose ``repr`` or ``__eq__`` raise, ...)."""
        try:
            return self._validation_error(action)
        except Exception as exc:  # noqa: BLE001 - the last guard: an action we cannot even inspect is malformed
            return ActionError("malformed", None, None,
                               f"the action could not be inspected: {type(exc).__name__} while reading it")

    def _validation_error(self, action: Any) -> ActionError | None:
        if not isinstance(action, dict):
            return ActionError(
                "malformed", None, None,
                f"action must be a dict with keys 'tool' and 'arguments', got {_type_name(action)}",
            )
        if "tool" not in action:
            keys = ", ".join(map(safe_repr, action)) or "none"
            return ActionError("malformed", None, None, _shorten(
                f"action must be a dict with keys 'tool' and 'arguments', missing 'tool' (got keys: {keys})",
                _MAX_MESSAGE))
        if len(action) > 2 or not all(isinstance(k, str) and k in _ACTION_KEYS for k in action):
            extra = ", ".join(safe_repr(k) for k in action if not (isinstance(k, str) and k in _ACTION_KEYS))
            tool = action["tool"] if isinstance(action["tool"], str) else None
            return ActionError("malformed", tool, None, _shorten(
                f"action has unexpected key(s) {extra}; only 'tool' and 'arguments' are allowed", _MAX_MESSAGE))
        name = action["tool"]
        if not isinstance(name, str):
            return ActionError("malformed", None, None,
                               f"action 'tool' must be a str (the tool name), got {_type_name(name)}")
        validator = self._validators.get(name)
        if validator is None:
            if not self._names:
                available = "no tools available"
            elif len(self._names) <= _MAX_LISTED_TOOLS:
                available = "available: " + ", ".join(self._names)
            else:
                more = len(self._names) - _MAX_LISTED_TOOLS
                available = "available: " + ", ".join(self._names[:_MAX_LISTED_TOOLS]) + f", ... (+{more} more)"
            return ActionError("unknown_tool", _shorten(name, 100), None,
                               f"unknown tool {_shorten(repr(name), 100)} ({available})")
        arguments = action.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            return ActionError("malformed", name, None,
                               f"tool {name!r}: 'arguments' must be a dict (JSON object), got {_type_name(arguments)}")
        return self._check_arguments(name, validator, arguments)

    def _check_arguments(self, name: str, validator: Any, arguments: dict[str, Any]) -> ActionError | None:
        """Serialisability, depth, size and schema checks for one tool's arguments."""
        problem = json_error(name, arguments, self.max_argument_bytes)
        if problem is not None:
            return problem
        errors = validator.iter_errors(arguments)
        try:
            first = next(errors, None)
            if first is None:
                return None
            error = best_match(_chain(first, errors))
        except Exception as exc:  # unresolvable $ref, bad regex, ...: the schema itself is broken
            return ActionError("invalid_arguments", name, None,
                               _shorten(f"tool {name!r}: could not validate arguments: {exc}", _MAX_MESSAGE))
        return _describe(name, error)

    def validate(self, action: Any) -> str | None:
        """Return ``None`` if ``action`` is valid, else a one-line message naming the tool and argument at fault."""
        error = self.validation_error(action)
        return None if error is None else error.message

    def contains(self, x: Any) -> bool:
        """Return True iff :meth:`validate` finds nothing wrong with ``x``."""
        return self.validation_error(x) is None

    # -- sampling ---------------------------------------------------------------------------------------------------

    def _allowed(self, mask: Any) -> np.ndarray:
        """Boolean array (aligned with ``tool_names``) of the tools a mask allows."""
        n = len(self._names)
        if mask is None:
            return np.ones(n, dtype=bool)
        if isinstance(mask, str):
            mask = [mask]
        if isinstance(mask, np.ndarray) or (
            isinstance(mask, Sequence) and mask and all(isinstance(m, (bool, int, np.integer, np.bool_)) for m in mask)
        ):
            arr = np.asarray(mask)
            if arr.shape != (n,):
                raise ValueError(f"mask array must have shape ({n},) aligned with tool_names, got {arr.shape}")
            if arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"mask array must be int8 or bool, got dtype {arr.dtype}")
            if not np.all((arr == 0) | (arr == 1)):
                raise ValueError("mask array values must be 0 or 1")
            return arr.astype(bool)
        if isinstance(mask, Collection):
            unknown = [m for m in mask if m not in self._validators]
            if unknown:
                raise ValueError(f"mask names unknown tool(s): {', '.join(map(repr, unknown))}")
            allowed = set(mask)
            return np.array([name in allowed for name in self._names], dtype=bool)
        raise TypeError(f"mask must be None, a collection of tool names or an int8/bool array, got {type(mask)}")

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> dict[str, Any]:
        """Return a random valid action ``{"tool": name, "arguments": {...}}`` drawn only from ``self.np_random``.

        Args:
            mask: ``None``; a collection of allowed tool names (a single ``str`` is one name); or an int8/bool array
                aligned with :attr:`tool_names` (1 = allowed).
            probability: optional array of tool probabilities aligned with :attr:`tool_names` (sums to 1); cannot be
                combined with ``mask``.

        Raises:
            ValueError: empty catalogue, no tool allowed, bad mask/probability, or no valid arguments could be
                generated for any allowed tool (e.g. unsupported regex patterns).
        """
        if mask is not None and probability is not None:
            raise ValueError("only one of mask and probability can be given")
        n = len(self._names)
        if n == 0:
            raise ValueError("cannot sample from a ToolCallSpace with no tools")
        weights = self._allowed(mask).astype(np.float64)
        if probability is not None:
            prob = np.asarray(probability, dtype=np.float64)
            if prob.shape != (n,):
                raise ValueError(f"probability must have shape ({n},) aligned with tool_names, got {prob.shape}")
            if np.any(prob < 0) or not np.isfinite(prob).all() or not np.isclose(prob.sum(), 1.0):
                raise ValueError("probability must be non-negative and sum to 1")
            weights = prob.copy()
        if not weights.any():
            raise ValueError("no tool is allowed by the mask/probability")
        rng = self.np_random
        failures: list[str] = []
        while weights.any():
            index = int(rng.choice(n, p=weights / weights.sum()))
            name = self._names[index]
            validator = self._validators[name]
            generator = _Generator(self._schemas[name], rng, 4)
            for _ in range(_SAMPLE_ATTEMPTS):
                try:
                    arguments = generator.generate(as_object=True)
                except _Unsatisfiable:
                    continue
                if isinstance(arguments, dict) and self._check_arguments(name, validator, arguments) is None:
                    return {"tool": name, "arguments": arguments}
            failures.append(name)
            weights[index] = 0.0
        raise ValueError(f"could not generate valid arguments for tool(s): {', '.join(failures)}")

    # -- gymnasium plumbing -----------------------------------------------------------------------------------------

    @property
    def is_np_flattenable(self) -> bool:
        """Tool calls cannot be flattened to a Box: always ``False``."""
        return False

    def to_jsonable(self, sample_n: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Actions are JSON already: return deep copies as a list."""
        return [copy.deepcopy(x) for x in sample_n]

    def from_jsonable(self, sample_n: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Actions are JSON already: return deep copies as a list."""
        return [copy.deepcopy(x) for x in sample_n]

    def __eq__(self, other: object) -> bool:
        """Equal iff same tool names in the same order, same schemas and same ``max_argument_bytes``."""
        return (
            isinstance(other, ToolCallSpace)
            and self._names == other._names
            and self._schemas == other._schemas
            and self.max_argument_bytes == other.max_argument_bytes
        )

    __hash__ = None  # type: ignore[assignment]  # mutable (update) and compared by value

    def __repr__(self) -> str:
        """Return e.g. ``ToolCallSpace(3 tools: a, b, c)``."""
        n = len(self._names)
        if n == 0:
            return "ToolCallSpace(0 tools)"
        shown = ", ".join(self._names[:_MAX_LISTED_TOOLS])
        if n > _MAX_LISTED_TOOLS:
            shown += f", ... (+{n - _MAX_LISTED_TOOLS} more)"
        return f"ToolCallSpace({n} tool{'s' if n != 1 else ''}: {shown})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the compiled validators (they are rebuilt on unpickling)."""
        state = self.__dict__.copy()
        state.pop("_validators", None)
        return state

    def __setstate__(self, state: Iterable[tuple[str, Any]] | Mapping[str, Any]) -> None:
        """Restore from a pickle and recompile the validators."""
        super().__setstate__(state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._validators = {name: _compile(schema, name) for name, schema in self._schemas.items()}


def _safe_search(pattern: str, text: str) -> bool:
    """``re.search`` that treats an invalid pattern as no match."""
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def _summarise(schema: Any) -> str | None:
    """Very short description of a union branch for messages, e.g. ``array of string`` / ``null`` / ``'a'``."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return _render_value(schema["const"])
    if "$ref" in schema and isinstance(schema["$ref"], str):
        return schema["$ref"].rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = "/".join(map(str, kind))
    if kind == "array" and isinstance(schema.get("items"), Mapping) and isinstance(schema["items"].get("type"), str):
        return f"array of {schema['items']['type']}"
    return kind if isinstance(kind, str) else None


def _chain(first: ValidationError, rest: Iterator[ValidationError]) -> Iterator[ValidationError]:
    """Yield ``first`` then the rest of the errors."""
    yield first
    yield from rest


def _describe(tool: str, error: ValidationError) -> ActionError:
    """Turn jsonschema's best-match error into a one-line :class:`ActionError`."""
    path = list(error.absolute_path)
    keyword = error.validator
    if keyword == "required" and isinstance(error.instance, dict):
        missing = next((r for r in error.validator_value if r not in error.instance), None)
        if missing is not None:
            arg = _render_path([*path, missing])
            return ActionError("invalid_arguments", tool, arg, f"tool {tool!r}: argument {arg!r} is required")
    if keyword in ("additionalProperties", "unevaluatedProperties") and isinstance(error.instance, dict):
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        props = schema.get("properties", {}) or {}
        patterns = list((schema.get("patternProperties", {}) or {}).keys())
        extras = [k for k in error.instance if k not in props and not any(_safe_search(p, k) for p in patterns)]
        if extras and keyword == "additionalProperties" and error.validator_value is False:
            args = [_render_path([*path, k]) for k in extras]
            allowed = ", ".join(props) or "none"
            noun = "argument" if len(args) == 1 else "arguments"
            message = f"tool {tool!r}: unexpected {noun} {', '.join(map(repr, args))} (allowed: {allowed})"
            return ActionError("invalid_arguments", tool, args[0], _shorten(message, _MAX_MESSAGE))
    detail = _shorten(error.message, 200)
    if keyword in ("anyOf", "oneOf") and isinstance(error.validator_value, list):
        expected = [_summarise(branch) for branch in error.validator_value]
        if expected and all(expected):
            detail += f" (expected {' or '.join(dict.fromkeys(expected))})"
    if not path:
        message = f"tool {tool!r}: arguments: {detail}"
        return ActionError("invalid_arguments", tool, None, _shorten(message, _MAX_MESSAGE))
    arg = _render_path(path)
    message = f"tool {tool!r}: argument {arg!r} = {_render_value(error.instance)}: {detail}"
    return ActionError("invalid_arguments", tool, arg, _shorten(message, _MAX_MESSAGE))


# ---------------------------------------------------------------------------------------------------------------------
# Sampling values from JSON Schemas
# ---------------------------------------------------------------------------------------------------------------------


class _Unsatisfiable(Exception):
    """The generator cannot produce a value for this (sub)schema."""


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


class _Generator:
    """Random value generator for one root schema (keeps the root for ``$ref`` resolution)."""

    def __init__(self, root: Any, rng: np.random.Generator, max_depth: int) -> None:
        self.root = root
        self.rng = rng
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

    # -- strings ------------------------------------------------------------------------------------------------

    def gen_string(self, schema: Mapping[str, Any]) -> str:
        """Generate a string honouring length, pattern (best effort) and format (best effort)."""
        lo = int(schema.get("minLength", 0) or 0)
        hi_raw = schema.get("maxLength")
        hi = None if hi_raw is None else int(hi_raw)
        if hi is not None and hi < lo:
            raise _Unsatisfiable("maxLength < minLength")

        def fits(s: str | None) -> bool:
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
                    candidate = self.from_pattern(pattern)
                except _Unsatisfiable:
                    break
                if fits(candidate) and compiled.search(candidate):
                    return candidate
        fmt = schema.get("format")
        if isinstance(fmt, str):
            candidate = self.from_format(fmt)
            if fits(candidate) and (compiled is None or compiled.search(candidate)):
                return candidate  # type: ignore[return-value]
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
            parsed = _sre_parse.parse(pattern)
        except Exception as exc:  # noqa: BLE001 - any parser failure means "can't generate"
            raise _Unsatisfiable(f"cannot parse pattern: {exc}") from exc
        return self._emit(parsed, {})

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
        if ilo is None and ihi is None:
            ilo, ihi = 0, 100
        elif ilo is None:
            ilo = min(0, ihi) if ihi >= -100 else ihi - 100
        elif ihi is None:
            ihi = max(ilo + 100, 100) if ilo <= 100 else ilo + 100
        if ilo > ihi:
            raise _Unsatisfiable("empty integer range")
        return ilo, ihi

    def gen_integer(self, schema: Mapping[str, Any]) -> int:
        """Generate an integer honouring bounds and multipleOf."""
        lo, hi = self._int_range(schema)
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


def sample_from_schema(schema: Mapping[str, Any] | bool, rng: np.random.Generator, *, max_depth: int = 4) -> Any:
    """Generate a random value valid under a JSON Schema, drawing only from ``rng``.

    Supports ``type`` (incl. lists and ``"null"``), string length/enum/const/format/pattern (patterns and formats best
    effort), integer/number bounds and ``multipleOf``, arrays (``items``, ``prefixItems``, min/maxItems,
    ``uniqueItems``, ``contains``), objects (``properties``, ``required`` -- all required, each optional property with
    probability 0.5 -- ``additionalProperties``, ``patternProperties``), ``enum``/``const``, ``anyOf``/``oneOf`` (one
    branch), ``allOf`` (merged), local ``$ref`` (``$defs``/``definitions``) and the empty / ``true`` schema (a simple
    value). Strings are short (at most 12 characters unless ``minLength``/``format`` need more).

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
        error = best_match(validator.iter_errors(value))
        if error is None:
            return value
        last = error.message
    raise ValueError(f"could not generate a value valid under the schema: {_shorten(last, 200)}")


# ---------------------------------------------------------------------------------------------------------------------
# TextMapping
# ---------------------------------------------------------------------------------------------------------------------


class TextMapping(gymnasium.spaces.Space[dict]):
    """A ``dict`` of ``str -> str`` with any keys (e.g. resource URI -> resource text)."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Not flattenable to a numpy array."""
        return False

    def contains(self, x: Any) -> bool:
        """True for a dict whose keys and values are all ``str``."""
        return isinstance(x, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in x.items())

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> dict[str, str]:
        """A small random mapping (for tests; envs fill it with real resources)."""
        n = int(self.np_random.integers(0, 3))
        return {f"res://{_random_word(self.np_random)}": _random_text(self.np_random, 8) for _ in range(n)}

    def to_jsonable(self, sample_n: Sequence[dict[str, str]]) -> list[dict[str, str]]:
        """Identity (copies)."""
        return [dict(s) for s in sample_n]

    def from_jsonable(self, sample_n: Sequence[dict[str, str]]) -> list[dict[str, str]]:
        """Identity (copies)."""
        return [dict(s) for s in sample_n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextMapping)

    def __repr__(self) -> str:
        return "TextMapping()"
