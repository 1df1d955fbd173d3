"""Tool-catalogue drift: compare the tools of two runs, cassettes or live servers (``mcp-gym diff-tools A B``).

A benchmark result is only comparable with another if the agent saw compatible tools. :func:`diff_tools` lists what
changed from ``a`` to ``b`` - added, removed and renamed-looking tools, and schema changes by JSON path - and marks
each change *breaking* or not; :meth:`Diff.exit_code` turns that into a process exit code, so a benchmark script can
refuse to compare results across incompatible server versions::

    diff = diff_tools("runs/2026-11", "runs/2026-12")          # run dirs, cassettes, URLs or command lines
    print(format_diff(diff))
    sys.exit(diff.exit_code())                                   # 1 on breaking changes

**Breaking** (for a caller of the tool): a removed tool (a rename counts: the old name is gone), a new required
argument, an argument that became required, a removed argument, a changed argument type (widening such as
``integer`` -> ``number`` or adding a type is fine), an enum that lost values, an added enum, a tightened bound
(``minimum`` raised, ``maxLength`` lowered, a new ``pattern`` ...), ``additionalProperties`` turned off. In an output
schema the direction flips for the consumer: a removed or retyped field, or a field that is no longer required, is
breaking. **Not breaking**: added tools, added optional arguments, loosened bounds, description, title, default and
annotation changes.

**Sources**: a run directory (the tools each recorded episode saw, :mod:`mcp_gym.recording`), a cassette file or a
directory of cassettes (their ``tools/list`` answers, :mod:`mcp_gym.cassette`), an ``http(s)://`` URL (Streamable
HTTP) or a command line (a stdio server, e.g. ``"mcp-server-git --repository ."``). Hidden tools (``mcp_gym_reset``,
``mcp_gym_state``, ``_meta["mcp-gym/hidden"]``) and the env's built-in ``submit`` are left out.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import mcp.types as mt

from mcp_gym.client.host import ToolEntry
from mcp_gym.protocol import HIDDEN_META_KEY, HIDDEN_TOOLS, redact_text

__all__ = [
    "Change",
    "Diff",
    "diff_tools",
    "diff_catalogues",
    "load_catalogue",
    "format_diff",
    "main",
]

FailOn = Literal["breaking", "any", "never"]
Catalogue = dict[str, dict[str, Any]]
"""tool name -> ``{"description", "input_schema", "output_schema", "annotations"}`` (a tool's recorded form,
:meth:`mcp_gym.client.host.ToolEntry.to_record`, without its routing fields)."""

_HIDDEN = frozenset(HIDDEN_TOOLS)
_COSMETIC = frozenset({"description", "title", "default", "examples", "$comment", "deprecated"})
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
_STRUCTURE = frozenset({"type", "enum", "properties", "required", "items", "anyOf", "oneOf", "allOf"})


@dataclass(frozen=True)
class Change:
    """One difference between two catalogues.

    ``kind``: ``added``, ``removed``, ``renamed``, ``schema`` (input schema), ``output`` (output schema),
    ``description`` or ``annotations``. ``path`` is a JSON path into the tool (``$.inputSchema.properties.x.type``).
    """

    kind: str
    tool: str
    path: str
    detail: str
    breaking: bool


@dataclass
class Diff:
    """The changes from catalogue ``a`` to catalogue ``b``."""

    a: str
    b: str
    a_tools: list[str]
    b_tools: list[str]
    changes: list[Change] = field(default_factory=list)

    @property
    def breaking(self) -> list[Change]:
        """The breaking changes."""
        return [c for c in self.changes if c.breaking]

    @property
    def is_breaking(self) -> bool:
        """Whether any change is breaking."""
        return any(c.breaking for c in self.changes)

    def exit_code(self, fail_on: FailOn = "breaking") -> int:
        """``1`` if there are breaking changes (``fail_on="any"``: any change; ``"never"``: always 0), else ``0``."""
        if fail_on == "never":
            return 0
        if fail_on == "any":
            return 1 if self.changes else 0
        return 1 if self.is_breaking else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``--json``)."""
        return {"a": self.a, "b": self.b, "a_tools": self.a_tools, "b_tools": self.b_tools,
                "breaking": self.is_breaking, "changes": [asdict(c) for c in self.changes]}


