"""Benchmarks of policy.py, on the embedded SmolLM2-135M-Instruct (CPU or GPU): `python bench_policy.py`.

bench_prefix_scoring: the critic scoring 16 candidate replies (~100 tokens) of one state whose
history is ~1000 tokens, once with critic.py's shared-history KV cache and once as 16 full
sequences (4 per forward pass: one pass is timed and counted 4 times); returns how many times faster the cache is (target >= 4).
bench_dpo_vs_trl: one DPO + NLL epoch of policy.py against TRL's DPOTrainer on the same pairs,
model, batch size and precision (bf16 autocast), each with its reference log-probs computed once
(TRL: precompute_ref_log_probs); returns TRL's time over ours (target >= 1). TRL is needed only
here: pip install trl.
"""
import argparse
import random
import tempfile
import time

import torch

from colbench.models import load_model, token_logps, tokenize_turns

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
        examples = [{"chosen": policy.tokenize_completion(tokenizer, row["prompt"], row["chosen"]),
                     "rejected": policy.tokenize_completion(tokenizer, row["prompt"], row["rejected"])} for row in rows]
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


if __name__ == "__main__":
    print(f"prefix scoring speed-up: {bench_prefix_scoring():.2f}x (target >= 4)")
    print(f"DPO epoch vs TRL: {bench_dpo_vs_trl():.2f}x (target >= 1)")
