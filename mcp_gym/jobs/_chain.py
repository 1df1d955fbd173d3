"""Chained arguments of the explore walks of ``mcp-gym tasks generate`` (:mod:`mcp_gym.jobs.proposers`): the values
earlier results of the same walk returned, and which of them an argument takes.

An argument whose name matches the name of a value an earlier result returned takes that value first: ``file_hash``
takes a ``file_hash`` (PyPI mcp-text-editor's ``get_text_file_contents`` returns one, and its
``edit_text_file_contents`` refuses an edit without it), ``range_hash`` a ``range_hash`` (or a ``hash``),
``line_start`` a ``start_line``, ``entityName`` a ``name``. Such a value is taken whatever the argument's type (an
integer ``line_start`` takes the ``start_line`` 2 as ``2``), and a list whose item took one keeps that item alone;
an argument with no such match takes, as before, any earlier string value (a path argument one that looks like a
path).

A walk that *follows* a read (:meth:`~mcp_gym.jobs.proposers.ExploreProposer.follows`) calls a tool whose arguments
are named like what the read returned, and fills every such argument from it (:func:`chain_arguments` with
``follow``): the read's own arguments go by their names too (its ``file_path`` is the edit's ``path``), and an empty
list whose items take such a value gets one item.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__: list[str] = []  # internal to mcp_gym.jobs.proposers

PATHLIKE = re.compile(r"(path|dir|directory|file|folder|source|destination|root)s?$", re.IGNORECASE)
"""An argument named like a path: it takes a value that looks like one."""


@dataclass
class Token:
    """A value an earlier call returned: ``prefix`` + what step ``origin`` returned at ``path`` (``origin`` -1: one of
    ``generator.values``)."""

    value: str
    origin: int
    path: str
    prefix: str = ""
    name: str | None = None  # the name it goes by, when not its path's (the argument of a read it was given as)
    at: int | None = None  # the step that named it, when not ``origin``


_LAST_KEY = re.compile(r"(?:\.([A-Za-z_]\w*)|\['([^']*)'\])(?:\[\d+\])*$")


def last_key(path: str) -> str | None:
    """The name of the value at a result ``path``: the last member of a JSONPath (``$.ranges[0].range_hash`` ->
    ``range_hash``), the key of ``field:KEY``; ``None`` for a line or a word (they have no name)."""
    if path.startswith("field:"):
        return path[6:]
    m = _LAST_KEY.search(path) if path.startswith("$") else None
    return (m.group(1) or m.group(2)) if m else None


def words(name: str) -> frozenset[str]:
    """The words of a name, lower-cased: ``entityName``, ``entity_name`` and ``entity-name`` are ``{entity, name}``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return frozenset(w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w)


def match(argument: str, key: str | None) -> int:
    """How well a value named ``key`` fits an argument named ``argument``: 3 the same name (case and separators
    aside), 2 the same words in another order (``line_start``, ``start_line``), 1 the words of one among the other's
    (``range_hash``, ``hash``; ``entityName``, ``name``), 0 none."""
    if not key:
        return 0
    a, k = words(argument), words(key)
    if not a or not k:
        return 0
    if re.sub(r"[^a-z0-9]", "", argument.lower()) == re.sub(r"[^a-z0-9]", "", key.lower()):
        return 3
    if a == k:
        return 2
    return 1 if a <= k or k <= a else 0


def typed(value: str, like: Any) -> Any:
    """``value`` (a result's scalar, as text) as the type of the sampled argument ``like``, or ``None`` when it is not
    one: ``"2"`` for an integer, ``"2.5"`` for a number, ``"true"`` for a boolean; a ``None`` (a nullable argument
    left empty) takes an integer or a number."""
    if isinstance(like, str):
        return value
    if isinstance(like, bool):
        return {"true": True, "false": False}.get(value)
    if re.fullmatch(r"-?\d{1,15}", value) and (like is None or isinstance(like, (int, float))):
        return int(value) if not isinstance(like, float) else float(value)
    if re.fullmatch(r"-?\d{1,15}\.\d{1,15}", value) and (like is None or isinstance(like, float)):
        return float(value)
    return None


def name_of(token: Token) -> str | None:
    """The name a value goes by: the argument it was given as (:attr:`Token.name`), else the last key of its path."""
    if token.name is not None:
        return token.name
    return last_key(token.path) if token.origin >= 0 and not token.prefix else None


def _step(token: Token) -> int:
    return token.origin if token.at is None else token.at


