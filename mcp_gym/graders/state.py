"""State checks: files under a directory, an SQLite query, a final MCP tool call or resource read."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcp_gym._schema import bounded_search
from mcp_gym.graders.base import DEFAULT_GRADER_TIMEOUT, Grade, GradeContext, Grader, GraderError, normalise_answer

__all__: list[str] = []  # internal to mcp_gym.graders: used by its sibling modules only


def _inside(root: Path, rel: str) -> Path:
    p = (root / rel).resolve()
    if p != root and root not in p.parents:
        raise GraderError(f"files grader: {rel!r} is outside {root}")
    return p


SQLITE_MAX_ROWS = 100_000
"""Rows an ``sqlite`` grader's query may return (more is a grading error, never fetched on)."""


def _in_workspace(ctx: GradeContext, spec: str, path: Path, what: str) -> Path:
    """``path`` (resolved), refused when ``spec`` names the workspace but the agent's symlink leads it out (a
    ``{workspace}/data.db`` the agent replaced with a link to ``~/.mozilla/.../cookies.sqlite``)."""
    if "{workspace}" in str(spec) and ctx.workspace is not None and not path.is_relative_to(
            Path(ctx.workspace).resolve()):
        raise GraderError(f"{what} {spec!r} leads out of the episode's workspace (to {path}, through a symlink)")
    return path


class FilesGrader(Grader):
    """Files under a directory after the episode: contents, substrings, patterns, absence, glob counts."""

    kind = "files"
    reads_state = True

    def __init__(self, name: str | None = None, dir: str = "{workspace}", expect: Mapping[str, Any] | None = None,
                 globs: Mapping[str, Any] | None = None) -> None:
        super().__init__(name)
        self.dir, self.expect, self.globs = dir, expect, globs

    async def grade(self, ctx: GradeContext) -> Grade:
        root = _in_workspace(ctx, self.dir, ctx.path(self.dir).resolve(), "files grader dir")
        expect = self.expect if self.expect is not None else ctx.task.data.get("files")
        globs = self.globs if self.globs is not None else ctx.task.data.get("globs")
        if not expect and not globs:
            raise GraderError(f"task '{ctx.task.id}': the files grader has nothing to check (expect/globs, or the "
                              "task's data.files/data.globs)")
        if not root.is_dir():
            raise GraderError(f"files grader: {root} is not a directory")
        checks: list[tuple[str, bool]] = []
        for rel, want in dict(ctx.fill(expect or {})).items():
            path = _inside(root, rel)
            if want is None:
                checks.append((f"{rel} absent", not path.exists()))
                continue
            if not path.is_file():
                checks.append((f"{rel} missing", False))
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if isinstance(want, Mapping) and "contains" in want:
                subs = want["contains"] if isinstance(want["contains"], list) else [want["contains"]]
                checks.append((f"{rel} contains {subs!r}", all(str(s) in text for s in subs)))
            elif isinstance(want, Mapping) and "regex" in want:
                try:
                    found, why = bounded_search(str(want["regex"]), text)
                except ValueError as e:
                    raise GraderError(f"task '{ctx.task.id}': files grader, {rel}: bad regex: {e}") from None
                checks.append((f"{rel} matches /{want['regex']}/" if why is None else f"{rel}: {why}", found))
            else:
                checks.append((f"{rel} == {str(want)[:60]!r}", text == str(want)))
        for pattern, want in dict(globs or {}).items():
            if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
                raise GraderError(f"task '{ctx.task.id}': files grader glob {pattern!r} leads out of {root} (absolute "
                                  "or '..')")
            # a match is counted only inside root: never through the agent's symlink out of it
            n = sum(1 for p in root.glob(pattern) if p.resolve().is_relative_to(root))
            lo, hi = (want.get("min", 0), want.get("max")) if isinstance(want, Mapping) else (want, want)
            checks.append((f"{pattern}: {n} files", n >= int(lo) and (hi is None or n <= int(hi))))
        failed = [c for c, ok in checks if not ok]
        score = (len(checks) - len(failed)) / len(checks)
        return self._grade(not failed, "all file checks passed" if not failed else "failed: " + "; ".join(failed),
                           score, checks={c: ok for c, ok in checks})


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) if isinstance(r, (list, tuple)) else (r,) for r in rows]


