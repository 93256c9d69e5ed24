"""Benchmarks: how much faster the project's stages run than the simple way of doing the same.

    python bench.py            # prints each ratio, then one JSON line of all ratios

Benchmarks, not tests: they take minutes and their numbers depend on the machine.

eval_vs_inprocess: trajectories/s of evaluate.py (sandboxed, parallel) on generated trajectories,
~10% of which hang on every test, over the official evaluator's way: `exec` the code in the
evaluator's own process and time each test with SIGALRM, one trajectory after another.
Target: >= 3x on 2 cores.

rollout_batching: tokens/s of the embedded agent stepping 8 dialogues with one batched `generate`
per turn (what rollout.py does) over the same 8 dialogues one at a time. Target: >= 4x.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# The official evaluator's way, in a few lines (run in a child process, so that even this baseline
# keeps the generated code out of the benchmark's own process).
INPROCESS_BASELINE = r'''
import json, signal, sys, time
sys.path.insert(0, sys.argv[3])
from evaluate import extract_code
def on_alarm(signum, frame):
    raise TimeoutError
signal.signal(signal.SIGALRM, on_alarm)
records = [json.loads(line) for line in open(sys.argv[1])]
timeout, start, rewards = float(sys.argv[2]), time.monotonic(), []
for record in records:
    reference, candidate, passed = {}, {}, 0
    try:
        exec(record["task"]["ground_truth"], reference)
        exec(extract_code(record["answer"]), candidate)
    except Exception:
        pass
    for call in record["task"]["test_cases"].values():
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            expected = eval(call, reference)
            passed += expected is not None and eval(call, candidate) == expected
        except Exception:
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    rewards.append(passed / len(record["task"]["test_cases"]))
print(json.dumps({"seconds": time.monotonic() - start, "mean_reward": sum(rewards) / len(rewards)}))
'''


def make_trajectories(path, tasks=50, samples=10, tests=4, hang_fraction=0.1, seed=0):
    """Backend trajectories on simple generated tasks: right, wrong, raising, or hanging answers."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for t in range(tasks):
            scale, shift = rng.randint(2, 9), rng.randint(-5, 5)
            reference = f"def score(values, bonus):\n    return sum(v * {scale} for v in values) + bonus + {shift}\n"
            calls = {f"test{i + 1}": f"score({[rng.randint(-9, 9) for _ in range(rng.randint(1, 6))]}, {i})"
                     for i in range(tests)}
            task = {"task_id": f"bench-{t}", "problem_description": f"Score a list (task {t}).",
                    "ground_truth": reference, "test_cases": calls}
            for s in range(samples):
                draw = rng.random()
                if draw < hang_fraction:
                    body = "    while True:\n        pass\n"
                elif draw < 0.65:
                    body = f"    total = 0\n    for v in values:\n        total += v * {scale}\n    return total + bonus + {shift}\n"
                elif draw < 0.85:
                    body = f"    return sum(values) * {scale} + bonus\n"
                else:
                    body = "    return values[10] + bonus\n"
                answer = f"I WANT TO ANSWER:\n```python\ndef score(values, bonus):\n{body}```"
                record = {"task_id": task["task_id"], "sample_idx": s, "task": task,
                          "dialogue_history": [{"role": "user", "content": task["problem_description"]}],
                          "answer": answer}
                f.write(json.dumps(record) + "\n")
    return tasks * samples


def bench_eval_vs_inprocess(timeout=0.5):
    """Ratio of trajectories/s: evaluate.py over the sequential in-process exec + SIGALRM way."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.traj.jsonl")
        count = make_trajectories(path)
        print(f"eval_vs_inprocess: {count} trajectories, ~10% hanging on every test, "
              f"timeout {timeout} s per test, {os.cpu_count()} cores")
        start = time.monotonic()
        subprocess.run([sys.executable, os.path.join(HERE, "evaluate.py"), path, "--timeout", str(timeout),
                        "--out", os.path.join(tmp, "scored.jsonl"),
                        "--summary-json", os.path.join(tmp, "summary.json")],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sandboxed = time.monotonic() - start
        with open(os.path.join(tmp, "summary.json")) as f:
            sandboxed_reward = json.load(f)["mean_tests_passed_pct"] / 100
        start = time.monotonic()
        baseline = json.loads(subprocess.run(
            [sys.executable, "-c", INPROCESS_BASELINE, path, str(timeout), HERE],
            check=True, capture_output=True, text=True).stdout)
        inprocess = time.monotonic() - start
    print(f"  evaluate.py: {count / sandboxed:.1f} trajectories/s ({sandboxed:.1f} s, "
          f"mean reward {sandboxed_reward:.3f})")
    print(f"  in-process:  {count / inprocess:.1f} trajectories/s ({inprocess:.1f} s, "
          f"mean reward {baseline['mean_reward']:.3f})")
    ratio = inprocess / sandboxed
    print(f"  ratio: {ratio:.2f}x (target >= 3x)")
    return round(ratio, 2)


def bench_rollout_batching(dialogues=8, max_new_tokens=64):
    """Tokens/s of one batched agent turn over 8 dialogues vs the same 8 turns one at a time."""
    import torch
    from colbench.data import load_tasks
    from colbench.env import Episode
    from colbench.models import LocalChat
    agent = LocalChat()
    tasks = load_tasks(os.path.join(HERE, "colbench", "data", "backend_test.jsonl"))[:dialogues]
    views = [Episode(task, 0, max_turns=10).agent_view() for task in tasks]
    agent.chat(views[:1], max_new_tokens=4)  # warm-up

    def tokens_per_second(batches):
        torch.manual_seed(0)
        start, tokens = time.time(), 0
        for batch in batches:
            tokens += sum(reply.tokens for reply in agent.chat(batch, max_new_tokens, temperature=1.0))
        return tokens / (time.time() - start)

    batched = tokens_per_second([views])
    one_by_one = tokens_per_second([[view] for view in views])
    print(f"rollout: {batched:.1f} tokens/s with {dialogues} dialogues batched, {one_by_one:.1f} one at a time "
          f"-> {batched / one_by_one:.2f}x (target >= 4x)")
    return round(batched / one_by_one, 2)


def main():
    ratios = {"eval_vs_inprocess": bench_eval_vs_inprocess(),
              "rollout_batching": bench_rollout_batching()}
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