def named(tokens: Sequence[Token], argument: str, like: Any) -> list[Token]:
    """The tokens of the latest step that returned a value named like ``argument``, of the best match there is and
    of a type the argument takes (``[]``: none)."""
    scored = [(match(argument, name_of(t)), t) for t in tokens]
    scored = [(m, t) for m, t in scored if m and typed(t.value, like) is not None]
    if not scored:
        return []
    best = max(m for m, _ in scored)
    latest = max(_step(t) for m, t in scored if m == best)
    return [t for m, t in scored if m == best and _step(t) == latest]


def _deref(node: Any, root: Any) -> Any:
    """A schema ``node`` with its local ``$ref`` followed (``#/$defs/Patch``: what pydantic makes of a model) and an
    ``anyOf``/``oneOf`` of one non-null option taken for that option (``Patch | None``); at most 16 steps (a server's
    schema is untrusted: a ``$ref`` cycle ends there)."""
    for _ in range(16):
        if not isinstance(node, Mapping):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~")) \
                    if isinstance(target, Mapping) else None
            node = target
            continue
        for key in ("anyOf", "oneOf"):
            options = node.get(key)
            if isinstance(options, list):
                real = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
                if len(real) == 1:
                    node = real[0]
                    break
        else:
            return node
    return None


def argument_names(schema: Any) -> set[str]:
    """The names of a tool's arguments, its input ``schema``'s properties at any depth (an edit's ``range_hash`` in
    ``files[].patches[]``)."""
    out: set[str] = set()
    todo, seen = [schema], 0
    while todo and seen < 500:  # a server's schema is untrusted: bounded
        node = _deref(todo.pop(), schema)
        seen += 1
        if not isinstance(node, Mapping):
            continue
        props = node.get("properties")
        if isinstance(props, Mapping):
            out.update(str(k) for k in props)
            todo.extend(props.values())
        todo.append(node.get("items"))
    return out


def _minimal(schema: Any, root: Any, depth: int = 0) -> Any:
    """The smallest value of an object ``schema``: its required scalars empty (``""``, ``0``, ``False``), its required
    lists with one such item, or :data:`_NONE` for what cannot be built that way."""
    schema = _deref(schema, root)
    if not isinstance(schema, Mapping) or depth > 8:
        return _NONE
    kind = schema.get("type")
    if kind == "object" or isinstance(schema.get("properties"), Mapping):
        found = schema.get("properties")
        props: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        out = {}
        required = schema.get("required")
        for k in required if isinstance(required, list) else ():
            if not isinstance(k, str):  # a server's schema is untrusted
                return _NONE
            v = _minimal(props.get(k), root, depth + 1)
            if v is _NONE:
                return _NONE
            out[k] = v
        return out
    if kind == "array":
        item = _minimal(schema.get("items"), root, depth + 1)
        return _NONE if item is _NONE else [item]
    return _like(schema)


