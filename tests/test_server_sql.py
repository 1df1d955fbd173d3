"""The SQL server over real MCP: every reference solution, random play, 64 isolated episodes on one stdio process,
HTTP, resources, annotations, and one test per attack class on the read-only database."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from typing import Any

import anyio
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError
from test_server_notes import call, episode, serve_http, state_of, stdio_params, tool_hints

from mcp_gym.envs._common import submitted_answer
from mcp_gym.envs.sql import tasks as env
from mcp_gym.servers.sql import MAX_ROWS, MAX_TRIM_CHARS, MAX_VALUE_BYTES, execute, fingerprint, new_state, server
from mcp_gym.tasks import Task

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def query(client: Client, ep: str, sql: str) -> Any:
    """Run ``sql`` in episode ``ep`` and return the tool result."""
    return await call(client, ep, "query", {"sql": sql})


def expected_row_counts(task: Task) -> dict[str, int]:
    """Row counts of the task's database, built locally."""
    conn = env.build_database(task.data["db"])
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: conn.execute(f"SELECT COUNT(*) FROM {n}").fetchone()[0] for n in names}


async def solve(client: Client, task: Task, ep: str) -> tuple[float, float]:
    """Play the reference solution; return (verify score of the submitted answer, score of the value the server's
    query returned)."""
    res = await call(client, ep, "mcp_gym_reset", {"task_id": task.id, "seed": 0})
    assert not res.is_error, res.content
    step = task.solution[0]
    res = await call(client, ep, step["tool"], step["arguments"])
    assert not res.is_error, (task.id, res.content)
    value = res.structured_content["rows"][0][0]
    state = await state_of(client, ep)
    return env.verify(task, submitted_answer(task), state), env.verify(task, str(value), state)


# -- task set ----------------------------------------------------------------------------------------------------
def test_task_set_shape() -> None:
    tasks = env.generate_tasks(0)
    assert len(tasks) >= 100 and len({t.id for t in tasks}) == len(tasks)
    assert sum(t.split == "test" for t in tasks) == len(tasks) // 5
    assert [t.to_record() for t in tasks] == [t.to_record() for t in env.generate_tasks(0)]
    other = env.generate_tasks(3)
    assert other[0].id == "sql-s3-0000" and other[0].data["db"] != tasks[0].data["db"]
    assert env.task_by_id("sql-s3-0007") == other[7] and env.task_by_id(tasks[7].id) is tasks[7]
    assert all(t.solution[-1] == {"tool": "submit", "arguments": {"answer": t.answer}} for t in tasks)
    assert len({t.data["template"] for t in tasks}) == 14
    assert {t.data["db"]["price_col"] for t in tasks} == {"price", "unit_price"}  # the schema varies
    with pytest.raises(KeyError):
        env.task_by_id("sql-9999")


def test_verify_normalises_but_is_exact() -> None:
    task = next(t for t in env.generate_tasks(0) if t.answer.isdigit() and int(t.answer) > 1000)
    n = int(task.answer)
    assert env.verify(task, f" ${n:,}. ", {}) == 1.0 and env.verify(task, f"{n}.0", {}) == 1.0
    assert env.verify(task, str(n + 1), {}) == env.verify(task, "", {}) == env.verify(task, None, {}) == 0.0
    name = next(t for t in env.generate_tasks(0) if not env._NUMBER.fullmatch(t.answer))
    assert env.verify(name, f'"{name.answer.upper()}"', {}) == 1.0 and env.verify(name, name.answer + "x", {}) == 0.0
    avg = next(t for t in env.generate_tasks(0) if "." in t.answer)
    assert env.verify(avg, str(float(avg.answer) + 0.004), {}) == 1.0
    assert env.verify(avg, str(float(avg.answer) + 0.01), {}) == 0.0


# -- reference and random play ----------------------------------------------------------------------------------
@pytest.mark.slow
async def test_reference_solutions_solve_every_task() -> None:
    tasks = env.generate_tasks(0)
    async with Client(server.mcp, cache=None) as client:
        scores = [await solve(client, t, f"ref-{t.id}") for t in tasks]
    assert [t.id for t, s in zip(tasks, scores, strict=True) if min(s) < env.SUCCESS_THRESHOLD] == []


