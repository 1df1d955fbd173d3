"""Policies that act in an :class:`~mcp_gym.env.MCPEnv`: ``random``, ``oracle``, ``openai`` (any LLM server) and
``hf`` (a local ``transformers`` model).

A :class:`Policy` is shared by all concurrent episodes; per episode it hands out an :class:`Agent` that keeps that
episode's state (an RNG, a position in the reference solution, a chat history) and answers ``await agent.act(obs,
info)`` with an action ``{"tool", "arguments"}``, optionally with ``raw_text`` (the model output the action came from)
and ``parse_status`` (see :mod:`mcp_gym.parsing`). The recording wrapper stores and strips those two keys.

* :class:`RandomPolicy` samples the env's action space (seeded per episode: reproducible at any concurrency).
* :class:`OraclePolicy` replays the task's reference solution.
* :class:`NoopPolicy` submits an empty answer at once (the do-nothing baseline).
* :class:`OpenAIPolicy` asks an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, Ollama, OpenAI, ...) with
  the env's tools; tool calls come from the response's ``tool_calls`` or, failing that, from the text (Hermes
  ``<tool_call>``, bare JSON). A reply without a usable call becomes an invalid action -- an error observation for
  the episode, with the parse error told to the model -- never an exception.
* :class:`HFPolicy` runs a local ``transformers`` causal LM (its chat template with ``tools=``, ``generate``).

Both chat policies build their conversations with :class:`mcp_gym.chat.ChatView`, the view the SFT export
reproduces: the model ends an episode by calling ``submit``; plain text is a reply without a usable call.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import anyio
import httpx2 as httpx

from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT, ChatView, assistant_content, env_tools, to_wire
from mcp_gym.parsing import ParseResult, ToolCall, parse_message, parse_tool_calls

NoCall = Literal["feedback", "end"]

__all__ = [
    "Policy",
    "Agent",
    "RandomPolicy",
    "OraclePolicy",
    "NoopPolicy",
    "OpenAIPolicy",
    "ChatPolicy",
    "HFPolicy",
    "make_policy",
]

class Agent:
    """One episode of a policy: ``await act(obs, info)`` returns the next action."""

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        """The next action for the observation and info the env just returned."""
        raise NotImplementedError


class Policy:
    """Makes one :class:`Agent` per episode; :attr:`name` is recorded with every episode."""

    name: str = "policy"

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        """The agent of a new episode, after ``env.reset`` returned ``obs`` and ``info`` (``env`` unwrapped)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release resources (HTTP connections, ...)."""


# -- random -----------------------------------------------------------------------------------------------------------
class _RandomAgent(Agent):
    def __init__(self, env: Any, fixed: Mapping[str, Any]) -> None:
        self.space = env.action_space
        self.fixed = fixed

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        return self.space.sample(fixed=self.fixed)


class RandomPolicy(Policy):
    """Random tool calls: ``env.action_space.sample(fixed=fixed)``, the space seeded with the episode's seed.

    Args:
        fixed: argument name -> value for every tool declaring that argument (e.g. ``{"repo_path": "/abs/repo"}``;
            in jobs ``+policy.fixed.repo_path=/abs/repo``); see :meth:`mcp_gym.spaces.ToolCallSpace.sample`.
    """

    name = "random"

    def __init__(self, fixed: Mapping[str, Any] | None = None) -> None:
        self.fixed = {str(k): v for k, v in (fixed or {}).items()}

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        env.action_space.seed(seed)
        return _RandomAgent(env, self.fixed)


# -- oracle -----------------------------------------------------------------------------------------------------------
class _OracleAgent(Agent):
    def __init__(self, task: Any) -> None:
        if getattr(task, "turns", ()):  # a conversation: each turn's calls, then submit of the turn's answer
            self.calls = deque(call for calls, answer in task.turn_plan()
                               for call in (*calls, {"tool": "submit", "arguments": {"answer": _text(answer)}}))
        else:
            self.calls = deque(dict(c) for c in getattr(task, "solution", ()) or ())
        self.answer = getattr(task, "answer", None)

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        if self.calls:
            return self.calls.popleft()
        return {"tool": "submit", "arguments": {"answer": self.answer or ""}}


def _text(answer: Any) -> str:
    """An answer as ``submit`` sends it: a string as it is, ``None`` as ``""``, anything else as JSON."""
    if answer is None or isinstance(answer, str):
        return answer or ""
    return json.dumps(answer, ensure_ascii=False)


class OraclePolicy(Policy):
    """The task's reference solution (``task.solution``), then ``submit(task.answer)`` if it did not end; in a
    multi-turn task, each turn's ``solution`` then ``submit`` of the turn's ``answer``, turn by turn."""

    name = "oracle"

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        return _OracleAgent(env.task)


# -- noop -------------------------------------------------------------------------------------------------------------
class _NoopAgent(Agent):
    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        return {"tool": "submit", "arguments": {"answer": ""}}


class NoopPolicy(Policy):
    """The do-nothing baseline: ``submit`` an empty answer at once, calling no tool (a benchmark whose tasks this
    passes grades the starting state, not the agent)."""

    name = "noop"

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        return _NoopAgent()


# -- chat models ------------------------------------------------------------------------------------------------------
class _ChatAgent(Agent):
    """One conversation in the chat view (:class:`mcp_gym.chat.ChatView`): one model request per reply, one env step
    per call of the reply, and a feedback turn for a reply without a usable call (an invalid action for the env)."""

    def __init__(self, policy: ChatPolicy, env: Any, obs: Mapping[str, Any], seed: int,
                 info: Mapping[str, Any] | None = None) -> None:
        self.policy = policy
        self.user_turn = int((info or {}).get("turn") or 0)  # a conversation's user turn (0 for a single-turn task)
        self.multi_turn = "turns" in (info or {})
        self.env = env
        self.seed = seed
        self.view = ChatView(str(obs.get("task", "")), obs.get("resources") or {}, system_prompt=policy.system_prompt,
                             notice=str(obs.get("result") or ""), tools=env_tools(env))
        self.pending: deque[tuple[ToolCall, str]] = deque()  # calls of the last reply not yet executed (+ their ids)
        self.reply: ParseResult | None = None  # the last reply, parsed
        self.current: tuple[ToolCall, str] | None = None  # the call just executed, None if the reply had none
        self.extras: dict[str, Any] = {}

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        if self.reply is not None:
            self._observe(obs, info)
        if not self.pending:
            turn = self.view.turn
            self.reply = await self.policy.respond(self.view.messages, env_tools(self.env), self.seed)
            self.seed += 1
            content = assistant_content(self.reply)
            ids = self.view.reply(content, self.reply.calls)
            self.pending.extend(zip(self.reply.calls, ids, strict=True))
            self.extras = {"raw_text": self.reply.raw_text, "parse_status": self.reply.status, "turn": turn,
                           "assistant_content": content}
            if not self.reply.calls:
                self.current = None
                if self.policy.no_call == "end":  # TRL's tool loop rule: the episode (a conversation: the turn) ends
                    answer = content if self.multi_turn else ""  # a conversation's turn reply is its text
                    return {"tool": "submit", "arguments": {"answer": answer}, **self.extras}
                return {"tool": "", "arguments": {}, **self.extras}
        self.current = self.pending.popleft()
        return {**self.current[0].to_action(), **self.extras}

    def _observe(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> None:
        """Append what the last action produced: a tool turn, feedback on a reply without a usable call, or (a
        ``submit`` that ended a user turn) the assistant's reply of that turn and the next user message."""
        resources = obs.get("resources") or {}
        tools = env_tools(self.env) if info.get("tools_changed") else None  # the view notes a change (tools_note)
        turn = int(info.get("turn") or 0)
        if turn != self.user_turn:
            self.user_turn = turn
            self.view.end_turn(str(obs.get("task", "")), resources, id=self.current[1] if self.current else None,
                               answer=info.get("turn_answer"), tools=tools)
            self.pending.clear()  # calls the reply made after its submit are not run in the next turn
            return
        if self.current is None:
            self.view.no_call(self.reply.status if self.reply is not None else None, resources, tools)
        else:
            call, id = self.current
            self.view.tool_result(id, call.name, str(obs.get("result", "")), resources, tools)


