"""``mcp-gym view``: a recorded run (or several) as one self-contained, static HTML report.

    mcp-gym view runs/eval-oracle                            # writes runs/eval-oracle/report.html
    mcp-gym view runs/eval-oracle runs/eval-random --out cmp.html

The page needs no server and no network: CSS and JavaScript are inline, images (tool results, an evaluation's plots)
are ``data:`` URIs, and a Content-Security-Policy forbids every other source. It shows

* each run: where it is, what made it (collect, eval, Ray launcher, a replayed cassette), its episodes and success;
  for an evaluation the summary table of ``report/results.json`` (runs side by side) and the plots of ``report/``;
* with two or more runs, a per-task comparison; picking a task lays its episodes out side by side, one column per run;
* a table of episodes (with each one's grade and reason) filterable by run, task, tag, policy, success and termination
  (the filters live in the URL hash, so ``report.html#success=false&task=t3`` opens filtered), paginated;
* per episode (rendered when opened, from JSON embedded in the page): its grade (verdict, score, the grader's reason,
  each member grader's own, a judge's details) or why grading failed, the task, every step's tool call and arguments,
  its result (text folded when long, images shown), reward, resource changes, errors, and the model's raw text and
  parse status.

Everything recorded is untrusted (model output, server results): it reaches the page only as JSON that the page's
script turns into text nodes, never markup. Big runs are capped (``max_episodes`` per run, chosen round-robin over
tasks; ``max_text`` characters per text; ``max_image_bytes`` per image), and the page says what it left out.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import html
import importlib.resources
import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_gym.graders import Grade
from mcp_gym.jobs.report import REPORT_DIR
from mcp_gym.protocol import REDACTED, redact_text
from mcp_gym.recording._contained import read_run_file
from mcp_gym.recording.atomic import write_text_atomic
from mcp_gym.recording.reader import read_tables
from mcp_gym.recording.run import RunDirectory
from mcp_gym.recording.schema import EPISODES_DIR, MANIFEST, STEPS_DIR, dumps
from mcp_gym.recording.store import RunStore

__all__ = ["write_view", "main"]

VIEW_FILE = "report.html"
"""Name of the page ``mcp-gym view RUN`` writes into a single run's directory."""

_INDEX_TEXT = 300  # characters of prompts and answers in the episode table (searchable); the full text on opening
_MAX_RUN_FILE = 64 << 20  # bytes of a run's manifest, config, results.json or plot read for the page
_SECRET_WORDS = ("key", "token", "secret", "password", "auth", "header", "cookie", "credential")

_STEP_COLUMNS = ["episode_id", "step_index", "tool", "server", "server_tool", "arguments", "content",
                 "structured_content", "is_error", "error", "error_code", "reward", "terminated", "truncated",
                 "duration", "observation", "resources", "raw_text", "parse_status", "result_truncated",
                 "result_bytes", "info", "user_turn"]


@dataclass
class RunView:
    """What the page shows of one run directory (built by :func:`load_run`)."""

    path: str
    name: str
    kind: list[str]
    manifest: dict[str, Any]
    config: dict[str, Any] | None
    episodes: list[dict[str, Any]]
    steps: dict[str, list[dict[str, Any]]]
    """Episode id -> its steps."""
    details: dict[str, dict[str, Any]]
    """Episode id -> what is shown when it is opened (prompt, task record, servers, resources at reset, ...)."""
    total_episodes: int
    summary: dict[str, Any] | None = None
    per_task: list[dict[str, Any]] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)
    """``(file name, data: URI)`` of the PNG plots of an evaluation's report folder."""
    storage: str | None = None
    """Where the shards are when not in ``path`` (a launcher's ``launcher.storage``)."""


# -- reading a run ----------------------------------------------------------------------------------------------------
def _hydra_config(root: Path) -> dict[str, Any] | None:
    path = root / ".hydra" / "config.yaml"
    if not path.exists():
        return None
    text = read_run_file(root, path, limit=_MAX_RUN_FILE)  # never a file outside the run, a pipe or a device
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.to_container(OmegaConf.create(text.decode("utf-8")), resolve=False)
    except Exception:  # noqa: BLE001 - a damaged config only costs the page its "how it was made" line
        return None
    return _redact(cfg) if isinstance(cfg, dict) else None


