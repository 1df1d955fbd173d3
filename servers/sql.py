"""SQL server: read-only access to a per-episode SQLite database (see :mod:`mcp_gym.envs.sql.tasks` for the tasks).

Each episode owns an in-memory SQLite database built deterministically from its task. The database is read-only by
construction, not by pattern matching:

* after it is built the connection gets ``PRAGMA query_only = ON`` and an authorizer (:class:`ReadOnlyGuard`) that
  allows only ``SELECT``, reads of the episode's own tables (and ``sqlite_master``), recursive CTEs and a fixed list of
  pure built-in functions. Everything else — ``INSERT``/``UPDATE``/``DELETE``/``REPLACE``, ``CREATE``/``DROP``/
  ``ALTER``, ``ATTACH``/``DETACH``, every ``PRAGMA`` (statement or ``pragma_*`` table-valued function), transactions,
  ``load_extension`` and virtual tables — is denied while the statement is prepared, before anything runs;
* one statement per call: anything after the first complete statement (``SELECT 1; DROP TABLE x``) is refused, and
  the sqlite3 module refuses it again;
* a progress handler interrupts a query after :data:`QUERY_TIME_LIMIT` seconds (``WITH RECURSIVE`` bombs), at most
  :data:`MAX_ROWS` rows are fetched.

The time limit holds for any query. The progress handler runs between SQLite's virtual-machine instructions, so the
work done inside one instruction (one function call) is bounded separately: every string or blob is capped at
:data:`MAX_VALUE_BYTES` (``SQLITE_LIMIT_LENGTH``), LIKE/GLOB patterns at :data:`MAX_PATTERN_CHARS`, and the built-ins
whose cost is not bounded by their input and output sizes are wrapped: ``printf``/``format`` refuse a width or
precision above :data:`MAX_VALUE_BYTES` (SQLite loops over a ``%.*c`` precision even after its result hit the length
limit: ``printf('%.*c', 2147483647, 'x')`` ran for seconds in one instruction), and ``trim``/``ltrim``/``rtrim``
refuse more than :data:`MAX_TRIM_CHARS` characters to trim (their cost is length x characters). The quadratic rest
(``instr``, ``replace``, LIKE) stays within a fraction of the limit at these sizes.

Queries run on worker threads, one at a time per episode (the episode's lock is taken before a thread is), so a slow
query never blocks other episodes and one episode cannot occupy more than one worker thread.

Run: ``python -m mcp_gym.servers.sql`` (stdio) or ``... --transport http --port 8000``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import BaseModel, Field

from mcp_gym.envs.sql.tasks import build_database, default_db, task_by_id
from mcp_gym.serverkit import EpisodeServer

__all__ = ["server"]

QUERY_TIME_LIMIT = 1.0
"""Seconds a query may run before it is interrupted."""
MAX_ROWS = 100
"""Most rows a query returns (the result says when it was truncated)."""
MAX_SQL_CHARS = 5000
"""Longest accepted SQL text."""
MAX_CELL_CHARS = 500
"""Longer text values are cut to this many characters in results."""
MAX_VALUE_BYTES = 100_000
"""SQLite's limit on the length of any string or blob a query may build (and on printf widths and precisions)."""
MAX_PATTERN_CHARS = 250
"""Longest LIKE or GLOB pattern."""
MAX_TRIM_CHARS = 100
"""Most characters ``trim(x, characters)`` and its siblings may remove."""

Cell = int | float | str | None

SAFE_FUNCTIONS = frozenset({
    "abs", "avg", "ceil", "ceiling", "char", "coalesce", "concat", "concat_ws", "count", "cume_dist", "date",
    "datetime", "degrees", "dense_rank", "exp", "first_value", "floor", "format", "glob", "group_concat", "hex",
    "ifnull", "iif", "instr", "julianday", "lag", "last_value", "lead", "length", "like", "likelihood", "likely",
    "ln", "log", "log10", "log2", "lower", "ltrim", "max", "min", "mod", "nth_value", "ntile", "nullif",
    "octet_length", "percent_rank", "pi", "pow", "power", "printf", "quote", "radians", "random", "rank",
    "replace", "round", "row_number", "rtrim", "sign", "sqrt", "strftime", "string_agg", "substr", "substring",
    "sum", "time", "timediff", "total", "trim", "trunc", "typeof", "unicode", "unixepoch", "unlikely", "upper",
    "json", "json_array", "json_array_length", "json_extract", "json_group_array", "json_group_object",
    "json_object", "json_quote", "json_type", "json_valid"
})
"""Built-in SQL functions a query may call (pure, bounded by the length limit)."""