async def random_episode(client: Client, task: Task, ep: str, rng: random.Random) -> float:
    """Random but well-formed play: a few random queries, then submit a random value seen in a result."""
    await call(client, ep, "mcp_gym_reset", {"task_id": task.id})
    seen: list[Any] = [0, 1]
    for _ in range(4):
        table = rng.choice(["customers", "orders", "products"])
        sql = rng.choice([f"SELECT * FROM {table} LIMIT 5 OFFSET {rng.randrange(20)}", f"SELECT COUNT(*) FROM {table}",
                          f"SELECT * FROM {table} ORDER BY random() LIMIT 3"])
        res = await query(client, ep, sql)
        if not res.is_error:
            seen += [v for row in res.structured_content["rows"] for v in row]
    return env.verify(task, str(rng.choice(seen)), await state_of(client, ep))


async def test_random_play_scores_far_below_reference() -> None:
    rng = random.Random(0)
    tasks = rng.sample(env.generate_tasks(0), 40)
    async with Client(server.mcp, cache=None) as client:
        scores = [await random_episode(client, t, f"rand-{i}", rng) for i, t in enumerate(tasks)]
    mean = sum(scores) / len(scores)
    print(f"sql random-play mean score: {mean:.3f} (reference: 1.0)")
    assert mean < 0.15


# -- concurrency and transports ---------------------------------------------------------------------------------
@pytest.mark.slow
async def test_stdio_64_concurrent_episodes_one_process() -> None:
    tasks = env.generate_tasks(0)[:64]
    results: dict[int, Any] = {}
    async with Client(stdio_params("sql"), cache=None) as client:

        async def play(i: int) -> None:
            ep = f"stdio-{i}"
            await call(client, ep, "mcp_gym_reset", {"task_id": tasks[i].id})
            listing = await call(client, ep, "list_tables")
            answer = await query(client, ep, tasks[i].data["sql"])
            results[i] = (listing.structured_content, answer.structured_content, await state_of(client, ep))

        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(play, i)
    for i, task in enumerate(tasks):
        listing, answer, state = results[i]
        counts = {t["name"]: t["row_count"] for t in listing["tables"]}
        assert counts == expected_row_counts(task) == state["row_counts"]
        assert env.verify(task, str(answer["rows"][0][0]), state) == 1.0
        assert state["task_id"] == task.id and state["queries"] == 1
    assert len({r[2]["fingerprint"] for r in results.values()}) == 64


async def test_http_smoke() -> None:
    task = env.generate_tasks(0)[3]
    async with serve_http("sql") as url, Client(url, cache=None) as client:
        await call(client, "h", "mcp_gym_reset", {"task_id": task.id})
        schema = (await client.read_resource("sql://schema", meta=episode("h"))).contents[0].text
        assert "CREATE TABLE orders" in schema and task.data["db"]["date_col"] in schema
        res = await query(client, "h", task.data["sql"])
        assert env.verify(task, str(res.structured_content["rows"][0][0]), await state_of(client, "h")) == 1.0