_SQLITE_READS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                           sqlite3.SQLITE_RECURSIVE})
"""What an ``sqlite`` grader's query may do: read (views and CTEs included) and call functions."""
_SQLITE_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                             "foreign_key_list", "table_list"})
"""Pragmas a query may read (``pragma_table_info('t')``): they only describe the schema."""
_SQLITE_ACTIONS = {sqlite3.SQLITE_ATTACH: "attach or write the file {0!r} (ATTACH, VACUUM INTO)",
                   sqlite3.SQLITE_PRAGMA: "run PRAGMA {0}", sqlite3.SQLITE_DETACH: "detach {0}"}


def _read_only(con: sqlite3.Connection, denied: list[str]) -> None:
    """Make ``con`` read only what its database holds. The task file's query is untrusted and ``mode=ro`` guards only
    the database itself: ``VACUUM INTO '~/.bash_aliases'`` wrote the database (rows of the agent's choosing) to any
    new path, ``ATTACH`` created a file anywhere. The agent's schema is untrusted too: ``trusted_schema=OFF`` keeps
    its views and triggers from calling functions SQLite does not mark innocuous. What was denied first goes in
    ``denied``."""
    con.execute("PRAGMA trusted_schema = OFF")
    con.execute("PRAGMA query_only = ON")

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
        if action in _SQLITE_READS or (action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _SQLITE_PRAGMAS) \
                or (action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and trigger is None):
            return sqlite3.SQLITE_OK  # (that update is how json_each and pragma_* get instantiated: nothing written)
        if not denied:
            denied.append(_SQLITE_ACTIONS.get(action, "change it ({0})").format(arg1 or arg2 or action))
        return sqlite3.SQLITE_DENY

    con.set_authorizer(authorize)


class SQLiteGrader(Grader):
    """A query on an SQLite database after the episode returns the expected rows."""

    kind = "sqlite"
    reads_state = True

    def __init__(self, name: str | None = None, db: str | None = None, query: str | None = None,
                 rows: Sequence[Any] | None = None, ordered: bool = False) -> None:
        super().__init__(name)
        if db is None:
            raise ValueError("an sqlite grader needs db= (a path; {workspace} allowed)")
        self.db, self.query, self.rows, self.ordered = db, query, rows, ordered

    async def grade(self, ctx: GradeContext) -> Grade:
        query = self.query or ctx.task.data.get("query")
        rows = self.rows if self.rows is not None else ctx.task.data.get("rows")
        if not query or rows is None:
            raise GraderError(f"task '{ctx.task.id}': the sqlite grader needs a query and rows (options or the task's "
                              "data.query/data.rows)")
        path = ctx.path(self.db)  # a relative db: from the task file's folder
        _in_workspace(ctx, self.db, path.resolve(), "sqlite grader db")
        if not path.is_file():
            raise GraderError(f"sqlite grader: no database at {path}")
        # The database is the agent's work: a table replaced by an endless recursive view would run the query (and
        # its thread, which a grader timeout abandons) for good, and fetch rows until memory runs out. So the query
        # stops at the grader's timeout and at SQLITE_MAX_ROWS rows.
        seconds = self.timeout or DEFAULT_GRADER_TIMEOUT
        deadline = time.monotonic() + seconds
        denied: list[str] = []
        try:
            con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
            try:
                _read_only(con, denied)
                con.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
                fetched = con.execute(query).fetchmany(SQLITE_MAX_ROWS + 1)
            finally:
                con.close()
        except sqlite3.Error as e:
            if time.monotonic() > deadline:
                raise GraderError(f"sqlite grader: {query!r} on {path} stopped after {seconds:g} s (its timeout)") \
                    from None
            if denied:
                raise GraderError(f"sqlite grader: {query!r} on {path} refused: it may only read the database, not "
                                  f"{denied[0]}") from None
            raise GraderError(f"sqlite grader: {query!r} on {path}: {e}") from None
        if len(fetched) > SQLITE_MAX_ROWS:
            raise GraderError(f"sqlite grader: {query!r} on {path} returned more than {SQLITE_MAX_ROWS} rows")
        got = _rows(fetched)
        want = _rows(rows)
        ok = got == want if self.ordered else Counter(got) == Counter(want)
        return self._grade(ok, f"{len(got)} rows {'as expected' if ok else f'differ from the expected {want!r}'}",
                           rows=[list(r) for r in got[:50]])