# -- loading ------------------------------------------------------------------------------------------------------
_ROUTING = frozenset({"name", "server", "server_tool"})


def _normalise(tool: mt.Tool | Mapping[str, Any], name: str) -> dict[str, Any]:
    """What is compared of a tool, from any of its forms (SDK ``Tool``, MCP camelCase dict, recorded snake_case dict):
    its recorded form (``ToolEntry.to_record``) without the routing fields."""
    record = ToolEntry.of(tool, name=name).to_record()
    return {k: v for k, v in record.items() if k not in _ROUTING}


def _from_tools(tools: Iterable[mt.Tool | Mapping[str, Any]], prefix: str = "") -> Catalogue:
    out: Catalogue = {}
    for t in tools:
        if isinstance(t, Mapping) and not t.get("name"):
            continue
        entry = ToolEntry.of(t)
        meta = entry.tool.meta or {}
        if entry.name in _HIDDEN or meta.get(HIDDEN_META_KEY) is True:
            continue
        out.setdefault(prefix + entry.name, _normalise(entry.tool, prefix + entry.name))
    return out


def _from_run(path: Path, server: str | None) -> Catalogue:
    from mcp_gym.recording import read_tables

    _, episodes = read_tables(path)
    out: Catalogue = {}
    for col in ("tools", "catalogue_changes"):
        for raw in episodes.column(col).to_pylist() if col in episodes.column_names else []:
            if not raw:
                continue
            data = json.loads(raw)
            lists = [c.get("tools") or [] for c in data] if col == "catalogue_changes" else [data]
            for tools in lists:
                for t in tools:
                    if t.get("server") is None or (server is not None and t.get("server") != server):
                        continue  # the env's built-in submit, or another server
                    name = t.get("server_tool") if server is not None else t.get("name")
                    if name and name not in _HIDDEN:
                        out.setdefault(str(name), _normalise(t, str(name)))
    return out


def _from_cassettes(paths: Sequence[Path], server: str | None) -> Catalogue:
    from mcp_gym.cassette import Cassette

    cassettes = [Cassette.load(p) for p in paths]
    if server is not None:
        cassettes = [c for c in cassettes if (c.header.get("alias") or c.path.stem) == server]
        if not cassettes:
            raise ValueError(f"no cassette of server {server!r} among {', '.join(str(p) for p in paths)}")
    out: Catalogue = {}
    for c in cassettes:
        prefix = f"{c.header.get('alias') or c.path.stem}__" if len(cassettes) > 1 else ""
        out.update(_from_tools(c.tools(), prefix))
    return out


def _from_live(target: str, timeout: float) -> Catalogue:
    from mcp_gym.client.connection import ServerConnection
    from mcp_gym.client.runtime import default_runtime
    from mcp_gym.client.specs import parse_server

    spec = parse_server(target, inherit_env=True, connect_timeout=timeout)

    async def go() -> list[Any]:
        conn = ServerConnection("server", spec)
        await conn.start(default_runtime().task_group)
        try:
            if conn.status != "ready":
                raise ConnectionError(f"could not connect to {spec.describe()}: {conn.error}")
            return await conn.list_tools()
        finally:
            await conn.close()

    return _from_tools(default_runtime().call(go))


def load_catalogue(source: Any, *, server: str | None = None, timeout: float = 30.0) -> tuple[str, Catalogue]:
    """``(label, catalogue)`` of a source: a run directory, a cassette file or directory, a URL, a command line,
    or a list of tool dicts (MCP or recorded form). ``server`` picks one server's tools of a multi-server source."""
    if isinstance(source, Mapping):
        return "catalogue", {str(k): _normalise(v, str(k)) for k, v in source.items()}
    if isinstance(source, (list, tuple)):
        return "tools", _from_tools(source)
    text = os.fspath(source)
    path = Path(text)
    if path.is_file() and (path.suffix == ".jsonl" or not os.access(path, os.X_OK)):
        return text, _from_cassettes([path], server)
    if path.is_dir():
        if (path / "manifest.json").exists() or (path / "episodes").is_dir():
            cat = _from_run(path, server)
            if cat or not (path / "cassettes").is_dir():
                return text, cat
        cassettes = sorted(path.glob("*.jsonl")) or sorted((path / "cassettes").glob("*.jsonl"))
        if not cassettes:
            raise ValueError(f"{path}: neither a run directory nor a directory of cassettes")
        return text, _from_cassettes(cassettes, server)
    if text.startswith(("http://", "https://")):
        return redact_text(text), _from_live(text, timeout)
    if path.suffix == ".jsonl" or (os.sep in text and not path.is_file() and " " not in text.strip()):
        raise FileNotFoundError(f"{text}: no such run directory or cassette")
    return redact_text(text), _from_live(text, timeout)  # a command line (it may name a URL)


