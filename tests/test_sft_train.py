"""SFT exports through TRL's shipped chat templates and a 2-step SFTTrainer run (needs the [train] extra).

The tokenizer is built here (a small byte-level BPE trained on the rendered examples) and the model is a randomly
initialised 2-layer Qwen2: nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pytest

from mcp_gym import sft
from mcp_gym.envs import BUNDLED_ENVS

pytestmark = pytest.mark.train

trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from test_sft import record_oracle, tool_calls  # noqa: E402 - after the skips


@pytest.fixture(autouse=True, scope="module")
def offline() -> Iterator[None]:
    """No Hub access: HF_HUB_OFFLINE=1, also where the libraries read it at import time."""
    import huggingface_hub.constants

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        mp.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        yield


TEMPLATES = ("qwen2_5", "qwen3", "llama3_1")
ARGUMENT_KEY = {"qwen2_5": "arguments", "qwen3": "arguments", "llama3_1": "parameters"}
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",  # Qwen
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
]


def trl_template(name: str) -> str:
    """A chat template shipped with the installed TRL."""
    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")


def render(tokenizer: Any, example: dict[str, Any], template: str, **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(example["messages"], tools=example["tools"], chat_template=template,
                                         tokenize=False, **kwargs)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_oracle(tmp_path_factory.mktemp("oracle") / "run")


@pytest.fixture(scope="module")
def exported(run: Path, tmp_path_factory: pytest.TempPathFactory) -> datasets.Dataset:
    """The oracle episodes of every bundled env, exported as Parquet and loaded back."""
    out = tmp_path_factory.mktemp("sft") / "data"
    sft.export(run, out)
    return datasets.load_dataset("parquet", data_files=str(out / "data" / "*.parquet"), split="train",
                                 cache_dir=str(out.parent / "hf"))


@pytest.fixture(scope="module")
def tokenizer(exported: datasets.Dataset) -> Any:
    """A byte-level BPE tokenizer trained on the examples rendered by all three templates (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")))
    corpus = [render(plain, ex, trl_template(t)) for ex in exported for t in TEMPLATES]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=2048, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|begin_of_text|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")


@pytest.mark.parametrize("name", TEMPLATES)
def test_trl_templates_render_arguments_as_json_objects(exported: datasets.Dataset, tokenizer: Any,
                                                        name: str) -> None:
    template = trl_template(name)
    key = ARGUMENT_KEY[name]
    # Every bundled env, Maze too: its oracle unlocks a door, a tool that appears mid-episode (the reset's tools, the
    # change told in the messages: test_a_tools_note_renders_where_the_model_was_told)
    assert {ex["env_id"] for ex in exported} == {f"mcp_gym/{n}-v0" for n in BUNDLED_ENVS}
    for ex in exported:
        text = render(tokenizer, ex, template)
        for tool in ex["tools"]:
            assert f'"name": "{tool["function"]["name"]}"' in text
        calls = tool_calls(ex["messages"])
        assert calls
        for call in calls:
            name_, args = call["function"]["name"], call["function"]["arguments"]
            assert isinstance(args, dict)
            assert f'"name": "{name_}", "{key}": {json.dumps(args, ensure_ascii=False)}' in text
            assert json.dumps(json.dumps(args, ensure_ascii=False), ensure_ascii=False) not in text
        for m in ex["messages"]:
            if m["role"] == "tool" and name != "llama3_1":  # llama3_1 renders tool output with tojson
                assert m["content"] in text
        if ex["final_answer"] is not None:
            assert ex["final_answer"] in text.rsplit("assistant", 1)[1]
        assert tokenizer(text)["input_ids"]


@pytest.mark.parametrize("name", ["qwen2_5", "qwen3"])
def test_a_tools_note_renders_where_the_model_was_told(exported: datasets.Dataset, tokenizer: Any, name: str) -> None:
    """Maze's `unlock` appears mid-episode: the rendered example lists the reset's tools in its header (no `unlock`)
    and shows the tools note, with `unlock`'s schema, inside the tool message that answered the move to the key."""
    noted = [ex for ex in exported if any("[tools changed]" in (m.get("content") or "") for m in ex["messages"])]
    assert noted and {ex["env_id"] for ex in noted} == {"mcp_gym/Maze-v0"}
    for ex in noted:
        assert "unlock" not in {t["function"]["name"] for t in ex["tools"]}
        text = render(tokenizer, ex, trl_template(name))
        header, rest = text.split("<|im_start|>user", 1)
        assert '"name": "move"' in header and '"name": "unlock"' not in header
        (note,) = [m for m in ex["messages"] if "[tools changed]" in (m.get("content") or "")]
        assert note["role"] == "tool" and '"name": "unlock"' in note["content"]
        assert note["content"] in rest and rest.index(note["content"]) < rest.index('"name": "unlock", "arguments"')


@pytest.mark.parametrize("name", ["qwen2_5", "llama3_1"])
def test_string_arguments_would_be_double_encoded(exported: datasets.Dataset, tokenizer: Any, name: str) -> None:
    """The control: the same example with arguments as a JSON string renders them double-encoded."""
    ex = exported[0]
    args = tool_calls(ex["messages"])[0]["function"]["arguments"]
    messages = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.dumps(args)}}
                                     for c in m["tool_calls"]]} if m.get("tool_calls") else m
                for m in ex["messages"]]
    text = render(tokenizer, {**ex, "messages": messages}, trl_template(name))
    assert json.dumps(json.dumps(args)) in text


