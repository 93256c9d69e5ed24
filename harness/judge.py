"""The critic as a judge of final answers, checked where the tests can check it.

    python -m harness.judge runs/demo/train.scored.jsonl --model runs/demo/warm --out runs/demo/judge \
        --critic runs/demo/critic_with_c --critic runs/demo/critic_no_solution

At the turn states of the tasks the critics held out (their metrics.json names them), sample candidate
replies from the policy and keep the final answers (the answer marker, or the last turn); evaluate.py runs
their code against the tests. At each state whose answers the tests tell apart, each critic scores them as
policy.py would (critic.py score_candidates), and its top pick is compared with a random pick: the mean
difference in tests passed, with a 95% interval over tasks, and the rank correlation of score and tests.
Writes candidates.traj.jsonl, candidates.scored.jsonl and judge.json to --out.
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
from colbench.env import ANSWER_MARKER, agent_messages, extract_answer, turn_budget, turn_states
from colbench.models import DTYPES, chat_text, compute_dtype, describe_dtype, load_model, sample_candidates
from colbench.stats import bootstrap_mean_ci, spearman
from colbench.fast_logps import remembering
from critic import load_critic, score_candidates

EVALUATE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evaluate.py")  # run, not imported

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("scored", help="scored trajectories whose turn states are judged (critic.py's input)")
parser.add_argument("--critic", action="append", required=True, help="a critic folder (repeat to compare)")
parser.add_argument("--model", default="embedded", help="the policy that samples the candidates")
parser.add_argument("--out", required=True, help="folder for the candidates and judge.json")
parser.add_argument("--candidates", type=at_least(2), default=8,
                    help="replies sampled per turn state (2 at least: a ranking needs two)")
parser.add_argument("--max-states", type=positive_int, default=1000, help="turn states sampled at most")
parser.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per sampled reply at most")
parser.add_argument("--temperature", type=non_negative_float, default=0.7, help="sampling temperature")
parser.add_argument("--sample-batch-size", type=positive_int, default=16, help="sequences per batched generate call")
parser.add_argument("--dtype", default="auto", choices=DTYPES, help="sampling and scoring precision")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for the states and the sampling")


def ranking_quality(scores, tests_passed, task_ids):
    """The critic's top pick against a random pick, by the tests. One entry per turn state: its candidates'
    critic scores, their fractions of tests passed, and the state's task.

    critic_pick: tests passed by each state's top-scored candidate, averaged over states; random_pick: each
    state's mean over its candidates (what a random pick gets on average), averaged; difference: the first
    minus the second, with a 95% interval that resamples tasks; rank_correlation: Spearman's correlation of
    score and tests passed within a state, averaged over the states where the tests tell candidates apart."""
    picks = [tests[max(range(len(tests)), key=lambda i: state_scores[i])]
             for state_scores, tests in zip(scores, tests_passed)]
    randoms = [sum(tests) / len(tests) for tests in tests_passed]
    differences = {}  # task -> each of its states' pick minus random pick
    for task_id, pick, random_pick in zip(task_ids, picks, randoms):
        differences.setdefault(task_id, []).append(pick - random_pick)
    correlations = [spearman(state_scores, tests) for state_scores, tests in zip(scores, tests_passed)]
    correlations = [c for c in correlations if c is not None]
    return {"states": len(picks), "tasks": len(differences), "critic_pick": sum(picks) / len(picks),
            "random_pick": sum(randoms) / len(randoms), "difference": (sum(picks) - sum(randoms)) / len(picks),
            "difference_ci95": list(bootstrap_mean_ci(differences)),
            "rank_correlation": sum(correlations) / len(correlations) if correlations else None}


def main(args):
    for critic_dir in args.critic:
        if not os.path.isfile(os.path.join(critic_dir, "metrics.json")):
            fail(f"--critic {critic_dir}: no critic there (no metrics.json): run critic.py first")
    trajectories = trajectories_or_fail(args.scored)
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    dtype, why = compute_dtype(args.dtype)
    describe_dtype("judge", dtype, why)

    # The states of tasks that no critic trained on: the held-out tasks of the first critic.
    with open(os.path.join(args.critic[0], "metrics.json")) as f:
        held_out = set(json.load(f)["eval_task_ids"])
    states = [s for s in turn_states(trajectories) if s[0]["task_id"] in held_out]
    states = rng.sample(states, min(args.max_states, len(states)))
    model, tokenizer = load_model(args.model, dtype=dtype, keep_freed=True)  # the fast sampling, as policy.py --fast
    prompts = [chat_text(tokenizer, agent_messages(t["task"], history, turn_budget(t)), add_generation_prompt=True)
               for t, _, history in states]
    sampled = sample_candidates(model, tokenizer, prompts, args.candidates, args.max_new_tokens, args.temperature,
                                args.sample_batch_size, shrinking_batch=True)
    del model

    # Final answers only, then their tests, run by evaluate.py in its sandbox.
    rows = []
    for s, ((trajectory, turn, history), replies) in enumerate(zip(states, sampled)):
        for k, reply in enumerate(replies):
            if ANSWER_MARKER in reply or turn == turn_budget(trajectory) - 1:
                rows.append({"task_id": trajectory["task_id"], "sample_idx": s * args.candidates + k,
                             "state": s, "task": trajectory["task"],
                             "answer": extract_answer(trajectory["task"], reply),
                             "dialogue_history": history + [{"role": "assistant", "content": reply}]})
    candidates_path, scored_path = os.path.join(args.out, "candidates.traj.jsonl"), os.path.join(args.out,
                                                                                                "candidates.scored.jsonl")
    write_jsonl(candidates_path, rows)
    subprocess.run([sys.executable, EVALUATE, candidates_path, "--out", scored_path], check=True)
    by_state = {}
    for row in load_trajectories(scored_path):
        by_state.setdefault(row["state"], []).append(row)
    # The states the tests can judge: two answers at least, not all passing as many tests.
    judged = {s: group for s, group in sorted(by_state.items()) if len({row["reward"] for row in group}) > 1}
    results = {"states_sampled": len(states), "states_with_two_answers": sum(len(g) >= 2 for g in by_state.values()),
               "states": len(judged), "candidates": sum(len(g) for g in judged.values())}
    print(f"{len(states)} held-out turn states, {results['states_with_two_answers']} with two final answers or more, "
          f"{len(judged)} whose answers the tests tell apart", flush=True)
    if not judged:
        fail("no held-out state has answers that the tests tell apart: sample more (--max-states, --candidates)")
    for critic_dir in args.critic:
        critic = load_critic(critic_dir, autocast_dtype=dtype, logps_fn=remembering())  # the fast path
        scores = [score_candidates(critic, group[0]["task"], states[s][2], turn_budget(states[s][0]),
                                   [row["dialogue_history"][-1]["content"] for row in group])
                  for s, group in judged.items()]
        tests = [[row["reward"] for row in group] for group in judged.values()]
        quality = ranking_quality(scores, tests, [group[0]["task_id"] for group in judged.values()])
        results[os.path.basename(os.path.normpath(critic_dir))] = quality
        lo, hi = quality["difference_ci95"]
        print(f"{critic_dir}: critic's pick {quality['critic_pick']:.3f}, random pick {quality['random_pick']:.3f}, "
              f"difference {quality['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}] over {quality['states']} states "
              f"of {quality['tasks']} tasks", flush=True)
        del critic
    with open(os.path.join(args.out, "judge.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"judge -> {args.out}/judge.json")


if __name__ == "__main__":
    main(parser.parse_args())
