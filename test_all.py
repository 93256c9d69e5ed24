"""Every test of the project, fast, on tiny random models built in memory: `make test`.

The scripts are run as subprocesses on tiny fixtures, as a user would run them; the losses are
checked against values computed by hand. The sections follow the pipeline as a reader meets it:
data, the protocol and simulators, rollout, evaluation and the sandbox, the critic, the policy, frontend
design, torchrun, the report.
"""
import argparse
import ast
import atexit
from collections import Counter
import glob
import http.server
import json
import math
import os
import platform
import random
import re
import shutil
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

from PIL import Image
import pytest
import torch
from transformers import AutoTokenizer

import colbench.data
import colbench.render
from colbench import frontend, stats
from colbench.cli import (at_least, fraction, fraction_or_zero, non_negative_float, non_negative_int, positive_float,
                          positive_int, require_server)
from colbench.data import DataError, derive_task_id, finished_keys, load_tasks, load_trajectories, task_kind
from colbench.env import ANSWER_MARKER, TURN_BUDGET_NOTE, Episode, agent_messages, html_page, turn_budget
from colbench.fast_logps import TargetLogSoftmax, remembering, shared_prefix_logps, shared_prefix_states
from colbench.fast_sampling import ReservedLayer, keep_freed_memory, sample_shrinking_batch
from colbench.models import (EndpointChat, Reply, chat_text, end_of_turn_ids, generate, load_model, sample_plain,
                             tokenize_turns)
from colbench.render import render, render_many
from colbench.sandbox import PRIVATE_MB, PRIVATE_PLACES, WORKDIR_PREFIX, Sandbox, decode_value, encode_value
from colbench.simulators import (DONT_KNOW, ONE_AT_A_TIME, EmbeddedSimulator, facts_from_code, facts_told,
                                 make_simulator)
import critic
from critic import preference_pairs, sequence_logps
from evaluate import extract_code

ROOT = os.path.dirname(os.path.abspath(__file__))
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Chat templates in the styles of real model families, each with its special tokens and end-of-turn token.
# Llama-3 trims every message; Qwen2.5 adds a default system prompt and writes no newline after the role of
# an empty assistant message (this one also strips content); ChatML (SmolLM2) places content verbatim.
CHAT_STYLES = {
    "chatml": (CHAT_TEMPLATE, ["<|im_start|>", "<|im_end|>"], "<|im_end|>"),
    "llama3": ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
               "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
               ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|eot_id|>"),
    "qwen": ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
             "{% endif %}{% for m in messages %}{% if m['role'] == 'assistant' %}<|im_start|>assistant"
             "{% if m['content'] %}\n{{ m['content'].strip() }}{% endif %}<|im_end|>\n{% else %}"
             "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
             ["<|im_start|>", "<|im_end|>"], "<|im_end|>"),
}


# ======================== fixtures: a tiny model, tiny tasks, helpers

def tiny_tokenizer(style="chatml"):
    """A byte-level BPE tokenizer trained in memory, with the chat template of `style` (CHAT_STYLES)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    template, special_tokens, end_of_turn = CHAT_STYLES[style]
    corpus = ["def f(x):\n    return x * 2\n", "I WANT TO ANSWER: def tip(bill): return bill",
              "What is the discount? The tip is 18 percent. Round to 2 decimal places."] * 20
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=end_of_turn, pad_token=end_of_turn,
                                        bos_token=special_tokens[0])
    tokenizer.chat_template = template
    return tokenizer


def build_tiny_model(folder, seed=0, style="chatml"):
    """A random 2-layer Llama with a tiny_tokenizer(style), saved to `folder`."""
    from transformers import LlamaConfig, LlamaForCausalLM
    tokenizer = tiny_tokenizer(style)
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


TIP_TASK = {"task_id": "tip",
            "problem_description": "I want a tip calculator. The signature of the function is: def tip(bill)",
            "ground_truth": "def tip(bill):\n    return round(bill * 0.18, 2)\n",
            "test_cases": {f"test{i}": f"tip({i * 7})" for i in range(1, 11)},
            "hidden_facts": ["The tip is 18 percent of the bill.", "Round the tip to 2 decimal places."]}


def write_jsonl(path, records):
    """colbench.data.write_jsonl, returning the path as a string: the argument a script takes."""
    colbench.data.write_jsonl(str(path), records)
    return str(path)


def run_script(*args, check=True, timeout=300, **kwargs):
    result = subprocess.run([sys.executable, *args], cwd=kwargs.pop("cwd", ROOT), capture_output=True, text=True,
                            timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def read_jsonl(path):
    """The records of a JSONL file, read by colbench.data."""
    return [record for _, record in colbench.data.read_jsonl(str(path))]


# ======================== 1. data: input files and their errors (colbench/data.py), flags (colbench/cli.py)

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
    match = None if expected.startswith(":") else str(path).replace(".", r"\.") + ".*"
    with pytest.raises(DataError, match=match) as error:
        load_tasks(str(path))
    assert expected in str(error.value) and str(path) in str(error.value)


def test_task_id_is_derived_stably_and_official_trajectories_get_ids(tmp_path):
    task = {k: v for k, v in TIP_TASK.items() if k != "task_id"}
    loaded = load_tasks(write_jsonl(tmp_path / "t.jsonl", [task]))
    assert loaded[0]["task_id"] == derive_task_id(task["problem_description"])
    official = [{"task": task, "dialogue_history": [{"role": "user", "content": "hi"}], "answer": "x"}] * 3
    trajectories = load_trajectories(write_jsonl(tmp_path / "o.jsonl", official))
    assert [t["sample_idx"] for t in trajectories] == [0, 1, 2]
    assert {t["task_id"] for t in trajectories} == {derive_task_id(task["problem_description"])}


def test_resume_reads_replies_that_hold_unicode_line_separators(tmp_path):
    out = tmp_path / "traj.jsonl"
    out.write_text(json.dumps({"task_id": "t", "sample_idx": 0, "answer": "a\u2028b"}, ensure_ascii=False) + "\n",
                   encoding="utf-8")  # json.dumps leaves U+2028 raw: str.splitlines() would cut the line there
    assert finished_keys(str(out)) == {("t", 0)}


@pytest.mark.parametrize("check, accepted, refused", [
    (positive_int, {"1": 1, "16": 16}, ["0", "-1", "1.5", "two", ""]),
    (non_negative_int, {"0": 0, "7": 7}, ["-1", "0.5", "x"]),
    (positive_float, {"0.5": 0.5, "3": 3.0, "1e-9": 1e-9}, ["0", "-0.0", "-1", "nan", "inf", "x"]),
    (non_negative_float, {"0": 0.0, "2.5": 2.5}, ["-0.1", "nan", "inf", "x"]),
    (fraction, {"1": 1.0, "0.25": 0.25}, ["0", "1.01", "-0.5", "nan", "x"]),
    (fraction_or_zero, {"0": 0.0, "1": 1.0, "0.25": 0.25}, ["-0.1", "1.01", "nan", "x"]),
    (at_least(2), {"2": 2, "16": 16}, ["1", "0", "2.5", "x"]),
])
def test_cli_types_accept_their_range_only(check, accepted, refused):
    assert {text: check(text) for text in accepted} == accepted
    for text in refused:
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(text))):
            check(text)


@pytest.mark.parametrize("script, flag, value, allowed", [
    ("rollout.py", "--samples", "0", "an integer >= 1"),
    ("rollout.py", "--limit", "-1", "an integer >= 1"),
    ("rollout.py", "--max-turns", "-1", "an integer >= 1"),
    ("rollout.py", "--batch-size", "0", "an integer >= 1"),
    ("rollout.py", "--max-new-tokens", "0", "an integer >= 1"),
    ("rollout.py", "--temperature", "-1", "a finite number >= 0"),
    ("critic.py", "--epochs", "0", "an integer >= 1"),
    ("critic.py", "--batch-size", "0", "an integer >= 1"),
    ("critic.py", "--eval-fraction", "2", "a number in [0, 1]"),
    ("critic.py", "--lr", "0", "a finite number > 0"),
    ("critic.py", "--beta", "-0.1", "a finite number > 0"),
    ("critic.py", "--min-reward-gap", "-1", "a finite number >= 0"),
    ("critic.py", "--max-length", "8", "an integer >= 32"),
    ("policy.py", "--candidates", "1", "an integer >= 2"),
    ("policy.py", "--candidates", "0", "an integer >= 2"),
    ("policy.py", "--epochs", "0", "an integer >= 1"),
    ("policy.py", "--data-fraction", "0", "a number in (0, 1]"),
    ("policy.py", "--pairs-per-turn", "0", "an integer >= 1"),
    ("policy.py", "--sample-batch-size", "0", "an integer >= 1"),
    ("policy.py", "--temperature", "-0.5", "a finite number >= 0"),
    ("policy.py", "--lr", "nan", "a finite number > 0"),
    ("policy.py", "--beta", "0", "a finite number > 0"),
    ("-m harness.judge", "--candidates", "1", "an integer >= 2"),
    ("-m harness.warmstart", "--samples", "0", "an integer >= 1"),
])
def test_stages_refuse_a_bad_flag_value_at_parse_time(tmp_path, script, flag, value, allowed):
    given = write_jsonl(tmp_path / "in.jsonl", [TIP_TASK])
    critic_flag = ["--critic", str(tmp_path / "critic")] if "judge" in script else []  # judge requires one
    result = run_script(*script.split(), given, "--out", str(tmp_path / "out"), *critic_flag, flag, value, check=False)
    assert result.returncode == 2
    assert f"error: argument {flag}: '{value}' is not {allowed}" in result.stderr and "Traceback" not in result.stderr
    assert os.listdir(tmp_path) == ["in.jsonl"]


# --- the shipped backend task set (colbench/tasks/backend_{train,test}.jsonl)

TASKS_DIR = os.path.join(ROOT, "colbench", "tasks")
TRAIN = os.path.join(TASKS_DIR, "backend_train.jsonl")
TEST = os.path.join(TASKS_DIR, "backend_test.jsonl")
SIGNATURE = "The signature of the function is:"
TRIVIAL_NUMBERS = {0, 1, 2, 10, 100}


# Runs every reference on its own tests in a fresh namespace, in a child process, and prints
# {task_id: [repr(output), ...]}; run twice to check the outputs are deterministic.
RUN_REFERENCES = """
import json, sys
results = {}
for path in sys.argv[1:]:
    for line in open(path, encoding="utf-8"):
        task = json.loads(line)
        namespace = {}
        exec(task["ground_truth"], namespace)
        results[task["task_id"]] = [repr(eval(call, namespace)) for call in task["test_cases"].values()]
print(json.dumps(results))
"""


def tasks():
    return load_tasks(TRAIN), load_tasks(TEST)


def request_part(task):
    """The description without its final signature line (which may name parameters)."""
    return task["problem_description"].split(SIGNATURE)[0]


def test_tasks_sizes_families_and_schema():
    train, test = tasks()
    assert len(train) >= 400 and len(test) >= 100
    train_families = {t["family"] for t in train}
    test_families = {t["family"] for t in test}
    assert len(train_families | test_families) >= 40
    assert len(test_families - train_families) >= 10
    assert all(t["task_id"] == f"backend-train-{i:04d}" for i, t in enumerate(train, 1))
    assert all(t["task_id"] == f"backend-test-{i:04d}" for i, t in enumerate(test, 1))
    for task in train + test:
        assert task["tier"] in ("easy", "medium", "hard")
        assert list(task["test_cases"]) == [f"test{i}" for i in range(1, 11)]
        assert len(set(task["test_cases"].values())) == 10, task["task_id"]  # ten distinct calls
        assert task["hidden_facts"] and all(fact.strip() for fact in task["hidden_facts"])
        name = re.search(r"^def (\w+)\(", task["ground_truth"], re.M).group(1)
        signature = task["problem_description"].split(SIGNATURE)[1].strip()
        assert signature.startswith(f"def {name}(") and signature in task["ground_truth"]
        assert all(call.startswith(name + "(") for call in task["test_cases"].values())


def test_tasks_easy_tier_in_both_sets():
    for split in tasks():
        tiers = Counter(t["tier"] for t in split)
        assert tiers["easy"] >= 0.25 * len(split)
        assert tiers["medium"] and tiers["hard"]
        assert len({t["family"] for t in split if t["tier"] == "easy"}) >= 3


def test_tasks_no_task_repeats_across_sets():
    train, test = tasks()
    valid = load_tasks(os.path.join(TASKS_DIR, "backend_valid.jsonl"))
    solutions = [{t["ground_truth"] for t in tasks} for tasks in (train, test, valid)]
    assert not solutions[0] & solutions[1] and not solutions[0] & solutions[2] and not solutions[1] & solutions[2]
    assert {t["family"] for t in valid} == {t["family"] for t in train}  # further draws of the training families


def test_tasks_references_pass_their_tests_deterministically():
    runs = [subprocess.run([sys.executable, "-c", RUN_REFERENCES, TRAIN, TEST], capture_output=True,
                           text=True, timeout=120, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1]
    outputs = json.loads(runs[0])
    assert len(outputs) == sum(len(split) for split in tasks())
    for task_id, results in outputs.items():
        assert len(results) == 10, task_id
        assert "None" not in results, task_id
        assert len(set(results)) > 1, task_id


def test_tasks_descriptions_hide_the_constants():
    for task in sum(tasks(), []):
        request = request_part(task)
        numbers_said = {float(token) for token in re.findall(r"\d+(?:\.\d+)?", request)}
        words_said = request.lower()
        inputs = " ".join(task["test_cases"].values())
        for node in ast.walk(ast.parse(task["ground_truth"])):
            if not isinstance(node, ast.Constant):
                continue
            value = node.value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if abs(value) in TRIVIAL_NUMBERS:
                    continue
                spoken = {abs(value), round(abs(value) * 100, 6)}  # 0.15 may be said as 15 percent
                assert not spoken & numbers_said, (task["task_id"], value)
            elif isinstance(value, str) and len(value.strip()) > 3 and value not in inputs:
                # a string the function produces (a label, a format piece) is a hidden detail
                pattern = r"(?<!\w)" + re.escape(value.strip().lower()) + r"(?!\w)"
                assert not re.search(pattern, words_said), (task["task_id"], value)


def test_tasks_regeneration_is_byte_identical(tmp_path):
    subprocess.run([sys.executable, "-m", "colbench.tasks.backend", "--out", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    for name in ("backend_train.jsonl", "backend_test.jsonl", "backend_valid.jsonl"):
        with open(os.path.join(TASKS_DIR, name), "rb") as shipped, open(tmp_path / name, "rb") as fresh:
            assert shipped.read() == fresh.read(), name


def test_a_family_added_to_FAMILIES_leaves_every_shipped_task_as_it_was(monkeypatch):
    """README's "Adapt it": a new family's tasks come after the shipped ones, whose ids and bytes stay the same."""
    from colbench.tasks import backend

    def tip_again(rng):  # a family of another name: its own generator, so its own draws
        return backend.tip(rng)
    monkeypatch.setattr(backend, "FAMILIES", [*backend.FAMILIES, backend.family(tip_again, "easy")])
    grown = backend.generate()
    for name, split in zip(("train", "test", "valid"), grown):
        shipped = load_tasks(os.path.join(TASKS_DIR, f"backend_{name}.jsonl"))
        assert split[:len(shipped)] == shipped, name
        added = split[len(shipped):]
        assert {t["family"] for t in added} == {"tip_again"} and len(added) == {
            "train": backend.TRAIN_PER_FAMILY, "test": backend.TEST_PER_SHARED, "valid": backend.VALID_PER_SHARED}[name]


def easy_tasks(*names):
    return [t for name in names for t in load_tasks(os.path.join(TASKS_DIR, f"backend_{name}.jsonl"))
            if t["tier"] == "easy"]


GENERAL_REQUESTS = ["Could you tell me more about what you need?", "What details should I know?",
                    "Can you share any specific requirements or preferences?", "Is there anything else I should know?",
                    "What exactly do you have in mind? Please give me the numbers and rules.", "Any other details?"]


def test_easy_tasks_have_two_facts_and_what_to_ask_differs_within_a_family():
    twists = {}  # family -> the kinds of second fact its tasks have
    for task in easy_tasks("train", "test", "valid"):
        first, second = task["hidden_facts"]  # the family's numbers, then the task's twist
        kind = next(k for k in ("Round", "minimum", "maximum", "flat fee") if k in second)
        twists.setdefault(task["family"], set()).add(kind)
        assert kind.split()[-1].lower()[:5] in request_part(task).lower()  # the description hints at it
    assert all(len(kinds) >= 2 for kinds in twists.values()), twists


def test_embedded_human_gives_general_requests_nothing_and_each_fact_to_its_subject():
    from colbench.scripted import subject_words
    from colbench.simulators import answer_from_facts
    for task in easy_tasks("train", "test", "valid"):
        facts = task["hidden_facts"]
        for request in GENERAL_REQUESTS:
            assert answer_from_facts(facts, request) == DONT_KNOW, (task["task_id"], request)
        for fact in facts:
            asked = f"Could you tell me about the {' '.join(subject_words(fact, facts))}?"
            assert answer_from_facts(facts, asked) == fact, (task["task_id"], asked)


@pytest.mark.parametrize("agent, told", [("scripted:fixed", 0.0), ("scripted:by-subject", 1.0)])
def test_scripted_agents_through_rollout_a_fixed_script_learns_nothing_asking_by_subject_everything(
        tmp_path, agent, told):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", easy_tasks("test"))
    out = tmp_path / "scripted.traj.jsonl"
    run_script("rollout.py", tasks, "--agent", agent, "--samples", "1", "--max-turns", "3", "--out", str(out))
    trajectories = load_trajectories(str(out))
    everything = [len(facts_told(t["task"], t["dialogue_history"])) == 2 for t in trajectories]
    assert len(trajectories) == len(easy_tasks("test")) and sum(everything) / len(everything) == told
    assert all(t["rollout"]["agent"] == agent and t["max_turns"] == 3 for t in trajectories)
    result = run_script("rollout.py", tasks, "--agent", agent, "--samples", "1", "--max-turns", "4", "--out", str(out),
                        check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "made another way (max_turns 3 there, 4 now)" in result.stderr


def test_warm_start_varies_turn_by_turn_and_stays_imperfect(tmp_path):
    out = tmp_path / "warm.traj.jsonl"
    run_script("-m", "harness.warmstart", write_jsonl(tmp_path / "t.jsonl", easy_tasks("train")[:60]),
               "--samples", "2", "--out", str(out))
    rows = load_trajectories(str(out))
    questions = [turn["content"] for r in rows for turn in r["dialogue_history"][1:-1] if turn["role"] == "assistant"]
    replies = [turn["content"] for r in rows for turn in r["dialogue_history"][2:] if turn["role"] == "user"]
    turns = Counter(sum(turn["role"] == "assistant" for turn in r["dialogue_history"]) for r in rows)
    told = [len(facts_told(r["task"], r["dialogue_history"])) for r in rows]
    assert len(set(questions)) > len(questions) / 2  # varied words, about varied subjects
    assert DONT_KNOW in replies and ONE_AT_A_TIME in replies  # questions about what the task lacks, and two at once
    assert all(turns[k] >= 10 for k in (1, 2, 3))  # answering at once, early or late
    assert 0.2 < told.count(2) / len(rows) < 0.7  # imperfect on purpose
    assert all(r["dialogue_history"][-1]["content"].startswith(ANSWER_MARKER) for r in rows)


# ======================== 2. the protocol (colbench/env.py), the simulated human (colbench/simulators.py), servers

def test_episode_ends_on_the_marker_or_the_last_turn():
    episode = Episode(TIP_TASK, 0, max_turns=3)
    assert episode.agent_view()[0]["role"] == "system"
    assert episode.agent_view()[1]["content"] == TIP_TASK["problem_description"]
    assert not episode.add_agent_turn(Reply("What percent?", "PROMPT1", 3))
    episode.add_human_turn("18 percent.")
    assert episode.add_agent_turn(Reply(f"Sure. {ANSWER_MARKER} def tip(bill): return bill", "PROMPT2", 9))
    assert episode.answer == "def tip(bill): return bill" and episode.answered_with_marker
    record = episode.record()
    assert [t["role"] for t in record["dialogue_history"]] == ["user", "assistant", "user", "assistant"]
    assert record["dialogue_history"][1]["input"] == "PROMPT1"
    assert record["dialogue_history"][3]["output"].startswith("Sure.")

    last = Episode(TIP_TASK, 1, max_turns=2)
    last.add_agent_turn(Reply("question?", "p", 1))
    last.add_human_turn("answer")
    assert last.add_agent_turn(Reply("def tip(bill): return 1", "p", 1)) and last.answer == "def tip(bill): return 1"
    assert last.record()["max_turns"] == 2 and turn_budget(last.record()) == 2
    assert turn_budget({"task_id": "official file"}) == 10  # the official budget where none is recorded


def test_the_prompt_states_the_budget_up_front_the_same_at_every_turn():
    episode = Episode(TIP_TASK, 0, max_turns=2)
    systems = [episode.agent_view()[0]["content"]]
    episode.add_agent_turn(Reply("What percent?", "p", 1))
    episode.add_human_turn("18 percent.")
    systems.append(episode.agent_view()[0]["content"])
    assert systems[0] == systems[1] and TURN_BUDGET_NOTE.format(max_turns=2) in systems[0]
    assert agent_messages(TIP_TASK, episode.dialogue, 3)[0]["content"] != systems[0]


def test_embedded_simulator_answers_the_one_fact_asked_for_and_nothing_to_general_requests():
    simulator = EmbeddedSimulator()

    def ask(text):
        return simulator.reply(TIP_TASK, [{"role": "user", "content": "..."}, {"role": "assistant", "content": text}])

    assert ask("What percent of the bill should the tip be?") == "The tip is 18 percent of the bill."
    assert ask("How should the tip be rounded?") == "Round the tip to 2 decimal places."
    assert ask("How many decimals?") == "Round the tip to 2 decimal places."
    for general in ("Can you tell me more details?", "Is there anything else I need to know?",
                    "Could you share your specific requirements and preferences?", "Tell me about the tip."):
        assert ask(general) == DONT_KNOW, general  # 'tip' is in every fact: it names none of them
    assert ask("Which programming font do you like?") == DONT_KNOW
    assert ask("What percent, and how do I round?") == ONE_AT_A_TIME
    assert ask("What percent, and how do I round to decimal places?") == "Round the tip to 2 decimal places."


def test_simulator_derives_facts_from_code_when_a_task_has_none():
    facts = facts_from_code("def ship(weight):\n    if weight > 20:\n        return 15.5\n    return 5\n")
    assert "Something special happens when weight is more than 20." in facts
    assert "The number 15.5 matters in the calculation." in facts
    task = dict(TIP_TASK, hidden_facts=[],
                ground_truth="def ship(weight):\n    if weight > 20:\n        return 15.5\n    return 5\n")
    reply = EmbeddedSimulator().reply(task, [{"role": "assistant", "content": "Does something special happen at "
                                                                             "some weight?"}])
    assert "weight is more than 20" in reply and "return" not in reply


class StubOpenAI(http.server.BaseHTTPRequestHandler):
    """A local server speaking the OpenAI chat schema; it fails and hangs on purpose first. It returns
    `n` choices when it honours OpenAI's `n` (else one), and numbers its replies sampled at T > 0."""
    script = []  # what to do with the next POSTs: 'fail', 'hang', or 'ok'
    requests_seen = []
    honours_n = True
    samples_made = 0

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
        choices = []
        for index in range(body.get("n", 1) if StubOpenAI.honours_n else 1):
            text = reply
            if body["temperature"] > 0:
                StubOpenAI.samples_made += 1
                text += f"  # sample {StubOpenAI.samples_made}"
            choices.append({"index": index, "finish_reason": "stop", "message": {"role": "assistant", "content": text}})
        self.send_json(200, {"id": "1", "object": "chat.completion", "model": body["model"], "choices": choices})


@pytest.fixture()
def stub_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StubOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    StubOpenAI.script, StubOpenAI.requests_seen, StubOpenAI.honours_n, StubOpenAI.samples_made = [], [], True, 0
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_url_simulator_retries_500s_and_hanging_replies_and_cuts_at_400_chars(stub_server):
    StubOpenAI.script = ["fail", "fail", "hang"]
    simulator = make_simulator(stub_server + "/v1")
    simulator.model.timeout = 1  # the hanging reply times out after 1 s and is retried
    dialogue = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "What percent?"}]
    reply = simulator.respond([(TIP_TASK, dialogue)])[0]
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


