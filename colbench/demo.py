"""`make demo` and `make experiment`: the whole SWEET-RL chain, run as a user would run it.

    python -m colbench.demo                 # the demo: embedded model, CPU, about 30 minutes
    python -m colbench.demo --experiment    # more tasks, plus the RFT and Multi-Turn DPO baselines

Every step is one of the four scripts, run as a subprocess; its command is printed first. Outputs
go under one run folder (runs/demo or runs/experiment). A step whose output already exists is
skipped, so a killed run picks up where it stopped (delete the folder to start over). The run ends
with one table: each method's % tests passed and success rate on held-out test tasks, and the
critic's held-out pair accuracy with and without the reference solution.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from colbench.data import load_tasks, write_jsonl

# The demo is sized for the embedded 135M model on 2 CPU cores: easy-tier tasks (one line of
# arithmetic with hidden constants), short dialogues, short replies. README.md says what was tried.
SETTINGS = {
    "demo": dict(train_tasks=40, test_tasks=30, samples=4, test_samples=2, max_turns=2, max_new_tokens=80,
                 temperature=0.7, critic_epochs=2, candidates=8, pairs_per_turn=2, data_fraction=0.125,
                 methods=["sweet"]),
    "experiment": dict(train_tasks=135, test_tasks=30, samples=8, test_samples=4, max_turns=3, max_new_tokens=128,
                       temperature=0.7, critic_epochs=2, candidates=16, pairs_per_turn=4, data_fraction=0.5,
                       methods=["rft", "mt-dpo", "sweet"]),
}
METHOD_NAMES = {"zero-shot": "zero-shot", "rft": "Rejection Fine-Tuning", "mt-dpo": "Multi-Turn DPO",
                "sweet": "SWEET-RL"}


def run(*command, done_when):
    """Run one stage unless its output `done_when` exists already."""
    if os.path.exists(done_when):
        print(f"[skip] {done_when} exists", flush=True)
        return
    print("\n$ " + " ".join(command), flush=True)
    started = time.time()
    subprocess.run([sys.executable, *command], check=True)
    print(f"[{time.time() - started:.0f} s]", flush=True)


def easy_tasks(source, count, path):
    """The first `count` easy-tier tasks of a shipped task file, written to `path`."""
    if not os.path.exists(path):
        tasks = [t for t in load_tasks(source) if t.get("tier") == "easy"][:count]
        write_jsonl(path, tasks)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", action="store_true", help="the longer run with the baselines")
    parser.add_argument("--out", help="run folder (default runs/demo or runs/experiment)")
    args = parser.parse_args()
    name = "experiment" if args.experiment else "demo"
    s = SETTINGS[name]
    out = args.out or os.path.join("runs", name)
    os.makedirs(out, exist_ok=True)
    path = lambda *parts: os.path.join(out, *parts)
    started = time.time()
    print(f"{name}: {json.dumps(s)} -> {out}", flush=True)

    train = easy_tasks("colbench/data/backend_train.jsonl", s["train_tasks"], path("train_tasks.jsonl"))
    test = easy_tasks("colbench/data/backend_test.jsonl", s["test_tasks"], path("test_tasks.jsonl"))
    sampling = ["--max-turns", str(s["max_turns"]), "--max-new-tokens", str(s["max_new_tokens"]),
                "--temperature", str(s["temperature"])]

    # 1. Offline data: the zero-shot agent on the training tasks, scored.
    run("rollout.py", train, "--samples", str(s["samples"]), *sampling, "--out", path("train.traj.jsonl"),
        done_when=path("train.scored.jsonl"))
    run("evaluate.py", path("train.traj.jsonl"), "--out", path("train.scored.jsonl"),
        "--summary-json", path("train.summary.json"), done_when=path("train.scored.jsonl"))
    # 2. The critic, with the reference solution and without it (the paper's ablation).
    for critic, flags in (("critic", []), ("critic_no_reference", ["--no-reference"])):
        run("critic.py", path("train.scored.jsonl"), "--out", path(critic), "--epochs", str(s["critic_epochs"]),
            "--eval-fraction", "0.25", "--max-length", "1024", *flags, done_when=path(critic, "metrics.json"))
    # 3. The policy: SWEET-RL (and the baselines in the experiment).
    for method in s["methods"]:
        run("policy.py", path("train.scored.jsonl"), "--method", method, "--critic", path("critic"),
            "--out", path(f"policy_{method}"), "--candidates", str(s["candidates"]),
            "--pairs-per-turn", str(s["pairs_per_turn"]), "--data-fraction", str(s["data_fraction"]),
            "--max-turns", str(s["max_turns"]), "--max-new-tokens", str(s["max_new_tokens"]),
            done_when=path(f"policy_{method}", "config.json"))
    # 4. Held-out test tasks: the zero-shot agent and each trained policy, same sampling.
    agents = {"zero-shot": "embedded", **{m: path(f"policy_{m}") for m in s["methods"]}}
    for method, agent in agents.items():
        run("rollout.py", test, "--agent", agent, "--samples", str(s["test_samples"]), *sampling,
            "--out", path(f"test_{method}.traj.jsonl"), done_when=path(f"test_{method}.summary.json"))
        run("evaluate.py", path(f"test_{method}.traj.jsonl"), "--out", path(f"test_{method}.scored.jsonl"),
            "--summary-json", path(f"test_{method}.summary.json"), done_when=path(f"test_{method}.summary.json"))
    run("-m", "colbench.report", path("train.scored.jsonl"), "--critic", path("critic"),
        "--policy", path("policy_sweet"), "--out", path("report.html"), done_when=path("report.html"))

    print(f"\n{name} finished in {(time.time() - started) / 60:.1f} min; everything is in {out}/\n")
    print(table(out, agents))


def table(out, agents):
    """The closing table, read back from the files the stages wrote."""
    read = lambda *parts: json.load(open(os.path.join(out, *parts)))
    train = read("train.summary.json")
    lines = [f"offline data: {train['trajectories']} zero-shot trajectories on {train['tasks']} training tasks, "
             f"{train['mean_tests_passed_pct']:.1f}% tests passed, {train['success_rate_pct']:.1f}% success", "",
             "| method (held-out test tasks) | % tests passed | success rate |", "|---|---|---|"]
    for method in agents:
        summary = read(f"test_{method}.summary.json")
        lines.append(f"| {METHOD_NAMES[method]} | {summary['mean_tests_passed_pct']:.1f} | {summary['success_rate_pct']:.1f} |")
    lines.append("")
    for critic, label in (("critic", "with the reference solution"), ("critic_no_reference", "without it (ablation)")):
        metrics = read(critic, "metrics.json")
        after = metrics["after"].get("pair_accuracy")
        lines.append(f"critic held-out pair accuracy {label}: "
                     + (f"{after:.3f} ({metrics['eval_pairs']} pairs; {metrics['before']['pair_accuracy']:.3f} before training)"
                        if after is not None else "no held-out pairs"))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
