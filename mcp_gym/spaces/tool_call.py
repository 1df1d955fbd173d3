"""The action space of an MCP server: :class:`ToolCallSpace` (``{"tool": name, "arguments": {...}}``)."""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
from jsonschema.exceptions import ValidationError, best_match

from mcp_gym.spaces._compile import _compile, _parse_catalogue, fast_check, quick_check
from mcp_gym.spaces._sampler import _SAMPLE_ATTEMPTS, _Generator, _Unsatisfiable
from mcp_gym.spaces.errors import (
    _MAX_LISTED_TOOLS,
    _MAX_MESSAGE,
    ActionError,
    _render_path,
    _render_value,
    _shorten,
    _type_name,
    json_error,
    safe_repr,
)

__all__ = ["ToolCallSpace"]

_ACTION_KEYS = frozenset(("tool", "arguments"))


class ToolCallSpace(gymnasium.spaces.Space[dict[str, Any]]):
    """Action space built from an MCP ``tools/list``: an action is ``{"tool": name, "arguments": {...}}``.

    ``arguments`` may be omitted (or ``None``), meaning ``{}``; no other keys are allowed. An action is contained iff
    the tool exists, the arguments are a JSON object whose JSON encoding is at most ``max_argument_bytes`` (UTF-8), and
    they validate against the tool's input schema. :meth:`validate` / :meth:`validation_error` explain rejections.

    Equality compares tool names (in order), schemas and ``max_argument_bytes``, as required by vector envs.

    >>> space = ToolCallSpace({"add": {"type": "object", "required": ["amount"],
    ...                                "properties": {"amount": {"type": "integer", "minimum": -5, "maximum": 5}}}},
    ...                       seed=0)
    >>> {"tool": "add", "arguments": {"amount": 2}} in space
    True
    >>> err = space.validation_error({"tool": "add", "arguments": {"amount": 9}})   # why an action is refused
    >>> err.kind, err.argument
    ('invalid_arguments', 'amount')
    >>> space.validate({"tool": "frob"})
    "unknown tool 'frob' (available: add)"
    >>> space.sample() in space                          # samples satisfy the schema
    True
    """

    def __init__(
        self,
        tools: Mapping[str, Mapping[str, Any]] | Iterable[Any] | None = None,
        *,
        seed: int | np.random.Generator | None = None,
        max_argument_bytes: int = 1_000_000,
        sample_fixed: Mapping[str, Any] | None = None,
    ) -> None:
        """Create the space.

        Args:
            tools: tool name -> JSON Schema of its arguments (the MCP ``inputSchema`` dict), order preserved. Also
                accepted: an iterable of MCP ``Tool`` objects or ``{"name": ..., "inputSchema": ...}`` dicts.
                A ``None`` schema means the tool takes no parameters.
            seed: seed (or Generator) for :meth:`sample`.
            max_argument_bytes: largest allowed size of ``json.dumps(arguments)`` in UTF-8 bytes.
            sample_fixed: initial :attr:`sample_fixed`.
        """
        if isinstance(max_argument_bytes, bool) or int(max_argument_bytes) <= 0:
            raise ValueError(f"max_argument_bytes must be a positive int, got {max_argument_bytes!r}")
        self.max_argument_bytes: int = int(max_argument_bytes)
        self._schemas: dict[str, Any] = {}
        self._validators: dict[str, Any] = {}
        self._names: list[str] = []
        self.sample_fixed: dict[str, Any] = dict(sample_fixed or {})
        """Argument name -> value that :meth:`sample` uses for every tool declaring that argument (e.g.
        ``{"repo_path": "/abs/repo"}``); set it on ``env.action_space`` to make random baselines call real servers
        sensibly. Not part of equality."""
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

    def submit_error(self, action: dict[str, Any]) -> ActionError | None:
        """Why a ``submit`` action cannot be graded (``None`` if it can): its arguments must be a JSON object (or
        absent), and a non-string answer must be JSON (it is graded as its JSON text)."""
        args = dict.get(action, "arguments")  # dict.get: not a subclass's get
        if args is not None and not isinstance(args, dict):
            return ActionError("malformed", "submit", None, "tool 'submit': 'arguments' must be a dict (JSON object) "
                               f"such as {{\"answer\": \"...\"}}, got {type(args).__name__}")
        if len(action) > 2 or not all(isinstance(k, str) and k in ("tool", "arguments") for k in action):
            return self.validation_error(action)
        if args is not None:
            return json_error(tool="submit", arguments=args, max_bytes=self.max_argument_bytes)
        return None

    def validation_error(self, action: Any) -> ActionError | None:
        """Return ``None`` if ``action`` is valid, else a structured :class:`ActionError`. Never raises, whatever
        ``action`` holds (deep nesting, cycles, objects whose ``repr`` or ``__eq__`` raise, ...)."""
        if action.__class__ is dict and len(action) == 2:  # the commonest action, checked in one call (fast_check)
            name, arguments = action.get("tool"), action.get("arguments")
            if name.__class__ is str and arguments.__class__ is dict:  # (so the two keys are "tool", "arguments")
                validator = self._validators.get(name)
                fast = fast_check(validator) if validator is not None else None
                if fast is not None and fast(arguments, self.max_argument_bytes):
                    return None
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
        unexpected = len(action) > 2
        for k in action:  # (a loop, not all(): this runs every step)
            if unexpected or not (isinstance(k, str) and k in _ACTION_KEYS):
                unexpected = True
                break
        if unexpected:
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
        quick = quick_check(validator)  # plainly typed properties: checked without jsonschema when valid
        if quick is not None and quick(arguments):
            return None
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

    def sample(self, mask: Any | None = None, probability: Any | None = None, *,
               fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Return a random valid action ``{"tool": name, "arguments": {...}}`` drawn only from ``self.np_random``.

        Values are plausible rather than absurd: a schema's ``const``/``enum``, else mostly its ``default`` or one of
        its ``examples``, small numbers and short strings (see :func:`sample_from_schema`).

        Args:
            mask: ``None``; a collection of allowed tool names (a single ``str`` is one name); or an int8/bool array
                aligned with :attr:`tool_names` (1 = allowed).
            probability: optional array of tool probabilities aligned with :attr:`tool_names` (sums to 1); cannot be
                combined with ``mask``.
            fixed: argument name -> value used (instead of a random one) by every tool whose schema declares that
                argument in its ``properties``; merged over :attr:`sample_fixed`. A fixed value the schema rejects
                makes that tool unsampleable (``ValueError`` if no allowed tool is left).

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
        pinned = {**self.sample_fixed, **dict(fixed or {})}
        failures: list[str] = []
        while weights.any():
            index = int(rng.choice(n, p=weights / weights.sum()))
            name = self._names[index]
            validator = self._validators[name]
            schema = self._schemas[name]
            props = schema.get("properties") if isinstance(schema, Mapping) else None
            fix = {k: v for k, v in pinned.items() if isinstance(props, Mapping) and k in props}
            generator = _Generator(schema, rng, 4)
            for _ in range(_SAMPLE_ATTEMPTS):
                try:
                    arguments = generator.generate(as_object=True)
                except _Unsatisfiable:
                    continue
                if isinstance(arguments, dict) and fix:
                    arguments.update(copy.deepcopy(fix))
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

    def to_jsonable(self, sample_n: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
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
        named = [e for e in expected if e]
        if expected and len(named) == len(expected):
            detail += f" (expected {' or '.join(dict.fromkeys(named))})"
    if not path:
        message = f"tool {tool!r}: arguments: {detail}"
        return ActionError("invalid_arguments", tool, None, _shorten(message, _MAX_MESSAGE))
    arg = _render_path(path)
    message = f"tool {tool!r}: argument {arg!r} = {_render_value(error.instance)}: {detail}"
    return ActionError("invalid_arguments", tool, arg, _shorten(message, _MAX_MESSAGE))
