"""Every test of the project, fast, on tiny random models built in memory: `make test`.

The scripts are run as subprocesses on tiny fixtures, as a user would run them; the losses are
checked against values computed by hand.
"""
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from colbench.data import DataError, derive_task_id, load_tasks, load_trajectories
from colbench.env import ANSWER_MARKER, Episode
from colbench.models import EndpointChat, Reply, tokenize_turns
from colbench.simulators import DONT_KNOW, EmbeddedSimulator, facts_from_code, make_simulator

ROOT = os.path.dirname(os.path.abspath(__file__))
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# ---------------------------------------------------------------- fixtures: a tiny model, tiny tasks

def build_tiny_model(folder, seed=0):
    """A random 2-layer Llama with a byte-level BPE tokenizer trained in memory, saved to `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    corpus = ["def f(x):\n    return x * 2\n", "I WANT TO ANSWER: def tip(bill): return bill",
              "What is the discount? The tip is 18 percent. Round to 2 decimal places."] * 20
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|im_end|>",
                                        bos_token="<|im_start|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny_model")))


TIP_TASK = {"task_id": "tip", "problem_description": "I want a tip calculator. The signature of the function is: def tip(bill)",
            "ground_truth": "def tip(bill):\n    return round(bill * 0.18, 2)\n",
            "test_cases": {f"test{i}": f"tip({i * 7})" for i in range(1, 11)},
            "hidden_facts": ["The tip is 18 percent of the bill.", "Round the tip to 2 decimal places."]}


def write_jsonl(path, records):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return str(path)


def run_script(*args, check=True, timeout=300, **kwargs):
    result = subprocess.run([sys.executable, *args], cwd=kwargs.pop("cwd", ROOT), capture_output=True, text=True,
                            timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------- colbench/data.py: input files and their errors

@pytest.mark.parametrize("content, expected", [
    ("", "the file is empty"),
    ('{"problem_description": "x", "ground_truth": "def f(): pass", "test_cases": {}}\n{oops\n', ":2: not valid JSON"),
    ('[1, 2]\n', ":1: expected a JSON object"),
    ('{"ground_truth": "def f(): pass", "test_cases": {}}\n', ":1: missing field 'problem_description'"),
    ('{"problem_description": "x", "ground_truth": 3, "test_cases": {}}\n', ":1: field 'ground_truth' must be str"),
    ('{"problem_description": "x", "ground_truth": "def f(): pass"}\n', ":1: missing field 'test_cases'"),
])
def test_task_file_errors_name_file_line_and_field(tmp_path, content, expected):
    path = tmp_path / "tasks.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=str(path).replace(".", r"\.") + ".*" if not expected.startswith(":") else None) as error:
        load_tasks(str(path))
    assert expected in str(error.value) and str(path) in str(error.value)


def test_task_id_is_derived_stably_and_official_trajectories_get_ids(tmp_path):
    task = {k: v for k, v in TIP_TASK.items() if k != "task_id"}
    assert load_tasks(write_jsonl(tmp_path / "t.jsonl", [task]))[0]["task_id"] == derive_task_id(task["problem_description"])
    official = [{"task": task, "dialogue_history": [{"role": "user", "content": "hi"}], "answer": "x"}] * 3
    trajectories = load_trajectories(write_jsonl(tmp_path / "o.jsonl", official))
    assert [t["sample_idx"] for t in trajectories] == [0, 1, 2]
    assert {t["task_id"] for t in trajectories} == {derive_task_id(task["problem_description"])}


def test_rollout_reports_bad_input_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(TIP_TASK) + "\n" + json.dumps({"problem_description": "x"}) + "\n")
    result = run_script("rollout.py", str(bad), "--out", str(tmp_path / "o.jsonl"), check=False)
    assert result.returncode != 0
    assert f"{bad}:2: missing field 'ground_truth'" in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------- colbench/env.py and simulators.py: the protocol

def test_episode_ends_on_the_marker_or_the_last_turn():
    episode = Episode(TIP_TASK, 0, max_turns=3)
    assert episode.agent_view()[0]["role"] == "system" and episode.agent_view()[1]["content"] == TIP_TASK["problem_description"]
    assert not episode.add_agent_turn(Reply("What percent?", "PROMPT1", 3))
    episode.add_human_turn("18 percent.")
    assert episode.add_agent_turn(Reply(f"Sure. {ANSWER_MARKER} def tip(bill): return bill", "PROMPT2", 9))
    assert episode.answer == "def tip(bill): return bill" and episode.answered_with_marker
    record = episode.record()
    assert [t["role"] for t in record["dialogue_history"]] == ["user", "assistant", "user", "assistant"]
    assert record["dialogue_history"][1]["input"] == "PROMPT1" and record["dialogue_history"][3]["output"].startswith("Sure.")

    last = Episode(TIP_TASK, 1, max_turns=2)
    last.add_agent_turn(Reply("question?", "p", 1))
    last.add_human_turn("answer")
    assert "last turn" in last.agent_view()[0]["content"]
    assert last.add_agent_turn(Reply("def tip(bill): return 1", "p", 1)) and last.answer == "def tip(bill): return 1"


def test_embedded_simulator_answers_from_facts_and_says_when_it_does_not_know():
    simulator = EmbeddedSimulator()
    ask = lambda text: simulator.reply(TIP_TASK, [{"role": "user", "content": "..."}, {"role": "assistant", "content": text}])
    assert ask("What percent of the bill should the tip be?") == "The tip is 18 percent of the bill."
    assert ask("How should I round it?") == "Round the tip to 2 decimal places."
    assert ask("Which programming font do you like?") == DONT_KNOW
    assert ask("Can you tell me more details?") == TIP_TASK["hidden_facts"][0]
    assert ask("Tell me about the weather") in TIP_TASK["hidden_facts"]  # 'tell' asks for details
    reply = ask("percent round bill tip decimal places")
    assert len(reply) <= 400 and reply.count(".") <= 3 and "return" not in reply


def test_simulator_derives_facts_from_code_when_a_task_has_none():
    facts = facts_from_code("def ship(weight):\n    if weight > 20:\n        return 15.5\n    return 5\n")
    assert "Something special happens when weight is more than 20." in facts
    assert "The number 15.5 matters in the calculation." in facts
    task = dict(TIP_TASK, hidden_facts=[], ground_truth="def ship(weight):\n    if weight > 20:\n        return 15.5\n    return 5\n")
    reply = EmbeddedSimulator().reply(task, [{"role": "assistant", "content": "Is there a weight limit?"}])
    assert "weight is more than 20" in reply and "return" not in reply


class StubOpenAI(http.server.BaseHTTPRequestHandler):
    """A local server speaking the OpenAI chat schema; it fails and hangs on purpose first."""
    script = []  # what to do with the next POSTs: 'fail', 'hang', or 'ok'
    requests_seen = []

    def log_message(self, *args):
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send_json(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StubOpenAI.requests_seen.append(body)
        action = StubOpenAI.script.pop(0) if StubOpenAI.script else "ok"
        if action == "fail":
            return self.send_json(500, {"error": "boom"})
        if action == "hang":
            time.sleep(3)
        last = body["messages"][-1]["content"]
        reply = ("I WANT TO ANSWER: def tip(bill):\n    return round(bill * 0.18, 2)" if "tip calculator" in last
                 else "The tip is 18 percent. " + "x" * 600)
        self.send_json(200, {"id": "1", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": reply}}]})


@pytest.fixture()
def stub_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StubOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    StubOpenAI.script, StubOpenAI.requests_seen = [], []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_url_simulator_retries_500s_and_hanging_replies_and_cuts_at_400_chars(stub_server):
    StubOpenAI.script = ["fail", "fail", "hang"]
    simulator = make_simulator(stub_server + "/v1")
    simulator.model.timeout = 1  # the hanging reply times out after 1 s and is retried
    reply = simulator.respond([(TIP_TASK, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "What percent?"}])])[0]
    assert reply.startswith("The tip is 18 percent.") and len(reply) == 400
    sent = StubOpenAI.requests_seen[-1]
    assert sent["model"] == "stub-model" and sent["temperature"] == 0.0
    assert "round(bill * 0.18, 2)" in sent["messages"][0]["content"]  # the human holds the reference
    assert len(StubOpenAI.requests_seen) == 4


def test_endpoint_gives_up_after_bounded_retries(stub_server):
    StubOpenAI.script = ["fail"] * 10
    chat = EndpointChat(stub_server, model="m", retries=2)
    with pytest.raises(RuntimeError, match="gave up after 3 attempts"):
        chat.complete([{"role": "user", "content": "hi"}])


# ---------------------------------------------------------------- rollout.py, end to end

def test_rollout_with_tiny_model_writes_the_trajectory_schema(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK, dict(TIP_TASK, task_id="tip2")])
    out = tmp_path / "traj.jsonl"
    result = run_script("rollout.py", tasks, "--agent", tiny_model, "--samples", "2", "--max-turns", "2",
                        "--max-new-tokens", "8", "--out", str(out))
    assert "done: 4 trajectories" in result.stdout
    records = read_jsonl(out)
    assert sorted((r["task_id"], r["sample_idx"]) for r in records) == [("tip", 0), ("tip", 1), ("tip2", 0), ("tip2", 1)]
    for record in records:
        assert set(record) >= {"task_id", "sample_idx", "task", "dialogue_history", "answer"}
        roles = [t["role"] for t in record["dialogue_history"]]
        assert roles[0] == "user" and roles[-1] == "assistant" and roles.count("assistant") <= 2
        for turn in record["dialogue_history"]:
            if turn["role"] == "assistant":
                assert turn["input"].startswith("<|im_start|>system\n") and turn["input"].endswith("<|im_start|>assistant\n")
    assert load_trajectories(str(out))  # what rollout writes, the next stage reads


def test_rollout_defaults_its_output_under_runs(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "mytasks.jsonl", [TIP_TASK])
    result = run_script(os.path.join(ROOT, "rollout.py"), tasks, "--agent", tiny_model, "--max-turns", "1",
                        "--max-new-tokens", "4", cwd=tmp_path)
    assert "runs/mytasks.traj.jsonl" in result.stdout
    assert len(read_jsonl(tmp_path / "runs" / "mytasks.traj.jsonl")) == 1


def test_rollout_resumes_after_kill_9_without_duplicates_or_torn_lines(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [dict(TIP_TASK, task_id=f"t{i}") for i in range(6)])
    out = tmp_path / "traj.jsonl"
    command = [sys.executable, "rollout.py", tasks, "--agent", tiny_model, "--max-turns", "3", "--batch-size", "1",
               "--max-new-tokens", "48", "--out", str(out)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written_before = out.read_text().count("\n")
    assert 1 <= written_before < 6
    with open(out, "a") as f:
        f.write('{"task_id": "t5", "sample_')  # what a kill in the middle of a write would leave
    result = run_script(*command[1:])
    assert f"{written_before} already in" in result.stdout
    records = read_jsonl(out)
    assert sorted(r["task_id"] for r in records) == [f"t{i}" for i in range(6)]


def test_rollout_with_url_agent_and_url_simulator(tmp_path, stub_server):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK, dict(TIP_TASK, task_id="other", problem_description="Something else")])
    out = tmp_path / "traj.jsonl"
    result = run_script("rollout.py", tasks, "--agent", stub_server, "--simulator", stub_server, "--max-turns", "2",
                        "--out", str(out))
    records = {r["task_id"]: r for r in read_jsonl(out)}
    assert records["tip"]["answer"].startswith("def tip(bill):") and len(records["tip"]["dialogue_history"]) == 2
    assert len(records["other"]["dialogue_history"]) == 4  # asked, was answered, then had to answer
    assert json.loads(records["tip"]["dialogue_history"][1]["input"])[0]["role"] == "system"
    assert "tokens generated" in result.stdout


def test_turn_spans_select_exactly_the_assistant_tokens(tiny_model):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "What percent? 18%"}, {"role": "user", "content": "ok"},
                {"role": "assistant", "content": " def f(x):\n  return 1"}]
    ids, spans = tokenize_turns(tokenizer, messages)
    assert [tokenizer.decode(ids[a:b]) for a, b in spans] == ["What percent? 18%<|im_end|>", " def f(x):\n  return 1<|im_end|>"]
    outside = [k for k in range(len(ids)) if not any(a <= k < b for a, b in spans)]
    assert "percent" not in tokenizer.decode([ids[k] for k in outside])