@pytest.mark.parametrize("honours_n", [True, False])
def test_endpoint_samples_n_replies_per_request_or_one_request_each(stub_server, honours_n):
    StubOpenAI.honours_n, StubOpenAI.script = honours_n, ["fail"]  # the same retries as every request
    conversations = [[{"role": "user", "content": f"question {k}"}] for k in range(2)]
    samples = EndpointChat(stub_server, model="m").sample(conversations, 3, max_new_tokens=5, temperature=1.0)
    assert [len(replies) for replies in samples] == [3, 3]
    assert len({reply.text for replies in samples for reply in replies}) == 6
    asked = StubOpenAI.requests_seen
    assert len(asked) == 1 + (2 if honours_n else 6)
    assert sorted(body.get("n", 1) for body in asked) == ([3, 3, 3] if honours_n else [1] * 4 + [3] * 3)
    assert all(body["max_tokens"] == 5 and body["temperature"] == 1.0 for body in asked)


def closed_port_url():
    """The URL of a local port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_require_server_passes_a_live_server_and_refuses_a_dead_one_within_seconds(stub_server, capsys):
    require_server("--agent", stub_server)
    dead, start = closed_port_url(), time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        require_server("--simulator", dead)
    assert stopped.value.code == 2 and time.monotonic() - start < 5
    assert f"error: --simulator {dead}: no OpenAI-compatible server answers" in capsys.readouterr().err


# --- chat templates: the tokens of each agent turn (colbench/models.py)

def test_turn_spans_select_exactly_the_assistant_tokens(tiny_model):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "What percent? 18%"}, {"role": "user", "content": "ok"},
                {"role": "assistant", "content": " def f(x):\n  return 1"}]
    ids, spans = tokenize_turns(tokenizer, messages)
    assert [tokenizer.decode(ids[a:b]) for a, b in spans] == [
        "What percent? 18%<|im_end|>", " def f(x):\n  return 1<|im_end|>"]
    outside = [k for k in range(len(ids)) if not any(a <= k < b for a, b in spans)]
    assert "percent" not in tokenizer.decode([ids[k] for k in outside])


def official_scored(n_tasks):
    """Scored trajectories in the official offline schema (no task_id, no sample_idx), replies as raw vLLM
    output with the whitespace around them, as in colbench_code_offline_15k_llama8b.jsonl."""
    records = []
    for n in range(n_tasks):
        task = {k: v for k, v in TIP_TASK.items() if k != "task_id"}
        task["problem_description"] = f"Task {n}: " + task["problem_description"]
        for factor, reward in (("0.18", 1.0), ("0.2", 0.3), ("1", 0.0)):
            answer = f"def tip(bill):\n    return round(bill * {factor}, 2)"
            question, reply = "  What percent should the tip be?\n", f"  I WANT TO ANSWER: {answer}\n\n"
            records.append({"task": task, "answer": answer, "reward": reward, "dialogue_history": [
                {"role": "user", "content": task["problem_description"]},
                {"role": "assistant", "content": question, "input": "<prompt>", "output": question},
                {"role": "user", "content": "The tip is 18 percent."},
                {"role": "assistant", "content": reply, "input": "<prompt>", "output": reply}]})
    return records


@pytest.mark.parametrize("style", CHAT_STYLES)
def test_turn_spans_are_each_reply_as_the_template_renders_it_and_its_end_of_turn_token(style):
    tokenizer, end_of_turn = tiny_tokenizer(style), CHAT_STYLES[style][2]
    messages = [{"role": m["role"], "content": m["content"]} for m in official_scored(1)[0]["dialogue_history"]]
    messages += [{"role": "user", "content": "Anything else?"}, {"role": "assistant", "content": ""}]
    ids, spans = tokenize_turns(tokenizer, messages)
    assert tokenizer.decode(ids, clean_up_tokenization_spaces=False) == chat_text(tokenizer, messages)
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    assert len(spans) == len(replies) == 3
    for (start, end), reply in zip(spans, replies):
        rendered = reply if style == "chatml" else reply.strip()  # the Llama-3 and Qwen-style templates strip
        assert ids[start:end] == tokenizer(rendered + end_of_turn, add_special_tokens=False)["input_ids"]


# ======================== 3. rollout.py, end to end

def test_rollout_reports_bad_input_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(TIP_TASK) + "\n" + json.dumps({"problem_description": "x"}) + "\n")
    result = run_script("rollout.py", str(bad), "--out", str(tmp_path / "o.jsonl"), check=False)
    assert result.returncode == 2 and not (tmp_path / "o.jsonl").exists()
    assert f"{bad}:2: missing field 'ground_truth'" in result.stderr and "Traceback" not in result.stderr


def test_rollout_with_tiny_model_writes_the_trajectory_schema(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK, dict(TIP_TASK, task_id="tip2")])
    out = tmp_path / "traj.jsonl"
    result = run_script("rollout.py", tasks, "--agent", tiny_model, "--samples", "2", "--max-turns", "2",
                        "--max-new-tokens", "8", "--out", str(out))
    assert "done: 4 trajectories" in result.stdout
    records = read_jsonl(out)
    assert sorted((r["task_id"], r["sample_idx"]) for r in records) == [
        ("tip", 0), ("tip", 1), ("tip2", 0), ("tip2", 1)]
    for record in records:
        assert set(record) >= {"task_id", "sample_idx", "task", "dialogue_history", "answer"}
        roles = [t["role"] for t in record["dialogue_history"]]
        assert roles[0] == "user" and roles[-1] == "assistant" and roles.count("assistant") <= 2
        for turn in record["dialogue_history"]:
            if turn["role"] == "assistant":
                assert turn["input"].startswith("<|im_start|>system\n")
                assert turn["input"].endswith("<|im_start|>assistant\n")
    assert load_trajectories(str(out))  # what rollout writes, the next stage reads


def test_rollout_defaults_its_output_under_runs(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "mytasks.jsonl", [TIP_TASK])
    result = run_script(os.path.join(ROOT, "rollout.py"), tasks, "--agent", tiny_model, "--samples", "1",
                        "--max-turns", "1", "--max-new-tokens", "4", cwd=tmp_path)
    assert "runs/mytasks.traj.jsonl" in result.stdout
    assert len(read_jsonl(tmp_path / "runs" / "mytasks.traj.jsonl")) == 1


def test_rollout_resumes_after_kill_9_without_duplicates_or_torn_lines(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [dict(TIP_TASK, task_id=f"t{i}") for i in range(6)])
    out = tmp_path / "traj.jsonl"
    command = [sys.executable, "rollout.py", tasks, "--agent", tiny_model, "--samples", "1", "--max-turns", "3",
               "--batch-size", "1", "--max-new-tokens", "48", "--out", str(out)]
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
    other = dict(TIP_TASK, task_id="other", problem_description="Something else")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK, other])
    out = tmp_path / "traj.jsonl"
    result = run_script("rollout.py", tasks, "--agent", stub_server, "--simulator", stub_server, "--samples", "1",
                        "--max-turns", "2", "--out", str(out))
    records = {r["task_id"]: r for r in read_jsonl(out)}
    assert records["tip"]["answer"].startswith("def tip(bill):") and len(records["tip"]["dialogue_history"]) == 2
    assert len(records["other"]["dialogue_history"]) == 4  # asked, was answered, then had to answer
    assert json.loads(records["tip"]["dialogue_history"][1]["input"])[0]["role"] == "system"
    assert "tokens generated" in result.stdout


@pytest.mark.parametrize("flag", ["--agent", "--simulator"])
def test_rollout_refuses_a_dead_server_before_loading_a_model(tmp_path, tiny_model, flag):
    tasks, dead = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK]), closed_port_url()
    models = {"--agent": tiny_model, "--simulator": "embedded", flag: dead}
    result = run_script("rollout.py", tasks, "--agent", models["--agent"], "--simulator", models["--simulator"],
                        "--out", str(tmp_path / "out.jsonl"), check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {flag} {dead}: no OpenAI-compatible server answers" in result.stderr
    assert "ConnectionError" in result.stderr
    assert "forward passes" not in result.stdout  # no model was loaded
    assert os.listdir(tmp_path) == ["tasks.jsonl"]


def test_rollout_refuses_to_resume_into_a_file_that_is_not_trajectories(tmp_path, tiny_model):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK])
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps(TIP_TASK) + "\n" + '{"task_id": "torn')  # a torn last line stays: nothing is cut
    before = wrong.read_bytes()
    result = run_script("rollout.py", tasks, "--agent", tiny_model, "--out", str(wrong), check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {wrong}:1: missing field 'sample_idx'" in result.stderr
    assert wrong.read_bytes() == before and "forward passes" not in result.stdout


def test_shrinking_batch_sampling_gives_model_generate_tokens_under_greedy(tiny_model):
    model, tokenizer = load_model(tiny_model)
    torch.manual_seed(0)
    with torch.no_grad():  # the fixture's small initial weights make every greedy reply one repeated token
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.normal_(0, 0.5)
    texts = ("What is the tip?", "def f(x):", "Round to 2 decimal places. I WANT TO ANSWER", "x", "18 percent.",
             "def f(x):")  # a prompt twice, as policy.py samples n replies to each: encoded once, sampled twice
    prompts = [chat_text(tokenizer, [{"role": "system", "content": "You help."}, {"role": "user", "content": text}],
                         add_generation_prompt=True) for text in texts]
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert len(set(batch["attention_mask"].sum(-1).tolist())) > 1  # rows carry different amounts of left padding
    prompt_ids = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    assert len(set(ids[0] for ids in prompt_ids)) == 1  # a shared beginning (the system prompt) to encode once
    # A random model hardly ever ends a turn: the token found in the most replies serves as the
    # end-of-turn token instead, so that rows finish at different steps.
    unstopped = sample_plain(model, batch["input_ids"], batch["attention_mask"], 16, 0, [tokenizer.eos_token_id])
    stop = Counter(token for row in unstopped for token in dict.fromkeys(row[1:])).most_common(1)[0][0]
    plain = sample_plain(model, batch["input_ids"], batch["attention_mask"], 16, 0, [stop])
    lengths = [len(row) for row in plain]
    assert len(set(lengths)) >= 3 and 16 in lengths and min(lengths) < 16
    assert sample_shrinking_batch(model, prompt_ids, 16, 0, [stop]) == plain
    assert sample_shrinking_batch(model, prompt_ids, 16, 0, [stop], in_place=False) == plain  # the cache by torch.cat
    assert sample_shrinking_batch(model, prompt_ids, 16, 0, [stop], prefill_tokens=1) == plain  # a pass per prompt
    torch.manual_seed(1)
    sampled = sample_shrinking_batch(model, prompt_ids, 16, 1.0, [stop])
    assert sampled != plain and all(len(row) == 16 or row.index(stop) == len(row) - 1 for row in sampled)
    assert sampled[1] != sampled[5]  # the twice-given prompt's two rows draw their own tokens
    for prefill_tokens in (None, 1):  # all in one pass, a pass per prompt: the same numbers, the same draws
        torch.manual_seed(1)
        assert sample_shrinking_batch(model, prompt_ids, 16, 1.0, [stop], prefill_tokens=prefill_tokens) == sampled


def test_a_template_without_a_system_role_gets_the_system_prompt_in_the_first_user_message(tiny_model):
    _, tokenizer = load_model(tiny_model)
    tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System "
                               "role not supported') }}{% endif %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    messages = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "What is the tip?"}, {"role": "user", "content": "18%"}]
    assert chat_text(tokenizer, messages[:2], add_generation_prompt=True) == "<user>You help.\n\nHi</s><assistant>"
    ids, spans = tokenize_turns(tokenizer, messages)
    assert [tokenizer.decode(ids[a:b]) for a, b in spans] == ["What is the tip?</s>"]


def test_a_reply_ends_at_the_end_of_turn_id_of_the_models_generation_config(tiny_model):
    """A Llama 3 instruct model's turns end with <|eot_id|>, named in its generation_config, not its eos."""
    model, tokenizer = load_model(tiny_model)
    torch.manual_seed(0)
    with torch.no_grad():  # as above: replies of varied tokens
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.normal_(0, 0.5)
    prompt = chat_text(tokenizer, [{"role": "user", "content": "What is the tip?"}], add_generation_prompt=True)
    (_,), (length,) = generate(model, tokenizer, [prompt], 16, 0)
    assert length == 16  # never stopped by the tokenizer's eos
    row = sample_shrinking_batch(model, [tokenizer(prompt, add_special_tokens=False)["input_ids"]], 16, 0,
                                 [tokenizer.eos_token_id])[0]
    k = next(i for i in range(2, 16) if row[i] not in row[:i])  # a token the reply first writes at step k
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, row[k]]
    assert end_of_turn_ids(model, tokenizer) == sorted({tokenizer.eos_token_id, row[k]})
    for shrinking_batch in (True, False):
        (_,), (length,) = generate(model, tokenizer, [prompt], 16, 0, shrinking_batch=shrinking_batch)
        assert length == k + 1


def test_reserved_cache_layer_holds_what_transformers_layer_holds():
    from transformers.cache_utils import DynamicLayer
    torch.manual_seed(0)
    grown = DynamicLayer()  # [batch, heads, positions, width]: a prefill of 5 positions, then 3 steps of one
    grown.update(torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4))
    reserved = ReservedLayer(grown, room=3)
    for step in range(3):
        if step == 1:  # a row finishes: both keep rows 2 and 0
            grown.batch_select_indices(torch.tensor([2, 0]))
            reserved.batch_select_indices(torch.tensor([2, 0]))
        states = torch.randn(len(grown.keys), 2, 1, 4), torch.randn(len(grown.keys), 2, 1, 4)
        for got, expected in zip(reserved.update(*states), grown.update(*states)):
            assert torch.equal(got, expected)
        assert reserved.get_seq_length() == grown.get_seq_length() == 6 + step


PAGE_FAULTS_OF_A_BLOCK_AFTER_ONE_FREED = """
import ctypes, resource, sys, torch
from colbench.fast_sampling import keep_freed_memory
if ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value != \\
        ctypes.cast(ctypes.CDLL("libc.so.6").malloc, ctypes.c_void_p).value:
    sys.exit(3)  # another allocator is preloaded: mallopt does not reach it
keep_freed_memory(sys.argv[1] == "keep")
torch.ones(2**25 + 2**16)  # 128 MiB and a little (posix_memalign asks for more than the block), freed at once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(2**25)  # every page written
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_maps_no_new_pages_for_a_block_like_one_just_freed():
    """In a fresh process each, so that no earlier test's heap or threads decide where the block lands."""
    def page_faults(mode):
        run = subprocess.run([sys.executable, "-c", PAGE_FAULTS_OF_A_BLOCK_AFTER_ONE_FREED, mode],
                             capture_output=True, text=True, cwd=ROOT)
        if run.returncode == 3:
            pytest.skip("malloc is not glibc's here (a preloaded allocator)")
        assert run.returncode == 0, run.stderr
        return int(run.stdout)
    assert page_faults("default") > 2**25 * 4 / 4096 / 2  # glibc's default: the block is mapped anew
    assert page_faults("keep") < 1000  # the freed block serves again


# ======================== 4. evaluate.py and the sandbox: the real script on hostile and honest programs

REFERENCE = "def f(x):\n    return x * 2\n"
CALLS = {"test1": "f(1)", "test2": "f(2)", "test3": "f(3)"}


def trajectory(answer, task_id="double", reference=REFERENCE, calls=CALLS, **extra):
    task = {"task_id": task_id, "problem_description": "Double a number.", "ground_truth": reference,
            "test_cases": calls}
    return {"task_id": task_id, "task": task, "dialogue_history": [{"role": "user", "content": "hi"}],
            "answer": answer, **extra}


def evaluate(path, *args, timeout=60, prefix=()):
    """Run the real script (after `prefix`, a command that starts it); returns (completed process,
    scored records or None, summary or None)."""
    out, summary = path + ".scored.jsonl", path + ".summary.json"
    command = [*prefix, sys.executable, os.path.join(ROOT, "evaluate.py"), path, "--out", out,
               "--summary-json", summary, *args]
    running = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    stdout, stderr = running.communicate(timeout=timeout)
    process = subprocess.CompletedProcess(command, running.returncode, stdout, stderr)
    process.pid = running.pid  # sandbox runners carry it: `sandbox.py --serve PID`
    if process.returncode != 0:
        return process, None, None
    with open(summary) as f:
        return process, read_jsonl(out), json.load(f)