# -- tools, resources, annotations ------------------------------------------------------------------------------
async def test_tools_resources_and_structured_output() -> None:
    with_reviews = next(t for t in env.generate_tasks(0) if t.data["db"]["reviews"])
    without = next(t for t in env.generate_tasks(0) if not t.data["db"]["reviews"])
    async with Client(server.mcp, cache=None) as client:
        await call(client, "a", "mcp_gym_reset", {"task_id": with_reviews.id})
        await call(client, "b", "mcp_gym_reset", {"task_id": without.id})
        schema_a = (await client.read_resource("sql://schema", meta=episode("a"))).contents[0].text
        schema_b = (await client.read_resource("sql://schema", meta=episode("b"))).contents[0].text
        assert "CREATE TABLE reviews" in schema_a and "reviews" not in schema_b
        table = (await client.read_resource("sql://table/orders", meta=episode("a"))).contents[0].text
        assert '"customer_id"' in table and '"references": "customers(id)"' in table
        with pytest.raises(Exception, match="No table named"):
            await client.read_resource("sql://table/nope", meta=episode("a"))
        templates = await client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["sql://table/{name}"]

        described = await call(client, "a", "describe_table", {"name": "Customers"})
        assert described.structured_content["name"] == "customers"
        assert [c["name"] for c in described.structured_content["columns"]][:3] == ["id", "name", "city"]
        missing = await call(client, "a", "describe_table", {"name": "nope"})
        assert missing.is_error and "No table named 'nope'" in missing.content[0].text

        many = await query(client, "a", "SELECT o.id, c.name FROM orders o CROSS JOIN customers c")
        assert many.structured_content["row_count"] == MAX_ROWS and many.structured_content["truncated"] is True
        assert many.structured_content["columns"] == ["id", "name"]
        bad = await query(client, "a", "SELECT nosuchcolumn FROM orders")
        assert bad.is_error and "no such column" in bad.content[0].text
        plain = await client.call_tool("list_tables", {})  # a plain client (no episode) gets the default database
        assert {"customers", "orders", "products"} <= {t["name"] for t in plain.structured_content["tables"]}


async def test_annotations() -> None:
    async with Client(server.mcp, cache=None) as client:
        tools = await client.list_tools()
    hints = tool_hints(tools)
    assert hints["query"] == hints["list_tables"] == hints["describe_table"] == (True, False, True)
    assert all(t.output_schema for t in tools.tools if t.name in ("query", "list_tables", "describe_table"))


# -- security: each attack is refused and leaves the database unchanged -------------------------------------------
ATTACKS = {
    "insert": ("INSERT INTO orders VALUES (999, 1, 1, 1, '2024-01-01', 'shipped')", "read-only"),
    "update": ("UPDATE orders SET quantity = 0", "read-only"),
    "delete": ("DELETE FROM orders", "read-only"),
    "replace": ("REPLACE INTO customers VALUES (1, 'x', 'y', 'gold', 2020)", "read-only"),
    "create": ("CREATE TABLE evil (a)", "read-only"),
    "create_temp": ("CREATE TEMP TABLE evil AS SELECT * FROM orders", "read-only"),
    "drop": ("DROP TABLE orders", "read-only"),
    "alter": ("ALTER TABLE orders RENAME TO gone", "read-only"),
    "cte_delete": ("WITH x AS (SELECT 1) DELETE FROM orders", "delete rows from orders"),
    "multi_statement": ("SELECT 1; DROP TABLE orders", "one SQL statement"),
    "multi_statement_comment": ("SELECT 1 /* ; */ ; -- x\n DELETE FROM orders", "one SQL statement"),
    "attach": ("ATTACH DATABASE '/tmp/evil.db' AS evil", "read-only"),
    "detach": ("DETACH DATABASE main", "read-only"),
    "pragma": ("PRAGMA query_only = OFF", "read-only"),
    "pragma_writable_schema": ("PRAGMA writable_schema = ON", "read-only"),
    "pragma_function": ("SELECT * FROM pragma_table_info('orders')", "table-valued function"),
    "pragma_function_in_subquery": ("SELECT (SELECT count(*) FROM pragma_function_list)", "table-valued function"),
    "vacuum_into": ("VACUUM INTO '/tmp/evil.db'", "read-only"),
    "load_extension": ("SELECT load_extension('/tmp/evil.so')", "load_extension()"),
    "transaction": ("BEGIN IMMEDIATE", "read-only"),
}