_ACTION_TEXT = {
    sqlite3.SQLITE_INSERT: "insert rows into {0}",
    sqlite3.SQLITE_UPDATE: "update {0}",
    sqlite3.SQLITE_DELETE: "delete rows from {0}",
    sqlite3.SQLITE_CREATE_TABLE: "create table {0}",
    sqlite3.SQLITE_CREATE_INDEX: "create index {0}",
    sqlite3.SQLITE_CREATE_VIEW: "create view {0}",
    sqlite3.SQLITE_CREATE_TRIGGER: "create trigger {0}",
    sqlite3.SQLITE_CREATE_TEMP_TABLE: "create table {0}",
    sqlite3.SQLITE_CREATE_TEMP_VIEW: "create view {0}",
    sqlite3.SQLITE_CREATE_VTABLE: "create virtual table {0}",
    sqlite3.SQLITE_DROP_TABLE: "drop table {0}",
    sqlite3.SQLITE_DROP_INDEX: "drop index {0}",
    sqlite3.SQLITE_DROP_VIEW: "drop view {0}",
    sqlite3.SQLITE_DROP_TRIGGER: "drop trigger {0}",
    sqlite3.SQLITE_ALTER_TABLE: "alter table {1}",
    sqlite3.SQLITE_PRAGMA: "run PRAGMA {0}",
    sqlite3.SQLITE_ATTACH: "attach database {0}",
    sqlite3.SQLITE_DETACH: "detach database {0}",
    sqlite3.SQLITE_TRANSACTION: "control transactions ({0})",
    sqlite3.SQLITE_SAVEPOINT: "use savepoints",
    sqlite3.SQLITE_REINDEX: "reindex {0}",
    sqlite3.SQLITE_ANALYZE: "analyze {0}",
    sqlite3.SQLITE_FUNCTION: "call the function {1}()",
    sqlite3.SQLITE_READ: "read {0}",
}


class ReadOnlyGuard:
    """SQLite authorizer allowing only SELECTs over known tables and safe functions; remembers the first denial."""

    def __init__(self, tables: set[str]) -> None:
        self.tables = {t.lower() for t in tables} | {"sqlite_master", "sqlite_schema"}
        self.denied: str | None = None
        self.refused: str | None = None
        """Why a wrapped built-in (printf, trim, ...) refused its arguments during the current query."""

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        """The authorizer callback: SQLITE_OK or SQLITE_DENY."""
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ and (
            ((arg1 or "").lower() in self.tables and db in ("main", None)) or (db is None and not arg2)
        ):  # a known table, or a row count without columns (COUNT(*) over a CTE)
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in SAFE_FUNCTIONS:
            return sqlite3.SQLITE_OK
        if self.denied is None:
            if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":  # how virtual tables get instantiated
                self.denied = "use a table-valued function or virtual table (pragma_*, json_each, ...)"
            else:
                self.denied = _ACTION_TEXT.get(action, "perform operation #{2}").format(arg1 or "", arg2 or "", action)
        return sqlite3.SQLITE_DENY


# ---------------------------------------------------------------------------------------------------------------
# Result models
# ---------------------------------------------------------------------------------------------------------------
class Column(BaseModel):
    """A table column."""

    name: str
    type: str
    primary_key: bool = False
    not_null: bool = False
    references: str | None = Field(default=None, description="'table(column)' for a foreign key")


class TableInfo(BaseModel):
    """A table: its columns, row count, CREATE statement and first rows."""

    name: str
    row_count: int
    columns: list[Column]
    create_sql: str
    sample_rows: list[list[Cell]] = Field(description="The first rows, in column order")


class TableSummary(BaseModel):
    """A table's name, row count and column names."""

    name: str
    row_count: int
    columns: list[str]


class TableList(BaseModel):
    """All tables of the database."""

    tables: list[TableSummary]


class QueryResult(BaseModel):
    """The result of a query."""

    columns: list[str]
    rows: list[list[Cell]]
    row_count: int = Field(description="Rows returned (at most the cap)")
    truncated: bool = Field(description="True if the query produced more rows than were returned")


