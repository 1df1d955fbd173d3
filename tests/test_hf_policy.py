"""policy=hf: a local transformers causal LM as a policy, built in code (a tiny random Qwen2 and a BPE tokenizer trained
here: nothing is downloaded). The prompt it feeds the model is the chat view rendered by the chat template, exactly as
the SFT export renders the recorded episode."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_gym import sft
from mcp_gym.cli import main
from mcp_gym.client.runtime import default_runtime
from mcp_gym.envs import make_env
from mcp_gym.policies import HFPolicy, make_policy
from mcp_gym.recording import RecordTrajectories, load
from mcp_gym.vector import EpisodeSpec, VectorMCPEnv

pytestmark = pytest.mark.train

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
trl = pytest.importorskip("trl")

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(autouse=True, scope="module")
def offline() -> Iterator[None]:
    import huggingface_hub.constants

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="module")
def template() -> str:
    """TRL's Qwen 2.5 chat template (renders ``tools``, Hermes ``<tool_call>`` blocks and ``<tool_response>``)."""
    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tokenizer(template: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [template, '<tool_call>\n{"name": "add", "arguments": {"amount": 3}}\n</tool_call>',
              "Use the counter tools to make the counter reach exactly 4. [resource counter://state]\ncount=0"] * 4
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = template
    return tok


def tiny_model(tokenizer: Any) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    return Qwen2ForCausalLM(config)


class Force(transformers.LogitsProcessor):
    """Forces the tokens of ``target`` from position ``start`` on (a scripted reply through the real ``generate``)."""

    def __init__(self, target: list[int], start: int) -> None:
        self.target, self.start = target, start

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        k = input_ids.shape[1] - self.start
        if k < len(self.target):
            scores = torch.full_like(scores, float("-inf"))
            scores[:, self.target[k]] = 0.0
        return scores


def run_episodes(policy: Any, name: str, task_ids: list[str], run: Path, max_steps: int) -> list[Any]:
    results: list[Any] = []

    async def go() -> None:
        async with VectorMCPEnv(lambda i: RecordTrajectories(make_env(name, max_steps=max_steps), run), 2) as vec:
            await vec.run(policy, [EpisodeSpec(f"{t}#0", t, k) for k, t in enumerate(task_ids)],
                          on_result=results.append)

    default_runtime().call(go)
    return results


def test_random_model_runs_episodes_end_to_end(tokenizer: Any, tmp_path: Path) -> None:
    policy = HFPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6)
    results = run_episodes(policy, "Counter", ["counter-0000", "counter-0001", "counter-0002"], tmp_path, 3)
    assert len(results) == 3 and all(r.termination in ("max_steps", "submit", "done") for r in results), results
    rec = load(tmp_path)
    assert set(rec.episodes["policy"]) == {"hf:Qwen2ForCausalLM"}
    for step in rec.steps:
        assert isinstance(step["raw_text"], str) and step["parse_status"] is not None and step["turn"] is not None
    assert [r.length for r in results] == [3, 3, 3] or any(r.termination != "max_steps" for r in results)