async def _guarded(client: Client, ep: str) -> tuple[str, dict[str, int]]:
    state = await state_of(client, ep)
    return state["fingerprint"], state["row_counts"]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attack_is_refused_and_changes_nothing(attack: str) -> None:
    sql, message = ATTACKS[attack]
    task = env.generate_tasks(0)[0]
    async with Client(server.mcp, cache=None) as client:
        await call(client, "atk", "mcp_gym_reset", {"task_id": task.id})
        before = await _guarded(client, "atk")
        res = await query(client, "atk", sql)
        assert res.is_error and message in res.content[0].text, res.content
        assert "Refused" in res.content[0].text
        assert await _guarded(client, "atk") == before
        assert before[1] == expected_row_counts(task)
        ok = await query(client, "atk", "SELECT COUNT(*) FROM orders")
        assert ok.structured_content["rows"] == [[before[1]["orders"]]]


def test_guard_holds_even_without_the_text_checks() -> None:
    """The authorizer and query_only refuse writes that skip the tool's keyword/multi-statement checks."""
    ep = new_state(env.generate_tasks(0)[0].id, 0)
    before = fingerprint(ep)
    for sql in ["DELETE FROM orders", "PRAGMA writable_schema = ON", "ATTACH ':memory:' AS x",
                "VACUUM INTO '/tmp/evil.db'", "CREATE TABLE t (a)", "SELECT * FROM pragma_table_info('orders')"]:
        with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited|denied|vtable"):
            ep.conn.execute(sql)
    ep.conn.set_authorizer(None)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ep.conn.execute("DELETE FROM orders")
    assert fingerprint(ep) == before


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
async def test_recursive_cte_bomb_times_out_and_server_stays_responsive(monkeypatch: pytest.MonkeyPatch) -> None:
    # the other episode's call must be served while the bomb runs: 3 s of it, not the 1 s limit (a loaded machine)
    monkeypatch.setattr("mcp_gym.servers.sql.QUERY_TIME_LIMIT", 3.0)
    bomb = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r"
    # ~7 x 10^11 rows: no machine counts them within the limit (four tables, 8 x 10^7 rows, once finished in 1 s)
    cross = "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f"
    async with Client(server.mcp, cache=None) as client:
        for ep in ("bomb", "other"):
            await call(client, ep, "mcp_gym_reset", {"task_id": env.generate_tasks(0)[0].id})
        before = await _guarded(client, "bomb")
        for sql in (bomb, cross):
            finished: list[Any] = []

            async def run_bomb(sql: str = sql, finished: list[Any] = finished) -> None:
                finished.append(await query(client, "bomb", sql))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_bomb)
                await anyio.sleep(0.1)
                await call(client, "other", "list_tables")  # another episode is served meanwhile
                assert not finished, "another episode was served only after the runaway query ended"
            res = finished[0]
            assert res.is_error and "ran longer than" in res.content[0].text, res.content
        endless = await query(client, "bomb", "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                                              "SELECT x FROM r")
        assert endless.structured_content["truncated"] is True  # only MAX_ROWS rows are ever fetched
        assert await _guarded(client, "bomb") == before


FUNCTION_BOMBS = [  # each ran for seconds inside one SQLite instruction, out of reach of the time limit
    "SELECT printf('%.*c', 2147483647, 'x')",
    "SELECT length(format('%!.*c', 2147483647, 'x'))",
    "SELECT printf(CAST('%.*c' AS BLOB), '2147483647 apples', 'x')",
    "SELECT printf('%2147483647d', 1)",
    f"SELECT trim('b', printf('%.*c', {MAX_TRIM_CHARS + 1}, 'a'))",
    f"SELECT length(printf('%.*c', {MAX_VALUE_BYTES // 2 + 1}, 'a') || printf('%.*c', {MAX_VALUE_BYTES // 2}, 'a'))",
]


async def test_function_bombs_fail_fast_and_other_episodes_are_served() -> None:
    task = env.generate_tasks(0)[0]
    bomb_errors: list[str] = []
    async with Client(server.mcp, cache=None) as client:
        for ep in ("attacker", "victim"):
            await call(client, ep, "mcp_gym_reset", {"task_id": task.id})

        async def attacker() -> None:
            for sql in FUNCTION_BOMBS * 3:
                res = await query(client, "attacker", sql)
                assert res.is_error, (sql, res.content)
                bomb_errors.append(res.content[0].text)

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(attacker)
            for _ in range(20):
                res = await query(client, "victim", "SELECT 1")
                assert not res.is_error and res.structured_content["rows"] == [[1]], res.content
    assert len(bomb_errors) == 4 * 3 * len(FUNCTION_BOMBS)
    assert all("too big" in text or "over the limit" in text for text in bomb_errors), set(bomb_errors)


@pytest.mark.slow
async def test_one_episode_holds_at_most_one_worker_thread() -> None:
    endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r"
    limiter = anyio.to_thread.current_default_thread_limiter()
    async with Client(server.mcp, cache=None) as client:
        for ep in ("greedy", "other"):
            await call(client, ep, "mcp_gym_reset", {"task_id": env.generate_tasks(0)[0].id})
        results: list[Any] = []

        async def greedy() -> None:
            results.append(await query(client, "greedy", endless))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(greedy)
            await anyio.sleep(0.2)  # the six calls have all reached the server
            assert limiter.borrowed_tokens <= 1  # queued on the episode's turn, not each parked on a worker thread
            res = await query(client, "other", "SELECT 1")
            assert not res.is_error
    assert len(results) == 6 and all("ran longer than" in r.content[0].text for r in results)


async def test_beyond_capacity_no_episode_is_served_a_wrong_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for 3 episodes, 5 live ones: the 2 least recently used are dropped and then refused with a clear
    error; the others keep querying their own database. Before, every dropped episode silently got a fresh default
    database and its queries answered from it."""
    monkeypatch.setattr(server, "_max_episodes", 3)
    tasks = [t for t in env.generate_tasks(0) if t.id not in {"sql-0000"}][:5]
    counts = [expected_row_counts(t)["orders"] for t in tasks]
    assert len(set(counts)) > 1  # the databases differ, so a wrong one would show
    count = "SELECT COUNT(*) FROM orders"
    async with Client(server.mcp, cache=None) as client:
        for i, task in enumerate(tasks):
            await call(client, f"cap-{i}", "mcp_gym_reset", {"task_id": task.id})
        assert server.episode_count <= 3
        for i in range(5):
            res = await query(client, f"cap-{i}", count)
            if i < 2:
                text = res.content[0].text
                assert res.is_error and "evicted" in text and "max_episodes" in text and "3" in text, text
            else:
                assert not res.is_error and res.structured_content["rows"] == [[counts[i]]]
        state = await call(client, "cap-0", "mcp_gym_state")
        assert state.is_error and "evicted" in state.content[0].text  # the verifier sees no made-up state either
        ghost = await query(client, "never-reset", count)
        assert ghost.is_error and "never reset" in ghost.content[0].text
        await call(client, "cap-0", "mcp_gym_reset", {"task_id": tasks[0].id})  # a reset starts it again
        again = await query(client, "cap-0", count)
        assert not again.is_error and again.structured_content["rows"] == [[counts[0]]]
        plain = await client.call_tool("list_tables", {})  # a plain client (no episode id): the default episode
        assert not plain.is_error


_TOKENS = ["SELECT", "*", "1", "FROM", "orders", "customers", ";", "DELETE", "DROP", "TABLE", "INSERT", "INTO",
           "VALUES", "(1)", "UPDATE", "SET", "quantity", "=", "0", "PRAGMA", "writable_schema", "ATTACH", "'x'", "AS",
           "x", "WITH", "RECURSIVE", "r(n)", "(SELECT", ")", "UNION", "ALL", "--", "/*", "*/", "'", "pragma_table_info",
           "REPLACE", "CREATE", "VACUUM", "BEGIN", "COMMIT", "load_extension('x')", "WHERE", "ALTER", "RENAME", "TO"]
_FUZZ_EPISODE = new_state("sql-0000", 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=12).map(" ".join))
def test_no_token_soup_changes_the_database(sql: str) -> None:
    ep = _FUZZ_EPISODE
    before = fingerprint(ep)
    with contextlib.suppress(ToolError):
        execute(ep, sql)
    assert fingerprint(ep) == before
