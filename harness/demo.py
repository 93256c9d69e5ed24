"""`make demo` and `make experiment`: the whole SWEET-RL chain on the embedded model, run as a user would.

    python -m harness.demo                 # the demo (runs/demo)
    python -m harness.demo --experiment    # the demo, then the baselines and the controls (runs/demo/experiment)
    python -m harness.demo --validate      # the settings' choice on validation tasks (runs/demo/validation)
    python -m harness.demo --frontend      # the chain on frontend tasks, scored offline (runs/frontend)
    python -m harness.demo --frontend --experiment   # then SWEET-RL's variants (runs/frontend/experiment)

Every step is a stage script run as a subprocess, its command printed first. A step whose output exists is
skipped, so a killed run picks up where it stopped, and the experiment after the demo runs only its own
steps. The demo: a warm start (harness/warmstart.py), offline data on training tasks, the critic with c
and without it, SWEET-RL, and every agent on the held-out test tasks with the same seeds and sampling. The
experiment adds Multi-Turn DPO, RFT, and SWEET-RL with its candidates ranked at random, by the critic
without c, by the critic without normalization and by a value-head critic, all on the same offline data; and
the critic as a judge. Each ends with one table (results.md) and results.json with the same numbers.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import critic as critic_stage
import policy as policy_stage
import rollout
from colbench.cli import fraction
from colbench.data import load_tasks, load_trajectories, read_jsonl, task_kind, write_jsonl
from colbench.env import ANSWER_MARKER, html_page, turn_budget, turn_states
from colbench.frontend import can_still_tell, departures, task_outcomes, topics_told
from colbench.simulators import facts_told, hidden_facts
from colbench.stats import bootstrap_mean_ci, pair_outcomes
from harness import baselines, judge

# Sized for the embedded 135M model on 2 CPU cores: easy-tier tasks (one line of arithmetic with hidden
# constants), three agent turns, short replies. β, λ, the policy's learning rate and the trajectory score
# were chosen on the validation tasks (`--validate`, 2026-11-24 and 11-25), the warm start's dialogues per
# task and learning rate and the pairs per turn by hand on them (2026-11-26): docs/RESULTS.md. Never on the
# test tasks.
SETTINGS = dict(
    model="embedded", warm_samples=2, rl_tasks=45, samples=5, test_samples=7, validation_samples=10,
    max_turns=3, max_new_tokens=64, temperature=0.7, warm_lr=1e-4, warm_batch_size=8,
    critic_head="log-ratio", critic_beta=0.1, critic_epochs=1, critic_lr=1e-4, trajectory_score="token-mean",
    critic_max_length=1024, critic_pairing="all",
    candidates=6, pairs_per_turn=2, policy_lr=1e-5, beta=0.1, nll_coef=1.0, lr_schedule="constant",
    demo_fraction=0.2,         # of the offline trajectories whose turn states SWEET-RL ranks: its time budget
    experiment_fraction=0.2,   # every trained agent of the experiment (--data-fraction)
    judge_candidates=12,       # replies per held-out state the judge samples: 6 left 32 states the tests tell apart
    batch_size=256)            # dialogues per batched rollout step, sequences per sampling call: all at once
# The experiment's agents: a SWEET-RL variant names the critic that ranks its candidates ("random": scores
# drawn at random); the controls rank the candidates SWEET-RL sampled. A baseline names its baselines.py method.
SWEET_VARIANTS = {"sweet": "critic_with_c", "sweet-random-critic": "random",
                  "sweet-no-solution": "critic_no_solution", "sweet-no-normalize": "critic_no_normalize",
                  "sweet-value-head": "critic_value_head"}
BASELINES = ("mt-dpo", "rft")
# The scripted agents (colbench/scripted.py), played on the test tasks beside the agents: oracle coders, so
# their success is the share of dialogues that drew every hidden fact.
SCRIPTS = {"script-fixed": "scripted:fixed", "script-by-subject": "scripted:by-subject"}
NAMES = {"script-fixed": "script: one general request, repeated", "script-by-subject":
         "script: asks for each fact by its subject", "zero-shot": "starting policy (warm start)", "sweet": "SWEET-RL",
         "mt-dpo": "Multi-Turn DPO",
         "rft": "Rejection Fine-Tuning", "sweet-random-critic": "SWEET-RL, candidates ranked at random",
         "sweet-no-solution": "SWEET-RL, critic without c", "sweet-no-normalize": "SWEET-RL, critic w/o normalization",
         "sweet-value-head": "SWEET-RL, critic with a value head (Table 3's regression head)",
         "sweet-reference-without-c": "SWEET-RL, Eq. 3's critic with a π_ref that reads no c",
         "sweet-offline-only": "SWEET-RL, the value head trained on the offline data alone",
         "sweet-two-epochs-16": "SWEET-RL, the run's critic at two epochs, 16 candidates"}
# The value head's loss has no β (the official qwen_rm_trainer.py: −log σ(chosen − rejected)): β 1.
CRITICS = {"critic_with_c": [], "critic_no_solution": ["--no-solution"], "critic_no_normalize": ["--no-normalize"],
           "critic_value_head": ["--head", "value", "--beta", "1"]}
# The frontend experiment's variants of SWEET-RL, each ranking by its own critic the candidates SWEET-RL sampled, or
# its own `candidates`: (the critic, its settings that differ from FRONTEND's, its flags). The value head on the
# offline data alone, as the paper trains it: the frontend run's critic until 2026-11-30 (its settings chosen on
# validation then). Eq. 3 with π_ref reading no c: lr 1e-5 over 1e-4 by the order of the training states'
# candidate pages, then SWEET-RL on validation. The run's critic at two epochs and 16 candidates: slower, as
# validated before one epoch and 8 were chosen for time. Each draw of candidates is sampled once.
OFFLINE_ONLY = dict(scripted_samples=0, trajectory_score="token-mean", critic_epochs=2, candidates=4)
FRONTEND_VARIANTS = {"sweet-no-solution": ("critic_no_solution", {}, CRITICS["critic_no_solution"]),
                     "sweet-offline-only": ("critic_offline_only", OFFLINE_ONLY, []),
                     "sweet-reference-without-c": ("critic_reference_without_c", dict(
                         OFFLINE_ONLY, critic_head="log-ratio", critic_beta=0.1, critic_lr=1e-5),
                         ["--reference-without-c"]),
                     "sweet-two-epochs-16": ("critic_two_epochs", dict(critic_epochs=2, candidates=16), [])}
# The frontend run (--frontend, runs/frontend): the same chain on web pages, scored offline by the screenshots'
# edge-color score. Two turns: a task departs from its kind's default page in two of four subjects, the request
# hints at both, and one question naming two subjects can tell them (colbench/page.py, colbench/tasks/frontend.py).
# The critic is the paper's frontend critic, a value head (critic.py --head value; its loss has no β, as the
# official trainer's), on c as the page's departures in the human's words (page_facts), its pairs the official
# frontend rule's (two dialogues of a task whose scores are at least 0.1 apart). It also trains on fresh scripted
# dialogues of the warm-start tasks (scripted_samples a task, critic.py --train-also), whose pages hold what was told
# (190 pairs more, 72 of a page against a question; the offline 105, 15), and sums its turns' values (Eq. 2). Its
# learning rate, the scripted dialogues, turn-sum and the candidates were chosen on a validation split of the RL training
# tasks, one epoch and 8 candidates for time (docs/RESULTS.md). The warm start's learning rate and batch come from
# the frontend validation before this redesign (docs/NOTEBOOK.md); its three dialogues a task were set by hand: with
# one, the start's offline pages had the kind's default sections in 0 of 37 dialogues that left them untold, its
# colors in 5 of 42. The policy's learning rate is the backend's. A page is at most ~190 tokens (the site's style
# sheet is not in it): 256 new tokens hold one.
FRONTEND = dict(SETTINGS, warm_tasks=60, warm_samples=3, warm_lr=2e-4, warm_batch_size=4, rl_tasks=24, samples=4,
                test_samples=3, max_turns=2, max_new_tokens=256, critic_head="value", critic_beta=1.0,
                critic_epochs=1, critic_lr=1e-4, critic_max_length=2048, critic_pairing="official", page_facts=True,
                scripted_samples=4, trajectory_score="turn-sum", demo_fraction=0.25, candidates=8, batch_size=128)

PARSERS = {"rollout.py": rollout.parser, "critic.py": critic_stage.parser, "policy.py": policy_stage.parser,
           "harness.baselines": baselines.parser, "harness.judge": judge.parser}


def differing(script, **settings):
    """The flags of `settings` (option names, as `max_turns=3`) whose value differs from the default of
    `script`: the demo passes a stage only what it does not already default to."""
    defaults = {action.dest: action.default for action in PARSERS[script]._actions}
    flags = []
    for name, value in settings.items():
        if name not in defaults:
            raise KeyError(f"{script} has no option --{name.replace('_', '-')}")
        if value != defaults[name]:  # a switch (store_true) is named alone
            flags += ["--" + name.replace("_", "-")] + ([] if isinstance(value, bool) else [str(value)])
    return flags


class Run:
    """One run folder: its paths, and the stages it runs, each unless its output exists already."""

    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.times_file = self.path("stage_seconds.json")
        self.seconds = json.load(open(self.times_file)) if os.path.exists(self.times_file) else {}

    def path(self, *parts):
        return os.path.join(self.folder, *parts)

    def stage(self, name, *command, done_when):
        """Run `python command` unless `done_when` exists; its seconds go to stage_seconds.json as `name`."""
        if os.path.exists(done_when):
            print(f"[skip] {done_when} exists", flush=True)
            return
        print("\n$ python " + " ".join(command), flush=True)
        started = time.time()
        if subprocess.run([sys.executable, *command]).returncode:
            raise SystemExit(f"the demo stopped: stage '{name}' failed (its message is above)")
        self.seconds[name] = round(time.time() - started, 1)
        print(f"[{self.seconds[name]:.0f} s]", flush=True)
        with open(self.times_file, "w") as f:
            json.dump(self.seconds, f, indent=1)


def split_tasks(run, s, kind):
    """The task files of a run: the shipped tasks of `kind` (backend: the easy tier). Training tasks: every
    third for the RL data (the warm start memorizes its tasks' constants, so RL data on them would not show
    what asking is worth), the rest for the warm start. Validation, backend: the easy tasks of
    backend_valid.jsonl, further draws of the training families; frontend: the training tasks that neither
    the warm start nor the RL data uses. Test: all the test tasks."""
    if os.path.exists(run.path("test_tasks.jsonl")):  # written last: once it exists, all are there
        return

    def tasks(name):
        found = load_tasks(f"colbench/tasks/{kind}_{name}.jsonl")
        return [t for t in found if t.get("tier") == "easy"] if kind == "backend" else found
    training = tasks("train")
    warm = [t for i, t in enumerate(training) if i % 3][: s.get("warm_tasks")]
    rl = [t for i, t in enumerate(training) if i % 3 == 0][: s["rl_tasks"]]
    write_jsonl(run.path("warm_tasks.jsonl"), warm)
    write_jsonl(run.path("train_tasks.jsonl"), rl)
    used = {id(t) for t in warm + rl}
    write_jsonl(run.path("valid_tasks.jsonl"),
                tasks("valid") if kind == "backend" else [t for t in training if id(t) not in used])
    write_jsonl(run.path("test_tasks.jsonl"), tasks("test"))


def sampling(s):
    """How replies are sampled: in the rollouts, for policy.py's candidates and for the judge's."""
    return dict(max_new_tokens=s["max_new_tokens"], temperature=s["temperature"])


def shared_steps(run, s, critics, kind="backend"):
    """The warm start, the offline data, and the critics: what every agent starts from."""
    split_tasks(run, s, kind)
    run.stage("warm start data", "-m", "harness.warmstart", run.path("warm_tasks.jsonl"), "--samples",
              str(s["warm_samples"]), "--max-turns", str(s["max_turns"]), "--out", run.path("warmstart.traj.jsonl"),
              done_when=run.path("warmstart.traj.jsonl"))
    run.stage("warm start", "-m", "harness.baselines", run.path("warmstart.traj.jsonl"), "--method", "sft",
              *differing("harness.baselines", model=s["model"], lr=s["warm_lr"],
                         batch_size=s["warm_batch_size"], fast=True), "--out", run.path("warm"),
              done_when=run.path("warm"))
    run.stage("offline rollouts", "rollout.py", run.path("train_tasks.jsonl"), "--agent", run.path("warm"),
              *differing("rollout.py", samples=s["samples"], max_turns=s["max_turns"], **sampling(s),
                         batch_size=s["batch_size"], fast=True),
              "--out", run.path("train.traj.jsonl"), done_when=run.path("train.scored.jsonl"))
    run.stage("offline scoring", "evaluate.py", run.path("train.traj.jsonl"), "--out", run.path("train.scored.jsonl"),
              "--summary-json", run.path("train.summary.json"), done_when=run.path("train.scored.jsonl"))
    for critic in critics:
        train_critic(run, s, critic, run.path(critic), CRITICS[critic])


def train_critic(run, s, name, folder, flags=()):
    """critic.py on the run's offline data, from the starting policy, half of the paired tasks held out. With
    `scripted_samples`, also on that many fresh scripted dialogues of each warm-start task, scored (--train-also)."""
    if s.get("scripted_samples"):  # seed 1: not the dialogues the warm start learned from (seed 0)
        run.stage("scripted dialogues", "-m", "harness.warmstart", run.path("warm_tasks.jsonl"), "--samples",
                  str(s["scripted_samples"]), "--max-turns", str(s["max_turns"]), "--seed", "1", "--out",
                  run.path("scripted.traj.jsonl"), done_when=run.path("scripted.traj.jsonl"))
        run.stage("scripted scoring", "evaluate.py", run.path("scripted.traj.jsonl"), "--out",
                  run.path("scripted.scored.jsonl"), done_when=run.path("scripted.scored.jsonl"))
        flags = [*flags, "--train-also", run.path("scripted.scored.jsonl")]
    run.stage(name, "critic.py", run.path("train.scored.jsonl"), "--model", run.path("warm"), "--out", folder,
              *differing("critic.py", head=s["critic_head"], beta=s["critic_beta"], epochs=s["critic_epochs"],
                         lr=s["critic_lr"], trajectory_score=s["trajectory_score"], max_length=s["critic_max_length"],
                         pairing=s["critic_pairing"], page_facts=s.get("page_facts", False), fast=True),
              *flags, done_when=folder)


def train_agent(run, s, agent, folder, fraction, critic=None, sampled=None):
    """One trained agent from `run`'s starting policy: a baseline (baselines.py), or SWEET-RL (policy.py) with
    `critic` (a folder, or 'random') ranking the candidates, sampled here or taken from `sampled`."""
    common = dict(data_fraction=fraction, lr=s["policy_lr"], beta=s["beta"], nll_coef=s["nll_coef"],
                  lr_schedule=s["lr_schedule"])
    if agent in BASELINES:
        run.stage(agent, "-m", "harness.baselines", run.path("train.scored.jsonl"), "--method", agent, "--model",
                  run.path("warm"), *differing("harness.baselines", fast=True, **common), "--out", folder,
                  done_when=folder)
        return
    run.stage(agent, "policy.py", run.path("train.scored.jsonl"), "--critic", critic, "--model", run.path("warm"),
              *(["--sampled", sampled] if sampled else []),
              *differing("policy.py", candidates=s["candidates"], pairs_per_turn=s["pairs_per_turn"], **sampling(s),
                         sample_batch_size=s["batch_size"], fast=True, **common), "--out", folder, done_when=folder)


def play(run, s, agent, policy, tasks, samples, name):
    """`policy` on the held-out `tasks`, scored: name.scored.jsonl and name.summary.json."""
    run.stage(f"{name} rollouts", "rollout.py", tasks, "--agent", policy,
              *differing("rollout.py", samples=samples, max_turns=s["max_turns"], **sampling(s),
                         batch_size=s["batch_size"], fast=True), "--out", run.path(f"{name}.traj.jsonl"),
              done_when=run.path(f"{name}.summary.json"))
    run.stage(f"{name} scoring", "evaluate.py", run.path(f"{name}.traj.jsonl"), "--out",
              run.path(f"{name}.scored.jsonl"), "--summary-json", run.path(f"{name}.summary.json"),
              done_when=run.path(f"{name}.summary.json"))


# ---------------------------------------------------------------- the numbers of the tables

def outcomes(path):
    """{(task_id, sample_idx): success} of a scored file."""
    return {(t["task_id"], t["sample_idx"]): float(t["success"]) for t in load_trajectories(path)}


def paired_difference(mine, theirs):
    """(mean success difference, 95% CI) over the dialogues both agents played, tasks resampled."""
    by_task = {}
    for (task_id, k), success in mine.items():
        if (task_id, k) in theirs:
            by_task.setdefault(task_id, []).append(success - theirs[task_id, k])
    values = [v for group in by_task.values() for v in group]
    return [sum(values) / len(values), *bootstrap_mean_ci(by_task)]


def agents_table(run, agents, tasks_file, versus):
    """results.json's agent numbers: success and tests passed per agent, by families, and each agent's paired
    difference from `versus` (the starting policy in the demo, SWEET-RL in the experiment)."""
    train_families = {t["family"] for t in load_tasks(run.path("warm_tasks.jsonl"))}
    tasks = {t["task_id"]: t for t in load_tasks(tasks_file)}
    seen = {task_id for task_id, t in tasks.items() if t["family"] in train_families}
    played = {agent: outcomes(path) for agent, path in agents.items()}

    def rate(agent, task_ids):
        kept = [success for (task_id, _), success in played[agent].items() if task_id in task_ids]
        return sum(kept) / max(1, len(kept))
    return {"test_tasks": {"all": len(tasks), "trained_families": len(seen),
                           "test_only_families": len(tasks) - len(seen)},
            "test_dialogues": {a: len(played[a]) for a in agents},
            "success_rate": {a: rate(a, set(tasks)) for a in agents},
            "success_rate_trained_families": {a: rate(a, seen) for a in agents},
            "success_rate_test_only_families": {a: rate(a, set(tasks) - seen) for a in agents},
            "tests_passed": {a: json.load(open(path.replace(".scored.jsonl", ".summary.json")))["mean_tests_passed_pct"]
                             / 100 for a, path in agents.items()},
            f"vs_{versus}": {a: paired_difference(played[a], played[versus]) for a in agents if a != versus},
            "asking": {a: asking(path) for a, path in agents.items()}}


def asking(path):
    """How an agent asked in a scored file: its distinct questions (a question: an agent turn the human
    answered), the share of questions that drew a fact not told before, mean agent turns, and the share of
    dialogues that drew every hidden fact."""
    questions, drew, turns, everything = [], 0, [], 0
    trajectories = load_trajectories(path)
    for t in trajectories:
        dialogue, told = t["dialogue_history"], []
        for i, turn in enumerate(dialogue[:-1]):
            if turn["role"] == "assistant":
                questions.append(turn["content"].strip())
                now = facts_told(t["task"], dialogue[:i + 2])
                drew, told = drew + (len(now) > len(told)), now
        turns.append(sum(turn["role"] == "assistant" for turn in dialogue))
        everything += len(told) == len(hidden_facts(t["task"]))
    return {"distinct_questions": len(set(questions)), "questions": len(questions),
            "new_fact_share": drew / max(1, len(questions)), "mean_turns": sum(turns) / len(turns),
            "every_fact_told": everything / len(trajectories)}


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


def critics_table(run, critics):
    """results.json's critic numbers: each critic's held-out pair accuracy, the gain from c on the same pairs
    (tasks resampled), and the pairs by kind."""
    results, right = {"critic": {}}, {}
    metrics = {critic: json.load(open(run.path(critic, "metrics.json"))) for critic in critics}
    for critic, m in metrics.items():
        results["critic"][critic] = {"pair_accuracy": m["after"]["pair_accuracy"],
                                     "ci95": m["after"]["pair_accuracy_ci95"], "pairs": m["eval_pairs"],
                                     "tasks": m["eval_tasks"]}
        right[critic] = pair_outcomes(m["after"]["margins"])
    if "critic_no_solution" not in critics:  # the demo trains the critic with c only
        return results
    with_c, without_c = metrics["critic_with_c"]["after"], metrics["critic_no_solution"]["after"]
    if (with_c["pair_task_ids"], with_c["pair_samples"]) != (without_c["pair_task_ids"], without_c["pair_samples"]):
        raise SystemExit("the two critics held out different pairs: were they trained with the same --seed?")
    gain = {}
    for task_id, a, b in zip(with_c["pair_task_ids"], right["critic_with_c"], right["critic_no_solution"]):
        gain.setdefault(task_id, []).append(a - b)
    results["critic_gain_ci95"] = list(bootstrap_mean_ci(gain))
    dialogues = {(t["task_id"], t["sample_idx"]): t for t in load_trajectories(run.path("train.scored.jsonl"))}
    kinds = {kind: {"pairs": 0, "critic_with_c": 0.0, "critic_no_solution": 0.0} for kind in PAIR_KINDS}
    for i, (task_id, (chosen, rejected)) in enumerate(zip(with_c["pair_task_ids"], with_c["pair_samples"])):
        kind = kinds[pair_kind(dialogues[task_id, chosen], dialogues[task_id, rejected])]
        kind["pairs"] += 1
        for critic in ("critic_with_c", "critic_no_solution"):
            kind[critic] += right[critic][i]
    results["critic_by_pair_kind"] = kinds
    return results


def pct(fraction):
    return f"{100 * fraction:.1f}"


def points(difference):
    """[difference, low, high] as fractions -> '+x.x [+l.l, +h.h]' in points."""
    return "{:+.1f} [{:+.1f}, {:+.1f}]".format(*(100 * v for v in difference))


def table(r, versus):
    """The closing table of a run, as Markdown."""
    tasks = r["test_tasks"]
    lines = [f"held-out test tasks: {tasks['all']} ({tasks['trained_families']} of trained families, "
             f"{tasks['test_only_families']} of test-only families)", "",
             f"| agent | dialogues | % tests passed | success % | trained families | test-only families | "
             f"minus {NAMES[versus]}, points (95% CI) |", "|---|---|---|---|---|---|---|"]
    for a in r["success_rate"]:
        difference = "-" if a == versus else points(r[f"vs_{versus}"][a])
        lines.append(f"| {NAMES[a]} | {r['test_dialogues'][a]} | {pct(r['tests_passed'][a])} | "
                     f"{pct(r['success_rate'][a])} | {pct(r['success_rate_trained_families'][a])} | "
                     f"{pct(r['success_rate_test_only_families'][a])} | {difference} |")
    lines.append("\n(differences: the same tasks and sample indices for both agents, bootstrap over tasks; the "
                 "scripts write the reference code once told every fact, so their success is their asking alone)")
    lines += ["", "| agent | every fact told % | questions | distinct questions | questions that drew a new fact % "
                  "| mean agent turns |", "|---|---|---|---|---|---|"]
    for a, k in r["asking"].items():
        lines.append(f"| {NAMES[a]} | {pct(k['every_fact_told'])} | {k['questions']} | {k['distinct_questions']} | "
                     f"{pct(k['new_fact_share'])} | {k['mean_turns']:.2f} |")
    if "critic" in r:
        names = {"critic_with_c": "with the reference solution c", "critic_no_solution": "without c (ablation)",
                 "critic_no_normalize": "without normalization (ablation)",
                 "critic_value_head": "a value head (Table 3's regression head)"}
        lines += ["", "| critic (held-out tasks) | pair accuracy | 95% CI | pairs | tasks |", "|---|---|---|---|---|"]
        for critic, c in r["critic"].items():
            lines.append(f"| {names[critic]} | {c['pair_accuracy']:.3f} | [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] | "
                         f"{c['pairs']} | {c['tasks']} |")
        if "critic_gain_ci95" in r:
            gain = r["critic"]["critic_with_c"]["pair_accuracy"] - r["critic"]["critic_no_solution"]["pair_accuracy"]
            low, high = r["critic_gain_ci95"]
            lines.append(f"\nwith c - without c: {gain:+.3f} pair accuracy, 95% CI [{low:+.3f}, {high:+.3f}] "
                         "(the same held-out pairs, bootstrap over tasks)")
            lines += ["", "| held-out pairs: what sets the two dialogues apart | pairs | right with c | right without c |",
                      "|---|---|---|---|"]
            for kind, k in r["critic_by_pair_kind"].items():
                lines.append(f"| {PAIR_KINDS[kind]} | {k['pairs']} | {k['critic_with_c']:g} | "
                             f"{k['critic_no_solution']:g} |")
    if "judge" in r:
        j = r["judge"]
        lines += ["", f"critic as judge: {j['states']} held-out turn states whose final answers the tests tell apart "
                      f"({j['candidates']} answers)",
                  "| critic | % tests passed, critic's pick | random pick | difference, points (95% CI) | tasks | "
                  "rank correlation |", "|---|---|---|---|---|---|"]
        for critic in ("critic_with_c", "critic_no_solution"):
            q = j[critic]
            correlation = f"{q['rank_correlation']:.3f}" if q["rank_correlation"] is not None else "-"
            lines.append(f"| {critic} | {pct(q['critic_pick'])} | {pct(q['random_pick'])} | "
                         f"{points([q['difference'], *q['difference_ci95']])} | {q['tasks']} | {correlation} |")
    return "\n".join(lines + ["", minutes(r["stage_seconds"])])


def minutes(seconds):
    """The line of a run's time: in all, then stage by stage."""
    return (f"minutes: {sum(seconds.values()) / 60:.1f} ("
            + ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items()) + ")")