def _redact(value: Any) -> Any:
    """``value`` with the values of keys that may hold secrets (api_key, token, headers, ...) replaced, and URLs' user
    info and query values masked wherever they appear."""
    if isinstance(value, dict):
        return {k: REDACTED if any(w in str(k).lower() for w in _SECRET_WORDS) and v not in (None, "", {}, [])
                else _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return redact_text(value) if isinstance(value, str) else value


def _locate(path: str, storage: str | None = None) -> tuple[str, Path | None, dict[str, Any] | None]:
    """``(where the shards are, local run folder or None, hydra config)``; raises ``FileNotFoundError``, or
    ``ValueError`` for a run whose config names another place for its shards that the caller did not name."""
    if "://" in path:
        return path, None, None
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no run at {path!r}: no such directory")
    if not root.is_dir():
        raise FileNotFoundError(f"no run at {path!r}: not a directory (give a run directory, e.g. runs/collect/x)")
    config = _hydra_config(root)
    if storage:
        return storage, root, config  # the caller named where the shards are (--storage)
    named = ((config or {}).get("launcher") or {}).get("storage")
    if named and not (root / MANIFEST).exists() and not (root / EPISODES_DIR).is_dir():
        # A run directory is untrusted: its config could name another run of yours (or your bucket), whose episodes
        # the page, written into this run, would then carry. It is read only where the caller says.
        raise ValueError(f"{path}: its .hydra/config.yaml says its shards are at launcher.storage {str(named)!r}; a "
                         "run directory is untrusted data, so the view reads elsewhere only where you name it: "
                         f"mcp-gym view {path} --storage {str(named)!r}")
    if not any((root / p).exists() for p in (MANIFEST, EPISODES_DIR, STEPS_DIR)):
        raise FileNotFoundError(f"no run at {path!r}: the directory has no {MANIFEST}, {EPISODES_DIR}/ or "
                                f"{STEPS_DIR}/ (is it the parent of the run directories?)")
    return str(root), root, config


def _json(text: str | None, default: Any = None) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return text


def _cap(text: Any, limit: int) -> Any:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if isinstance(text, str) and len(text) > limit:
        return f"{text[:limit]}\n[… {len(text) - limit:,} more characters not shown here; the run's Parquet has them]"
    return text


def _pretty(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _cap(value, limit)
    return _cap(json.dumps(value, indent=1, ensure_ascii=False), limit)


def _blocks(content: Any, limit: int, max_image_bytes: int) -> list[dict[str, Any]]:
    """MCP content blocks as the page draws them: text, image (a data: URI), or anything else as JSON."""
    out: list[dict[str, Any]] = []
    if not isinstance(content, list):
        return [{"t": "text", "text": _pretty(content, limit)}] if content not in (None, "") else []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            out.append({"t": "text", "text": _cap(str(block.get("text") or ""), limit)})
        elif kind == "image" and isinstance(block.get("data"), str):
            mime, data = str(block.get("mimeType") or ""), block["data"]
            ok = mime.startswith("image/") and mime.replace("/", "").replace("+", "").replace(".", "").replace(
                "-", "").isalnum()
            try:
                base64.b64decode(data, validate=True)
            except ValueError:
                ok = False
            if ok and len(data) <= max_image_bytes:
                out.append({"t": "image", "src": f"data:{mime};base64,{data}", "mime": mime})
            else:
                why = "not a valid image block" if not ok else f"{len(data) * 3 // 4:,} bytes: above the size cap"
                out.append({"t": "note", "text": f"image ({mime or 'no mimeType'}) not shown: {why}"})
        elif kind == "resource" and isinstance(block.get("resource"), dict) and "text" in block["resource"]:
            res = block["resource"]
            out.append({"t": "text", "text": _cap(str(res.get("text") or ""), limit), "uri": str(res.get("uri"))})
        else:
            shown = dict(block) if isinstance(block, dict) else block
            if isinstance(shown, dict):
                for key in ("data", "blob"):
                    if isinstance(shown.get(key), str) and len(shown[key]) > 200:
                        shown[key] = f"<{len(shown[key]):,} base64 characters>"
            out.append({"t": "json", "kind": str(kind), "text": _pretty(shown, limit)})
    return out


def _changes(before: Mapping[str, Any] | None, after: Any, limit: int) -> list[dict[str, Any]] | None:
    """The resources that differ after a step: ``[{uri, before, after}]`` (None when the step recorded none)."""
    if not isinstance(after, dict):
        return None
    before = before or {}
    out = []
    for uri in sorted(set(before) | set(after)):
        if before.get(uri) != after.get(uri):
            out.append({"uri": uri, "before": _pretty(before.get(uri), limit), "after": _pretty(after.get(uri), limit)})
    return out


def _step(row: dict[str, Any], previous: dict[str, Any] | None, limit: int, max_image_bytes: int) -> dict[str, Any]:
    info = _json(row["info"], {}) or {}
    resources = _json(row["resources"])
    content = _json(row["content"])
    blocks = _blocks(content, limit, max_image_bytes)
    texts = [str(b.get("text")) for b in content if isinstance(b, dict) and b.get("type") == "text"] \
        if isinstance(content, list) else []
    structured = _json(row["structured_content"])
    if structured is not None and len(texts) == 1 and _json(texts[0]) == structured:
        structured = None  # the text block already is this JSON (what the SDK sends for a structured result)
    observation = row["observation"]
    if observation in ("\n".join(texts), "\n\n".join(texts)):
        observation = None  # the agent saw the result's text as is
    return {
        "i": row["step_index"], "tool": row["tool"], "server": row["server"], "server_tool": row["server_tool"],
        "args": _pretty(_json(row["arguments"]), limit), "blocks": blocks, "structured": _pretty(structured, limit),
        "obs": _cap(observation, limit),
        "is_error": bool(row["is_error"]), "error": _json(row["error"]), "error_code": row["error_code"],
        "reward": row["reward"], "terminated": bool(row["terminated"]), "truncated": bool(row["truncated"]),
        "duration": row["duration"],
        "changes": _changes(previous, resources, limit),
        "n_resources": len(resources) if isinstance(resources, dict) else None,
        "raw": _cap(row["raw_text"], limit), "parse": row["parse_status"],
        "result_truncated": bool(row["result_truncated"]), "result_bytes": row["result_bytes"],
        "logs": [_pretty(x, limit) for x in (info.get("logs") or [])] if isinstance(info, dict) else [],
        "tools_changed": bool(info.get("tools_changed")) if isinstance(info, dict) else False,
        "user_turn": row["user_turn"],  # a multi-turn task's user turn (null: a single-turn task)
    }


def _grade(steps: list[dict[str, Any]], limit: int) -> dict[str, Any] | None:
    """The grade recorded in an episode's final step (``info["grade"]``): verdict, score, reason and, per grader of a
    combination, its own; or why grading failed (``ungraded``); ``None`` when nothing graded the episode."""
    last = next((s for s in reversed(steps) if s["terminated"] or s["truncated"]), None)
    info = _json(last["info"], {}) if last is not None else {}
    if not isinstance(info, dict):
        return None
    grade = info.get("grade")
    if isinstance(grade, dict):
        parts = []
        try:
            flat = Grade.from_dict(grade).flat()
        except (KeyError, TypeError, ValueError):
            flat = {}
        for path, g in list(flat.items())[1:]:
            parts.append({"path": path, "passed": g.passed, "score": g.score, "reason": _cap(g.reason, limit)})
        return {"passed": grade.get("passed"), "score": grade.get("score"), "grader": grade.get("grader"),
                "reason": _cap(str(grade.get("reason") or ""), limit), "parts": parts,
                "details": _pretty(grade.get("details"), limit)}
    error = _json(last["error"]) if last is not None else None  # the step's own column
    if isinstance(error, dict) and error.get("kind") == "verifier_error":
        return {"passed": None, "score": None, "grader": None, "ungraded": True,
                "reason": _cap(str(error.get("message") or ""), limit), "parts": [], "details": None}
    return None


def _pick(episodes: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` episodes, round-robin over tasks (each task's in recording order), then in task order."""
    if len(episodes) <= limit:
        return episodes
    by_task: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for ep in episodes:
        by_task[ep["task_id"]].append(ep)
    chosen: list[dict[str, Any]] = []
    rank = 0
    while len(chosen) < limit:
        for eps in by_task.values():
            if rank < len(eps) and len(chosen) < limit:
                chosen.append(eps[rank])
        rank += 1
    keep = {id(e) for e in chosen}
    return [e for e in episodes if id(e) in keep]


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, dt.datetime) else None


def _report(root: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[tuple[str, str]]]:
    folder = root / REPORT_DIR
    results = folder / "results.json"
    if not results.exists():
        return None, [], []
    # report/ and its files are the run's: one leading out of it (x.png -> ~/.ssh/id_rsa) is refused, never embedded
    try:
        data = json.loads(read_run_file(root, results, limit=_MAX_RUN_FILE))
    except RecursionError:
        raise ValueError(f"{results}: not a readable results file (nested too deeply)") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{results}: not a readable results file ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{results}: not a readable results file ({e.msg}, line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("per_task") or [], list):
        raise ValueError(f"{results}: not a results file (a JSON object with a 'per_task' list)")
    plots = [(p.name, "data:image/png;base64," + base64.b64encode(read_run_file(root, p, limit=_MAX_RUN_FILE))
              .decode()) for p in sorted(folder.glob("*.png"))]
    return data.get("summary"), list(data.get("per_task") or []), plots


def load_run(
    path: str | os.PathLike[str], *, name: str | None = None, max_episodes: int = 500, max_text: int = 20_000,
    max_image_bytes: int = 2_000_000, storage: str | None = None,
) -> RunView:
    """Read a run directory (or a ``pyarrow.fs`` URI of one) into what :func:`render_html` draws.

    ``storage``: where the run's shards are when a launcher published them elsewhere (its ``launcher.storage``); a
    run whose config names such a place is refused without it (``ValueError``), since a run's files are untrusted.
    Raises ``FileNotFoundError`` (one line, naming the path) when there is no run there. The run is only read:
    episodes still in a write-ahead log are shown, nothing is recovered or rewritten.
    """
    location, root, config = _locate(os.fspath(path), storage)
    if root is None or location != str(root):
        shared = RunStore(location)
        manifest = shared.manifest()
        if not manifest and not shared.shards(EPISODES_DIR):
            raise FileNotFoundError(f"no run at {location!r}: no {MANIFEST} and no episodes shards there")
        steps, episodes = shared.read_tables()
    else:
        manifest = RunDirectory(root, create=False).manifest
        steps, episodes = read_tables(root)
    import pyarrow as pa
    import pyarrow.compute as pc

    # Choose the episodes from a few small columns; only theirs are turned into Python objects.
    all_eps = episodes.select(["episode_id", "episode_key", "task_id", "started_at"]).to_pylist()
    all_eps.sort(key=lambda e: (e["started_at"] or dt.datetime.min.replace(tzinfo=dt.timezone.utc),
                                e["episode_key"] or "", e["episode_id"]))
    chosen = [e["episode_id"] for e in _pick(all_eps, max_episodes)]
    value_set = pa.array(chosen, pa.string())
    full = {e["episode_id"]: e for e in episodes.drop_columns(["tools"]).filter(
        pc.is_in(episodes.column("episode_id"), value_set=value_set)).to_pylist()}
    shown = [full[i] for i in chosen]
    by_episode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if steps.num_rows:
        steps = steps.filter(pc.is_in(steps.column("episode_id"), value_set=value_set)).select(_STEP_COLUMNS)
        for row in steps.to_pylist():
            by_episode[row["episode_id"]].append(row)

    rows: list[dict[str, Any]] = []
    step_lists: dict[str, list[dict[str, Any]]] = {}
    details: dict[str, dict[str, Any]] = {}
    for e in shown:
        initial = _json(e["initial_observation"], {}) or {}
        start_res = initial.get("resources") if isinstance(initial, dict) else None
        previous = start_res if isinstance(start_res, dict) else None
        step_rows = []
        raw_steps = sorted(by_episode.get(e["episode_id"], []), key=lambda r: r["step_index"])
        grade = _grade(raw_steps, max_text)
        for s in raw_steps:
            step_rows.append(_step(s, previous, max_text, max_image_bytes))
            res = _json(s["resources"])
            if isinstance(res, dict):
                previous = res
        started, ended = e["started_at"], e["ended_at"]
        task = _json(e["task"])
        if isinstance(task, dict):
            task = {k: _json(v) if k in ("solution", "data", "turns") and isinstance(v, str) else v
                    for k, v in task.items()}
        servers = _json(e["servers"], {}) or {}
        rows.append({  # the table's row (kept small: every episode's row is parsed when the page opens)
            "id": e["episode_id"], "key": e["episode_key"], "env": e["env_id"], "task": e["task_id"],
            "prompt": _cap(e["task_prompt"], _INDEX_TEXT), "seed": e["seed"], "policy": e["policy"],
            "ret": e["total_reward"], "success": e["success"], "len": e["length"], "term": e["termination"],
            "answer": _cap(e["final_answer"], _INDEX_TEXT),
            "errors": sum(1 for s in step_rows if s["is_error"]),
            "parse_failures": sum(1 for s in step_rows if s["parse"] not in (None, "ok")),
            "started": _iso(started),
            "seconds": (ended - started).total_seconds() if started and ended else None,
            "catalogue": e["catalogue_hash"], "catalogue_changes": len(_json(e["catalogue_changes"], []) or []),
            "grade": None if grade is None else {"passed": grade["passed"], "score": grade["score"],
                                                 "reason": _cap(grade["reason"], _INDEX_TEXT),
                                                 "ungraded": bool(grade.get("ungraded"))},
            "tags": [str(t) for t in task.get("tags") or ()] if isinstance(task, dict) else [],
        })
        step_lists[e["episode_id"]] = step_rows
        details[e["episode_id"]] = {  # read when the episode is opened
            "prompt": _cap(e["task_prompt"], max_text), "task_record": _pretty(task, max_text),
            "answer": _cap(e["final_answer"], max_text), "servers": servers if isinstance(servers, dict) else {},
            "resources": {k: _pretty(v, max_text) for k, v in start_res.items()} if isinstance(start_res, dict) else {},
            "metadata": _pretty(_json(e["metadata"]), max_text), "grade": grade,
            "turns": [_cap(str(t.get("prompt", "")), max_text) for t in task.get("turns") or () if isinstance(t, dict)]
            if isinstance(task, dict) and isinstance(task.get("turns"), list) else [],  # each user message
        }

    kind = []
    meta = manifest.get("metadata") or {}
    command = meta.get("command") or (config or {}).get("command")
    summary, per_task, plots = _report(root) if root is not None else (None, [], [])
    if summary is not None or command == "eval":
        kind.append("eval")
    elif command:
        kind.append(str(command))
    else:
        kind.append("recording")
    launcher = ((config or {}).get("launcher") or {}).get("kind")
    if launcher == "ray":
        kind.append("ray")
    if location != str(root):
        kind.append("shared storage")
    transports = {s.get("transport") for d in details.values() for s in d["servers"].values() if isinstance(s, dict)}
    if "replay" in transports:
        kind.append("replay")
    if root is not None and (root / "cassettes").is_dir():
        kind.append("cassettes recorded")
    planned = manifest.get("planned")
    return RunView(
        path=location if root is None else str(root.resolve()), name=name or _default_name(location), kind=kind,
        manifest={**_redact({k: v for k, v in manifest.items() if k != "planned"}),
                  "planned": len(planned) if planned is not None else None},
        config=config, episodes=rows, steps=step_lists, details=details, total_episodes=len(all_eps),
        summary=summary, per_task=per_task, plots=plots,
        storage=location if root is not None and location != str(root) else None,
    )


def _default_name(location: str) -> str:
    return location.rstrip("/").rsplit("/", 1)[-1] or location


def _names(paths: Sequence[str]) -> list[str]:
    """Short, distinct names: the last path component, with more components where two would collide."""
    parts = [[p for p in str(x).replace("\\", "/").rstrip("/").split("/") if p] or [str(x)] for x in paths]
    depth = [1] * len(parts)
    for _ in range(8):
        names = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        dupes = {n for n in names if names.count(n) > 1}
        if not dupes:
            return names
        depth = [d + 1 if n in dupes else d for n, d in zip(names, depth, strict=True)]
    return [f"{n} ({i + 1})" for i, n in enumerate(names)]


# -- the page ---------------------------------------------------------------------------------------------------------
def _script_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` can end the element (and NaN
    or infinite numbers written as ``null``, which ``JSON.parse`` reads)."""
    text = dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_html(runs: Sequence[RunView], *, title: str | None = None) -> str:
    """The self-contained page showing ``runs`` (see the module docstring)."""
    from mcp_gym import __version__

    index: list[dict[str, Any]] = []
    step_tags: list[str] = []
    for r, run in enumerate(runs):
        for e in run.episodes:
            n = len(index)
            index.append({**e, "run": r, "n": n})
            lazy = {**run.details[e["id"]], "steps": run.steps[e["id"]]}
            step_tags.append(f'<script type="application/json" id="ep-{n}">{_script_json(lazy)}</script>')
    meta = [{"name": run.name, "path": run.path, "storage": run.storage, "kind": run.kind, "manifest": run.manifest,
             "config": run.config,
             "total": run.total_episodes, "shown": len(run.episodes), "summary": run.summary,
             "per_task": run.per_task, "plots": [{"name": n, "src": s} for n, s in run.plots]} for run in runs]
    title = title or "mcp-gym: " + ", ".join(run.name for run in runs)
    data = {"title": title, "runs": meta, "episodes": index, "version": __version__,
            "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    csp = (f"default-src 'none'; img-src data:; style-src {_csp_hash(_CSS)}; script-src {_csp_hash(_JS)}; "
           "base-uri 'none'; form-action 'none'")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>"
        '<noscript>This report needs JavaScript to draw its tables.</noscript><div id="app"></div>\n'
        f'<script type="application/json" id="data">{_script_json(data)}</script>\n'
        + "\n".join(step_tags)
        + f"\n<script>{_JS}</script>\n</body></html>\n"
    )


def write_view(
    runs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] | None = None, *, max_episodes: int = 500,
    max_text: int = 20_000, max_image_bytes: int = 2_000_000, title: str | None = None, storage: str | None = None,
) -> Path:
    """Write the HTML report of one or more runs and return its path.

    ``out`` defaults to ``<run>/report.html`` for one run and ``./report.html`` for several. ``max_episodes`` caps the
    episodes shown per run, ``max_text`` the characters of each text, ``max_image_bytes`` each embedded image.
    ``storage`` (one run only): where its shards are, for a run a launcher published elsewhere (:func:`load_run`).
    """
    if not runs:
        raise ValueError("give at least one run directory")
    if storage and len(runs) > 1:
        raise ValueError("--storage names the shards of one run: give one run with it")
    names = _names([os.fspath(r) for r in runs])
    views = [load_run(r, name=n, max_episodes=max_episodes, max_text=max_text, max_image_bytes=max_image_bytes,
                      storage=storage) for r, n in zip(runs, names, strict=True)]
    if out is None:
        out = Path(views[0].path) / VIEW_FILE if len(views) == 1 and "://" not in views[0].path else Path(VIEW_FILE)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # a run handed over by someone else may hold a symlink at any predictable name: never written through
    write_text_atomic(out, render_html(views, title=title))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``mcp-gym view RUN [RUN ...] [--out FILE]``; returns the exit status."""
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="mcp-gym view",
        description="Write a self-contained HTML report (opens offline) of recorded runs: episodes, steps, results, "
                    "evaluation summaries and plots; several runs side by side by task.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (collect, eval, Ray, replay runs)")
    p.add_argument("--out", help=f"the HTML file (default: RUN/{VIEW_FILE} for one run, ./{VIEW_FILE} for several)")
    p.add_argument("--max-episodes", type=int, default=500, help="episodes shown per run (default 500)")
    p.add_argument("--max-text", type=int, default=20_000, help="characters shown of each text (default 20000)")
    p.add_argument("--storage", help="where the run's shards are, for a run a launcher published elsewhere "
                                     "(its launcher.storage, a pyarrow.fs URI or a folder)")
    a = p.parse_args(argv)
    if a.max_episodes < 1 or a.max_text < 1:
        p.error("--max-episodes and --max-text must be at least 1")
    try:
        out = write_view(a.runs, a.out, max_episodes=a.max_episodes, max_text=a.max_text, storage=a.storage)
    except (FileNotFoundError, ValueError, OSError) as e:
        from mcp_gym._terminal import printable

        print(printable(f"mcp-gym view: {e}"), file=sys.stderr)
        return 1
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): open it in a browser")
    return 0



# -- the page's style and script (files of this package, inlined; allowed by hash in the page's CSP) ----------------
def _asset(name: str) -> str:
    return importlib.resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


_CSS = _asset("page.css")
_JS = _asset("page.js")
