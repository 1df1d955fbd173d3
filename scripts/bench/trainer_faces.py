"""What does a trainer face add per step on top of ``MCPEnv.step``? Measured side by side in one run.

Each face gets its own env over the same server (the Counter server's ``echo`` tool, over stdio and in-process) and
plays what its trainer sends: ``MCPEnv.step({"tool": "echo", ...})`` is the base; the SkyRL face
(``mcp_gym.skyrl.MCPGymTextEnv.step``) and ``TextEnvBatch.step`` (n=1) get the model's text with the same call in a
Hermes ``<tool_call>`` block, so they also parse it and build the chat view's tool message; the OpenEnv face's session
(``mcp_gym.openenv.MCPGymEnvironment.step``, what its server runs per WebSocket ``step``, without the network) gets
OpenEnv's ``CallToolAction``; the verl face's agent loop (``mcp_gym.verl.MCPGymAgentLoop.run``: a round is one
trajectory of ``--steps`` turns, a scripted model answering verl's ``server_manager.generate`` with the token ids of
the same text) also decodes the tokens and has verl's Continuous Token builder render each turn's tool message (the
chat template: verl's own work, which its tool loop does too), so its line is given with and without verl's token
work (that rendering and the merge of the model's tokens), timed per turn from the model's first answer (the
trajectory's env, reset and prompt excluded; the env's runtime is hosted on the trajectory's event loop, as
``mcp_gym.verl`` does, so a step is awaited with no thread hop; a second verl line keeps the env on a threaded runtime,
one thread hop per turn, as before the hosted runtime). Rounds interleave the sides
(the order rotates) so machine noise hits all alike; reported: median wall time per step, this process's CPU per step
(the client's own cost; over stdio the server's CPU is another process), each side's own time (its step minus the
time inside ``MCPEnv._astep``, the env's step proper: the face's parsing, chat view and layers, plus the sync face) and
the ratios to ``MCPEnv.step``: of wall and CPU time per round, and "by own time", (env step + the side's own time) /
(env step + ``MCPEnv.step``'s own time), which the noise of the env step itself (the server, the machine) does not
move. With ``--record`` every side records into a run directory (RecordTrajectories; the face with ``record_to``).

    python scripts/bench/trainer_faces.py --rounds 7 --steps 200
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime
from mcp_gym.recording import RecordTrajectories
from mcp_gym.servers.counter import make_server
from mcp_gym.textenv import TextEnvBatch

ACTION = {"tool": "echo", "arguments": {"text": "hello"}}
TEXT = '<tool_call>\n{"name": "echo", "arguments": {"text": "hello"}}\n</tool_call>'


Round = Callable[[int], dict[str, tuple[float, float, float]]]
"""A side's round of ``steps`` steps -> {line: (wall, CPU, own time) per step}."""


class Inner:
    """Wall time spent inside ``MCPEnv._astep`` (the env's step proper) of the envs a factory makes."""

    def __init__(self, make: Callable[[], MCPEnv]) -> None:
        self.make_plain = make
        self.seconds = 0.0
        self.durations: list[float] = []

    def make(self) -> MCPEnv:
        env = self.make_plain()
        step = env._astep

        async def timed(action: Any) -> Any:
            t = time.perf_counter()
            try:
                return await step(action)
            finally:
                self.durations.append(time.perf_counter() - t)
                self.seconds += self.durations[-1]

        env._astep = timed  # type: ignore[method-assign]
        return env


def stepwise(name: str, step: Callable[[], Any], inner: Inner) -> Round:
    """A round of a face stepped ``steps`` times."""

    def round(steps: int) -> dict[str, tuple[float, float, float]]:
        inner.seconds = 0.0
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            step()
        total = time.perf_counter() - t0
        return {name: (total / steps, (time.process_time() - c0) / steps, (total - inner.seconds) / steps)}

    for _ in range(20):  # warm up
        step()
    return round


