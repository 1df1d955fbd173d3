"""SQL environment: answer questions about a generated SQLite shop database with read-only queries.

Every task owns a small database (customers, products, orders and, in some variants, reviews and suppliers) generated
deterministically from ``task.data["db"]`` by :func:`build_database`. Column names vary slightly between tasks
(``price``/``unit_price``, ``order_date``/``placed_on``), so an agent has to read the schema. The agent explores with
the server's read-only ``query``/``list_tables``/``describe_table`` tools and answers with the env's ``submit`` action;
:func:`verify` compares that answer with the exact one computed by the task's reference SQL.

Nothing is stored on disk: tasks and databases are regenerated from seeds.
"""

from __future__ import annotations

import functools
import random
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_gym.envs._common import call, split_of, submit, task_rng
from mcp_gym.tasks import Task, normalise_answer

__all__ = ["SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "OBSERVE_RESOURCES", "generate_tasks", "task_by_id", "verify"]

SERVER = "sql"
MAX_STEPS = 20
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = ["sql://schema"]
NUM_TASKS = 120
"""Tasks per generated set (``i % 5 == 4`` -> test split: 96 train / 24 test)."""

_FIRST = ["Ada", "Bruno", "Chen", "Dana", "Emeka", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena", "Mateo",
          "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Vera", "Wei", "Yara", "Zoe"]
_LAST = ["Adams", "Berg", "Costa", "Diaz", "Eklund", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kim", "Lopez",
         "Mensah", "Novak", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka", "Usman", "Varga", "Weber"]
_CITIES = ["Austin", "Kyoto", "Lagos", "Lima", "Lisbon", "Oslo", "Perth", "Quebec", "Seoul", "Tunis"]
_TIERS = ["bronze", "silver", "gold"]
_CATEGORIES = ["books", "garden", "kitchen", "music", "sports", "toys"]
_ADJ = ["Amber", "Bold", "Brisk", "Cosy", "Deluxe", "Eco", "Fancy", "Grand", "Handy", "Lunar", "Mini", "Nimble",
        "Polar", "Quiet", "Rapid", "Solar", "Tiny", "Urban", "Vivid", "Wild"]
_NOUN = ["Lamp", "Kettle", "Racket", "Novel", "Drum", "Puzzle", "Shovel", "Atlas", "Whisk", "Kite", "Guitar", "Rake",
         "Blender", "Ball", "Robot", "Planter"]
_STATUSES = ["shipped", "shipped", "shipped", "pending", "cancelled", "returned"]
_COUNTRIES = ["Brazil", "Canada", "Germany", "India", "Japan", "Kenya"]
_SUPPLIER_WORDS = ["Acme", "Globex", "Initech", "Umbrella", "Vandelay", "Wonka", "Stark", "Tyrell"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]


# ---------------------------------------------------------------------------------------------------------------
# Database generation
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Schema:
    """The per-task schema variant: which optional tables exist and how two columns are named."""

    reviews: bool
    suppliers: bool
    price_col: str
    date_col: str

    @classmethod
    def from_data(cls, db: Mapping[str, Any]) -> Schema:
        """Read the variant from ``task.data["db"]``."""
        return cls(bool(db["reviews"]), bool(db["suppliers"]), str(db["price_col"]), str(db["date_col"]))


def _tables(schema: Schema, rng: random.Random) -> list[tuple[str, str, list[tuple[Any, ...]]]]:
    """``(name, CREATE TABLE sql, rows)`` of every table, generated from ``rng``."""
    out: list[tuple[str, str, list[tuple[Any, ...]]]] = []
    suppliers: list[tuple[Any, ...]] = []
    if schema.suppliers:
        names = rng.sample(_SUPPLIER_WORDS, rng.randint(4, 6))
        suppliers = [(i + 1, f"{n} Supply", rng.choice(_COUNTRIES)) for i, n in enumerate(names)]
        out.append(("suppliers", "CREATE TABLE suppliers (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n"
                    "  country TEXT NOT NULL\n)", suppliers))

    names = rng.sample([f"{f} {la}" for f in _FIRST for la in _LAST], rng.randint(20, 36))
    cities = rng.sample(_CITIES, rng.randint(4, 7))
    customers = [(i + 1, n, rng.choice(cities), rng.choice(_TIERS), rng.randint(2018, 2024))
                 for i, n in enumerate(names)]
    out.append(("customers", "CREATE TABLE customers (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n"
                "  city TEXT NOT NULL,\n  tier TEXT NOT NULL,          -- bronze, silver or gold\n"
                "  signup_year INTEGER NOT NULL\n)", customers))

    pnames = rng.sample([f"{a} {n}" for a in _ADJ for n in _NOUN], rng.randint(10, 18))
    products = []
    for i, n in enumerate(pnames):
        supplier = (rng.randint(1, len(suppliers)),) if suppliers else ()
        products.append((i + 1, n, rng.choice(_CATEGORIES), *supplier, rng.randint(3, 250)))
    supplier_col = "\n  supplier_id INTEGER NOT NULL REFERENCES suppliers(id)," if suppliers else ""
    out.append(("products", "CREATE TABLE products (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n"
                f"  category TEXT NOT NULL,{supplier_col}\n  {schema.price_col} INTEGER NOT NULL  -- whole dollars\n)",
                products))

    orders = []
    for i in range(rng.randint(60, 140)):
        date = f"{rng.randint(2022, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        orders.append((i + 1, rng.randint(1, len(customers)), rng.randint(1, len(products)), rng.randint(1, 5),
                       date, rng.choice(_STATUSES)))
    out.append(("orders", "CREATE TABLE orders (\n  id INTEGER PRIMARY KEY,\n"
                "  customer_id INTEGER NOT NULL REFERENCES customers(id),\n"
                "  product_id INTEGER NOT NULL REFERENCES products(id),\n  quantity INTEGER NOT NULL,\n"
                f"  {schema.date_col} TEXT NOT NULL,  -- YYYY-MM-DD\n"
                "  status TEXT NOT NULL         -- shipped, pending, cancelled or returned\n)", orders))

    if schema.reviews:
        reviews = [(i + 1, rng.randint(1, len(products)), rng.randint(1, len(customers)), rng.randint(1, 5))
                   for i in range(rng.randint(30, 70))]
        out.append(("reviews", "CREATE TABLE reviews (\n  id INTEGER PRIMARY KEY,\n"
                    "  product_id INTEGER NOT NULL REFERENCES products(id),\n"
                    "  customer_id INTEGER NOT NULL REFERENCES customers(id),\n"
                    "  rating INTEGER NOT NULL        -- 1 to 5 stars\n)", reviews))
    return out


