"""Benchmarks: how much faster the project's stages run than the simple way of doing the same.

    python bench.py            # prints each ratio, then one JSON line of all ratios

Benchmarks, not tests: they take minutes and their numbers depend on the machine.

eval_vs_inprocess: trajectories/s of evaluate.py (sandboxed, parallel) on generated trajectories,
~10% of which hang on every test, over the official evaluator's way: `exec` the code in the
evaluator's own process and time each test with SIGALRM, one trajectory after another.
Target: >= 3x on 2 cores.

rollout_batching: tokens/s of the embedded agent stepping 8 dialogues with one batched `generate`
per turn (what rollout.py does) over the same 8 dialogues one at a time. Target: >= 4x.

prefix_scoring: the critic scoring 16 candidate replies (~100 tokens) of one state whose
history is ~1000 tokens, once with critic.py's shared-history KV cache and once as 16 full
sequences (4 per forward pass: one pass is timed and counted 4 times); how many times faster the cache is. Target: >= 4x.

dpo_vs_trl: one DPO + NLL epoch of policy.py against TRL's DPOTrainer on the same pairs,
model, batch size and precision (bf16 autocast), each with its reference log-probs computed once
(TRL: precompute_ref_log_probs); TRL's time over ours. Target: >= 1x. TRL is needed only
here: bench.py installs it when missing (it is not in requirements.txt).
"""
import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import torch

from colbench.models import load_model, token_logps, tokenize_turns

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


WORDS = ("the bill tip percent round total discount member order price tax shipping weight rate "
         "function returns value case zero negative list string number when if else").split()


def words(n, rng):
    """About n tokens of plain text: short made-up sentences."""
    sentences = []
    for _ in range(max(1, n // 9)):
        sentences.append(" ".join(rng.choice(WORDS) for _ in range(8)).capitalize() + ".")
    return " ".join(sentences)


def warm_up(model):
    """One forward and backward pass first, so neither side pays the kernels' first-call set-up."""
    ids = torch.randint(0, 1000, (2, 360), device=model.device)
    with torch.autocast(device_type=model.device.type, dtype=torch.bfloat16):
        token_logps(model, ids, torch.ones_like(ids)).sum().backward()
    model.zero_grad()


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def bench_prefix_scoring(candidates=16, history_tokens=1000, reply_tokens=100):
    from critic import Critic, critic_messages, score_candidates, sequence_logps, turn_advantages
    from colbench.data import load_tasks
    rng = random.Random(0)
    task = load_tasks("colbench/data/backend_train.jsonl")[0]
    history = [{"role": "user", "content": task["problem_description"]}]
    for _ in range(4):  # with c, the prompts and the problem: a ~1000-token history
        history += [{"role": "assistant", "content": words(90, rng) + "?"}, {"role": "user", "content": words(90, rng)}]
    replies = [words(reply_tokens, rng) for _ in range(candidates)]
    torch.manual_seed(0)
    model, tokenizer = load_model(None)
    reference_model, _ = load_model(None)
    critic = Critic(model, reference_model, tokenizer)
    length = len(tokenize_turns(tokenizer, critic_messages(task, history + [{"role": "assistant", "content": replies[0]}]))[0])

    @torch.no_grad()
    def full_sequences(replies):
        """The same advantages from whole sequences, each encoding the history again."""
        encoded = [tokenize_turns(tokenizer, critic_messages(task, history + [{"role": "assistant", "content": reply}]))
                   for reply in replies]
        critic_logps = sequence_logps(model, [ids for ids, _ in encoded])
        reference_logps = sequence_logps(reference_model, [ids for ids, _ in encoded])
        return [turn_advantages(c, r, spans[-1:]).item() for c, r, (_, spans) in zip(critic_logps, reference_logps, encoded)]

    score_candidates(critic, task, history, replies[:2])  # warm-up for both ways
    shared = []
    shared_s = timed(lambda: shared.extend(score_candidates(critic, task, history, replies)))
    # Whole sequences go 4 to a forward pass; the 4 passes cost the same, so one is timed and counted 4 times.
    full = []
    full_s = timed(lambda: full.extend(full_sequences(replies[:4]))) * candidates / 4
    assert max(abs(a - b) for a, b in zip(shared, full)) < 1e-3, "the two ways must give the same advantages"
    print(f"critic scoring, {candidates} replies of ~{reply_tokens} tokens, {length} tokens with the first: "
          f"shared history {shared_s:.1f} s, full sequences {full_s:.1f} s -> {full_s / shared_s:.2f}x")
    return full_s / shared_s


def bench_dpo_vs_trl(pairs=8, batch_size=4, prompt_tokens=300, reply_tokens=60):
    if importlib.util.find_spec("trl") is None:  # the benchmark's own dependency, installed on first use
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "trl"], check=True)
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer
    import policy
    rng = random.Random(0)
    rows = []
    for _ in range(pairs):
        prompt = [{"role": "system", "content": "Ask short questions."}, {"role": "user", "content": words(prompt_tokens, rng)}]
        rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": words(reply_tokens, rng)}],
                     "rejected": [{"role": "assistant", "content": words(reply_tokens, rng)}]})
    settings = argparse.Namespace(method="sweet", lr=5e-6, epochs=1, batch_size=batch_size, beta=0.1, nll_coef=0.01)

    torch.manual_seed(0)
    model, tokenizer = load_model(None, trainable=True)
    warm_up(model)

    def ours():
        examples = [policy.reply_pair_example(tokenizer, row) for row in rows]
        policy.add_reference_logps(model, examples)
        with tempfile.TemporaryDirectory() as folder:
            policy.train(model, examples, settings, random.Random(0), f"{folder}/log.jsonl")
    ours_s = timed(ours)
    del model

    torch.manual_seed(0)
    model, tokenizer = load_model(None, trainable=True)
    warm_up(model)
    with tempfile.TemporaryDirectory() as folder:
        config = DPOConfig(output_dir=folder, per_device_train_batch_size=batch_size, gradient_accumulation_steps=1,
                           num_train_epochs=1, learning_rate=settings.lr, beta=settings.beta,
                           loss_type=["sigmoid", "sft"], loss_weights=[1.0, settings.nll_coef], max_length=None,
                           bf16=True, precompute_ref_log_probs=True, report_to=[], save_strategy="no",
                           logging_steps=1, seed=0, dataloader_num_workers=0, use_cpu=model.device.type == "cpu",
                           max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0)

        def trl():
            trainer = DPOTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                                 processing_class=tokenizer)
            trainer.train()
        trl_s = timed(trl)
    print(f"DPO epoch, {pairs} pairs of ~{prompt_tokens}+{reply_tokens} tokens, batch {batch_size}, bf16 autocast: "
          f"policy.py {ours_s:.1f} s, TRL DPOTrainer {trl_s:.1f} s -> {trl_s / ours_s:.2f}x")
    return trl_s / ours_s



def bench_rollout_batching(dialogues=8, max_new_tokens=64):
    """Tokens/s of one batched agent turn over 8 dialogues vs the same 8 turns one at a time."""
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
    ratios = {"rollout_batching": bench_rollout_batching(),
              "prefix_scoring": round(bench_prefix_scoring(), 2),
              "dpo_vs_trl": round(bench_dpo_vs_trl(), 2),
              "eval_vs_inprocess": bench_eval_vs_inprocess()}
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