def processes_with(marker):
    """PIDs of live processes whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmdline and not zombie:
            found.append(int(pid))
    return found


# --- hostile programs, all in one batch with honest ones ------------------------------------------
PROJECT_LITTER = os.path.join(ROOT, "written_by_a_program")  # where a program must not write


def hostile_programs(outside_dir, victim, port):
    """name -> (program, expected reward, expected category of a failing test or None)."""
    return {
        "loop_forever": ("def f(x):\n    while True:\n        pass\n", 0.0, "timeout"),
        "loop_at_module_level": ("while True:\n    pass\ndef f(x):\n    return x * 2\n", 0.0, "timeout"),
        "loop_on_some_inputs": ("def f(x):\n    while x == 2:\n        pass\n    return x * 2\n", 2 / 3, "timeout"),
        "fork_bomb": ("import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n"
                      "        except OSError:\n            pass\n", 0.0, "timeout"),
        "leaves_children": ("import os, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n"
                            "        while True:\n            pass\n    if os.fork() == 0:\n"
                            "        time.sleep(1000)\n    return x * 2\n", 1.0, None),
        "unbounded_memory": ("def f(x):\n    hoard = []\n    while True:\n        hoard.append(bytes(10**8))\n",
                             0.0, "out of memory"),
        "endless_recursion": ("def f(x):\n    return f(x) + 1\n", 0.0, "exception"),
        "segfault": ("import ctypes\ndef f(x):\n    return ctypes.string_at(0)\n", 0.0, "crashed"),
        "os_system": ("import os\ndef f(x):\n    os.system('sleep 31.337 &')\n"
                      f"    os.system('touch {outside_dir}/os_system_was_here')\n    return x * 2\n", 1.0, None),
        "subprocess": ("import subprocess\ndef f(x):\n    subprocess.Popen(['sleep', '31.337'])\n"
                       f"    subprocess.check_call(['sh', '-c', 'echo x > {outside_dir}/subprocess_was_here'])\n"
                       "    return x * 2\n", 0.0, "exception"),
        "writes_outside": (f"def f(x):\n    open({str(outside_dir)!r} + '/written', 'w').write('x')\n"
                           "    return x * 2\n", 0.0, "exception"),
        "writes_project": (f"def f(x):\n    open({PROJECT_LITTER!r}, 'w').write('x')\n    return x * 2\n",
                           0.0, "exception"),
        "deletes_outside": (f"import os\ndef f(x):\n    os.remove({str(victim)!r})\n    return x * 2\n",
                            0.0, "exception"),
        "network_loopback": (f"import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', {port}), "
                             "timeout=1).sendall(b'leak')\n    return x * 2\n", 0.0, "exception"),
        "ignores_signals": ("import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):\n"
                            "    signal.signal(s, signal.SIG_IGN)\ndef f(x):\n    while True:\n        pass\n",
                            0.0, "timeout"),
        "kills_parent": ("import os, signal\ndef f(x):\n    for pid in (os.getppid(), 1):\n        try:\n"
                         "            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
                         "    return x * 2\n", 1.0, None),
        "prints_megabytes": ("def f(x):\n    for _ in range(20):\n        print('y' * 10**6)\n    return x * 2\n",
                             1.0, None),
        "sys_exit": ("import sys\ndef f(x):\n    sys.exit(0)\n", 0.0, "exception"),
        "os_exit": ("import os\ndef f(x):\n    os._exit(0)\n", 0.0, "crashed"),
        "thread_never_ends": ("import threading, time\ndef f(x):\n    threading.Thread(target=time.sleep, "
                              "args=(1000,)).start()\n    return x * 2\n", 1.0, None),
        "tampers_builtins": ("import builtins, json\nbuiltins.type = lambda *a: int\nbuiltins.isinstance = "
                             "lambda *a: True\nbuiltins.issubclass = lambda *a: True\nbuiltins.len = lambda x: 0\n"
                             "json.dumps = lambda *a, **k: '{\"value\": 2}'\ndef f(x):\n    return x * 3\n",
                             0.0, "wrong output"),
        "tampers_builtins_right_answers": ("import builtins, json\nbuiltins.type = builtins.compile = None\n"
                                           "builtins.eval = builtins.exec = lambda *a: 0\njson.dumps = None\n"
                                           "def f(x):\n    return x * 2\n", 1.0, None),
        "always_equal_object": ("class Same:\n    def __eq__(self, other):\n        return True\n"
                                "def f(x):\n    return Same()\n", 0.0, "wrong output"),
        "always_equal_int": ("class Same(int):\n    def __eq__(self, other):\n        return True\n"
                             "    __hash__ = int.__hash__\ndef f(x):\n    return Same(0)\n", 0.0, "wrong output"),
        "fake_results": ("import os, sys\ndef f(x):\n"
                         "    fake = json_line = '{\"results\": {\"test1\": {\"value\": 2}}}'\n"
                         "    print(fake)\n    sys.stdout.flush()\n    os.write(2, fake.encode())\n"
                         "    os.write(1, b'\\x0d\\x00\\x00\\x00{\"value\": 2}')\n    os._exit(0)\n", 0.0, "crashed"),
        # honest programs in the same batch
        "honest": ("def f(x):\n    return x + x\n", 1.0, None),
        "honest_slow": ("import time\ndef f(x):\n    time.sleep(0.3)\n    return x * 2\n", 1.0, None),
        "honest_prints": ("def f(x):\n    print('computing', x)\n    return 2 * x\n", 1.0, None),
        "honest_wrong": ("def f(x):\n    return x * 3\n", 0.0, "wrong output"),
    }


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    outside = tmp / "outside"
    outside.mkdir()
    victim = tmp / "victim.txt"
    victim.write_text("keep me")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    programs = hostile_programs(outside, victim, listener.getsockname()[1])
    records = [trajectory(f"I WANT TO ANSWER:\n```python\n{program}```", sample_idx=i)
               for i, (program, _, _) in enumerate(programs.values())]
    path = write_jsonl(tmp / "hostile.traj.jsonl", records)
    with open(path, "rb") as f:
        input_bytes = f.read()
    start = time.monotonic()
    process, scored, summary = evaluate(path, "--timeout", "1", "--workers", "2")
    seconds = time.monotonic() - start
    try:
        connection = listener.accept()
    except BlockingIOError:
        connection = None
    listener.close()
    assert process.returncode == 0, process.stderr[-3000:]
    by_name = {name: scored[i] for i, name in enumerate(programs)}
    return {"programs": programs, "scored": by_name, "summary": summary, "process": process,
            "outside": outside, "victim": victim, "connection": connection, "input": (path, input_bytes),
            "seconds": seconds}


HOSTILE_CASES = list(hostile_programs("/nonexistent", "/nonexistent/victim", 1))


# Why the failing ones fail: the sandbox stopped them, not a missing module or a bug of ours.
FAILURE_DETAILS = {
    "endless_recursion": "RecursionError", "segfault": "SIGSEGV", "subprocess": "CalledProcessError",
    "writes_outside": "PermissionError", "deletes_outside": "PermissionError", "writes_project": "PermissionError",
    "network_loopback": "Network is unreachable", "sys_exit": "SystemExit",
    "tampers_builtins": "returned 3, expected 2", "always_equal_object": "unserializable",
    "always_equal_int": "returned 0, expected 2", "honest_wrong": "returned 3, expected 2",
}


# Without root the programs run as the evaluator's own user (see the docstring of colbench/sandbox.py).
NEEDS_ROOT = {"writes_outside", "deletes_outside", "writes_project", "subprocess", "kills_parent"}


def private_tmp_on(process):
    """Whether evaluate.py reported a fresh tmpfs over /tmp, /var/tmp and /dev/shm for each program."""
    return f"private {','.join(PRIVATE_PLACES)} ON" in process.stdout


def hidden_from_programs(path, process):
    """Whether `path` lies under a place that programs see as an empty tmpfs of their own."""
    return private_tmp_on(process) and any(str(path).startswith(place + "/") for place in PRIVATE_PLACES)


@pytest.mark.parametrize("name", HOSTILE_CASES)
def test_eval_hostile_case(hostile_run, name):
    if name in NEEDS_ROOT and os.geteuid() != 0:
        pytest.skip("programs run as the evaluator's user when it is not root")
    _, expected_reward, expected_failure = hostile_run["programs"][name]
    record = hostile_run["scored"][name]
    assert record["tests_total"] == 3
    assert math.isclose(record["reward"], expected_reward), record["test_results"]
    assert record["success"] == (expected_reward == 1.0)
    assert record["tests_passed"] == round(expected_reward * 3)
    assert record["failure"] == expected_failure, record["test_results"]
    targets = {"writes_outside": hostile_run["outside"], "deletes_outside": hostile_run["victim"],
               "writes_project": PROJECT_LITTER}
    expected_detail = FAILURE_DETAILS.get(name, "")
    if name in targets and hidden_from_programs(targets[name], hostile_run["process"]):
        expected_detail = "FileNotFoundError"  # under /tmp: the program's own /tmp does not hold it
    assert expected_detail in (record["failure_detail"] or ""), record["failure_detail"]


def test_eval_hostile_partial_credit_is_per_test(hostile_run):
    assert hostile_run["scored"]["loop_on_some_inputs"]["test_results"] == {
        "test1": "pass", "test2": "timeout", "test3": "pass"}


@pytest.mark.skipif(os.geteuid() != 0, reason="programs run as the evaluator's user when it is not root")
def test_eval_hostile_side_effects_did_not_escape(hostile_run):
    assert list(hostile_run["outside"].iterdir()) == []  # no writes by open/os.system/subprocess
    assert not os.path.exists(PROJECT_LITTER)
    assert hostile_run["victim"].read_text() == "keep me"
    assert hostile_run["connection"] is None  # nothing reached the loopback listener
    path, input_bytes = hostile_run["input"]
    with open(path, "rb") as f:
        assert f.read() == input_bytes  # the input is never modified


def test_eval_hostile_no_process_outlives_the_evaluator(hostile_run):
    assert processes_with("31.337") == []  # sleeps started by os.system / subprocess
    assert processes_with(f"sandbox.py --serve {hostile_run['process'].pid}") == []


def test_eval_hostile_batch_is_fast_and_reports(hostile_run):
    assert hostile_run["seconds"] < 40
    stdout = hostile_run["process"].stdout
    assert "trajectories/s" in stdout and "tests passed" in stdout
    assert hostile_run["summary"]["trajectories"] == len(HOSTILE_CASES)


def test_eval_killed_evaluator_leaves_no_process(tmp_path):
    records = [trajectory("def f(x):\n    while True:\n        pass\n", sample_idx=i) for i in range(4)]
    path = write_jsonl(tmp_path / "hang.jsonl", records)
    evaluator = subprocess.Popen([sys.executable, os.path.join(ROOT, "evaluate.py"), path, "--timeout", "20",
                                  "--out", str(tmp_path / "out.jsonl")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    marker = f"--serve {evaluator.pid}"
    deadline = time.monotonic() + 20
    while len(processes_with(marker)) < 4 and time.monotonic() < deadline:  # runners and tests started
        time.sleep(0.1)
    assert processes_with(marker), "the sandboxes never started"
    evaluator.send_signal(signal.SIGKILL)
    evaluator.wait()
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


# --- the official rule, official files, re-scoring -------------------------------------------------
def test_eval_official_rule_and_official_format(tmp_path):
    reference = ("def f(x):\n    if x == 'none':\n        return None\n    if x == 'zero':\n        return 0\n"
                 "    if x == 'pair':\n        return (1, 2)\n    return {'a': [1.5, {2, 3}]}\n")
    calls = {"none": "f('none')", "zero": "f('zero')", "pair": "f('pair')", "nested": "f('x')"}
    answers = {
        "exact": reference,
        # 0.0 == 0 and True == 1 count, as under `==`; a list is not a tuple; None never counts
        "loose": ("def f(x):\n    return {'none': None, 'zero': 0.0, 'pair': [1, 2]}.get(x, "
                  "{'a': [1.5, frozenset({2, 3})]})\n"),
    }
    records = []
    for name, code in answers.items():
        record = trajectory(f"I WANT TO ANSWER:\n```python\n{code}```", reference=reference, calls=calls,
                            reward=0.123)
        del record["task_id"]  # official offline files carry neither task_id nor sample_idx
        del record["task"]["task_id"]
        records.append(record)
    path = write_jsonl(tmp_path / "official.jsonl", records)
    process, scored, summary = evaluate(path, "--timeout", "1")
    assert process.returncode == 0, process.stderr[-2000:]
    exact, loose = scored
    assert exact["task_id"].startswith("task-") and exact["task_id"] == loose["task_id"]
    assert [exact["sample_idx"], loose["sample_idx"]] == [0, 1]
    # The reference's None is the task's fault: that test is not counted (the official evaluator fails it).
    assert exact["test_results"] == {"none": "broken test", "zero": "pass", "pair": "pass", "nested": "pass"}
    assert exact["reward"] == 1.0 and exact["success"]  # re-scored, the old 0.123 replaced
    assert exact["broken_tests"] == {"none": "reference returned None"} and exact["tests_total"] == 3
    assert loose["test_results"] == {"none": "broken test", "zero": "pass", "pair": "wrong output",
                                     "nested": "pass"}
    assert loose["reward"] == pytest.approx(2 / 3) and loose["failure"] == "wrong output"
    assert summary["mean_tests_passed_pct"] == 83.33
    assert summary["best_of_k"] == {"k": 2, "tests_passed_pct": 100.0, "success_rate_pct": 100.0}


def test_eval_broken_tests_are_the_tasks_fault_not_the_candidates(tmp_path):
    reference = ("def div(a, b):\n    if b == 5:\n        return None\n    if b == 7:\n        while True:\n"
                 "            pass\n    return a / b\n")
    calls = {"test1": "div(4, 2)", "test2": "div(1, 0)", "test3": "div(9, 3)", "test4": "div(1, 5)",
             "test5": "div(1, 7)"}
    answers = {"same": reference,
               "handles_zero": "def div(a, b):\n    return a / b if b else 0\n",
               "wrong": "def div(a, b):\n    return a * b\n"}
    records = [trajectory(f"I WANT TO ANSWER:\n```python\n{code}```", task_id="div", reference=reference,
                          calls=calls, sample_idx=i) for i, code in enumerate(answers.values())]
    process, scored, summary = evaluate(write_jsonl(tmp_path / "broken.jsonl", records), "--timeout", "1")
    assert process.returncode == 0, process.stderr[-2000:]
    same, handles_zero, wrong = scored
    broken = {"test2": "reference raised ZeroDivisionError: division by zero", "test4": "reference returned None",
              "test5": "reference: timeout (exceeded the per-test time limit)"}
    for record in (same, handles_zero):
        assert (record["reward"], record["success"], record["failure"]) == (1.0, True, None), record["test_results"]
        assert (record["tests_passed"], record["tests_total"], record["broken_tests"]) == (2, 2, broken)
        assert [record["test_results"][name] for name in broken] == ["broken test"] * 3
    assert (wrong["reward"], wrong["failure"], wrong["tests_total"]) == (0.0, "wrong output", 2)
    assert summary["broken_tests"] == [f"task div {name}: {reason}" for name, reason in broken.items()]
    assert "broken tests (not counted): 3 (task div test2: reference raised ZeroDivisionError" in process.stdout


def test_eval_keep_rewards_and_best_of_k(tmp_path):
    records = [trajectory("def f(x):\n    return x * 2\n", task_id="a", sample_idx=0),
               trajectory("def f(x):\n    return 0\n", task_id="a", sample_idx=1, reward=1.0, success=True),
               trajectory("def f(x):\n    return 0\n", task_id="b", sample_idx=0),
               trajectory("def f(x):\n    return x + 1\n", task_id="b", sample_idx=1)]
    path = write_jsonl(tmp_path / "keep.jsonl", records)
    process, scored, summary = evaluate(path, "--keep-rewards")
    assert process.returncode == 0, process.stderr[-2000:]
    assert [r["reward"] for r in scored] == [1.0, 1.0, 0.0, pytest.approx(1 / 3)]
    assert "tests_total" not in scored[1]  # kept as it was
    assert summary["success_rate_pct"] == 50.0
    assert summary["best_of_k"]["k"] == 2
    assert summary["best_of_k"]["success_rate_pct"] == 50.0
    assert summary["best_of_k"]["tests_passed_pct"] == pytest.approx(100 * (1 + 1 / 3) / 2, abs=0.01)
    assert summary["scored"] == 3 and summary["trajectories_per_s"] > 0


def test_eval_official_scoring_first_block_function_scope_and_banned_substrings(tmp_path):
    floor_reference = "import math\n\n\ndef f(x):\n    return math.floor(x) * 2\n"
    answers = {  # name: (answer, reward by default, reward under --official-scoring)
        "plain": ("I WANT TO ANSWER:\n```python\n" + CODE + "```", 1.0, 1.0),
        "import_inside": ("def f(x):\n    import math\n    return math.floor(x) * 2\n", 1.0, 1.0),
        "example_first": ("I WANT TO ANSWER:\n```python\nf(2)  # gives 4\n```\nThe code:\n```python\n" + CODE + "```",
                          1.0, 0.0),
        "module_import": ("import math\n\n\ndef f(x):\n    return math.floor(x) * 2\n", 1.0, 0.0),
        "module_helper": ("def twice(x):\n    return 2 * x\n\n\ndef f(x):\n    return twice(x)\n", 1.0, 0.0),
        "banned_word": ("A version that uses no argparse:\n```python\n" + CODE + "```", 1.0, 0.0),
        # the official check_correctness bans none of these (its print/open/write list is never called)
        "prints": ("I WANT TO ANSWER:\n```python\ndef f(x):\n    print(x)\n    return x * 2\n```", 1.0, 1.0),
        "writes": ("A rewrite, no opening:\n```python\ndef f(x):\n    return x * 2 if open else 0\n```", 1.0, 1.0),
    }
    records = [trajectory(answer, sample_idx=k) for k, (answer, _, _) in enumerate(answers.values())]
    records.append(trajectory(CODE, task_id="floor", reference=floor_reference, sample_idx=0))
    path = write_jsonl(tmp_path / "answers.jsonl", records)
    process, default, _ = evaluate(path)
    assert process.returncode == 0, process.stderr[-2000:]
    process, official, summary = evaluate(path, "--official-scoring")
    assert process.returncode == 0, process.stderr[-2000:]
    assert [r["reward"] for r in default] == [expected for _, expected, _ in answers.values()] + [1.0]
    assert [r["reward"] for r in official] == [expected for _, _, expected in answers.values()] + [0.0]
    by_name = dict(zip(list(answers) + ["floor"], official))
    assert by_name["banned_word"]["failure"] == "banned substring"
    assert "'argparse'" in by_name["banned_word"]["failure_detail"]
    assert by_name["writes"]["failure"] is None and by_name["prints"]["failure"] is None  # run, not banned
    assert by_name["module_import"]["failure"] == "exception"
    assert "NameError" in by_name["module_import"]["failure_detail"]
    assert by_name["floor"]["failure"] == "broken test"  # the reference itself imports at module level
    assert summary["args"]["official_scoring"] is True


# --- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, expected", [
    ('{"task": {}}\n', ":1: field 'task': missing field 'problem_description'"),
    (json.dumps(trajectory("x")) + "\nnot json\n", ":2: not valid JSON"),
    (json.dumps({k: v for k, v in trajectory("x").items() if k != "answer"}) + "\n", ":1: missing field 'answer'"),
    (json.dumps({**trajectory("x"), "task": {**trajectory("x")["task"], "test_cases": {"t": 3}}}) + "\n",
     ":1: field 'task': field 'test_cases.t' must be str"),
])
def test_eval_bad_input_names_file_line_field(tmp_path, content, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    process, _, _ = evaluate(str(path))
    assert process.returncode == 2
    assert str(path) + expected in process.stderr
    assert "Traceback" not in process.stderr


def test_eval_missing_file_and_frontend_offline_without_clip_weights(tmp_path):
    process, _, _ = evaluate(str(tmp_path / "absent.jsonl"))
    assert process.returncode == 2 and "no such file" in process.stderr and "Traceback" not in process.stderr
    page = trajectory("<html><body>hi</body></html>")
    page["task"] = {"task_id": "page", "problem_description": "A page.", "ground_truth": "<html><body>x</body></html>"}
    process, scored, summary = evaluate(write_jsonl(tmp_path / "front.jsonl", [page]))
    assert process.returncode == 0 and "frontend image score: edge-color" in process.stdout  # offline, named
    assert scored[0]["image_score"] == "edge-color" and 0 < scored[0]["reward"] < 1
    assert summary["frontend"]["image_score"] == "edge-color"


@pytest.mark.parametrize("flag, value, allowed", [
    ("--timeout", "0", "a finite number > 0"), ("--timeout", "-1", "a finite number > 0"),
    ("--workers", "0", "an integer >= 1"), ("--workers", "-2", "an integer >= 1"),
])
def test_eval_refuses_a_bad_flag_value_at_parse_time(tmp_path, flag, value, allowed):
    path = write_jsonl(tmp_path / "in.jsonl", [trajectory("def f(x):\n    return x * 2\n")])
    process, _, _ = evaluate(path, flag, value)
    assert process.returncode == 2
    assert f"error: argument {flag}: '{value}' is not {allowed}" in process.stderr
    assert "Traceback" not in process.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]  # no output, no summary


def test_eval_refuses_to_overwrite_its_input(tmp_path):
    path = write_jsonl(tmp_path / "same.jsonl", [trajectory("def f(x):\n    return x * 2\n")])
    process = subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), path, "--out", path],
                             capture_output=True, text=True, cwd=ROOT)
    assert process.returncode == 2 and "error: --out is the input file" in process.stderr


# --- code extraction ---------------------------------------------------------------------------------
CODE = "def f(x):\n    return x * 2\n"


@pytest.mark.parametrize("answer", [
    CODE,
    "I WANT TO ANSWER:\n" + CODE,
    "I WANT TO ANSWER: " + CODE,
    "I WANT TO ANSWER:\n```python\n" + CODE + "```",
    "I WANT TO ANSWER:\n```Python3\n" + CODE + "```\nThis doubles x.",
    "```\n" + CODE + "```",
    "Sure! Here is the function:\n\n```py\n" + CODE + "```\n\nIt returns twice the input.\nHope it helps.",
    "Example call:\n```python\nprint(f(2))\n```\nThe code:\n```python\n" + CODE + "```",
    "I WANT TO ANSWER:\n    def f(x):\n        return x * 2\n",
    "I WANT TO ANSWER:\n1. The code:\n    ```python\n    def f(x):\n        return x * 2\n    ```\n",
    "I WANT TO ANSWER:\n```python\n" + CODE,  # the closing fence cut off
    "Here is the code:\n" + CODE + "\nThis function doubles its input.\n",
])
def test_eval_extract_code(answer):
    assert extract_code(answer) == CODE


def test_eval_extract_code_keeps_helpers_and_imports():
    code = "import math\n\n\ndef helper(x):\n    return math.floor(x)\n\n\ndef f(x):\n    return helper(x) * 2\n"
    assert extract_code("I WANT TO ANSWER:\n```python\n" + code + "```") == code
    assert extract_code("Here you go:\n" + code + "Note: it floors first.") == code


# --- values come back as plain data ------------------------------------------------------------------
def test_eval_values_round_trip_with_types():
    class Loud(int):
        def __eq__(self, other):
            return True
    for value in [None, True, 0, -3, 10**40, 0.5, float("inf"), 1 + 2j, "é", b"\x00x", bytearray(b"y"),
                  [1, (2, 3)], (), {"a": {1: [None]}}, {1, (2, "x")}, frozenset({3}), {(1, 2): frozenset()}]:
        back = decode_value(json.loads(encode_value(value))["value"])
        assert back == value and type(back) is type(value)
    back = decode_value(json.loads(encode_value(Loud(5)))["value"])
    assert type(back) is int and back == 5 and back != 6
    nan = decode_value(json.loads(encode_value(float("nan")))["value"])
    assert math.isnan(nan)
    with pytest.raises(TypeError):
        encode_value(object())
    deep = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(ValueError):
        encode_value(deep)


def test_eval_fork_bomb_leaves_the_next_program_able_to_fork():
    bomb = ("import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n"
            "        except OSError:\n            pass\n")
    forker = ("import os\ndef f(x):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
              "    os.waitpid(pid, 0)\n    return x\n")
    with Sandbox(timeout=0.5) as sandbox:  # one runner: the same user id for both programs
        assert sandbox.run(bomb, [("a", "f(1)")])["results"]["a"]["error"] == "timeout"
        assert sandbox.run(forker, [("a", "f(1)"), ("b", "f(2)")])["results"] == {"a": {"value": 1},
                                                                                   "b": {"value": 2}}


# --- what programs write: private to their runner, gone after each program ----------------------------
SHM_FILL_CHUNKS = 16  # of 8 MB: past the cap, yet bounded where there is no cap (128 MB per test then)


def litter_programs(token):
    """name -> program, in the order they run on one runner: the first three leave files behind."""
    places = repr(PRIVATE_PLACES)
    litter = (f"    for place in filter(os.path.isdir, {places}):\n"
              f"        os.makedirs(place + '/{token}-dir/sub', exist_ok=True)\n"
              f"        open(place + '/{token}-dir/sub/file', 'w').write('x')\n"
              f"        open(place + '/{token}-file-' + str(x), 'w').write('x')\n")
    return {
        "litters": "import os\ndef f(x):\n" + litter + "    return x * 2\n",
        "unmounts_then_litters": ("import ctypes, os\ndef f(x):\n    libc = ctypes.CDLL(None)\n"
                                  f"    for place in {places}:\n        libc.umount2(place.encode(), 2)\n"
                                  + litter + "    return x * 2\n"),
        "fills_shm": (f"def f(x):\n    for i in range({SHM_FILL_CHUNKS}):\n"
                      f"        with open(f'/dev/shm/{token}-fill-{{x}}-{{i}}', 'wb') as out:\n"
                      "            out.write(bytes(8 << 20))\n    return x * 2\n"),
        "looks_for_litter": (f"import os\ndef f(x):\n    found = [name for place in filter(os.path.isdir, {places}) "
                             f"for name in os.listdir(place) if name.startswith({token!r})]\n"
                             "    return found or x * 2\n"),
        "honest": "def f(x):\n    return x + x\n",
    }


@pytest.mark.parametrize("mount_namespace", [True, False], ids=["as-allowed", "without-CAP_SYS_ADMIN"])
def test_eval_what_programs_write_is_private_and_gone_after_each_program(tmp_path, mount_namespace):
    prefix = ()
    if not mount_namespace:  # as in a container without CAP_SYS_ADMIN: no namespaces, cleaning instead
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            pytest.skip("needs root and setpriv to run the evaluator without CAP_SYS_ADMIN")
        prefix = ("setpriv", "--bounding-set", "-sys_admin")
    token = f"colbench-litter-{os.getpid()}-{mount_namespace}"
    programs = litter_programs(token)
    records = [trajectory(f"I WANT TO ANSWER:\n```python\n{program}```", sample_idx=i)
               for i, program in enumerate(programs.values())]
    path = write_jsonl(tmp_path / "litter.jsonl", records)
    with open("/proc/self/mounts") as f:
        mounts = f.read()
    shm_used = shutil.disk_usage("/dev/shm").used
    # One worker: one runner runs the programs in this order, so the last two come after the litter.
    process, scored, _ = evaluate(path, "--timeout", "2", "--workers", "1", prefix=prefix)
    assert process.returncode == 0, process.stderr[-3000:]
    assert [p for place in PRIVATE_PLACES for p in glob.glob(f"{place}/{token}*")] == []
    assert shutil.disk_usage("/dev/shm").used - shm_used < 16 << 20
    with open("/proc/self/mounts") as f:
        assert f.read() == mounts  # the evaluator's side sees none of the runner's mounts
    by_name = dict(zip(programs, scored))
    for name in ("litters", "unmounts_then_litters", "looks_for_litter", "honest"):
        assert by_name[name]["reward"] == 1.0, (name, by_name[name]["failure_detail"])
    if private_tmp_on(process):
        assert f"private {','.join(PRIVATE_PLACES)} ON (tmpfs, {PRIVATE_MB} MB each)" in process.stdout
        assert by_name["fills_shm"]["failure"] == "exception"
        assert "No space left on device" in by_name["fills_shm"]["failure_detail"]
    else:
        assert by_name["fills_shm"]["reward"] == 1.0  # no cap: all written, then removed
    if mount_namespace:
        # The network namespace needs the same privilege as the mount namespace.
        assert private_tmp_on(process) == ("network namespace on" in process.stdout)
    else:
        assert "OFF: cleaned after each program" in process.stdout


def test_eval_programs_on_one_runner_each_get_one_fresh_tmpfs_per_place():
    token = f"colbench-litter-{os.getpid()}-runner"
    census = ("import os\ndef f(x):\n    with open('/proc/self/mountinfo') as table:\n"
              "        mounted = sorted(line.split()[4] for line in table if ' - tmpfs colbench-sandbox ' in line)\n"
              f"    return mounted, [name for place in filter(os.path.isdir, {PRIVATE_PLACES!r}) "
              f"for name in os.listdir(place) if name.startswith({token!r})]\n")
    with Sandbox(timeout=2.0) as sandbox:
        for _ in range(2):
            assert sandbox.run(litter_programs(token)["litters"], [("a", "f(1)")])["results"] == {"a": {"value": 2}}
        reply = sandbox.run(census, [("a", "f(1)")])
    mounted, litter = reply["results"]["a"]["value"]
    assert litter == []
    # One each, not one stacked over another per program: an unmounted tmpfs frees its memory.
    assert mounted == (sorted(filter(os.path.isdir, PRIVATE_PLACES)) if reply["isolation"]["private_tmp"] else [])


def test_eval_runner_removes_the_folders_of_dead_runners_only():
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    dead = os.path.join(PRIVATE_PLACES[0], f"{WORKDIR_PREFIX}{ended.pid}-planted")
    live = os.path.join(PRIVATE_PLACES[0], f"{WORKDIR_PREFIX}{os.getpid()}-planted")
    for folder in (dead, live):
        os.makedirs(os.path.join(folder, "sub"))
        with open(os.path.join(folder, "sub", "file"), "w") as f:
            f.write("x")
    try:
        with Sandbox(timeout=1.0) as sandbox:  # a runner clears stale folders as it starts
            assert sandbox.run("def f(x):\n    return x\n", [("a", "f(1)")])["results"] == {"a": {"value": 1}}
        assert not os.path.exists(dead)
        assert os.path.exists(os.path.join(live, "sub", "file"))
    finally:
        shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


# ======================== 5. critic.py: the loss by hand, the critic's prompt, log-probs both ways, training

HISTORY = [{"role": "user", "content": TIP_TASK["problem_description"]},
           {"role": "assistant", "content": "What percent should the tip be?"},
           {"role": "user", "content": "The tip is 18 percent."}]
CANDIDATES = ["I WANT TO ANSWER: def tip(bill): return round(bill * 0.18, 2)", "Round to 2 decimal places?", "",
              "def f(x):\n    return x * 2\n"]


@pytest.fixture(scope="module")
def two_model_critic(tiny_model, tmp_path_factory):
    """A Critic whose π_θ and π_ref differ (two random tiny models), so advantages are not zero."""
    other = build_tiny_model(str(tmp_path_factory.mktemp("tiny_model_2")), seed=1)
    model, tokenizer = load_model(tiny_model)
    reference_model, _ = load_model(other)
    return critic.Critic(model, reference_model, tokenizer)


def scored(task, sample_idx, agent_turns, reward, human="I don't know."):
    """A scored trajectory of `task` whose agent says each of `agent_turns` in order."""
    dialogue = [{"role": "user", "content": task["problem_description"]}]
    for i, text in enumerate(agent_turns):
        if i:
            dialogue.append({"role": "user", "content": human})
        dialogue.append({"role": "assistant", "content": text})
    return {"task_id": task["task_id"], "sample_idx": sample_idx, "task": task, "dialogue_history": dialogue,
            "answer": agent_turns[-1], "reward": reward, "success": reward == 1.0}


def test_critic_loss_equals_hand_computed_values_and_log_2_when_critic_is_reference():
    chosen, rejected = torch.tensor([2.0, 0.5]), torch.tensor([0.0, 1.5])  # margins β(chosen − rejected): 0.2, −0.1
    expected = (math.log(1 + math.exp(-0.2)) + math.log(1 + math.exp(0.1))) / 2  # −log σ(m) = log(1 + e^−m)
    assert critic.bradley_terry_loss(chosen, rejected, beta=0.1).item() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.671268, abs=1e-6)
    # Unequal margins: a flipped sign, or chosen and rejected swapped, gives another value.
    assert critic.bradley_terry_loss(rejected, chosen, beta=0.1).item() == pytest.approx(0.721268, abs=1e-6)
    logps = torch.log(torch.rand(20))
    advantages = critic.turn_advantages(logps, logps, [(3, 7), (12, 20)])
    assert advantages.tolist() == [0.0, 0.0]
    score = advantages.sum()[None]
    assert critic.bradley_terry_loss(score, score, 0.1).item() == pytest.approx(math.log(2))


def test_critic_turn_advantage_is_the_mean_or_sum_of_its_tokens():
    critic_logps, reference_logps = torch.tensor([-1.0, -2.0, -3.0, -4.0, -5.0]), torch.full((5,), -3.0)
    # spans are token positions: tokens 2..3 are entries 1..2, tokens 4..5 are entries 3..4
    assert critic.turn_advantages(critic_logps, reference_logps, [(2, 4), (4, 6)]).tolist() == [0.5, -1.5]
    summed = critic.turn_advantages(critic_logps, reference_logps, [(2, 4), (4, 6)], normalize=False)
    assert summed.tolist() == [1.0, -3.0]


def test_trajectory_score_is_the_papers_sum_of_turn_means_or_the_official_mean_over_tokens():
    critic_logps, reference_logps = torch.tensor([-1.0, -2.0, -3.0, -4.0, -5.0]), torch.full((5,), -3.0)

    def score(spans, token_mean, normalize=True):
        per_turn = {"t": critic.turn_advantages(critic_logps, reference_logps, spans, normalize)}
        return critic.trajectory_scores(per_turn, {"t": {"spans": spans}}, ["t"], token_mean).item()
    # turn 1: tokens 2..3 (log-ratios 1, 0); turn 2: tokens 4..6 (log-ratios -1, -2, and 0 at token 6)
    assert score([(2, 4), (4, 6)], token_mean=False) == pytest.approx(0.5 - 1.5)
    assert score([(2, 4), (4, 6)], token_mean=True) == pytest.approx((1 + 0 - 1 - 2) / 4)
    # turns of 3 and 1 tokens: the mean over tokens weighs them 3:1
    assert score([(1, 4), (4, 5)], token_mean=True) == pytest.approx((2 + 1 + 0 - 1) / 4)
    # w/o normalization: the sum over tokens (token_mean off)
    assert score([(1, 4), (4, 5)], token_mean=False, normalize=False) == pytest.approx(2 + 1 + 0 - 1)


def test_value_head_turn_values_and_their_bradley_terry_loss_equal_hand_computed_values():
    head = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, -2.0]]))
    states = torch.tensor([[9.0, 9.0], [1.0, 0.0], [3.0, 1.0], [0.0, 1.0], [2.0, 2.0]])  # [seq, hidden]
    # turn 1: positions 1..2, mean (2, 0.5), value 2 - 1 = 1; turn 2: positions 3..4, mean (1, 1.5), value 1 - 3 = -2
    values = critic.turn_values(states, head, [(1, 3), (3, 5)])
    assert values.tolist() == pytest.approx([1.0, -2.0])
    # --head sequence-value: positions 0..2, mean (13/3, 10/3), value -7/3; positions 0..4, mean (3, 2.6), value -2.2
    through = critic.turn_values(states, head, [(1, 3), (3, 5)], through=True)
    assert through.tolist() == pytest.approx([-7 / 3, -2.2])
    scores = critic.trajectory_scores({"t": values}, {"t": {"spans": [(1, 3), (3, 5)]}}, ["t"], token_mean=False)
    assert scores.item() == pytest.approx(-1.0)  # Σ_t V_t
    # Eq. 2 on the values, β 1 (the official value head's loss): −log σ(−1 − 0.5) = log(1 + e^1.5)
    loss = critic.bradley_terry_loss(scores, torch.tensor([0.5]), beta=1.0)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(1.5)), abs=1e-6)


@pytest.mark.parametrize("head", ["value", "sequence-value"])
def test_critic_value_head_learns_a_planted_pattern_and_ranks_candidates_by_it(tmp_path, tiny_model, head):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=16)
    out = tmp_path / "critic"  # 8 epochs (Table 5's frontend critic): a mean through the turn dilutes the phrase
    critic.main(critic.parser.parse_args([data, "--model", tiny_model, "--out", str(out), "--head", head,
                                          "--beta", "1", "--lr", "3e-3", "--epochs", "8", "--batch-size", "4",
                                          "--eval-fraction", "0.25", "--dtype", "fp32"]))
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["eval_tasks"], metrics["eval_pairs"]) == (4, 8)
    assert metrics["before"]["pair_accuracy"] < 0.9 < metrics["after"]["pair_accuracy"]
    assert (out / critic.VALUE_HEAD).exists() and not (out / "partial").exists()
    loaded = critic.load_critic(str(out))
    assert loaded.reference_model is None and loaded.model.value_through == (head == "sequence-value")
    task = dict(TIP_TASK, task_id="new", problem_description="Task 99: What is the discount?")
    history = [{"role": "user", "content": task["problem_description"]}]
    planted, plain = "I WANT TO ANSWER: def tip(bill): return bill", "What is the discount? Round to decimal places."
    scores = critic.score_candidates(loaded, task, history, 3, [plain, planted, plain])
    assert scores[0] == scores[2] < scores[1]  # the planted reply ranks first; a reply twice, scored alike


def test_reference_without_c_reads_pi_ref_on_the_view_without_c_cut_as_the_view_with_c(tiny_model):
    """π_ref's log-probs of each agent turn, read without c on the dialogue the view with c kept, land on the same
    turn's tokens of the view with c, even where the view with c had to drop the oldest turn to fit."""
    model, tokenizer = load_model(tiny_model)
    dialogue = [{"role": "user", "content": TIP_TASK["problem_description"]}, {"role": "assistant", "content":
                "What percent?"}, {"role": "user", "content": "18 percent."}, {"role": "assistant",
                "content": "I WANT TO ANSWER: def tip(bill): return round(bill * 0.18, 2)"}]
    trajectory, key = dict(task_id="tip", sample_idx=0, task=TIP_TASK, dialogue_history=dialogue, max_turns=3), (
        "tip", 0)
    length = len(critic.critic_views(tokenizer, [trajectory], True, 10_000)[key]["ids"]) - 1
    for max_length, dropped in ((10_000, 0), (length, 1)):  # with c one token too long: its oldest turn goes
        views = critic.critic_views(tokenizer, [trajectory], True, max_length)
        reference_views = critic.critic_views(tokenizer, [trajectory], False, max_length, cut_as=views)
        assert views[key]["first_turn"] == reference_views[key]["first_turn"] == dropped
        assert critic.critic_views(tokenizer, [trajectory], False, max_length)[key]["first_turn"] == 0  # uncut alone
        placed = critic.reference_task_logps(model, views, [key], reference_views, critic.sequence_logps)[key]
        plain = critic.sequence_logps(model, [reference_views[key]["ids"]])[0]
        assert len(views[key]["spans"]) == len(reference_views[key]["spans"]) == 2 - dropped
        for (start, end), (s, e) in zip(views[key]["spans"], reference_views[key]["spans"]):
            assert views[key]["ids"][start:end] == reference_views[key]["ids"][s:e]
            assert torch.equal(placed[start - 1:end - 1], plain[s - 1:e - 1])
        turn_tokens = sum(end - start for start, end in views[key]["spans"])
        assert len(placed) == len(views[key]["ids"]) - 1 and placed.count_nonzero() == turn_tokens  # 0 between
    same = critic.reference_task_logps(model, views, [key], None, critic.sequence_logps)  # the paper's: with c
    assert torch.equal(same[key], critic.sequence_logps(model, [views[key]["ids"]])[0])


