"""verl face (mcp_gym.verl): verl's own rollout worker (``AgentLoopWorker.generate_sequences``) runs mcp-gym agent
loops named by the rows' ``agent_name`` and loaded from its agent loop config file, with a scripted model behind verl's
LLM server client interface (``generate(prompt_ids) -> TokenOutput``: token ids of scripted replies; a tiny tokenizer
trained here with TRL's Qwen 2.5 chat template, nothing downloaded). The trajectories reach the same success and the
same recorded episode as the same replies through ``MCPEnv`` directly (the chat policy), on bundled envs and on
server-everything; the response mask is 1 exactly on the model's tokens, and the score is the env's reward."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import npm_bin
from episodes import MAZE_TEXTS, hermes, recorded_episode, run_policy

from mcp_gym import MCPEnv, Stdio, make_env

if importlib.util.find_spec("verl") is None:
    pytest.skip("needs the [verl] extra (pip install 'mcp-gym[verl]')", allow_module_level=True)
if importlib.util.find_spec("trl") is None:
    pytest.skip("TRL's Qwen 2.5 chat template (the [train] extra)", allow_module_level=True)
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

pytestmark = pytest.mark.verl


@pytest.fixture(autouse=True, scope="module")
def _verl_imported() -> None:
    """Import verl's agent loop (~7 s of CPU: torch, tensordict, ray) when this module's first test runs, not when
    pytest collects the module: an xdist worker that runs none of these tests never pays it."""
    global trl, AgentLoopWorker, DataProto, TokenOutput, mcp_verl
    import trl
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.workers.rollout.replica import TokenOutput

    import mcp_gym.verl as mcp_verl

COUNTER_TEXTS = ["Hmm.", hermes(("add", {"amount": 5})), hermes(("get_count", {})), hermes(("add", {"amount": 4}))]
SUM_TASK = {"id": "sum-3-4", "prompt": "Add 3 and 4 with the tools, then submit the sum.", "answer": "7"}
SUM_TEXTS = ['{"name": "echo", "arguments": {"message": "start"}}', "Let me add.",
             hermes(("get-sum", {"a": 3, "b": 4})), hermes(("submit", {"answer": "7"}))]


def everything_env() -> MCPEnv:
    return MCPEnv({"everything": Stdio(npm_bin("mcp-server-everything"), ["stdio"])}, [SUM_TASK], call_timeout=10.0,
                  env_id="everything")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local model directory verl's ``HFModelConfig`` loads: a BPE tokenizer trained here with TRL's Qwen 2.5 chat
    template (tools, Hermes ``<tool_call>`` blocks, ``<tool_response>``) and a tiny Qwen2 config (no weights: the
    model is scripted)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")
    corpus = [template, *MAZE_TEXTS, *COUNTER_TEXTS, *SUM_TEXTS] * 4
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = template
    path = tmp_path_factory.mktemp("model")
    tok.save_pretrained(path)
    Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, architectures=["Qwen2ForCausalLM"]).save_pretrained(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield path


class ScriptedModel:
    """verl's LLM server client interface: ``generate(request_id, prompt_ids, sampling_params)`` answers each
    trajectory (a request id) with its scripted replies in turn, as token ids ending with EOS. ``script(prompt)`` picks
    a trajectory's replies from its first prompt's text."""

    def __init__(self, tokenizer: Any, script: Callable[[str], Sequence[str]]) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.replies: dict[str, list[str]] = {}
        self.generated: dict[str, list[list[int]]] = {}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        if request_id not in self.replies:
            self.replies[request_id] = list(self.script(self.tokenizer.decode(prompt_ids)))
            self.generated[request_id] = []
        turn = len(self.generated[request_id])
        ids = [*self.tokenizer.encode(self.replies[request_id][turn], add_special_tokens=False),
               self.tokenizer.eos_token_id]
        self.generated[request_id].append(ids)
        await asyncio.sleep(0)  # a server answers later: trajectories interleave
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def rollout(model_dir: Path, tmp_path: Path, entries: list[dict[str, Any]], rows: list[dict[str, Any]],
            script: Callable[[str], Sequence[str]], **rollout_options: Any) -> tuple[Any, ScriptedModel]:
    """One ``generate_sequences`` of verl's ``AgentLoopWorker`` on ``rows``, the agent loops loaded from a config
    file with ``entries``. Returns (the output ``DataProto``, the scripted model)."""
    import verl.trainer.config

    config = OmegaConf.load(Path(verl.trainer.config.__file__).parent / "_generated_ppo_trainer.yaml")
    config.actor_rollout_ref.model.path = str(model_dir)
    rollout_config = config.actor_rollout_ref.rollout
    rollout_config.name = "vllm"
    rollout_config.prompt_length, rollout_config.response_length = 4096, 4096
    rollout_config.calculate_log_probs = True
    for key, value in rollout_options.items():
        OmegaConf.update(rollout_config, key, value)
    (tmp_path / "agent_loops.yaml").write_text(yaml.safe_dump(entries), encoding="utf-8")
    rollout_config.agent.agent_loop_config_path = str(tmp_path / "agent_loops.yaml")
    worker = AgentLoopWorker(config, llm_client=None)
    model = ScriptedModel(worker.tokenizer, script)
    worker.llm_client = model
    batch = DataProto.from_dict(non_tensors={k: np.array([r[k] for r in rows] if k != "raw_prompt" else
                                                         _objects([r["prompt"] for r in rows]), dtype=object)
                                             for k in ("raw_prompt", "agent_name", "extra_info")})
    return asyncio.run(worker.generate_sequences(batch)), model


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def check_tokens(out: Any, model: ScriptedModel, i: int = 0) -> tuple[list[int], list[int]]:
    """Trajectory ``i``'s response: the tokens under mask 1 are exactly the model's, in order; the others (mask 0)
    are the env's. Returns (response token ids, mask) without padding."""
    length = int(out.batch["attention_mask"][i, out.batch["prompts"].shape[1]:].sum())
    response = out.batch["responses"][i, :length].tolist()
    mask = out.batch["response_mask"][i, :length].tolist()
    replies = [[t for g in generated for t in g] for generated in model.generated.values()]
    assert [t for t, m in zip(response, mask, strict=True) if m] in replies
    assert mask[0] == 1 and mask[-1] == 1  # starts and ends with the model's tokens
    return response, mask