class ChatPolicy(Policy):
    """A chat model acting through the chat view; subclasses answer :meth:`respond`."""

    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    no_call: NoCall = "feedback"
    """A reply without a usable call: ``"feedback"`` (the chat view's feedback turn; the step counts toward
    ``max_steps``) or ``"end"`` (the episode ends with ``submit`` of no answer, graded as it stands: the rule of TRL's
    tool loop, which stops a rollout at a reply without a call)."""

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        return _ChatAgent(self, env, obs, seed, info)

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> ParseResult:
        """The model's next reply to the conversation (chat-view messages, arguments as objects), parsed."""
        raise NotImplementedError


class OpenAIPolicy(ChatPolicy):
    """An LLM behind an OpenAI-compatible ``/chat/completions`` endpoint, called with the env's tools.

    Args:
        model: Model name (default ``$OPENAI_MODEL``).
        base_url: API base, e.g. ``http://127.0.0.1:8000/v1`` for vLLM (default ``$OPENAI_BASE_URL`` or OpenAI's).
        api_key: Bearer token (default ``$OPENAI_API_KEY``; local servers usually need none).
        temperature: Sampling temperature.
        max_tokens: Completion budget per turn (``None``: the server's default).
        system_prompt: First message of every conversation (``None``: none).
        tool_choice: Sent as is (``"auto"``; ``None`` leaves it out).
        timeout: Seconds per HTTP request.
        retries: Retries on connection errors, 429 and 5xx answers (exponential back-off).
        max_concurrency: Most requests in flight at once (``None``: no limit).
        send_seed: Send a per-episode ``seed`` (reproducible sampling where the server supports it).
        extra_body: Extra JSON fields of every request (e.g. ``{"top_k": 20}`` for vLLM).
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        temperature: float = 0.0,
        max_tokens: int | None = 1024,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        tool_choice: str | None = "auto",
        timeout: float = 120.0,
        retries: int = 3,
        max_concurrency: int | None = 64,
        send_seed: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model or os.environ.get("OPENAI_MODEL") or "gpt-4o-mini"
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.name = f"openai:{self.model}"
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.tool_choice = tool_choice
        self.retries = retries
        self.send_seed = send_seed
        self.extra_body = dict(extra_body or {})
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)
        self._limit = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> ParseResult:
        """Send the conversation (in wire form) and parse the assistant message."""
        return parse_message(await self.complete(to_wire(messages), tools, seed))

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> dict[str, Any]:
        """One chat completion; returns the assistant message (raises ``httpx2.HTTPError`` once retries are spent)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature,
                                **self.extra_body}
        if tools:  # a request without tools (a task proposer's) leaves the key out: OpenAI refuses an empty list
            body["tools"] = tools
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.send_seed:
            body["seed"] = seed
        for attempt in range(self.retries + 1):
            try:
                if self._limit is not None:
                    async with self._limit:
                        response = await self._client.post("/chat/completions", json=body)
                else:
                    response = await self._client.post("/chat/completions", json=body)
                if response.status_code == 429 or response.status_code >= 500:
                    response.raise_for_status()
                break
            except httpx.TransportError as e:
                if attempt == self.retries:
                    # name what was tried and how to change it (the transport's message alone names neither)
                    raise type(e)(f"could not reach the chat-completions endpoint {self.base_url}/chat/completions "
                                  f"({type(e).__name__}: {e}); is the server up? Set base_url (policy.base_url=... "
                                  "for mcp-gym jobs, or $OPENAI_BASE_URL)", request=e.request) from e
                await anyio.sleep(min(30.0, 0.5 * 2**attempt))
            except httpx.HTTPStatusError:
                if attempt == self.retries:
                    raise
                await anyio.sleep(min(30.0, 0.5 * 2**attempt))
        response.raise_for_status()
        data = response.json()
        try:
            return dict(data["choices"][0]["message"])
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"unexpected chat-completions answer: {json.dumps(data)[:300]}") from e

    async def aclose(self) -> None:
        await self._client.aclose()