def test_prompt_is_the_chat_view_through_the_template(tokenizer: Any, template: str, tmp_path: Path) -> None:
    """Scripted replies (forced through the real generate): no call, a call, submit. The token ids fed to the model
    for the last reply equal the exported example rendered by the same template."""
    model = tiny_model(tokenizer)
    replies = ["Let me think.", '<tool_call>\n{"name": "get_count", "arguments": {}}\n</tool_call>',
               'Done.\n<tool_call>\n{"name": "submit", "arguments": {"answer": "0"}}\n</tool_call>']
    fed: list[list[int]] = []
    real_generate = model.generate

    def generate(input_ids: Any, attention_mask: Any = None, **kwargs: Any) -> Any:
        fed.append(input_ids[0].tolist())
        target = tokenizer(replies[len(fed) - 1], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        processors = transformers.LogitsProcessorList([Force(target, input_ids.shape[1])])
        return real_generate(input_ids=input_ids, attention_mask=attention_mask, logits_processor=processors,
                             **kwargs)

    model.generate = generate
    policy = make_policy("hf", model=model, tokenizer=tokenizer, max_new_tokens=64, name="hf:scripted")
    (result,) = run_episodes(policy, "Counter", ["counter-0001"], tmp_path, 10)
    assert result.termination == "submit" and len(fed) == 3
    steps = load(tmp_path).steps
    assert steps["parse_status"] == ["no_tool_call", "ok", "ok"] and steps["turn"] == [0, 1, 2]
    assert steps["raw_text"] == replies and steps["assistant_content"] == ["Let me think.", "", "Done."]

    (ex,) = sft.build(tmp_path, success_only=False, drop_errors=False)
    prompt = tokenizer.apply_chat_template(ex["messages"][:-1], tools=ex["tools"], add_generation_prompt=True,
                                           tokenize=False, chat_template=template)
    assert tokenizer(prompt, add_special_tokens=False)["input_ids"] == fed[-1]
    assert prompt == policy.render(ex["messages"][:-1], ex["tools"])
    assert "[resource counter://state]\ncount=0 target=4" in prompt and '"name": "submit"' in prompt
    assert ex["messages"][-1]["tool_calls"][0]["function"] == {"name": "submit", "arguments": {"answer": "0"}}
    assert [m["role"] for m in ex["messages"]] == ["system", "user", "assistant", "user", "assistant", "tool",
                                                   "assistant"]


def test_hf_policy_from_a_directory_and_the_cli(tokenizer: Any, tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny-qwen"
    tiny_model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    policy = make_policy("hf", model=str(model_dir), max_new_tokens=4, temperature=0.7)
    assert policy.name == "hf:tiny-qwen"
    request = ([{"role": "user", "content": "Reach 4."}], [])
    assert policy.generate(*request, seed=3) == policy.generate(*request, seed=3)  # sampling seeded per reply
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        make_policy("hf", model=str(tmp_path / "missing"))
    out = tmp_path / "eval"
    code = main(["eval", "env=counter", "env.transport=inprocess", "env.max_steps=2", "policy=hf",
                 f"policy.model={model_dir}", "policy.max_new_tokens=4", "samples=1", "episodes=2", f"out={out}",
                 "launcher.num_envs=1", "launcher.progress=false", "plots=false"])
    assert code == 0
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert summary["episodes"] == 2
    assert set(load(out).episodes["policy"]) == {"hf:tiny-qwen"}


def test_a_model_retrained_into_the_same_path_is_another_run(tokenizer: Any, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The path of a local model names no version: an eval rerun after retraining into the same directory must not
    report the old model's episodes as the new one's (it refuses, naming the model's files); unchanged, it resumes."""
    model_dir = tmp_path / "tiny-qwen"
    tiny_model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "eval"
    args = ["eval", "env=counter", "env.transport=inprocess", "env.max_steps=2", "policy=hf",
            f"policy.model={model_dir}", "policy.max_new_tokens=4", "samples=1", "episodes=2", f"out={out}",
            "launcher.num_envs=1", "launcher.progress=false", "plots=false"]
    assert main(args) == 0
    before = (out / "report" / "results.json").read_text()
    assert main(args) == 0  # the same model: the same run, resumed
    capsys.readouterr()
    with torch.no_grad():  # "retrain": other weights, saved to the same path
        model = tiny_model(tokenizer)
        model.model.embed_tokens.weight.mul_(-1.0)
    model.save_pretrained(model_dir)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "policy.model_files:" in err and "out=" in err, err
    assert (out / "report" / "results.json").read_text() == before


def test_a_template_without_tools_is_refused(tokenizer: Any) -> None:
    plain = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    policy = HFPolicy(tiny_model(tokenizer), tokenizer, chat_template=plain, max_new_tokens=2)
    tools = [{"type": "function", "function": {"name": "add", "description": "", "parameters": {"type": "object"}}}]
    with pytest.raises(ValueError, match=r"does not render the tools \['add'\]"):
        policy.render([{"role": "user", "content": "hi"}], tools)


def test_no_call_end_stops_the_episode_at_a_reply_without_a_call(tokenizer: Any, tmp_path: Path) -> None:
    """``no_call="end"`` (TRL's tool-loop rule) ends the episode at the first reply without a call, graded as it
    stands; the default gives feedback and lets the model go on until ``max_steps``."""
    model = tiny_model(tokenizer)
    reply = tokenizer("I am not calling anything", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def scripted(no_call: str) -> HFPolicy:
        policy = HFPolicy(model, tokenizer, max_new_tokens=len(reply), no_call=no_call)
        prompt = policy.render  # force the scripted reply right after the prompt, whatever its length

        def generate(messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int = 0) -> str:
            start = len(tokenizer(prompt(messages, tools), add_special_tokens=False)["input_ids"])
            policy.generate_kwargs = {"logits_processor": [Force(reply, start)]}
            return HFPolicy.generate(policy, messages, tools, seed)

        policy.generate = generate  # type: ignore[method-assign]
        return policy

    ended = run_episodes(scripted("end"), "Counter", ["counter-0000", "counter-0001"], tmp_path / "end", 4)
    assert [(r.length, r.termination, r.success) for r in ended] == [(1, "submit", False)] * 2, ended
    fed_back = run_episodes(scripted("feedback"), "Counter", ["counter-0000"], tmp_path / "feedback", 4)
    assert [(r.length, r.termination) for r in fed_back] == [(4, "max_steps")], fed_back
    with pytest.raises(ValueError, match="no_call must be 'feedback' or 'end'"):
        HFPolicy(model, tokenizer, no_call="stop")