@pytest.mark.parametrize(("name", "task_id", "texts"), [("Maze", "maze-5x5-0000", MAZE_TEXTS),
                                                         ("Counter", "counter-0000", COUNTER_TEXTS)])
def test_bundled_env_plays_and_records_like_mcpenv(name: str, task_id: str, texts: list[str], model_dir: Path,
                                                   tmp_path: Path) -> None:
    policy = run_policy(lambda: make_env(name), task_id, texts, tmp_path / "direct")
    entry = mcp_verl.agent_loop_entry(f"mcp_gym_{name.lower()}", name, record_to=str(tmp_path / "verl"))
    (row,) = [r for r in mcp_verl.task_rows(name, None, agent_name=entry["name"]) if r["extra_info"]["task_id"] ==
              task_id]
    out, model = rollout(model_dir, tmp_path, [entry], [{**row, "extra_info": {**row["extra_info"], "seed": 5}}],
                         lambda prompt: texts)
    direct, verl = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "verl")
    assert verl == direct  # messages, tool calls, rewards, success, termination, raw texts and turns
    response, mask = check_tokens(out, model)
    # The score is the env's: the episode return on the last response token (verl's rm_scores).
    assert float(out.batch["rm_scores"][0].sum()) == pytest.approx(direct["total_reward"])
    assert out.non_tensor_batch["success"][0] == direct["success"] and (name == "Counter") == direct["success"]
    assert out.non_tensor_batch["termination"][0] == direct["termination"]
    assert len(out.non_tensor_batch["turn_scores"][0]) == len(texts)
    assert out.non_tensor_batch["__num_turns__"][0] == 2 * len(texts)  # the replies, the answers but the last, 1
    # The tokens are the chat template's rendering of the chat view the chat policy saw, the model's replies in it.
    tokenizer = model.tokenizer
    prompt_ids = out.batch["prompts"][0][out.batch["attention_mask"][0, :out.batch["prompts"].shape[1]].bool()]
    messages, tools = policy.requests[0]
    assert tokenizer.decode(prompt_ids.tolist()) == tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False)
    env_text = tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])
    last = policy.requests[-1][0]
    for message in last[len(messages):]:
        if message["role"] != "assistant":
            assert message["content"] in env_text