# -- diffing ------------------------------------------------------------------------------------------------------
def _types(schema: Mapping[str, Any]) -> set[str]:
    t = schema.get("type")
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            if isinstance(branch, Mapping):
                types |= _types(branch)
    return types


def _widened(old: set[str], new: set[str]) -> bool:
    """Every value valid for ``old`` types is valid for ``new`` (integer is a number)."""
    return all(t in new or (t == "integer" and "number" in new) for t in old)


def _fmt(v: Any) -> str:
    if isinstance(v, set):
        return "|".join(sorted(v)) or "any"
    return json.dumps(v, ensure_ascii=False, sort_keys=True)


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, Mapping):
        return {k: _strip_titles(v) for k, v in schema.items() if k not in ("title", "description")}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


class _Walker:
    def __init__(self, tool: str, kind: str, output: bool, out: list[Change]) -> None:
        self.tool, self.kind, self.output, self.out = tool, kind, output, out

    def add(self, path: str, detail: str, breaking: bool) -> None:
        self.out.append(Change(self.kind, self.tool, path, detail, breaking))

    def walk(self, a: Any, b: Any, path: str) -> None:
        if not isinstance(a, Mapping) or not isinstance(b, Mapping):
            if a != b:
                self.add(path, f"{_fmt(a)} -> {_fmt(b)}", True)
            return
        ta, tb = _types(a), _types(b)
        if ta != tb:
            widened = _widened(ta, tb) if ta and tb else not tb  # dropping the type constraint widens
            looser = widened if not self.output else _widened(tb, ta) if ta and tb else not ta
            self.add(f"{path}.type", f"type {_fmt(ta)} -> {_fmt(tb)}", not looser)
        self._enum(a, b, path)
        self._properties(a, b, path)
        if "items" in a or "items" in b:
            self.walk(a.get("items") or {}, b.get("items") or {}, f"{path}.items")
        for key in ("anyOf", "oneOf", "allOf"):  # structure beyond the type sets compared above
            la, lb = a.get(key) or [], b.get(key) or []
            if len(la) == len(lb):
                for i, (x, y) in enumerate(zip(la, lb, strict=True)):
                    if isinstance(x, Mapping) and isinstance(y, Mapping):
                        self._keywords(x, y, f"{path}.{key}[{i}]")
            elif _strip_titles(la) != _strip_titles(lb) and ta == tb:
                self.add(f"{path}.{key}", f"{len(la)} -> {len(lb)} alternatives", True)
        self._keywords(a, b, path)

    def _enum(self, a: Mapping[str, Any], b: Mapping[str, Any], path: str) -> None:
        ea, eb = a.get("enum"), b.get("enum")
        if ea == eb:
            return
        p = f"{path}.enum"
        if ea is None:
            self.add(p, f"enum added: {_fmt(eb)}", not self.output)
        elif eb is None:
            self.add(p, "enum removed (any value)", self.output)
        else:
            lost = [v for v in ea if v not in eb]
            gained = [v for v in eb if v not in ea]
            if lost:
                self.add(p, f"enum narrowed: lost {_fmt(lost)}", not self.output)
            if gained:
                self.add(p, f"enum widened: gained {_fmt(gained)}", self.output)

    def _properties(self, a: Mapping[str, Any], b: Mapping[str, Any], path: str) -> None:
        pa, pb = dict(a.get("properties") or {}), dict(b.get("properties") or {})
        ra, rb = set(a.get("required") or []), set(b.get("required") or [])
        noun = "field" if self.output else "argument"
        for name in pa:
            p = f"{path}.properties.{name}"
            if name not in pb:
                self.add(p, f"{noun} '{name}' removed", True)
                continue
            self.walk(pa[name], pb[name], p)
            if name in rb and name not in ra:
                self.add(f"{path}.required", f"{noun} '{name}' became required", not self.output)
            elif name in ra and name not in rb:
                self.add(f"{path}.required", f"{noun} '{name}' became optional", self.output)
        for name in pb:
            if name not in pa:
                required = name in rb
                label = "required" if required else "optional"
                self.add(f"{path}.properties.{name}", f"{noun} '{name}' added ({label})",
                         required and not self.output)

    def _keywords(self, a: Mapping[str, Any], b: Mapping[str, Any], path: str) -> None:
        for key in sorted(set(a) | set(b)):
            if key in _STRUCTURE:
                continue
            va, vb = a.get(key), b.get(key)
            if va == vb:
                continue
            p = f"{path}.{key}"
            if key in _COSMETIC:
                self.out.append(Change("description" if key == "description" else self.kind, self.tool, p,
                                       f"{key} changed", False))
            elif key in _LOWER_BOUNDS or key in _UPPER_BOUNDS:
                if va is None or vb is None:
                    tighter = va is None
                elif isinstance(va, (int, float)) and isinstance(vb, (int, float)):
                    tighter = vb > va if key in _LOWER_BOUNDS else vb < va
                else:
                    tighter = True
                self.add(p, f"{key} {_fmt(va)} -> {_fmt(vb)}", tighter != self.output)
            elif key == "additionalProperties":
                closed = vb is False and va is not False
                self.add(p, f"additionalProperties {_fmt(va)} -> {_fmt(vb)}", closed and not self.output)
            elif key in ("$defs", "definitions"):
                for name in sorted(set(va or {}) | set(vb or {})):
                    self.walk((va or {}).get(name) or {}, (vb or {}).get(name) or {}, f"{p}.{name}")
            else:  # pattern, format, const, $ref, ...: a new or changed constraint; a removed one loosens
                self.add(p, f"{key} {_fmt(va)} -> {_fmt(vb)}", vb is not None and not self.output)


