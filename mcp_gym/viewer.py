"""``mcp-gym view``: a recorded run (or several) as one self-contained, static HTML report.

    mcp-gym view runs/eval-oracle                            # writes runs/eval-oracle/report.html
    mcp-gym view runs/eval-oracle runs/eval-random --out cmp.html

The page needs no server and no network: CSS and JavaScript are inline, images (tool results, an evaluation's plots)
are ``data:`` URIs, and a Content-Security-Policy forbids every other source. It shows

* each run: where it is, what made it (collect, eval, Ray launcher, a replayed cassette), its episodes and success;
  for an evaluation the summary table of ``report/results.json`` (runs side by side) and the plots of ``report/``;
* with two or more runs, a per-task comparison; picking a task lays its episodes out side by side, one column per run;
* a table of episodes filterable by run, task, policy, success and termination (the filters live in the URL hash, so
  ``report.html#success=false&task=t3`` opens filtered), paginated;
* per episode (rendered when opened, from JSON embedded in the page): the task, every step's tool call and arguments,
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
import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_gym.jobs.report import REPORT_DIR
from mcp_gym.recording.reader import read_tables
from mcp_gym.recording.schema import EPISODES_DIR, MANIFEST, STEPS_DIR, dumps

__all__ = ["RunView", "load_run", "render_html", "write_view", "main", "VIEW_FILE"]

VIEW_FILE = "report.html"
"""Name of the page ``mcp-gym view RUN`` writes into a single run's directory."""

_INDEX_TEXT = 300  # characters of prompts and answers in the episode table (searchable); the full text on opening
_SECRET_WORDS = ("key", "token", "secret", "password", "auth", "header", "cookie", "credential")

_STEP_COLUMNS = ["episode_id", "step_index", "tool", "server", "server_tool", "arguments", "content",
                 "structured_content", "is_error", "error", "error_code", "reward", "terminated", "truncated",
                 "duration", "observation", "resources", "raw_text", "parse_status", "result_truncated",
                 "result_bytes", "info"]


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
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # noqa: BLE001 - a damaged config only costs the page its "how it was made" line
        return None
    return _redact(cfg) if isinstance(cfg, dict) else None


def _redact(value: Any) -> Any:
    """``value`` with the values of keys that may hold secrets (api_key, token, headers, ...) replaced."""
    if isinstance(value, dict):
        return {k: "<redacted>" if any(w in str(k).lower() for w in _SECRET_WORDS) and v not in (None, "", {}, [])
                else _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def _locate(path: str) -> tuple[str, Path | None, dict[str, Any] | None]:
    """``(where the shards are, local run folder or None, hydra config)``; raises ``FileNotFoundError``."""
    if "://" in path:
        return path, None, None
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no run at {path!r}: no such directory")
    if not root.is_dir():
        raise FileNotFoundError(f"no run at {path!r}: not a directory (give a run directory, e.g. runs/collect/x)")
    config = _hydra_config(root)
    storage = ((config or {}).get("launcher") or {}).get("storage")
    if storage and not (root / MANIFEST).exists() and not (root / EPISODES_DIR).is_dir():
        return str(storage), root, config  # a launcher published the shards elsewhere (launcher.storage)
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
    }


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
    if not results.is_file():
        return None, [], []
    data = json.loads(results.read_text(encoding="utf-8"))
    plots = [(p.name, "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode())
             for p in sorted(folder.glob("*.png"))]
    return data.get("summary"), list(data.get("per_task") or []), plots


def load_run(
    path: str | os.PathLike[str], *, name: str | None = None, max_episodes: int = 500, max_text: int = 20_000,
    max_image_bytes: int = 2_000_000,
) -> RunView:
    """Read a run directory (or a ``pyarrow.fs`` URI of one) into what :func:`render_html` draws.

    Raises ``FileNotFoundError`` (one line, naming the path) when there is no run there. The run is only read:
    episodes still in a write-ahead log are shown, nothing is recovered or rewritten.
    """
    location, root, config = _locate(os.fspath(path))
    if root is None or location != str(root):
        from mcp_gym.jobs.ray_launcher import SharedRun

        shared = SharedRun(location)
        manifest = shared.manifest()
        if not manifest and not shared.shards(EPISODES_DIR):
            raise FileNotFoundError(f"no run at {location!r}: no {MANIFEST} and no episodes shards there")
        steps, episodes = shared.read_tables()
    else:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8")) if (root / MANIFEST).is_file() else {}
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
        for s in sorted(by_episode.get(e["episode_id"], []), key=lambda r: r["step_index"]):
            step_rows.append(_step(s, previous, max_text, max_image_bytes))
            res = _json(s["resources"])
            if isinstance(res, dict):
                previous = res
        started, ended = e["started_at"], e["ended_at"]
        task = _json(e["task"])
        if isinstance(task, dict):
            task = {k: _json(v) if k in ("solution", "data") and isinstance(v, str) else v for k, v in task.items()}
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
        })
        step_lists[e["episode_id"]] = step_rows
        details[e["episode_id"]] = {  # read when the episode is opened
            "prompt": _cap(e["task_prompt"], max_text), "task_record": _pretty(task, max_text),
            "answer": _cap(e["final_answer"], max_text), "servers": servers if isinstance(servers, dict) else {},
            "resources": {k: _pretty(v, max_text) for k, v in start_res.items()} if isinstance(start_res, dict) else {},
            "metadata": _pretty(_json(e["metadata"]), max_text),
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
    max_text: int = 20_000, max_image_bytes: int = 2_000_000, title: str | None = None,
) -> Path:
    """Write the HTML report of one or more runs and return its path.

    ``out`` defaults to ``<run>/report.html`` for one run and ``./report.html`` for several. ``max_episodes`` caps the
    episodes shown per run, ``max_text`` the characters of each text, ``max_image_bytes`` each embedded image.
    """
    if not runs:
        raise ValueError("give at least one run directory")
    names = _names([os.fspath(r) for r in runs])
    views = [load_run(r, name=n, max_episodes=max_episodes, max_text=max_text, max_image_bytes=max_image_bytes)
             for r, n in zip(runs, names, strict=True)]
    if out is None:
        out = Path(views[0].path) / VIEW_FILE if len(views) == 1 and "://" not in views[0].path else Path(VIEW_FILE)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(render_html(views, title=title), encoding="utf-8")
    os.replace(tmp, out)
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
    a = p.parse_args(argv)
    if a.max_episodes < 1 or a.max_text < 1:
        p.error("--max-episodes and --max-text must be at least 1")
    try:
        out = write_view(a.runs, a.out, max_episodes=a.max_episodes, max_text=a.max_text)
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"mcp-gym view: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): open it in a browser")
    return 0


