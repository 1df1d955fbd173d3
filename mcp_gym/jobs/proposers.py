"""Task proposers of ``mcp-gym tasks generate``: ``explore`` (no model: random walks over the tools' schemas, chained on
what earlier results returned) and ``llm`` (any OpenAI-compatible chat endpoint proposes tasks as JSON).

A proposer only *proposes*: a :class:`Proposal` is a prompt, a reference solution (tool calls) and what to check (an
answer found at a place in a real result, or a read of the final state). Whether it becomes a task is decided by
running it (:mod:`mcp_gym.jobs.generate`); nothing a proposer says about the expected value is trusted.

Places in a result (``path`` of an answer check): a JSONPath (``$.entities[0].name``) into a JSON result, or for a
text result ``line:N`` (the N-th non-empty line), ``field:KEY`` (the value after ``KEY:`` on a line), ``word:N``
(the last word of line N) or ``text`` (all of it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcp_gym.jobs._chain import PATHLIKE, Token, argument_names, chain_arguments, last_key, match, template
from mcp_gym.jobs._claims import NOT_CONFIRMED, changes, confirmed, holds
from mcp_gym.jobs._claims import reads as only_read
from mcp_gym.jobs._values import (  # the results' values, used here and by mcp_gym.jobs' other modules from here
    MAX_ANSWER_CHARS as MAX_ANSWER_CHARS,
)
from mcp_gym.jobs._values import _named as _named
from mcp_gym.jobs._values import as_text, describe_path, extract, fields, steady
from mcp_gym.jobs._values import beside_clock as beside_clock
from mcp_gym.jobs._values import clocklike as clocklike
from mcp_gym.jobs._values import reports_failure as reports_failure
from mcp_gym.jobs._values import result_value as result_value
from mcp_gym.jobs._values import unmasked as unmasked

__all__: list[str] = []  # internal to mcp_gym.jobs: used by its sibling modules only


# -- what a proposal is ------------------------------------------------------------------------------------------------
@dataclass
class Proposal:
    """A proposed task: ``prompt``, ``solution`` (``[{"tool", "arguments"}]``) and ``check``:

    * ``{"answer": {"step": k, "path": P}}``: the answer is what the k-th solution call (1-based) returned at ``P``;
    * ``{"state": [read, ...]}``: a read of the final state whose value the solution changes, each read
      ``{"tool", "arguments"}``, ``{"resource": uri}`` or ``"files"`` (the workspace's files); the first read whose
      value changes, the same way in two fresh runs, is the check.

    ``malformed`` says why a proposal could not be read (it is dropped as such); ``tags`` are added to the task.
    """

    prompt: str
    solution: list[dict[str, Any]]
    check: dict[str, Any]
    source: str
    malformed: str | None = None
    tags: tuple[str, ...] = ()
    raw: Any = None
    reason: str = "malformed"  # the drop reason when ``malformed`` is set


def servers_started(info: Mapping[str, Any]) -> None:
    """Refuse, in one line, a fresh episode whose reset failed (a server that cannot start: a typo in its command
    line, a missing program): every proposal would be judged against no tools."""
    if info.get("error"):
        from mcp_gym.jobs.results import JobFailed

        raise JobFailed(f"a fresh episode could not start: {info['error']['message']}")


# -- explore ----------------------------------------------------------------------------------------------------------
@dataclass
class _Step:
    call: dict[str, Any]
    ok: bool
    value: Any = None
    uses: dict[str, Token] = field(default_factory=dict)  # placeholder -> token
    mutates: bool = False
    where: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # placeholder -> where in the arguments
    read_only: bool | None = None  # what its tool says (readOnlyHint, or generator.read_tools); None: nothing
    same_files: bool | None = None  # the workspace's files the same after it (None: no workspace)
    follows: int | None = None  # the read it follows (ExploreProposer.follows), if any


@dataclass
class Walk:
    """One random walk: its steps as run in a fresh episode, and which of them returned the same in a second one."""

    steps: list[_Step]
    stable: list[Any]  # the value of each step in the second run (None: failed there)
    reads: list[Any] = field(default_factory=list)  # state reads needing no walk value (ExploreProposer.standing)


class ExploreProposer:
    """Random walks over the tools, chained on earlier results, turned into templated tasks.

    Args:
        seed: Walk ``w`` draws from ``numpy.random.default_rng([seed, w])``: the same seed gives the same walks.
        walk_length: Calls per walk.
        fields_per_call: Answer tasks made from one call's result (its fields drawn at random).
        chain: Probability that a string argument takes a value an earlier result returned.
        fixed: Argument name -> value for every tool declaring it (``{workspace}`` allowed).
        values: Extra string values arguments may take (e.g. ``["{workspace}"]``).
        exclude_tools: Tools never called.
        read_tools: Tools that only read (``None``: those annotated ``readOnlyHint``).
        max_calls: Most calls in a reference solution.
        claims: Keep an answer a state-changing call gave about itself only if a later read of its walk returns it
            too (:mod:`mcp_gym.jobs._claims`); ``False``: keep it as any answer.
        max_failed_walks: Walks made while every call fails before the job gives up (``0``: never): once any call
            has succeeded, walks go on as long as the job's other bounds allow.
        follow: Probability that a call after a read (:meth:`_read`) *follows* it (:meth:`follows`): a tool whose
            arguments are named like the values the read returned, with every such argument filled from them
            (``0``: tools drawn alike, as before).
    """

    def __init__(self, *, seed: int = 0, walk_length: int = 6, fields_per_call: int = 2, chain: float = 0.7,
                 fixed: Mapping[str, Any] | None = None, values: Sequence[str] = (),
                 exclude_tools: Sequence[str] = (), read_tools: Sequence[str] | None = None,
                 max_calls: int = 4, max_failed_walks: int = 10, claims: bool = True, follow: float = 0.5) -> None:
        self.seed = int(seed)
        self.walk_length = int(walk_length)
        self.fields_per_call = int(fields_per_call)
        self.chain = float(chain)
        self.fixed = dict(fixed or {})
        self.values = [str(v) for v in values]
        self.exclude = set(exclude_tools)
        self.read_tools = set(read_tools) if read_tools is not None else None
        self.max_calls = int(max_calls)
        self.claims = bool(claims)
        if isinstance(follow, bool) or not isinstance(follow, (int, float)) or not 0 <= follow <= 1:
            from mcp_gym.jobs.schema import ConfigError

            raise ConfigError(f"generator.follow must be a number from 0 to 1, not {follow!r}")
        self.follow = float(follow)
        if isinstance(max_failed_walks, bool) or not isinstance(max_failed_walks, int) or max_failed_walks < 0:
            from mcp_gym.jobs.schema import ConfigError

            raise ConfigError(f"generator.max_failed_walks must be an integer, 0 (never give up) or more, not "
                              f"{max_failed_walks!r}")
        self.max_failed_walks = max_failed_walks

    # the walk ---------------------------------------------------------------------------------------------------------
    def tools(self, env: Any) -> list[str]:
        """The tools a walk may call."""
        return [t for t in env.action_space.tool_names if t != "submit" and t not in self.exclude]

    def reads(self, env: Any, tool: str) -> bool:
        """Whether ``tool`` only reads."""
        return bool(self.says(env, tool))

    def says(self, env: Any, tool: str) -> bool | None:
        """Whether ``tool`` says it only reads (``generator.read_tools``, else its ``readOnlyHint``; ``None``: it says
        nothing)."""
        if self.read_tools is not None:
            return tool in self.read_tools
        entry = env.host.resolve(tool)
        ann = getattr(entry.tool, "annotations", None) if entry is not None else None
        return None if ann is None or ann.read_only_hint is None else bool(ann.read_only_hint)

    def walk(self, run: Any, env: Any, w: int) -> Walk:
        """Walk ``w``: ``run(calls)`` plays calls in a fresh episode and returns ``[(ok, value)]``; the walk is
        sampled step by step (``run`` is given growing prefixes only through :meth:`_sample_walk`)."""
        steps = self._sample_walk(run, env, w)
        second = run([s.call for s in steps])
        stable = [v2 if (s.ok and ok2 and steady(v2) == steady(s.value)) else None
                  for s, (ok2, v2) in zip(steps, second, strict=True)]
        return Walk(steps, stable, self.standing(env))

    def standing(self, env: Any) -> list[dict[str, Any]]:
        """The state reads any walk may check with: each read-only tool whose required arguments are all fixed
        (:attr:`fixed`) or have a default, a ``const`` or an ``enum`` (its first value), called with those. A state
        task is checked by the first read its solution changes: the walk's own reads first, then these, then the
        workspace's files."""
        out = []
        for tool in self.tools(env):
            entry = env.host.resolve(tool)
            if entry is None or not self.reads(env, tool):
                continue
            schema = entry.input_schema
            props = schema.get("properties") or {}
            args: dict[str, Any] = {k: v for k, v in self.fixed.items() if k in props}
            for name in schema.get("required") or ():
                found = props.get(name)
                prop: dict[str, Any] = found if isinstance(found, dict) else {}
                if name in args:
                    continue
                if "default" in prop:
                    args[name] = prop["default"]
                elif "const" in prop:
                    args[name] = prop["const"]
                elif prop.get("enum"):
                    args[name] = prop["enum"][0]
                else:
                    break
            else:
                call = {"tool": tool, "arguments": args}
                if env.action_space.validation_error(call) is None:
                    out.append(call)
        return out

    def _sample_walk(self, run: Any, env: Any, w: int) -> list[_Step]:
        rng = np.random.default_rng([self.seed, w])
        steps: list[_Step] = []
        session = run.session()
        tools = self.tools(env)  # after the reset: servers naming {workspace} start there
        if not tools:
            raise ValueError("tasks generate: the servers offer no tool to explore")
        files: Callable[[str], Any] | None = getattr(session, "read", None) if env.workspace is not None else None
        try:
            for _ in range(self.walk_length):
                tool, follow = self._next(env, rng, tools, steps)
                call, uses, where = self._draw(env, rng, tool, steps, follow)
                before = files("files") if files is not None and self.says(env, tool) is None else None
                ok, value = session.step(call)
                same = None if before is None or files is None else before == files("files")
                steps.append(_Step(call, ok, value, uses, not self.reads(env, tool), where, self.says(env, tool),
                                   same, follow))
        finally:
            session.close()
        return steps

    def follows(self, env: Any, tool: str, step: _Step) -> int:
        """How well ``tool`` follows a read ``step``: for each of its arguments (not a fixed one) named like a value
        the read returned, how alike the names are (3 the same, 2 the same words, 1 one's words among the other's:
        :func:`~mcp_gym.jobs._chain.match`), summed; 0: none. PyPI mcp-text-editor's read returns ``file_hash``,
        ``range_hash``, ``start_line`` and ``end_line``, which its edit takes (``line_start``, ...): 10; the read
        itself, taking ``start`` and ``end``, 2."""
        names = {k for p, _ in fields(step.value) if (k := last_key(p))}
        entry = env.host.resolve(tool)
        if not names or entry is None:
            return 0
        return sum(max(match(a, k) for k in names) for a in argument_names(entry.input_schema) if a not in self.fixed)

    @staticmethod
    def _read(steps: list[_Step]) -> int | None:
        """The step a next call may follow: the latest successful call not known to change state (a read) whose
        result has a named value, with no successful change after it (the hashes it returned still hold)."""
        for j in range(len(steps) - 1, -1, -1):
            s = steps[j]
            if s.ok and changes(s):
                return None
            if s.ok and any(last_key(p) for p, _ in fields(s.value)):
                return j
        return None

    def _next(self, env: Any, rng: np.random.Generator, tools: list[str],
              steps: list[_Step]) -> tuple[str, int | None]:
        """The next call's tool, and the step it follows (``None``: none): after a read (:meth:`_read`), with
        probability :attr:`follow`, a tool drawn in proportion to :meth:`follows` (when any scores); else any tool
        alike."""
        j = self._read(steps) if self.follow > 0 else None
        if j is not None and rng.random() < self.follow:
            scores = np.array([self.follows(env, t, steps[j]) for t in tools], dtype=float)
            if scores.sum() > 0:
                return tools[int(rng.choice(len(tools), p=scores / scores.sum()))], j
        return tools[int(rng.integers(len(tools)))], None

    def _pool(self, steps: list[_Step], follow: int | None = None) -> list[Token]:
        """The values a call may take: ``generator.values``, then what each earlier successful step returned (a value
        without a ``/`` also joined to the step's path argument, as a path its listing names); following step
        ``follow``, also the values that step was given from earlier ones, named as its arguments (its
        ``file_path``)."""
        out = [Token(v, -1, "") for v in self.values]
        if follow is not None:
            read = steps[follow]
            for ph, tok in read.uses.items():
                keys = [k for k in read.where.get(ph, ()) if isinstance(k, str)]
                if keys:
                    out.append(Token(tok.value, tok.origin, tok.path, tok.prefix, name=keys[-1], at=follow))
        for i, s in enumerate(steps):
            if not s.ok:
                continue
            base = [v for k, v in s.call["arguments"].items() if isinstance(v, str) and PATHLIKE.search(k)]
            for path, answer in fields(s.value):
                out.append(Token(answer, i, path))
                for b in base[:1]:
                    if "/" not in answer:
                        out.append(Token(f"{b.rstrip('/')}/{answer}", i, path, prefix=b.rstrip("/") + "/"))
        return out

    def _draw(self, env: Any, rng: np.random.Generator, tool: str, steps: list[_Step],
              follow: int | None = None) -> tuple[dict[str, Any], dict[str, Token], dict[str, tuple[Any, ...]]]:
        env.action_space.seed(int(rng.integers(2**31 - 1)))
        call = env.action_space.sample(mask={tool}, fixed=self.fixed)
        tokens = self._pool(steps, follow)
        if not tokens:
            return call, {}, {}
        entry = env.host.resolve(tool)
        schema = entry.input_schema if entry is not None else None
        args, uses, where = chain_arguments(call["arguments"], tokens, rng, self.chain, list(self.fixed), schema,
                                            follow is not None)
        chained = {"tool": call["tool"], "arguments": args}
        if uses and env.action_space.validation_error(chained) is None:
            return chained, uses, where
        return call, {}, {}

    # walks to proposals -----------------------------------------------------------------------------------------------
    def proposals(self, walk: Walk, w: int) -> Iterator[Proposal]:
        """The answer and state tasks one walk makes."""
        rng = np.random.default_rng([self.seed, w, 1])
        steps = walk.steps
        for i, s in enumerate(steps):
            if walk.stable[i] is None:
                continue
            deps = self._closure(steps, i)
            if deps is None or len(deps) > self.max_calls:
                continue
            if s.mutates and not only_read(s):  # a call whose tool says nothing and that left the files as they were
                yield self._proposal(steps, deps, walk, {"state": self._reads(steps, walk.reads)})
            found = [(p, a) for p, a in fields(s.value) if extract(walk.stable[i], p) == a]
            order = [int(k) for k in rng.permutation(len(found))]
            claim = self.claims and changes(s)  # what a call that changed state says of itself: the server's word
            seen = confirmed(steps, walk.stable, i, lambda v: ({a for _, a in fields(v)}, as_text(v))) if claim \
                else []
            order.sort(key=lambda k: claim and not holds(found[k][1], seen))  # the confirmed ones first
            for k in order[: self.fields_per_call]:
                path, answer = found[k]
                p = self._proposal(steps, deps, walk, {"answer": {"step": len(deps), "path": path}})
                if claim and not holds(answer, seen) and p.malformed is None:
                    p.malformed, p.reason = (f"call {len(deps)} ({s.call['tool']}) changed state and said {answer!r} "
                                             f"at {path}; no later read in its walk returned it"[:300], NOT_CONFIRMED)
                yield p

    def _closure(self, steps: list[_Step], i: int) -> list[int] | None:
        """Step ``i`` and what it needs: the steps whose results it uses and the changes made before it (not a call
        whose tool says nothing and that left the workspace's files as they were: npm mcp-sqlite's ``db_info`` before
        its ``list_tables``)."""
        need = {i}
        todo = [i]
        while todo:
            j = todo.pop()
            more = {t.origin for t in steps[j].uses.values() if t.origin >= 0}
            more |= {k for k in range(j) if steps[k].mutates and steps[k].ok and not only_read(steps[k])}
            for k in more - need:
                if not steps[k].ok:
                    return None
                need.add(k)
                todo.append(k)
        return sorted(need)

    def _reads(self, steps: list[_Step], standing: Sequence[Any] = ()) -> list[Any]:
        seen: list[Any] = []
        for call in [*(s.call for s in steps if s.ok and not s.mutates), *standing]:
            if call not in seen:
                seen.append(call)
        return [*seen, "files"]

    def _proposal(self, steps: list[_Step], deps: list[int], walk: Walk, check: dict[str, Any]) -> Proposal:
        number = {j: n for n, j in enumerate(deps, 1)}
        lines = []
        unstable = False
        for j in deps:
            s = steps[j]
            text = template(s.call["arguments"], s.uses, s.where)
            where = []
            for ph, tok in s.uses.items():
                if tok.origin < 0:
                    where.append(f"{ph} is {tok.value}")
                    continue
                if tok.origin not in number or walk.stable[tok.origin] is None or \
                        extract(walk.stable[tok.origin], tok.path) != extract(steps[tok.origin].value, tok.path):
                    unstable = True
                desc = f"{describe_path(tok.path)} of what step {number.get(tok.origin, '?')} returned"
                where.append(f"{ph} is {tok.prefix}<{desc}>" if tok.prefix else f"{ph} is {desc}")
            line = f"Step {number[j]}: call `{s.call['tool']}` with {text}"
            lines.append(line + (f", where {'; '.join(where)}." if where else "."))
        if "answer" in check:
            a = check["answer"]
            lines.append(f"Then answer with {describe_path(a['path'])} of what step {a['step']} returned.")
        else:
            lines.append("Then submit (any answer).")
        solution = [dict(steps[j].call) for j in deps]
        tools = sorted({c["tool"] for c in solution})
        return Proposal("\n".join(lines), solution, check, "explore",
                        malformed="a chained value differs between two fresh runs" if unstable else None,
                        reason="flaky",
                        tags=tuple(f"tool:{t}" for t in tools))


# -- llm --------------------------------------------------------------------------------------------------------------
DEFAULT_PROPOSER_SYSTEM = """\
You write tasks for training AI agents that use the tools of an MCP server. Every task you write is checked by \
running it: its reference solution is executed on a fresh server, and the task is kept only if the solution runs \
without errors, if the check you name has a value that comes from the real results, if doing nothing fails the \
check, and if two fresh runs give the same value. Reply with JSON only."""

DEFAULT_PROPOSER_PROMPT = """\
The server's tools (name, description, JSON Schema of the arguments):
{tools}

Its resources:
{resources}

Tasks already kept (do not repeat them):
{examples}

Propose {count} new, varied tasks as a JSON array. Each item is an object:
  "prompt": what the agent is asked, in plain words (it may name values the agent needs, never the answer),
  "solution": the reference solution, a list of {{"tool": NAME, "arguments": {{...}}}} calls,
  "check": how success is checked, either
     {{"answer": {{"step": K, "path": P}}}}: the agent must answer with what solution call K (1-based) returns at P,
       P a JSONPath such as "$.items[0].name" for a JSON result, or "line:N", "field:KEY", "word:N" or "text"
       for a text result; or
     {{"state": {{"tool": NAME, "arguments": {{...}}}}}}: a read-only call whose result the solution changes
       (or {{"state": {{"resource": URI}}}}, or {{"state": "files"}} for files the solution writes).
Do not give the expected value: it is taken from the real results."""


def parse_proposals(text: str, source: str = "llm") -> list[Proposal]:
    """The proposals in a model's reply: a JSON array of proposal objects (or one object, or ``{"tasks": [...]}``),
    bare or in a fenced block. A reply that is not JSON gives one malformed proposal; so does each bad item."""
    body = text.strip()
    m = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if m:
        body = m.group(1).strip()
    try:
        data = json.loads(body)
    except ValueError as e:
        return [Proposal("", [], {}, source, malformed=f"reply is not JSON: {e}", raw=text[:2000])]
    if isinstance(data, dict):
        data = data.get("tasks", [data])
    if not isinstance(data, list):
        return [Proposal("", [], {}, source, malformed="reply is not a JSON array of tasks", raw=text[:2000])]
    return [_proposal_item(item, source) for item in data]


def _proposal_item(item: Any, source: str) -> Proposal:
    if not isinstance(item, dict):
        return Proposal("", [], {}, source, malformed="a task is not a JSON object", raw=item)
    prompt: Any = item.get("prompt")
    solution: Any = item.get("solution")
    check: Any = item.get("check")
    bad = None
    if not isinstance(prompt, str) or not prompt.strip():
        bad = "no prompt"
    elif not isinstance(solution, list) or not solution or not all(
            isinstance(c, dict) and isinstance(c.get("tool"), str) and isinstance(c.get("arguments", {}), dict)
            for c in solution):
        bad = "solution is not a non-empty list of {tool, arguments} calls"
    elif not isinstance(check, dict) or not ({"answer", "state"} & set(check)):
        bad = "check is neither {answer: ...} nor {state: ...}"
    elif "answer" in check and not (isinstance(check["answer"], dict)
                                    and isinstance(check["answer"].get("step"), int)
                                    and isinstance(check["answer"].get("path"), str)):
        bad = "answer check needs {step: K, path: P}"
    if bad is not None:
        return Proposal(str(prompt or ""), [], {}, source, malformed=bad, raw=item)
    calls = [{"tool": c["tool"], "arguments": dict(c.get("arguments") or {})} for c in solution]
    if "answer" in check:
        chk: dict[str, Any] = {"answer": {"step": check["answer"]["step"], "path": check["answer"]["path"]}}
    else:
        state = check["state"]
        chk = {"state": state if isinstance(state, list) else [state]}
    return Proposal(prompt.strip(), calls, chk, source, tags=tuple(f"tool:{t}" for t in sorted({c["tool"]
                                                                                             for c in calls})),
                    raw=item)


class LLMProposer:
    """Proposals from any OpenAI-compatible chat-completions endpoint (the settings of ``policy=openai``), shown the
    servers' tools and resources and a few already-kept tasks.

    Args:
        model, base_url, api_key, temperature, max_tokens, timeout, retries: As :class:`~mcp_gym.policies.OpenAIPolicy`.
        batch: Tasks asked for per request.
        rounds: Most requests.
        examples: Kept tasks shown per request.
        system_prompt, prompt: The proposer's messages (``None``: :data:`DEFAULT_PROPOSER_SYSTEM`,
            :data:`DEFAULT_PROPOSER_PROMPT`; ``{tools}``, ``{resources}``, ``{examples}``, ``{count}`` are filled).
    """

    def __init__(self, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 temperature: float = 0.7, max_tokens: int | None = 4096, timeout: float = 120.0, retries: int = 3,
                 batch: int = 8, rounds: int = 20, examples: int = 3, system_prompt: str | None = None,
                 prompt: str | None = None) -> None:
        from mcp_gym.policies import OpenAIPolicy

        self.client = OpenAIPolicy(model, base_url, api_key, temperature=temperature, max_tokens=max_tokens,
                                   system_prompt=None, tool_choice=None, timeout=timeout, retries=retries,
                                   send_seed=True)
        self.batch, self.rounds, self.examples = int(batch), int(rounds), int(examples)
        self.system_prompt = system_prompt or DEFAULT_PROPOSER_SYSTEM
        self.prompt = prompt or DEFAULT_PROPOSER_PROMPT

    def messages(self, env: Any, kept: Sequence[Any]) -> list[dict[str, Any]]:
        """The request's messages: the tools, resources and the last kept tasks."""
        tools = [{"name": e.name, "description": e.tool.description or "", "inputSchema": e.input_schema}
                 for e in env.tools]
        resources = []
        for conn in env.host.connections.values():
            try:
                resources += [{"uri": str(r.uri), "name": r.name, "description": r.description or ""}
                              for r in env.runtime.call(conn.list_resources, timeout=env.call_timeout)]
            except Exception:  # noqa: BLE001 - a server without resources
                continue
        shown = [{"prompt": t.prompt, "solution": [dict(c) for c in t.solution],
                  "check": ({"answer": "(from the results)"} if t.answer is not None else {"state": t.grader})}
                 for t in list(kept)[-self.examples:]] if self.examples else []
        user = self.prompt.format(tools=json.dumps(tools, ensure_ascii=False, indent=1),
                                  resources=json.dumps(resources, ensure_ascii=False) if resources else "(none)",
                                  examples=json.dumps(shown, ensure_ascii=False, indent=1) if shown else "(none yet)",
                                  count=self.batch)
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]

    def proposals(self, env: Any, kept: Sequence[Any], *, seed: int = 0) -> Iterator[Proposal]:
        """Ask for proposals, round after round (``kept`` grows as the caller keeps tasks)."""
        servers_started(env.reset(seed=0)[1])  # the servers' tools, listed
        for r in range(self.rounds):
            message = env.runtime.call(self.client.complete, self.messages(env, kept), [], seed + r)
            yield from parse_proposals(str(message.get("content") or ""))

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aclose()
