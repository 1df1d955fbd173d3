"""The TRL GRPO adapter: tool methods generated from MCP schemas, reset(**row), get_reward(); and the CPU example."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

from mcp_gym import trl
from mcp_gym.trl import (
    MCPToolEnvironment,
    environment_factory,
    prepare_tokenizer,
    schema_to_annotation,
    split_google_docstring,
    task_dataset,
    tool_method,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def counter_cls() -> type[MCPToolEnvironment]:
    return environment_factory("Counter")


def tool_members(cls: type) -> list[str]:
    """What TRL treats as tools: class-level functions other than reset/get_reward and private ones."""
    return [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def test_schema_to_annotation() -> None:
    assert schema_to_annotation({"type": "string"}) is str
    assert schema_to_annotation({"type": "integer", "minimum": 0}) is int
    assert schema_to_annotation({"type": "number"}) is float
    assert schema_to_annotation({"type": "boolean"}) is bool
    assert schema_to_annotation({"type": "array", "items": {"type": "integer"}}) == list[int]
    assert schema_to_annotation({"type": "array"}) is list
    assert schema_to_annotation({"type": "object"}) is dict
    assert schema_to_annotation({"type": "object", "additionalProperties": {"type": "number"}}) == dict[str, float]
    assert schema_to_annotation({"enum": ["up", "down"], "type": "string"}) == Literal["up", "down"]
    assert schema_to_annotation({"const": 3}) == Literal[3]
    assert schema_to_annotation({"anyOf": [{"type": "string"}, {"type": "null"}]}) == typing.Optional[str]  # noqa: UP045
    assert schema_to_annotation({"type": ["integer", "string"]}) == typing.Union[int, str]  # noqa: UP007
    assert schema_to_annotation({"$ref": "#/$defs/X"}) is Any
    assert schema_to_annotation({}) is Any


def test_split_google_docstring() -> None:
    summary, args, returns = split_google_docstring(
        "Create a note.\n\n    Args:\n        title: The title.\n            Unique.\n        tags: Labels.\n\n"
        "    Returns the note.\n    Returns:\n        the stored note\n    Example: create_note('a')")
    assert summary.startswith("Create a note.") and "Returns the note." in summary
    assert "Example -" in summary and "Args:" not in summary
    assert args == {"title": "The title. Unique.", "tags": "Labels."}
    assert returns == "the stored note"


def test_counter_class_has_class_level_tool_methods(counter_cls: type[MCPToolEnvironment]) -> None:
    assert counter_cls.__name__ == "CounterEnvironment" and issubclass(counter_cls, MCPToolEnvironment)
    assert tool_members(counter_cls) == ["add", "get_count", "submit"]
    sig = inspect.signature(counter_cls.add)
    assert list(sig.parameters) == ["self", "amount"]
    assert sig.parameters["amount"].annotation is int and sig.return_annotation is str
    assert typing.get_type_hints(counter_cls.add) == {"amount": int, "return": str}
    doc = inspect.getdoc(counter_cls.add)
    assert doc.startswith("Add `amount` (between -5 and 5) to the counter.")
    assert "\nArgs:\n    amount: How much to add, -5..5 (min -5; max 5)\n" in doc
    assert list(inspect.signature(counter_cls.get_count).parameters) == ["self"]
    assert inspect.signature(counter_cls.submit).parameters["answer"].annotation is str


@pytest.mark.extras  # transformers (the [train] extra) builds the schemas
def test_transformers_builds_the_tool_schemas(counter_cls: type[MCPToolEnvironment]) -> None:
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    env = counter_cls()
    try:
        schema = get_json_schema(env.add)  # TRL passes bound methods
        assert schema["function"]["name"] == "add"
        assert schema["function"]["parameters"] == {
            "type": "object", "required": ["amount"],
            "properties": {"amount": {"type": "integer", "description": "How much to add, -5..5 (min -5; max 5)"}},
        }
        assert [s["function"]["name"] for s in counter_cls.openai_tools] == ["add", "get_count", "submit"]
    finally:
        env._close()
    for name in ("Notes", "Maze", "SQL", "Files"):  # every bundled catalogue converts
        cls = environment_factory(name)
        assert len(cls.openai_tools) == len(tool_members(cls)) >= 3
        for m in tool_members(cls):
            get_json_schema(getattr(cls, m))
    maze = environment_factory("Maze").openai_tools[0]["function"]
    assert maze["parameters"]["properties"]["direction"]["enum"] == ["up", "down", "left", "right"]
    notes = environment_factory("Notes").openai_tools[0]["function"]
    assert notes["parameters"]["properties"]["title"]["description"].startswith("Unique title of the note")


def test_episode_through_the_methods(counter_cls: type[MCPToolEnvironment]) -> None:
    env = counter_cls()
    try:
        prompt = [{"role": "user", "content": env.env.tasks[0].prompt}]  # counter-0000: target 9
        extra = env.reset(prompt=prompt, task_id="counter-0000")
        assert extra == "\n\n[resource counter://state]\ncount=0 target=9"  # the prompt already has the task
        assert env.get_reward() == 0.0
        out = env.add(amount=5)
        assert '"count": 5' in out and "count=5 target=9" in out
        assert "maximum of 5" in env.add(amount=7)  # invalid arguments come back as text
        assert env.add(4).count('"done": true') == 1
        assert env.get_reward() == pytest.approx(0.99) and env.done
        assert env.submit("9").startswith("Error: the episode is over")
        assert env.add(amount=1, extra=2).startswith("Error: the episode is over")
        with pytest.raises(TypeError):
            env.add(1, 2)  # a positional call is code's, not a model's
        # A dataset without task_id: the prompt selects the task; an empty prompt draws one and returns it.
        assert env.reset(prompt=[{"role": "user", "content": env.env.tasks[1].prompt}]).startswith("\n\n[resource")
        assert env.env.task.id == "counter-0001"
        text = env.reset(prompt=[{"role": "user", "content": ""}])
        assert text.startswith("Use the counter tools") and "[resource counter://state]" in text
        env.submit("0")
        assert env.done and env.last_info["termination"] == "submit"
    finally:
        env._close()


def test_a_models_bad_call_gets_the_envs_answer_as_in_eval(counter_cls: type[MCPToolEnvironment]) -> None:
    """A call missing an argument, with an extra one, or of a wrong type reaches the env as TRL passes it (keywords):
    the tool message is the env's own text, the one ``mcp-gym eval``'s chat view shows, and the step is counted; before,
    a missing or extra argument raised ``TypeError`` in the method and TRL showed the model
    ``{'error': "missing a required argument: 'amount'"}`` without an env step."""
    from mcp_gym.chat import ChatView
    from mcp_gym.envs import make_env

    env, direct = counter_cls(), make_env("Counter")
    try:
        env.reset(task_id="counter-0000")
        obs, _ = direct.reset(options={"task_id": "counter-0000"})
        view = ChatView(obs["task"], obs["resources"])
        for k, arguments in enumerate(({}, {"amount": 1, "extra": 2}, {"amount": "x"}, {"amuont": 2})):
            text = env.add(**arguments)
            obs, *_ = direct.step({"tool": "add", "arguments": arguments})
            assert text == view.tool_result(f"call_{k}", "add", obs["result"], obs["resources"])["content"]
            assert env.env.steps == direct.steps == k + 1
        assert env.last_info["error"]["argument"] == "amount" and "'amount' is required" in text
    finally:
        env._close()
        direct.close()


def test_an_unknown_tool_gets_the_envs_answer_as_in_eval(counter_cls: type[MCPToolEnvironment]) -> None:
    """The fast cover of test_grpo_trainer_answers_an_unknown_tool_as_eval_does: the tool dict mcp_gym.trl.GRPOTrainer
    gives TRL's loop sends a name the class lacks to the env (its error text, a counted step), not TRL's
    ``{'error': 'Tool nope not found.'}``."""
    from mcp_gym.envs import make_env

    env, direct = counter_cls(), make_env("Counter")
    try:
        env.reset(task_id="counter-0000")
        direct.reset(options={"task_id": "counter-0000"})
        tools = trl._EnvTools({"add": env.add}, env, {"fetch": None})
        assert "nope" in tools and "add" in tools and "fetch" not in tools  # an async tool stays TRL's
        obs, _, _, _, info = direct.step({"tool": "nope", "arguments": {"x": 1}})
        assert tools["nope"](x=1) == obs["result"] == "Error: unknown tool 'nope' (available: add, get_count, submit)"
        assert env.env.steps == direct.steps == 1 and env.last_info["error"] == info["error"]
    finally:
        env._close()
        direct.close()


def test_a_tasks_tools_the_class_does_not_offer_are_named() -> None:
    """Per-task tools (BFCL): the class offers its probe task's tools, which TRL shows the model for every row; a
    task offering more says so in one ``UserWarning`` at reset (the call still runs); the probe task's own tools say
    nothing."""
    import warnings

    from episodes import per_task_tools_env

    cls = environment_factory(per_task_tools_env, probe_task="a")
    assert tool_members(cls) == ["base", "submit"]
    env = cls()
    try:
        with pytest.warns(UserWarning, match=r"PertaskEnvironment offers the tools its probe task listed; this "
                                             r"episode's task offers extra too, which the model is not shown"):
            env.reset(task_id="b")
        assert env._call_tool("extra", {}) == "extra"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            env.reset(task_id="a")
    finally:
        env._close()
    assert tool_members(environment_factory(per_task_tools_env, probe_task="b")) == ["base", "extra", "submit"]


def test_reward_modes_and_options() -> None:
    cls = environment_factory("Counter", reward="verifier", tools=["add"], include_submit=False,
                              show_resources=False, class_name="Cnt")
    assert cls.__name__ == "Cnt" and tool_members(cls) == ["add"]
    env = cls()
    try:
        assert env.reset(task_id="counter-0001") == "Use the counter tools to make the counter reach exactly 4, " \
                                                    "then submit the count."
        assert env.get_reward() == 0.0  # graded on the state, without submit
        assert env.add(amount=4).endswith("}")  # no resource block
        assert env.get_reward() == 1.0
    finally:
        env._close()
    custom = environment_factory("Counter", reward=lambda e: float(e.steps))
    env = custom()
    try:
        env.reset(task_id="counter-0000")
        env.add(1)
        env.add(1)
        assert env.get_reward() == 2.0
    finally:
        env._close()
    with pytest.raises(ValueError, match="unknown tool"):
        environment_factory("Counter", tools=["nope"])
    with pytest.raises(ValueError):
        environment_factory("Counter", reward="best")  # type: ignore[arg-type]


@pytest.mark.extras  # transformers (the [train] extra) builds the schemas
def test_tool_method_edge_cases() -> None:
    """Names that are not identifiers, keywords, optional/nullable parameters, defaults."""
    schema = {
        "type": "object",
        "properties": {
            "from": {"type": "string", "description": "Start."},
            "max-count": {"type": "integer", "default": 10},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
            "mode": {"enum": ["a", "b"]},
            "limit": {"type": "integer"},
        },
        "required": ["mode", "from"],
    }
    trl._RENAMED_SAID.discard("get-items")
    with pytest.warns(UserWarning, match=r"tool 'get-items' shows the model its arguments 'from' as 'from_', "
                      r"'max-count' as 'max_count'"):
        method, spec = tool_method("get-items", "Get items.\n\nArgs:\n    limit: At most this many.", schema)
    assert spec.method_name == "get_items" and method.__name__ == "get-items"  # the model sees the env's name
    params = inspect.signature(method).parameters
    assert list(params) == ["self", "mode", "from_", "max_count", "tags", "limit"]
    assert params["max_count"].default == 10 and params["tags"].default is None and params["limit"].default is None
    assert params["mode"].annotation == Literal["a", "b"]
    assert params["tags"].annotation == typing.Optional[list[str]]  # noqa: UP045
    doc = method.__doc__
    assert "from_: Start. (JSON name 'from')" in doc and "limit: At most this many." in doc
    assert "max_count: max-count (default 10; JSON name 'max-count')" in doc

    calls: list[tuple[str, dict[str, Any]]] = []

    class Fake:
        def _call_tool(self, tool: str, arguments: dict[str, Any]) -> str:
            calls.append((tool, arguments))
            return "ok"

    assert method(Fake(), mode="a", from_="x", tags=None, limit=None) == "ok"
    assert calls[-1] == ("get-items", {"mode": "a", "from": "x", "tags": None})  # nullable None is sent
    method(Fake(), "b", "y", 3)
    assert calls[-1] == ("get-items", {"mode": "b", "from": "y", "max-count": 3})
    reserved, reserved_spec = tool_method("reset", "", {"type": "object"})
    assert reserved.__name__ == "reset" and reserved_spec.method_name == "reset_"
    hidden, spec = tool_method("_secret", "", {"type": "object"})
    assert not spec.method_name.startswith("_") and hidden.__name__ == "_secret"
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    assert get_json_schema(method)["function"]["name"] == "get-items"
    props = get_json_schema(method)["function"]["parameters"]
    assert props["required"] == ["mode", "from_"]
    assert props["properties"]["mode"]["enum"] == ["a", "b"]


def test_task_dataset() -> None:
    pytest.importorskip("datasets")
    ds = task_dataset("Counter", "train", system_prompt="Be brief.", limit=5)
    assert ds.column_names == ["prompt", "task_id"] and len(ds) == 5
    assert ds[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert ds[0]["prompt"][1]["content"].startswith("Use the counter tools")
    assert all(tid.startswith("counter-") for tid in ds["task_id"])


@pytest.mark.train
def test_grpo_example_trains_a_tiny_model(tmp_path: Path) -> None:
    """The CPU GRPO example: SFT warm-up so the tiny model calls tools, then GRPO steps through TRL's tool loop."""
    pytest.importorskip("trl")
    pytest.importorskip("torch")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(ROOT / "scripts" / "examples" / "grpo_trl.py"), "--steps", "2", "--sft-warmup", "60",
           "--max-completion-length", "96", "--output-dir", str(tmp_path / "out")]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert len(steps) == 2, proc.stdout
    calls = [float(ln.split("tool calls/rollout")[1].split()[0]) for ln in steps]
    assert max(calls) > 0, f"the warmed-up model never called a tool:\n{proc.stdout}"
    assert "2 GRPO steps in" in proc.stdout
    assert "| 2/2 [" in proc.stderr  # TRL's progress bar of the GRPO steps
    # a last step whose rollouts all scored alike (zero advantage, zero loss) is said to be expected
    assert ("(std 0.000)" in steps[-1]) == ("are expected here" in proc.stdout), proc.stdout


