"""`make demo` and `make experiment`: the whole SWEET-RL chain on the embedded model, run as a user would.

    python -m colbench.demo                 # the demo: about 30 minutes on 2 CPU cores
    python -m colbench.demo --experiment    # adds RFT, Multi-Turn DPO and SWEET-RL without normalization

Every step is one of the stage scripts, run as a subprocess; its command is printed first. Outputs
go under one run folder (runs/demo). A step whose output exists is skipped, so a killed run picks up
where it stopped (delete the folder to start over), and the experiment after the demo runs only its
own steps (about 30 minutes more). The steps:

0. Warm start (a departure from the paper, see colbench/warmstart.py): fine-tune the embedded
   SmolLM2-135M on scripted, deliberately imperfect dialogues of the easy training tasks. This is
   the starting policy, called zero-shot in the table as the paper's starting point is.
1. Offline data: the starting policy on training tasks, several samples each, scored by the tests.
2. The critic, with the reference solution c and without it (the paper's ablation), half the
   paired tasks held out.
3. SWEET-RL: the policy trained on critic-ranked candidate replies (--experiment: and the baselines,
   and SWEET-RL ranked by the critic without length normalization).
4. Held-out test tasks (never trained on, test-only families among them): every agent with the
   same tasks, seed and sampling.
5. The critic as a judge of final answers on its held-out tasks (judge.py).

It ends with one table, also written to results.md, and results.json with the same numbers.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from colbench.data import load_tasks, load_trajectories, write_jsonl
from colbench.env import ANSWER_MARKER
from colbench.stats import bootstrap_mean_ci, pair_outcomes

# Sized for the embedded 135M model on 2 CPU cores: easy-tier tasks (one line of arithmetic with
# hidden constants), three agent turns, short replies.
SETTINGS = {
    "demo": dict(rl_tasks=45, samples=5, test_samples=7, max_turns=3, max_new_tokens=64, temperature=0.7,
                 warm_lr=5e-5, critic_epochs=1, critic_lr=1e-4, candidates=6, pairs_per_turn=2, data_fraction=0.07,
                 policy_lr=5e-6, beta=1.0, nll_coef=1.0, judge_states=15, methods=["sweet"],
                 # dialogues per batched rollout step; sampled sequences per generate call (policy, judge):
                 # on 2 cores 64 rows sample ~2x the tokens/s of 16 (a batch shrinks as replies end)
                 batch_size=64, sample_batch_size=48),
}
# The experiment is the demo plus the baselines, in the same run folder: after `make demo`, only its new
# steps run (on the same offline data, critics and held-out test tasks).
SETTINGS["experiment"] = dict(SETTINGS["demo"],
                              methods=["sweet", "rft", "mt-dpo", "sweet-no-normalize"])
METHOD_NAMES = {"zero-shot": "starting policy (warm start)", "rft": "Rejection Fine-Tuning",
                "mt-dpo": "Multi-Turn DPO", "sweet": "SWEET-RL",
                "sweet-no-normalize": "SWEET-RL w/o normalization"}
# A method -> the critic that ranks its candidates (policy.py), or None for a baseline (baselines.py).
METHODS = {"sweet": "reference", "rft": None, "mt-dpo": None, "sweet-no-normalize": "no_normalize"}
# A critic's name in results.json and in its folder (critic_<name>) -> its critic.py flags.
CRITICS = {"reference": [], "no_reference": ["--no-solution"], "no_normalize": ["--no-normalize"]}


def run(*command, done_when):
    """Run one stage unless its output `done_when` exists already."""
    if os.path.exists(done_when):
        print(f"[skip] {done_when} exists", flush=True)
        return
    print("\n$ python " + " ".join(command), flush=True)
    started = time.time()
    subprocess.run([sys.executable, *command], check=True)
    print(f"[{time.time() - started:.0f} s]", flush=True)


def easy_tier(source):
    """The easy-tier tasks of a shipped task file."""
    return [t for t in load_tasks(source) if t.get("tier") == "easy"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", action="store_true",
                        help="the demo plus RFT, Multi-Turn DPO and SWEET-RL without normalization")
    parser.add_argument("--out", default=os.path.join("runs", "demo"), help="run folder (default runs/demo)")
    args = parser.parse_args()
    name = "experiment" if args.experiment else "demo"
    s = SETTINGS[name]
    out = args.out
    os.makedirs(out, exist_ok=True)

    def path(*parts):
        return os.path.join(out, *parts)

    started = time.time()
    print(f"{name}: {json.dumps(s)} -> {out}", flush=True)

    # The easy training tasks, split in two: a third for the RL data, the rest for the warm start. The
    # warm start memorizes its tasks' constants, so RL data on them would not show what asking is worth.
    warm_tasks, rl_tasks, test = path("warm_tasks.jsonl"), path("train_tasks.jsonl"), path("test_tasks.jsonl")
    if not os.path.exists(test):  # written last: once it exists, all three do
        training = easy_tier("colbench/tasks/backend_train.jsonl")
        write_jsonl(warm_tasks, [t for i, t in enumerate(training) if i % 3])
        write_jsonl(rl_tasks, [t for i, t in enumerate(training) if i % 3 == 0][: s["rl_tasks"]])
        write_jsonl(test, easy_tier("colbench/tasks/backend_test.jsonl"))
    sampling = ["--max-turns", str(s["max_turns"]), "--max-new-tokens", str(s["max_new_tokens"]),
                "--temperature", str(s["temperature"])]

    # 0. The starting policy: the embedded model fine-tuned on scripted dialogues of training tasks.
    run("-m", "colbench.warmstart", warm_tasks, "--out", path("warmstart.traj.jsonl"),
        done_when=path("warmstart.traj.jsonl"))
    run("baselines.py", path("warmstart.traj.jsonl"), "--method", "sft", "--lr", str(s["warm_lr"]),
        "--max-turns", str(s["max_turns"]), "--out", path("warm"), done_when=path("warm", "config.json"))
    # 1. Offline data: the starting policy on training tasks, scored.
    run("rollout.py", rl_tasks, "--agent", path("warm"), "--samples", str(s["samples"]), *sampling,
        "--batch-size", str(s["batch_size"]), "--out", path("train.traj.jsonl"),
        done_when=path("train.scored.jsonl"))
    run("evaluate.py", path("train.traj.jsonl"), "--out", path("train.scored.jsonl"),
        "--summary-json", path("train.summary.json"), done_when=path("train.scored.jsonl"))
    # 2. The critic, with the reference solution and without it (and without normalization).
    critics = ["reference", "no_reference"]
    critics += [METHODS[m] for m in s["methods"] if METHODS[m] not in critics + [None]]
    for critic in critics:
        run("critic.py", path("train.scored.jsonl"), "--model", path("warm"), "--out", path(f"critic_{critic}"),
            "--epochs", str(s["critic_epochs"]), "--lr", str(s["critic_lr"]), "--eval-fraction", "0.5",
            "--max-length", "1024", *CRITICS[critic], done_when=path(f"critic_{critic}", "metrics.json"))
    # 3. The policy: SWEET-RL (and the baselines in the experiment), all from the starting policy.
    # SWEET-RL samples and ranks candidates at the turn states of a fraction of the offline data (the time
    # budget); the baselines, which sample nothing, train on all of it.
    for method in s["methods"]:
        critic = METHODS[method]
        if critic:
            run("policy.py", path("train.scored.jsonl"), "--model", path("warm"), "--critic", path(f"critic_{critic}"),
                "--data-fraction", str(s["data_fraction"]), "--candidates", str(s["candidates"]),
                "--pairs-per-turn", str(s["pairs_per_turn"]), "--lr", str(s["policy_lr"]), "--beta", str(s["beta"]),
                "--nll-coef", str(s["nll_coef"]), "--last-turn-twins", *sampling,
                "--sample-batch-size", str(s["sample_batch_size"]), "--out", path(f"policy_{method}"),
                done_when=path(f"policy_{method}", "config.json"))
        else:
            run("baselines.py", path("train.scored.jsonl"), "--model", path("warm"), "--method", method,
                "--lr", str(s["policy_lr"]), "--beta", str(s["beta"]), "--nll-coef", str(s["nll_coef"]),
                "--max-turns", str(s["max_turns"]), "--out", path(f"policy_{method}"),
                done_when=path(f"policy_{method}", "config.json"))
    # 4. Held-out test tasks: the starting policy and each trained policy, same tasks, seed and sampling.
    agents = {"zero-shot": path("warm"), **{m: path(f"policy_{m}") for m in s["methods"]}}
    for method, agent in agents.items():
        run("rollout.py", test, "--agent", agent, "--samples", str(s["test_samples"]), *sampling,
            "--batch-size", str(s["batch_size"]), "--out", path(f"test_{method}.traj.jsonl"),
            done_when=path(f"test_{method}.summary.json"))
        run("evaluate.py", path(f"test_{method}.traj.jsonl"), "--out", path(f"test_{method}.scored.jsonl"),
            "--summary-json", path(f"test_{method}.summary.json"), done_when=path(f"test_{method}.summary.json"))
    # 5. The critics as judges of final answers, on the tasks they held out.
    run("judge.py", path("train.scored.jsonl"), "--model", path("warm"),
        "--critic", path("critic_reference"), "--critic", path("critic_no_reference"), "--out", path("judge"),
        "--max-states", str(s["judge_states"]), "--candidates", str(s["candidates"]), *sampling,
        "--sample-batch-size", str(s["sample_batch_size"]), done_when=path("judge", "judge.json"))
    run("-m", "colbench.report", path("train.scored.jsonl"), "--critic", path("critic_reference"),
        "--policy", path("policy_sweet"), "--out", path("report.html"), done_when=path("report.html"))

    results = collect(out, agents, critics, minutes=(time.time() - started) / 60)
    with open(path("results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = table(results)
    with open(path("results.md"), "w") as f:
        f.write(text + "\n")
    print(f"\n{name} finished in {results['minutes']:.1f} min; everything is in {out}/\n\n{text}")


# The held-out pairs by what sets their two dialogues apart, to see where c helps: a critic without c can
# learn that asking more wins; when both asked as often, only the code tells them apart.
PAIR_KINDS = {"asked more": "the chosen dialogue asked more", "asked as often": "both asked as often",
              "asked less": "the chosen dialogue asked less", "never answered": "the rejected one never answered"}


def pair_kind(chosen, rejected):
    """Which of PAIR_KINDS a (chosen, rejected) pair of backend dialogues is. "never answered": the rejected
    dialogue's last reply has no ANSWER_MARKER (its budget ran out while it asked)."""
    def replies(trajectory):
        return [turn["content"] for turn in trajectory["dialogue_history"] if turn["role"] == "assistant"]

    def questions(trajectory):
        return sum(ANSWER_MARKER not in reply for reply in replies(trajectory))

    if ANSWER_MARKER not in replies(rejected)[-1]:
        return "never answered"
    difference = questions(chosen) - questions(rejected)
    return "asked more" if difference > 0 else "asked less" if difference < 0 else "asked as often"