def diff_catalogues(a: Catalogue, b: Catalogue, *, a_label: str = "a", b_label: str = "b") -> Diff:
    """The :class:`Diff` between two catalogues (``tool name -> tool``, MCP or recorded form)."""
    a = {name: _normalise(t, name) for name, t in a.items()}
    b = {name: _normalise(t, name) for name, t in b.items()}
    changes: list[Change] = []
    removed = [n for n in a if n not in b]
    added = [n for n in b if n not in a]
    renamed: list[tuple[str, str]] = []
    for old in list(removed):
        shape = _strip_titles(a[old]["input_schema"])
        same = [new for new in added if _strip_titles(b[new]["input_schema"]) == shape]
        if same:
            new = max(same, key=lambda n: difflib.SequenceMatcher(None, old, n).ratio())
            renamed.append((old, new))
            removed.remove(old)
            added.remove(new)
    for old, new in renamed:
        changes.append(Change("renamed", old, "$", f"renamed? '{old}' removed, '{new}' added with the same "
                              "input schema", True))
    changes.extend(Change("removed", n, "$", "tool removed", True) for n in removed)
    changes.extend(Change("added", n, "$", "tool added", False) for n in added)
    for name in (n for n in a if n in b):
        ta, tb = a[name], b[name]
        if ta["description"] != tb["description"]:
            changes.append(Change("description", name, "$.description", "description changed", False))
        _Walker(name, "schema", False, changes).walk(ta["input_schema"], tb["input_schema"], "$.inputSchema")
        oa, ob = ta["output_schema"], tb["output_schema"]
        if oa != ob:
            if oa is None or ob is None:
                what = "output schema added" if oa is None else "output schema removed"
                changes.append(Change("output", name, "$.outputSchema", what, False))
            else:
                _Walker(name, "output", True, changes).walk(oa, ob, "$.outputSchema")
        aa, ab = ta["annotations"], tb["annotations"]
        for key in sorted(set(aa) | set(ab)):
            if aa.get(key) != ab.get(key):
                changes.append(Change("annotations", name, f"$.annotations.{key}",
                                      f"{key} {_fmt(aa.get(key))} -> {_fmt(ab.get(key))}", False))
    return Diff(a_label, b_label, sorted(a), sorted(b), changes)