# ---------------------------------------------------------------------------------------------------------------
# Episode state
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class SqlEpisode:
    """One episode: a locked-down connection plus the schema read before lock-down."""

    task_id: str | None
    conn: sqlite3.Connection
    guard: ReadOnlyGuard
    tables: dict[str, TableInfo]
    lock: threading.Lock = field(default_factory=threading.Lock)
    turn: anyio.Lock = field(default_factory=anyio.Lock)
    """Taken before a worker thread is: one episode runs one query at a time and holds at most one thread."""
    queries: int = 0


def _cell(value: Any) -> Cell:
    if isinstance(value, bytes):
        value = "x'" + value.hex() + "'"
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        return value[:MAX_CELL_CHARS] + "…"
    return value


def _introspect(conn: sqlite3.Connection) -> dict[str, TableInfo]:
    """Describe every table (run before the guard is installed: it needs PRAGMAs)."""
    out: dict[str, TableInfo] = {}
    for name, create in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"):
        fks = {r[3]: f"{r[2]}({r[4]})" for r in conn.execute(f"PRAGMA foreign_key_list({name})")}
        cols = [Column(name=r[1], type=r[2], primary_key=bool(r[5]), not_null=bool(r[3]), references=fks.get(r[1]))
                for r in conn.execute(f"PRAGMA table_info({name})")]
        (count,) = conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()
        sample = [[_cell(v) for v in row] for row in conn.execute(f"SELECT * FROM {name} LIMIT 3")]
        out[name] = TableInfo(name=name, row_count=count, columns=cols, create_sql=create, sample_rows=sample)
    return out


def _set_limits(conn: sqlite3.Connection) -> None:
    if sys.version_info < (3, 11):  # no Connection.setlimit: only the wrapped built-ins and the time limit apply
        return
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS * 4)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_PATTERN_CHARS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)


class FunctionRefused(Exception):
    """A wrapped built-in refused arguments that would make it run unbounded inside one SQLite instruction."""


_builtins = threading.local()


def _builtin(name: str, args: Sequence[Any]) -> Any:
    """Call SQLite's own ``name(*args)`` on this thread's private, empty, equally limited connection."""
    conn = getattr(_builtins, "conn", None)
    if conn is None:
        conn = _builtins.conn = sqlite3.connect(":memory:")
        _set_limits(conn)
    call = "CAST(? AS INTEGER)" if name == "CAST_INT" else f"{name}({', '.join('?' * len(args))})"
    return conn.execute(f"SELECT {call}", tuple(args)).fetchone()[0]


_PRINTF_SPEC = re.compile(r"%[-+ #!0,]*(\*|\d+)?(?:\.(\*|\d*))?l{0,2}(.?)", re.S)


def _check_printf(args: Sequence[Any]) -> None:
    """Refuse a printf/format width or precision above MAX_VALUE_BYTES (literal or taken from an argument)."""
    if not args or not isinstance(args[0], (str, bytes)):
        return  # NULL or a number: no conversion specifications
    fmt = args[0].decode("utf-8", "replace") if isinstance(args[0], bytes) else args[0]
    i = 1
    for m in _PRINTF_SPEC.finditer(fmt):
        width, precision, kind = m.groups()
        if kind == "%" and width is None and precision is None:
            continue
        for part in (width, precision):
            if part == "*":
                value = args[i] if i < len(args) else 0
                i += 1
                n = abs(value if isinstance(value, int) else int(_builtin("CAST_INT", [value])))
            else:
                n = int(part) if part else 0
            if n > MAX_VALUE_BYTES:
                raise FunctionRefused(f"printf width or precision {n} is over the limit of {MAX_VALUE_BYTES} "
                                      "(string or blob too big)")
        i += 1


def _check_trim(args: Sequence[Any]) -> None:
    chars = args[1] if len(args) > 1 else None
    size = len(chars) if isinstance(chars, (str, bytes)) else len(str(chars)) if chars is not None else 0
    if size > MAX_TRIM_CHARS:
        raise FunctionRefused(f"{size} characters to trim is over the limit of {MAX_TRIM_CHARS}")


_WRAPPED: dict[str, tuple[Callable[[Sequence[Any]], None], tuple[int, ...]]] = {
    "printf": (_check_printf, (-1,)),
    "format": (_check_printf, (-1,)),
    "trim": (_check_trim, (1, 2)),
    "ltrim": (_check_trim, (1, 2)),
    "rtrim": (_check_trim, (1, 2)),
}


