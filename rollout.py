"""Stage 1 of SWEET-RL: multi-turn dialogues of an agent with a simulated human on ColBench tasks.

    python rollout.py colbench/tasks/backend_train.jsonl       # -> runs/backend_train.traj.jsonl

Each task is played --samples times. The agent (a Hugging Face model, the embedded
SmolLM2-135M-Instruct by default, or an OpenAI-compatible URL) talks with the simulated human
(colbench/simulators.py) for at most --max-turns agent turns, under the protocol of colbench/env.py.
Up to --batch-size dialogues advance together, one batched generate per turn; finished ones drop out
and waiting ones take their place. Each trajectory is written as one line as soon as it ends, with
how it was made (`max_turns`, and `rollout`: the agent, the simulator, the sampling); the same
command again resumes, skipping the (task_id, sample_idx) pairs already written, so a killed run
loses only the dialogues in flight. A resume into a file made another way is refused. `--agent
scripted:fixed` and `scripted:by-subject` (backend), `scripted:page-at-once` and `scripted:ask-then-write`
(frontend) are the scripted agents of colbench/scripted.py.
"""
import argparse
import collections
import json
import random
import time

import torch
from tqdm import tqdm

from colbench.cli import (fail, is_url, non_negative_float, non_negative_int, positive_int,
                          require_server)
from colbench.data import (DataError, JsonlAppender, default_output, finished_keys, load_tasks,
                           read_jsonl)
from colbench.env import Episode, turn_budget
from colbench.models import DTYPES, open_chat
from colbench.scripted import AGENTS, ScriptedAgent
from colbench.simulators import make_simulator

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("tasks", help="tasks JSONL (ColBench schema)")
parser.add_argument("--out",
                    help="trajectories JSONL to write or resume (default runs/<stem>.traj.jsonl)")
parser.add_argument("--agent", default="embedded",
                    help="model folder, hub id, 'embedded', an OpenAI-compatible URL, or "
                         + " / ".join(AGENTS))
parser.add_argument("--simulator", default="embedded",
                    help="'embedded', an OpenAI-compatible URL, or a model")
parser.add_argument("--samples", type=positive_int, default=5,
                    help="trajectories per task (K; official offline file: 3, sweet_rl evaluate_code.py --k 3)")
parser.add_argument("--tier", choices=("easy", "medium", "hard"),
                    help="use only the backend tasks of this tier (official: ColBench's tasks have no tiers)")
parser.add_argument("--limit", type=positive_int,
                    help="use only the first N tasks (of the tier; official test runs: --num_tasks 1000)")
parser.add_argument("--max-turns", type=positive_int, default=3,
                    help="agent turns per dialogue at most (paper and official: 10)")
parser.add_argument("--temperature", type=non_negative_float, default=0.7,
                    help="agent sampling temperature, 0 = greedy (official: 1.0)")
parser.add_argument("--max-new-tokens", type=positive_int, default=64,
                    help="tokens per agent reply at most (official: 1024, sweet_rl sweet_rl/models/vllm_agent.py)")
parser.add_argument("--batch-size", type=positive_int, default=8,
                    help="dialogues live at once, one batched generate (official: 1000 environments at once)")
parser.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="a local agent's precision; auto: bf16 where the hardware computes it "
                         "natively, else fp32")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for sampling")
parser.add_argument("--fast", action="store_true",
                    help="a local agent samples the fast way (colbench/fast_sampling.py): a batch that "
                         "shrinks as replies end; the same distribution, another random stream")


def made_another_way(path, made):
    """What differs between how `made` says a trajectory is made and how the first line of `path`
    was."""
    for _, record in read_jsonl(path, allow_empty=True):
        theirs = dict(record.get("rollout", {}), max_turns=turn_budget(record))
        return [f"{field} {theirs.get(field)!r} there, {value!r} now"
                for field, value in made.items() if theirs.get(field) != value]
    return []


def tasks_and_done(args, out, made):
    """The tasks to play (of --tier, the first --limit) and the (task_id, sample_idx) already in `out`;
    bad input, or an `out` made another way, ends the run with one clear line."""
    try:
        tasks = [t for t in load_tasks(args.tasks) if args.tier in (None, t.get("tier"))]
        tasks = tasks[: args.limit]
        done = finished_keys(out)
        differs = made_another_way(out, dict(made, max_turns=args.max_turns)) if done else []
    except DataError as e:
        fail(e)
    if differs:
        fail(f"{out} holds trajectories made another way ({'; '.join(differs)}): pass another "
             "--out")
    return tasks, done


def main(args):
    out = args.out or default_output(args.tasks, ".traj.jsonl")
    made = {"agent": args.agent, "simulator": args.simulator, "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens}
    print("rollout:", json.dumps(vars(args)), f"-> {out}", flush=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    tasks, done = tasks_and_done(args, out, made)
    # A dead server is reported now, in seconds, not after a local model has loaded.
    for flag, spec in (("--agent", args.agent), ("--simulator", args.simulator)):
        if is_url(spec):
            require_server(flag, spec)
    waiting = collections.deque((task, k) for task in tasks for k in range(args.samples)
                                if (task["task_id"], k) not in done)
    print(f"{len(tasks)} tasks x {args.samples} samples: {len(done)} already in {out}, "
          f"{len(waiting)} to run", flush=True)
    if args.agent in AGENTS:
        try:
            agent = ScriptedAgent(args.agent, tasks, args.max_turns)
        except ValueError as e:  # tasks of the kind it does not play
            fail(e)
    else:
        agent = open_chat(args.agent, dtype=args.dtype, shrinking_batch=args.fast)  # --fast: the shrinking batch
    simulator = make_simulator(args.simulator)

    finished, tokens, start = [], 0, time.time()
    live = []
    bar = tqdm(total=len(waiting), desc="dialogues", unit="dlg")
    with JsonlAppender(out) as writer, bar:
        while waiting or live:
            while waiting and len(live) < args.batch_size:
                live.append(Episode(*waiting.popleft(), max_turns=args.max_turns))
            # One batched agent turn for every live dialogue.
            views = [episode.agent_view() for episode in live]
            replies = agent.chat(views, args.max_new_tokens, args.temperature)
            tokens += sum(reply.tokens for reply in replies)
            still_talking = []
            for episode, reply in zip(live, replies):
                if episode.add_agent_turn(reply):
                    writer.write(dict(episode.record(), rollout=made))
                    finished.append(episode)
                    bar.update(1)
                else:
                    still_talking.append(episode)
            # The human answers every dialogue that goes on.
            asked = [(episode.task, episode.dialogue) for episode in still_talking]
            answers = simulator.respond(asked)
            for episode, answer in zip(still_talking, answers):
                episode.add_human_turn(answer)
            live = still_talking
            bar.set_postfix(tok_per_s=f"{tokens / (time.time() - start):.1f}")

    seconds = time.time() - start
    n = max(len(finished), 1)
    print(f"done: {len(finished)} trajectories -> {out} | mean agent turns "
          f"{sum(e.agent_turns for e in finished) / n:.2f} | answered with the marker "
          f"{sum(e.answered_with_marker for e in finished) / n:.0%} | {tokens} tokens generated, "
          f"{tokens / max(seconds, 1e-9):.1f} tokens/s")


if __name__ == "__main__":
    main(parser.parse_args())
