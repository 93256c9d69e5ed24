"""Tests of critic.py (to be merged into test_all.py): the loss by hand, the critic's prompt and its
token spans, the advantage's use of c, shared-history scoring, learning a planted pattern, and the
script end to end on an official-format file."""
import json
import math
import os
import random

import pytest
import torch
from transformers import AutoTokenizer

import critic
from colbench.models import load_model, tokenize_turns
from test_all import TIP_TASK, build_tiny_model, read_jsonl, run_script, tiny_model, write_jsonl  # noqa: F401 (fixture)

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
    chosen, rejected = torch.tensor([1.0, 0.5]), torch.tensor([0.0, 1.5])
    expected = (-math.log(1 / (1 + math.exp(-0.1))) - math.log(1 / (1 + math.exp(0.1)))) / 2  # margins ±0.1
    assert critic.bradley_terry_loss(chosen, rejected, beta=0.1).item() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.694397, abs=1e-6)
    logps = torch.log(torch.rand(20))
    advantage = critic.turn_advantages(logps, logps, [(3, 7), (12, 20)])
    assert advantage.tolist() == [0.0, 0.0]
    assert critic.bradley_terry_loss(advantage.sum()[None], advantage.sum()[None], 0.1).item() == pytest.approx(math.log(2))


def test_critic_turn_advantage_is_the_mean_or_sum_of_its_tokens():
    critic_logps, reference_logps = torch.tensor([-1.0, -2.0, -3.0, -4.0, -5.0]), torch.full((5,), -3.0)
    # spans are token positions: tokens 2..3 are entries 1..2, tokens 4..5 are entries 3..4
    assert critic.turn_advantages(critic_logps, reference_logps, [(2, 4), (4, 6)]).tolist() == [0.5, -1.5]
    assert critic.turn_advantages(critic_logps, reference_logps, [(2, 4), (4, 6)], normalize=False).tolist() == [1.0, -3.0]


def test_critic_prompt_holds_the_reference_and_spans_select_exactly_the_agent_tokens(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    dialogue = HISTORY + [{"role": "assistant", "content": CANDIDATES[0]}]
    messages = critic.critic_messages(TIP_TASK, dialogue)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert TIP_TASK["ground_truth"].strip() in messages[0]["content"]
    ids, spans = tokenize_turns(tokenizer, messages)
    assert [tokenizer.decode(ids[a:b]) for a, b in spans] == [
        "What percent should the tip be?<|im_end|>", CANDIDATES[0] + "<|im_end|>"]
    outside = tokenizer.decode([ids[k] for k in range(len(ids)) if not any(a <= k < b for a, b in spans)])
    assert "return round(bill * 0.18, 2)" in outside and "What percent" not in outside
    assert TIP_TASK["ground_truth"].strip() not in critic.critic_messages(TIP_TASK, dialogue, use_reference=False)[0]["content"]


def test_critic_advantage_changes_with_the_reference_only_when_it_is_shown(two_model_critic):
    other_reference = dict(TIP_TASK, ground_truth="def tip(bill):\n    return bill * 0.25\n")
    with_c = critic.score_candidates(two_model_critic, TIP_TASK, HISTORY, CANDIDATES)
    assert all(abs(a) > 1e-4 for a in with_c)
    assert all(abs(a - b) > 1e-5 for a, b in zip(with_c, critic.score_candidates(two_model_critic, other_reference, HISTORY, CANDIDATES)))
    blind = critic.Critic(two_model_critic.model, two_model_critic.reference_model, two_model_critic.tokenizer, use_reference=False)
    assert critic.score_candidates(blind, TIP_TASK, HISTORY, CANDIDATES) == critic.score_candidates(blind, other_reference, HISTORY, CANDIDATES)


@pytest.mark.parametrize("normalize", [True, False])
def test_critic_shared_history_scoring_equals_scoring_full_sequences(two_model_critic, normalize):
    scorer = critic.Critic(two_model_critic.model, two_model_critic.reference_model, two_model_critic.tokenizer, normalize=normalize)
    shared = critic.score_candidates(scorer, TIP_TASK, HISTORY, CANDIDATES)
    for candidate, score in zip(CANDIDATES, shared):
        ids, spans = tokenize_turns(scorer.tokenizer, critic.critic_messages(TIP_TASK, HISTORY + [{"role": "assistant", "content": candidate}]))
        with torch.no_grad():
            critic_logps = critic.sequence_logps(scorer.model, [ids])[0]
            reference_logps = critic.sequence_logps(scorer.reference_model, [ids])[0]
        assert score == pytest.approx(critic.turn_advantages(critic_logps, reference_logps, spans[-1:], normalize).item(), abs=1e-4)


def test_critic_pairs_need_the_same_task_and_a_large_enough_reward_gap():
    other = dict(TIP_TASK, task_id="other")
    trajectories = [scored(TIP_TASK, 0, ["a"], 0.2), scored(TIP_TASK, 1, ["b"], 0.9), scored(TIP_TASK, 2, ["c"], 0.2),
                    scored(other, 0, ["d"], 1.0), scored(TIP_TASK, 3, ["e"], 0.25)]
    names = lambda pairs: [(c["task_id"], c["sample_idx"], r["sample_idx"]) for c, r in pairs]
    assert names(critic.preference_pairs(trajectories, 0.0)) == [
        ("tip", 1, 0), ("tip", 3, 0), ("tip", 1, 2), ("tip", 1, 3), ("tip", 3, 2)]
    assert names(critic.preference_pairs(trajectories, 0.5)) == [("tip", 1, 0), ("tip", 1, 2), ("tip", 1, 3)]


def test_critic_max_length_drops_the_oldest_turns_first_and_says_so(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trajectory = scored(TIP_TASK, 0, ["first question?", "second question?", "I WANT TO ANSWER: def tip(bill): return 1"], 0.0)
    full_ids, full_spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, trajectory["dialogue_history"], True, 10_000)
    assert (len(full_spans), dropped, note) == (3, 0, "")
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, trajectory["dialogue_history"], True, len(full_ids) - 5)
    assert (len(spans), dropped, note) == (2, 1, "dropped the oldest 1 agent turn(s)")
    assert tokenizer.decode(ids[spans[0][0]:spans[0][1]]) == "second question?<|im_end|>"
    last_turn_only, _ = tokenize_turns(tokenizer, critic.critic_messages(TIP_TASK, trajectory["dialogue_history"][4:]))
    budget = len(last_turn_only) - 10
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, trajectory["dialogue_history"], True, budget)
    assert len(ids) <= budget and len(spans) == 1 and dropped == 2 and "cut the reference solution" in note
    assert tokenizer.decode(ids).count("[... cut]") == 1
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, TIP_TASK, trajectory["dialogue_history"], False, 10)
    assert len(spans) == 1 and note == "dropped the oldest 2 agent turn(s), still %d tokens, kept whole" % len(ids)