class VerlRounds:
    """The verl face: each round one trajectory of ``steps`` turns (then verl's reply limit ends it), timed from the
    model's first answer to its ``steps + 1``-th request, with the time in verl's Continuous Token builder (rendering
    the tool messages, merging the model's tokens) kept apart."""

    def __init__(self, make: Callable[[], MCPEnv], record: str | None,
                 labels: tuple[str | None, ...] = ("verl agent loop turn", "  same, w/o verl's token work",
                                                   "  of which TextEnvBatch.astep"), stub: bool = False) -> None:
        import asyncio
        from pathlib import Path

        import trl
        import verl.trainer.config
        from omegaconf import OmegaConf
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
        from verl.experimental.agent_loop.agent_loop import DictConfigWrap
        from verl.workers.rollout.replica import TokenOutput

        from mcp_gym.verl import MCPGymAgentLoop

        template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        bpe.train_from_iterator([template, TEXT] * 4, trainers.BpeTrainer(
            vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                                 pad_token="<|endoftext|>")
        self.tokenizer.chat_template = template
        self.config = OmegaConf.load(Path(verl.trainer.config.__file__).parent / "_generated_ppo_trainer.yaml")
        rollout = self.config.actor_rollout_ref.rollout
        rollout.prompt_length = rollout.response_length = 10**9
        reply = [*self.tokenizer.encode(TEXT, add_special_tokens=False), self.tokenizer.eos_token_id]
        self.requests: list[tuple[float, float]] = []  # (wall, CPU) at each generate request
        requests = self.requests

        class Model:  # verl's LLM server client interface, scripted
            async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                               **kwargs: Any) -> Any:
                requests.append((time.perf_counter(), time.process_time()))
                return TokenOutput(token_ids=reply)

        self.model, self.inner, self.record, self.labels, self.stub = Model(), Inner(make), record, labels, stub
        self.spans: list[tuple[float, float]] = []  # (start, duration) of verl's token work
        self.cpu_spans: list[tuple[float, float]] = []  # (start, CPU seconds) of the same
        self.face_spans: list[tuple[float, float, float]] = []  # (start, wall, CPU) of each TextEnvBatch.astep
        self.loop_cls, self.wrap = MCPGymAgentLoop, DictConfigWrap
        self.aio = asyncio.new_event_loop()
        self.round(20)  # warm up

    def timed(self, merge: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return await merge(*args, **kwargs)
            finally:
                self.spans.append((t, time.perf_counter() - t))

        return timed

    def cpu_timed(self, work: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return work(*args, **kwargs)
            finally:
                self.cpu_spans.append((t, time.thread_time() - c))

        return timed

    def round(self, steps: int) -> dict[str, tuple[float, float, float]]:
        self.config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = steps + 1
        self.requests.clear()
        self.inner.durations.clear()
        self.spans.clear()
        self.cpu_spans.clear()
        self.face_spans.clear()
        real = TextEnvBatch.astep

        async def face_step(batch: TextEnvBatch, outputs: Any) -> Any:  # mcp-gym's whole part of a turn
            t, c = time.perf_counter(), time.process_time()
            try:
                return await real(batch, outputs)
            finally:
                self.face_spans.append((t, time.perf_counter() - t, time.process_time() - c))

        async def trajectory() -> None:  # verl makes the loop on its worker's event loop, as here
            loop = self.loop_cls(trainer_config=self.wrap(self.config), server_manager=self.model,
                                 tokenizer=self.tokenizer, processor=None, dataset_cls=None,
                                 data_config=self.wrap(self.config.data), hf_model_type="qwen2", env=self.inner.make,
                                 record_to=None if self.record is None else f"{self.record}/verl")
            if self.stub:  # verl's token work replaced by list appends: what does it do to the env's steps?
                loop.ct_merge_assistant_token, loop.ct_merge_context_msg = _stub_assistant, _stub_context
            for name in ("ct_merge_context_msg", "ct_merge_assistant_token"):  # verl's token work, timed apart
                setattr(loop, name, self.timed(getattr(loop, name)))
            builder = loop.continuous_token_builder  # ... and its CPU (it runs in verl's executor threads)
            for name in ("merge_context_tokens", "merge_assistant_tokens"):
                setattr(builder, name, self.cpu_timed(getattr(builder, name)))
            await loop.run({}, raw_prompt=[], extra_info={"seed": 0})

        TextEnvBatch.astep = face_step  # type: ignore[method-assign]
        try:
            self.aio.run_until_complete(trajectory())
        finally:
            TextEnvBatch.astep = real  # type: ignore[method-assign]
        (w0, c0), (w1, c1) = self.requests[0], self.requests[steps]
        wall, cpu, env = (w1 - w0) / steps, (c1 - c0) / steps, sum(self.inner.durations[:steps]) / steps
        render = sum(d for t, d in self.spans if t < w1) / steps  # verl's token work inside the window
        render_cpu = sum(d for t, d in self.cpu_spans if t < w1) / steps
        face = [(w, c) for t, w, c in self.face_spans if t < w1]
        face_wall, face_cpu = sum(w for w, _ in face) / steps, sum(c for _, c in face) / steps
        lines = [(wall, cpu, wall - env), (wall - render, cpu - render_cpu, wall - env - render),
                 (face_wall, face_cpu, face_wall - env)]
        return {label: line for label, line in zip(self.labels, lines, strict=True) if label is not None}

    def close(self) -> None:
        async def end() -> None:  # the runtime hosted on this loop, if any (the loop is idle between rounds)
            await (await Runtime.hosted()).aclose()

        self.aio.run_until_complete(end())
        self.aio.close()


async def _stub_assistant(ids: list[int], generated: list[int], mask: list[int], *args: Any, **kwargs: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(token_ids=ids + list(generated)), mask + [1] * len(generated), None


async def _stub_context(previous: Any, history: Any, ids: list[int], mask: list[int], *args: Any, **kwargs: Any
                        ) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(token_ids=ids + [0] * 30), mask + [0] * 30, None


def faces(make: Callable[..., MCPEnv], record: str | None) -> tuple[list[Round], list[Callable[[], None]]]:
    """The rounds of the base env and of every face here, each over its own env, and their closers."""
    out: dict[str, tuple[Callable[[], Any], Callable[[], None], Inner]] = {}
    timers = {name: Inner(make) for name in ("base", "textenv", "skyrl", "openenv")}
    base: Any = timers["base"].make() if record is None else RecordTrajectories(timers["base"].make(),
                                                                               f"{record}/mcpenv")
    base.reset(seed=0)
    out["MCPEnv.step"] = (lambda: base.step(ACTION), base.close, timers["base"])
    inner = timers["textenv"].make()
    wrapped: Any = inner if record is None else RecordTrajectories(inner, f"{record}/textenv")
    batch = TextEnvBatch([wrapped])
    batch.reset(seed=0)
    out["TextEnvBatch.step (n=1)"] = (lambda: batch.step([TEXT]), batch.close, timers["textenv"])
    try:
        from mcp_gym.skyrl import MCPGymTextEnv
    except ImportError:
        print("  (SkyRL face skipped: pip install 'mcp-gym[skyrl]')")
    else:
        sky = MCPGymTextEnv(None, {}, env=timers["skyrl"].make, record_to=None if record is None else f"{record}/skyrl")
        sky.init([])
        out["SkyRL MCPGymTextEnv.step"] = (lambda: sky.step(TEXT), sky.close, timers["skyrl"])
    try:
        from openenv.core.env_server.mcp_types import CallToolAction

        from mcp_gym.openenv import MCPGymEnvironment
    except ImportError:
        print("  (OpenEnv face skipped: pip install 'mcp-gym[openenv]')")
    else:
        session = MCPGymEnvironment(timers["openenv"].make,
                                    record_to=None if record is None else f"{record}/openenv")
        session.reset(seed=0)
        call = CallToolAction(tool_name=ACTION["tool"], arguments=ACTION["arguments"])
        out["OpenEnv session.step"] = (lambda: session.step(call), session.close, timers["openenv"])
    rounds = [stepwise(name, step, inner) for name, (step, _, inner) in out.items()]
    closers = [close for _, close, _ in out.values()]
    try:
        verl = VerlRounds(make, record)
    except ImportError as e:
        print(f"  (verl face skipped: {e}; pip install 'mcp-gym[verl]', and trl for the chat template)")
    else:
        threaded = Runtime(threaded=True)  # the env's calls hop onto its loop thread, as before hosting
        hopping = VerlRounds(lambda: make(runtime=threaded), record and f"{record}/hop",
                             ("verl turn, threaded runtime", "  same, w/o verl's token work ",
                              "  of which TextEnvBatch.astep "))
        stubbed = VerlRounds(make, record and f"{record}/stub", ("verl turn, token work stubbed", None,
                                                               "  of which TextEnvBatch.astep  "), stub=True)
        rounds += [verl.round, hopping.round, stubbed.round]
        closers += [verl.close, hopping.close, stubbed.close, threaded.close]
    return rounds, closers


def compare(label: str, make: Callable[..., MCPEnv], rounds: int, steps: int, record: str | None) -> None:
    sides, closers = faces(make, record)
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}  # per step: the side's time outside MCPEnv._astep
    for k in range(rounds):
        for side in sides[k % len(sides):] + sides[:k % len(sides)]:
            for name, (w, c, o) in side(steps).items():
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)
                own.setdefault(name, []).append(o)
    names = list(wall)
    base = names[0]
    env_step = statistics.median(w - o for name in names for w, o in zip(wall[name], own[name], strict=True))
    print(f"{label}{' (recorded)' if record else ''}: MCPEnv._astep itself {env_step * 1e6:.0f} µs/step (median)")
    for name in names:
        w, c, o = (statistics.median(x[name]) * 1e6 for x in (wall, cpu, own))
        line = f"  {name:<29} {w:6.0f} µs/step, CPU {c:6.0f}, own time {o:5.0f}"
        if name != base:
            wr = statistics.median(a / b for a, b in zip(wall[name], wall[base], strict=True))
            cr = statistics.median(a / b for a, b in zip(cpu[name], cpu[base], strict=True))
            split = (env_step + statistics.median(own[name])) / (env_step + statistics.median(own[base]))
            line += f"  ratio: wall {wr:.3f}, CPU {cr:.3f}, by own time {split:.3f}"
        print(line)
    for close in closers:
        close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--record", action="store_true", help="every side records its steps (RecordTrajectories)")
    a = p.parse_args()
    print(f"a face's step vs MCPEnv.step, median of {a.rounds} interleaved rounds x {a.steps} steps (goal: <= 1.10)")
    stdio = Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")
    server = make_server(diagnostics=True)
    with tempfile.TemporaryDirectory() as tmp:
        record = tmp if a.record else None
        compare("stdio", lambda **kw: MCPEnv({"c": stdio}, ["t"], max_steps=10**9, **kw), a.rounds, a.steps, record)
        compare("in-process", lambda **kw: MCPEnv({"c": InProcess(server)}, ["t"], max_steps=10**9, **kw), a.rounds,
                a.steps, record and f"{record}/ip")


if __name__ == "__main__":
    main()