def test_critic_with_reference_without_c_starts_at_the_mutual_information_and_scores_replies_as_trained(
        tmp_path, tiny_model, capsys):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=8)
    out = tmp_path / "critic"
    for conflicting in (["--head", "value"], ["--no-solution"]):  # a value head has no π_ref; without c, nothing
        with pytest.raises(SystemExit):
            critic.main(critic.parser.parse_args([data, "--model", tiny_model, "--reference-without-c", *conflicting]))
        assert "--reference-without-c needs --head log-ratio" in capsys.readouterr().err
    critic.main(critic.parser.parse_args([data, "--model", tiny_model, "--out", str(out), "--reference-without-c",
                                          "--lr", "1e-3", "--batch-size", "4", "--eval-fraction", "0.25",
                                          "--dtype", "fp32"]))
    metrics = json.loads((out / "metrics.json").read_text())
    loaded = critic.load_critic(str(out))
    assert loaded.reference_without_c and loaded.reference_model is not None
    untrained, tokenizer = load_model(tiny_model)

    def by_hand(task, dialogue, budget, scorer, reference, turns=slice(None)):  # Eq. 3, each log-prob on its view
        logps = []
        for model, use_c in ((scorer, True), (reference, False)):
            ids, spans, _, _ = critic.fit_to_length(tokenizer, task, dialogue, budget, use_c, loaded.max_length)
            row = critic.sequence_logps(model, [ids])[0]
            logps.append(torch.cat([row[start - 1:end - 1] for start, end in spans[turns]]))
        return (logps[0] - logps[1]).mean().item()  # token-mean: over the agent tokens
    # before training θ = π_ref, yet a dialogue's score is log π(a | o, c) − log π(a | o), its mutual information
    records = {critic.trajectory_id(t): t for t in load_trajectories(data)}
    task_id, (chosen, rejected) = metrics["before"]["pair_task_ids"][0], metrics["before"]["pair_samples"][0]
    margin = [by_hand(t["task"], t["dialogue_history"], turn_budget(t), untrained, untrained)
              for t in (records[(task_id, chosen)], records[(task_id, rejected)])]
    assert metrics["before"]["margins"][0] == pytest.approx(margin[0] - margin[1], abs=1e-5) != 0
    task = dict(TIP_TASK, task_id="new", problem_description="Task 99: What is the discount?")
    history = [{"role": "user", "content": task["problem_description"]}]
    replies = ["What is the discount?", "I WANT TO ANSWER: def tip(bill): return bill"]
    expected = [by_hand(task, history + [{"role": "assistant", "content": reply}], 3, loaded.model,
                        loaded.reference_model, slice(-1, None)) for reply in replies]
    assert critic.score_candidates(loaded, task, history, 3, replies) == pytest.approx(expected, abs=1e-5)


def test_the_cosine_schedule_warms_up_over_3_percent_then_decays_to_a_tenth():
    from colbench.models import adamw
    model = torch.nn.Linear(2, 2)

    def learning_rates(schedule, steps):
        optimizer, scheduler = adamw(model, 1.0, steps, schedule)
        rates = []
        for _ in range(steps):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return rates
    assert learning_rates("constant", 5) == [1.0] * 5
    rates = learning_rates("cosine", 100)  # 3 warm-up steps
    assert rates[:3] == pytest.approx([1 / 3, 2 / 3, 1.0]) and rates[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[2:], rates[3:])) and rates[51] == pytest.approx(0.55, abs=0.02)
    assert adamw(model, 1.0, 10)[0].param_groups[0]["weight_decay"] == 0.0


def test_critic_prompt_holds_the_solution_and_spans_select_exactly_the_agent_tokens(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    dialogue = HISTORY + [{"role": "assistant", "content": CANDIDATES[0]}]
    messages = critic.critic_messages(TIP_TASK, dialogue, 3)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert TIP_TASK["ground_truth"].strip() in messages[0]["content"]
    assert messages[0]["content"].endswith(agent_messages(TIP_TASK, dialogue, 3)[0]["content"])  # the agent's view
    ids, spans = tokenize_turns(tokenizer, messages)
    assert [tokenizer.decode(ids[a:b]) for a, b in spans] == [
        "What percent should the tip be?<|im_end|>", CANDIDATES[0] + "<|im_end|>"]
    outside = tokenizer.decode([ids[k] for k in range(len(ids)) if not any(a <= k < b for a, b in spans)])
    assert "return round(bill * 0.18, 2)" in outside and "What percent" not in outside
    blind = critic.critic_messages(TIP_TASK, dialogue, 3, use_solution=False)
    assert blind == agent_messages(TIP_TASK, dialogue, 3)


def test_critic_advantage_changes_with_the_solution_only_when_it_is_shown(two_model_critic):
    other_solution = dict(TIP_TASK, ground_truth="def tip(bill):\n    return bill * 0.25\n")
    with_c = critic.score_candidates(two_model_critic, TIP_TASK, HISTORY, 3, CANDIDATES)
    assert all(abs(a) > 1e-4 for a in with_c)
    with_other_c = critic.score_candidates(two_model_critic, other_solution, HISTORY, 3, CANDIDATES)
    assert all(abs(a - b) > 1e-5 for a, b in zip(with_c, with_other_c))
    blind = critic.Critic(two_model_critic.model, two_model_critic.reference_model, two_model_critic.tokenizer,
                          use_solution=False)
    assert (critic.score_candidates(blind, TIP_TASK, HISTORY, 3, CANDIDATES)
            == critic.score_candidates(blind, other_solution, HISTORY, 3, CANDIDATES))


@pytest.mark.parametrize("normalize", [True, False])
def test_critic_shared_history_scoring_equals_scoring_full_sequences(two_model_critic, normalize):
    scorer = critic.Critic(two_model_critic.model, two_model_critic.reference_model, two_model_critic.tokenizer,
                           normalize=normalize, logps_fn=remembering())  # --fast's scoring
    plain_scorer = critic.Critic(two_model_critic.model, two_model_critic.reference_model, two_model_critic.tokenizer,
                                 normalize=normalize)  # the plain way: each reply's sequence whole
    plain_scores = critic.score_candidates(plain_scorer, TIP_TASK, HISTORY, 3, CANDIDATES)
    critic.score_candidates(scorer, TIP_TASK, HISTORY[:1], 3, CANDIDATES[:2])  # the dialogue's turn state before
    memory = scorer.logps_fn.keywords["memory"]  # each model's prefix encoded last
    assert set(memory) == {scorer.model, scorer.reference_model}
    earlier = memory[scorer.model]["ids"]
    shared = critic.score_candidates(scorer, TIP_TASK, HISTORY, 3, CANDIDATES + CANDIDATES[:1])  # one twice
    assert memory[scorer.model]["ids"][:len(earlier)] == earlier and len(memory[scorer.model]["ids"]) > len(earlier)
    assert shared[-1] == shared[0]  # a reply sampled twice gets one score
    for candidate, score in zip(CANDIDATES, shared):
        messages = critic.critic_messages(TIP_TASK, HISTORY + [{"role": "assistant", "content": candidate}], 3)
        ids, spans = tokenize_turns(scorer.tokenizer, messages)
        with torch.no_grad():
            critic_logps = sequence_logps(scorer.model, [ids])[0]
            reference_logps = sequence_logps(scorer.reference_model, [ids])[0]
        plain = critic.turn_advantages(critic_logps, reference_logps, spans[-1:], normalize).item()
        assert score == pytest.approx(plain, abs=1e-4)
    assert shared[:-1] == pytest.approx(plain_scores, abs=1e-4)


def test_reference_without_c_scores_replies_the_same_the_plain_way_and_the_fast_way(two_model_critic):
    models = (two_model_critic.model, two_model_critic.reference_model, two_model_critic.tokenizer)
    fast = critic.Critic(*models, reference_without_c=True, logps_fn=remembering())  # --fast's scoring
    critic.score_candidates(fast, TIP_TASK, HISTORY[:1], 3, CANDIDATES[:2])  # a turn state before: memory continues
    scores = critic.score_candidates(fast, TIP_TASK, HISTORY, 3, CANDIDATES)
    assert scores == pytest.approx(critic.score_candidates(critic.Critic(*models, reference_without_c=True), TIP_TASK,
                                                           HISTORY, 3, CANDIDATES), abs=1e-4)
    assert scores != pytest.approx(critic.score_candidates(critic.Critic(*models), TIP_TASK, HISTORY, 3, CANDIDATES),
                                   abs=1e-4)  # π_ref reading c scores them otherwise


def test_critic_scores_candidates_on_the_view_cut_to_max_length_it_trained_on(tiny_model, tmp_path):
    folder = tmp_path / "critic"
    shutil.copytree(tiny_model, folder)  # π_θ: the tiny model; π_ref: another one, as args.json names it
    base = build_tiny_model(str(tmp_path / "base"), seed=1)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    whole = [len(tokenize_turns(tokenizer, critic.critic_messages(
        TIP_TASK, HISTORY + [{"role": "assistant", "content": reply}], 3))[0]) for reply in CANDIDATES]
    max_length = min(whole) - 3  # every candidate's whole view is over it: the oldest exchange goes
    (folder / "args.json").write_text(json.dumps({"model": base, "model_path": base, "no_solution": False,
                                                  "no_normalize": False, "max_length": max_length}))
    loaded = critic.load_critic(str(folder))
    scores = critic.score_candidates(loaded, TIP_TASK, HISTORY, 3, CANDIDATES)
    for reply, score in zip(CANDIDATES, scores):
        ids, spans, dropped, _ = critic.fit_to_length(tokenizer, TIP_TASK, HISTORY + [{"role": "assistant",
                                                                                      "content": reply}], 3, True,
                                                      max_length)
        assert dropped == 1 and len(spans) == 1
        with torch.no_grad():
            critic_logps = sequence_logps(loaded.model, [ids])[0]
            reference_logps = sequence_logps(loaded.reference_model, [ids])[0]
        assert score == pytest.approx(critic.turn_advantages(critic_logps, reference_logps, spans).item(), abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_target_log_softmax_gives_the_plain_formulas_values_and_gradients(dtype):
    torch.manual_seed(0)
    logits = (4 * torch.randn(2, 300, 1000)).to(dtype)  # 300 positions: three pieces, the last one short
    targets, weights = torch.randint(0, 1000, (2, 300)), torch.randn(2, 300)
    lean, plain = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    lean_logps = TargetLogSoftmax.apply(lean, targets)
    plain_logps = plain.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    (lean_logps * weights).sum().backward()
    (plain_logps * weights).sum().backward()
    assert lean_logps.dtype == torch.float32 and lean.grad.dtype == dtype
    assert torch.allclose(lean_logps, plain_logps, atol=1e-5)
    assert torch.allclose(lean.grad.float(), plain.grad.float(), atol=1e-5)


def test_shared_prefix_logps_of_one_task_equal_sequence_logps_of_each_trajectory(two_model_critic):
    dialogues = [HISTORY + [{"role": "assistant", "content": c}, {"role": "user", "content": "ok"},
                            {"role": "assistant", "content": "I WANT TO ANSWER: def tip(bill): return bill"}]
                 for c in CANDIDATES[:3]]
    encoded = [tokenize_turns(two_model_critic.tokenizer, critic.critic_messages(TIP_TASK, d, 3))
               for d in dialogues]
    with torch.no_grad():
        fast = shared_prefix_logps(two_model_critic.model, [ids for ids, _ in encoded],
                                   min(spans[0][0] for _, spans in encoded))
        for (ids, spans), fast_logps in zip(encoded, fast):
            plain = sequence_logps(two_model_critic.model, [ids])[0]
            assert fast_logps.shape == plain.shape
            for start, end in spans:  # every agent token, exactly where the plain path puts it
                assert torch.allclose(fast_logps[start - 1:end - 1], plain[start - 1:end - 1], atol=1e-4)


def test_shared_prefix_logps_of_sequences_sharing_under_two_tokens_equal_the_plain_way(two_model_critic):
    model = two_model_critic.model
    for sequences in ([[5, 6, 7, 8], [9, 10, 11]], [[5, 6, 7, 8], [5, 10, 11]], [[5, 6, 7], [5, 6, 9]]):
        for scored_from in (1, 2, 3):  # 1: nothing may be shared; 2 and 3: at most the first token or two
            with torch.no_grad():
                fast = shared_prefix_logps(model, sequences, scored_from)
                for ids, row in zip(sequences, fast):
                    plain = sequence_logps(model, [ids])[0]
                    assert row.shape == plain.shape
                    assert torch.allclose(row[scored_from - 1:], plain[scored_from - 1:], atol=1e-4), (sequences, scored_from)


def test_shared_prefix_states_equal_sequence_states_and_their_gradients(tiny_model):
    """--fast's value head (critic.turn_scores, training and ranking): each sequence's states from read_from on, and
    the gradient of a value read off them, are the plain way's."""
    model, _ = load_model(tiny_model, trainable=True)
    head = critic.value_head(model)
    cases = ([[5, 6, 7, 8, 9], [5, 6, 7, 10], [5, 6, 7, 8, 11, 12]], [[5, 6, 7, 8], [9, 10, 11]], [[5, 6], [5, 7]])
    for sequences in cases:
        for read_from in (1, 3, 4):
            values = {}
            for fast in (True, False):
                model.zero_grad()
                states = (shared_prefix_states(model, sequences, read_from) if fast else
                          critic.sequence_states(model, sequences))
                spans = [[(min(read_from, len(ids) - 1), len(ids))] for ids in sequences]
                value = sum(critic.turn_values(h, head, span) for h, span in zip(states, spans)).sum()
                value.backward()
                values[fast] = (value.detach(), [h[read_from:].detach() for h in states],
                                model.get_input_embeddings().weight.grad.clone())
            assert torch.allclose(values[True][0], values[False][0], atol=1e-4), (sequences, read_from)
            assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(values[True][1], values[False][1]))
            assert torch.allclose(values[True][2], values[False][2], atol=1e-5)


def test_ranking_quality_on_a_planted_case():
    # State 1: the critic ranks the passing answer first; state 2: it ranks them exactly backwards.
    from harness.judge import ranking_quality
    quality = ranking_quality([[0.9, 0.1, -0.5], [0.3, 0.2]], [[1.0, 0.5, 0.0], [0.0, 1.0]], ["a", "b"])
    assert quality["critic_pick"] == pytest.approx((1.0 + 0.0) / 2)
    assert quality["random_pick"] == pytest.approx((0.5 + 0.5) / 2)
    assert quality["difference"] == pytest.approx(0.0) and (quality["states"], quality["tasks"]) == (2, 2)
    assert quality["difference_ci95"] == [pytest.approx(-0.5), pytest.approx(0.5)]  # either task drawn twice
    assert quality["rank_correlation"] == pytest.approx((1.0 - 1.0) / 2)
    # Tests that cannot tell candidates apart give no correlation; ties in rank share their mean.
    assert ranking_quality([[1.0, 2.0]], [[0.5, 0.5]], ["a"])["rank_correlation"] is None
    assert stats.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)
    assert stats.ranks([3, 1, 3]) == [2.5, 1.0, 2.5]


def test_bootstrap_interval_resamples_tasks_and_brackets_the_mean():
    values = {"a": [1.0, 1.0], "b": [0.0, 0.0], "c": [1.0, 0.0]}
    low, high = stats.bootstrap_mean_ci(values)
    assert low < 0.5 < high and 0.0 <= low and high <= 1.0
    assert stats.bootstrap_mean_ci({"a": [0.2], "b": [0.2]}) == (0.2, 0.2)


def pair_names(pairs):
    """(task_id, chosen sample_idx, rejected sample_idx) of each pair."""
    return [(c["task_id"], c["sample_idx"], r["sample_idx"]) for c, r in pairs]


def test_critic_pairs_need_the_same_task_and_a_large_enough_reward_gap():
    other = dict(TIP_TASK, task_id="other")
    trajectories = [scored(TIP_TASK, 0, ["a"], 0.2), scored(TIP_TASK, 1, ["b"], 0.9), scored(TIP_TASK, 2, ["c"], 0.2),
                    scored(other, 0, ["d"], 1.0), scored(TIP_TASK, 3, ["e"], 0.25)]
    assert pair_names(preference_pairs(trajectories, 0.0)) == [
        ("tip", 1, 0), ("tip", 3, 0), ("tip", 1, 2), ("tip", 1, 3), ("tip", 3, 2)]
    assert pair_names(preference_pairs(trajectories, 0.5)) == [("tip", 1, 0), ("tip", 1, 2), ("tip", 1, 3)]


def test_critic_official_pairing_best_against_each_worse_of_solved_tasks_and_a_frontend_gap_of_0_1():
    failed, page = dict(TIP_TASK, task_id="failed"), {"task_id": "page", "problem_description": "A bakery page.",
                                                      "ground_truth": "<html><body><h1>Bread</h1></body></html>"}
    trajectories = ([scored(TIP_TASK, k, ["a"], reward) for k, reward in enumerate([0.5, 1.0, 0.2, 1.0, 0.5])]
                    + [scored(failed, k, ["b"], reward) for k, reward in enumerate([0.2, 0.9])]
                    + [scored(page, k, ["c"], reward) for k, reward in enumerate([0.70, 0.75, 0.95, 0.5])])
    # the best solved trajectory (the first of the two at 1.0) against each worse one; nothing from `failed`
    assert pair_names(preference_pairs(trajectories, 0.0, "official")) == [
        ("tip", 1, 0), ("tip", 1, 2), ("tip", 1, 4),
        ("page", 2, 0), ("page", 0, 3), ("page", 2, 1), ("page", 1, 3), ("page", 2, 3)]  # not 0.70 vs 0.75
    assert len(preference_pairs(trajectories, 0.0, "all")) == 8 + 1 + 6
    assert pair_names(preference_pairs(trajectories, 0.4, "official")) == [
        ("tip", 1, 0), ("tip", 1, 2), ("tip", 1, 4), ("page", 2, 3)]


