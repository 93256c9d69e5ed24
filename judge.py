"""The critic as a step-level judge, checked where the tests can check it.

    python judge.py runs/demo/train.scored.jsonl --model runs/demo/warm \
        --critic runs/demo/critic_reference --critic runs/demo/critic_no_reference --out runs/demo/judge

For turn states of the tasks a critic held out (its metrics.json names them), sample candidate
replies from the policy; keep the candidates that are final answers (the answer marker, or the
last turn). evaluate.py runs each one's code against the task's tests. Then each critic scores
the candidates (critic.score_candidates) and `ranking_quality` compares its ranking with
the tests: the % tests passed of its top-ranked answer against a random pick, and the rank
correlation between its score and tests passed. This is how policy.py uses the critic (ranking
candidates at one state), measured. Writes candidates.traj.jsonl, candidates.scored.jsonl and
judge.json to --out.
"""
import argparse
import json
import os
import random
import subprocess
import sys

import torch

from colbench.cli import at_least, fail, non_negative_float, non_negative_int, positive_int, trajectories_or_fail
from colbench.data import load_trajectories, write_jsonl
from colbench.env import ANSWER_MARKER, agent_messages, extract_answer
from colbench.models import DTYPES, chat_text, compute_dtype, default_device, describe_dtype, load_model
from colbench.stats import spearman
from critic import load_critic, score_candidates
from policy import sample_candidates, turn_states


def ranking_quality(scores, tests_passed):
    """How well the critic ranks candidate replies, against the tests. Both arguments: one list per
    turn state, a value per candidate (its critic score; its fraction of tests passed).

    critic_pick: tests passed by each state's top-scored candidate, averaged over states (best-of-N
    by the critic); random_pick: the mean over all candidates (what a random pick gets on average);
    rank_correlation: Spearman's correlation of score and tests passed within a state, averaged over
    the states where the tests tell the candidates apart."""
    picks = [tests[max(range(len(tests)), key=lambda i: state_scores[i])]
             for state_scores, tests in zip(scores, tests_passed)]
    correlations = [spearman(state_scores, tests) for state_scores, tests in zip(scores, tests_passed)]
    correlations = [c for c in correlations if c is not None]
    return {"critic_pick": sum(picks) / len(picks),
            "random_pick": sum(sum(tests) / len(tests) for tests in tests_passed) / len(tests_passed),
            "rank_correlation": sum(correlations) / len(correlations) if correlations else None,
            "states": len(picks), "states_with_different_tests": len(correlations)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scored", help="scored trajectories whose turn states are judged (critic.py's input)")
    parser.add_argument("--critic", action="append", required=True, help="a critic folder (repeat to compare)")
    parser.add_argument("--model", default="embedded", help="the policy that samples the candidates")
    parser.add_argument("--out", required=True, help="folder for the candidates and judge.json")
    parser.add_argument("--candidates", type=at_least(2), default=8,
                        help="replies sampled per turn state (2 at least: a ranking needs two)")
    parser.add_argument("--max-states", type=positive_int, default=40, help="turn states judged at most")
    parser.add_argument("--max-turns", type=positive_int, default=3, help="the rollouts' turn budget")
    parser.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per sampled reply at most")
    parser.add_argument("--temperature", type=non_negative_float, default=0.7, help="sampling temperature")
    parser.add_argument("--sample-batch-size", type=positive_int, default=16,
                        help="sequences per batched generate call")
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help="sampling and scoring precision")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for the states and the sampling")
    args = parser.parse_args()
    for critic_dir in args.critic:
        if not os.path.isfile(os.path.join(critic_dir, "metrics.json")):
            fail(f"--critic {critic_dir}: no critic there (no metrics.json): run critic.py first")
    trajectories = trajectories_or_fail(args.scored)
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    device = default_device()
    dtype, why = compute_dtype(args.dtype, device)
    describe_dtype("judge", dtype, why)

    # The states of tasks that no critic trained on: the held-out tasks of the first critic.
    with open(os.path.join(args.critic[0], "metrics.json")) as f:
        held_out = set(json.load(f)["eval_task_ids"])
    states = [s for s in turn_states(trajectories) if s[0]["task_id"] in held_out]
    states = rng.sample(states, min(args.max_states, len(states)))
    model, tokenizer = load_model(args.model, device=device, dtype=dtype)
    prompts = [chat_text(tokenizer, agent_messages(t["task"], history, args.max_turns), add_generation_prompt=True)
               for t, _, history in states]
    sampled = sample_candidates(model, tokenizer, prompts, args.candidates, args)
    del model

    # Final answers only, then their tests, run by evaluate.py in its sandbox.
    rows = []
    for s, ((trajectory, turn, history), replies) in enumerate(zip(states, sampled)):
        last_turn = turn == args.max_turns - 1
        for k, reply in enumerate(replies):
            if ANSWER_MARKER in reply or last_turn:
                rows.append({"task_id": trajectory["task_id"], "sample_idx": s * args.candidates + k,
                             "state": s, "task": trajectory["task"],
                             "answer": extract_answer(trajectory["task"], reply),
                             "dialogue_history": history + [{"role": "assistant", "content": reply}]})
    candidates_path = os.path.join(args.out, "candidates.traj.jsonl")
    scored_path = os.path.join(args.out, "candidates.scored.jsonl")
    write_jsonl(candidates_path, rows)
    subprocess.run([sys.executable, "evaluate.py", candidates_path, "--out", scored_path], check=True)
    by_state = {}
    for row in load_trajectories(scored_path):
        by_state.setdefault(row["state"], []).append(row)
    by_state = {s: group for s, group in by_state.items() if len(group) >= 2}  # a ranking needs two

    results = {"states": len(by_state), "candidates": sum(len(g) for g in by_state.values())}
    for critic_dir in args.critic:
        critic = load_critic(critic_dir, device=device, dtype=dtype)
        scores, tests = [], []
        for s, group in sorted(by_state.items()):
            _, _, history = states[s]
            scores.append(score_candidates(critic, group[0]["task"], history,
                                           [row["dialogue_history"][-1]["content"] for row in group]))
            tests.append([row["reward"] for row in group])
        results[os.path.basename(os.path.normpath(critic_dir))] = ranking_quality(scores, tests)
        del critic
    with open(os.path.join(args.out, "judge.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"judge: {json.dumps(results)} -> {args.out}/judge.json")


if __name__ == "__main__":
    main()