def build_database(db: Mapping[str, Any]) -> sqlite3.Connection:
    """Create the in-memory SQLite database described by ``task.data["db"]`` (deterministic from its ``seed``).

    The connection is writable and has no guard installed; the server locks it down before exposing it.
    """
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None, cached_statements=16)
    conn.execute("PRAGMA page_size = 1024")  # a few hundred rows: small pages keep an episode at ~100 KB
    conn.execute("PRAGMA foreign_keys = ON")
    for name, create, rows in _tables(Schema.from_data(db), random.Random(int(db["seed"]))):
        conn.execute(create)
        if rows:
            conn.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return conn


def default_db(seed: int = 0) -> dict[str, Any]:
    """The database description used when no task is given (all optional tables present)."""
    return {"seed": seed, "reviews": True, "suppliers": True, "price_col": "price", "date_col": "order_date"}


# ---------------------------------------------------------------------------------------------------------------
# Question templates: each returns (question, reference SQL) for a database, picking parameters from its contents
# ---------------------------------------------------------------------------------------------------------------
_Template = Callable[[random.Random, Schema, sqlite3.Connection], tuple[str, str]]
_TIES = " If several are tied, give the alphabetically first."


def _pick(conn: sqlite3.Connection, sql: str, rng: random.Random) -> Any:
    """A random value among the (sorted) results of a one-column query."""
    return rng.choice([r[0] for r in conn.execute(sql).fetchall()])


def _q(value: Any) -> str:
    """SQL literal for ``value``."""
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