def planted_pattern_file(path, n_tasks=24):
    """Per task: one trajectory whose agent says the planted phrase (reward 1) and two that do not (reward 0)."""
    rng = random.Random(0)
    filler = "What is the discount? The tip is percent. Round to decimal places. def f(x): return x".split()
    records = []
    for n in range(n_tasks):
        task = dict(TIP_TASK, task_id=f"t{n}", problem_description=f"Task {n}: " + " ".join(rng.choices(filler, k=8)))
        chatter = lambda: " ".join(rng.choices(filler, k=6))
        records.append(scored(task, 0, [chatter() + " I WANT TO ANSWER: def tip(bill): return bill", chatter()], 1.0))
        records += [scored(task, k, [chatter(), chatter()], 0.0) for k in (1, 2)]
    return write_jsonl(path, records)


def test_critic_learns_a_planted_pattern_to_over_90_percent_held_out_accuracy(tmp_path, tiny_model):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=16)
    out = tmp_path / "critic"
    critic.main(critic.parser.parse_args([data, "--model", tiny_model, "--out", str(out), "--lr", "3e-3", "--epochs", "4",
                                          "--batch-size", "4", "--eval-fraction", "0.25", "--fp32"]))
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["eval_tasks"], metrics["eval_pairs"], metrics["train_pairs"]) == (4, 8, 24)
    assert metrics["before"]["pair_accuracy"] == 0.5
    assert metrics["after"]["pair_accuracy"] > 0.9
    advantages = read_jsonl(out / "advantages.jsonl")
    assert len(advantages) == 4 * 3 * 2
    first_turns = [a for a in advantages if a["turn"] == 0]
    mean = lambda values: sum(values) / len(values)
    # the critic credits the turn that holds the pattern, more than the first turns without it
    assert mean([a["advantage"] for a in first_turns if a["reward"] == 1.0]) > mean([a["advantage"] for a in first_turns if a["reward"] == 0.0])