def test_critic_max_length_drops_the_oldest_exchanges_and_keeps_the_problem_and_c(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    turns = ["first question?", "second question?", "I WANT TO ANSWER: def tip(bill): return 1"]
    trajectory = scored(TIP_TASK, 0, turns, 0.0, human="It is 18 percent.")
    dialogue = trajectory["dialogue_history"]
    full_ids, full_spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, dialogue, 3, True, 10_000)
    assert (len(full_spans), dropped, note) == (3, 0, "")
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, dialogue, 3, True, len(full_ids) - 5)
    assert (len(spans), dropped, note) == (2, 1, "dropped the oldest 1 agent turn(s)")
    assert tokenizer.decode(ids[spans[0][0]:spans[0][1]]) == "second question?<|im_end|>"
    kept = tokenizer.decode(ids)
    # the problem and c stay; the first question and the human's reply to it are gone
    assert TIP_TASK["problem_description"] in kept and TIP_TASK["ground_truth"].strip() in kept
    assert "first question?" not in kept and kept.count("It is 18 percent.") == 1
    assert kept.index(TIP_TASK["problem_description"]) < kept.index("second question?")
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, dialogue, 3, True, 10)
    assert (len(spans), dropped) == (1, 2)
    assert note == f"dropped the oldest 2 agent turn(s), still {len(ids)} tokens, kept whole"
    kept = tokenizer.decode(ids)
    assert TIP_TASK["problem_description"] in kept and TIP_TASK["ground_truth"].strip() in kept


def test_critic_max_length_keeps_the_last_turn_note_when_one_agent_turn_is_left(tiny_model):
    from colbench.env import LAST_TURN_NOTE
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trajectory = scored(TIP_TASK, 0, ["first question?", "I WANT TO ANSWER: def tip(bill): return 1"], 0.0,
                        human="It is 18 percent." + LAST_TURN_NOTE)  # the reply before the last of 2 turns
    dialogue = trajectory["dialogue_history"]
    full_ids, _, _, _ = critic.fit_to_length(tokenizer, TIP_TASK, dialogue, 2, True, 10_000)
    ids, spans, dropped, _ = critic.fit_to_length(tokenizer, TIP_TASK, dialogue, 2, True, len(full_ids) - 5)
    assert (len(spans), dropped) == (1, 1)
    before_last_turn = tokenizer.decode(ids[:spans[0][0]])
    assert "first question?" not in before_last_turn and "It is 18 percent." not in before_last_turn
    assert LAST_TURN_NOTE.strip() in before_last_turn  # the agent's last turn is still marked as its last
    assert dialogue[2]["content"].endswith(LAST_TURN_NOTE) and not dialogue[0]["content"].endswith(LAST_TURN_NOTE)


def planted_pattern_file(path, n_tasks=24):
    """Per task: one trajectory whose agent says the planted phrase (reward 1) and two that do not (reward 0)."""
    rng = random.Random(0)
    filler = "What is the discount? The tip is percent. Round to decimal places. def f(x): return x".split()

    def chatter():
        return " ".join(rng.choices(filler, k=6))

    records = []
    for n in range(n_tasks):
        task = dict(TIP_TASK, task_id=f"t{n}", problem_description=f"Task {n}: " + " ".join(rng.choices(filler, k=8)))
        records.append(scored(task, 0, [chatter() + " I WANT TO ANSWER: def tip(bill): return bill", chatter()], 1.0))
        records += [scored(task, k, [chatter(), chatter()], 0.0) for k in (1, 2)]
    return write_jsonl(path, records)


def test_critic_learns_a_planted_pattern_to_over_90_percent_held_out_accuracy(tmp_path, tiny_model):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=16)
    out = tmp_path / "critic"
    critic.main(critic.parser.parse_args([data, "--model", tiny_model, "--out", str(out), "--lr", "3e-3",
                                          "--epochs", "4", "--batch-size", "4", "--eval-fraction", "0.25",
                                          "--dtype", "fp32"]))
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["eval_tasks"], metrics["eval_pairs"], metrics["train_pairs"]) == (4, 8, 24)
    before, after = metrics["before"], metrics["after"]  # the same held-out evaluation, at θ = π_ref and trained
    assert before["pair_task_ids"] == after["pair_task_ids"] and before["margins"] == [0.0] * 8  # ties
    assert before["pair_accuracy"] == 0.5 and before["loss"] == pytest.approx(math.log(2))
    assert after["pair_accuracy"] > 0.9
    advantages = read_jsonl(out / "advantages.jsonl")
    assert len(advantages) == 4 * 3 * 2
    first_turns = [a for a in advantages if a["turn"] == 0]
    with_pattern = [a["advantage"] for a in first_turns if a["reward"] == 1.0]
    without = [a["advantage"] for a in first_turns if a["reward"] == 0.0]
    # the critic credits the turn that holds the pattern, more than the first turns without it
    assert statistics.mean(with_pattern) > statistics.mean(without)


@pytest.mark.parametrize("variant", [[], ["--reference-without-c"]])
def test_critic_trains_the_same_the_plain_way_and_the_fast_way(tmp_path, tiny_model, variant):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=6)
    common = [data, "--model", tiny_model, "--lr", "3e-3", "--epochs", "2", "--batch-size", "4",
              "--eval-fraction", "0.34", "--dtype", "fp32", *variant]
    for name, flags in (("fast", ["--fast"]), ("plain", [])):
        critic.main(critic.parser.parse_args([*common, *flags, "--out", str(tmp_path / name)]))
    fast, plain = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("fast", "plain"))
    assert fast["steps"] == plain["steps"] > 1 and fast["eval_pairs"] == plain["eval_pairs"] > 0
    assert plain["before"]["margins"] == pytest.approx(fast["before"]["margins"], abs=1e-4)
    assert plain["after"]["margins"] == pytest.approx(fast["after"]["margins"], abs=1e-4)
    assert plain["after"]["margins"] != pytest.approx(plain["before"]["margins"], abs=1e-3)  # it trained


def test_critic_runs_end_to_end_on_an_official_format_file(tmp_path, tiny_model):
    records = planted_pattern_file(tmp_path / "x.jsonl", n_tasks=3)
    official = []
    for record in read_jsonl(records):  # the official offline schema: no task_id, no sample_idx
        task = {k: v for k, v in record["task"].items() if k != "task_id"}
        official.append({"task": task, "dialogue_history": record["dialogue_history"], "answer": record["answer"],
                         "reward": record["reward"]})
    data = write_jsonl(tmp_path / "official.scored.jsonl", official)
    out = tmp_path / "critic"
    result = run_script("critic.py", data, "--model", tiny_model, "--out", str(out), "--epochs", "1",
                        "--eval-fraction", "0.5")
    assert "used: 3 tasks, 9 trajectories, 6 pairs" in result.stdout and "loss" in result.stdout
    written = {"config.json", "model.safetensors", "args.json", "metrics.json", "advantages.jsonl", "log.jsonl"}
    assert written <= set(os.listdir(out))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval_pairs"] + metrics["train_pairs"] == 6 and "pair_accuracy" in metrics["after"]
    assert set(read_jsonl(out / "advantages.jsonl")[0]) == {"task_id", "sample_idx", "turn", "advantage", "reward"}
    assert set(read_jsonl(out / "log.jsonl")[0]) >= {"step", "loss", "pair_accuracy", "margin", "tokens_per_s"}
    loaded = critic.load_critic(str(out))
    assert loaded.use_solution and loaded.normalize
    assert len(critic.score_candidates(loaded, official[0]["task"], HISTORY, 10, CANDIDATES[:2])) == 2

    ablation = run_script("critic.py", data, "--model", tiny_model, "--out", str(tmp_path / "ablation"),
                          "--epochs", "1", "--no-solution", "--no-normalize", "--gradient-checkpointing",
                          "--max-length", "60")
    assert "warning:" in ablation.stdout and "--max-length 60" in ablation.stdout
    loaded = critic.load_critic(str(tmp_path / "ablation"))
    assert not loaded.use_solution and not loaded.normalize


def test_a_critic_folder_is_whole_or_absent_when_saving_fails_midway(tmp_path, tiny_model, monkeypatch):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=3)
    out = tmp_path / "critic"
    args = critic.parser.parse_args([data, "--model", tiny_model, "--out", str(out), "--dtype", "fp32"])

    def fail_writing(path, records):  # advantages.jsonl, the last file: after the checkpoint and metrics.json
        raise OSError("disk full")
    monkeypatch.setattr(critic, "write_jsonl", fail_writing)
    with pytest.raises(OSError, match="disk full"):
        critic.main(args)
    assert not out.exists()  # what the demo takes for done
    assert {"config.json", "metrics.json"} <= set(os.listdir(f"{out}.partial"))  # the half-written folder
    monkeypatch.undo()
    critic.main(args)  # the next run clears it and writes the folder whole
    assert "advantages.jsonl" in os.listdir(out) and not os.path.exists(f"{out}.partial")


def test_a_trainer_killed_midway_leaves_no_output_folder(tmp_path, scored_file, tiny_model):
    out = tmp_path / "warm"
    log = tmp_path / "warm.partial" / "log.jsonl"
    trainer = subprocess.Popen([sys.executable, "-m", "harness.baselines", scored_file, "--method", "sft",
                                "--model", tiny_model, "--epochs", "1000", "--batch-size", "1", "--out", str(out)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (log.exists() and log.read_text().count("\n") >= 2) and time.time() < deadline:
            time.sleep(0.1)
        assert trainer.poll() is None and log.read_text().count("\n") >= 2  # training, steps logged
    finally:
        trainer.kill()
        trainer.wait()
    assert not out.exists() and os.path.exists(tmp_path / "warm.partial" / "sft.jsonl")


def test_colbench_imports_no_stage_script():
    stages = {"critic", "policy", "rollout", "evaluate"}
    for path in glob.glob(os.path.join(ROOT, "colbench", "**", "*.py"), recursive=True):
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not stages & {name.split(".")[0] for name in names}, (path, node.lineno)


@pytest.mark.parametrize("style", CHAT_STYLES)
def test_critic_trains_on_untrimmed_official_replies_under_each_chat_template(tmp_path, style):
    model = build_tiny_model(str(tmp_path / "model"), style=style)
    data = write_jsonl(tmp_path / "official.scored.jsonl", official_scored(2))
    out = tmp_path / "critic"
    result = run_script("critic.py", data, "--model", model, "--out", str(out), "--epochs", "1",
                        "--eval-fraction", "0.5")
    assert "used: 2 tasks, 6 trajectories, 6 pairs" in result.stdout and "done: 1 steps" in result.stdout
    assert sorted(a["turn"] for a in read_jsonl(out / "advantages.jsonl")) == [0, 0, 0, 1, 1, 1]


def test_critic_train_also_adds_training_pairs_and_keeps_the_held_out_split(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "official.scored.jsonl", official_scored(4))
    extra = write_jsonl(tmp_path / "scripted.scored.jsonl", SCORED)  # task "tip": 3 pairs under --pairing all
    held_out = []
    for name, more in (("alone", []), ("with", ["--train-also", extra])):
        result = run_script("critic.py", data, *more, "--model", tiny_model, "--out", str(tmp_path / name),
                            "--eval-fraction", "0.5")
        held_out.append(json.load(open(tmp_path / name / "metrics.json"))["eval_task_ids"])
    assert "used: 5 tasks, 15 trajectories, 15 pairs -> train 3 tasks / 9 pairs, held out 2 tasks / 6" in result.stdout
    assert held_out[0] == held_out[1] and "tip" not in held_out[1]  # the same tasks held out, none of the extra's
    result = run_script("critic.py", data, "--train-also", data, "--model", tiny_model, "--out", str(tmp_path / "c"),
                        check=False)
    assert result.returncode == 2 and "--train-also: task" in result.stderr and "Traceback" not in result.stderr


def test_critic_without_pairs_or_rewards_exits_with_a_clear_message(tmp_path, tiny_model):
    ties = write_jsonl(tmp_path / "ties.jsonl", [scored(TIP_TASK, k, ["a"], 0.5) for k in range(3)])
    result = run_script("critic.py", ties, "--model", tiny_model, "--out", str(tmp_path / "c"), check=False)
    assert result.returncode == 2 and "error: no pairs" in result.stderr and "Traceback" not in result.stderr
    without_reward = {k: v for k, v in scored(TIP_TASK, 0, ["a"], 0.5).items() if k != "reward"}
    unscored = write_jsonl(tmp_path / "unscored.jsonl", [scored(TIP_TASK, 1, ["a"], 0.0), without_reward])
    result = run_script("critic.py", unscored, "--model", tiny_model, "--out", str(tmp_path / "c"), check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {unscored}:2: missing field 'reward', which the critic needs: score the file with evaluate.py" \
        in result.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("script, changes, line, expected", [
    ("evaluate.py", [{"sample_idx": "0"}], 1, "field 'sample_idx' must be int, got str"),
    ("evaluate.py", [{}, {"sample_idx": True}], 2, "field 'sample_idx' must be int, got bool"),
    ("evaluate.py", [{}, {"task_id": ["tip"]}], 2, "field 'task_id' must be str, got list"),
    ("evaluate.py", [{"dialogue_history": "hi"}], 1, "field 'dialogue_history' must be list, got str"),
    ("evaluate.py", [{}, {"dialogue_history": [["user", "hi"]]}], 2, "dialogue_history[0] must be an object, got list"),
    ("evaluate.py", [{"dialogue_history": [{"role": "user", "content": 3}]}], 1,
     "dialogue_history[0]: field 'content' must be str, got int"),
    ("evaluate.py", [{}, {}, {"sample_idx": 0}], 3,
     "fields 'task_id', 'sample_idx': ('tip', 0) appears twice, on lines 1 and 3"),
    ("critic.py", [{}, {"sample_idx": 0}], 2, "fields 'task_id', 'sample_idx': ('tip', 0) appears twice, on lines 1 and 2"),
    ("critic.py", [{}, {"sample_idx": 1.0}], 2, "field 'sample_idx' must be int, got float"),
    ("critic.py", [{}, {"reward": "1.0"}], 2, "field 'reward' must be a number, got str, which the critic needs"),
    ("critic.py", [{"reward": True}, {}], 1, "field 'reward' must be a number, got bool, which the critic needs"),
    ("critic.py", [{}, {"reward": float("nan")}], 2, "field 'reward' must be finite, got nan, which the critic needs"),
])
def test_stages_refuse_a_bad_trajectory_with_one_line_naming_file_line_and_field(tmp_path, script, changes, line,
                                                                                 expected):
    rows = [{**scored(TIP_TASK, k, ["a"], float(k % 2)), **change} for k, change in enumerate(changes)]
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    result = run_script(script, bad, "--out", str(tmp_path / "out"), check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(f"error: {bad}:{line}: {expected}")
    assert os.listdir(tmp_path) == ["bad.jsonl"]  # refused before anything is written


def test_critic_accepts_frontend_tasks_with_the_reference_page_as_c(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    page = {"task_id": "page", "problem_description": "A landing page for my bakery.",
            "ground_truth": "<html><body><h1>Fresh bread</h1><p>Open daily.</p></body></html>"}
    turns = ["What colours do you like?", "I WANT TO ANSWER: <html><body><h1>Bread</h1></body></html>"]
    trajectory = scored(page, 0, turns, 0.6)
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, page, trajectory["dialogue_history"], 3, True,
                                                        10_000)
    assert "<h1>Fresh bread</h1>" in tokenizer.decode(ids[:spans[0][0]]) and (len(spans), dropped, note) == (2, 0, "")
    assert tokenizer.decode(ids[spans[1][0]:spans[1][1]]).startswith("I WANT TO ANSWER: <html>")

    # --page-facts: c is what the human knows of the page, the same words it answers with; code stays code.
    shipped = frontend_tasks("train")[0]
    told = critic.critic_messages(shipped, [{"role": "user", "content": "A page"}], 3, page_facts=True)[0]["content"]
    assert frontend.page_summary(shipped) in told and shipped["ground_truth"][:40] not in told
    first = shipped["departures"][0]  # c lists the departures, as the human tells them
    assert frontend.fact_sentence(first, frontend.reference_facts(shipped)[first]) in told
    assert critic.critic_messages(TIP_TASK, [], 3, page_facts=True) == critic.critic_messages(TIP_TASK, [], 3)

# ======================== 6. policy.py: the DPO + NLL loss by hand, the pairing rule, training, each method end to end

def scored_trajectory(sample_idx, reward, question, code):
    return {"task_id": "tip", "sample_idx": sample_idx, "task": TIP_TASK, "dialogue_history": [
        {"role": "user", "content": TIP_TASK["problem_description"]},
        {"role": "assistant", "content": question},
        {"role": "user", "content": "The tip is 18 percent of the bill."},
        {"role": "assistant", "content": "I WANT TO ANSWER: " + code}],
        "answer": code, "reward": reward, "success": reward == 1.0}


SCORED = [scored_trajectory(0, 1.0, "What percent should the tip be?",
                            "def tip(bill):\n    return round(bill * 0.18, 2)"),
          scored_trajectory(1, 0.3, "Hello?", "def tip(bill):\n    return bill * 0.2"),
          scored_trajectory(2, 0.0, "Which font?", "def tip(bill):\n    return 0")]


@pytest.fixture(scope="module")
def scored_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("policy_data") / "train.scored.jsonl", SCORED)


@pytest.fixture(scope="module")
def critic_dir(tmp_path_factory, scored_file, tiny_model):
    folder = str(tmp_path_factory.mktemp("policy_critic") / "critic")
    run_script("critic.py", scored_file, "--model", tiny_model, "--out", folder, "--epochs", "1")
    return folder


def test_policy_dpo_loss_is_log_2_at_initialization_and_matches_a_hand_computed_value():
    from policy import dpo_nll_loss
    logps = torch.tensor([-12.0, -3.5])
    losses, chosen_rewards, rejected_rewards = dpo_nll_loss(logps, logps - 1, logps, logps - 1, torch.ones(2), 0.1, 0.0)
    assert losses.tolist() == pytest.approx([math.log(2)] * 2, abs=1e-7)
    assert chosen_rewards.tolist() == [0.0, 0.0] and rejected_rewards.tolist() == [0.0, 0.0]
    # beta (-3 - -4) = 0.1, beta (-5 - -4) = -0.1: -log sigmoid(0.2) = log(1 + e^-0.2) = 0.5981389; the NLL of a
    # chosen reply of 2 tokens whose log-prob is -3: 1.5 a token, weighed 0.01
    loss, chosen_rewards, rejected_rewards = dpo_nll_loss(
        torch.tensor([-3.0]), torch.tensor([-5.0]), torch.tensor([-4.0]), torch.tensor([-4.0]), torch.tensor([2.0]),
        0.1, 0.01)
    assert loss.item() == pytest.approx(0.5981389 + 0.015, abs=1e-6)
    assert chosen_rewards.item() == pytest.approx(0.1) and rejected_rewards.item() == pytest.approx(-0.1)


def test_policy_pairs_cross_the_median_and_chosen_scores_higher():
    from policy import top_bottom_pairs
    rng = random.Random(0)
    for trial in range(200):
        n = rng.choice([2, 3, 5, 16])
        scores = [rng.choice([0.0, 0.5, 1.0]) if trial % 2 else rng.gauss(0, 1) for _ in range(n)]
        pairs = top_bottom_pairs(scores, 4, rng)
        median = statistics.median(scores)
        assert len(pairs) <= 4 and len(set(pairs)) == len(pairs)
        for chosen, rejected in pairs:
            assert scores[chosen] > scores[rejected]
            assert scores[chosen] >= median >= scores[rejected]
        if trial % 2 == 0 and n >= 4:  # distinct scores: always the full number of pairs
            assert len(pairs) == 4
    assert top_bottom_pairs([0.3] * 16, 4, rng) == []  # all equal: no preference, no pair


def test_policy_pairs_follow_the_critic_alone_under_the_prompt_the_agent_saw():
    from policy import state_pairs
    answer, question = ANSWER_MARKER + " def f(): return 1", "What should f return?"
    replies, scores = [question, question + " ", answer, answer + " "], [0.9, 0.8, 0.2, 0.1]
    trajectory = {"task": TIP_TASK, "task_id": "t", "sample_idx": 0, "max_turns": 3}
    dialogue = [{"role": "user", "content": "hi"}] + [{"role": "assistant", "content": "Which f?"},
                                                      {"role": "user", "content": "f"}] * 2
    rows = state_pairs(trajectory, 2, dialogue, replies, scores, 4, random.Random(0))  # the last turn too
    assert len(rows) == 4 and all(r["chosen"][0]["content"].startswith("What") for r in rows)
    assert all(r["prompt"] == agent_messages(TIP_TASK, dialogue, 3) for r in rows)


def test_policy_few_dpo_steps_raise_the_chosen_minus_rejected_margin(tiny_model, tmp_path):
    from policy import frozen_pair_logps, parser, tokenize_completion, train
    model, tokenizer = load_model(tiny_model, trainable=True, device="cpu")
    prompt = [{"role": "system", "content": "Ask first."}, {"role": "user", "content": "I want a tip calculator."}]
    pairs = [{"chosen": tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": chosen}]),
              "rejected": tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": rejected}])}
             for chosen, rejected in [("What percent is the tip?", "def tip(bill): return bill"),
                                      ("Round to 2 decimal places?", "I WANT TO ANSWER: def f(x): return 1")]]
    settings = parser.parse_args(["x", "--epochs", "6", "--batch-size", "2", "--lr", "1e-3", "--nll-coef", "0.01"])
    reference = frozen_pair_logps(model, pairs, torch.float32, shared_prefix_logps, settings.pairs_per_pass)
    with open(tmp_path / "log.jsonl", "w") as log:
        records = train(model, pairs, reference, random.Random(0), shared_prefix_logps, torch.float32, log, settings)
    assert len(records) == 6 and len(read_jsonl(tmp_path / "log.jsonl")) == 6
    assert abs(records[0]["margin"]) < 1e-6  # policy == reference at the first step
    assert records[-1]["margin"] > records[0]["margin"] + 0.05 and records[-1]["accuracy"] == 1.0
    assert set(records[0]) >= {"step", "loss", "accuracy", "margin", "chosen_logps", "rejected_logps", "tokens_per_s"}


def test_policy_batch_gives_the_same_gradient_the_plain_way_and_the_fast_way(tiny_model, monkeypatch):
    from policy import frozen_pair_logps, pair_prompt, parser, prompt_groups, tokenize_completion, train
    _, tokenizer = load_model(tiny_model, device="cpu")
    prompts = [[{"role": "system", "content": "Ask first."}, {"role": "user", "content": problem}]
               for problem in ("A tip calculator.", "Pay for a shift.")]
    replies = ["What percent?", "Round it?", ANSWER_MARKER + " def tip(bill): return bill", "Which currency?"]
    pairs = [{side: tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": reply}])
              for side, reply in (("chosen", chosen), ("rejected", rejected))}
             for prompt in prompts for chosen, rejected in (replies[0:3:2], replies[1:4:2])]
    settings = parser.parse_args(["x", "--batch-size", "4", "--lr", "1e-3"])
    per_pass = settings.pairs_per_pass
    assert prompt_groups(range(4), lambda i: pair_prompt(pairs[i]), per_pass) == [[0, 1], [2, 3]]  # a state's pairs
    assert [len(group) for group in prompt_groups(range(12), lambda i: pair_prompt(pairs[i % 4]), per_pass)] == [
        per_pass, 2, per_pass, 2]
    gradients, references = {}, {}
    for fast, logps_fn in ((True, shared_prefix_logps), (False, sequence_logps)):
        model, _ = load_model(tiny_model, trainable=True, device="cpu")
        seen = gradients.setdefault(fast, [])  # the batch's gradient, before clipping and the step
        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                            lambda parameters, _: seen.extend(p.grad.clone() for p in parameters))
        references[fast] = frozen_pair_logps(model, pairs, torch.float32, remembering() if fast else logps_fn, per_pass)
        with open(os.devnull, "w") as log:
            train(model, pairs, references[fast], random.Random(0), logps_fn, torch.float32, log, settings)
    assert references[True].shape == (4, 2) and torch.allclose(references[True], references[False], atol=1e-4)
    assert len(gradients[True]) == len(gradients[False]) > 0
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(gradients[True], gradients[False]))


def test_policy_shared_prompt_logps_and_gradients_equal_full_sequence_ones(tiny_model):
    from policy import completion_logps, tokenize_completion
    model, tokenizer = load_model(tiny_model, trainable=True, device="cpu")
    prompt = [{"role": "system", "content": "Ask first."}, {"role": "user", "content": "A tip calculator."},
              {"role": "assistant", "content": "What percent?"}, {"role": "user", "content": "18 percent."}]
    sequences = [tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": reply}])
                 for reply in ("Round to cents?", "I WANT TO ANSWER: def tip(bill): return bill * 0.18")]
    shared, counts = completion_logps(model, sequences, shared_prefix_logps)
    shared.sum().backward()
    shared_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    full = []
    for ids, spans in sequences:  # the last span only: the earlier assistant turn belongs to the prompt
        logps = sequence_logps(model, [ids])[0]
        full.append(sum(logps[start - 1:end - 1].sum() for start, end in spans))
        assert counts[len(full) - 1] == sum(end - start for start, end in spans) and len(spans) == 1
    torch.stack(full).sum().backward()
    assert torch.allclose(shared, torch.stack(full).detach(), atol=1e-4)
    assert torch.allclose(shared_grad, model.lm_head.weight.grad, atol=1e-6)