def finish(run, results, versus, label, examples=""):
    results["stage_seconds"] = run.seconds
    with open(run.path("results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = table(results, versus)
    with open(run.path("results.md"), "w") as f:
        f.write(text + "\n\n" + examples + "\n")
    print(f"\n{label} finished; everything is in {run.folder}/\n\n{text}")


# ---------------------------------------------------------------- the three runs

def demo(run, s):
    shared_steps(run, s, ["critic_with_c"])
    train_agent(run, s, "sweet", run.path("policy_sweet"), s["demo_fraction"], critic=run.path("critic_with_c"))
    agents = {**SCRIPTS, "zero-shot": run.path("warm"), "sweet": run.path("policy_sweet")}
    for agent, policy in agents.items():
        play(run, s, agent, policy, run.path("test_tasks.jsonl"), s["test_samples"], f"test_{agent}")
    results = agents_table(run, {a: run.path(f"test_{a}.scored.jsonl") for a in agents}, run.path("test_tasks.jsonl"),
                           "zero-shot")
    results.update(critics_table(run, ["critic_with_c"]), settings=s)
    finish(run, results, "zero-shot", "demo", dialogues(run, ["zero-shot", "sweet"]))


def dialogues(run, agents, tasks=6, chars=300):
    """A few held-out dialogues of each agent, as Markdown: the first sample of every fifth test task."""
    chosen = [t["task_id"] for t in load_tasks(run.path("test_tasks.jsonl"))][::5][:tasks]
    lines = ["## Held-out dialogues (sample 0 of every fifth test task)"]
    for agent in agents:
        played = {t["task_id"]: t for t in load_trajectories(run.path(f"test_{agent}.scored.jsonl"))
                  if t["sample_idx"] == 0}
        lines += ["", f"### {NAMES[agent]}"]
        for task_id in chosen:
            t = played[task_id]
            outcome = f"success {t['success']}" if task_kind(t["task"]) == "backend" else f"score {t['reward']:.4f}"
            family = f" ({t['task']['family']})" if t["task"].get("family") else ""
            lines += ["", f"**{task_id}**{family}, {outcome}:"]
            lines += [f"- {'agent' if turn['role'] == 'assistant' else 'human'}: "
                      + " ".join(turn["content"].split())[:chars] for turn in t["dialogue_history"]]
    return "\n".join(lines)


def experiment(run, s):
    """Every trained agent on the same `experiment_fraction` of the offline data (SWEET-RL and its controls: of
    the trajectories; the baselines: of the tasks, whole, as Multi-Turn DPO pairs within one). At the demo's
    fraction, the demo's SWEET-RL is the experiment's, and the experiment runs in runs/demo/experiment;
    at another, in runs/demo/experiment_<fraction>, with a SWEET-RL of its own."""
    demo(run, s)
    shared_steps(run, s, list(CRITICS))
    data_fraction = s["experiment_fraction"]
    exp = Run(run.path("experiment" if data_fraction == s["demo_fraction"] else f"experiment_{data_fraction}"))
    folders = {agent: exp.path(f"policy_{agent}") for agent in [*SWEET_VARIANTS, *BASELINES]}
    if data_fraction == s["demo_fraction"]:
        folders["sweet"] = run.path("policy_sweet")
    for agent, critic in SWEET_VARIANTS.items():
        sampled = None if agent == "sweet" else os.path.join(folders["sweet"], "candidates.jsonl")
        critic_dir = critic if critic == "random" else run.path(critic)
        train_agent(run, s, agent, folders[agent], data_fraction, critic=critic_dir, sampled=sampled)
    for agent in BASELINES:
        train_agent(run, s, agent, folders[agent], data_fraction)
    agents = {a: run.path(f"test_{a}.scored.jsonl") for a in [*SCRIPTS, "zero-shot"]}
    for agent, folder in folders.items():
        tested = run if folder == run.path("policy_sweet") else exp
        play(tested, s, agent, folder, run.path("test_tasks.jsonl"), s["test_samples"], f"test_{agent}")
        agents[agent] = tested.path(f"test_{agent}.scored.jsonl")
    exp.stage("judge", "-m", "harness.judge", run.path("train.scored.jsonl"), "--model", run.path("warm"),
              "--critic", run.path("critic_with_c"), "--critic", run.path("critic_no_solution"),
              "--out", exp.path("judge"), *differing("harness.judge", candidates=s["judge_candidates"], **sampling(s),
                                                     sample_batch_size=s["batch_size"]),
              done_when=exp.path("judge", "judge.json"))
    results = agents_table(run, agents, run.path("test_tasks.jsonl"), "sweet")
    results.update(critics_table(run, list(CRITICS)), judge=json.load(open(exp.path("judge", "judge.json"))),
                   settings=s)
    exp.seconds = {**run.seconds, **exp.seconds}
    finish(exp, results, "sweet", "experiment")


# The settings tried on the validation tasks, one at a time beside SETTINGS' own: the round of 2026-11-25 on
# this benchmark (the candidates' temperature, λ, the learning rate). The first round, on the earlier
# benchmark, chose β, the trajectory score and the critic's epochs: docs/RESULTS.md.
VALIDATION = {"temperature": [1.0], "nll_coef": [0.01], "policy_lr": [2e-5]}
CRITIC_SETTINGS = ("trajectory_score", "critic_epochs")  # these change the critic that ranks the candidates
SAMPLED_WITH = ("demo_fraction", "candidates", "temperature", "max_new_tokens")  # these change the candidates


def validate(run, s):
    """SWEET-RL with SETTINGS, and with each setting of VALIDATION changed alone, on the validation tasks
    (easy training tasks that neither the warm start nor the offline data saw): the same offline data, the
    same candidates unless the setting changes how they are sampled (SAMPLED_WITH), the paired differences
    from SETTINGS' own."""
    shared_steps(run, s, ["critic_with_c"])
    val = Run(run.path("validation"))
    variants = {"settings": (s, run.path("critic_with_c"))}
    for setting, values in VALIDATION.items():
        for value in values:
            name = f"{setting}={value}"
            changed = dict(s, **{setting: value})
            critic = run.path("critic_with_c")
            if setting in CRITIC_SETTINGS:
                critic = val.path(f"critic_{name}")
                train_critic(run, changed, f"critic {name}", critic)
            variants[name] = (changed, critic)
    agents = {"zero-shot": run.path("warm")}
    for name, (changed, critic) in variants.items():
        same_candidates = name != "settings" and all(changed[k] == s[k] for k in SAMPLED_WITH)
        sampled = val.path("policy_settings", "candidates.jsonl") if same_candidates else None
        train_agent(run, changed, name, val.path(f"policy_{name}"), changed["demo_fraction"], critic=critic,
                    sampled=sampled)
        agents[name] = val.path(f"policy_{name}")
    for name, policy in agents.items():
        play(val, s, name, policy, run.path("valid_tasks.jsonl"), s["validation_samples"], f"valid_{name}")
    played = {name: outcomes(val.path(f"valid_{name}.scored.jsonl")) for name in agents}
    lines = ["| SWEET-RL with | validation success % | minus SETTINGS', points (95% CI) |", "|---|---|---|"]
    for name, result in played.items():
        difference = paired_difference(result, played["settings"])
        lines.append(f"| {name} | {pct(sum(result.values()) / len(result))} | "
                     + ("-" if name == "settings" else points(difference))
                     + " |")
    text = "\n".join(lines)
    with open(val.path("results.md"), "w") as f:
        f.write(text + "\n")
    with open(val.path("results.json"), "w") as f:
        json.dump({"success_rate": {n: sum(r.values()) / len(r) for n, r in played.items()},
                   "dialogues": {n: len(r) for n, r in played.items()},
                   "vs_settings": {n: paired_difference(r, played["settings"]) for n, r in played.items()},
                   "stage_seconds": val.seconds, "settings": s}, f, indent=1)
    print(f"\nvalidation finished; everything is in {val.folder}/\n\n{text}")


# The frontend scripts (colbench/scripted.py), played beside the agents: the kind's default page at once, fixed
# questions, a default draft fixed as the human says, and questions about what the request hints at. The gap
# between the hint reader and the fixed scripts is what reading the task is worth here.
FRONTEND_SCRIPTS = {"script-default-at-once": "scripted:default-at-once", "script-fixed-asker": "scripted:fixed-asker",
                    "script-draft-then-fix": "scripted:draft-then-fix", "script-hint-reader": "scripted:hint-reader"}
NAMES.update({"script-default-at-once": "script: the kind's default page at once",
              "script-fixed-asker": "script: asks about the subjects in one fixed order, then writes",
              "script-draft-then-fix": "script: shows the default page, then fixes what the human names",
              "script-hint-reader": "script: asks about the subjects the request hints at, then writes",
              "sweet-no-solution": "SWEET-RL, critic without c"})


def page_asking(trajectories):
    """How an agent came to its pages: the shares of dialogues that asked first (a first reply with no page,
    and the dialogue goes on), that showed a page first (a first reply with a page, and the dialogue goes on),
    and either (collaborated before its last turn); the pages' mean score after asking and written at once
    ([mean, dialogues]; None when none), the mean number of subjects the human told before the end, and the
    share of dialogues in which the human told every departure of the task before the final page."""
    groups = {"after_asking": [], "at_once": []}
    told, showed, departures_told = [], 0, 0
    for t in trajectories:
        replies = [turn["content"] for turn in t["dialogue_history"] if turn["role"] == "assistant"]
        asked = len(replies) > 1 and html_page(replies[0]) is None
        showed += len(replies) > 1 and html_page(replies[0]) is not None
        groups["after_asking" if asked else "at_once"].append(t["reward"])
        heard = topics_told(t["task"], t["dialogue_history"])
        told.append(len(heard))
        departures_told += set(departures(t["task"])) <= set(heard)
    return {"ask_first_share": len(groups["after_asking"]) / len(trajectories),
            "show_first_share": showed / len(trajectories),
            "collaborate_first_share": (len(groups["after_asking"]) + showed) / len(trajectories),
            **{name: [sum(v) / len(v), len(v)] if v else None for name, v in groups.items()},
            "subjects_told": sum(told) / len(told), "departures_told_share": departures_told / len(trajectories)}


def length_pair_accuracy(metrics, scored_path):
    """The share of the critic's held-out pairs (metrics.json's tasks and sample indices) whose longer final
    answer is the better one, ties half: what a reader of the answer's length alone would get right."""
    answers = {critic_stage.trajectory_id(t): len(t["answer"]) for t in load_trajectories(scored_path)}
    margins = [answers[task, chosen] - answers[task, rejected]
               for task, (chosen, rejected) in zip(metrics["pair_task_ids"], metrics["pair_samples"])]
    return sum(pair_outcomes(margins)) / max(1, len(margins))


def replies_told(path, scored_path, replies_of):
    """Each row of a policy.py output (`path`: pairs.jsonl or candidates.jsonl) with what its replies
    (`replies_of(row)`) can still tell by the embedded human's rules (colbench/frontend.py `can_still_tell`), each
    read under the turn state the offline dialogues of `scored_path` give the row."""
    states = {policy_stage.state_key(state): state for state in turn_states(load_trajectories(scored_path))}
    for _, row in read_jsonl(path, allow_empty=True):
        trajectory, turn, history = states[row["task_id"], row["sample_idx"], row["turn"]]
        last_turn = turn == turn_budget(trajectory) - 1
        yield row, [can_still_tell(trajectory["task"], history, reply, last_turn) for reply in replies_of(row)]


def ranked_pairs(policy_folder, scored_path):
    """SWEET-RL's pairs by whether the critic chose the reply that can still tell more (replies_told): right, wrong,
    or alike (both can, both cannot, or the order is not settled)."""
    counts = {"right": 0, "wrong": 0, "alike": 0}
    for _, (chosen, rejected) in replies_told(os.path.join(policy_folder, "pairs.jsonl"), scored_path,
                                              lambda row: [row[side][0]["content"] for side in ("chosen", "rejected")]):
        counts["alike" if None in (chosen, rejected) or chosen == rejected else
               "right" if chosen > rejected else "wrong"] += 1
    return counts


def rules_order(policy_folder, scored_path):
    """The critic's turn order by the human's rules: of each turn state's candidate pairs (candidates.jsonl) that
    the rules settle (replies_told), the share that the critic's scores order their way (ties half), and their count."""
    outcomes = []
    for row, tells in replies_told(os.path.join(policy_folder, "candidates.jsonl"), scored_path,
                                   lambda row: row["candidates"]):
        for i, j in ((i, j) for i in range(len(tells)) for j in range(i + 1, len(tells))):
            if None not in (tells[i], tells[j]) and tells[i] != tells[j]:
                outcomes += pair_outcomes([(row["scores"][i] - row["scores"][j]) * (tells[i] - tells[j])])
    return [sum(outcomes) / max(1, len(outcomes)), len(outcomes)]


def frontend_run(run, s):
    """The chain on frontend tasks: the warm start on scripted dialogues of training tasks, offline data on
    other training tasks, the critic with c (with FRONTEND's page_facts, the page's departures), SWEET-RL;
    then both agents and the scripts on the test tasks: the mean image score, each one's paired difference
    from the start and win rate, how often each asks before writing, what its pages score after asking and at
    once, and how often the human told every departure. The stages keep their screenshots in the run's
    screenshots/ folder, each for the next (colbench/render.py): a reference page is rendered once."""
    os.environ.setdefault("COLBENCH_SCREENSHOTS", run.path("screenshots"))
    shared_steps(run, s, ["critic_with_c"], kind="frontend")
    train_agent(run, s, "sweet", run.path("policy_sweet"), s["demo_fraction"], critic=run.path("critic_with_c"))
    agents = {**FRONTEND_SCRIPTS, "zero-shot": run.path("warm"), "sweet": run.path("policy_sweet")}
    results = frontend_results(run, s, agents)
    with open(run.path("results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = frontend_table(results) + "\n\n" + dialogues(run, ["zero-shot", "sweet"], chars=600)
    with open(run.path("results.md"), "w") as f:
        f.write(text + "\n")
    print(f"\nfrontend run finished; everything is in {run.folder}/ (report.html: pages as screenshots)\n\n{text}")


def frontend_experiment(run, s):
    """The frontend run, then SWEET-RL with each of FRONTEND_VARIANTS' critics ranking the same candidates, in
    runs/frontend/experiment: each one's paired difference from the start and from SWEET-RL, on the same test tasks."""
    frontend_run(run, s)
    exp, results = Run(run.path("experiment")), json.load(open(run.path("results.json")))
    theirs = {agent: {critic_stage.trajectory_id(t): t["reward"] for t in load_trajectories(
        run.path(f"test_{agent}.scored.jsonl"))} for agent in ("zero-shot", "sweet")}
    results["variants"], lines = {}, []
    def drawn(settings):  # what policy.py's candidates depend on: the same draw samples the same replies
        return settings["candidates"], *sampling(settings).values()
    sampled = {drawn(s): run.path("policy_sweet", "candidates.jsonl")}
    for agent, (critic, settings, flags) in FRONTEND_VARIANTS.items():
        its = dict(s, **settings)  # FRONTEND's settings with the variant's over them
        train_critic(run, its, critic, run.path(critic), flags)
        train_agent(run, its, agent, exp.path(f"policy_{agent}"), s["demo_fraction"], critic=run.path(critic),
                    sampled=sampled.get(drawn(its)))
        sampled.setdefault(drawn(its), exp.path(f"policy_{agent}", "candidates.jsonl"))
        play(exp, s, agent, exp.path(f"policy_{agent}"), run.path("test_tasks.jsonl"), s["test_samples"],
             f"test_{agent}")
        played = load_trajectories(exp.path(f"test_{agent}.scored.jsonl"))
        mine, metrics = {critic_stage.trajectory_id(t): t["reward"] for t in played}, json.load(
            open(run.path(critic, "metrics.json")))
        variant = results["variants"][agent] = {
            "settings": settings, "mean_score": sum(mine.values()) / len(mine), "dialogues": len(mine),
            "minus_start": paired_difference(mine, theirs["zero-shot"]),
            "minus_sweet": paired_difference(mine, theirs["sweet"]),
            "departures_told_share": page_asking(played)["departures_told_share"],
            "critic_pair_accuracy": [metrics["after"]["pair_accuracy"], *metrics["after"]["pair_accuracy_ci95"],
                                     metrics["eval_pairs"]],
            "rules_order": rules_order(exp.path(f"policy_{agent}"), run.path("train.scored.jsonl"))}
        lines.append(f"{NAMES[agent]}: mean image score {variant['mean_score']:.4f} ({variant['dialogues']} "
                     "dialogues), minus the start {:+.4f} [{:+.4f}, {:+.4f}], ".format(*variant["minus_start"])
                     + "minus SWEET-RL {:+.4f} [{:+.4f}, {:+.4f}]; ".format(*variant["minus_sweet"])
                     + f"every departure told {pct(variant['departures_told_share'])}%; its critic: held-out pair "
                     "accuracy {:.3f} [{:.3f}, {:.3f}] on {} pairs, ".format(*variant["critic_pair_accuracy"])
                     + "turn order by the rules {:.3f} of {} candidate pairs".format(*variant["rules_order"]))
    with open(exp.path("results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(exp.path("results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nfrontend experiment finished; everything is in {exp.folder}/\n\n" + "\n".join(lines))


def frontend_results(run, s, agents):
    """results.json of the frontend run: every agent played on the test tasks, scored, and compared."""
    for agent, policy in agents.items():  # a script plays every sample alike: one each
        samples = 1 if agent in FRONTEND_SCRIPTS else s["test_samples"]
        play(run, s, agent, policy, run.path("test_tasks.jsonl"), samples, f"test_{agent}")
    run.stage("report", "-m", "harness.report", run.path("test_sweet.scored.jsonl"), "--policy",
              run.path("policy_sweet"), "--max-dialogues", "6", "--screenshots", "2", "--out", run.path("report.html"),
              done_when=run.path("report.html"))
    played = {agent: load_trajectories(run.path(f"test_{agent}.scored.jsonl")) for agent in agents}
    scores = {agent: {critic_stage.trajectory_id(t): t["reward"] for t in played[agent]} for agent in agents}

    rewards = {agent: {} for agent in agents}  # {agent: {task: [reward, ...]}}
    for agent, by_sample in scores.items():
        for (task_id, _), reward in by_sample.items():
            rewards[agent].setdefault(task_id, []).append(reward)

    def win_rate(agent):  # by task: a win (1), tie (1/2) or loss (0) against the start, by mean score
        by_task = {t: [o] for t, o in task_outcomes(rewards[agent], rewards["zero-shot"]).items()}
        return [sum(w for w, in by_task.values()) / len(by_task), *bootstrap_mean_ci(by_task)]
    critic = json.load(open(run.path("critic_with_c", "metrics.json")))
    others = [a for a in agents if a != "zero-shot"]
    asked = {agent: page_asking(played[agent]) for agent in agents}
    results = {"image_score": sorted({t.get("image_score") for t in played["sweet"]}),
               "test_tasks": len(load_tasks(run.path("test_tasks.jsonl"))),
               "test_dialogues": {a: len(v) for a, v in scores.items()},
               "mean_score": {a: sum(v.values()) / len(v) for a, v in scores.items()},
               "vs_zero-shot": {a: paired_difference(scores[a], scores["zero-shot"]) for a in others},
               "win_rate_vs_zero-shot": {a: win_rate(a) for a in others},
               "scripts_gap": paired_difference(scores["script-hint-reader"], scores["script-default-at-once"]),
               **{key: {a: asked[a][key] for a in agents}
                  for key in ("ask_first_share", "show_first_share", "collaborate_first_share", "after_asking",
                              "at_once", "subjects_told", "departures_told_share")},
               "critic_with_c": {"pair_accuracy": critic["after"]["pair_accuracy"],
                                 "ci95": critic["after"]["pair_accuracy_ci95"], "pairs": critic["eval_pairs"],
                                 "tasks": critic["eval_tasks"], "by_answer_length": length_pair_accuracy(
                                     critic["after"], run.path("train.scored.jsonl"))},
               "sweet_pairs": ranked_pairs(run.path("policy_sweet"), run.path("train.scored.jsonl")),
               "rules_order": rules_order(run.path("policy_sweet"), run.path("train.scored.jsonl")),
               "stage_seconds": run.seconds, "settings": s}
    return results


def frontend_table(r):
    """The closing tables of the frontend run, as Markdown."""
    def score(group):
        return "-" if group is None else f"{group[0]:.4f} ({group[1]})"
    lines = [f"held-out frontend test tasks: {r['test_tasks']}; image score: {', '.join(r['image_score'])}", "",
             "| agent | dialogues | mean image score | minus the starting policy (95% CI) | win rate over it % "
             "(95% CI) | asks first % | shows a page first % | after asking (dialogues) | at once (dialogues) | "
             "subjects told | every departure told % |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in r["mean_score"]:
        versus = "-" if a == "zero-shot" else "{:+.4f} [{:+.4f}, {:+.4f}]".format(*r["vs_zero-shot"][a])
        wins = "-" if a == "zero-shot" else "{} [{}, {}]".format(*map(pct, r["win_rate_vs_zero-shot"][a]))
        lines.append(f"| {NAMES[a]} | {r['test_dialogues'][a]} | {r['mean_score'][a]:.4f} | {versus} | {wins} | "
                     f"{pct(r['ask_first_share'][a])} | {pct(r['show_first_share'][a])} | "
                     f"{score(r['after_asking'][a])} | {score(r['at_once'][a])} | "
                     f"{r['subjects_told'][a]:.2f} | {pct(r['departures_told_share'][a])} |")
    gap, c, p = r["scripts_gap"], r["critic_with_c"], r["sweet_pairs"]
    lines += ["", "(differences: the same tasks and sample indices for both agents, bootstrap over tasks; win rate by "
                  "task, ties half. Asks first: the first reply shows no page and the dialogue goes on; shows a page "
                  "first: the first reply shows one and the dialogue goes on. After asking: dialogues that asked "
                  "first; at once: the others)",
              "", "the room, hint-reader script - default-at-once script: {:+.4f} [{:+.4f}, {:+.4f}]".format(*gap),
              f"critic with c: held-out pair accuracy {c['pair_accuracy']:.3f} "
              f"[{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] on {c['pairs']} pairs of {c['tasks']} tasks; the longer "
              f"final page orders {c['by_answer_length']:.3f} of them",
              f"SWEET-RL's pairs, as its critic ranked the candidates: {p['right']} chose the reply that can still "
              f"tell more by the human's rules, {p['wrong']} the one that tells less, {p['alike']} alike or unsettled",
              "the critic's turn order by the human's rules: {:.3f} of {} candidate pairs the rules settle".format(
                  *r["rules_order"]),
              "", minutes(r["stage_seconds"])]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", action="store_true", help="the demo, then the baselines and the controls")
    parser.add_argument("--validate", action="store_true", help="choose the settings on the validation tasks")
    parser.add_argument("--frontend", action="store_true", help="the chain on frontend tasks (runs/frontend)")
    parser.add_argument("--fraction", type=fraction, help="the experiment: the fraction of the offline data every "
                                                          "agent trains on (default: the demo's, its time budget)")
    parser.add_argument("--model", default="embedded",
                        help="the model the warm start fine-tunes: a model folder, hub id, or 'embedded'")
    parser.add_argument("--out", help="run folder (default runs/demo, or runs/frontend; another --model: "
                                      "runs/demo-NAME, NAME its folder's name)")
    args = parser.parse_args()
    folder = "frontend" if args.frontend else "demo"
    if args.model != "embedded":  # a run folder of its own: a stage whose output exists is skipped
        folder += "-" + os.path.basename(os.path.normpath(args.model))
    run = Run(args.out or os.path.join("runs", folder))
    s = dict(FRONTEND if args.frontend else SETTINGS, model=args.model)  # the model: results.json's settings say it
    print(f"settings: {json.dumps(s)} -> {run.folder}", flush=True)
    if args.frontend:
        (frontend_experiment if args.experiment else frontend_run)(run, s)
    elif args.validate:
        validate(run, s)
    elif args.experiment:
        experiment(run, dict(s, experiment_fraction=args.fraction or s["experiment_fraction"]))
    else:
        demo(run, s)


if __name__ == "__main__":
    main()
