// The script of mcp-gym view's page (mcp_gym/viewer), inlined into it; allowed by hash in its CSP.
// Recorded text reaches the DOM only as text nodes (h() appends strings as text), never as markup.
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const EP = D.episodes, RUNS = D.runs, PAGE = 50, MULTI = RUNS.length > 1;
const FILTERS = ["run", "task", "tag", "policy", "success", "termination"];
const state = {run: "", task: "", tag: "", policy: "", success: "", termination: "", q: "", page: 1, episode: ""};
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
// The grader's verdict and reason (what info["grade"] recorded); "ungraded" when grading failed, with why.
const gradeText = g => !g ? "" : g.ungraded ? "ungraded: " + g.reason :
  `score ${fmt(g.score)}` + (g.reason ? ": " + g.reason : "");
const gradeCell = g => !g ? h("span", {class: "muted"}, "–") : h("span", {class: "grade", title: gradeText(g)},
  g.ungraded ? badge("ungraded", "b-warn") : null, h("span", {class: "reason"}, g.ungraded ? g.reason :
    `${fmt(g.score)}` + (g.reason ? " · " + g.reason : "")));

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
  if (skip !== "tag" && state.tag && !(e.tags || []).includes(state.tag)) return false;
  if (skip !== "policy" && state.policy && (e.policy || "") !== state.policy) return false;
  if (skip !== "success" && state.success && successKey(e.success) !== state.success) return false;
  if (skip !== "termination" && state.termination && (e.term || "") !== state.termination) return false;
  if (state.q) {
    const q = state.q.toLowerCase();
    if (![e.id, e.key, e.task, e.answer, e.prompt, e.grade && e.grade.reason].some(x => x && String(x).toLowerCase().includes(q))) return false;
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
    ["parse-error rate", "parse_error_rate", pct], ["missing episodes", "missing_episodes"],
    ["server start-up share", "startup_share", pct]];
  const body = rows.filter(([, key]) => ev.some(r => r.summary[key] !== undefined)).map(([label, key, f]) =>
    h("tr", {}, h("td", {}, label), ev.map(r => h("td", {class: "num"}, (f || fmt)(r.summary[key])))));
  for (const [label, key] of [["tool call ms", "tool_call_ms"], ["episode s", "episode_s"],
                              ["server start-up s", "startup_s"], ["time to first step s", "first_step_s"]].filter(([, k]) => ev.some(r => r.summary[k])))
    for (const p of ["p50", "p90", "p99"])
      body.push(h("tr", {}, h("td", {}, `${label} ${p}`),
        ev.map(r => h("td", {class: "num"}, fmt((r.summary[key] || {})[p])))));
  body.push(h("tr", {}, h("td", {}, "endings"), ev.map(r => h("td", {class: "num"},
    Object.entries(r.summary.terminations || {}).map(([k, v]) => `${k} ${v}`).join(", ")))));
  const tags = [...new Set(ev.flatMap(r => Object.keys(r.summary.by_tag || {})))].sort();
  for (const t of tags)  // per task tag: success and pass@k / pass^k of the tasks carrying it
    body.push(h("tr", {class: "tagrow", "data-tag": t}, h("td", {}, `tag ${t}`), ev.map(r => {
      const g = (r.summary.by_tag || {})[t];
      return h("td", {class: "num"}, g ? [`success ${pct(g.success_rate)}`, ...Object.keys(g).filter(k =>
        k.startsWith("pass")).map(k => `${k} ${pct(g[k])}`)].join(", ") + ` (${plural(g.tasks, "task")})` : "–");
    })));
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
            ` · ${e.policy || "?"} · R ${fmt(e.ret)} · ${plural(e.len, "step")} · ${e.term || "?"}`),
          e.grade ? h("span", {class: "muted"}, " · ", gradeCell(e.grade)) : null));
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
  const turns = detailOf(e).turns || [], items = [];
  let last = 0;
  for (const s of list) {  // a conversation: each user message before the first step of its turn
    if (s.user_turn !== null && s.user_turn !== undefined && s.user_turn !== last && s.user_turn < turns.length)
      items.push(h("li", {class: "userturn", "data-turn": s.user_turn},
        h("div", {class: "lbl"}, `user turn ${s.user_turn + 1} of ${turns.length}`), fold(turns[s.user_turn])));
    if (s.user_turn !== null && s.user_turn !== undefined) last = s.user_turn;
    items.push(step(s));
  }
  return h("ol", {class: "steps"}, items);
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
    ["task", e.task || "–"], ["tags", (e.tags || []).join(", ") || "–"], ["seed", fmt(e.seed)], ["policy", e.policy || "–"], ["servers", servers || "–"],
    ["started", e.started || "–"], ["duration", e.seconds === null ? "–" : fmt(e.seconds, 2) + " s"],
    ["tool catalogue", (e.catalogue || "–") + (e.catalogue_changes ? ` (${e.catalogue_changes} changes)` : "")],
    ["final answer", d.answer === null || d.answer === undefined ? "–" : d.answer]];
  const res = Object.entries(d.resources || {});
  const g = d.grade;
  const grade = !g ? null : h("div", {class: "gradebox" + (g.passed === true ? " ok" : g.ungraded ? "" : " bad")},
    h("div", {}, g.ungraded ? badge("ungraded", "b-warn") : successBadge(g.passed),
      g.ungraded ? null : h("b", {}, ` score ${fmt(g.score)}`), g.grader ? h("span", {class: "muted"},
        ` (${g.grader})`) : null),
    h("div", {class: "reason"}, g.reason || "(no reason given)"),
    g.parts.length ? h("ul", {class: "parts"}, g.parts.map(p => h("li", {}, successBadge(p.passed),
      h("span", {class: "mono"}, ` ${p.path}`), ` score ${fmt(p.score)}: `, h("span", {class: "reason"}, p.reason))))
      : null,
    g.details ? fold(g.details, "grader details") : null);
  return h("div", {class: "episode", "data-id": e.id}, grade,
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
function tagOptions() {
  const out = new Map();
  for (const e of EP.filter(x => matches(x, "tag"))) for (const t of e.tags || []) out.set(t, (out.get(t) || 0) + 1);
  return [...out.entries()].sort((a, b) => a[0].localeCompare(b[0])).map(([v, n]) => [v, `${v} (${n})`]);
}
function filterBar(rows) {
  const s = stats(rows);
  const search = h("input", {type: "search", placeholder: "id, key, task, answer…", value: state.q});
  search.addEventListener("change", () => { state.q = search.value.trim(); state.page = 1; update(); });
  return h("div", {class: "filters"},
    MULTI ? options("run", distinct("run", e => runName(e.run)), "run") : null,
    options("task", distinct("task", e => e.task || ""), "task"),
    EP.some(e => (e.tags || []).length) ? options("tag", tagOptions(), "tag") : null,
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
    tr.after(h("tr", {class: "detail"}, h("td", {colspan: 11}, episodeDetail(e))));
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
      h("td", {class: "gradecol"}, gradeCell(e.grade)),
      h("td", {class: "num"}, fmt(e.ret)), h("td", {class: "num"}, fmt(e.len)), h("td", {}, e.term || "–"),
      h("td", {class: "num"}, e.errors ? badge(String(e.errors), "b-bad") : "0",
        e.parse_failures ? badge(e.parse_failures + " parse", "b-warn") : null));
    tr.addEventListener("click", () => toggle(e, tr));
    body.append(tr);
    if (opened.has(e.id)) { body.append(h("tr", {class: "detail"}, h("td", {colspan: 11}, episodeDetail(e))));
      tr.classList.add("open"); }
  }
  const go = p => () => { state.page = p; update(); };
  return [h("table", {id: "episodes"}, h("thead", {}, h("tr", {}, MULTI ? h("th", {}, "run") : null,
      h("th", {}, "episode"), h("th", {}, "task"), h("th", {}, "policy"), h("th", {}, "success"),
      h("th", {}, "grade"), h("th", {class: "num"}, "return"), h("th", {class: "num"}, "steps"), h("th", {}, "termination"),
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
