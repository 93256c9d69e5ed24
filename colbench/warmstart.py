"""Scripted dialogues that warm-start the embedded model: the demo's stand-in for instruction tuning.

    python -m colbench.warmstart runs/demo/warm_tasks.jsonl --out runs/demo/warmstart.traj.jsonl
    python policy.py runs/demo/warmstart.traj.jsonl --method sft --out runs/demo/warm   # the starting policy

The paper's starting policy (Llama-3.1-8B-Instruct) already followed ColBench's protocol; the
embedded SmolLM2-135M does not (zero-shot it never used the answer marker and rarely wrote a valid
function). So the demo first fine-tunes it on scripted dialogues of *training* tasks, played with
the embedded human. A departure from the paper, made on purpose imperfect: a policy that always
asked and always copied right would leave SWEET-RL nothing to learn, and give the critic no pairs.
Each dialogue follows one behaviour, drawn with the weights of BEHAVIOURS:

- ask twice, then answer with the reference function (the good habit);
- ask twice, then answer with one of the told numbers miscopied (a slip only c reveals for sure);
- ask once, then answer: the untold details are guessed (the reference's, memorized per task);
- answer at once: every detail guessed.

On new tasks the guesses are wrong, so the warm-started agent fails for reasons a critic can see:
answering before asking, or a number copied wrong. Test-only families never appear here.
"""
import argparse
import random
import re

from colbench.cli import fail, non_negative_int, positive_int
from colbench.data import DataError, load_tasks, write_jsonl
from colbench.env import ANSWER_MARKER, Episode
from colbench.simulators import EmbeddedSimulator

BEHAVIOURS = {"ask twice": 3, "ask twice, miscopy": 1, "ask once": 2, "answer at once": 2}
# Requests for details in general: the embedded human answers each with the next fact not yet told.
QUESTIONS = ["What details do you need me to know?", "Could you tell me the specifics?",
             "Is there any other detail I need?", "Can you tell me more details?"]
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


class Scripted:
    """Stands in for the agent's reply: the text, and the prompt it would have seen."""

    def __init__(self, text, prompt):
        self.text, self.prompt, self.tokens = text, prompt, 0


def miscopy(code, told, rng):
    """`code` with one number that the human told (a number of the told facts) changed, or None."""
    numbers = [m for m in NUMBER.finditer(code) if m.group() in NUMBER.findall(told) and float(m.group()) not in (0, 1)]
    if not numbers:
        return None
    slip = rng.choice(numbers)
    value = slip.group()
    decimals = len(value.split(".")[1]) if "." in value else 0
    wrong = round(float(value) * rng.choice([0.5, 0.8, 1.25, 1.5, 2]), decimals)
    if wrong == float(value):
        wrong = float(value) + 10 ** -decimals
    wrong = f"{wrong:.{decimals}f}"
    return code[:slip.start()] + wrong + code[slip.end():]


def scripted_dialogue(task, sample_idx, behaviour, rng, max_turns=3):
    """One trajectory line (rollout.py's schema, plus `behaviour`) of the scripted agent."""
    episode, human = Episode(task, sample_idx, max_turns), EmbeddedSimulator()
    questions = {"ask twice": 2, "ask twice, miscopy": 2, "ask once": 1, "answer at once": 0}[behaviour]
    for question in rng.sample(QUESTIONS, questions):
        episode.add_agent_turn(Scripted(question, ""))
        episode.add_human_turn(human.reply(task, episode.dialogue))
    code = task["ground_truth"].strip()
    if behaviour == "ask twice, miscopy":
        told = " ".join(turn["content"] for turn in episode.dialogue[1:] if turn["role"] == "user")
        code = miscopy(code, told, rng) or code
    episode.add_agent_turn(Scripted(f"{ANSWER_MARKER}\n{code}", ""))
    return dict(episode.record(), behaviour=behaviour)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", help="training tasks JSONL (backend)")
    parser.add_argument("--out", required=True, help="trajectories JSONL to write")
    parser.add_argument("--samples", type=positive_int, default=1, help="dialogues per task")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for the behaviours, questions and slips")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    names, weights = list(BEHAVIOURS), list(BEHAVIOURS.values())
    try:
        tasks = load_tasks(args.tasks)
    except DataError as e:
        fail(e)
    rows = [scripted_dialogue(task, k, rng.choices(names, weights)[0], rng)
            for task in tasks for k in range(args.samples)]
    write_jsonl(args.out, rows)
    counts = {name: sum(row["behaviour"] == name for row in rows) for name in names}
    print(f"warm start: {len(rows)} scripted dialogues -> {args.out} | {counts}")


if __name__ == "__main__":
    main()
