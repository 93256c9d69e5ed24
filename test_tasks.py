"""Tests of the shipped backend task set (colbench/data/backend_{train,test}.jsonl)."""
import ast
import json
import os
import re
import subprocess
import sys
from collections import Counter

from colbench.data import load_tasks

ROOT = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(ROOT, "colbench", "data")
TRAIN = os.path.join(DATA, "backend_train.jsonl")
TEST = os.path.join(DATA, "backend_test.jsonl")
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
    assert not {t["ground_truth"] for t in train} & {t["ground_truth"] for t in test}


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
    subprocess.run([sys.executable, "-m", "colbench.backend_tasks", "--out", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    for name in ("backend_train.jsonl", "backend_test.jsonl"):
        with open(os.path.join(DATA, name), "rb") as shipped, open(tmp_path / name, "rb") as fresh:
            assert shipped.read() == fresh.read(), name
