"""Scripted dialogues that warm-start the embedded model: the demo's stand-in for instruction tuning.

    python -m colbench.warmstart runs/demo/warm_tasks.jsonl --out runs/demo/warmstart.traj.jsonl
    python baselines.py runs/demo/warmstart.traj.jsonl --method sft --out runs/demo/warm   # the starting policy

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

Frontend tasks the same way: ask about the colors and the font, then about the layout, the menu and the
sections (the embedded human answers with the reference page's values), then write a compact page of
what was told (`compact_page`); a slip gets one color wrong; what was not asked is the reference's.
"""
import argparse
import random
import re

from colbench.cli import fail, non_negative_int, positive_int
from colbench.data import DataError, load_tasks, task_kind, write_jsonl
from colbench.env import ANSWER_MARKER, Episode
from colbench.frontend import page_facts
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


# Frontend: first about the look, then about the structure; the human answers each with the reference's values.
PAGE_QUESTIONS = [["What colors and font would you like?", "Which colors and which font should it use?"],
                  ["How should it be laid out, with which menu and sections?",
                   "What layout, menu links and sections do you want?"]]


def compact_page(facts, title):
    """The page the scripted agent writes from a task's `facts` (frontend.page_facts): short, so that a 135M
    model can write one, with the colors, font, layout, menu, sections and title it was told."""
    colors = facts.get("colors", {})
    background, text = colors.get("background", "#ffffff"), colors.get("text", "#222222")
    headings = colors.get("headings", text)
    band = colors.get("header", headings)
    menu = "".join(f"<a href='#'>{link}</a>" for link in facts.get("menu", []))
    sections = "".join(f"<section><h2>{name}</h2><p>{name} at {title}.</p></section>"
                       for name in facts.get("sections", []))
    body = {"sidebar": f"<div style='display:flex'><div class='band' style='width:200px'><h1>{title}</h1>{menu}</div>"
                       f"<main>{sections}</main></div>",
            "hero": f"<nav>{menu}</nav><div class='band'><h1>{title}</h1></div><main>{sections}</main>",
            "cards": f"<nav>{menu}</nav><h1>{title}</h1><main style='display:grid;grid-template-columns:1fr 1fr 1fr'>"
                     f"{sections}</main>",
            "single": f"<nav>{menu}</nav><h1>{title}</h1><main>{sections}</main>"}[facts.get("layout", "single")]
    style = (f"body{{margin:0;background:{background};color:{text};font-family:{facts.get('font', 'sans-serif')}}}"
             f"h2{{color:{headings}}}a{{color:{headings};margin:8px}}.band{{background:{band};padding:24px}}"
             "main{padding:20px}")
    return f"<html><head><style>{style}</style></head><body>{body}<footer class='band'>{title}</footer></body></html>"


def scripted_dialogue(task, sample_idx, behaviour, rng, max_turns=3):
    """One trajectory line (rollout.py's schema, plus `behaviour`) of the scripted agent."""
    episode, human = Episode(task, sample_idx, max_turns), EmbeddedSimulator()
    questions = {"ask twice": 2, "ask twice, miscopy": 2, "ask once": 1, "answer at once": 0}[behaviour]
    frontend = task_kind(task) == "frontend"
    asked = [rng.choice(PAGE_QUESTIONS[i]) for i in range(questions)] if frontend else rng.sample(QUESTIONS, questions)
    for question in asked:
        episode.add_agent_turn(Scripted(question, ""))
        episode.add_human_turn(human.reply(task, episode.dialogue))
    told = " ".join(turn["content"] for turn in episode.dialogue[1:] if turn["role"] == "user")
    if frontend:  # what was not asked is the reference's, remembered: right on training tasks only
        facts = page_facts(task["ground_truth"])
        if behaviour == "ask twice, miscopy" and facts.get("colors"):
            part = rng.choice(sorted(facts["colors"]))
            facts["colors"][part] = rng.choice(["#ffffff", "#222222", "#c62828", "#1e88e5", "#2e7d32", "#ff7a1a"])
        answer = compact_page(facts, facts.get("title", ""))
    else:
        answer = task["ground_truth"].strip()
        if behaviour == "ask twice, miscopy":
            answer = miscopy(answer, told, rng) or answer
    episode.add_agent_turn(Scripted(f"{ANSWER_MARKER}\n{answer}", ""))
    return dict(episode.record(), behaviour=behaviour)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", help="training tasks JSONL (backend or frontend)")
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