def test_critic_and_policy_run_by_default_the_sequence_logps_they_show(tmp_path, scored_file, critic_dir, tiny_model,
                                                                        monkeypatch):
    """A default run executes critic.py's sequence_logps, never colbench/fast_logps.py (its hand-written backward
    included): the fast path runs only under --fast, which refuses the flags it cannot serve."""
    import colbench.fast_logps
    import policy
    calls, plain = [], critic.sequence_logps

    def counted(model, sequences):
        calls.append(len(sequences))
        return plain(model, sequences)

    def never(*args, **kwargs):
        raise AssertionError("the fast path ran without --fast")
    for module in (critic, policy):
        monkeypatch.setattr(module, "sequence_logps", counted)
        monkeypatch.setattr(module, "shared_prefix_logps", never)
    for name in ("shared_prefix_logps", "encode_prefix", "token_logps"):
        monkeypatch.setattr(colbench.fast_logps, name, never)
    monkeypatch.setattr(colbench.fast_logps.TargetLogSoftmax, "apply", never)
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=4)
    critic.main(critic.parser.parse_args([data, "--model", tiny_model, "--out", str(tmp_path / "critic"),
                                          "--dtype", "fp32"]))
    assert calls and (tmp_path / "critic" / "metrics.json").exists()
    trained = len(calls)
    policy.main(policy.parser.parse_args([scored_file, "--critic", critic_dir, "--model", tiny_model, "--candidates", "2",
                                          "--max-new-tokens", "4", "--dtype", "fp32", "--out", str(tmp_path / "policy")]))
    assert len(calls) > trained and (tmp_path / "policy" / "config.json").exists()
    for stage in (critic, policy):
        with pytest.raises(SystemExit):
            stage.main(stage.parser.parse_args([data, "--fast", "--gradient-checkpointing"]))


@pytest.mark.parametrize("fast", [False, True])
def test_rollout_and_policy_sample_by_default_with_sample_plain(tmp_path, scored_file, tiny_model, monkeypatch, fast):
    """A default run of rollout.py and of policy.py samples by colbench/models.py's sample_plain (transformers'
    model.generate), with glibc's memory settings; --fast switches in sample_shrinking_batch and freed memory kept."""
    import colbench.models
    import policy
    import rollout
    calls = []

    def spy(name, function):
        def recorded(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)
        return recorded
    for name in ("sample_plain", "sample_shrinking_batch"):
        monkeypatch.setattr(colbench.models, name, spy(name, getattr(colbench.models, name)))
    monkeypatch.setattr(colbench.models, "keep_freed_memory", spy("keep_freed_memory", lambda: None))
    expected = {"sample_shrinking_batch", "keep_freed_memory"} if fast else {"sample_plain"}
    switch = ["--fast"] if fast else []
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK])
    rollout.main(rollout.parser.parse_args([tasks, "--agent", tiny_model, "--samples", "2", "--max-turns", "1",
                                            "--max-new-tokens", "4", "--out", str(tmp_path / "t.jsonl"), *switch]))
    assert set(calls) == expected
    calls.clear()
    policy.main(policy.parser.parse_args([scored_file, "--critic", "random", "--model", tiny_model, "--candidates", "2",
                                          "--max-new-tokens", "4", "--out", str(tmp_path / "policy"), *switch]))
    assert set(calls) == expected


def rollout_runs(policy_dir, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK])
    result = run_script("rollout.py", tasks, "--agent", policy_dir, "--samples", "1", "--max-turns", "1",
                        "--max-new-tokens", "4", "--out", str(tmp_path / "after.traj.jsonl"))
    assert "done: 1 trajectories" in result.stdout


def test_policy_sweet_end_to_end_writes_trl_pairs_and_a_checkpoint_rollout_runs(tmp_path, scored_file, critic_dir,
                                                                                tiny_model):
    out = str(tmp_path / "policy")
    result = run_script("policy.py", scored_file, "--critic", critic_dir, "--model", tiny_model, "--candidates", "4",
                        "--pairs-per-turn", "2", "--max-new-tokens", "8", "--batch-size", "4", "--out", out)
    assert "done:" in result.stdout
    pairs = read_jsonl(f"{out}/pairs.jsonl")
    assert 0 < len(pairs) <= 2 * 6  # 3 trajectories x 2 agent turns, at most 2 pairs each
    for pair in pairs:
        assert set(pair) >= {"prompt", "chosen", "rejected", "chosen_score", "rejected_score", "task_id", "sample_idx"}
        assert pair["prompt"][0]["role"] == "system" and pair["prompt"][-1]["role"] == "user"
        assert all(set(m) == {"role", "content"} for m in pair["prompt"])
        assert [m["role"] for m in pair["chosen"]] == ["assistant"] == [m["role"] for m in pair["rejected"]]
        assert pair["chosen_score"] > pair["rejected_score"]
    log = read_jsonl(f"{out}/log.jsonl")
    assert log and set(log[0]) >= {"step", "loss", "accuracy", "margin", "chosen_logps", "rejected_logps",
                                   "tokens_per_s"}
    assert json.load(open(f"{out}/args.json"))["critic"] == critic_dir and os.path.exists(f"{out}/config.json")
    rollout_runs(out, tmp_path)


def test_policy_scores_each_rollout_turn_under_the_prompt_the_agent_saw(tmp_path, tiny_model):
    from harness.baselines import trajectory_sequence
    out = tmp_path / "traj.jsonl"
    run_script("rollout.py", write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK]), "--agent", tiny_model, "--samples", "2",
               "--max-turns", "2", "--max-new-tokens", "4", "--out", str(out))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trajectories = load_trajectories(str(out))
    assert any(sum(t["role"] == "assistant" for t in r["dialogue_history"]) == 2 for r in trajectories)
    for trajectory in trajectories:
        assert trajectory["max_turns"] == 2 and trajectory["rollout"]["agent"] == tiny_model
        prompts = [turn["input"] for turn in trajectory["dialogue_history"] if turn["role"] == "assistant"]
        ids, spans = trajectory_sequence(tokenizer, trajectory)
        # the text before each scored turn is the prompt rollout.py recorded for it
        assert [tokenizer.decode(ids[:start], clean_up_tokenization_spaces=False) for start, _ in spans] == prompts


def test_policy_sweet_samples_the_candidates_through_a_server(tmp_path, scored_file, critic_dir, tiny_model,
                                                              stub_server):
    StubOpenAI.honours_n = False  # the harder path: every state costs one request per candidate
    out = str(tmp_path / "policy")
    result = run_script("policy.py", scored_file, "--critic", critic_dir, "--model", tiny_model,
                        "--sampler", stub_server, "--candidates", "3", "--pairs-per-turn", "2", "--max-new-tokens", "8",
                        "--out", out)
    assert "from 6 turn states" in result.stdout and "done:" in result.stdout
    asked = StubOpenAI.requests_seen
    assert len(asked) == 6 * 3 and sum(body.get("n") == 3 for body in asked) == 6
    assert all(body["messages"][0]["role"] == "system" and body["messages"][-1]["role"] == "user" for body in asked)
    pairs = read_jsonl(f"{out}/pairs.jsonl")
    assert pairs and all("# sample" in pair["chosen"][0]["content"] and "# sample" in pair["rejected"][0]["content"]
                         for pair in pairs)


@pytest.mark.parametrize("method, data_file", [("mt-dpo", "pairs.jsonl"), ("rft", "sft.jsonl")])
def test_policy_baselines_end_to_end(tmp_path, scored_file, tiny_model, method, data_file):
    out = str(tmp_path / method)
    result = run_script("-m", "harness.baselines", scored_file, "--method", method, "--model", tiny_model,
                        "--out", out)
    assert "done:" in result.stdout
    rows = read_jsonl(f"{out}/{data_file}")
    if method == "mt-dpo":  # rewards 1.0, 0.3, 0.0: three pairs, each whole dialogue after the problem
        assert len(rows) == 3 and all(r["chosen_score"] > r["rejected_score"] for r in rows)
        assert all([m["role"] for m in r["chosen"]] == ["assistant", "user", "assistant"] for r in rows)
    else:  # the one successful trajectory, in TRL's prompt-completion format
        assert len(rows) == 1 and rows[0]["sample_idx"] == 0 and rows[0]["completion"][-1]["role"] == "assistant"
    assert ("nll" if method == "rft" else "margin") in read_jsonl(f"{out}/log.jsonl")[0]
    rollout_runs(out, tmp_path)


def test_rft_runs_on_frontend_data_where_each_tasks_best_page_is_a_success(tmp_path, tiny_model):
    pages = [{"task_id": f"page{n}", "problem_description": f"A page for bakery {n}.",
              "ground_truth": "<html><body><h1>Bread</h1></body></html>"} for n in range(2)]
    records = [scored(pages[0], k, ["Which colors?", "<html><body><h1>Buns</h1></body></html>"], reward)
               for k, reward in enumerate([0.3, 0.7, 0.5])]
    records += [scored(pages[1], k, ["<html><body>Cake</body></html>"], 0.4) for k in range(2)]  # no best: a tie
    for record in records:
        del record["success"]  # frontend rewards as evaluate.py scores them: a similarity, no success of its own
    trajectories, out = write_jsonl(tmp_path / "pages.traj.jsonl", records), tmp_path / "pages.scored.jsonl"
    run_script("evaluate.py", trajectories, "--keep-rewards", "--out", str(out))
    assert [r["success"] for r in read_jsonl(out)] == [False, True, False, False, False]
    result = run_script("-m", "harness.baselines", str(out), "--method", "rft", "--model", tiny_model,
                        "--out", str(tmp_path / "rft"))
    assert "done:" in result.stdout
    assert [(r["task_id"], r["sample_idx"]) for r in read_jsonl(tmp_path / "rft" / "sft.jsonl")] == [("page0", 1)]


def test_policy_mt_dpo_pairs_by_the_pairing_rule_asked_for():
    from harness.baselines import mt_dpo_pairs
    trajectories = [dict(t) for t in SCORED]  # rewards 1.0, 0.3, 0.0
    for pairing, expected in (("all", [(0, 1), (0, 2), (1, 2)]), ("official", [(0, 1), (0, 2)])):
        rows = mt_dpo_pairs(trajectories, 0.0, pairing)
        assert [(row["chosen_sample_idx"], row["rejected_sample_idx"]) for row in rows] == expected


def test_data_fraction_whole_tasks_for_the_baselines_and_trajectories_across_tasks_for_sweet_rl():
    from colbench.data import task_subset, trajectory_subset
    trajectories = [dict(SCORED[0], task_id=f"t{i // 3}", sample_idx=i % 3) for i in range(30)]  # 10 tasks x 3
    kept = task_subset(trajectories, 0.3, random.Random(7))
    assert len(kept) == 9 and len({t["task_id"] for t in kept}) == 3  # 3 whole tasks: MT-DPO pairs within them
    assert kept == task_subset(trajectories, 0.3, random.Random(7))  # the same seed, the same data
    kept = trajectory_subset(trajectories, 0.3, random.Random(7))
    assert len(kept) == 9 and len({t["task_id"] for t in kept}) > 3  # policy.py: states from more tasks
    assert kept == [t for t in trajectories if t in kept]  # in file order
    assert kept == trajectory_subset(trajectories, 0.3, random.Random(7))
    for subset in (task_subset, trajectory_subset):
        assert subset(trajectories, 1.0, random.Random(7)) == trajectories


def test_policy_controls_rank_the_same_candidates_at_random_or_by_another_critic(tmp_path, scored_file, critic_dir,
                                                                                tiny_model):
    common = ["--model", tiny_model, "--candidates", "4", "--pairs-per-turn", "2", "--max-new-tokens", "8"]
    run_script("policy.py", scored_file, "--critic", critic_dir, *common, "--out", str(tmp_path / "sweet"))
    sampled = read_jsonl(tmp_path / "sweet" / "candidates.jsonl")
    assert len(sampled) == 6 and all(len(row["candidates"]) == len(row["scores"]) == 4 for row in sampled)
    sampled[0]["candidates"][1] = sampled[0]["candidates"][0] = "the same reply twice"
    planted = write_jsonl(tmp_path / "planted.jsonl", sampled)
    result = run_script("policy.py", scored_file, "--critic", "random", "--sampled", planted, *common,
                        "--out", str(tmp_path / "random"))
    assert "done:" in result.stdout and "sampling" not in result.stderr  # nothing sampled: the same candidates
    control = read_jsonl(tmp_path / "random" / "candidates.jsonl")
    assert [row["candidates"] for row in control] == [row["candidates"] for row in sampled]
    assert [row["scores"] for row in control] != [row["scores"] for row in sampled]
    assert all(0 <= score < 1 for row in control for score in row["scores"])  # uniform random scores
    assert control[0]["scores"][0] == control[0]["scores"][1]  # the same reply, the same score: never a pair
    assert all(row["chosen"] != row["rejected"] for row in read_jsonl(tmp_path / "random" / "pairs.jsonl"))
    wrong = write_jsonl(tmp_path / "other.jsonl", sampled[1:])
    result = run_script("policy.py", scored_file, "--critic", "random", "--sampled", wrong, *common,
                        "--out", str(tmp_path / "p"), check=False)
    assert result.returncode == 2 and "no candidates for 1 of the 6 turn states" in result.stderr
    assert not (tmp_path / "p").exists()


def test_policy_says_why_when_there_is_nothing_to_train_on(tmp_path, tiny_model):
    failed = write_jsonl(tmp_path / "failed.scored.jsonl", SCORED[1:])
    result = run_script("-m", "harness.baselines", failed, "--method", "rft", "--model", tiny_model,
                        "--out", str(tmp_path / "p"), check=False)
    assert result.returncode == 2 and "error: no successful trajectory" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_script("policy.py", failed, "--critic", str(tmp_path / "nowhere"), "--model", tiny_model,
                        "--out", str(tmp_path / "p"), check=False)
    assert result.returncode == 2 and "error: no critic at" in result.stderr and "critic.py" in result.stderr
    assert not (tmp_path / "p").exists()  # neither args.json nor an empty sft.jsonl
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": {}}\n')
    result = run_script("policy.py", str(bad), "--model", tiny_model, check=False)
    assert result.returncode == 2 and f"{bad}:1" in result.stderr and "Traceback" not in result.stderr


def test_policy_refuses_a_dead_sampler_before_writing_anything(tmp_path):
    scored_path = write_jsonl(tmp_path / "train.scored.jsonl", SCORED)
    critic = tmp_path / "critic"
    critic.mkdir()
    (critic / "args.json").write_text("{}")
    dead = closed_port_url()
    result = run_script("policy.py", scored_path, "--critic", str(critic), "--sampler", dead,
                        "--out", str(tmp_path / "p"), check=False)
    assert result.returncode == 2 and f"error: --sampler {dead}: no OpenAI-compatible server answers" in result.stderr
    assert "forward passes" not in result.stdout and not (tmp_path / "p").exists()


# ======================== 7. frontend design: tasks, rendering, the simulated human, CLIP scoring, win rate

PAGE = ("<!DOCTYPE html><html><head><style>body{background:#0f1c3f;color:#f5f5f5;font-family:Georgia,serif}"
        "nav{background:#d4a017;padding:12px} nav a{color:#0f1c3f;margin-right:20px}</style></head><body>"
        "<nav><a href='#'>Home</a><a href='#menu'>Menu</a><a href='#visit'>Visit</a></nav><h1>Golden Crust</h1>"
        "<section><h2>Menu</h2><p>Bread.</p></section><section><h2>Visit</h2><p>Maple Street.</p></section>"
        "<footer>2024</footer></body></html>")
PAGE_TASK = {"task_id": "bakery", "problem_description": "I run a bakery called Golden Crust; make me a website.",
             "ground_truth": PAGE}