def _t_customers_in_city(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    city = _pick(c, "SELECT DISTINCT city FROM customers ORDER BY city", rng)
    return f"How many customers live in {city}?", f"SELECT COUNT(*) FROM customers WHERE city = {_q(city)}"


def _t_orders_with_status(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    status = _pick(c, "SELECT DISTINCT status FROM orders ORDER BY status", rng)
    return (f"How many orders have the status '{status}'?",
            f"SELECT COUNT(*) FROM orders WHERE status = {_q(status)}")


def _t_quantity_in_category(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    cat = _pick(c, "SELECT DISTINCT category FROM products ORDER BY category", rng)
    return (f"What is the total quantity of '{cat}' products over all orders that were not cancelled?",
            "SELECT COALESCE(SUM(o.quantity), 0) FROM orders o JOIN products p ON p.id = o.product_id "
            f"WHERE p.category = {_q(cat)} AND o.status <> 'cancelled'")


def _t_revenue_in_year(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    year = int(_pick(c, f"SELECT DISTINCT substr({s.date_col}, 1, 4) FROM orders ORDER BY 1", rng))
    return (f"What is the total revenue (quantity times product price, in dollars) of shipped orders placed in "
            f"{year}?",
            f"SELECT COALESCE(SUM(o.quantity * p.{s.price_col}), 0) FROM orders o JOIN products p "
            f"ON p.id = o.product_id WHERE o.status = 'shipped' AND o.{s.date_col} LIKE '{year}-%'")


def _t_top_spender(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    return ("Which customer (full name) spent the most in total on shipped orders (quantity times product price)?"
            + _TIES,
            f"SELECT cu.name FROM orders o JOIN products p ON p.id = o.product_id JOIN customers cu "
            f"ON cu.id = o.customer_id WHERE o.status = 'shipped' GROUP BY cu.id "
            f"ORDER BY SUM(o.quantity * p.{s.price_col}) DESC, cu.name LIMIT 1")


def _t_most_ordered_product(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    return ("Which product (name) appears in the largest number of orders, whatever their status?" + _TIES,
            "SELECT p.name FROM orders o JOIN products p ON p.id = o.product_id GROUP BY p.id "
            "ORDER BY COUNT(*) DESC, p.name LIMIT 1")


def _t_customers_buying_category(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    cat = _pick(c, "SELECT DISTINCT category FROM products ORDER BY category", rng)
    return (f"How many distinct customers placed at least one order (any status) for a '{cat}' product?",
            "SELECT COUNT(DISTINCT o.customer_id) FROM orders o JOIN products p ON p.id = o.product_id "
            f"WHERE p.category = {_q(cat)}")


def _t_customers_without_orders(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    year = int(_pick(c, "SELECT DISTINCT signup_year FROM customers ORDER BY 1", rng))
    return (f"How many customers who signed up in {year} or later have no shipped order at all?",
            f"SELECT COUNT(*) FROM customers WHERE signup_year >= {year} "
            "AND id NOT IN (SELECT customer_id FROM orders WHERE status = 'shipped')")


def _t_city_with_most_customers(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    tier = _pick(c, "SELECT DISTINCT tier FROM customers ORDER BY tier", rng)
    return (f"Which city has the most customers of tier '{tier}'?" + _TIES,
            f"SELECT city FROM customers WHERE tier = {_q(tier)} GROUP BY city ORDER BY COUNT(*) DESC, city LIMIT 1")


def _t_average_quantity_for_tier(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    tier = _pick(c, "SELECT DISTINCT cu.tier FROM orders o JOIN customers cu ON cu.id = o.customer_id ORDER BY 1",
                 rng)
    return (f"What is the average quantity per order over all orders by customers of tier '{tier}'? "
            "Round to 2 decimal places.",
            "SELECT ROUND(AVG(o.quantity), 2) FROM orders o JOIN customers cu ON cu.id = o.customer_id "
            f"WHERE cu.tier = {_q(tier)}")


def _t_priciest_in_category(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    cat = _pick(c, "SELECT DISTINCT category FROM products ORDER BY category", rng)
    return (f"What is the name of the most expensive product in the category '{cat}'?" + _TIES,
            f"SELECT name FROM products WHERE category = {_q(cat)} ORDER BY {s.price_col} DESC, name LIMIT 1")


def _t_orders_in_month(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    ym = _pick(c, f"SELECT DISTINCT substr({s.date_col}, 1, 7) FROM orders ORDER BY 1", rng)
    year, month = ym.split("-")
    return (f"How many orders were placed in {_MONTHS[int(month) - 1]} {year}?",
            f"SELECT COUNT(*) FROM orders WHERE {s.date_col} LIKE '{ym}-%'")


def _t_best_rated_product(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    n = rng.choice([2, 3])
    return (f"Among products with at least {n} reviews, which has the highest average rating?" + _TIES,
            "SELECT p.name FROM reviews r JOIN products p ON p.id = r.product_id GROUP BY p.id "
            f"HAVING COUNT(*) >= {n} ORDER BY AVG(r.rating) DESC, p.name LIMIT 1")


def _t_supplier_revenue(rng: random.Random, s: Schema, c: sqlite3.Connection) -> tuple[str, str]:
    return ("Which supplier (name) earned the most revenue (quantity times product price) from shipped orders?"
            + _TIES,
            f"SELECT su.name FROM orders o JOIN products p ON p.id = o.product_id JOIN suppliers su "
            f"ON su.id = p.supplier_id WHERE o.status = 'shipped' GROUP BY su.id "
            f"ORDER BY SUM(o.quantity * p.{s.price_col}) DESC, su.name LIMIT 1")


_TEMPLATES: list[tuple[_Template, str | None]] = [
    (_t_customers_in_city, None),
    (_t_orders_with_status, None),
    (_t_quantity_in_category, None),
    (_t_revenue_in_year, None),
    (_t_top_spender, None),
    (_t_most_ordered_product, None),
    (_t_customers_buying_category, None),
    (_t_customers_without_orders, None),
    (_t_city_with_most_customers, None),
    (_t_average_quantity_for_tier, None),
    (_t_priciest_in_category, None),
    (_t_orders_in_month, None),
    (_t_best_rated_product, "reviews"),
    (_t_supplier_revenue, "suppliers"),
]
"""Question templates and the optional table each needs."""


def _format_value(value: Any) -> str:
    """Canonical text of a result value (integers without a decimal point, floats with at most 2 decimals)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.2f}".rstrip("0")
    return str(value)


def _task_id(seed: int, i: int) -> str:
    return f"sql-{i:04d}" if seed == 0 else f"sql-s{seed}-{i:04d}"


def _make_task(seed: int, i: int) -> Task:
    rng = task_rng(SERVER, seed, i)
    template, needs = _TEMPLATES[i % len(_TEMPLATES)]
    db = {
        "seed": rng.getrandbits(32),
        "reviews": needs == "reviews" or rng.random() < 0.5,
        "suppliers": needs == "suppliers" or rng.random() < 0.5,
        "price_col": rng.choice(["price", "unit_price"]),
        "date_col": rng.choice(["order_date", "placed_on"]),
    }
    conn = build_database(db)
    try:
        question, sql = template(rng, Schema.from_data(db), conn)
        (value,) = conn.execute(sql).fetchone()
    finally:
        conn.close()
    answer = _format_value(value)
    prompt = (f"{question}\n\nThe data is in a read-only SQLite database (schema in the resource sql://schema). "
              "Explore it with the query, list_tables and describe_table tools, then submit the answer alone "
              "(a number or a name).")
    return Task(
        id=_task_id(seed, i),
        prompt=prompt,
        split=split_of(i),
        solution=(call("query", sql=sql), submit(answer)),
        answer=answer,
        data={"db": db, "template": template.__name__.removeprefix("_t_"), "sql": sql},
    )


@functools.lru_cache(maxsize=8)
def _tasks(seed: int) -> tuple[Task, ...]:
    return tuple(_make_task(seed, i) for i in range(NUM_TASKS))


def generate_tasks(seed: int = 0) -> list[Task]:
    """The task set for ``seed``: 120 questions over 14 templates, deterministic; ``i % 5 == 4`` is the test split."""
    return list(_tasks(seed))


_ID = re.compile(r"sql-(?:s(\d+)-)?(\d{4})")


def task_by_id(task_id: str) -> Task:
    """The generated task with this id (``sql-0042`` for seed 0, ``sql-s7-0042`` for seed 7)."""
    m = _ID.fullmatch(task_id)
    if m is None or int(m.group(2)) >= NUM_TASKS:
        raise KeyError(f"unknown sql task {task_id!r}")
    return _tasks(int(m.group(1) or 0))[int(m.group(2))]


# ---------------------------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------------------------
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def _normalize(text: str) -> str:
    """:func:`normalise_answer`, also dropping ``$`` and thousands separators from a number."""
    t = normalise_answer(text)
    return t.replace("$", "").replace(",", "") if re.fullmatch(r"\$?[-+]?[\d,]*\.?\d+", t) else t


def _as_number(text: str) -> float | None:
    return float(text) if _NUMBER.fullmatch(text) else None


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """1.0 if ``answer`` equals the task's exact answer (case/space-insensitive; numbers compared numerically, to
    2 decimals when the expected answer has decimals), else 0.0. The episode state is not needed."""
    if answer is None or task.answer is None:
        return 0.0
    got, want = _normalize(answer), _normalize(task.answer)
    if got == want:
        return 1.0
    g, w = _as_number(got), _as_number(want)
    if g is None or w is None:
        return 0.0
    if w.is_integer():
        return float(g == w)
    return float(abs(g - w) < 0.005 + 1e-9)