def test_submit_as_tool_call_renders(run: Path, tokenizer: Any) -> None:
    ds = sft.build(run, final_answer="tool_call", layout="prompt_completion")
    for ex in ds:
        for name in TEMPLATES:
            text = render(tokenizer, {**ex, "messages": ex["prompt"] + ex["completion"]}, trl_template(name))
            if ex["final_answer"] is not None:
                assert f'"name": "submit", "{ARGUMENT_KEY[name]}": {json.dumps({"answer": ex["final_answer"]})}' in text


@pytest.mark.parametrize("name", ["qwen2_5", "qwen3"])
def test_sft_trainer_two_steps_assistant_only(exported: datasets.Dataset, tokenizer: Any, tmp_path: Path,
                                              name: str) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import SFTConfig, SFTTrainer

    t0 = time.perf_counter()
    tokenizer.chat_template = trl_template(name)  # SFTTrainer swaps in TRL's training variant (generation markers)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    model = Qwen2ForCausalLM(config)
    args = SFTConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=1, learning_rate=1e-3,
                     assistant_only_loss=True, report_to=[], logging_steps=1, save_strategy="no", use_cpu=True,
                     max_length=None, activation_checkpointing=False, bf16=False, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=exported, processing_class=tokenizer)

    # The loss covers the assistant turns (tool calls with object arguments, final answers), never tool output.
    assert len(trainer.train_dataset) == len(exported)
    for row, source in zip(trainer.train_dataset, exported, strict=True):
        trained = tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"], strict=True)
                                    if label != -100])
        for call in tool_calls(source["messages"]):
            assert json.dumps(call["function"]["arguments"], ensure_ascii=False) in trained
        for m in source["messages"]:
            if m["role"] == "tool" and len(m["content"]) > 40:
                assert m["content"] not in trained
        if source["final_answer"] is not None:  # the episode ends with the submit call, trained on too
            submit = json.dumps({"name": "submit", "arguments": {"answer": source["final_answer"]}}, ensure_ascii=False)
            assert submit in trained and trained.rstrip().endswith("</tool_call><|im_end|>")

    result = trainer.train()
    assert result.global_step == 2
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 2 and all(math.isfinite(float(loss)) and float(loss) > 0 for loss in losses)
    print(f"SFTTrainer smoke ({name}): {time.perf_counter() - t0:.1f} s")
