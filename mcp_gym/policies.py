"""Policies that act in an :class:`~mcp_gym.env.MCPEnv`: ``random``, ``oracle`` and ``openai`` (any LLM server).

A :class:`Policy` is shared by all concurrent episodes; per episode it hands out an :class:`Agent` that keeps that
episode's state (an RNG, a position in the reference solution, a chat history) and answers ``await agent.act(obs,
info)`` with an action ``{"tool", "arguments"}``, optionally with ``raw_text`` (the model output the action came from)
and ``parse_status`` (see :mod:`mcp_gym.parsing`). The recording wrapper stores and strips those two keys.

* :class:`RandomPolicy` samples the env's action space (seeded per episode: reproducible at any concurrency).
* :class:`OraclePolicy` replays the task's reference solution.
* :class:`OpenAIPolicy` asks an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, Ollama, OpenAI, ...) with
  the env's tools; tool calls come from the response's ``tool_calls`` or, failing that, from the text (Hermes
  ``<tool_call>``, bare JSON). A reply without a usable call becomes an invalid action -- an error observation for
  the episode, with the parse error told to the model -- never an exception.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Mapping
from typing import Any

import anyio
import httpx2 as httpx

from mcp_gym.parsing import ParseResult, ToolCall, parse_message
from mcp_gym.textenv import DEFAULT_SYSTEM_PROMPT, render_resources

__all__ = [
    "Policy",
    "Agent",
    "RandomPolicy",
    "OraclePolicy",
    "OpenAIPolicy",
    "make_policy",
    "DEFAULT_SYSTEM_PROMPT",
]

_NO_CALL_FEEDBACK = (
    "Your reply did not contain a valid tool call ({error}). Reply with exactly one tool call, or call `submit` with "
    "your final answer."
)


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
    def __init__(self, env: Any) -> None:
        self.space = env.action_space

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        return self.space.sample()


class RandomPolicy(Policy):
    """Uniformly random tool calls: ``env.action_space.sample()``, the space seeded with the episode's seed."""

    name = "random"

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        env.action_space.seed(seed)
        return _RandomAgent(env)


# -- oracle -----------------------------------------------------------------------------------------------------------
class _OracleAgent(Agent):
    def __init__(self, task: Any) -> None:
        self.calls = deque(dict(c) for c in getattr(task, "solution", ()) or ())
        self.answer = getattr(task, "answer", None)

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        if self.calls:
            return self.calls.popleft()
        return {"tool": "submit", "arguments": {"answer": self.answer or ""}}


class OraclePolicy(Policy):
    """The task's reference solution (``task.solution``), then ``submit(task.answer)`` if it did not end."""

    name = "oracle"

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        return _OracleAgent(env.task)


# -- OpenAI-compatible chat completions -------------------------------------------------------------------------------
class _ChatAgent(Agent):
    """One conversation: the task as the user turn, one assistant turn per model call, one tool turn per step."""

    def __init__(self, policy: OpenAIPolicy, env: Any, obs: Mapping[str, Any], seed: int) -> None:
        self.policy = policy
        self.env = env
        self.seed = seed
        self.messages: list[dict[str, Any]] = []
        if policy.system_prompt:
            self.messages.append({"role": "system", "content": policy.system_prompt})
        self.messages.append({"role": "user", "content": _join(str(obs.get("task", "")),
                                                                 render_resources(obs.get("resources") or {}))})
        self.resources = dict(obs.get("resources") or {})
        self.pending: deque[tuple[ToolCall, str]] = deque()  # calls of the last reply not yet executed (+ their ids)
        self.reply: ParseResult | None = None  # the last reply, parsed
        self.current: tuple[ToolCall, str] | None = None  # the call just executed, None if the reply had none

    async def act(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
        if self.reply is not None:
            self._observe(obs)
        if not self.pending:
            message = await self.policy.complete(self.messages, self.env.openai_tools(), self.seed)
            self.seed += 1
            self.reply = parse_message(message)
            self._remember_reply(message, self.reply)
            if not self.reply.calls:
                self.current = None
                return {"tool": "", "arguments": {}, "raw_text": self.reply.raw_text,
                        "parse_status": self.reply.status}
        assert self.reply is not None
        self.current = self.pending.popleft()
        return {**self.current[0].to_action(), "raw_text": self.reply.raw_text, "parse_status": self.reply.status}

    def _remember_reply(self, message: Mapping[str, Any], parsed: ParseResult) -> None:
        """Append the assistant turn (its calls in wire form, with ids) and queue the calls."""
        turn: dict[str, Any] = {"role": "assistant", "content": (parsed.content if parsed.calls else parsed.raw_text)
                                or None}
        if isinstance(message.get("reasoning_content"), str):
            turn["reasoning_content"] = message["reasoning_content"]
        if parsed.calls:
            ids = [c.id or f"call_{len(self.messages)}_{i}" for i, c in enumerate(parsed.calls)]
            turn["tool_calls"] = [{**c.to_openai(), "id": i} for c, i in zip(parsed.calls, ids, strict=True)]
            self.pending.extend(zip(parsed.calls, ids, strict=True))
        self.messages.append(turn)

    def _observe(self, obs: Mapping[str, Any]) -> None:
        """Append what the last action produced: a tool turn, or feedback on an unparseable reply."""
        resources = dict(obs.get("resources") or {})
        text = _join(str(obs.get("result", "")), render_resources(resources, self.resources))
        self.resources = resources
        if self.current is None:
            error = self.reply.error if self.reply is not None else None
            self.messages.append({"role": "user", "content": _NO_CALL_FEEDBACK.format(error=error)})
        else:
            call, call_id = self.current
            self.messages.append({"role": "tool", "tool_call_id": call_id, "name": call.name, "content": text})


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


class OpenAIPolicy(Policy):
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

    def agent(self, env: Any, obs: Mapping[str, Any], info: Mapping[str, Any], seed: int) -> Agent:
        return _ChatAgent(self, env, obs, seed)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> dict[str, Any]:
        """One chat completion; returns the assistant message (raises ``httpx2.HTTPError`` once retries are spent)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "tools": tools,
                                "temperature": self.temperature, **self.extra_body}
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
            except (httpx.TransportError, httpx.HTTPStatusError):
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


# -- construction from config -----------------------------------------------------------------------------------------
POLICIES: dict[str, type[Policy]] = {"random": RandomPolicy, "oracle": OraclePolicy, "openai": OpenAIPolicy}
"""Policy kinds by config name."""


def make_policy(kind: str, **options: Any) -> Policy:
    """A policy by kind (``random``, ``oracle``, ``openai``) with its options (e.g. the ``policy`` config group)."""
    try:
        cls = POLICIES[kind]
    except KeyError:
        raise ValueError(f"unknown policy {kind!r}; choose one of {', '.join(POLICIES)}") from None
    return cls(**options)