def by_pair_kind(out, pair_tasks, pair_samples, right):
    """{kind: {"pairs": n, "reference": right with c, "no_reference": right without c}} of the held-out
    pairs, each found in the run's offline dialogues by its task and sample indices."""
    dialogues = {(t["task_id"], t["sample_idx"]): t for t in load_trajectories(os.path.join(out, "train.scored.jsonl"))}
    counts = {kind: {"pairs": 0, "reference": 0.0, "no_reference": 0.0} for kind in PAIR_KINDS}
    for i, (task_id, (chosen, rejected)) in enumerate(zip(pair_tasks, pair_samples)):
        kind = counts[pair_kind(dialogues[task_id, chosen], dialogues[task_id, rejected])]
        kind["pairs"] += 1
        for critic in ("reference", "no_reference"):
            kind[critic] += right[critic][i]
    return counts


def read_json(path):
    with open(path) as f:
        return json.load(f)


def success_rate(outcomes, task_ids):
    """The mean success of the dialogues ({(task_id, sample_idx): success}) of these tasks; 0 if none."""
    kept = [success for (task_id, _), success in outcomes.items() if task_id in task_ids]
    return sum(kept) / max(1, len(kept))


def collect(out, agents, critics, minutes):
    """results.json: the numbers of the table, read back from the files the stages wrote."""
    train_families = {t["family"] for t in load_tasks(os.path.join(out, "warm_tasks.jsonl"))}
    outcomes = {}  # method -> {(task_id, sample_idx): success}
    for method in agents:
        outcomes[method] = {(t["task_id"], t["sample_idx"]): float(t["success"])
                            for t in load_trajectories(os.path.join(out, f"test_{method}.scored.jsonl"))}
    tasks = {t["task_id"]: t for t in load_tasks(os.path.join(out, "test_tasks.jsonl"))}
    seen = {task_id for task_id, t in tasks.items() if t["family"] in train_families}
    unseen = set(tasks) - seen
    results = {"minutes": round(minutes, 1),
               "starting_policy": "the embedded SmolLM2-135M after the warm start (colbench/warmstart.py)",
               "test_dialogues": {m: len(outcomes[m]) for m in agents},
               "test_tasks": {"all": len(tasks), "trained_families": len(seen), "test_only_families": len(unseen)},
               "success_rate": {m: success_rate(outcomes[m], set(tasks)) for m in agents},
               "success_rate_trained_families": {m: success_rate(outcomes[m], seen) for m in agents},
               "success_rate_test_only_families": {m: success_rate(outcomes[m], unseen) for m in agents},
               "tests_passed": {m: read_json(os.path.join(out, f"test_{m}.summary.json"))["mean_tests_passed_pct"] / 100
                                for m in agents}}
    for method in agents:
        if method == "zero-shot":
            continue
        difference = {}  # paired: the same task and sample index for both agents
        for (task_id, k), success in outcomes[method].items():
            if (task_id, k) in outcomes["zero-shot"]:
                difference.setdefault(task_id, []).append(success - outcomes["zero-shot"][(task_id, k)])
        label = "success_diff_ci95" if method == "sweet" else f"success_diff_ci95_{method}"
        results[label] = list(bootstrap_mean_ci(difference))
    results["critic"] = {}
    # critic -> each held-out pair's outcome (1 right, 0.5 tie, 0 wrong); its task; its sample indices
    # (chosen, rejected)
    right, pair_tasks, pair_samples = {}, {}, {}
    for critic in critics:
        metrics = read_json(os.path.join(out, f"critic_{critic}", "metrics.json"))
        results["critic"][critic] = {"pair_accuracy": metrics["after"].get("pair_accuracy"),
                                     "pairs": metrics["eval_pairs"], "ci95": metrics["after"].get("pair_accuracy_ci95"),
                                     "tasks": metrics["eval_tasks"]}
        right[critic] = pair_outcomes(metrics["after"]["margins"])
        pair_tasks[critic] = metrics["after"]["pair_task_ids"]
        pair_samples[critic] = metrics["after"].get("pair_samples")  # absent in critics of older versions
    # What c is worth: pair accuracy with c minus without, on the same held-out pairs, tasks resampled.
    if (pair_tasks["reference"] != pair_tasks["no_reference"]
            or pair_samples["reference"] != pair_samples["no_reference"]):
        raise SystemExit("the two critics held out different pairs: were they trained with the same --seed?")
    gain = {}
    for task_id, with_c, without_c in zip(pair_tasks["reference"], right["reference"], right["no_reference"]):
        gain.setdefault(task_id, []).append(with_c - without_c)
    results["critic_gain_ci95"] = list(bootstrap_mean_ci(gain))
    if pair_samples["reference"]:
        results["critic_by_pair_kind"] = by_pair_kind(out, pair_tasks["reference"], pair_samples["reference"], right)
    judge = read_json(os.path.join(out, "judge", "judge.json"))
    results["best_of_n"] = {"reference": judge["critic_reference"], "no_reference": judge["critic_no_reference"],
                            "states": judge["states"], "candidates": judge["candidates"]}
    return results