# -- the page's style and script (inline; allowed by hash in the page's Content-Security-Policy) ---------------------
_CSS = r"""
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg:#f6f8fa;--card:#fff;--ok:#1a7f37;--okbg:#dafbe1;--bad:#cf222e;
--badbg:#ffebe9;--warn:#9a6700;--warnbg:#fff8c5;--acc:#0969da;--accbg:#ddf4ff;--mono:ui-monospace,SFMono-Regular,
Menlo,Consolas,"Liberation Mono",monospace}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;color:var(--fg);
background:var(--bg)}
header{background:#24292f;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:18px;font-weight:600}
header .sub{color:#afb8c1;font-size:12px;margin-top:2px}
main{padding:16px 24px;max-width:1500px;margin:0 auto}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px;margin-bottom:16px}
h2{font-size:15px;margin:0 0 10px}
h3{font-size:13px;margin:12px 0 6px}
.runs{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:12px}
.run{border:1px solid var(--line);border-radius:6px;padding:10px 12px}
.run .name{font-weight:600;font-size:14px}
.run .path{font:12px var(--mono);color:var(--muted);word-break:break-all}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;font-size:12.5px;margin-top:6px}
.kv dt{color:var(--muted)}.kv dd{margin:0;word-break:break-word}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:11.5px;font-weight:600;line-height:18px;
margin-right:4px;white-space:nowrap;background:#eaeef2;color:var(--muted)}
.b-ok{background:var(--okbg);color:var(--ok)}.b-bad{background:var(--badbg);color:var(--bad)}
.b-warn{background:var(--warnbg);color:var(--warn)}.b-acc{background:var(--accbg);color:var(--acc)}
.note{background:var(--warnbg);border:1px solid #d4a72c66;border-radius:6px;padding:6px 10px;margin:8px 0;
font-size:12.5px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--bg);font-weight:600;position:sticky;top:0}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.metrics{width:auto;min-width:360px}
tr.ep{cursor:pointer}tr.ep:hover{background:#f3f6fa}tr.ep.open{background:var(--accbg)}
tr.detail>td{background:#fbfcfd;padding:10px 14px}
tr.cmp{cursor:pointer}tr.cmp:hover{background:#f3f6fa}tr.cmp.diff td:first-child{box-shadow:inset 3px 0 var(--warn)}
tr.cmp.sel{background:var(--accbg)}
.mono,code{font-family:var(--mono);font-size:12px}
.filters{display:flex;flex-wrap:wrap;gap:8px 14px;align-items:end;margin-bottom:10px}
.filters label{display:flex;flex-direction:column;font-size:11.5px;color:var(--muted);gap:2px}
select,input{font:13px system-ui,sans-serif;padding:3px 6px;border:1px solid var(--line);border-radius:6px;
background:#fff;min-width:120px;max-width:260px}
button{font:13px system-ui,sans-serif;padding:3px 10px;border:1px solid var(--line);border-radius:6px;background:#fff;
cursor:pointer}button:hover{background:var(--bg)}button:disabled{opacity:.4;cursor:default}
.count{color:var(--muted);font-size:12.5px;margin-left:auto}
.pager{display:flex;gap:8px;align-items:center;margin-top:10px;font-size:12.5px}
.sumrow{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.plotruns{flex:1;min-width:320px}.plotruns .lbl{margin:0 0 4px}
.plots{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:10px}
.plots figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:6px;background:#fff}
.plots img{width:260px;display:block;cursor:zoom-in}.plots img.big{width:auto;max-width:100%;cursor:zoom-out}
.lbl{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin-top:6px}
.scroll{max-height:420px;overflow:auto;border-bottom:1px solid var(--line)}
.plots figcaption{font-size:11.5px;color:var(--muted);text-align:center}
pre{font:12px/1.4 var(--mono);background:var(--bg);border:1px solid var(--line);border-radius:6px;padding:6px 8px;
margin:4px 0;white-space:pre-wrap;word-break:break-word;max-height:480px;overflow:auto}
details>summary{cursor:pointer;color:var(--acc);font-size:12.5px}
details>summary .muted{color:var(--muted)}
.muted{color:var(--muted)}
.steps{list-style:none;margin:8px 0 0;padding:0}
.step{border:1px solid var(--line);border-left:4px solid var(--acc);border-radius:6px;padding:6px 10px;margin:8px 0;
background:#fff}
.step.err{border-left-color:var(--bad)}.step.end{border-left-color:var(--ok)}
.step .head{display:flex;flex-wrap:wrap;gap:6px;align-items:center}
.step .tool{font:600 13px var(--mono)}
.step img{max-width:100%;max-height:360px;min-height:48px;image-rendering:pixelated;border:1px solid var(--line);
border-radius:4px;margin:4px 0;display:block}
.errbox{background:var(--badbg);border:1px solid #cf222e55;border-radius:6px;padding:5px 8px;margin:4px 0;
font-size:12.5px}
.change{display:grid;grid-template-columns:1fr 1fr;gap:8px}
.stepbody{display:grid;grid-template-columns:minmax(0,2fr) minmax(0,3fr);gap:12px}
.chg{font-size:12.5px;margin:2px 0}.chg code{padding:1px 5px;border-radius:4px}
.chg .old{background:var(--badbg)}.chg .new{background:var(--okbg)}.small{font-size:12px;margin-top:4px}
.side{display:grid;gap:12px}.col .stepbody{grid-template-columns:minmax(0,1fr);gap:0}
.col{min-width:0}.col>h3{margin-top:0}
.card{border:1px solid var(--line);border-radius:6px;padding:6px 10px;margin-bottom:8px;background:#fff}
.bar{display:inline-block;height:8px;border-radius:4px;background:#eaeef2;width:60px;vertical-align:middle;
margin-right:6px;overflow:hidden}.bar>span{display:block;height:100%;background:var(--ok)}
.empty{color:var(--muted);font-style:italic;padding:6px 0}
"""

