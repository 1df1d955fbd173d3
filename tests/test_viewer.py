"""``mcp-gym view``: the static HTML report of recorded runs, built from real runs and checked in a real Chromium.

Runs recorded here (all on real MCP servers): a ``collect`` job per policy (oracle, random) and an ``eval`` job with
its report plots on the bundled Counter; a scripted Counter run that also records cassettes, and a run *replayed*
from those cassettes (server absent); a hostile run whose server answers with markup (``<script>``, ``<img onerror>``)
and an image, and whose "model output" tries to break out of the page's JSON. A Ray-launched run is in
``test_view_of_ray_run`` (markers ``ray`` and ``slow``: a local Ray takes ~30 s to start here).

The browser tests (marker ``browser``) load the pages in headless Chromium (``/usr/bin/chromium``, Debian's package;
``.ci/run`` installs it) and read the DOM after the page's script ran (``--dump-dom``): the recorded episodes are
listed, filters given in the URL hash show exactly the matching episodes, pages and side-by-side views work, recorded
markup is shown as text and runs nothing. Screenshots are kept as artifacts in ``$MCP_GYM_ARTIFACTS`` (else in the
test's tmp dir; the path is printed).
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import gymnasium as gym
import mcp.types as mt
import pytest
from conftest import skip_unless_ci_full
from mcp.server.mcpserver import MCPServer

import mcp_gym  # noqa: F401 - registers the bundled envs
from mcp_gym import InProcess, MCPEnv
from mcp_gym.cli import main
from mcp_gym.envs import load_env_tasks
from mcp_gym.recording import RecordTrajectories, read_tables
from mcp_gym.viewer import load_run, render_html, write_view

pytestmark = pytest.mark.xdist_group("viewer")  # one worker: the `runs` fixture: several whole job runs, made once

FAST = ["env=counter", "env.transport=inprocess", "launcher.progress=false"]
PWN = "document.body.setAttribute('data-pwned', '{}')"
HOSTILE_RESULT = f"<script>{PWN.format('script')}</script><img src=x onerror=\"{PWN.format('img')}\"> & <b>bold</b>"
HOSTILE_RAW = f"</script><script>{PWN.format('raw')}</script><!--"
LONG = "".join(f"line {i}\n" for i in range(40))


# -- recorded runs ------------------------------------------------------------------------------------------------
def episodes_of(run: Path) -> list[dict[str, Any]]:
    return read_tables(run)[1].to_pylist()


def counter_plan() -> list[tuple[str, int, list[dict[str, Any]]]]:
    """Reference solutions of 4 Counter tasks; the 2nd starts with a wrong move, the 4th submits a wrong answer."""
    plan = []
    for i, task in enumerate(load_env_tasks("Counter")[:4]):
        actions = [dict(a) for a in task.solution]
        if i == 1:
            actions.insert(0, {"tool": "add", "arguments": {"amount": 1}})
        if i == 3:
            actions = [{"tool": "get_count", "arguments": {}}, {"tool": "submit", "arguments": {"answer": "-1"}}]
        plan.append((task.id, 40 + i, actions))
    return plan


def play(env: Any, plan: list[tuple[str, int, list[dict[str, Any]]]], raw: bool = False) -> None:
    for task_id, seed, actions in plan:
        env.reset(seed=seed, options={"task_id": task_id})
        for action in actions:
            if raw:  # as an LLM policy records it: the model's text and the parse outcome
                action = {**action, "raw_text": json.dumps(action), "parse_status": "ok"}
            *_, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    env.close()


def png() -> str:
    """A small real PNG (base64), drawn by matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    plt.imsave(buf, [[0.0, 1.0], [1.0, 0.0]], format="png", cmap="viridis")
    return base64.b64encode(buf.getvalue()).decode()