# -- a local transformers model ---------------------------------------------------------------------------------------
class HFPolicy(ChatPolicy):
    """A local ``transformers`` causal LM: the chat view rendered with its chat template (``tools=`` included),
    ``generate``, and the reply parsed by :func:`mcp_gym.parsing.parse_tool_calls`. Nothing is downloaded.

    Generation runs in a worker thread, one reply at a time (concurrent episodes queue for the model).

    Args:
        model: A local model directory (``AutoModelForCausalLM``, loaded with ``local_files_only``) or a loaded model.
        tokenizer: The tokenizer (default: loaded from ``model``'s directory). Its chat template must render ``tools``.
        max_new_tokens: Generation budget per reply.
        temperature: ``0``: greedy decoding; above: sampling, seeded per reply from the episode's seed.
        top_p: Nucleus sampling mass (with ``temperature > 0``).
        system_prompt: First message of every conversation (``None``: none).
        chat_template: A Jinja chat template to use instead of the tokenizer's.
        device: Where the model runs (default: where it is, ``cpu`` for a directory).
        name: Policy name recorded with every episode (default ``hf:<directory name or model class>``).
        generate_kwargs: Extra keyword arguments of ``model.generate`` (e.g. ``repetition_penalty``).
        no_call: A reply without a usable call: ``"feedback"`` or ``"end"`` (see :attr:`ChatPolicy.no_call`).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Any,
        tokenizer: Any | None = None,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        chat_template: str | None = None,
        device: str | None = None,
        name: str | None = None,
        generate_kwargs: Mapping[str, Any] | None = None,
        no_call: NoCall = "feedback",
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if no_call not in ("feedback", "end"):
            raise ValueError(f"policy=hf: no_call must be 'feedback' or 'end', not {no_call!r}")

        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not os.path.isdir(path):
                raise FileNotFoundError(f"policy=hf: no local model directory {path!r} (nothing is downloaded)")
            default_name = f"hf:{os.path.basename(os.path.normpath(path))}"
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
            model.to(device or "cpu")
        else:
            default_name = f"hf:{type(model).__name__}"
            if tokenizer is None:
                raise ValueError("policy=hf: pass the tokenizer with an in-memory model")
            if device is not None:
                model.to(device)
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = AutoTokenizer.from_pretrained(os.fspath(tokenizer), local_files_only=True)
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ValueError("policy=hf: the tokenizer has no chat template (pass chat_template=...)")
        if max_new_tokens < 1:
            raise ValueError(f"policy=hf: max_new_tokens must be >= 1, not {max_new_tokens}")
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or default_name
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.system_prompt = system_prompt
        self.chat_template = chat_template
        self.generate_kwargs = dict(generate_kwargs or {})
        self.no_call = no_call
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
        self._stop = {int(t) for t in eos_ids if t is not None}
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._stop, default=0)
        self._lock = threading.Lock()

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The prompt text of a request: the messages and tools through the chat template, with the generation
        prompt (raises ``ValueError`` if the template leaves a tool out)."""
        prompt = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                                    chat_template=self.chat_template)
        missing = [t["function"]["name"] for t in tools if t["function"]["name"] not in prompt]
        if missing:  # a template without tool support would leave the model blind to its tools
            raise ValueError(f"policy=hf: the chat template does not render the tools {missing} (use a template with "
                             "tool support, e.g. chat_template=...)")
        return prompt

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> ParseResult:
        """Generate the next reply in a worker thread and parse it."""
        text = await anyio.to_thread.run_sync(self.generate, messages, tools, seed)
        return parse_tool_calls(text)

    def generate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int = 0) -> str:
        """The model's reply text to a request (blocking; special tokens kept, generation stopped at EOS)."""
        import torch

        prompt = self.render(messages, tools)
        enc = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(self.model.device)
        options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": self._pad,
                                   "eos_token_id": sorted(self._stop) or None}
        if self.temperature > 0:
            options.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self._lock, torch.inference_mode():
            if self.temperature > 0:
                torch.manual_seed(seed)
            out = self.model.generate(**enc, **options, **self.generate_kwargs)
        new = out[0, enc["input_ids"].shape[1]:].tolist()
        for k, t in enumerate(new):
            if t in self._stop:
                new = new[:k]
                break
        return self.tokenizer.decode(new, skip_special_tokens=False)


# -- construction from config -----------------------------------------------------------------------------------------
POLICIES: dict[str, type[Policy]] = {"random": RandomPolicy, "oracle": OraclePolicy, "noop": NoopPolicy,
                                     "openai": OpenAIPolicy, "hf": HFPolicy}
"""Policy kinds by config name."""


def make_policy(kind: str, **options: Any) -> Policy:
    """A policy by kind (``random``, ``oracle``, ``noop``, ``openai``, ``hf``) with its options (the ``policy``
    config group)."""
    try:
        cls = POLICIES[kind]
    except KeyError:
        raise ValueError(f"unknown policy {kind!r}; choose one of {', '.join(POLICIES)}") from None
    return cls(**options)