_JS = r"""
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const EP = D.episodes, RUNS = D.runs, PAGE = 50, MULTI = RUNS.length > 1;
const FILTERS = ["run", "task", "policy", "success", "termination"];
const state = {run: "", task: "", policy: "", success: "", termination: "", q: "", page: 1, episode: ""};
const opened = new Set();

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of kids.flat(9)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));   // strings become text nodes: recorded text is never markup
  }
  return el;
}
const badge = (text, cls) => h("span", {class: "badge " + (cls || "")}, text);
const fmt = (v, d = 3) => v === null || v === undefined ? "–" :
  (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d).replace(/\.?0+$/, "")) : String(v));
const pct = v => v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%";
const successBadge = s => s === true ? badge("success", "b-ok") : s === false ? badge("fail", "b-bad") : badge("n/a");
const successKey = s => s === true ? "true" : s === false ? "false" : "none";
const runName = r => RUNS[r].name;

function fold(text, label, open) {
  text = text === null || text === undefined ? "" : String(text);
  const lines = text.split("\n").length;
  if (text.length <= 700 && lines <= 14 && !label) return h("pre", {}, text);
  const first = text.split("\n", 1)[0].slice(0, 90);
  return h("details", {open: !!open}, h("summary", {},
    label ? label + " " : "", h("span", {class: "muted"}, label ? "(" + lines + " lines, " + text.length +
      " chars)" : first + (first.length < text.length ? " … " : " ") + "(" + lines + " lines, " + text.length +
      " chars)")), h("pre", {}, text));
}

// -- URL hash <-> state ------------------------------------------------------------------------------------------
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  for (const k of FILTERS) state[k] = p.get(k) || "";
  state.q = p.get("q") || "";
  state.page = Math.max(1, parseInt(p.get("page") || "1", 10) || 1);
  state.episode = p.get("episode") || "";
}
function writeHash() {
  const p = new URLSearchParams();
  for (const k of [...FILTERS, "q"]) if (state[k]) p.set(k, state[k]);
  if (state.page > 1) p.set("page", state.page);
  if (state.episode) p.set("episode", state.episode);
  history.replaceState(null, "", "#" + p.toString());
}
function matches(e, skip) {
  if (skip !== "run" && state.run !== "" && runName(e.run) !== state.run) return false;
  if (skip !== "task" && state.task && e.task !== state.task) return false;
  if (skip !== "policy" && state.policy && (e.policy || "") !== state.policy) return false;
  if (skip !== "success" && state.success && successKey(e.success) !== state.success) return false;
  if (skip !== "termination" && state.termination && (e.term || "") !== state.termination) return false;
  if (state.q) {
    const q = state.q.toLowerCase();
    if (![e.id, e.key, e.task, e.answer, e.prompt].some(x => x && String(x).toLowerCase().includes(q))) return false;
  }
  return true;
}
const filtered = () => EP.filter(e => matches(e));

// -- header, runs, evaluation summaries, plots ------------------------------------------------------------------
function stats(eps) {
  const n = eps.length, judged = eps.filter(e => e.success !== null && e.success !== undefined);
  const ok = judged.filter(e => e.success).length;
  const mean = f => n ? eps.reduce((a, e) => a + (e[f] || 0), 0) / n : null;
  return {n, ok, judged: judged.length, rate: judged.length ? ok / judged.length : null, ret: mean("ret"),
          len: mean("len")};
}
function header() {
  return h("header", {}, h("h1", {}, D.title),
    h("div", {class: "sub"}, `${RUNS.length} run${RUNS.length > 1 ? "s" : ""} · ${EP.length} episodes shown · ` +
      `generated ${D.generated} by mcp-gym ${D.version}`));
}
function runCard(run, r) {
  const eps = EP.filter(e => e.run === r), s = stats(eps), m = (run.manifest || {}).metadata || {};
  const cfg = run.config || {}, env = m.env || cfg.env || {}, pol = m.policy || cfg.policy || {};
  const terms = {};
  for (const e of eps) terms[e.term || "?"] = (terms[e.term || "?"] || 0) + 1;
  const kv = [["env", env.name || (eps[0] && eps[0].env) || "–"],
              ["policy", [pol.kind, pol.model].filter(Boolean).join(" · ") || [...new Set(eps.map(e => e.policy))]
                .filter(Boolean).join(", ") || "–"],
              ["episodes", run.shown === run.total ? String(run.total) : `${run.shown} shown of ${run.total}`],
              ["planned", run.manifest && run.manifest.planned !== null && run.manifest.planned !== undefined ?
                String(run.manifest.planned) : "–"],
              ["success", s.rate === null ? "–" : `${pct(s.rate)} (${s.ok}/${s.judged})`],
              ["mean return", fmt(s.ret)], ["mean steps", fmt(s.len, 2)],
              ["endings", Object.entries(terms).map(([k, v]) => `${k} ${v}`).join(", ") || "–"]];
  if (m.split) kv.push(["split", m.split]);
  if (run.storage) kv.push(["shards in", run.storage]);
  if ((cfg.launcher || {}).kind) kv.push(["launcher", cfg.launcher.kind]);
  return h("div", {class: "run", "data-run": run.name},
    h("div", {}, h("span", {class: "name"}, run.name), " ", run.kind.map(k => badge(k, k === "eval" ? "b-acc" : ""))),
    h("div", {class: "path"}, run.path),
    h("dl", {class: "kv"}, kv.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    run.shown < run.total ? h("div", {class: "note"}, `Showing ${run.shown} of ${run.total} episodes ` +
      "(round-robin over tasks; raise with --max-episodes). Summaries below count the shown episodes.") : null);
}
function summaryTable() {
  const ev = RUNS.filter(r => r.summary);
  if (!ev.length) return null;
  const ks = [...new Set(ev.flatMap(r => Object.keys(r.summary).filter(k => k.startsWith("pass@"))))]
    .sort((a, b) => +a.slice(5) - +b.slice(5));
  const rows = [["episodes", "episodes"], ["tasks", "tasks"], ["success rate", "success_rate", pct],
    ...ks.map(k => [k, k, pct]), ["reward (mean)", "reward_mean"], ["reward (std)", "reward_std"],
    ["steps (mean)", "steps_mean"], ["tool-error rate", "tool_error_rate", pct],
    ["parse-error rate", "parse_error_rate", pct], ["missing episodes", "missing_episodes"]];
  const body = rows.filter(([, key]) => ev.some(r => r.summary[key] !== undefined)).map(([label, key, f]) =>
    h("tr", {}, h("td", {}, label), ev.map(r => h("td", {class: "num"}, (f || fmt)(r.summary[key])))));
  for (const [label, key] of [["tool call ms", "tool_call_ms"], ["episode s", "episode_s"]])
    for (const p of ["p50", "p90", "p99"])
      body.push(h("tr", {}, h("td", {}, `${label} ${p}`),
        ev.map(r => h("td", {class: "num"}, fmt((r.summary[key] || {})[p])))));
  body.push(h("tr", {}, h("td", {}, "endings"), ev.map(r => h("td", {class: "num"},
    Object.entries(r.summary.terminations || {}).map(([k, v]) => `${k} ${v}`).join(", ")))));
  return h("section", {id: "summary"}, h("h2", {}, "Evaluation summary"), h("div", {class: "sumrow"},
    h("table", {class: "metrics"}, h("thead", {}, h("tr", {}, h("th", {}, "metric"),
      ev.map(r => h("th", {class: "num"}, r.name)))), h("tbody", {}, body)),
    ev.some(r => r.plots.length) ? h("div", {class: "plotruns"}, ev.filter(r => r.plots.length).map(r =>
      h("div", {}, h("div", {class: "lbl"}, `plots of ${r.name}`), h("div", {class: "plots"},
        r.plots.filter(p => p.src.startsWith("data:image/png;base64,")).map(p =>
          h("figure", {}, h("img", {src: p.src, alt: `${r.name}: ${p.name}`, title: "click to enlarge",
            onclick: ev => ev.target.classList.toggle("big")}), h("figcaption", {}, p.name))))))) : null));
}

// -- per-task comparison and side-by-side -------------------------------------------------------------------------
const plural = (n, word) => `${fmt(n, 1)} ${word}${n === 1 ? "" : "s"}`;
let allTasks = false;
function compare() {
  if (!MULTI) return null;
  const runsOf = new Map(), byTask = new Map();  // task -> runs having it; task -> episodes per run
  for (const e of EP) {
    if (!runsOf.has(e.task)) { runsOf.set(e.task, new Set()); byTask.set(e.task, RUNS.map(() => [])); }
    runsOf.get(e.task).add(e.run); byTask.get(e.task)[e.run].push(e);
  }
  const shared = [...runsOf.keys()].filter(t => runsOf.get(t).size > 1);
  const tasks = (allTasks || !shared.length ? [...runsOf.keys()] : shared).sort();
  const cell = eps => {
    if (!eps.length) return h("td", {class: "muted"}, "–");
    const s = stats(eps);
    return h("td", {}, h("span", {class: "bar"}, h("span", {"data-w": s.rate || 0})),
      s.rate === null ? `${s.n} unjudged` : `${s.ok}/${s.judged}`,
      h("span", {class: "muted"}, ` · R ${fmt(s.ret, 2)} · ${plural(s.len, "step")}`));
  };
  const rows = tasks.map(t => {
    const per = byTask.get(t);
    const rates = per.filter(p => p.length).map(p => stats(p).rate);
    const diff = new Set(rates.map(String)).size > 1;
    return h("tr", {class: "cmp" + (diff ? " diff" : "") + (state.task === t ? " sel" : ""), "data-task": t,
      onclick: () => { state.task = state.task === t ? "" : t; state.page = 1; update(); }},
      h("td", {class: "mono"}, t), per.map(cell));
  });
  return h("section", {id: "compare"}, h("h2", {}, "By task"),
    h("p", {class: "muted"}, "Successes, mean return and steps per task and run; a mark at the left flags tasks " +
      "where the runs differ. Click a task to see its episodes side by side. ",
      shared.length && shared.length < runsOf.size ? h("button", {onclick: () => { allTasks = !allTasks; update(); }},
        allTasks ? `only the ${shared.length} tasks in several runs` : `all ${runsOf.size} tasks`) :
        shared.length ? null : "No task is in more than one run: all tasks are listed."),
    h("div", {class: "scroll"}, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "task"),
      RUNS.map(r => h("th", {}, r.name)))), h("tbody", {}, rows))));
}
function sideBySide() {
  if (!MULTI || !state.task) return null;
  const having = RUNS.map((_, r) => r).filter(r => EP.some(e => e.run === r && e.task === state.task));
  const absent = RUNS.filter((_, r) => !having.includes(r)).map(run => run.name);
  const cols = having.map(r => {
    const run = RUNS[r], eps = EP.filter(e => e.run === r && matches(e, "run"));
    return h("div", {class: "col"}, h("h3", {}, run.name),
      eps.length ? eps.map(e => {
        const d = h("details", {class: "card", "data-id": e.id}, h("summary", {}, successBadge(e.success),
          h("span", {class: "mono"}, e.key || e.id), h("span", {class: "muted"},
            ` · ${e.policy || "?"} · R ${fmt(e.ret)} · ${plural(e.len, "step")} · ${e.term || "?"}`)));
        d.addEventListener("toggle", () => { if (d.open && d.children.length === 1) d.append(steps(e)); });
        if (eps.length <= 2) { d.open = true; d.append(steps(e)); }  // few episodes: open them right away
        return d;
      }) : h("div", {class: "empty"}, "no episode of this task matches the filters"));
  });
  const grid = h("div", {class: "side"}, cols);
  grid.style.gridTemplateColumns = `repeat(${Math.max(1, having.length)}, minmax(0, 1fr))`;
  return h("section", {id: "side"}, h("h2", {}, "Side by side: ", h("span", {class: "mono"}, state.task), " ",
    h("button", {onclick: () => { state.task = ""; update(); }}, "clear task")),
    absent.length ? h("p", {class: "muted"}, `Not in ${absent.join(", ")}.`) : null, grid);
}

// -- one episode ---------------------------------------------------------------------------------------------------
const lazy = new Map();
function detailOf(e) {  // the episode's own JSON, parsed on first use
  if (!lazy.has(e.n)) {
    const tag = document.getElementById("ep-" + e.n);
    lazy.set(e.n, tag ? JSON.parse(tag.textContent) : {steps: []});
  }
  return lazy.get(e.n);
}
function steps(e) {
  const list = detailOf(e).steps;
  if (!list.length) return h("div", {class: "empty"}, "no steps recorded");
  return h("ol", {class: "steps"}, list.map(s => step(s)));
}
function step(s) {
  const head = h("div", {class: "head"}, h("span", {class: "muted"}, "#" + s.i), h("span", {class: "tool"}, s.tool),
    s.server ? h("span", {class: "muted"}, `(${s.server}${s.server_tool && s.server_tool !== s.tool ? ": " +
      s.server_tool : ""})`) : null,
    s.reward === null || s.reward === undefined ? null : badge("reward " + fmt(s.reward),
      s.reward > 0 ? "b-ok" : s.reward < 0 ? "b-bad" : ""),
    s.duration === null || s.duration === undefined ? null : badge(fmt(1000 * s.duration, 1) + " ms"),
    s.is_error ? badge("error" + (s.error && s.error.kind ? ": " + s.error.kind : ""), "b-bad") : null,
    s.parse ? badge("parse: " + s.parse, s.parse === "ok" ? "b-ok" : "b-bad") : null,
    s.terminated ? badge("terminated", "b-acc") : null, s.truncated ? badge("truncated", "b-warn") : null,
    s.tools_changed ? badge("tools changed", "b-warn") : null,
    s.result_truncated ? badge(`result cut (${s.result_bytes} bytes)`, "b-warn") : null);
  const call = [], result = [], after = [];
  if (s.raw !== null && s.raw !== undefined) call.push(h("div", {class: "lbl"}, "model output"), fold(s.raw));
  call.push(h("div", {class: "lbl"}, "arguments"), fold(s.args === null ? "" : s.args));
  if (s.error) result.push(h("div", {class: "errbox"}, h("b", {}, s.error.kind || "error"),
    s.error.argument ? ` (argument ${s.error.argument})` : "", s.error.code !== undefined && s.error.code !== null ?
      ` [code ${s.error.code}]` : "", ": ", s.error.message || ""));
  if (s.blocks.length) {
    result.push(h("div", {class: "lbl"}, "result"));
    for (const b of s.blocks) {
      if (b.t === "text") result.push(b.uri ? h("div", {class: "muted mono"}, b.uri) : null, fold(b.text));
      else if (b.t === "image" && String(b.src).startsWith("data:image/"))
        result.push(h("img", {src: b.src, alt: "image result (" + b.mime + ")"}));
      else if (b.t === "note") result.push(h("div", {class: "note"}, b.text));
      else result.push(fold(b.text, (b.kind || "content") + " block"));
    }
  } else if (!s.error) result.push(h("div", {class: "lbl"}, "result"), h("div", {class: "empty"}, "no content"));
  if (s.structured) result.push(fold(s.structured, "structured content"));
  if (s.obs) result.push(h("div", {class: "lbl"}, "observation (what the agent saw)"), fold(s.obs));
  const short = t => t === null || (t.length <= 100 && !t.includes("\n"));
  if (s.changes && s.changes.length) {
    after.push(h("div", {class: "lbl"}, "resource changes"));
    for (const c of s.changes) after.push(short(c.before) && short(c.after) ?
      h("div", {class: "chg"}, h("span", {class: "mono"}, c.uri), " ",
        h("code", {class: "old"}, c.before === null ? "(absent)" : c.before), " → ",
        h("code", {class: "new"}, c.after === null ? "(removed)" : c.after)) :
      [h("div", {class: "mono"}, c.uri), h("div", {class: "change"},
        h("div", {}, h("div", {class: "muted"}, "before"),
          c.before === null ? h("div", {class: "empty"}, "absent") : fold(c.before)),
        h("div", {}, h("div", {class: "muted"}, "after"),
          c.after === null ? h("div", {class: "empty"}, "removed") : fold(c.after)))]);
  } else if (s.changes) after.push(h("div", {class: "muted small"}, `resources unchanged (${s.n_resources} observed)`));
  if (s.logs && s.logs.length) after.push(fold(s.logs.join("\n"), `server log (${s.logs.length})`));
  const parts = [head, h("div", {class: "stepbody"}, h("div", {}, call), h("div", {}, result)), after];
  return h("li", {class: "step" + (s.is_error ? " err" : s.terminated ? " end" : ""), "data-step": s.i}, parts);
}
function episodeDetail(e) {
  const d = detailOf(e);
  const servers = Object.entries(d.servers || {}).map(([a, s]) =>
    `${a}: ${s.name || "?"} ${s.version || ""} (${s.transport || "?"}${s.status && s.status !== "ready" ?
      ", " + s.status : ""})`).join("; ");
  const kv = [["episode", e.id], ["key", e.key || "–"], ["run", runName(e.run)], ["env", e.env || "–"],
    ["task", e.task || "–"], ["seed", fmt(e.seed)], ["policy", e.policy || "–"], ["servers", servers || "–"],
    ["started", e.started || "–"], ["duration", e.seconds === null ? "–" : fmt(e.seconds, 2) + " s"],
    ["tool catalogue", (e.catalogue || "–") + (e.catalogue_changes ? ` (${e.catalogue_changes} changes)` : "")],
    ["final answer", d.answer === null || d.answer === undefined ? "–" : d.answer]];
  const res = Object.entries(d.resources || {});
  return h("div", {class: "episode", "data-id": e.id},
    h("dl", {class: "kv"}, kv.map(([k, v]) => [h("dt", {}, k),
      h("dd", {class: k === "final answer" ? "mono" : ""}, v)])),
    h("div", {class: "lbl muted"}, "task prompt"), fold(d.prompt || ""),
    d.task_record ? fold(d.task_record, "task record") : null,
    res.length ? fold(res.map(([u, t]) => `${u}\n${t}`).join("\n\n"), `resources at reset (${res.length})`) : null,
    d.metadata ? fold(d.metadata, "metadata") : null,
    h("h3", {}, `Steps (${e.len})`), steps(e));
}

// -- the episode table ---------------------------------------------------------------------------------------------
function options(key, values, label) {
  const sel = h("select", {"data-filter": key, onchange: ev => { state[key] = ev.target.value; state.page = 1;
    update(); }}, h("option", {value: ""}, "all"), values.map(([v, t]) => h("option", {value: v}, t)));
  sel.value = state[key];
  return h("label", {}, label, sel);
}
function distinct(key, f) {
  const out = new Map();
  for (const e of EP.filter(x => matches(x, key))) { const v = f(e); out.set(v, (out.get(v) || 0) + 1); }
  return [...out.entries()].sort((a, b) => String(a[0]).localeCompare(String(b[0])))
    .map(([v, n]) => [v, `${v} (${n})`]);
}
function filterBar(rows) {
  const s = stats(rows);
  const search = h("input", {type: "search", placeholder: "id, key, task, answer…", value: state.q});
  search.addEventListener("change", () => { state.q = search.value.trim(); state.page = 1; update(); });
  return h("div", {class: "filters"},
    MULTI ? options("run", distinct("run", e => runName(e.run)), "run") : null,
    options("task", distinct("task", e => e.task || ""), "task"),
    options("policy", distinct("policy", e => e.policy || ""), "policy"),
    options("success", distinct("success", e => successKey(e.success)), "success"),
    options("termination", distinct("termination", e => e.term || ""), "termination"),
    h("label", {}, "search", search),
    h("button", {onclick: () => { for (const k of [...FILTERS, "q"]) state[k] = ""; state.page = 1; update(); }},
      "reset filters"),
    h("span", {class: "count", id: "count"}, `${rows.length} of ${EP.length} episodes` +
      (s.rate === null ? "" : ` · success ${pct(s.rate)}`) + ` · mean return ${fmt(s.ret)}`));
}
function toggle(e, tr) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains("detail")) {
    next.remove(); tr.classList.remove("open"); opened.delete(e.id);
    if (state.episode === e.id) state.episode = "";
  } else {
    tr.after(h("tr", {class: "detail"}, h("td", {colspan: 10}, episodeDetail(e))));
    tr.classList.add("open"); opened.add(e.id); state.episode = e.id;
  }
  writeHash();
}
function table(rows) {
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  state.page = Math.min(state.page, pages);
  const slice = rows.slice((state.page - 1) * PAGE, state.page * PAGE);
  const body = h("tbody", {});
  for (const e of slice) {
    const tr = h("tr", {class: "ep", "data-id": e.id, "data-success": successKey(e.success)},
      MULTI ? h("td", {}, runName(e.run)) : null, h("td", {class: "mono"}, e.key || e.id.slice(0, 12)),
      h("td", {class: "mono"}, e.task || "–"), h("td", {}, e.policy || "–"), h("td", {}, successBadge(e.success)),
      h("td", {class: "num"}, fmt(e.ret)), h("td", {class: "num"}, fmt(e.len)), h("td", {}, e.term || "–"),
      h("td", {class: "num"}, e.errors ? badge(String(e.errors), "b-bad") : "0",
        e.parse_failures ? badge(e.parse_failures + " parse", "b-warn") : null));
    tr.addEventListener("click", () => toggle(e, tr));
    body.append(tr);
    if (opened.has(e.id)) { body.append(h("tr", {class: "detail"}, h("td", {colspan: 10}, episodeDetail(e))));
      tr.classList.add("open"); }
  }
  const go = p => () => { state.page = p; update(); };
  return [h("table", {id: "episodes"}, h("thead", {}, h("tr", {}, MULTI ? h("th", {}, "run") : null,
      h("th", {}, "episode"), h("th", {}, "task"), h("th", {}, "policy"), h("th", {}, "success"),
      h("th", {class: "num"}, "return"), h("th", {class: "num"}, "steps"), h("th", {}, "termination"),
      h("th", {class: "num"}, "errors"))), body),
    rows.length ? null : h("div", {class: "empty"}, EP.length ? "no episode matches these filters" :
      "no episode recorded yet"),
    pages > 1 ? h("div", {class: "pager"},
      h("button", {onclick: go(state.page - 1), disabled: state.page <= 1}, "‹ prev"),
      `page ${state.page} of ${pages}`, h("button", {onclick: go(state.page + 1), disabled: state.page >= pages},
        "next ›")) : null];
}

// -- the page ------------------------------------------------------------------------------------------------------
let root;
function update() {
  writeHash();
  const rows = filtered();
  const main = h("main", {},
    h("section", {id: "runs"}, h("h2", {}, MULTI ? "Runs" : "Run"),
      h("div", {class: "runs"}, RUNS.map(runCard))),
    summaryTable(), compare(), sideBySide(),
    h("section", {id: "list"}, h("h2", {}, "Episodes"), filterBar(rows), table(rows)));
  for (const b of main.querySelectorAll(".bar>span")) b.style.width = (100 * +b.dataset.w) + "%";
  root.replaceChildren(header(), main);
}
function start() {
  root = document.getElementById("app");
  readHash();
  if (state.episode) {
    const rows = filtered(), i = rows.findIndex(e => e.id === state.episode);
    if (i >= 0) { state.page = Math.floor(i / PAGE) + 1; opened.add(state.episode); }
  }
  update();
  if (state.episode) {
    const tr = document.querySelector(`tr.ep[data-id="${CSS.escape(state.episode)}"]`);
    if (tr) tr.scrollIntoView({block: "nearest"});
  }
}
window.addEventListener("hashchange", () => { opened.clear(); start(); });
start();
"""
