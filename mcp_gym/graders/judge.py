"""The LLM judge: any OpenAI-compatible chat-completions endpoint grades against the task's rubric."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_gym.graders.base import Grade, GradeContext, Grader, GraderError

__all__ = ["JudgeSettings", "DEFAULT_JUDGE_SYSTEM", "DEFAULT_JUDGE_PROMPT"]


DEFAULT_JUDGE_SYSTEM = (
    "You grade the work of an AI agent that used tools to do a task. Judge only by the rubric and the evidence given. "
    'Reply with a single JSON object: {"verdict": "pass" or "fail", "score": a number from 0 to 1, "reasoning": '
    '"one short paragraph"}.'
)
DEFAULT_JUDGE_PROMPT = (
    "Task:\n{task}\n\nRubric:\n{rubric}\n\nReference answer (may be empty):\n{reference}\n\n"
    "The agent's tool calls and their results:\n{trajectory}\n\nThe agent's final answer:\n{answer}"
)


@dataclass
class JudgeSettings:
    """Where and how the LLM judge is asked (the ``env.judge`` config; recorded in the run's config)."""

    model: str = "gpt-4o-mini"
    base_url: str = "https://api.openai.com/v1"
    api_key: str | None = None
    system_prompt: str = DEFAULT_JUDGE_SYSTEM
    prompt: str = DEFAULT_JUDGE_PROMPT
    """Template with ``{task}``, ``{rubric}``, ``{reference}``, ``{trajectory}`` and ``{answer}`` (other braces are
    kept as they are)."""
    temperature: float = 0.0
    max_tokens: int | None = 512
    timeout: float = 60.0
    retries: int = 2
    threshold: float = 0.5
    """Score at which a reply without a verdict passes."""

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> JudgeSettings:
        """From a config mapping (``None`` values keep the defaults)."""
        known = set(cls.__dataclass_fields__)
        unknown = set(cfg or {}) - known
        if unknown:
            raise ValueError(f"judge settings: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: v for k, v in dict(cfg or {}).items() if v is not None})

    def public(self) -> dict[str, Any]:
        """The settings without the API key (what the run's config records)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "api_key"}


def _judge_reply(content: str) -> dict[str, Any]:
    """The JSON object of a judge's reply (bare, fenced, or inside text)."""
    text = content.strip()
    candidates = [text, *re.findall(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for c in candidates:
        try:
            value = json.loads(c)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise GraderError(f"the judge's reply is not a JSON verdict: {content[:300]!r}")


class JudgeGrader(Grader):
    """An LLM judge behind an OpenAI-compatible chat-completions endpoint, grading against the task's rubric."""

    kind = "judge"

    def __init__(self, name: str | None = None, rubric: str | None = None, settings: JudgeSettings | None = None,
                 **overrides: Any) -> None:
        super().__init__(name)
        base = settings or JudgeSettings()
        self.settings = JudgeSettings(**{**base.__dict__, **{k: v for k, v in overrides.items() if v is not None}})
        self.rubric = rubric

    def _messages(self, ctx: GradeContext) -> list[dict[str, str]]:
        rubric = self.rubric or ctx.task.rubric
        if not rubric:
            raise GraderError(f"task '{ctx.task.id}' has no rubric for the judge")
        steps = "\n".join(f"{i + 1}. {s.get('tool')}({json.dumps(s.get('arguments'), ensure_ascii=False)}) -> "
                          f"{str(s.get('result', ''))[:1000]}" for i, s in enumerate(ctx.transcript)) or "(none)"
        reference = ctx.task.answer if isinstance(ctx.task.answer, str) else (
            json.dumps(ctx.task.answer, ensure_ascii=False) if ctx.task.answer is not None else "")
        fields = {"task": ctx.task.prompt, "rubric": rubric, "reference": reference, "trajectory": steps,
                  "answer": ctx.answer if ctx.answer is not None else "(no answer submitted)"}
        # placeholders by plain replacement: a prompt may show JSON examples with braces
        user = re.sub(r"\{(task|rubric|reference|trajectory|answer)\}", lambda m: str(fields[m.group(1)]),
                      self.settings.prompt)
        return [{"role": "system", "content": self.settings.system_prompt}, {"role": "user", "content": user}]

    async def grade(self, ctx: GradeContext) -> Grade:
        import anyio
        import httpx2 as httpx

        s = self.settings
        body: dict[str, Any] = {"model": s.model, "messages": self._messages(ctx), "temperature": s.temperature}
        if s.max_tokens is not None:
            body["max_tokens"] = s.max_tokens
        headers = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
        url = s.base_url.rstrip("/") + "/chat/completions"
        error = ""
        async with httpx.AsyncClient(timeout=s.timeout, headers=headers) as client:
            for attempt in range(s.retries + 1):
                try:
                    response = await client.post(url, json=body)
                    if response.status_code < 500 and response.status_code != 429:
                        break
                    error = f"HTTP {response.status_code}"
                except httpx.TransportError as e:
                    error = f"{type(e).__name__}: {e}"
                    response = None
                if attempt < s.retries:
                    await anyio.sleep(min(10.0, 0.5 * 2**attempt))
            else:
                raise GraderError(f"judge {s.model} at {url} failed on task '{ctx.task.id}': {error}")
        if response.status_code != 200:
            raise GraderError(f"judge {s.model} at {url}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            content = response.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise GraderError(f"judge {s.model}: unexpected answer {response.text[:300]!r}") from None
        reply = _judge_reply(content)
        verdict = str(reply.get("verdict", "")).strip().lower() or None
        score = reply.get("score")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            score = None
        if verdict not in (None, "pass", "fail"):
            raise GraderError(f"judge {s.model}: verdict {verdict!r} is neither 'pass' nor 'fail'")
        if verdict is None and score is None:
            raise GraderError(f"judge {s.model}: the reply has neither verdict nor score: {content[:300]!r}")
        passed = verdict == "pass" if verdict is not None else float(score) >= s.threshold  # type: ignore[arg-type]
        score = float(score) if score is not None else (1.0 if passed else 0.0)
        reasoning = str(reply.get("reasoning", ""))
        return self._grade(passed, f"judge {s.model}: {verdict or f'score {score:g}'}", score, verdict=verdict,
                           judge_score=score, reasoning=reasoning, model=s.model)

    def spec(self) -> Any:
        return {**super().spec(), "rubric": self.rubric, "judge": self.settings.public()}