# A compact Hermes-style chat template TRL does not ship (as scripts/examples/sft_from_scratch.py writes its own).
HERMES_TEMPLATE = """{% for m in messages %}<|im_start|>{{ 'user' if m.role == 'tool' else m.role }}
{% if m.role == 'tool' %}<tool_response>
{{ m.content }}
</tool_response>{% else %}{{ m.content or '' }}{% for c in m.tool_calls or [] %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}{% for t in tools or [] %}{% endfor %}"""


def hermes_tokenizer() -> Any:
    """A byte-level BPE tokenizer with HERMES_TEMPLATE, built in code (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([HERMES_TEMPLATE, '{"name": "add", "arguments": {"amount": 3}}'] * 4, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = HERMES_TEMPLATE
    return tok


@pytest.mark.train
def test_prepare_tokenizer_lets_grpo_run_tools_with_an_unknown_template(tmp_path: Path) -> None:
    """TRL sets a tool-call parser only for the chat templates it ships; prepare_tokenizer derives one from how the
    template renders a call, so GRPOTrainer accepts the tokenizer and the generated calls parse."""
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl.chat_template_utils import add_response_schema, parse_response

    tok = hermes_tokenizer()
    bpe = tok.backend_tokenizer
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(tok)  # what GRPOTrainer calls without a parser
    assert prepare_tokenizer(tok) is tok
    reply = '<tool_call>\n{"name": "add", "arguments": {"amount": 3}}\n</tool_call><|im_end|>'
    prefix = tok.apply_chat_template([{"role": "user", "content": "go"}], add_generation_prompt=True, return_dict=False)
    parsed = parse_response(tok, tok(reply)["input_ids"], prefix=prefix)
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "add", "arguments": {"amount": 3}}}]
    text = parse_response(tok, tok("no call here<|im_end|>")["input_ids"], prefix=prefix)
    assert text.get("content") == "no call here" and not text.get("tool_calls")

    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], max_steps=1,
                          num_generations=2, per_device_train_batch_size=2, max_completion_length=16)
    trainer = trl.GRPOTrainer(model=model, processing_class=tok, args=args, environment_factory=environment_factory(
        "Counter", reward="verifier"), train_dataset=task_dataset("Counter", "train", limit=2))
    assert trainer.processing_class.response_template is not None

    bad = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    bad.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(ValueError, match="does not write Hermes"):
        prepare_tokenizer(bad)


@pytest.mark.train
def test_grpo_trainer_ends_each_rollout_where_its_episode_ends(tmp_path: Path) -> None:
    """TRL's tool loop lets the model reply again after the call that ends the episode (here every reply submits, so
    it calls until max_tool_calling_iterations); mcp_gym.trl.GRPOTrainer ends the rollout at the ending call: one
    call and one generation per rollout, the completion stops at that call, and the reward is the env's grade."""
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import mcp_gym.trl

    tok = prepare_tokenizer(hermes_tokenizer())
    reply = tok('<tool_call>\n{"name": "submit", "arguments": {"answer": "9"}}\n</tool_call><|im_end|>')["input_ids"]

    def run(base: type) -> tuple[Any, list[int]]:
        generations: list[int] = []

        class Scripted(base):  # type: ignore[misc, valid-type]  # the model's replies, scripted: always submit
            def _generate_single_turn(self, prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
                generations.append(len(prompt_ids))
                return [list(reply) for _ in prompt_ids], None

        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        args = trl.GRPOConfig(output_dir=str(tmp_path / base.__module__), use_cpu=True, bf16=False, report_to=[],
                              max_steps=1, logging_steps=1, num_generations=2, per_device_train_batch_size=2,
                              max_completion_length=4096, max_tool_calling_iterations=3, disable_tqdm=True)
        trainer = Scripted(model=model, processing_class=tok, args=args, train_dataset=task_dataset(
            "Counter", "train", limit=1), environment_factory=environment_factory("Counter", reward="verifier"))
        trainer.train()
        for env in (e for pool in trainer._environment_pool.values() for e in pool):
            env._close()
        return trainer.state.log_history[0], generations

    log, generations = run(trl.GRPOTrainer)  # TRL's loop: the call, then 3 more rounds after the episode ended
    assert log["tools/call_frequency"] == 3 and generations == [2, 2, 2, 2], (log, generations)
    log, generations = run(mcp_gym.trl.GRPOTrainer)
    assert log["tools/call_frequency"] == 1 and generations == [2], (log, generations)
    assert log["completions/mean_length"] == len(reply) and log["completions/clipped_ratio"] == 0, log


@pytest.mark.train
def test_grpo_trainer_answers_an_unknown_tool_as_eval_does(tmp_path: Path) -> None:
    """A model's call of a tool the class does not offer: TRL's own loop shows ``{'error': 'Tool nope not found.'}``
    and the env never sees it; in mcp_gym.trl.GRPOTrainer the env answers with the text ``mcp-gym eval`` shows and
    counts the step. Fast cover: test_an_unknown_tool_gets_the_envs_answer_as_in_eval."""
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import mcp_gym.trl

    tok = prepare_tokenizer(hermes_tokenizer())
    reply = tok('<tool_call>\n{"name": "nope", "arguments": {"x": 1}}\n</tool_call><|im_end|>')["input_ids"]
    prompts: list[str] = []

    class Scripted(mcp_gym.trl.GRPOTrainer):  # type: ignore[misc, name-defined]  # the model: always calls nope
        def _generate_single_turn(self, prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
            prompts.extend(tok.decode(p) for p in prompt_ids)
            return [list(reply) for _ in prompt_ids], None

    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to=[], max_steps=1,
                          logging_steps=1, num_generations=2, per_device_train_batch_size=2,
                          max_completion_length=4096, max_tool_calling_iterations=1, disable_tqdm=True)
    trainer = Scripted(model=model, processing_class=tok, args=args, train_dataset=task_dataset(
        "Counter", "train", limit=1), environment_factory=environment_factory("Counter"))
    trainer.train()
    envs = [e for pool in trainer._environment_pool.values() for e in pool]
    try:
        answered = [p for p in prompts if "<tool_response>" in p]
        assert len(answered) == 2 and all(
            "Error: unknown tool 'nope' (available: add, get_count, submit)" in p and "not found" not in p
            for p in answered), answered
        assert all(e.env.steps == 1 and e.last_info["error"]["kind"] == "unknown_tool" for e in envs)
    finally:
        for e in envs:
            e._close()