def turn(text):
    """A dialogue whose latest message is the agent's `text`."""
    return [{"role": "user", "content": PAGE_TASK["problem_description"]}, {"role": "assistant", "content": text}]


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory):
    """A random CLIPModel with 32x32 images, saved with its CLIPImageProcessor."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel
    folder = str(tmp_path_factory.mktemp("tiny_clip"))
    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=16, bos_token_id=0, eos_token_id=1,
                         pad_token_id=1),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=8)
    CLIPModel(config).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


# --- the task files

def test_frontend_task_files_depart_from_the_kinds_default_where_the_request_hints_and_are_reproducible(tmp_path):
    from colbench.page import DEFAULTS, STYLE, SUBJECTS, build_page, default_facts
    from colbench.scripted import request_title
    from colbench.tasks.frontend import DEPARTURES
    train, test = frontend_tasks("train"), frontend_tasks("test")
    assert len(train) >= 100 and len(test) >= 30
    for task in train + test:
        page, facts, default = task["ground_truth"], frontend.reference_facts(task), default_facts(task)
        request = task["problem_description"]
        assert task_kind(task) == "frontend" and "<script" not in page and not re.search(r"(src|href)=", page)
        assert task["stylesheet"] == STYLE and frontend.page_facts(page)["colors"] == {}  # the page's style: its facts
        assert page == build_page(facts, request_title(task))  # nothing on the page but its facts and name
        departed = [subject for subject in SUBJECTS if facts[subject] != default[subject]]
        assert departed == task["departures"] == frontend.departures(task) and len(departed) == DEPARTURES
        assert frontend.hinted_subjects(request) == departed  # the request hints at each departure...
        assert frontend.read_facts(request) == {} and not any(title in request for title in facts["sections"])
        assert facts["accent"] != facts["colors"]["background"]  # ...never at a value; every heading shows
    assert {t["site"] for t in train} == set(DEFAULTS)
    assert len({tuple(t["departures"]) for t in train}) == 6  # every two subjects of the four
    assert min(Counter(s for t in train for s in t["departures"]).values()) >= 40
    run_script("-m", "colbench.tasks.frontend", "--out", str(tmp_path))
    for split in ("train", "test"):
        with open(os.path.join(TASKS_DIR, f"frontend_{split}.jsonl"), "rb") as shipped:
            assert (tmp_path / f"frontend_{split}.jsonl").read_bytes() == shipped.read()


# --- rendering

def test_frontend_render_page_and_broken_pages():
    image = render(PAGE)
    assert image.size == (1024, 768) and image.getpixel((500, 700)) == (15, 28, 63)   # the navy background
    assert image.getpixel((500, 20)) == (212, 160, 23)                                # the gold navigation bar
    unclosed = render("<html><body style='background:#ff0000'><h1>cut sh")           # broken HTML still renders
    assert unclosed.getpixel((500, 500)) == (255, 0, 0)
    offline = render("<html><head><script src='https://cdn.example.com/x.js'></script></head>"
                     "<body style='background:#00ff00'></body></html>", timeout=8)    # no network, no wait
    assert offline.getpixel((10, 10)) == (0, 255, 0)
    hanging = render("<html><body style='background:red'><script>while (true) {}</script></body></html>", timeout=2)
    assert hanging.size == (224, 224) and hanging.getextrema() == ((0, 0),) * 3      # fails: the official black
    assert render("").getextrema() == ((255, 255),) * 3                               # an empty page is white


def test_frontend_a_closed_browser_is_gone_and_leaves_no_exit_callback(monkeypatch):
    at_exit = []  # the callbacks registered with atexit while the test runs, less those unregistered
    monkeypatch.setattr(atexit, "register", at_exit.append)
    monkeypatch.setattr(atexit, "unregister", at_exit.remove)
    browser = colbench.render.Browser()
    assert browser.alive() and at_exit == [browser.close]
    browser.close()
    assert not browser.alive() and at_exit == [] and not os.path.exists(browser.folder)


def test_frontend_full_page_screenshots_hold_the_whole_page():
    tall = ("<html><body style='margin:0;background:#ffffff'><div style='height:1500px;background:#00ff00'></div>"
            "<div style='height:300px;background:#0000ff'></div></body></html>")
    window, page = render(tall), render(tall, full_page=True)
    assert window.size == (1024, 768) and window.getpixel((500, 700)) == (0, 255, 0)  # the blue is below the window
    assert page.size == (1024, 1800) and page.getpixel((500, 1700)) == (0, 0, 255)
    screen = ("<html><body style='margin:0'><div style='min-height:100vh;background:#00ff00'></div>"
              "<footer style='height:50px;background:#0000ff'></footer></body></html>")
    below = render(screen, full_page=True)  # laid out in the window: 100vh is 768, the footer below it shows
    assert below.size == (1024, 818) and below.getpixel((500, 760)) == (0, 255, 0)
    assert below.getpixel((500, 800)) == (0, 0, 255)
    short = render(PAGE, full_page=True)  # a short page: the window's height, shot once
    assert short.size == (1024, 768) and short.tobytes() == render(PAGE).tobytes()


def test_frontend_screenshots_folder_serves_a_later_process(tmp_path, monkeypatch):
    monkeypatch.setenv("COLBENCH_SCREENSHOTS", str(tmp_path))
    page = "<html><body style='background:#123456'><h1>kept</h1></body></html>"
    first = render(page, full_page=True)
    assert len(list(tmp_path.glob("*.png"))) == 1 and not list(tmp_path.glob("*.part"))
    colbench.render._screenshot.cache_clear()  # as in a new process: only the folder remembers

    def no_chromium(*args):
        raise AssertionError("chromium launched for a page the folder holds")
    with monkeypatch.context() as patched:
        patched.setattr(colbench.render, "_shoot", no_chromium)
        again = render(page, full_page=True)
    assert again.size == first.size and again.tobytes() == first.tobytes()
    hanging = "<html><body><script>while (true) {}</script></body></html>"
    assert render(hanging, full_page=True, timeout=2).size == (224, 224)  # a failure is not kept
    assert len(list(tmp_path.glob("*.png"))) == 1


# --- the protocol and the simulated human

def test_frontend_episode_answer_is_the_last_page_proposed():
    two_pages = "Here: <html><body>one</body></html> and <HTML><body>two</body></HTML> ok"
    assert html_page(two_pages) == "<HTML><body>two</body></HTML>"
    assert html_page("<!DOCTYPE html>\n<html><body>cut short") == "<!DOCTYPE html>\n<html><body>cut short"
    assert html_page("What colors do you like?") is None
    episode = Episode(PAGE_TASK, 0, max_turns=3)
    assert "<html>" in episode.agent_view()[0]["content"]
    episode.add_agent_turn(Reply("Draft: <html><body>first</body></html>", "p", 1))
    episode.add_human_turn("More blue.")
    episode.add_agent_turn(Reply("Is blue fine? <html><body>second</body></html>", "p", 1))
    episode.add_human_turn("Yes.")
    assert episode.add_agent_turn(Reply(f"{ANSWER_MARKER} that one.", "p", 1))
    assert episode.answer == "<html><body>second</body></html>" and episode.answered_with_marker


def test_frontend_simulator_names_one_difference_a_turn_most_outstanding_first_in_words_that_can_be_copied():
    from colbench.page import build_page, default_facts
    from colbench.scripted import request_title
    simulator = make_simulator("embedded")
    for task in frontend_tasks("test")[:8]:
        facts, default, title = frontend.reference_facts(task), default_facts(task), request_title(task)

        def say(page):
            return simulator.respond([(task, turn(f"How is this? {page}"))])[0]
        assert say(task["ground_truth"]) == frontend.LOOKS_RIGHT
        told = {}
        for subject in [s for s in frontend.DIFFERENCE_ORDER if s in task["departures"]]:  # one a turn, in order
            reply = say(build_page({**default, **told}, title))
            assert reply == frontend.fact_sentence(subject, facts[subject])
            told.update(frontend.read_facts(reply))  # copied: what is left is named next
        assert say(build_page({**default, **told}, title)) == frontend.LOOKS_RIGHT
    assert say("<html><body><h1>Hello</h1></body></html>").count(":") == frontend.MAX_DIFFERENCES  # broken: named
    # Any page, not only the template's: its colors as written, its h2 titles, its nearest layout.
    assert frontend.page_facts(PAGE) == {"colors": {"background": "#0f1c3f", "text": "#f5f5f5"}, "layout": "single",
                                         "sections": ["Menu", "Visit"]}
    no_page = say("Hello! I am ready to start.")  # neither a page nor a question about one: nothing
    assert no_page == frontend.NOTHING_ASKED and no_page.startswith(frontend.NO_PAGE)


def frontend_tasks(*names):
    return [t for name in names for t in load_tasks(os.path.join(TASKS_DIR, f"frontend_{name}.jsonl"))]


def test_frontend_human_gives_general_requests_nothing_and_each_subject_its_value_as_the_page_writes_it():
    from colbench.page import build_page, default_facts
    from colbench.scripted import page_question, request_title
    assert frontend.topics_asked("What accent color do you want?") == ["accent"]  # not the page's colors
    assert frontend.topics_asked("What colors and what accent color?") == ["colors", "accent"]
    for task in frontend_tasks("train", "test"):
        facts = frontend.reference_facts(task)
        assert set(facts) == set(frontend.TOPIC_WORDS)  # every page has every subject

        def say(message):
            return frontend.embedded_reply(task, [{"role": "user", "content": task["problem_description"]},
                                                  {"role": "assistant", "content": message}])
        for request in GENERAL_REQUESTS + ["What should it look like?", "Hello! I am ready to start."]:
            assert say(request) == frontend.NOTHING_ASKED, (task["task_id"], request)
        for topic in facts:  # one subject: its value (the default's, if the task keeps it); two: both; three: fewer
            assert say(page_question([topic])) == frontend.fact_sentence(topic, facts[topic])
            assert frontend.read_facts(say(page_question([topic]))) == {topic: facts[topic]}
        both = say(page_question(["colors", "sections"]))
        assert both == f"{frontend.fact_sentence('colors', facts['colors'])} " \
                       f"{frontend.fact_sentence('sections', facts['sections'])}"
        assert say("Which colors, layout and sections do you want?") == frontend.TOO_MANY_TOPICS
        # c, the departures in the human's words, copied onto the kind's default page: the reference page itself.
        summary = frontend.read_facts(frontend.page_summary(task))
        assert list(summary) == task["departures"]
        assert build_page({**default_facts(task), **summary}, request_title(task)) == task["ground_truth"]
        assert f"--background:{facts['colors']['background']};" in task["ground_truth"]
        assert f"background {facts['colors']['background']}," in say(page_question(["colors"]))


def test_frontend_scripted_agents_through_rollout_only_reading_the_hints_gets_the_reference_in_two_turns(tmp_path):
    from colbench.page import build_page, default_facts
    from colbench.scripted import FIXED_ORDER, request_title
    tasks = os.path.join(TASKS_DIR, "frontend_test.jsonl")
    played = {}
    for agent, turns in (("default-at-once", 2), ("fixed-asker", 2), ("fixed-asker", 3), ("draft-then-fix", 2),
                         ("draft-then-fix", 3), ("hint-reader", 2)):
        out = tmp_path / f"{agent}-{turns}.traj.jsonl"
        run_script("rollout.py", tasks, "--agent", f"scripted:{agent}", "--samples", "1", "--max-turns", str(turns),
                   "--out", str(out))
        played[agent, turns] = load_trajectories(str(out))
        assert len(played[agent, turns]) == 40 and all(t["rollout"]["agent"] == f"scripted:{agent}"
                                                       for t in played[agent, turns])

    def written(t, told):  # the kind's default page with what the human told
        return build_page({**default_facts(t["task"]), **told}, request_title(t["task"]))
    for t in played["default-at-once", 2]:  # one turn, the kind's default page under the request's name
        assert len(t["dialogue_history"]) == 2 and t["answer"] == written(t, {})
    for t in played["fixed-asker", 2]:  # one question, the same two subjects in every task
        told = frontend.topics_told(t["task"], t["dialogue_history"])
        assert sorted(told) == sorted(FIXED_ORDER[:2]) and t["answer"] == written(t, told)
    for t in played["draft-then-fix", 2]:  # one draft shown: the one difference the human named is fixed
        told = frontend.topics_told(t["task"], t["dialogue_history"])
        assert len(set(told) & set(t["task"]["departures"])) == 1 and t["answer"] == written(t, told)
    for agent, turns in (("hint-reader", 2), ("fixed-asker", 3), ("draft-then-fix", 3)):  # every departure told
        assert all(t["answer"] == t["task"]["ground_truth"] for t in played[agent, turns]), (agent, turns)
    reached = {agent: sum(t["answer"] == t["task"]["ground_truth"] for t in played[agent, 2])
               for agent in ("default-at-once", "fixed-asker", "draft-then-fix")}
    assert reached["default-at-once"] == 0 and max(reached.values()) <= 10  # in two turns: a task in four at most
    result = run_script("rollout.py", TEST, "--agent", "scripted:hint-reader", "--out", str(tmp_path / "x.jsonl"),
                        check=False)
    assert result.returncode == 2 and "plays frontend tasks" in result.stderr and "Traceback" not in result.stderr


def test_frontend_warm_start_varies_turn_by_turn_and_writes_only_what_it_was_told():
    from colbench.page import build_page, default_facts
    from colbench.scripted import request_title
    from harness.warmstart import PAGE_QUESTIONS, PAGE_SUBJECTS, frontend_dialogue
    for topic, names in PAGE_SUBJECTS.items():  # the words of each subject name it alone
        assert all(frontend.topics_asked(q.format(name)) == [topic] for q in PAGE_QUESTIONS for name in names)
    rng = random.Random(0)
    rows = [frontend_dialogue(task, k, rng, max_turns=2) for task in frontend_tasks("train")[:60] for k in (0, 1)]

    def turns_of(row):
        return sum(turn["role"] == "assistant" for turn in row["dialogue_history"])
    turns = Counter(turns_of(r) for r in rows)
    replies = [turn["content"] for r in rows for turn in r["dialogue_history"][2:] if turn["role"] == "user"]
    subjects_per_reply = Counter(len(frontend.read_facts(reply)) for reply in replies)
    assert turns[1] >= 5 and turns[2] >= 60  # answering at once, or after one turn
    assert subjects_per_reply[1] >= 10 and subjects_per_reply[2] >= 10  # asking about one subject, or two at once
    assert any(reply.startswith(frontend.NOTHING_ASKED) for reply in replies)  # asking about nothing in particular
    shown = [turn["content"] for r in rows for turn in r["dialogue_history"][1:-1]
             if turn["role"] == "assistant" and html_page(turn["content"])]
    assert len(shown) >= 5  # a page shown, and compared
    asked = [set(frontend.topics_asked(r["dialogue_history"][1]["content"])) for r in rows if turns_of(r) == 2]
    hinted = [set(r["task"]["departures"]) for r in rows if turns_of(r) == 2]
    both = sum(a == h for a, h in zip(asked, hinted))
    assert 2 <= both <= 0.3 * len(asked)  # the subjects drawn at random: the hinted pair by chance, not by reading
    late = [r for r in rows if not r["dialogue_history"][-1]["content"].startswith(ANSWER_MARKER)]
    for r in late:  # asked once more at its last turn: too late, its answer the page it showed, if any
        assert turns_of(r) == 2 and html_page(r["dialogue_history"][-1]["content"]) is None
        assert r["answer"] == next((html_page(turn["content"]) for turn in r["dialogue_history"][::-1]
                                    if turn["role"] == "assistant" and html_page(turn["content"])), "")
    assert 1 <= len(late) <= 0.3 * len(rows)
    rows = [r for r in rows if r not in late]
    as_told = 0
    for r in rows:
        told = frontend.topics_told(r["task"], r["dialogue_history"])
        assert r["dialogue_history"][-1]["content"].startswith(ANSWER_MARKER)
        as_told += r["answer"] == build_page({**default_facts(r["task"]), **told}, request_title(r["task"]))
        written = frontend.page_facts(frontend.as_shown(r["task"], r["answer"]))
        for topic in ("accent", "layout", "sections"):  # what was not told is the kind's default, not the reference's
            assert written[topic] == (told[topic] if topic in told else default_facts(r["task"])[topic])
    assert 0.8 * len(rows) <= as_told < len(rows)  # a told color miscopied now and then


def test_frontend_vision_endpoint_gets_both_screenshots(stub_server):
    simulator = make_simulator(stub_server)
    reply = simulator.respond([(PAGE_TASK, turn("Draft: <html><body>hi</body></html>"))])[0]
    assert reply.startswith("The tip is 18 percent.") and len(reply) > 400  # the frontend limit, not the backend's
    content = StubOpenAI.requests_seen[-1]["messages"][1]["content"]
    images = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
    assert len(images) == 2 and all(url.startswith("data:image/png;base64,") for url in images)
    simulator.respond([(PAGE_TASK, turn("Which colors?"))])
    assert sum(part["type"] == "image_url" for part in StubOpenAI.requests_seen[-1]["messages"][1]["content"]) == 1


# --- scoring: the offline image score (edge-color), CLIP cosine, and win rate

def planted_page(changed):
    """PAGE with the first `changed` of its parts recolored: the navigation bar, the title, then each section."""
    page = PAGE.replace("</style>", "h1{background:#fdf6e3;color:#3b2f2f;padding:30px}"
                                     "section{background:#1a2a57;padding:40px;margin:20px}</style>")
    edits = [("nav{background:#d4a017", "nav{background:#c62828"),
             ("h1{background:#fdf6e3;color:#3b2f2f", "h1{background:#2e7d32;color:#ffffff"),
             ("<section>", "<section style='background:#ff7a1a'>"),
             ("<section>", "<section style='background:#e0f2f1'>")]
    for old, new in edits[:changed]:
        page = page.replace(old, new, 1)
    return page


@pytest.mark.parametrize("page_kind", ["dark", "light"])
def test_frontend_edge_color_on_planted_pages(page_kind):
    pages = [planted_page(changed) for changed in range(5)]
    if page_kind == "light":
        pages = [page.replace("background:#0f1c3f;color:#f5f5f5", "background:#fdf6e3;color:#3b2f2f") for page in pages]
    scorer = frontend.EdgeColorSimilarity()
    scores = scorer.similarity(render_many(pages, full_page=True), render_many([pages[0]] * 5, full_page=True))
    assert scores[0] == pytest.approx(1.0)                                         # the same page
    assert all(a > b for a, b in zip(scores, scores[1:]))                          # more changed, lower
    assert 0.5 < scores[1] < 0.999                                                 # one color changed: between
    blank, failed = scorer.similarity([render("<html><body></body></html>"), frontend.failed_image()],
                                      [render(pages[0], full_page=True)] * 2)
    # No edges, no score: a blank page and a page that failed to render (the black image) both score 0.
    assert blank == failed == 0.0 < scores[-1]
    assert scorer.name == "edge-color" and "clip" not in scorer.name


def test_frontend_room_every_departure_the_human_tells_moves_the_score(tmp_path):
    tasks = frontend_tasks("test")[:2]
    write_jsonl(tmp_path / "tasks.jsonl", tasks)
    run_script("-m", "harness.room", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "room.json"))
    mean = json.load(open(tmp_path / "room.json"))["mean_score"]
    assert mean["blank"] == 0.0 and mean["reference"] == pytest.approx(1.0) and mean["default"] < 0.5
    for subject in {s for t in tasks for s in t["departures"]}:  # left at the default alone, every departure costs;
        assert mean[f"-{subject}"] < 1 and mean[f"+{subject}"] < 1, subject  # set right alone, none makes the page
        assert mean[f"+{subject}"] > mean["default"], subject  # on two tasks; the 40 tasks' means: docs/RESULTS.md
    assert len({t["ground_truth"] for t in frontend_tasks("test")}) == 40  # no one page fits two tasks


def test_frontend_edge_color_ranks_a_blank_page_below_a_restyled_one():
    """The pages on which SSIM ranked a blank page (0.24) above the page with every color changed (0.21)."""
    recolored = PAGE.replace("body{background:#0f1c3f", "body{background:#6a1b9a")
    every_color = (PAGE.replace("body{background:#0f1c3f;color:#f5f5f5", "body{background:#f1f8e9;color:#1b5e20")
                   .replace("nav{background:#d4a017", "nav{background:#37474f")
                   .replace("nav a{color:#0f1c3f", "nav a{color:#ffeb3b"))
    retitled = every_color.replace("Golden Crust", "Silver Spoon Diner")
    images = render_many([PAGE, recolored, every_color, retitled, "<html><body></body></html>"], full_page=True)
    same, one_color, all_colors, all_and_title, blank, failed = frontend.EdgeColorSimilarity().similarity(
        images + [frontend.failed_image()], [images[0]] * 6)
    assert same == pytest.approx(1.0)
    assert 0.999 > one_color > all_colors > all_and_title > blank >= failed  # the more changed, the lower
    assert failed == 0.0


def test_frontend_clip_cosine_with_a_tiny_random_clip(tiny_clip):
    scorer = frontend.ClipScorer(tiny_clip)
    red, blue = Image.new("RGB", (64, 48), "red"), Image.new("RGB", (64, 48), "blue")
    same, different = scorer.similarity([red, blue], [red.copy(), red])
    assert same == pytest.approx(1.0, abs=1e-5) and -1.0 <= different < 0.999
    with pytest.raises(frontend.ClipUnavailable, match="--clip PATH"):
        frontend.ClipScorer(os.path.join(tiny_clip, "absent"))


def test_frontend_win_rate_counts_ties_half():
    mine = {"a": [0.9], "b": [0.5, 0.7], "c": [0.3], "d": [0.8], "only-mine": [1.0]}
    theirs = {"a": [0.8], "b": [0.6], "c": [0.4], "d": [0.8], "only-theirs": [0.0]}
    assert frontend.win_rate(mine, theirs) == (pytest.approx((1 + 0.5 + 0 + 0.5) / 4), 1, 2, 1)  # b: 0.6 == 0.6
    assert frontend.win_rate({"x": [1.0]}, {"y": [0.0]}) == (None, 0, 0, 0)


def test_frontend_rollout_two_turns_then_clip_evaluation_and_win_rate(tmp_path, tiny_model, tiny_clip):
    tasks = write_jsonl(tmp_path / "front.jsonl", [dict(PAGE_TASK, task_id=f"page{i}") for i in range(2)])
    trajectories, scored = str(tmp_path / "t.jsonl"), str(tmp_path / "s.jsonl")
    run_script("rollout.py", tasks, "--agent", tiny_model, "--samples", "1", "--max-turns", "2",
               "--max-new-tokens", "8", "--out", trajectories)
    for record in read_jsonl(trajectories):
        assert [t["role"] for t in record["dialogue_history"]] == ["user", "assistant", "user", "assistant"]
        assert record["dialogue_history"][2]["content"].startswith(frontend.NO_PAGE)  # the tiny model writes no page
        assert record["answer"] == ""
    result = run_script("evaluate.py", trajectories, "--out", scored, "--clip", tiny_clip)
    assert f"frontend image score: clip:{tiny_clip}" in result.stdout and f"mean clip:{tiny_clip}" in result.stdout
    assert all(-1.0 <= r["reward"] <= 1.0 and r["answered_page"] is False for r in read_jsonl(scored))
    assert {r["image_score"] for r in read_jsonl(scored)} == {f"clip:{tiny_clip}"}
    result = run_script("evaluate.py", trajectories, "--out", str(tmp_path / "s2.jsonl"), "--clip", tiny_clip,
                        "--against", scored)
    assert "win rate against" in result.stdout
    assert "50.0% over 2 matched tasks (0 wins, 2 ties, 0 losses)" in result.stdout
    # offline, without --clip: edge-color, named so; a file scored by CLIP is never compared with it
    result = run_script("evaluate.py", trajectories, "--out", str(tmp_path / "s3.jsonl"))
    assert "frontend image score: edge-color" in result.stdout
    assert {r["image_score"] for r in read_jsonl(tmp_path / "s3.jsonl")} == {"edge-color"}
    assert all(r["reward"] < 0.1 for r in read_jsonl(tmp_path / "s3.jsonl"))  # no page: the black image
    result = run_script("evaluate.py", trajectories, "--out", str(tmp_path / "s4.jsonl"), "--against", scored,
                        check=False)
    assert result.returncode == 2 and "score both the same way" in result.stderr
    assert not (tmp_path / "s4.jsonl").exists()


def test_frontend_evaluate_without_clip_weights_says_how_to_pass_them(tmp_path):
    record = {"task_id": "bakery", "sample_idx": 0, "task": PAGE_TASK, "answer": PAGE,
              "dialogue_history": [{"role": "user", "content": "hi"}]}
    path = write_jsonl(tmp_path / "t.jsonl", [record])
    result = subprocess.run([sys.executable, "evaluate.py", path, "--out", str(tmp_path / "s.jsonl"), "--clip",
                             str(tmp_path / "no-such-clip")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--clip PATH" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "s.jsonl").exists()


# ======================== 8. torchrun (colbench/distributed.py): gathers, and DDP and FSDP against one process

@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_distributed_gather_returns_tensors_on_the_cpu_inside_tuples_lists_and_dicts(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU here")
    from colbench import distributed
    values = torch.arange(3.0, device=device)
    (name, first), second = distributed.gather([("a", values), {"b": [values * 2, 1]}])
    assert name == "a" and first.device.type == "cpu" and first.tolist() == [0.0, 1.0, 2.0]
    assert second["b"][0].device.type == "cpu" and second["b"][0].tolist() == [0.0, 2.0, 4.0] and second["b"][1] == 1


GATHER_SCRIPT = """
import torch
from colbench import distributed
distributed.init()
rank, world = distributed.rank_and_world()
device = f"cuda:{rank}" if torch.cuda.device_count() >= world else "cpu"  # each rank's own GPU where there are enough
gathered = distributed.gather([(rank, torch.full((2,), float(rank), device=device))])
assert [r for r, _ in gathered] == list(range(world)), gathered
assert all(t.device.type == "cpu" and t.tolist() == [r, r] for r, t in gathered), gathered
print(f"gathered {world} ranks from {device}")
"""


def test_distributed_gather_under_torchrun_returns_every_rank_in_order_on_the_cpu(tmp_path):
    script = tmp_path / "gather.py"
    script.write_text(GATHER_SCRIPT)
    result = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
                        env=dict(os.environ, PYTHONPATH=ROOT))
    assert "gathered 2 ranks from" in result.stdout


def logits_of(model_dir, ids=tuple(range(1, 60))):
    model, _ = load_model(model_dir, device="cpu")
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


def test_critic_under_torchrun_with_2_processes_matches_1_process(tmp_path, tiny_model):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=8)
    # --batch-size 5: one rank also runs a padding pass
    common = [data, "--model", tiny_model, "--lr", "3e-3", "--epochs", "2", "--batch-size", "5",
              "--eval-fraction", "0.25", "--dtype", "fp32"]
    run_script("critic.py", *common, "--out", str(tmp_path / "one"))
    result = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "critic.py", *common,
                        "--out", str(tmp_path / "two"))
    assert result.stdout.count("done:") == 1  # rank 0 alone prints
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert one["steps"] == two["steps"] and one["after"]["pair_accuracy"] == two["after"]["pair_accuracy"]
    assert two["after"]["loss"] == pytest.approx(one["after"]["loss"], rel=1e-3, abs=1e-4)
    losses = [[row["loss"] for row in read_jsonl(tmp_path / name / "log.jsonl")] for name in ("one", "two")]
    assert losses[1] == pytest.approx(losses[0], rel=1e-3, abs=1e-4)
    assert sorted(os.listdir(tmp_path / "two")) == sorted(os.listdir(tmp_path / "one"))


def test_critic_under_torchrun_with_fsdp_matches_1_process_and_saves_the_whole_model(tmp_path, tiny_model):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=8)
    # --batch-size 5: one rank also runs a padding pass
    common = [data, "--model", tiny_model, "--lr", "3e-3", "--epochs", "2", "--batch-size", "5",
              "--eval-fraction", "0.25", "--dtype", "fp32"]
    run_script("critic.py", *common, "--out", str(tmp_path / "one"))
    result = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "critic.py", *common,
                        "--fsdp", "--gradient-checkpointing", "--out", str(tmp_path / "fsdp"))
    assert result.stdout.count("done:") == 1  # rank 0 alone prints
    # one checkpoint, one metrics.json
    assert sorted(os.listdir(tmp_path / "fsdp")) == sorted(os.listdir(tmp_path / "one"))
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    fsdp = json.loads((tmp_path / "fsdp" / "metrics.json").read_text())
    assert fsdp["after"]["loss"] == pytest.approx(one["after"]["loss"], rel=1e-4, abs=1e-5)
    losses = [[row["loss"] for row in read_jsonl(tmp_path / name / "log.jsonl")] for name in ("one", "fsdp")]
    assert len(losses[1]) == len(losses[0]) >= 3 and losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-5)
    # The checkpoint holds the whole trained model: what policy.py --critic loads scores as the 1-process critic does.
    loaded = critic.load_critic(str(tmp_path / "fsdp"))
    with torch.no_grad():
        fsdp_logits = loaded.model(input_ids=torch.tensor([list(range(1, 60))])).logits
    assert torch.allclose(fsdp_logits, logits_of(str(tmp_path / "one")), atol=1e-4)
    assert not torch.allclose(fsdp_logits, logits_of(tiny_model), atol=1e-2)  # and it trained


def test_policy_under_torchrun_with_2_processes_matches_1_process(tmp_path, scored_file, critic_dir, tiny_model):
    common = [scored_file, "--method", "mt-dpo", "--model", tiny_model, "--lr", "1e-3", "--epochs", "3",
              "--batch-size", "3", "--fast"]  # 3 pairs a step: one rank also runs a padding pass
    run_script("-m", "harness.baselines", *common, "--out", str(tmp_path / "one"))
    result = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "harness.baselines",
                        *common, "--out", str(tmp_path / "two"))
    assert result.stdout.count("done:") == 1  # rank 0 alone prints
    logs = [read_jsonl(tmp_path / name / "log.jsonl") for name in ("one", "two")]
    assert [row["loss"] for row in logs[1]] == pytest.approx([row["loss"] for row in logs[0]], rel=1e-3, abs=1e-4)
    assert logs[1][-1]["margin"] == pytest.approx(logs[0][-1]["margin"], rel=1e-3, abs=1e-4)
    assert sorted(os.listdir(tmp_path / "two")) == sorted(os.listdir(tmp_path / "one"))
    # sweet: states sampled and ranked in shares, every pair gathered, one set of outputs
    sweet = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "policy.py", scored_file,
                       "--critic", critic_dir, "--model", tiny_model, "--candidates", "4", "--pairs-per-turn", "2",
                       "--max-new-tokens", "8", "--out", str(tmp_path / "sweet"))
    assert sweet.stdout.count("done:") == 1 and "from 6 turn states" in sweet.stdout
    assert {"config.json", "pairs.jsonl", "log.jsonl", "args.json"} <= set(os.listdir(tmp_path / "sweet"))


def test_policy_under_torchrun_with_fsdp_matches_1_process_and_saves_the_whole_model(tmp_path, scored_file, tiny_model):
    common = [scored_file, "--method", "mt-dpo", "--model", tiny_model, "--lr", "1e-3", "--epochs", "3",
              "--batch-size", "3", "--dtype", "fp32"]  # 3 pairs a step: one rank also runs a padding pass
    run_script("-m", "harness.baselines", *common, "--fast", "--out", str(tmp_path / "one"))
    result = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "harness.baselines",
                        *common, "--fsdp", "--gradient-checkpointing", "--out", str(tmp_path / "fsdp"))
    assert result.stdout.count("done:") == 1
    assert sorted(os.listdir(tmp_path / "fsdp")) == sorted(os.listdir(tmp_path / "one"))
    logs = [read_jsonl(tmp_path / name / "log.jsonl") for name in ("one", "fsdp")]
    for statistic in ("loss", "margin", "chosen_logps"):  # the 1-process run shares each prompt's KV cache; FSDP cannot
        one = [row[statistic] for row in logs[0]]
        assert [row[statistic] for row in logs[1]] == pytest.approx(one, rel=1e-4, abs=1e-5)
    fsdp_logits = logits_of(str(tmp_path / "fsdp"))  # loaded as rollout.py --agent loads it
    assert torch.allclose(fsdp_logits, logits_of(str(tmp_path / "one")), atol=1e-4)
    assert not torch.allclose(fsdp_logits, logits_of(tiny_model), atol=1e-2)


# ======================== 9. harness/report.py and harness/demo.py: the HTML page and the table of a run

def test_report_shades_turns_by_advantage_and_plots_the_logs(tmp_path):
    from harness.report import write_report
    dialogue = [{"role": "user", "content": "a <b>vague</b> request"}, {"role": "assistant", "content": "question 1"},
                {"role": "user", "content": "answer"}, {"role": "assistant", "content": "final code"}]
    trajectory = {"task_id": "t", "sample_idx": 0, "task": TIP_TASK, "dialogue_history": dialogue, "answer": "x",
                  "reward": 0.5, "success": False}
    log = write_jsonl(tmp_path / "log.jsonl",
                      [{"step": 1, "epoch": 1, "loss": 0.69}, {"step": 2, "epoch": 1, "loss": 0.5}])
    out = tmp_path / "report.html"
    advantages = [{"task_id": "t", "sample_idx": 0, "turn": 0, "advantage": -0.2},
                  {"task_id": "t", "sample_idx": 0, "turn": 1, "advantage": 0.1}]
    write_report(str(out), [trajectory], advantages, [("critic", log)])
    page = out.read_text()
    assert "A = -0.2000" in page and "A = +0.1000" in page
    assert "rgba(220,38,38,0.58)" in page and "rgba(22,163,74,0.33)" in page  # red blames, green credits, by |A|
    assert "a &lt;b&gt;vague&lt;/b&gt; request" in page and "<polyline" in page and "critic: loss" in page
    assert "critic: epoch" not in page and "reward 0.50" in page


# --- harness/demo.py: the closing table, read back from a run folder

def test_demo_table_pairs_agents_and_critics_on_the_same_dialogues_and_pairs(tmp_path):
    from harness.demo import Run, agents_table, critics_table, table
    run = Run(str(tmp_path))
    tasks = [dict(TIP_TASK, task_id=f"t{i}", family="seen" if i < 2 else "new") for i in range(4)]
    write_jsonl(tmp_path / "warm_tasks.jsonl", [dict(TIP_TASK, task_id="w", family="seen")])
    write_jsonl(tmp_path / "test_tasks.jsonl", tasks)
    # Two samples a task; SWEET-RL wins one more dialogue than the start on every task: +0.5 everywhere.
    start = {"t0": [1, 0], "t1": [0, 0], "t2": [0, 0], "t3": [1, 0]}
    for method, gain in (("zero-shot", 0), ("sweet", 1)):
        rows = [{"task_id": task["task_id"], "sample_idx": k, "task": task, "dialogue_history": [], "answer": "",
                 "success": bool(start[task["task_id"]][k] or (gain and k == 1)), "reward": 0.0}
                for task in tasks for k in range(2)]
        write_jsonl(tmp_path / f"test_{method}.scored.jsonl", rows)
        (tmp_path / f"test_{method}.summary.json").write_text(json.dumps({"mean_tests_passed_pct": 40.0}))
    # The offline dialogues of the held-out pairs below, one of each kind: "q" asks, "A" answers.
    def dialogue(task_id, sample_idx, replies):
        turns = [{"role": "assistant", "content": f"{ANSWER_MARKER} def tip(b): return b" if r == "A" else "How much?"}
                 for r in replies]
        return {"task_id": task_id, "sample_idx": sample_idx, "task": TIP_TASK, "dialogue_history": turns, "answer": ""}
    write_jsonl(tmp_path / "train.scored.jsonl", [
        dialogue("a", 0, "qqA"), dialogue("a", 1, "qA"), dialogue("a", 2, "qqq"),
        dialogue("b", 0, "qA"), dialogue("b", 1, "qA"), dialogue("b", 2, "A")])
    # The same four held-out pairs of two tasks: with c all right; without c, the second of each task wrong.
    for critic_name, margins in (("critic_with_c", [1.0, 2.0, 0.5, 1.0]),
                                 ("critic_no_solution", [1.0, -2.0, 0.5, -1.0])):
        os.makedirs(tmp_path / critic_name)
        accuracy = sum(m > 0 for m in margins) / 4
        (tmp_path / critic_name / "metrics.json").write_text(json.dumps(
            {"eval_pairs": 4, "eval_tasks": 2, "after": {"pair_accuracy": accuracy, "pair_accuracy_ci95": [0, 1],
                                                         "margins": margins, "pair_task_ids": ["a", "a", "b", "b"],
                                                         "pair_samples": [[0, 1], [0, 2], [0, 1], [2, 1]]}}))
    agents = {a: str(tmp_path / f"test_{a}.scored.jsonl") for a in ("zero-shot", "sweet")}
    results = agents_table(run, agents, str(tmp_path / "test_tasks.jsonl"), "zero-shot")
    assert results["test_dialogues"] == {"zero-shot": 8, "sweet": 8}
    assert results["success_rate"] == {"zero-shot": 0.25, "sweet": 0.75}
    assert results["success_rate_trained_families"] == {"zero-shot": 0.25, "sweet": 0.75}
    assert results["success_rate_test_only_families"] == {"zero-shot": 0.25, "sweet": 0.75}
    assert results["vs_zero-shot"] == {"sweet": [0.5, 0.5, 0.5]}
    results.update(critics_table(run, ["critic_with_c", "critic_no_solution"]), stage_seconds={"warm start": 60})
    assert results["critic"]["critic_with_c"]["pair_accuracy"] == 1.0 and results["critic_gain_ci95"] == [0.5, 0.5]
    text = table(results, "zero-shot")
    assert "| SWEET-RL | 8 | 40.0 | 75.0 | 75.0 | 75.0 | +50.0 [+50.0, +50.0] |" in text
    assert "with c - without c: +0.500 pair accuracy, 95% CI [+0.500, +0.500]" in text and "minutes: 1.0" in text
    # Each pair counted under its kind, right or wrong for each critic.
    assert results["critic_by_pair_kind"] == {
        "asked more": {"pairs": 1, "critic_with_c": 1, "critic_no_solution": 1},
        "asked as often": {"pairs": 1, "critic_with_c": 1, "critic_no_solution": 1},
        "asked less": {"pairs": 1, "critic_with_c": 1, "critic_no_solution": 0},
        "never answered": {"pairs": 1, "critic_with_c": 1, "critic_no_solution": 0}}
    assert "| the rejected one never answered | 1 | 1 | 0 |" in text

    metrics = json.loads((tmp_path / "critic_no_solution" / "metrics.json").read_text())
    metrics["after"]["pair_task_ids"] = ["a", "b", "b", "b"]
    (tmp_path / "critic_no_solution" / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(SystemExit, match="held out different pairs"):
        critics_table(run, ["critic_with_c", "critic_no_solution"])


def test_demo_keeps_warm_start_rl_validation_and_test_tasks_apart(tmp_path):
    from harness.demo import SETTINGS, Run, split_tasks
    run = Run(str(tmp_path))
    split_tasks(run, SETTINGS, "backend")
    files = {name: load_tasks(str(tmp_path / f"{name}_tasks.jsonl")) for name in ("warm", "valid", "train", "test")}
    solutions = {name: {t["ground_truth"] for t in tasks} for name, tasks in files.items()}
    assert all(not solutions[a] & solutions[b] for a in solutions for b in solutions if a < b)  # no task twice
    assert set(Counter(t["family"] for t in files["valid"]).values()) == {2}  # each easy training family twice
    assert {t["family"] for t in files["valid"]} == {t["family"] for t in files["warm"]}
    ids = {name: [t["task_id"] for t in tasks] for name, tasks in files.items()}
    training = [t["task_id"] for t in easy_tasks("train")]  # a third for the RL data, the first rl_tasks of it
    assert ids["train"] == training[::3][:SETTINGS["rl_tasks"]] and len(ids["train"]) == SETTINGS["rl_tasks"]
    assert ids["warm"] == [task_id for i, task_id in enumerate(training) if i % 3]  # the rest: the warm start
    assert ids["test"] == [t["task_id"] for t in easy_tasks("test")]  # every easy test task
    assert all(t["tier"] == "easy" for tasks in files.values() for t in tasks)


@pytest.mark.parametrize("settings_name", ["SETTINGS", "FRONTEND"])
def test_demo_passes_a_stage_only_what_differs_from_its_defaults_and_the_stage_runs_the_settings(tmp_path,
                                                                                                 settings_name):
    from harness import demo
    s = getattr(demo, settings_name)
    commands = []

    class Recording(demo.Run):  # records each stage's command instead of running it
        def stage(self, name, *command, done_when):
            commands.append(command[1:] if command[0] == "-m" else command)

    run = Recording(str(tmp_path))
    demo.shared_steps(run, s, list(demo.CRITICS), kind="frontend" if settings_name == "FRONTEND" else "backend")
    for agent in ["sweet", *demo.BASELINES]:
        demo.train_agent(run, s, agent, str(tmp_path / agent), s["demo_fraction"], critic="random")
    demo.play(run, s, "sweet", "policy", "tasks.jsonl", s["test_samples"], "test_sweet")
    # What each stage runs, read back by its own parser, with the demo's settings (the script's key -> SETTINGS')
    expected = {"rollout.py": {"max_turns": "max_turns", "temperature": "temperature", "max_new_tokens":
                               "max_new_tokens", "batch_size": "batch_size"},
                "critic.py": {"head": "critic_head", "beta": "critic_beta", "epochs": "critic_epochs", "lr": "critic_lr",
                              "trajectory_score": "trajectory_score", "max_length": "critic_max_length",
                              "pairing": "critic_pairing"},
                "policy.py": {"candidates": "candidates", "pairs_per_turn": "pairs_per_turn", "lr": "policy_lr",
                              "beta": "beta", "nll_coef": "nll_coef", "temperature": "temperature",
                              "max_new_tokens": "max_new_tokens", "data_fraction": "demo_fraction"},
                "harness.baselines": {"lr": "policy_lr", "beta": "beta", "nll_coef": "nll_coef"}}
    if "page_facts" in s:
        expected["critic.py"]["page_facts"] = "page_facts"
    checked = Counter()
    for command in commands:
        script = command[0]
        if "sft" in command:  # the warm start: its own rate and batch, from the model the demo was given
            arguments = vars(demo.PARSERS[script].parse_args(command[1:]))
            assert (arguments["lr"], arguments["batch_size"], arguments["model"]) == (
                s["warm_lr"], s["warm_batch_size"], s["model"])
            checked["warm start"] += 1
            continue
        if script not in expected:
            continue
        parser = demo.PARSERS[script]
        arguments, defaults = vars(parser.parse_args(command[1:])), {a.dest: a.default for a in parser._actions}
        for key, setting in expected[script].items():
            if "critic_value_head" in " ".join(command) and key in ("head", "beta"):  # Table 3: the value head
                assert (arguments["head"], arguments["beta"]) == ("value", 1.0)
                continue
            assert arguments[key] == s[setting], (script, key)
        if script == "critic.py":  # the frontend critic trains on scripted dialogues too
            assert (arguments["train_also"] is not None) == bool(s.get("scripted_samples")), command
        passed = {a.dest for a in parser._actions if any(option in command for option in a.option_strings)}
        assert all(arguments[key] != defaults[key] for key in passed - {"out", "model", "critic", "method"}), command
        checked[script] += 1
    assert checked["critic.py"] == len(demo.CRITICS) == 4 and checked["policy.py"] == 1
    assert checked["harness.baselines"] == 2
    assert checked["rollout.py"] == 2 and checked["warm start"] == 1


def test_frontend_run_keeps_warm_start_rl_and_test_pages_apart(tmp_path):
    from harness.demo import FRONTEND, Run, split_tasks
    split_tasks(Run(str(tmp_path)), FRONTEND, "frontend")
    files = {name: load_tasks(str(tmp_path / f"{name}_tasks.jsonl")) for name in ("warm", "train", "valid", "test")}
    pages = {name: {t["ground_truth"] for t in tasks} for name, tasks in files.items()}
    assert all(not pages[a] & pages[b] for a in pages for b in pages if a < b)
    assert [len(files[name]) for name in ("warm", "train", "valid", "test")] == [60, 24, 36, 40]
    training = {t["ground_truth"] for t in frontend_tasks("train")}
    assert pages["warm"] | pages["train"] | pages["valid"] == training  # validation: the training tasks left over


def test_frontend_table_counts_asking_first_pages_after_asking_and_the_critics_pairs_by_what_they_can_tell(tmp_path):
    from harness.demo import frontend_table, page_asking, ranked_pairs, rules_order
    task = frontend_tasks("test")[0]
    assert task["departures"] == ["colors", "sections"]
    page, question = f"{ANSWER_MARKER}\n{PAGE}", "What colors and what layout do you want?"

    def played(replies, reward):
        turns = [{"role": "user", "content": task["problem_description"]}]
        for reply in replies:
            turns += [{"role": "assistant", "content": reply},
                      {"role": "user", "content": frontend.embedded_reply(task, turns + [{"content": reply}])}]
        return {"task": task, "dialogue_history": turns[:-1], "reward": reward}
    # Asked, then wrote (0.3); asked twice, then wrote (0.5); a page at once (0.1); one reply that asks, nothing
    # more; a page shown, then the page (0.2).
    asking = page_asking([played([question, page], 0.3), played([question, question, page], 0.5),
                          played([page], 0.1), played([question], 0.0), played([f"Like this? {PAGE}", page], 0.2)])
    assert asking["ask_first_share"] == 0.4 and asking["after_asking"] == [0.4, 2]
    assert asking["show_first_share"] == 0.2 and asking["collaborate_first_share"] == pytest.approx(0.6)
    assert asking["at_once"] == [pytest.approx(0.1), 3]
    assert asking["subjects_told"] == 1.0  # colors and layout told in two dialogues of five, the layout in one
    assert asking["departures_told_share"] == 0.0  # the sections never: no dialogue told both departures
    assert page_asking([played([page], 0.2)])["after_asking"] is None
    # What a reply can still tell, by the human's rules: before the last turn, a question naming an untold departure
    # or a page shown (1) beats a question naming none untold or an answer while a departure is untold (0); an
    # answer with every departure told is unsettled (None). At the last turn a page is the answer (1), a question 0,
    # or unsettled after a page was shown (that page is the answer).
    vague, draft = "Can you tell me more?", f"Like this? {PAGE}"
    start = [{"role": "user", "content": task["problem_description"]}]
    asked = played([question], 0)["dialogue_history"]
    asked += [{"role": "user", "content": frontend.embedded_reply(task, asked)}]
    assert [frontend.can_still_tell(task, start, r, False) for r in (question, draft, vague, page)] == [1, 1, 0, 0]
    assert frontend.can_still_tell(task, asked, question, False) == 0  # colors told already; layout departs not
    everything = played([f"What {words[0]}?" for words in frontend.TOPIC_WORDS.values()], 0)["dialogue_history"]
    everything += [{"role": "user", "content": frontend.embedded_reply(task, everything)}]
    assert frontend.can_still_tell(task, everything, page, False) is None
    assert [frontend.can_still_tell(task, start, r, True) for r in (page, draft, question)] == [1, 1, 0]
    assert frontend.can_still_tell(task, played([draft], 0)["dialogue_history"], question, True) is None
    # ranked_pairs reads each pair's history off the offline dialogues: one dialogue (a question, two vague ones,
    # a page), six pairs.
    offline = dict(played([question, vague, vague, page], 0.3), task_id=task["task_id"], sample_idx=0, max_turns=4,
                   answer=PAGE)
    scored = tmp_path / "train.scored.jsonl"
    write_jsonl(scored, [offline])
    os.makedirs(tmp_path / "policy")

    def pair(turn, chosen, rejected):
        return {"task_id": task["task_id"], "sample_idx": 0, "turn": turn,
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}]}
    write_jsonl(tmp_path / "policy" / "pairs.jsonl",
                [pair(0, question, vague), pair(0, draft, page), pair(3, page, vague),  # right
                 pair(0, page, question), pair(1, vague, "What sections do you want?"),  # wrong
                 pair(1, question, vague)])  # alike: colors and layout were told at turn 0
    assert ranked_pairs(str(tmp_path / "policy"), str(scored)) == {"right": 3, "wrong": 2, "alike": 1}
    # rules_order: every candidate pair of a state that the rules settle. Tells 1, 0, 1, 0: the critic orders the
    # question over the vague one and the page, the draft over the vague one (right), the page over the draft (wrong).
    write_jsonl(tmp_path / "policy" / "candidates.jsonl", [{"task_id": task["task_id"], "sample_idx": 0, "turn": 0,
                "candidates": [question, vague, draft, page], "scores": [0.5, 0.1, 0.2, 0.4]}])
    assert rules_order(str(tmp_path / "policy"), str(scored)) == [0.75, 4]
    # The table: a row per agent, the start's without differences; the room, the critic, the pairs.
    agents = ("zero-shot", "sweet")
    r = {"test_tasks": 2, "image_score": ["edge-color"], "test_dialogues": dict.fromkeys(agents, 4),
         "mean_score": {"zero-shot": 0.1, "sweet": 0.2}, "vs_zero-shot": {"sweet": [0.1, 0.05, 0.15]},
         "win_rate_vs_zero-shot": {"sweet": [0.75, 0.5, 1.0]}, "scripts_gap": [0.09, 0.07, 0.12],
         "ask_first_share": dict.fromkeys(agents, 0.5), "show_first_share": dict.fromkeys(agents, 0.25),
         "after_asking": {"zero-shot": None, "sweet": [0.4, 2]},
         "at_once": dict.fromkeys(agents, [0.05, 2]), "subjects_told": dict.fromkeys(agents, 1.0),
         "departures_told_share": {"zero-shot": 0.25, "sweet": 0.5}, "rules_order": [0.625, 40],
         "critic_with_c": {"pair_accuracy": 0.6, "ci95": [0.5, 0.7], "pairs": 50, "tasks": 10, "by_answer_length": 0.55},
         "sweet_pairs": {"right": 3, "wrong": 1, "alike": 5}, "stage_seconds": {"x": 60}}
    text = frontend_table(r)
    assert "| starting policy (warm start) | 4 | 0.1000 | - | - | 50.0 | 25.0 | - | 0.0500 (2) | 1.00 | 25.0 |" in text
    assert "| SWEET-RL | 4 | 0.2000 | +0.1000 [+0.0500, +0.1500] | 75.0 [50.0, 100.0] | 50.0 | 25.0 | 0.4000 (2) |" in text
    assert "0.600 [0.500, 0.700] on 50 pairs of 10 tasks; the longer final page orders 0.550" in text
    assert "3 chose the reply that can still tell more by the human's rules, 1 the one that tells less, 5 alike" in text
    assert "turn order by the human's rules: 0.625 of 40 candidate pairs the rules settle" in text


# ======================== 10. README.md and docs/: the map from the paper to the code, the departures

@pytest.mark.parametrize("document, at_least", [("README.md", 8), ("docs/DEPARTURES.md", 20)])
def test_docs_point_at_the_definitions_they_name(document, at_least):
    text = open(os.path.join(ROOT, document)).read()
    entries = re.findall(r"`([\w/]+\.py)` `(\w+)`", text)
    assert len(entries) >= at_least
    for path, name in entries:
        with open(os.path.join(ROOT, path)) as f:
            definition = rf"^(def|class) {name}\b|^{name} = "  # a function, a class, or a constant (demo SETTINGS)
            assert re.search(definition, f.read(), re.MULTILINE), f"{path} {name}"


# The sizes the project promises (docs: STYLE's "caps are tests"): a stage a student reads in one sitting, a README
# that stays a guide, a RESULTS page that reports what stands (the history of runs goes to docs/NOTEBOOK.md).
STAGES = ("critic.py", "policy.py", "rollout.py", "evaluate.py")
LINE_CAPS = {"critic.py": 480, "policy.py": 450, "README.md": 350, "docs/RESULTS.md": 300}
DOCSTRING_CAP = 15  # lines of a stage's opening docstring, its quotes included
FUNCTION_LINES_CAP = 60  # lines of any function of a stage, its def line to its last
FUNCTION_PARAMETERS_CAP = 8  # parameters of any function of a stage, *args and **kwargs included


def size_violations(root):
    """Every cap crossed in the checkout at `root`: one line each, naming the file, the count and the cap."""
    crossed = []
    for name, cap in LINE_CAPS.items():
        with open(os.path.join(root, name), encoding="utf-8") as f:
            lines = len(f.read().splitlines())
        if lines > cap:
            crossed.append(f"{name}: {lines} lines, cap {cap}")
    for name in STAGES:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        opening = tree.body[0]
        docstring = opening.end_lineno - opening.lineno + 1 if ast.get_docstring(tree) is not None else 0
        if docstring > DOCSTRING_CAP:
            crossed.append(f"{name}: opening docstring of {docstring} lines, cap {DOCSTRING_CAP}")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args
                parameters = (len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
                              + (arguments.vararg is not None) + (arguments.kwarg is not None))
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES_CAP:
                    crossed.append(f"{name} {node.name}: {lines} lines, cap {FUNCTION_LINES_CAP}")
                if parameters > FUNCTION_PARAMETERS_CAP:
                    crossed.append(f"{name} {node.name}: {parameters} parameters, cap {FUNCTION_PARAMETERS_CAP}")
    return crossed


def test_the_stages_and_the_documents_stay_within_their_caps():
    crossed = size_violations(ROOT)
    assert not crossed, "over a cap: " + "; ".join(crossed)


def test_the_size_check_names_the_file_the_count_and_the_cap(tmp_path):
    """A checkout at its caps passes; one line more, or a function too long and too crowded, is named."""
    os.makedirs(tmp_path / "docs")
    for name, cap in LINE_CAPS.items():
        (tmp_path / name).write_text("x\n" * cap)
    for name in STAGES:
        if name not in LINE_CAPS:
            (tmp_path / name).write_text('"""A stage."""\n')
    assert size_violations(tmp_path) == []
    with open(tmp_path / "README.md", "a") as f:
        f.write("one line too many\n")
    with open(tmp_path / "rollout.py", "a") as f:
        f.write("def crowded(a, b, c, d, e, f, g, h, *more):\n" + "    a += 1\n" * FUNCTION_LINES_CAP)
    assert size_violations(tmp_path) == [
        f"README.md: {LINE_CAPS['README.md'] + 1} lines, cap {LINE_CAPS['README.md']}",
        f"rollout.py crowded: {FUNCTION_LINES_CAP + 1} lines, cap {FUNCTION_LINES_CAP}",
        f"rollout.py crowded: {FUNCTION_PARAMETERS_CAP + 1} parameters, cap {FUNCTION_PARAMETERS_CAP}"]


class ScriptedServer(http.server.BaseHTTPRequestHandler):
    """An agent behind the OpenAI chat schema that gets some tasks right and others wrong: each reply is
    colbench/scripted.py's asking by subject or its fixed request, drawn at random. The README's chain
    plays its offline dialogues with it, since a tiny random model never passes a test and critic.py
    needs trajectories whose rewards differ."""
    agents, rng = {}, random.Random(0)

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        dialogue = [m for m in body["messages"] if m["role"] != "system"]
        choices = []
        for index in range(body.get("n", 1)):
            agent = ScriptedServer.agents[ScriptedServer.rng.choice(["scripted:by-subject", "scripted:fixed"])]
            message = {"role": "assistant", "content": agent.reply(dialogue)}
            choices.append({"index": index, "finish_reason": "stop", "message": message})
        self.send_json(200, {"id": "1", "object": "chat.completion", "model": body["model"], "choices": choices})

    do_GET = StubOpenAI.do_GET
    send_json = StubOpenAI.send_json


def test_the_readme_chain_runs_as_written(tmp_path, tiny_model):
    """Every command of README.md's "The chain, by hand", run in a fresh folder, with two changes: the
    warm start starts from a tiny random model (--model), and the offline dialogues are played by
    ScriptedServer in place of runs/warm. Each stage must find what the one before it wrote."""
    from colbench.scripted import ScriptedAgent
    text = open(os.path.join(ROOT, "README.md")).read()
    block = text.split("## The chain, by hand", 1)[1].split("```\n", 2)[1]
    commands = [shlex.split(line.split("  #")[0]) for line in block.splitlines() if line.startswith("python ")]
    assert len(commands) >= 8
    tasks = load_tasks(os.path.join(ROOT, "colbench/tasks/backend_valid.jsonl"))
    ScriptedServer.agents = {name: ScriptedAgent(name, tasks, 3) for name in ("scripted:by-subject", "scripted:fixed")}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.symlink(os.path.join(ROOT, "colbench"), tmp_path / "colbench")  # the task files
    importable = dict(os.environ, PYTHONPATH=ROOT)  # python -m harness.*, which imports the stages
    try:
        for argv in commands:
            assert argv[0] == "python"
            if "--method" in argv and argv[argv.index("--method") + 1] == "sft":
                argv += ["--model", tiny_model]
            if "backend_valid.jsonl" in " ".join(argv) and argv[1] == "rollout.py":
                argv[argv.index("--agent") + 1] = f"http://127.0.0.1:{server.server_address[1]}/v1"
            script = argv[1] if argv[1] == "-m" else os.path.join(ROOT, argv[1])
            run_script(script, *argv[2:], cwd=tmp_path, timeout=600, env=importable)
    finally:
        server.shutdown()
    scored = read_jsonl(tmp_path / "runs" / "backend_valid.scored.jsonl")
    assert 0 < sum(t["success"] for t in scored) < len(scored)  # rewards that differ: the critic had pairs
    assert os.path.isfile(tmp_path / "runs" / "backend_valid.policy" / "model.safetensors")
    assert len(read_jsonl(tmp_path / "runs" / "test.scored.jsonl")) == len(scored)