def _wrap_builtins(conn: sqlite3.Connection, guard: ReadOnlyGuard) -> None:
    """Replace the built-ins of :data:`_WRAPPED` on ``conn`` by a check of their arguments + the built-in itself."""
    for name, (check, arities) in _WRAPPED.items():

        def wrapped(*args: Any, _name: str = name, _check: Callable[[Sequence[Any]], None] = check) -> Any:
            try:
                _check(args)
            except FunctionRefused as e:
                guard.refused = f"{_name}(): {e}"
                raise
            return _builtin(_name, args)

        for arity in arities:
            conn.create_function(name, arity, wrapped, deterministic=True)


def _lock_down(conn: sqlite3.Connection, tables: set[str]) -> ReadOnlyGuard:
    """Make ``conn`` read-only and bounded: query_only, length limits, wrapped built-ins and the authorizer."""
    conn.execute("PRAGMA query_only = ON")
    _set_limits(conn)
    guard = ReadOnlyGuard(tables)
    _wrap_builtins(conn, guard)
    conn.set_authorizer(guard)
    return guard


def new_state(task_id: str | None, seed: int) -> SqlEpisode:
    """Build the episode database of ``task_id`` (the task fixes the data; ``seed`` only matters without a task)."""
    db = task_by_id(task_id).data["db"] if task_id else default_db(seed)
    conn = build_database(db)
    tables = _introspect(conn)
    guard = _lock_down(conn, set(tables))
    return SqlEpisode(task_id=task_id, conn=conn, guard=guard, tables=tables)


def fingerprint(ep: SqlEpisode) -> str:
    """SHA-256 over the schema and every row (read through the guarded connection): proves nothing changed."""
    h = hashlib.sha256()
    with ep.lock:
        for row in ep.conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"):
            h.update(repr(row).encode())
        for name in sorted(ep.tables):
            for row in ep.conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid'):
                h.update(repr(row).encode())
    return h.hexdigest()


def snapshot(ep: SqlEpisode) -> dict[str, Any]:
    """State for verifiers: task id, number of queries, row counts and a fingerprint of the database."""
    return {
        "task_id": ep.task_id,
        "queries": ep.queries,
        "row_counts": {n: t.row_count for n, t in ep.tables.items()},
        "fingerprint": fingerprint(ep),
    }


# ---------------------------------------------------------------------------------------------------------------
# Query execution
# ---------------------------------------------------------------------------------------------------------------
_LEADING_KEYWORD = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?(?:\*/|\Z)|\()*(\w*)", re.S)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?(?:\*/|\Z)", re.S)
_READ_KEYWORDS = {"select", "with", "values"}


def check_sql(sql: str) -> str:
    """Reject what is obviously not a single read-only statement, with a helpful message; return the statement."""
    if not sql.strip():
        raise ToolError("Empty query. Send one SQLite SELECT statement.")
    if len(sql) > MAX_SQL_CHARS:
        raise ToolError(f"Query too long ({len(sql)} characters; the limit is {MAX_SQL_CHARS}).")
    first, rest = sql, ""
    for i, ch in enumerate(sql):
        if ch == ";" and sqlite3.complete_statement(sql[: i + 1]):
            first, rest = sql[: i + 1], sql[i + 1 :]
            break
    if _COMMENTS.sub("", rest).strip(" \t\r\n;"):
        raise ToolError("Refused: only one SQL statement per call is allowed (found more after the first ';'). "
                        "Nothing was executed.")
    keyword = (_LEADING_KEYWORD.match(first).group(1) or "").lower()  # type: ignore[union-attr]  # every string matches (all optional)
    if keyword not in _READ_KEYWORDS:
        raise ToolError(f"Refused: the database is read-only and only SELECT queries (optionally WITH ... SELECT) "
                        f"are allowed, not {keyword.upper() or 'this statement'}. Nothing was changed.")
    return first


def execute(ep: SqlEpisode, sql: str) -> QueryResult:
    """Run one guarded query (blocking; call on a worker thread)."""
    statement = check_sql(sql)
    with ep.lock:
        ep.queries += 1
        ep.guard.denied = ep.guard.refused = None
        deadline = time.monotonic() + QUERY_TIME_LIMIT
        ep.conn.set_progress_handler(lambda: time.monotonic() > deadline, 2000)
        try:
            cur = ep.conn.execute(statement)
            rows = cur.fetchmany(MAX_ROWS + 1)
            columns = [d[0] for d in cur.description or ()]
            cur.close()
        except (sqlite3.Error, sqlite3.Warning) as e:
            raise ToolError(_explain(e, ep.guard, time.monotonic() > deadline)) from None
        finally:
            ep.conn.set_progress_handler(None, 0)
    return QueryResult(columns=columns, rows=[[_cell(v) for v in r] for r in rows[:MAX_ROWS]],
                       row_count=min(len(rows), MAX_ROWS), truncated=len(rows) > MAX_ROWS)