def hostile_server() -> MCPServer:
    """A server whose results carry markup and an image (what a hostile or careless server may send)."""
    srv = MCPServer("hostile", version="0.1")

    @srv.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @srv.tool()
    def picture() -> mt.CallToolResult:
        """An image and a caption."""
        return mt.CallToolResult(content=[mt.ImageContent(type="image", data=png(), mime_type="image/png"),
                                          mt.TextContent(type="text", text="a 2x2 checkerboard")])

    return srv


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    out = {"collect-oracle": root / "collect-oracle", "collect-random": root / "collect-random",
           "eval": root / "eval", "scripted": root / "scripted", "replayed": root / "replayed",
           "hostile": root / "hostile"}
    assert main(["collect", *FAST, "policy=oracle", "episodes=6", f"out={out['collect-oracle']}"]) == 0
    assert main(["collect", *FAST, "policy=random", "episodes=60", f"out={out['collect-random']}"]) == 0
    assert main(["eval", *FAST, "policy=oracle", "samples=1", f"out={out['eval']}"]) == 0

    # A scripted run that records cassettes of its server, then the same episodes replayed from them.
    scripted = out["scripted"]
    play(RecordTrajectories(gym.make("mcp_gym/Counter-v0", record=scripted / "cassettes"), scripted,
                            policy="scripted"), counter_plan(), raw=True)
    play(RecordTrajectories(gym.make("mcp_gym/Counter-v0", replay=scripted), out["replayed"], policy="scripted"),
         counter_plan(), raw=True)

    env = MCPEnv({"hostile": InProcess(hostile_server())}, [{"id": "<i>task</i>", "prompt": HOSTILE_RESULT}],
                 verifier=lambda task, answer, state: 1.0 if answer == "done" else 0.0)
    hostile = RecordTrajectories(env, out["hostile"], policy="<b>llm</b>")
    hostile.reset(seed=1)
    hostile.step({"tool": "echo", "arguments": {"text": HOSTILE_RESULT}, "raw_text": HOSTILE_RAW,
                  "parse_status": "ok"})
    hostile.step({"tool": "picture", "arguments": {}})
    hostile.step({"tool": "echo", "arguments": {"text": LONG}})
    hostile.step({"tool": "nope", "arguments": {}, "raw_text": "not json", "parse_status": "invalid_json"})
    hostile.step({"tool": "submit", "arguments": {"answer": HOSTILE_RESULT}})
    hostile.close()
    return out