@pytest.mark.thirdparty
def test_server_everything_plays_and_records_like_mcpenv(model_dir: Path, tmp_path: Path) -> None:
    run_policy(everything_env, SUM_TASK["id"], SUM_TEXTS, tmp_path / "direct")
    entry = mcp_verl.agent_loop_entry("mcp_gym_everything", f"{__name__}:everything_env",
                                      record_to=str(tmp_path / "verl"))
    row = {"prompt": [{"role": "user", "content": SUM_TASK["prompt"]}], "agent_name": entry["name"],
           "extra_info": {"seed": 5}}  # the task picked by its prompt
    out, model = rollout(model_dir, tmp_path, [entry], [row], lambda prompt: SUM_TEXTS)
    direct, verl = recorded_episode(tmp_path / "direct"), recorded_episode(tmp_path / "verl")
    assert verl == direct
    assert direct["success"] is True and out.non_tensor_batch["success"][0] is True
    assert [s["tool"] for s in verl["steps"]] == ["echo", "", "get-sum", "submit"]
    response, mask = check_tokens(out, model)
    assert "The sum of 3 and 4 is 7." in model.tokenizer.decode([t for t, m in zip(response, mask, strict=True)
                                                                 if not m])
    assert float(out.batch["rm_scores"][0].sum()) == pytest.approx(direct["total_reward"])


def test_batch_of_trajectories_and_the_default_loop(model_dir: Path, tmp_path: Path) -> None:
    """Many rows in one ``generate_sequences``, run concurrently, each its own episode: the default ``mcp_gym`` loop
    (env named by the row) next to a configured one; a reply limit cuts an episode, recorded as cut."""
    from mcp_gym.envs import load_env_tasks
    from mcp_gym.parsing import ToolCall, format_tool_calls
    from mcp_gym.recording import load

    tasks = load_env_tasks("Counter", None, 0)[:4]
    solutions = {t.prompt: [format_tool_calls([ToolCall(c["tool"], c["arguments"])]) for c in t.solution]
                 for t in tasks}

    def script(prompt: str) -> list[str]:
        (texts,) = [v for k, v in solutions.items() if k in prompt]
        return texts

    rows = mcp_verl.task_rows("Counter", None, agent_name="mcp_gym_counter")[:2] + [
        {**r, "agent_name": "mcp_gym"} for r in mcp_verl.task_rows("Counter", None)[2:4]]
    entry = mcp_verl.agent_loop_entry("mcp_gym_counter", "Counter", record_to=str(tmp_path / "run"))
    out, model = rollout(model_dir, tmp_path, [entry], rows, script)
    assert list(out.non_tensor_batch["success"]) == [True] * 4
    assert list(out.non_tensor_batch["task_id"]) == [t.id for t in tasks]
    for i in range(4):
        check_tokens(out, model, i)
    episodes = load(tmp_path / "run").episodes  # only the configured loop records
    assert sorted(episodes["task_id"]) == sorted(t.id for t in tasks[:2]) and all(episodes["success"])
    # verl's reply limit (multi_turn.max_assistant_turns) ends the episode before the env does.
    entry = mcp_verl.agent_loop_entry("mcp_gym_counter", "Counter", record_to=str(tmp_path / "cut"))
    out, _ = rollout(model_dir, tmp_path, [entry], rows[:1], lambda prompt: COUNTER_TEXTS,
                     **{"multi_turn.max_assistant_turns": 2})
    assert out.non_tensor_batch["termination"][0] == "max_turns" and out.non_tensor_batch["success"][0] is None
    episode = recorded_episode(tmp_path / "cut")
    assert (episode["termination"], episode["success"], episode["length"]) == ("max_turns", None, 2)
    # ... and its response length (rollout.response_length tokens), the response cut there.
    entry = mcp_verl.agent_loop_entry("mcp_gym_counter", "Counter", record_to=str(tmp_path / "long"))
    out, model = rollout(model_dir, tmp_path, [entry], rows[:1], lambda prompt: COUNTER_TEXTS, response_length=60)
    assert out.non_tensor_batch["termination"][0] == "max_length" and out.non_tensor_batch["success"][0] is None
    assert out.batch["responses"].shape[1] == 60 and 0 < len(out.non_tensor_batch["turn_scores"][0]) < 4
    assert recorded_episode(tmp_path / "long")["termination"] == "max_length"


MADE: list[MCPEnv] = []


def counter_env() -> MCPEnv:
    """A bundled Counter env (made without ``runtime=``), kept for the test to look at."""
    MADE.append(make_env("Counter"))
    return MADE[-1]


