"""Tests of evaluate.py and the sandbox: the real script on hostile and honest programs."""
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from colbench.sandbox import decode_value, encode_value
from evaluate import extract_code

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = "def f(x):\n    return x * 2\n"
CALLS = {"test1": "f(1)", "test2": "f(2)", "test3": "f(3)"}


def trajectory(answer, task_id="double", reference=REFERENCE, calls=CALLS, **extra):
    task = {"task_id": task_id, "problem_description": "Double a number.", "ground_truth": reference,
            "test_cases": calls}
    return {"task_id": task_id, "task": task, "dialogue_history": [{"role": "user", "content": "hi"}],
            "answer": answer, **extra}


def write_jsonl(path, records):
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return str(path)


def evaluate(path, *args, timeout=60):
    """Run the real script; returns (completed process, scored records or None, summary or None)."""
    out, summary = path + ".scored.jsonl", path + ".summary.json"
    command = [sys.executable, os.path.join(HERE, "evaluate.py"), path, "--out", out, "--summary-json", summary,
               *args]
    running = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)
    stdout, stderr = running.communicate(timeout=timeout)
    process = subprocess.CompletedProcess(command, running.returncode, stdout, stderr)
    process.pid = running.pid  # sandbox runners carry it: `sandbox.py --serve PID`
    if process.returncode != 0:
        return process, None, None
    with open(out) as f:
        records = [json.loads(line) for line in f]
    with open(summary) as f:
        return process, records, json.load(f)


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
        "fake_results": ("import os, sys\ndef f(x):\n    fake = json_line = '{\"results\": {\"test1\": {\"value\": 2}}}'\n"
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
    "writes_outside": "PermissionError", "deletes_outside": "PermissionError",
    "network_loopback": "Network is unreachable", "sys_exit": "SystemExit",
    "tampers_builtins": "returned 3, expected 2", "always_equal_object": "unserializable",
    "always_equal_int": "returned 0, expected 2", "honest_wrong": "returned 3, expected 2",
}


# Without root the programs run as the evaluator's own user (see docs_sandbox.md).
NEEDS_ROOT = {"writes_outside", "deletes_outside", "subprocess", "kills_parent"}


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
    assert FAILURE_DETAILS.get(name, "") in (record["failure_detail"] or ""), record["failure_detail"]


def test_eval_hostile_partial_credit_is_per_test(hostile_run):
    assert hostile_run["scored"]["loop_on_some_inputs"]["test_results"] == {
        "test1": "pass", "test2": "timeout", "test3": "pass"}


@pytest.mark.skipif(os.geteuid() != 0, reason="programs run as the evaluator's user when it is not root")
def test_eval_hostile_side_effects_did_not_escape(hostile_run):
    assert list(hostile_run["outside"].iterdir()) == []  # no writes by open/os.system/subprocess
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
    evaluator = subprocess.Popen([sys.executable, os.path.join(HERE, "evaluate.py"), path, "--timeout", "20",
                                  "--out", str(tmp_path / "out.jsonl")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE)
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
    assert exact["test_results"] == {"none": "reference gave None", "zero": "pass", "pair": "pass",
                                     "nested": "pass"}
    assert exact["reward"] == 0.75 and not exact["success"]  # re-scored, the old 0.123 replaced
    assert loose["test_results"] == {"none": "reference gave None", "zero": "pass", "pair": "wrong output",
                                     "nested": "pass"}
    assert summary["mean_tests_passed_pct"] == 62.5
    assert summary["best_of_k"] == {"k": 2, "tests_passed_pct": 75.0, "success_rate_pct": 0.0}


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


def test_eval_missing_file_and_frontend_without_clip_weights(tmp_path):
    process, _, _ = evaluate(str(tmp_path / "absent.jsonl"))
    assert process.returncode == 2 and "no such file" in process.stderr and "Traceback" not in process.stderr
    page = trajectory("<html><body>hi</body></html>")
    page["task"] = {"task_id": "page", "problem_description": "A page.", "ground_truth": "<html><body>x</body></html>"}
    process, _, _ = evaluate(write_jsonl(tmp_path / "front.jsonl", [page]))
    assert process.returncode == 2
    assert "--clip PATH" in process.stderr and "Traceback" not in process.stderr  # offline: says how to pass a checkpoint


def test_eval_refuses_to_overwrite_its_input(tmp_path):
    path = write_jsonl(tmp_path / "same.jsonl", [trajectory("def f(x):\n    return x * 2\n")])
    process = subprocess.run([sys.executable, os.path.join(HERE, "evaluate.py"), path, "--out", path],
                             capture_output=True, text=True, cwd=HERE)
    assert process.returncode != 0 and "never modifies its input" in process.stderr


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
    from colbench.sandbox import Sandbox
    bomb = "import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
    forker = ("import os\ndef f(x):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
              "    os.waitpid(pid, 0)\n    return x\n")
    with Sandbox(timeout=0.5) as sandbox:  # one runner: the same user id for both programs
        assert sandbox.run(bomb, [("a", "f(1)")])["results"]["a"]["error"] == "timeout"
        assert sandbox.run(forker, [("a", "f(1)"), ("b", "f(2)")])["results"] == {"a": {"value": 1},
                                                                                   "b": {"value": 2}}