def _explain(err: Exception, guard: ReadOnlyGuard, timed_out: bool) -> str:
    denied = guard.denied
    if guard.refused is not None:
        return f"SQL error: {guard.refused}. Build smaller values."
    if "too big" in str(err):
        return (f"SQL error: {err} (a string or blob may have at most {MAX_VALUE_BYTES} bytes, a LIKE/GLOB pattern "
                f"{MAX_PATTERN_CHARS} characters).")
    if denied is not None:
        return (f"Refused: the query tries to {denied}, which is not allowed. The database is read-only: use a single "
                "SELECT over its tables with built-in functions. Nothing was changed.")
    if timed_out or "interrupted" in str(err):
        return (f"Query stopped: it ran longer than the {QUERY_TIME_LIMIT:g} s limit. Make it cheaper "
                "(e.g. bound recursive CTEs, avoid huge cross joins).")
    if "one statement at a time" in str(err):
        return "Refused: only one SQL statement per call is allowed. Nothing was executed."
    return f"SQL error: {err}"


# ---------------------------------------------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------------------------------------------
server: EpisodeServer[SqlEpisode] = EpisodeServer(
    "mcp-gym-sql",
    new_state,
    snapshot=snapshot,
    instructions=(
        "A read-only SQLite database of a small online shop (customers, products, orders; some databases also have "
        "reviews and suppliers). Read the schema (resource sql://schema, or list_tables/describe_table), then "
        "answer questions with SELECT queries via the query tool. Writes, PRAGMAs and multiple statements are refused."
    ),
    max_episodes=1024,
    on_reset=lambda ep: {"tables": sorted(ep.tables)},
)


@server.tool(read_only=True, idempotent=True)
async def query(sql: str) -> QueryResult:
    """Run ONE read-only SQLite query and return its columns and rows.

    Only a single SELECT statement (optionally starting with WITH, or VALUES) is accepted; INSERT/UPDATE/DELETE,
    CREATE/DROP/ALTER, PRAGMA, ATTACH and multiple statements are refused with an explanation. At most 100 rows are
    returned (`truncated` tells if there were more) and a query is stopped after 1 second. Column names depend on the
    database: check the schema first. Example: SELECT city, COUNT(*) FROM customers GROUP BY city ORDER BY 2 DESC
    """
    ep = server.state
    async with ep.turn:
        return await anyio.to_thread.run_sync(execute, ep, sql)


@server.tool(read_only=True, idempotent=True)
async def list_tables() -> TableList:
    """List the tables of the database with their row counts and column names."""
    tables = server.state.tables.values()
    return TableList(tables=[TableSummary(name=t.name, row_count=t.row_count, columns=[c.name for c in t.columns])
                             for t in tables])


def _table(name: str) -> TableInfo | None:
    tables = server.state.tables
    return tables.get(name) or next((t for n, t in tables.items() if n.lower() == name.strip().lower()), None)


@server.tool(read_only=True, idempotent=True)
async def describe_table(name: str) -> TableInfo:
    """Describe one table: its columns (type, primary key, foreign-key references), row count, CREATE statement and
    first 3 rows."""
    table = _table(name)
    if table is None:
        raise ToolError(f"No table named {name!r}. Tables: {', '.join(sorted(server.state.tables))}.")
    return table


@server.mcp.resource("sql://schema", name="schema", mime_type="text/plain",
                     description="CREATE statements and row counts of every table of this episode's database")
async def schema_resource() -> str:
    """The database schema as SQL, with row counts."""
    return "\n\n".join(f"-- {t.name}: {t.row_count} rows\n{t.create_sql};" for t in server.state.tables.values())


@server.mcp.resource("sql://table/{name}", name="table", mime_type="application/json",
                     description="One table: columns, row count, CREATE statement and first rows")
async def table_resource(name: str) -> str:
    """One table's description as JSON."""
    table = _table(name)
    if table is None:
        raise ResourceNotFoundError(f"No table named {name!r}")
    return json.dumps(table.model_dump(), indent=1)


if __name__ == "__main__":
    from mcp_gym.envs.serve import main

    main("sql")
