"""Scripted dialogues that warm-start the embedded model: the demo's stand-in for instruction tuning.

    python -m harness.warmstart runs/demo/warm_tasks.jsonl --out runs/demo/warmstart.traj.jsonl
    python -m harness.baselines runs/demo/warmstart.traj.jsonl --method sft --out runs/demo/warm   # the starting policy

The paper's starting policy (Llama-3.1-8B-Instruct) already followed ColBench's protocol; the
embedded SmolLM2-135M does not (zero-shot it never used the answer marker and rarely wrote a valid
function). So the demo first fine-tunes it on scripted dialogues of *training* tasks, played with
the embedded human. A departure from the paper, made on purpose imperfect: it teaches the protocol,
not which question fits which task. Backend dialogues are drawn turn by turn (MOVES): at each turn
before the last the script answers (more often once every fact is told) or asks, in varied words,
about an untold fact of the task, about a subject the task lacks (a fact of another task of its
family), about nothing in particular, or about two things at once; the embedded human answers what it
is asked. The answer is the task's reference function (its untold numbers memorized, so guessed wrong
on new tasks), with a told number miscopied now and then (SLIP). Test tasks never appear here.

Frontend tasks follow one of BEHAVIOURS: ask about the colors and the font, then about the layout, the menu and
the sections (the embedded human answers with the reference page's values), then write a compact page of
what was told (`compact_page`); a slip gets one color wrong; what was not asked is the reference's.
"""
import argparse
import random
import re

from colbench.cli import fail, non_negative_int, positive_int
from colbench.data import DataError, load_tasks, task_kind, write_jsonl
from colbench.env import ANSWER_MARKER, Episode
from colbench.frontend import page_facts
from colbench.scripted import subject_words
from colbench.simulators import EmbeddedSimulator, facts_told, hidden_facts

# A backend turn before the last: the weights of what the script asks, and how likely it answers instead.
MOVES = {"an untold fact": 16, "a subject the task lacks": 3, "nothing in particular": 1, "two things at once": 1}
ANSWER_EARLY = {"some facts untold": 0.1, "every fact told": 0.5}
SLIP = 0.1  # the chance that an answer miscopies one told number
SUBJECT_QUESTIONS = ["What is the {}?", "Could you tell me the {}?", "How about the {}?", "What {} do you want?",
                     "Is there a {}?", "Can you give me the {}?", "What should the {} be?", "Tell me about the {}."]
GENERAL_QUESTIONS = ["What details do you need me to know?", "Could you tell me the specifics?",
                     "Is there anything else I should know?", "Can you tell me more?"]
BEHAVIOURS = {"ask twice": 3, "ask twice, miscopy": 1, "ask once": 2, "answer at once": 2}  # frontend
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


def question(fact, facts, rng):
    """A question about `fact` in words drawn from those that name its subject."""
    names = subject_words(fact, facts) or ["details"]
    return rng.choice(SUBJECT_QUESTIONS).format(" ".join(names[:rng.choice([1, 2])]))


def backend_dialogue(task, sample_idx, peers, rng, max_turns=3):
    """One trajectory line of the turn-by-turn script (MOVES) on a backend task; `peers` are other tasks
    of its family, whose facts give the subjects this task may lack."""
    episode, human, facts = Episode(task, sample_idx, max_turns), EmbeddedSimulator(), hidden_facts(task)
    moves, weights = list(MOVES), list(MOVES.values())
    for _ in range(max_turns - 1):
        told = facts_told(task, episode.dialogue)
        untold = [fact for fact in facts if fact not in told]
        if rng.random() < ANSWER_EARLY["some facts untold" if untold else "every fact told"]:
            break
        move = rng.choices(moves, weights)[0]
        if move == "an untold fact" and untold:
            text = question(rng.choice(untold), facts, rng)
        elif move == "a subject the task lacks" and peers:
            other = hidden_facts(rng.choice(peers))
            text = question(rng.choice(other), other, rng)
        elif move == "two things at once" and len(facts) > 1:
            first, second = (question(fact, facts, rng) for fact in rng.sample(facts, 2))
            text = f"{first.rstrip('?.')}, and {second[0].lower()}{second[1:]}"
        else:
            text = rng.choice(GENERAL_QUESTIONS)
        episode.add_agent_turn(Scripted(text, ""))
        episode.add_human_turn(human.reply(task, episode.dialogue))
    answer = task["ground_truth"].strip()
    if rng.random() < SLIP:
        told = " ".join(facts_told(task, episode.dialogue))
        answer = miscopy(answer, told, rng) or answer
    episode.add_agent_turn(Scripted(f"{ANSWER_MARKER}\n{answer}", ""))
    return episode.record()


def frontend_dialogue(task, sample_idx, behaviour, rng, max_turns=3):
    """One trajectory line (rollout.py's schema, plus `behaviour`) of the scripted agent on a page."""
    episode, human = Episode(task, sample_idx, max_turns), EmbeddedSimulator()
    questions = {"ask twice": 2, "ask twice, miscopy": 2, "ask once": 1, "answer at once": 0}[behaviour]
    for i in range(questions):
        episode.add_agent_turn(Scripted(rng.choice(PAGE_QUESTIONS[i]), ""))
        episode.add_human_turn(human.reply(task, episode.dialogue))
    facts = page_facts(task["ground_truth"])  # what was not asked is the reference's: right on training tasks
    if behaviour == "ask twice, miscopy" and facts.get("colors"):
        part = rng.choice(sorted(facts["colors"]))
        facts["colors"][part] = rng.choice(["#ffffff", "#222222", "#c62828", "#1e88e5", "#2e7d32", "#ff7a1a"])
    episode.add_agent_turn(Scripted(f"{ANSWER_MARKER}\n{compact_page(facts, facts.get('title', ''))}", ""))
    return dict(episode.record(), behaviour=behaviour)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", help="training tasks JSONL (backend or frontend)")
    parser.add_argument("--out", required=True, help="trajectories JSONL to write")
    parser.add_argument("--samples", type=positive_int, default=1, help="dialogues per task")
    parser.add_argument("--tier", choices=("easy", "medium", "hard"), help="use only the backend tasks of this tier")
    parser.add_argument("--limit", type=positive_int, help="use only the first N tasks (of the tier)")
    parser.add_argument("--max-turns", type=positive_int, default=3, help="the dialogues' turn budget")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for the behaviours, questions and slips")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    try:
        tasks = [t for t in load_tasks(args.tasks) if args.tier in (None, t.get("tier"))]
        tasks = tasks[: args.limit]
    except DataError as e:
        fail(e)
    rows = []
    for task in tasks:
        peers = [t for t in tasks if t.get("family") == task.get("family") and t is not task]
        for k in range(args.samples):
            if task_kind(task) == "frontend":
                behaviour = rng.choices(list(BEHAVIOURS), list(BEHAVIOURS.values()))[0]
                rows.append(frontend_dialogue(task, k, behaviour, rng, args.max_turns))
            else:
                rows.append(backend_dialogue(task, k, peers, rng, args.max_turns))
    write_jsonl(args.out, rows)
    questions = [turn["content"] for row in rows for turn in row["dialogue_history"][1:-1] if turn["role"] == "assistant"]
    told = sum(len(facts_told(row["task"], row["dialogue_history"])) == len(hidden_facts(row["task"])) for row in rows)
    print(f"warm start: {len(rows)} scripted dialogues -> {args.out} | {len(questions)} questions, "
          f"{len(set(questions))} distinct | every fact told in {told}")


if __name__ == "__main__":
    main()