def test_critic_runs_end_to_end_on_an_official_format_file(tmp_path, tiny_model):
    records = planted_pattern_file(tmp_path / "x.jsonl", n_tasks=3)
    official = []
    for record in read_jsonl(records):  # the official offline schema: no task_id, no sample_idx
        task = {k: v for k, v in record["task"].items() if k != "task_id"}
        official.append({"task": task, "dialogue_history": record["dialogue_history"], "answer": record["answer"],
                         "reward": record["reward"]})
    data = write_jsonl(tmp_path / "official.scored.jsonl", official)
    out = tmp_path / "critic"
    result = run_script("critic.py", data, "--model", tiny_model, "--out", str(out), "--epochs", "1", "--eval-fraction", "0.5")
    assert "used: 3 tasks, 9 trajectories, 6 pairs" in result.stdout and "loss" in result.stdout
    assert {"config.json", "model.safetensors", "args.json", "metrics.json", "advantages.jsonl", "log.jsonl"} <= set(os.listdir(out))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval_pairs"] + metrics["train_pairs"] == 6 and "pair_accuracy" in metrics["after"]
    assert set(read_jsonl(out / "advantages.jsonl")[0]) == {"task_id", "sample_idx", "turn", "advantage", "reward"}
    assert set(read_jsonl(out / "log.jsonl")[0]) >= {"step", "loss", "pair_accuracy", "margin", "tokens_per_s"}
    loaded = critic.load_critic(str(out))
    assert loaded.use_reference and loaded.normalize
    assert len(critic.score_candidates(loaded, official[0]["task"], HISTORY, CANDIDATES[:2])) == 2

    ablation = run_script("critic.py", data, "--model", tiny_model, "--out", str(tmp_path / "ablation"), "--epochs", "1",
                          "--no-reference", "--no-normalize", "--gradient-checkpointing", "--max-length", "60")
    assert "warning:" in ablation.stdout and "--max-length 60" in ablation.stdout
    loaded = critic.load_critic(str(tmp_path / "ablation"))
    assert not loaded.use_reference and not loaded.normalize


def test_critic_without_pairs_or_rewards_exits_with_a_clear_message(tmp_path, tiny_model):
    ties = write_jsonl(tmp_path / "ties.jsonl", [scored(TIP_TASK, k, ["a"], 0.5) for k in range(3)])
    result = run_script("critic.py", ties, "--model", tiny_model, "--out", str(tmp_path / "c"), check=False)
    assert result.returncode != 0 and "no pairs" in result.stderr and "Traceback" not in result.stderr
    unscored = write_jsonl(tmp_path / "unscored.jsonl", [{k: v for k, v in scored(TIP_TASK, 0, ["a"], 0.5).items() if k != "reward"}])
    result = run_script("critic.py", unscored, "--model", tiny_model, "--out", str(tmp_path / "c"), check=False)
    assert result.returncode != 0 and "no numeric 'reward'" in result.stderr and "Traceback" not in result.stderr


def test_critic_accepts_frontend_tasks_with_the_reference_page_as_c(tiny_model):
    from colbench.env import SYSTEM_PROMPTS
    if "frontend" not in SYSTEM_PROMPTS:
        pytest.skip("colbench/env.py has no frontend system prompt yet")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    page = {"task_id": "page", "problem_description": "A landing page for my bakery.",
            "ground_truth": "<html><body><h1>Fresh bread</h1><p>Open daily.</p></body></html>"}
    trajectory = scored(page, 0, ["What colours do you like?", "I WANT TO ANSWER: <html><body><h1>Bread</h1></body></html>"], 0.6)
    ids, spans, dropped, note = critic.fit_to_length(tokenizer, page, trajectory["dialogue_history"], True, 10_000)
    assert "<h1>Fresh bread</h1>" in tokenizer.decode(ids[:spans[0][0]]) and (len(spans), dropped, note) == (2, 0, "")
    assert tokenizer.decode(ids[spans[1][0]:spans[1][1]]).startswith("I WANT TO ANSWER: <html>")


def test_critic_under_torchrun_with_2_processes_matches_1_process(tmp_path, tiny_model):
    data = planted_pattern_file(tmp_path / "planted.scored.jsonl", n_tasks=8)
    common = [data, "--model", tiny_model, "--lr", "3e-3", "--epochs", "2", "--batch-size", "5",  # 5: one rank gets a padding pass
              "--eval-fraction", "0.25", "--fp32"]
    run_script("critic.py", *common, "--out", str(tmp_path / "one"))
    result = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "critic.py", *common,
                        "--out", str(tmp_path / "two"))
    assert result.stdout.count("done:") == 1  # rank 0 alone prints
    one, two = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("one", "two"))
    assert one["steps"] == two["steps"] and one["after"]["pair_accuracy"] == two["after"]["pair_accuracy"]
    assert two["after"]["loss"] == pytest.approx(one["after"]["loss"], rel=1e-3, abs=1e-4)
    losses = [[row["loss"] for row in read_jsonl(tmp_path / name / "log.jsonl")] for name in ("one", "two")]
    assert losses[1] == pytest.approx(losses[0], rel=1e-3, abs=1e-4)
    assert sorted(os.listdir(tmp_path / "two")) == sorted(os.listdir(tmp_path / "one"))