def diff_tools(a: Any, b: Any, *, server: str | None = None, timeout: float = 30.0) -> Diff:
    """Compare the tool catalogues of two sources (see :func:`load_catalogue`)."""
    la, ca = load_catalogue(a, server=server, timeout=timeout)
    lb, cb = load_catalogue(b, server=server, timeout=timeout)
    return diff_catalogues(ca, cb, a_label=la, b_label=lb)


# -- rendering ----------------------------------------------------------------------------------------------------
def format_diff(diff: Diff) -> str:
    """The diff as plain text: one line per change, then a summary."""
    lines = [f"tools: {diff.a} ({len(diff.a_tools)}) -> {diff.b} ({len(diff.b_tools)})"]
    if not diff.changes:
        lines.append("no changes")
        return "\n".join(lines)
    wt = max(len(c.tool) for c in diff.changes)
    wk = max(len(c.kind) for c in diff.changes)
    for c in diff.changes:
        flag = "BREAKING" if c.breaking else "ok      "
        lines.append(f"{flag}  {c.kind:<{wk}}  {c.tool:<{wt}}  {c.path}  {c.detail}")
    n = len(diff.breaking)
    lines.append(f"{n} breaking change(s), {len(diff.changes) - n} other change(s)")
    return "\n".join(lines)


def print_diff(diff: Diff, *, rich: bool | None = None) -> None:
    """Print the diff: a rich table on a terminal (or with ``rich=True``), plain text otherwise."""
    import sys

    if rich is None:
        rich = sys.stdout.isatty()
    if not rich:
        from mcp_gym._terminal import printable

        print(printable(format_diff(diff)))  # tool names and schemas are the servers' text: no escape sequences
        return
    from rich.console import Console
    from rich.table import Table

    from mcp_gym._terminal import plain

    title = plain(f"tools: {diff.a} ({len(diff.a_tools)}) -> {diff.b} ({len(diff.b_tools)})")
    table = Table(title=title)
    for col in ("", "change", "tool", "path", "detail"):
        table.add_column(col)
    for c in diff.changes:  # the tools' names and schemas come from servers, runs and cassettes: plain text
        table.add_row("[red]BREAKING[/red]" if c.breaking else "[green]ok[/green]", plain(c.kind), plain(c.tool),
                      plain(c.path), plain(c.detail))
    console = Console()
    console.print(table if diff.changes else title.append(": no changes"))
    console.print(f"{len(diff.breaking)} breaking change(s), {len(diff.changes) - len(diff.breaking)} other change(s)")


# -- command line -------------------------------------------------------------------------------------------------
def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="run directory, cassette (.jsonl or directory), URL, or server command line")
    p.add_argument("b", help="the same kinds of source, compared against A")
    p.add_argument("--server", help="compare only this server alias of multi-server runs/cassettes")
    p.add_argument("--fail-on", choices=["breaking", "any", "never"], default="breaking",
                   help="exit 1 on breaking changes (default), on any change, or never")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to connect to a live server")


def run_cli(args: argparse.Namespace) -> int:
    """Run ``diff-tools`` with parsed arguments; returns the exit code (2 when a source cannot be read)."""
    import sys

    try:
        diff = diff_tools(args.a, args.b, server=args.server, timeout=args.timeout)
    except Exception as e:  # noqa: BLE001 - a CLI reports and exits
        from mcp_gym._terminal import printable

        print(printable(f"mcp-gym diff-tools: {type(e).__name__}: {e}"), file=sys.stderr)
        return 2
    if args.json:
        from mcp_gym._terminal import json_printable

        print(json_printable(diff.to_dict(), indent=1))  # the servers' text: control characters as JSON escapes
    else:
        print_diff(diff)
    return diff.exit_code(args.fail_on)


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``diff-tools`` to an ``argparse`` sub-parser set; the parser's ``func(args)`` returns the exit code."""
    p = subparsers.add_parser("diff-tools", help="compare the tool catalogues of two runs, cassettes or servers",
                              description=__doc__.split("\n\n")[0])
    _add_arguments(p)
    p.set_defaults(func=run_cli)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mcp_gym.drift A B [--fail-on ...]``."""
    p = argparse.ArgumentParser(prog="mcp-gym diff-tools", description=__doc__.split("\n\n")[0])
    _add_arguments(p)
    return run_cli(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