def pct(fraction):
    return f"{100 * fraction:.1f}"


def table(r):
    """The closing table, as Markdown."""
    tasks = r["test_tasks"]
    lines = [f"held-out test tasks: {tasks['all']} ({tasks['trained_families']} of trained families, "
             f"{tasks['test_only_families']} of test-only families)", "",
             "| agent | dialogues | % tests passed | success % | trained families | test-only families |",
             "|---|---|---|---|---|---|"]
    for m in r["success_rate"]:
        lines.append(f"| {METHOD_NAMES[m]} | {r['test_dialogues'][m]} | {pct(r['tests_passed'][m])} | "
                     f"{pct(r['success_rate'][m])} | {pct(r['success_rate_trained_families'][m])} | "
                     f"{pct(r['success_rate_test_only_families'][m])} |")
    for key, value in r.items():
        if key.startswith("success_diff_ci95"):
            method = key[len("success_diff_ci95_"):] or "sweet"
            diff = r["success_rate"][method] - r["success_rate"]["zero-shot"]
            lines.append(f"\n{METHOD_NAMES[method]} - starting policy: {pct(diff)} points of success, "
                         f"95% CI [{pct(value[0])}, {pct(value[1])}] (bootstrap over tasks, paired samples)")
    lines += ["", "| critic (held-out tasks) | pair accuracy | 95% CI | pairs | tasks |", "|---|---|---|---|---|"]
    names = {"reference": "with the reference solution c", "no_reference": "without c (ablation)",
             "no_normalize": "without normalization (ablation)"}
    for critic, c in r["critic"].items():
        ci = f"[{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]" if c["ci95"] else "-"
        accuracy = f"{c['pair_accuracy']:.3f}" if c["pair_accuracy"] is not None else "-"
        lines.append(f"| {names[critic]} | {accuracy} | {ci} | {c['pairs']} | {c['tasks']} |")
    gain = r["critic"]["reference"]["pair_accuracy"] - r["critic"]["no_reference"]["pair_accuracy"]
    low, high = r["critic_gain_ci95"]
    lines.append(f"\nwith c - without c: {gain:+.3f} pair accuracy, 95% CI [{low:+.3f}, {high:+.3f}] "
                 "(the same held-out pairs, bootstrap over tasks)")
    if "critic_by_pair_kind" in r:
        lines += ["", "| held-out pairs: what sets the two dialogues apart | pairs | right with c | right without c |",
                  "|---|---|---|---|"]
        for kind, k in r["critic_by_pair_kind"].items():
            lines.append(f"| {PAIR_KINDS[kind]} | {k['pairs']} | {k['reference']:g} | {k['no_reference']:g} |")
    b = r["best_of_n"]
    lines += ["", f"critic as judge: {b['states']} held-out turn states, {b['candidates']} final answers, "
                  "tests run on each",
              "| critic | % tests passed, critic's pick | random pick | rank correlation |", "|---|---|---|---|"]
    for critic in ("reference", "no_reference"):
        q = b[critic]
        correlation = f"{q['rank_correlation']:.3f}" if q["rank_correlation"] is not None else "-"
        lines.append(f"| {names[critic]} | {pct(q['critic_pick'])} | {pct(q['random_pick'])} | {correlation} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