def chain_arguments(arguments: Mapping[str, Any], tokens: Sequence[Token], rng: np.random.Generator, chance: float,
                    fixed: Sequence[str], schema: Any = None,
                    follow: bool = False) -> tuple[dict[str, Any], dict[str, Token], dict[str, tuple[Any, ...]]]:
    """``arguments`` with some values replaced by earlier results' (each with probability ``chance``; never a
    ``fixed`` one), and optional ones of the tool's input ``schema`` the sampler left out added when an earlier value
    is named like them: the new arguments, the placeholder (``<A>``, ``<B>``, ...) of each value taken and where in
    the arguments it stands (a tuple of keys and indexes). With ``follow`` (the call follows a read), every argument
    an earlier value is named like takes it, and an empty list whose item (as its schema builds it) has such an
    argument gets that item."""
    taken: list[tuple[tuple[Any, ...], Token, bool]] = []  # where, what, named like its argument
    added: set[tuple[Any, ...]] = set()
    records: dict[tuple[Any, ...], str] = {}  # an object of the arguments -> the record its named values come from

    def chain(v: Any, key: str | None, at: tuple[Any, ...], schema: Any) -> Any:
        schema = _deref(schema, root)
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        props = props if isinstance(props, Mapping) else {}
        if isinstance(v, dict):
            out = {k: chain(x, k, (*at, k), props.get(k)) for k, x in v.items()}
            for k, prop in props.items():  # an optional argument left out that an earlier value is named like
                like = _like(_deref(prop, root))
                if k not in out and k not in fixed and like is not _NONE and named(tokens, k, like) and \
                        (follow or rng.random() < chance):
                    added.add((*at, k))
                    out[k] = chain(like, k, (*at, k), prop)
            return out
        if isinstance(v, list):
            item = schema.get("items") if isinstance(schema, Mapping) else None
            if follow and not v and isinstance(one := _minimal(item, root), dict) and \
                    any(k not in fixed and named(tokens, k, _like(p) if _like(p) is not _NONE else None)
                        for k, p in _leaves(item, root)):
                v = [one]  # a list of records the read's values fill, left empty by the sampler
            items = [chain(x, key, (*at, i), item) for i, x in enumerate(v)]
            hit = next((i for i in range(len(items)) if any(n and w[:len(at) + 1] == (*at, i)
                                                             for w, _, n in taken)), None)
            if hit is None or len(items) == 1:
                return items
            # an item built on a value named like its argument (the file a read returned a hash for) is the one the
            # call is about: the others, drawn at random, only make it fail (mcp-text-editor refuses the whole edit)
            taken[:] = [(w if w[:len(at) + 1] != (*at, hit) else (*at, 0, *w[len(at) + 1:]), t, n)
                        for w, t, n in taken if w[:len(at)] != at or w[len(at)] == hit]
            return [items[hit]]
        same = named(tokens, key, v) if key is not None and key not in fixed else []
        if key in fixed or (at not in added and not (follow and same) and rng.random() >= chance):
            return v
        pathlike = key is not None and PATHLIKE.search(key) is not None
        if same:  # a value named like the argument: the hash a read returned goes to the edit that needs it
            same = [t for t in same if ("/" in t.value) == pathlike] or same
            record = records.get(at[:-1])  # beside a value taken from one record (ranges[0]), one of the same
            same = [t for t in same if _parent(t.path) == record] or same
            tok = same[int(rng.integers(len(same)))]
            records.setdefault(at[:-1], _parent(tok.path))
            taken.append((at, tok, True))
            return typed(tok.value, v)
        if not isinstance(v, str):
            return v
        options = [t for t in tokens if (("/" in t.value) == pathlike) or t.origin < 0] or list(tokens)
        tok = options[int(rng.integers(len(options)))]
        taken.append((at, tok, False))
        return tok.value

    root = schema
    args = chain(dict(arguments), None, (), schema)
    uses = {f"<{chr(65 + n)}>": t for n, (_, t, _) in enumerate(taken)}
    where = {f"<{chr(65 + n)}>": w for n, (w, _, _) in enumerate(taken)}
    return args, uses, where


_NONE = object()


def _leaves(schema: Any, root: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """The scalar properties of an object ``schema``, at any depth: ``(name, property schema)``."""
    schema = _deref(schema, root)
    if not isinstance(schema, Mapping) or depth > 8:
        return []
    props = schema.get("properties")
    out: list[tuple[str, Any]] = []
    for k, p in (props.items() if isinstance(props, Mapping) else ()):
        p = _deref(p, root)
        if isinstance(p, Mapping) and (isinstance(p.get("properties"), Mapping) or p.get("type") == "array"):
            out += _leaves(p.get("items") if p.get("type") == "array" else p, root, depth + 1)
        else:
            out.append((str(k), p))
    return out


def _parent(path: str) -> str:
    """The record a result's value stands in: its path without the last member (``$.ranges[0].range_hash`` ->
    ``$.ranges[0]``)."""
    return _LAST_KEY.sub("", path) if path.startswith("$") else path


def _like(prop: Any) -> Any:
    """A value of the type a property's schema names (a scalar type: ``0``, ``0.0``, ``""``, ``False``), or
    :data:`_NONE`."""
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    kinds = kind if isinstance(kind, list) else [kind]
    for k in kinds:
        if k in ("integer", "number", "string", "boolean"):
            return {"integer": 0, "number": 0.0, "string": "", "boolean": False}[k]
    return _NONE


def template(arguments: Mapping[str, Any], uses: Mapping[str, Token], where: Mapping[str, tuple[Any, ...]]) -> str:
    """The arguments as a prompt shows them: JSON with each chained value replaced by its placeholder (``"<A>"`` for
    a string, ``<A>`` for a number or a boolean)."""
    import copy
    import json

    shown: Any = copy.deepcopy(dict(arguments))
    bare = []
    for ph, at in where.items():
        node = shown
        for k in at[:-1]:
            node = node[k]
        if not isinstance(node[at[-1]], str):
            bare.append(ph)
        node[at[-1]] = f"\ue001{ph}\ue001"
    text = json.dumps(shown, ensure_ascii=False, sort_keys=True)
    for ph in where:
        text = text.replace(f'"\ue001{ph}\ue001"', ph if ph in bare else f'"{ph}"')
    return text