# -- the page, read in Python -------------------------------------------------------------------------------------
class Dom(HTMLParser):
    """The elements of a page: (tag, attributes) in order, plus the text inside each <script>, <pre>, <b> and
    <summary>."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.texts: dict[str, list[str]] = {"script": [], "pre": [], "b": [], "summary": []}
        self._open: list[str] = []
        self.html = text
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag in self.texts:
            self._open.append(tag)
            self.texts[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open:
            self.texts[self._open[-1]][-1] += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        """Attributes of the elements ``tag`` having every attribute of ``attrs`` (``class_`` for class; a class
        matches one of the element's classes)."""
        want = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        out = []
        for t, a in self.elements:
            if t != tag:
                continue
            if all((v in (a.get(k) or "").split()) if k == "class" else a.get(k) == v for k, v in want.items()):
                out.append(a)
        return out


def embedded(page: str) -> dict[str, Any]:
    dom = Dom(page)
    data = next(t for a, t in zip(dom.find("script"), dom.texts["script"], strict=True) if a.get("id") == "data")
    return json.loads(data)


def test_each_run_kind_is_recognised(runs: dict[str, Path]) -> None:
    kinds = {name: load_run(path).kind for name, path in runs.items()}
    assert kinds["collect-oracle"] == ["collect"]
    assert kinds["eval"] == ["eval"]
    assert kinds["scripted"] == ["recording", "cassettes recorded"]
    assert kinds["replayed"] == ["recording", "replay"]
    view = load_run(runs["eval"])
    assert view.summary is not None and view.summary["success_rate"] == 1.0 and len(view.per_task) == 24
    assert sorted(n for n, _ in view.plots) == ["reward_hist.png", "steps_hist.png", "success_by_task.png"]
    assert all(src.startswith("data:image/png;base64,iVBORw0KGgo") for _, src in view.plots)  # the PNG signature


def test_replayed_run_shows_the_recorded_episodes_again(runs: dict[str, Path]) -> None:
    def outcomes(run: Path) -> dict[tuple[str, int], tuple[Any, ...]]:
        view = load_run(run)
        return {(e["task"], e["seed"]): (e["ret"], e["success"], e["len"],
                                         [(s["tool"], s["args"], s["blocks"], s["reward"], s["raw"])
                                          for s in view.steps[e["id"]]])
                for e in view.episodes}

    original, replayed = outcomes(runs["scripted"]), outcomes(runs["replayed"])
    assert len(original) == 4 and original == replayed
    assert {e[1] for e in original.values()} == {True, False}
    replayed_view = load_run(runs["replayed"])
    servers = replayed_view.details[replayed_view.episodes[0]["id"]]["servers"]
    assert {s["transport"] for s in servers.values()} == {"replay"}


def test_page_holds_every_episode_with_its_steps(runs: dict[str, Path], tmp_path: Path) -> None:
    page = write_view([runs["collect-oracle"], runs["eval"]], tmp_path / "two.html")
    data = embedded(page.read_text(encoding="utf-8"))
    assert [r["name"] for r in data["runs"]] == ["collect-oracle", "eval"]
    recorded = {e["episode_id"] for run in ("collect-oracle", "eval") for e in episodes_of(runs[run])}
    assert {e["id"] for e in data["episodes"]} == recorded and len(recorded) == 30
    dom = Dom(page.read_text(encoding="utf-8"))
    steps = {a["id"]: json.loads(t) for a, t in zip(dom.find("script"), dom.texts["script"], strict=True)
             if (a.get("id") or "").startswith("ep-")}
    assert len(steps) == 30
    for e in data["episodes"]:  # each episode's steps, in order, as recorded
        assert [s["i"] for s in steps[f"ep-{e['n']}"]["steps"]] == list(range(e["len"]))
    # A resource change is computed against the previous step (the first one against the reset observation).
    first = steps["ep-0"]["steps"][0]
    assert first["changes"] and first["changes"][0]["uri"] == "counter://state"
    assert first["changes"][0]["before"].startswith("count=0 ")


def test_page_is_self_contained_and_locked_down(runs: dict[str, Path], tmp_path: Path) -> None:
    text = write_view([runs["eval"], runs["hostile"]], tmp_path / "p.html").read_text(encoding="utf-8")
    dom = Dom(text)
    for tag, attrs in dom.elements:  # nothing loads from elsewhere
        for key in ("src", "href"):
            assert not attrs.get(key), (tag, attrs)
    assert not dom.find("link")
    csp = dom.find("meta", http_equiv="Content-Security-Policy")[0]["content"] or ""
    assert "default-src 'none'" in csp and "img-src data:" in csp and "'unsafe-inline'" not in csp
    # Recorded text never appears as markup: one executable script (the page's), the rest JSON.
    scripts = dom.find("script")
    assert sum(1 for s in scripts if s.get("type") != "application/json") == 1
    assert "<script>document" not in text and "</script><script>" not in text and "<img" not in text


def test_big_runs_are_capped_round_robin_over_tasks(runs: dict[str, Path], tmp_path: Path) -> None:
    tasks = {e["task_id"] for e in episodes_of(runs["collect-random"])}
    view = load_run(runs["collect-random"], max_episodes=7, max_text=10)
    assert view.total_episodes == 60 and len(view.episodes) == 7
    assert len({e["task"] for e in view.episodes}) == min(7, len(tasks))  # one per task first
    recorded = {e["episode_id"]: e["task_prompt"] for e in episodes_of(runs["collect-random"])}
    prompt = view.details[view.episodes[0]["id"]]["prompt"]
    assert prompt.startswith(recorded[view.episodes[0]["id"]][:10] + "\n[… ")
    assert "more characters not shown" in prompt
    small = write_view([runs["collect-random"]], tmp_path / "small.html", max_episodes=5)
    full = write_view([runs["collect-random"]], tmp_path / "full.html")
    assert small.stat().st_size < full.stat().st_size
    assert embedded(small.read_text())["runs"][0]["shown"] == 5


def test_cli_view(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(runs["collect-oracle"])]) == 0
    assert (runs["collect-oracle"] / "report.html").is_file()  # default: next to the run's files
    assert str(runs["collect-oracle"] / "report.html") in capsys.readouterr().out
    out = tmp_path / "cmp" / "x.html"
    assert main(["view", str(runs["eval"]), str(runs["collect-oracle"]), "--out", str(out)]) == 0
    assert out.is_file()
    missing = tmp_path / "no-such-run"
    assert main(["view", str(missing)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mcp-gym view: no run at '{missing}': no such directory"]
    assert main(["view", str(tmp_path)]) == 1  # a folder that is not a run
    assert "has no manifest.json" in capsys.readouterr().err
    assert main(["view"]) == 2  # argparse: RUN is required


def test_llm_run_shows_model_output_and_no_api_key(tmp_path: Path) -> None:
    """A collection by the ``openai`` policy against a local chat-completions server: the page has every model output
    with its parse status, and not the API key of the job's config."""
    from test_policies import serve_chat

    run = tmp_path / "llm"
    with serve_chat() as (url, script):
        assert main(["collect", *FAST, "policy=openai", f"policy.base_url={url}", "policy.api_key=sk-test",
                     "episodes=2", f"out={run}"]) == 0
    assert not script.problems
    assert "sk-test" not in (run / ".hydra" / "config.yaml").read_text()  # the job masks Hydra's copy (round 9) ...
    page = write_view([run], tmp_path / "llm.html").read_text(encoding="utf-8")
    assert "sk-test" not in page  # ... the page does not
    view = load_run(run)
    assert view.config is not None and view.config["policy"]["api_key"] == "<redacted>"
    steps = [s for e in view.episodes for s in view.steps[e["id"]]]
    shown = {(e["id"], s["i"]): (s["raw"], s["parse"]) for e in view.episodes for s in view.steps[e["id"]]}
    recorded = read_tables(run)[0].to_pylist()
    assert shown == {(r["episode_id"], r["step_index"]): (r["raw_text"], r["parse_status"]) for r in recorded}
    assert {s["parse"] for s in steps} == {"ok", "no_tool_call"}
    assert all(e["parse_failures"] == 1 for e in view.episodes)  # the first turn has no tool call


@pytest.mark.ray
@pytest.mark.slow
def test_view_of_ray_run(tmp_path: Path) -> None:
    """A collection by Ray actors (a local 1-CPU Ray) whose shards went to ``launcher.storage``: the run folder only
    holds Hydra's config, and the page reads the episodes from the storage URI."""
    pytest.importorskip("ray")
    out, storage = tmp_path / "ray-run", tmp_path / "storage"
    assert main(["collect", *FAST, "policy=random", "episodes=4", "launcher=ray", "launcher.num_workers=1",
                 "launcher.num_cpus=1", "launcher.cpus_per_worker=0.5", "launcher.num_envs=2",
                 "launcher.progress=false", f"launcher.storage={storage.as_uri()}", f"out={out}"]) == 0
    assert not (out / "episodes").exists()
    with pytest.raises(ValueError, match="launcher.storage"):  # a run's config is untrusted: named by the caller
        load_run(out)
    view = load_run(out, storage=storage.as_uri())
    assert view.kind == ["collect", "ray", "shared storage"] and view.storage == storage.as_uri()
    assert {e["id"] for e in view.episodes} == {e["episode_id"] for e in episodes_of(storage)}
    assert len(view.episodes) == 4 and all(len(view.steps[e["id"]]) == e["len"] for e in view.episodes)
    by_uri = load_run(storage.as_uri())  # the storage location itself
    assert {e["id"] for e in by_uri.episodes} == {e["id"] for e in view.episodes}


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_demo_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", *FAST, "episodes=4", "demo.eval_samples=1", "demo.pass_k=[1]", f"out={out}"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"look at the episodes: open {out / 'report.html'}"
    data = embedded((out / "report.html").read_text())
    assert [r["name"] for r in data["runs"]] == ["eval-oracle", "eval-random", "collect-oracle", "collect-random"]
    assert all(r["plots"] for r in data["runs"][:2])


# -- the page, in Chromium -----------------------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``load(page, hash, screenshot=None) -> Dom`` in headless Chromium (skip without it, except in CI)."""
    if CHROMIUM is None:
        skip_unless_ci_full("chromium is not installed (apt-get install chromium)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}"]

    def load(page: Path, fragment: str = "", screenshot: Path | None = None, height: int = 2200) -> Dom:
        url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
        if screenshot is not None:
            subprocess.run([CHROMIUM, *flags, f"--window-size=1400,{height}", f"--screenshot={screenshot}", url],
                           capture_output=True, timeout=120, check=True)
            assert screenshot.stat().st_size > 10_000
            print(f"screenshot: {screenshot}")
        done = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120,
                              check=True)
        return Dom(done.stdout)

    return load


def artifact(tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("MCP_GYM_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def rows(dom: Dom) -> list[str]:
    return [a["data-id"] or "" for a in dom.find("tr", class_="ep")]


@pytest.mark.browser
def test_browser_lists_filters_and_pages_the_episodes(runs: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    names = ("collect-oracle", "collect-random", "eval")
    page = write_view([runs[n] for n in names], tmp_path / "runs.html")
    eps = {n: episodes_of(runs[n]) for n in names}
    every = [e for n in names for e in eps[n]]
    assert len(every) == 90

    dom = browser(page, screenshot=artifact(tmp_path, "viewer-runs.png"))
    assert [a["data-run"] for a in dom.find("div", class_="run")] == list(names)
    assert len(rows(dom)) == 50 and dom.find("div", class_="pager")  # the first of two pages
    assert set(rows(dom)) | set(rows(browser(page, "page=2"))) == {e["episode_id"] for e in every}
    assert len(rows(browser(page, "page=2"))) == 40

    successes = {e["episode_id"] for e in every if e["success"] is True}
    assert 30 <= len(successes) <= 50  # oracle: 6 + 24, random: a few
    assert set(rows(browser(page, "success=true"))) == successes
    failed_random = {e["episode_id"] for e in eps["collect-random"] if e["success"] is False}
    assert len(failed_random) > 50  # two pages
    shown = rows(browser(page, "run=collect-random&success=false")) + rows(
        browser(page, "run=collect-random&success=false&page=2"))
    assert len(shown) == len(set(shown)) and set(shown) == failed_random
    task = eps["eval"][0]["task_id"]
    assert set(rows(browser(page, f"task={task}"))) == {e["episode_id"] for e in every if e["task_id"] == task}
    oracle = {e["episode_id"] for e in every if e["policy"] == "oracle"}
    assert len(oracle) == 30 and set(rows(browser(page, "policy=oracle"))) == oracle
    assert rows(browser(page, "termination=no-such-ending")) == []


@pytest.mark.browser
def test_browser_side_by_side_by_task(runs: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    page = write_view([runs["collect-oracle"], runs["collect-random"]], tmp_path / "cmp.html")
    oracle, random = episodes_of(runs["collect-oracle"]), episodes_of(runs["collect-random"])
    task = oracle[0]["task_id"]
    dom = browser(page, f"task={task}", screenshot=artifact(tmp_path, "viewer-side-by-side.png"), height=1600)
    compared = [a["data-task"] for a in dom.find("tr", class_="cmp")]
    assert set(compared) == {e["task_id"] for e in oracle} & {e["task_id"] for e in random}  # shared tasks
    assert [a["data-task"] for a in dom.find("tr", class_="sel")] == [task]
    cards = [a["data-id"] for a in dom.find("details", class_="card")]
    assert set(cards) == {e["episode_id"] for e in oracle + random if e["task_id"] == task}
    assert any(e["task_id"] == task for e in random)  # both columns have episodes


@pytest.mark.browser
def test_browser_shows_recorded_markup_as_text(runs: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    page = write_view([runs["hostile"]], tmp_path / "hostile.html")
    (episode,) = episodes_of(runs["hostile"])
    dom = browser(page, f"episode={episode['episode_id']}", screenshot=artifact(tmp_path, "viewer-episode.png"))
    body = dom.find("body")[0]
    assert "data-pwned" not in body, body  # no recorded script or handler ran
    assert [a["data-step"] for a in dom.find("li", class_="step")] == ["0", "1", "2", "3", "4"]
    assert LONG in dom.texts["pre"] and f"(41 lines, {len(LONG)} chars)" in " ".join(dom.texts["summary"])  # folded
    pres = dom.texts["pre"]
    assert HOSTILE_RESULT in pres  # the tool result, shown as text (the parser unescaped &lt;script&gt;)
    assert HOSTILE_RAW in pres  # the model output
    # The only executable script is the page's own, the only images the recorded PNG: no injected element.
    assert sum(1 for s in dom.find("script") if s.get("type") != "application/json") == 1
    imgs = [a["src"] or "" for a in dom.find("img")]
    assert len(imgs) == 1 and imgs[0].startswith("data:image/png;base64,")
    assert "bold" not in dom.texts["b"]  # the server's <b>bold</b> is text, not an element
    assert "unknown_tool" in dom.texts["b"]  # the failed call's error box
    badges = "".join(a.get("class") or "" for a in dom.find("span", class_="badge"))
    assert "b-bad" in badges and "b-ok" in badges  # the error step and the parse status are marked


def test_render_html_without_runs_raises() -> None:
    with pytest.raises(ValueError):
        write_view([])
    assert "<!DOCTYPE html>" in render_html([])
