"""Tasks: what an episode asks of the agent, and how it is graded.

A :class:`Task` is plain data (JSON-able) so task sets can be stored as JSONL and loaded with ``datasets``. Grading
lives in a :data:`Verifier`: ``(task, final_answer, state) -> reward``, where ``state`` is the episode snapshot the
server returns from its hidden ``mcp_gym_state`` tool (``{}`` when the server has none).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import stat
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mcp_gym._task_rules import (
    _BUNDLED_GRADERS,
    _JUDGE_CONFIG_ONLY,
    _OWN_ENV,
    CODE_LOADING_ENV,
    NETWORK_ENV,
    _code_paths,
    _grader_mappings,
)
from mcp_gym._wsdir import link_stays_inside
from mcp_gym.errors import MCPGymError

__all__ = ["Task", "Verifier", "load_tasks", "save_tasks", "load_task_source", "CODE_LOADING_ENV", "NETWORK_ENV",
           "TaskDataError",
           "normalise_answer"]


@dataclass(frozen=True)
class Task:
    """One task of an environment.

    Attributes:
        id: Unique id within its task set (e.g. ``"notes-0042"``).
        prompt: What the agent is asked to do (the observation's ``task`` text).
        split: ``"train"`` or ``"test"`` (fixed at generation time).
        solution: Reference solution: a list of ``{"tool": name, "arguments": {...}}`` calls, the last usually
            ``submit``. The task's verifier accepts it.
        answer: Expected final answer, when the task has one.
        data: Free-form task parameters the server or verifier needs (JSON-able).
        resources: Resource URIs (or URI templates filled from ``data``) the env should observe for this task.
        grader: How this task is graded (a grader spec, see :mod:`mcp_gym.graders`); ``None``: the env's grader, or
            normalised exact match on ``answer`` when the task has one.
        rubric: What an LLM judge grades against (graders of kind ``judge``).
        fixture: A directory copied into a fresh per-episode workspace (``{workspace}`` in server command lines).
        env: Environment variables for the stdio servers of this task's episodes (``{workspace}`` substituted).
        tags: Labels of the task (category, difficulty, ...); evaluation reports success and pass^k per tag.
        turns: A conversation's user turns, in order (empty: a single-turn task). Each is ``{"prompt": str,
            "solution": [calls] (optional: that turn's reference calls, without its ``submit``), "answer": ...
            (optional: the reply that ends the turn)}``; ``prompt`` is ``turns[0]["prompt"]`` (filled from it when
            empty). The env gives turn ``i + 1`` when the agent ends turn ``i`` with ``submit`` (see
            ``docs/conversations.md``).
    """

    id: str
    prompt: str
    split: str = "train"
    solution: tuple[Mapping[str, Any], ...] = ()
    answer: Any = None
    data: Mapping[str, Any] = field(default_factory=dict)
    resources: tuple[str, ...] = ()
    grader: Any = None
    rubric: str | None = None
    fixture: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    turns: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not self.turns:
            return
        turns = tuple(_turn(self.id, i, t) for i, t in enumerate(self.turns))
        object.__setattr__(self, "turns", turns)
        first = turns[0]["prompt"]
        if not self.prompt:
            object.__setattr__(self, "prompt", first)
        elif self.prompt != first:
            raise TaskDataError(f"task {self.id!r}: 'prompt' differs from turns[0]['prompt'] (leave 'prompt' empty in "
                                "a multi-turn task: it is the first turn's)")

    @property
    def multi_turn(self) -> bool:
        """Whether the task is a conversation of several user turns (``turns`` is not empty)."""
        return bool(self.turns)

    def turn_plan(self) -> list[tuple[list[dict[str, Any]], Any]]:
        """What the reference plays, turn by turn: ``(calls, answer)`` per user turn, the calls without the turn's
        ``submit``; the answer is the turn's ``answer`` (the last turn's falls back to the task's ``answer``). A
        single-turn task is one turn: its ``solution`` and ``answer``."""
        if not self.turns:
            return [([dict(c) for c in self.solution], self.answer)]
        last = len(self.turns) - 1
        return [([dict(c) for c in t.get("solution") or ()],
                 t.get("answer", self.answer if i == last else None)) for i, t in enumerate(self.turns)]

    def to_record(self) -> dict[str, Any]:
        """A flat JSON-able record with nested fields as JSON strings (stable Arrow schema for ``datasets``)."""
        d = asdict(self)
        d["solution"] = json.dumps([dict(c) for c in self.solution], ensure_ascii=False, sort_keys=True)
        d["data"] = json.dumps(dict(self.data), ensure_ascii=False, sort_keys=True)
        d["resources"] = list(self.resources)
        d["grader"] = json.dumps(self.grader, ensure_ascii=False, sort_keys=True) if self.grader is not None else None
        d["env"] = json.dumps(dict(self.env), ensure_ascii=False, sort_keys=True) if self.env else None
        d["tags"] = list(self.tags)
        d["turns"] = json.dumps([dict(t) for t in self.turns], ensure_ascii=False, sort_keys=True) if self.turns \
            else None
        return d

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Task:
        """Inverse of :meth:`to_record` (also accepts already-decoded nested fields)."""
        def decoded(key: str, value: Any) -> Any:  # a nested field stored as a JSON string (save_tasks' form)
            try:
                return json.loads(value)
            except ValueError as e:
                raise TaskDataError(f"task {rec.get('id')!r}: '{key}' is a string but not JSON ({e})") from None

        sol = rec.get("solution") or ()
        data = rec.get("data") or {}
        if isinstance(sol, str):
            sol = decoded("solution", sol)
        if isinstance(data, str):
            data = decoded("data", data)
        grader = rec.get("grader")
        if isinstance(grader, str) and grader.lstrip().startswith(("{", "[", '"')):
            grader = decoded("grader", grader)
        env = rec.get("env") or {}
        if isinstance(env, str):
            env = decoded("env", env)
        turns = rec.get("turns") or ()
        if isinstance(turns, str):
            turns = decoded("turns", turns) if turns.strip() else ()
        if isinstance(sol, (str, bytes, Mapping)) or not hasattr(sol, "__iter__") or not all(
                isinstance(c, Mapping) for c in sol):
            raise TaskDataError(f"task {rec.get('id')!r}: 'solution' must be a list of {{'tool', 'arguments'}} calls, "
                                f"got {str(sol)[:80]!r}")
        for key, value in (("data", data), ("env", env)):
            if not isinstance(value, Mapping):
                raise TaskDataError(f"task {rec.get('id')!r}: '{key}' must be an object, got {str(value)[:80]!r}")
        if not isinstance(turns, (list, tuple)):
            raise TaskDataError(f"task {rec.get('id')!r}: 'turns' must be a list of {{'prompt', 'solution', "
                                f"'answer'}} objects, got {type(turns).__name__}")
        return cls(
            id=str(rec["id"]),
            prompt=str(rec.get("prompt", "")),
            split=str(rec.get("split") or "train"),
            solution=tuple(dict(c) for c in sol),
            answer=rec.get("answer"),
            data=dict(data),
            resources=tuple(rec.get("resources") or ()),
            grader=grader if grader not in ("", None) else None,
            rubric=rec.get("rubric") or None,
            fixture=str(rec["fixture"]) if rec.get("fixture") else None,
            env={str(k): str(v) for k, v in dict(env).items()},
            tags=_tags(rec.get("tags")),
            turns=tuple(turns),
        )


def _turn(task_id: str, i: int, turn: Any) -> dict[str, Any]:
    """One user turn of a task, checked: a mapping with a string ``prompt``, an optional list ``solution`` of calls
    and an optional ``answer`` (:class:`TaskDataError` naming the task and the turn otherwise)."""
    where = f"task {task_id!r}: turns[{i}]"
    if not isinstance(turn, Mapping):
        raise TaskDataError(f"{where} must be an object {{'prompt', 'solution', 'answer'}}, got {type(turn).__name__}")
    if not isinstance(turn.get("prompt"), str):
        raise TaskDataError(f"{where} has no 'prompt' string")
    extra = set(turn) - {"prompt", "solution", "answer", "check"}
    if extra:
        raise TaskDataError(f"{where}: unknown key(s) {sorted(extra)} (keys: prompt, solution, answer, check)")
    out = dict(turn)
    sol = out.get("solution")
    if sol is not None:
        if not isinstance(sol, (list, tuple)) or not all(isinstance(c, Mapping) and isinstance(c.get("tool"), str)
                                                         for c in sol):
            raise TaskDataError(f"{where}: 'solution' must be a list of {{'tool', 'arguments'}} calls")
        out["solution"] = [dict(c) for c in sol]
    return out


def _tags(value: Any) -> tuple[str, ...]:
    """A task's ``tags`` as given in a record: a list of labels, one label, or a JSON list (``None``: none)."""
    if isinstance(value, str):
        value = json.loads(value) if value.lstrip().startswith("[") else [value]
    return tuple(str(t) for t in value or () if t not in (None, ""))


Verifier = Callable[[Task, "str | None", Mapping[str, Any]], float]
"""``(task, final_answer, state) -> reward``; ``state`` is the server's ``mcp_gym_state`` snapshot."""


def as_task(t: Task | Mapping[str, Any] | str, index: int = 0) -> Task:
    """Coerce a Task, a record dict (``{"id", "prompt", ...}``) or a bare prompt string into a :class:`Task`."""
    if isinstance(t, Task):
        return t
    if isinstance(t, str):
        return Task(id=f"task-{index}", prompt=t)
    rec = dict(t)
    rec.setdefault("id", f"task-{index}")
    return Task.from_record(rec)


_QUOTES = "\"'`“”‘’"


def normalise_answer(value: Any) -> str:
    """The one answer normaliser (the ``exact``, ``one_of``, ``set`` and state graders and the bundled envs' verifiers
    all compare answers through it), so the same answer passes or fails everywhere alike.

    The rule: ``None`` becomes ``""`` and any other non-string its JSON text; then Unicode NFKC (full-width letters,
    ligatures and ``…`` become plain), case-folded, runs of whitespace collapsed to one space; then, until nothing
    changes, surrounding whitespace, quote characters (``"'`“”‘’``, paired or not) at either end and full stops at the
    end are removed. So ``'ＰＡＲＩＳ'``, ``'"Paris'``, ``'Paris..'`` and ``"'Paris'."`` all become ``'paris'``;
    inner punctuation stays (``'3.5'``, ``'u.s'``).
    """
    if value is None:
        return ""
    s = unicodedata.normalize("NFKC", value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    s = re.sub(r"\s+", " ", s.casefold()).strip()
    while True:
        t = s.strip(_QUOTES).rstrip(".").strip()
        if t == s:
            return s
        s = t


def save_tasks(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write tasks as JSONL (one :meth:`Task.to_record` per line); loadable with ``datasets.load_dataset("json")``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a new sibling with a random name (O_EXCL), renamed over ``path``: a folder handed over (a generated task set a
    # rerun extends) may hold a symlink at a predictable name (``.tasks.jsonl.tmp`` -> ``~/.bashrc``): never written
    # through; a symlink at ``path`` itself is replaced, never followed
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with open(fd, "w", encoding="utf-8") as f:
            for t in tasks:
                f.write(json.dumps(t.to_record(), ensure_ascii=False, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


PARQUET_MAX_BYTES = 256 << 20
"""Most bytes a Parquet task file may decode to (its metadata's declared size, then what is read, row by row): a
downloaded file of a few kB can declare a footer of gigabytes (a sparse file) or repeat one dictionary entry a
million times (a compression bomb), which the reader decoded whole into memory."""


def _parquet_records(path: Path | str, source: str, *, keep: bool = True, spent: int = 0) -> tuple[
        list[dict[str, Any]], int]:
    """The rows of a Parquet file (a local path, or a URL ``fsspec`` opens: a dataset's data file) and the bytes decoded
    counting from ``spent``, within :data:`PARQUET_MAX_BYTES`, else a one-line :class:`TaskDataError`; ``keep=False``
    keeps no row."""
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(str(path), "rb") as f:
        size = f.seek(0, os.SEEK_END)
        name = repr(source) if str(path) == source else f"{source!r} ({path})"
        refuse = f"task source {name}: refusing to read this Parquet file of {size} bytes"
        f.seek(max(0, size - 8))  # the footer length its trailer declares: the reader allocates it before parsing
        tail = f.read(8)
        if len(tail) == 8 and tail[4:] == b"PAR1" and int.from_bytes(tail[:4], "little") > PARQUET_MAX_BYTES // 4:
            raise TaskDataError(f"{refuse}: its footer declares {int.from_bytes(tail[:4], 'little')} bytes of metadata")
        f.seek(0)
        pf = pq.ParquetFile(f)
        declared = sum(pf.metadata.row_group(i).total_byte_size for i in range(pf.metadata.num_row_groups))
        if spent + declared > PARQUET_MAX_BYTES:
            raise TaskDataError(f"{refuse}: it declares {declared} bytes of data, over the {PARQUET_MAX_BYTES} allowed")
        rows: list[dict[str, Any]] = []
        for batch in pf.iter_batches(batch_size=1):  # one row at a time: a repeated entry is counted as it decodes
            spent += batch.nbytes
            if spent > PARQUET_MAX_BYTES:
                raise TaskDataError(f"{refuse}: its rows decode to over {PARQUET_MAX_BYTES} bytes (a compression "
                                    "bomb, not a task set)")
            if keep:
                rows.extend(batch.to_pylist())
    return rows, spent


def _dataset_rows(ds: Any, source: str) -> list[dict[str, Any]]:
    """The rows of a ``datasets.Dataset``, converted one at a time within :data:`PARQUET_MAX_BYTES` of text (an Arrow
    file can repeat one dictionary entry as a Parquet file can), else a one-line :class:`TaskDataError`."""
    rows: list[dict[str, Any]] = []
    spent = 0
    for row in ds:
        stack: list[Any] = [row]
        while stack:  # the row's size: its strings and bytes, 8 bytes for anything else
            value = stack.pop()
            spent += 8 + (len(value) if isinstance(value, (str, bytes)) else 0)
            stack.extend(value.values() if isinstance(value, dict) else value if isinstance(value, list) else ())
        if spent > PARQUET_MAX_BYTES:
            raise TaskDataError(f"task source {source!r}: refusing to read this dataset: its rows decode to over "
                                f"{PARQUET_MAX_BYTES} bytes (a compression bomb, not a task set)")
        rows.append(row)
    return rows


def _load_dataset(target: str, source: str) -> Any:
    """``datasets.load_dataset(target)``, its data files first checked within :data:`PARQUET_MAX_BYTES` in all: the
    builder decodes Parquet a row group at a time (2 GiB for a 5 kB file) and unpacks ``.gz`` whole into its cache."""
    import datasets
    import fsspec
    from fsspec.utils import infer_compression

    builder = datasets.load_dataset_builder(target)
    spent = 0
    for files in (builder.config.data_files or {}).values():
        for file in files:
            if str(file).endswith(".parquet"):
                spent = _parquet_records(file, source, keep=False, spent=spent)[1]
            elif infer_compression(str(file)):
                with fsspec.open(str(file), "rb", compression="infer") as f:
                    while chunk := f.read(1 << 20):
                        spent += len(chunk)
                        if spent > PARQUET_MAX_BYTES:
                            raise TaskDataError(f"task source {source!r} ({file}): refusing to read this compressed "
                                                f"file: it decompresses to over {PARQUET_MAX_BYTES} bytes (a "
                                                "compression bomb, not a task set)")
    builder.download_and_prepare()
    return builder.as_dataset()


JSONL_MAX_LINE = 64 << 20  # most characters in one line of a JSONL task file (BFCL's largest task: about 100 kB)


def _regular_file(path: Path, source: str) -> int:
    """A descriptor of ``path`` opened for reading if it is a regular file (never blocking: a named pipe's open waits
    for a writer), else a one-line :class:`TaskDataError` naming the source."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if (kind := _not_regular(os.fstat(fd).st_mode)) is None:
        return fd
    os.close(fd)
    raise TaskDataError(f"task source {source!r} is a {kind}, not a regular file: not read")


def _jsonl_records(path: Path, source: str) -> list[dict[str, Any]]:
    """The objects of a JSONL file, one a line; a line that is not a JSON object is a :class:`TaskDataError` naming
    the source and the line."""
    rows: list[dict[str, Any]] = []
    with open(_regular_file(path, source), encoding="utf-8") as f:
        for number, line in enumerate(iter(lambda: f.readline(JSONL_MAX_LINE + 1), ""), 1):
            if len(line) > JSONL_MAX_LINE:  # a sparse file of gigabytes (no disk used) is one endless line
                raise TaskDataError(f"task source {source!r}: line {number} is over {JSONL_MAX_LINE} characters")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(f"task source {source!r}: line {number} is not JSON ({e.msg} at column "
                                    f"{e.pos + 1})") from None
            if not isinstance(row, dict):
                raise TaskDataError(f"task source {source!r}: line {number} is a JSON {type(row).__name__}, "
                                    "not a task object")
            rows.append(row)
    return rows


def load_tasks(path: str | Path, split: str | None = None, *, allow_env: Iterable[str] = (),
               trust_code: bool = False) -> list[Task]:
    """Read a JSONL task file written by :func:`save_tasks`, optionally one split.

    A task file is data: its ``fixture``, ``env`` and ``grader`` are checked as :func:`load_task_source` does
    (``allow_env``, ``trust_code``)."""
    path = Path(path)
    out: list[Task] = []
    checker = _TaskDataCheck(str(path), path.parent, allow_env, trust_code)
    for rec in _jsonl_records(path, str(path)):
        t = Task.from_record(rec)
        if split is None or t.split == split:
            out.append(checker(t))
    return out


def select(tasks: Sequence[Task], split: str | None = None, ids: Iterable[str] | None = None) -> list[Task]:
    """Filter a task list by split and/or ids (keeping order)."""
    wanted = set(ids) if ids is not None else None
    return [t for t in tasks if (split is None or t.split == split) and (wanted is None or t.id in wanted)]


_TASK_FIELDS = (
    "id", "prompt", "split", "solution", "answer", "data", "resources", "grader", "rubric", "fixture", "env", "tags",
    "turns",
)


def _records(source: str, split: str | None) -> tuple[list[dict[str, Any]], Path | None]:
    """The raw records of a task source and the directory relative fixture paths start from."""
    path = Path(source).expanduser()
    if path.suffix in (".jsonl", ".json", ".ndjson") and path.exists() and not path.is_dir():
        return _jsonl_records(path, source), path.parent
    if path.suffix == ".parquet" and path.exists() and not path.is_dir():
        os.close(_regular_file(path, source))
        return _parquet_records(path, source)[0], path.parent
    import datasets

    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        ds: Any = datasets.load_from_disk(str(path))
    elif path.exists() or not source.startswith((".", "/", "~")):
        ds = _load_dataset(str(path) if path.exists() else source, source)
    else:
        raise FileNotFoundError(f"task source {source!r}: no such file, directory or dataset")
    if isinstance(ds, datasets.DatasetDict):
        names = list(ds)
        if split is not None and split in ds:
            return _dataset_rows(ds[split], source), (path if path.is_dir() else None)
        if len(names) == 1:
            return _dataset_rows(ds[names[0]], source), (path if path.is_dir() else None)
        raise TaskDataError(f"task source {source!r} has splits {names}: choose one with split=NAME")
    return _dataset_rows(ds, source), (path if path.is_dir() else None)


def load_task_source(
    source: str | Path, split: str | None = None, columns: Mapping[str, str] | None = None, *,
    allow_env: Iterable[str] = (), trust_code: bool = False,
) -> list[Task]:
    """Tasks from a JSONL or Parquet file, a saved ``datasets`` dataset (``save_to_disk``) or anything
    ``datasets.load_dataset`` opens (a local data directory, or a dataset name in the local cache).

    Args:
        source: The file, directory or dataset name.
        split: Keep the tasks of this split. Records without a ``split`` belong to every split; for a
            ``DatasetDict`` the split of that name is read (or its only split).
        columns: Task field -> column name, e.g. ``{"prompt": "question", "answer": "gold"}``; other fields are read
            from columns of their own name. Without an ``id`` column tasks are numbered ``task-<row>``.

    A task source is data, never code or host paths: a ``fixture`` is a directory inside the source's own folder
    (not absolute, no ``..`` or symlink out of it, no symlink inside it pointing out of it), and an ``env`` key that
    changes how a program loads code (:data:`CODE_LOADING_ENV`) or where its network traffic goes (proxies, CA
    bundles, base URLs: :data:`NETWORK_ENV`) is refused unless ``allow_env`` (names or patterns,
    from the caller's own config, never from the task source) allows it; both raise :class:`TaskDataError` naming
    the task, the source and the key or fixture. Raises :class:`TaskDataError` (a ``ValueError``) naming the source
    when no task matches ``split``, a mapped column is missing or a task id repeats.
    """
    source = str(source)
    columns = dict(columns or {})
    unknown = set(columns) - set(_TASK_FIELDS)
    if unknown:
        raise TaskDataError(f"task_columns: unknown task field(s) {sorted(unknown)}; fields are {list(_TASK_FIELDS)}")
    rows, base = _records(source, split)
    checker = _TaskDataCheck(source, base, allow_env, trust_code)
    tasks: list[Task] = []
    splits: set[str] = set()
    for i, row in enumerate(rows):
        rec: dict[str, Any] = {}
        for name in _TASK_FIELDS:
            col = columns.get(name, name)
            if col in row:
                rec[name] = row[col]
            elif name in columns:
                raise TaskDataError(f"task source {source!r}: row {i} has no column {col!r} (mapped to {name!r}); "
                                    f"columns: {sorted(row)}")
        if rec.get("id") in (None, ""):
            rec["id"] = f"task-{i}"
        if not isinstance(rec.get("prompt", ""), str):
            rec["prompt"] = "" if rec["prompt"] is None else str(rec["prompt"])
        if rec.get("split"):
            splits.add(str(rec["split"]))
            if split is not None and str(rec["split"]) != split:
                continue
        elif split is not None:  # a record without a split belongs to every split: it is recorded as the one asked
            rec["split"] = split
        tasks.append(checker(Task.from_record(rec)))
    if rows and not tasks:
        raise TaskDataError(f"task source {source!r}: no task of split {split!r} (splits: {sorted(splits)}); "
                            "pick one with split=NAME, or split=null for all")
    counts = Counter(t.id for t in tasks)
    if len(counts) != len(tasks):
        dup = sorted(i for i, n in counts.items() if n > 1)[:5]
        raise TaskDataError(f"task source {source!r}: duplicate task ids {dup}")
    return tasks


# -- task files are data ----------------------------------------------------------------------------------------------
class TaskDataError(MCPGymError, ValueError):
    """A task source asks for something a task file may not: a ``fixture`` outside its folder or an ``env`` key that
    changes how a program loads code (:data:`CODE_LOADING_ENV`) or where its network traffic goes
    (:data:`NETWORK_ENV`); or it holds no task of the split asked for, lacks a mapped column or repeats a task id."""


_KINDS = {stat.S_IFIFO: "named pipe", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
          stat.S_IFBLK: "block device"}


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is neither a regular file, a folder nor a symlink (``"named pipe"``, ...)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "special file")


def _foreign_entry(folder: str | os.PathLike[str]) -> str | None:
    """The first entry of ``folder`` whose copy would be a read of something outside it, said in words, or ``None``:
    a named pipe, socket or device node (a copy would block, read without end, or read a whole disk), or a file with
    a hard link outside ``folder`` (its content is that other file's: a tarball extracted as root can link
    ``/etc/shadow`` or ``~/.ssh/id_rsa`` into a dataset). Walks without following symlinks (judged elsewhere)."""
    root = Path(folder)
    linked: dict[tuple[int, int], list[Any]] = {}  # (dev, ino) -> [first name, names it has, names seen inside]
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            entry = Path(dirpath, name)
            try:
                st = entry.lstat()
            except OSError:
                continue
            if (kind := _not_regular(st.st_mode)) is not None:
                return f"{entry.relative_to(root)} is a {kind}, not a regular file"
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                seen = linked.setdefault((st.st_dev, st.st_ino), [entry.relative_to(root), st.st_nlink, 0])
                seen[2] += 1
    for rel, names, inside in linked.values():
        if inside < names:
            return (f"{rel} is a hard link to a file outside it ({names} names, {inside} inside): its content is "
                    "another file's")
    return None


class _TaskDataCheck:
    """Checks the tasks of one source and resolves their fixtures against its folder (``base``)."""

    def __init__(self, source: str, base: Path | None, allow_env: Iterable[str], trust_code: bool = False) -> None:
        if isinstance(allow_env, str):
            allow_env = [allow_env]
        self.source = source
        self.base = base.resolve() if base is not None else None
        self.allow = [str(a).upper() for a in allow_env]
        self.trust_code = bool(trust_code)
        self._fixtures: dict[str, str] = {}

    def __call__(self, task: Task) -> Task:
        for key in task.env:
            upper = str(key).upper()
            if any(fnmatch.fnmatchcase(upper, a) for a in self.allow):
                continue
            for patterns, what in ((_OWN_ENV, "changes mcp-gym's own settings (MCP_GYM_CODE_SANDBOX=unsafe runs agent "
                                              "code outside its sandbox)"),
                                   (CODE_LOADING_ENV, "changes how a program loads code"),
                                   (NETWORK_ENV, "changes where a program's network traffic goes or whom it trusts")):
                denied = next((p for p in patterns if fnmatch.fnmatchcase(upper, p)), None)
                if denied is not None:
                    raise TaskDataError(
                        f"task {task.id!r} of {self.source}: env key {key!r} {what} (matches {denied!r}); a task file "
                        f"may not set it (allow it in the job config, e.g. 'env.task_env_allow=[{key}]', only for a "
                        "task file you trust)")
        if task.fixture:
            task = replace(task, fixture=self.fixture(task))
        if task.grader is not None:
            for spec in _grader_mappings(task.grader):
                self._grader_reach(task, spec)
        if task.grader is not None and not self.trust_code:
            for path in _code_paths(task.grader):
                self._grader_code(task, path)
        return task

    def _grader_reach(self, task: Task, spec: Mapping[str, Any]) -> None:
        """Refuse grader options by which a task file would reach past its own data: a ``judge`` grader's endpoint
        or key (the user's key would go to the task's URL), and a ``files`` grader's ``dir`` or an ``sqlite``
        grader's ``db`` outside the episode's workspace and the task file's folder (``~/.mozilla/.../cookies.sqlite``:
        its rows are recorded in the grade). A task file you trust (``trust_code``) may name any path."""
        where = f"task {task.id!r} of {self.source}: grader {spec.get('kind')!r}"
        if spec.get("kind") == "judge":
            for key in _JUDGE_CONFIG_ONLY:
                if key in spec:
                    raise TaskDataError(
                        f"{where} sets {key!r}: where the judge is asked and with which key come from your config "
                        f"(env.judge.{key}), never from a task file (it would send your API key to the task's URL)")
        option = {"files": "dir", "sqlite": "db"}.get(str(spec.get("kind")))
        if option is None or self.trust_code or not isinstance(spec.get(option), str):
            return
        raw = spec[option]
        if raw.startswith("{workspace}"):
            rest = raw[len("{workspace}"):]
            if (rest and not rest.startswith("/")) or ".." in Path(rest).parts or "{workspace}" in rest:
                raise TaskDataError(f"{where} {option} {raw!r} leads out of the episode's workspace")
            return
        if ("{workspace}" in raw or raw.startswith("~") or Path(raw).is_absolute()
                or ".." in Path(raw).parts or self.base is None
                or not (self.base / raw).resolve().is_relative_to(self.base)):
            raise TaskDataError(
                f"{where} {option} {raw!r} must be inside the episode's workspace ('{{workspace}}/...') or the task "
                f"file's folder (a relative path without '..' or a symlink out); a task file may not read other files "
                "(allow it only for a task file you trust: 'env.trust_task_code=true')")

    def _grader_code(self, task: Task, path: str) -> None:
        """Refuse a ``module:function`` grader but public names of ``mcp_gym.graders[.x]`` or ``mcp_gym.envs.<e>.grade``
        (``sys:exit`` hangs the job's grading thread; ``mcp_gym._wsdir:...`` is no grader). A module in the task
        file's folder is left to grading, which refuses it without ``trust_task_code`` and says why."""
        module, _, attr = path.partition(":")
        beside = [f"{module.split('.')[0]}{end}" for end in (".py", "/__init__.py")]  # where grading looks first
        if self.base is not None and any((self.base / f).is_file() for f in beside):
            return
        if _BUNDLED_GRADERS.fullmatch(module) and attr.isidentifier() and not attr.startswith("_"):
            return  # a public name of a bundled grader module (BFCL's: mcp_gym.envs.bfcl.grade:verify)
        raise TaskDataError(
            f"task {task.id!r} of {self.source}: grader {path!r} imports and runs code outside mcp-gym's graders "
            f"(module {module!r}); a task file may name mcp_gym.graders.* and mcp_gym.envs.<env>.grade only: allow "
            "it only for a task file you trust ('env.trust_task_code=true', trust_code=True in Python)")

    def fixture(self, task: Task) -> str:
        """The task's fixture resolved inside the source's folder, or :class:`TaskDataError`."""
        raw = str(task.fixture)
        if raw in self._fixtures:
            return self._fixtures[raw]
        where = f"task {task.id!r} of {self.source}: fixture {raw!r}"
        if self.base is None:
            raise TaskDataError(f"{where}: a dataset loaded by name has no folder to hold fixtures")
        if Path(raw).is_absolute() or ".." in Path(raw).parts:
            raise TaskDataError(f"{where} must be a relative path inside the task file's folder {self.base}")
        path = (self.base / raw).resolve()
        if not path.is_relative_to(self.base):
            raise TaskDataError(f"{where} leads out of the task file's folder {self.base} (through a symlink)")
        if path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                for name in (*dirnames, *filenames):
                    entry = Path(dirpath, name)
                    if entry.is_symlink() and not link_stays_inside(path, entry):  # at any step: not a workspace's
                        raise TaskDataError(f"{where}: symlink {entry.relative_to(path)} points out of the fixture")
            if (foreign := _foreign_entry(path)) is not None:
                raise TaskDataError(f"{where}: {foreign}; not copied into any workspace")
        self._fixtures[raw] = str(path)
        return str(path)