def subset_match(expected: Any, actual: Any) -> bool:
    """True if every key of ``expected`` is in ``actual`` with a matching value, recursively; a list matches when each
    expected item matches a distinct item of the actual list; scalars compare equal (numbers numerically)."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and subset_match(v, actual[k])
                                                   for k, v in expected.items())
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        used: set[int] = set()
        for e in expected:
            hit = next((i for i, a in enumerate(actual) if i not in used and subset_match(e, a)), None)
            if hit is None:
                return False
            used.add(hit)
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return bool(expected == actual)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def wrapped_json(value: Any) -> Any:
    """The JSON object or array inside a result that only wraps a string, ``{"result": TEXT}`` (what the Python SDK
    makes of a tool returning ``str``: PyPI mcp-server-motherduck's pretty-printed JSON), else ``value`` itself."""
    inner = value.get("result") if isinstance(value, dict) and len(value) == 1 else None
    if isinstance(inner, str) and inner.lstrip()[:1] in ("{", "["):
        try:
            parsed = json.loads(inner)
        except (ValueError, RecursionError):  # RecursionError: a server's JSON nested deeper than the parser goes
            return value
        return parsed if isinstance(parsed, (dict, list)) else value
    return value


class MCPGrader(Grader):
    """A final tool call or resource read on the episode's own session, compared with what the task expects."""

    kind = "mcp"
    reads_state = True

    def __init__(self, name: str | None = None, tool: str | None = None, arguments: Mapping[str, Any] | None = None,
                 resource: str | None = None, server: str | None = None, path: str | None = None,
                 equals: Any = None, contains: Any = None, subset: Any = None, unwrap_json: bool = False) -> None:
        super().__init__(name)
        if (tool is None) == (resource is None):
            raise ValueError("an mcp grader needs exactly one of tool= and resource=")
        if not isinstance(unwrap_json, bool):
            raise ValueError(f"the mcp grader's unwrap_json is true or false, not {unwrap_json!r}")
        self.tool, self.arguments, self.resource, self.server = tool, dict(arguments or {}), resource, server
        self.path = path
        self.unwrap_json = unwrap_json  # a {"result": TEXT} result read as the JSON in TEXT (tasks generate sets it)
        self.expect = {k: v for k, v in (("equals", equals), ("contains", contains), ("subset", subset))
                       if v is not None}

    async def grade(self, ctx: GradeContext) -> Grade:
        expect = self.expect or dict(ctx.task.data.get("expect") or {})
        expect = {k: v for k, v in ctx.fill(expect).items() if k in ("equals", "contains", "subset")}
        if not expect:
            raise GraderError(f"task '{ctx.task.id}': the mcp grader needs equals/contains/subset (options or the "
                              "task's data.expect)")
        if self.tool is not None:
            what = f"{self.tool}({json.dumps(self.arguments)})"
            value = await ctx.call_tool(self.tool, ctx.fill(self.arguments), self.server)
        else:
            what = str(self.resource)
            value = await ctx.read_resource(ctx.fill(self.resource), self.server)
        if self.unwrap_json:
            value = wrapped_json(value)
        if self.path:
            from jsonpath_ng.ext import parse as jsonpath

            try:
                matches = [m.value for m in jsonpath(self.path).find(value)]
            except Exception as e:  # noqa: BLE001 - a bad path is the grader's configuration error
                raise GraderError(f"mcp grader: bad path {self.path!r}: {e}") from None
            many = any(tok in self.path for tok in ("*", "[?", "..", ":", ","))
            value = matches if many or len(matches) != 1 else matches[0]
            what += f" {self.path}"
        failed = []
        if "equals" in expect and not (expect["equals"] == value or (
                isinstance(expect["equals"], str) and normalise_answer(expect["equals"]) == normalise_answer(value))):
            failed.append(f"!= {_text(expect['equals'])[:120]}")
        if "contains" in expect:
            subs = expect["contains"] if isinstance(expect["contains"], list) else [expect["contains"]]
            text = _text(value)
            failed += [f"lacks {s!r}" for s in subs if str(s) not in text]
        if "subset" in expect and not subset_match(expect["subset"], value):
            failed.append(f"does not contain {_text(expect['subset'])[:120]}")
        reason = f"{what}: " + ("as expected" if not failed else "; ".join(failed))
        return self._grade(not failed, reason, value=value if len(_text(value)) <= 4000 else _text(value)[:4000])

    def spec(self) -> Any:
        return {**super().spec(), "tool": self.tool, "arguments": self.arguments, "resource": self.resource,
                "server": self.server, "path": self.path, **self.expect,
                **({"unwrap_json": True} if self.unwrap_json else {})}


