"""Tests of policy.py: the DPO + NLL loss by hand, the top/bottom-half pairing rule, a few training
steps on a tiny model, and each method end to end (its checkpoint then runs in rollout.py)."""
import argparse
import json
import math
import random
import statistics

import pytest
import torch

from test_all import TIP_TASK, build_tiny_model, read_jsonl, run_script, tiny_model, write_jsonl  # noqa: F401


def scored_trajectory(sample_idx, reward, question, code):
    return {"task_id": "tip", "sample_idx": sample_idx, "task": TIP_TASK, "dialogue_history": [
        {"role": "user", "content": TIP_TASK["problem_description"]},
        {"role": "assistant", "content": question},
        {"role": "user", "content": "The tip is 18 percent of the bill."},
        {"role": "assistant", "content": "I WANT TO ANSWER: " + code}],
        "answer": code, "reward": reward, "success": reward == 1.0}


SCORED = [scored_trajectory(0, 1.0, "What percent should the tip be?", "def tip(bill):\n    return round(bill * 0.18, 2)"),
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
    loss, chosen_rewards, rejected_rewards = dpo_nll_loss(logps, logps - 1, logps, logps - 1, torch.zeros(2), 0.1, 0.01)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-7)
    assert chosen_rewards.tolist() == [0.0, 0.0] and rejected_rewards.tolist() == [0.0, 0.0]
    # beta (-1 - -2) = 0.1, beta (-3 - -2) = -0.1: -log sigmoid(0.2) = log(1 + e^-0.2) = 0.5981389; + 0.01 * 1.5
    loss, chosen_rewards, rejected_rewards = dpo_nll_loss(
        torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), torch.tensor([1.5]), 0.1, 0.01)
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


def test_policy_few_dpo_steps_raise_the_chosen_minus_rejected_margin(tiny_model, tmp_path):
    from transformers import AutoTokenizer
    from policy import add_reference_logps, tokenize_completion, train
    from colbench.models import load_model
    model, tokenizer = load_model(tiny_model, trainable=True, device="cpu")
    prompt = [{"role": "system", "content": "Ask first."}, {"role": "user", "content": "I want a tip calculator."}]
    examples = [{"chosen": tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": chosen}]),
                 "rejected": tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": rejected}])}
                for chosen, rejected in [("What percent is the tip?", "def tip(bill): return bill"),
                                         ("Round to 2 decimal places?", "I WANT TO ANSWER: def f(x): return 1")]]
    add_reference_logps(model, examples)
    args = argparse.Namespace(method="sweet", lr=1e-3, epochs=6, batch_size=2, beta=0.1, nll_coef=0.01)
    history = train(model, examples, args, random.Random(0), str(tmp_path / "log.jsonl"))
    assert len(history) == 6 and len(read_jsonl(tmp_path / "log.jsonl")) == 6
    assert abs(history[0]["margin"]) < 1e-6  # policy == reference at the first step
    assert history[-1]["margin"] > history[0]["margin"] + 0.05 and history[-1]["accuracy"] == 1.0
    assert set(history[0]) >= {"step", "loss", "accuracy", "margin", "chosen_logps", "rejected_logps", "tokens_per_s"}


def test_policy_shared_prompt_logps_and_gradients_equal_full_sequence_ones(tiny_model):
    from colbench.models import load_model, token_logps
    from policy import completion_logps, tokenize_completion
    model, tokenizer = load_model(tiny_model, trainable=True, device="cpu")
    prompt = [{"role": "system", "content": "Ask first."}, {"role": "user", "content": "A tip calculator."},
              {"role": "assistant", "content": "What percent?"}, {"role": "user", "content": "18 percent."}]
    sequences = [tokenize_completion(tokenizer, prompt, [{"role": "assistant", "content": reply}])
                 for reply in ("Round to cents?", "I WANT TO ANSWER: def tip(bill): return bill * 0.18")]
    shared, counts, _ = completion_logps(model, sequences)
    shared.sum().backward()
    shared_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    full = []
    for ids, spans in sequences:  # the last span only: the earlier assistant turn belongs to the prompt
        logps = token_logps(model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]
        full.append(sum(logps[start - 1:end - 1].sum() for start, end in spans))
        assert counts[len(full) - 1] == sum(end - start for start, end in spans) and len(spans) == 1
    torch.stack(full).sum().backward()
    assert torch.allclose(shared, torch.stack(full).detach(), atol=1e-4)
    assert torch.allclose(shared_grad, model.lm_head.weight.grad, atol=1e-6)


def rollout_runs(policy_dir, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TIP_TASK])
    result = run_script("rollout.py", tasks, "--agent", policy_dir, "--max-turns", "1", "--max-new-tokens", "4",
                        "--out", str(tmp_path / "after.traj.jsonl"))
    assert "done: 1 trajectories" in result.stdout


def test_policy_sweet_end_to_end_writes_trl_pairs_and_a_checkpoint_rollout_runs(tmp_path, scored_file, critic_dir, tiny_model):
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
    assert log and set(log[0]) >= {"step", "loss", "accuracy", "margin", "chosen_logps", "rejected_logps", "tokens_per_s"}
    assert json.load(open(f"{out}/args.json"))["method"] == "sweet" and (tmp_path / "policy" / "config.json").exists()
    rollout_runs(out, tmp_path)


@pytest.mark.parametrize("method, data_file", [("mt-dpo", "pairs.jsonl"), ("rft", "sft.jsonl")])
def test_policy_baselines_end_to_end(tmp_path, scored_file, tiny_model, method, data_file):
    out = str(tmp_path / method)
    result = run_script("policy.py", scored_file, "--method", method, "--model", tiny_model, "--out", out)
    assert "done:" in result.stdout
    rows = read_jsonl(f"{out}/{data_file}")
    if method == "mt-dpo":  # rewards 1.0, 0.3, 0.0: three pairs, each whole dialogue after the problem
        assert len(rows) == 3 and all(r["chosen_score"] > r["rejected_score"] for r in rows)
        assert all([m["role"] for m in r["chosen"]] == ["assistant", "user", "assistant"] for r in rows)
    else:  # the one successful trajectory, in TRL's prompt-completion format
        assert len(rows) == 1 and rows[0]["sample_idx"] == 0 and rows[0]["completion"][-1]["role"] == "assistant"
    assert "nll" in read_jsonl(f"{out}/log.jsonl")[0] if method == "rft" else "margin" in read_jsonl(f"{out}/log.jsonl")[0]
    rollout_runs(out, tmp_path)


def test_policy_says_why_when_there_is_nothing_to_train_on(tmp_path, tiny_model):
    failed = write_jsonl(tmp_path / "failed.scored.jsonl", SCORED[1:])
    result = run_script("policy.py", failed, "--method", "rft", "--model", tiny_model, "--out", str(tmp_path / "p"),
                        check=False)
    assert result.returncode != 0 and "no successful trajectory" in result.stderr and "Traceback" not in result.stderr
    result = run_script("policy.py", failed, "--critic", str(tmp_path / "nowhere"), "--model", tiny_model,
                        "--out", str(tmp_path / "p"), check=False)
    assert result.returncode != 0 and "no critic at" in result.stderr and "critic.py" in result.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": {}}\n')
    result = run_script("policy.py", str(bad), "--model", tiny_model, check=False)
    assert result.returncode == 2 and f"{bad}:1" in result.stderr and "Traceback" not in result.stderr