def test_trajectories_step_their_envs_on_verls_loop_with_no_thread_hop(model_dir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The envs' runtime is hosted on the worker's event loop (one for all its trajectories): every reset and step
    is awaited there, none is scheduled onto another thread's loop."""
    import mcp_gym.client.runtime as runtime_module
    from mcp_gym.envs import load_env_tasks
    from mcp_gym.parsing import ToolCall, format_tool_calls

    hops: list[Any] = []
    real = asyncio.run_coroutine_threadsafe

    def counted(coro: Any, loop: Any) -> Any:
        hops.append(coro)
        return real(coro, loop)

    monkeypatch.setattr(runtime_module.asyncio, "run_coroutine_threadsafe", counted)
    solutions = {t.prompt: [format_tool_calls([ToolCall(c["tool"], c["arguments"])]) for c in t.solution]
                 for t in load_env_tasks("Counter", None, 0)[:2]}
    MADE.clear()
    entry = mcp_verl.agent_loop_entry("mcp_gym_counter", f"{__name__}:counter_env")
    rows = mcp_verl.task_rows("Counter", None, agent_name=entry["name"])[:2]
    out, _ = rollout(model_dir, tmp_path, [entry], rows,
                     lambda prompt: [v for k, v in solutions.items() if k in prompt][0])
    assert list(out.non_tensor_batch["success"]) == [True, True]
    assert len(MADE) == 2 and MADE[0].runtime is MADE[1].runtime and MADE[0].runtime.mode == "hosted"
    assert MADE[0].runtime.closed  # it ended with verl's loop (asyncio.run here)
    assert hops == []


def test_bad_settings_are_named(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"agent loop 'x': unknown setting\(s\) \['recrd_to'\]"):
        mcp_verl.agent_loop_entry("x", "Counter", recrd_to="runs")
    with pytest.raises(TypeError, match="env must be a bundled env name or 'package.module:function'"):
        mcp_verl.agent_loop_entry("x", everything_env)  # type: ignore[arg-type]
    entry = {"name": "typo", "_target_": "mcp_gym.verl.MCPGymAgentLoop", "env": "Counter", "max_step": 3}
    row = {"prompt": [], "agent_name": "typo", "extra_info": {}}
    with pytest.raises(Exception, match=r"verl agent loop 'typo': unknown setting\(s\) \['max_step'\]"):
        rollout(model_dir, tmp_path, [entry], [row], lambda prompt: COUNTER_TEXTS)
    with pytest.raises(ValueError, match="verl agent loop 'mcp_gym': no env"):
        rollout(model_dir, tmp_path, [], [{**row, "agent_name": "mcp_gym"}], lambda prompt: COUNTER_TEXTS)


def test_a_tool_added_mid_trajectory_is_named_not_silently_unlisted(model_dir: Path, tmp_path: Path) -> None:
    """Maze's key reveals ``unlock``: the loop renders the first turn's tools into the prompt tokens once, so the
    trajectory says in one ``UserWarning`` and in ``extra_fields["tools_unlisted"]`` that the rendered tools lack it,
    and the tool response tells the model in the tools note (:func:`mcp_gym.chat.tools_note`), the very message eval's
    chat policy is shown; the call still runs. Fast cover: tests/test_textenv.py::test_a_tool_added_mid_episode_is_
    named_when_the_listed_tools_lack_it."""
    from mcp_gym.envs import load_env_tasks

    task = next(t for t in load_env_tasks("Maze", None, 0) if t.id == "maze-5x5-0003")
    texts = [hermes((c["tool"], c["arguments"])) for c in task.solution] + [hermes(("submit", {"answer": "x"}))]
    entry = mcp_verl.agent_loop_entry("mcp_gym_maze_unlock", "Maze")
    row = {"prompt": [], "agent_name": entry["name"], "extra_info": {"task_id": task.id}}
    with pytest.warns(UserWarning, match=r"verl agent loop 'mcp_gym_maze_unlock': .* added tool\(s\) unlock"):
        out, model = rollout(model_dir, tmp_path, [entry], [row], lambda prompt: texts)
    assert list(out.non_tensor_batch["tools_unlisted"][0]) == ["unlock"]
    assert out.non_tensor_batch["success"][0] is True
    prompt = model.tokenizer.decode(out.batch["prompts"][0].tolist())
    assert '"name": "move"' in prompt and '"name": "unlock"' not in prompt  # the tools rendered once
    shown, _ = run_policy(lambda: make_env("Maze"), task.id, texts, tmp_path / "eval").requests[-1]
    (noted,) = [m for m in shown if "[tools changed]" in m["content"]]  # what eval's model is shown
    assert '"name": "unlock"' in noted["content"]
    ids, mask = check_tokens(out, model)
    env_text = model.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    assert env_text.count("[tools changed]") == 1
    assert f"<tool_response>\n{noted['content']}\n</tool_response>" in env_text  # the same note, as a tool response
