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

Frontend dialogues are drawn turn by turn too (PAGE_MOVES): at each turn before the last the script
answers (as ANSWER_EARLY) or asks, in varied words, about one untold subject of the page (colors, accent,
layout, sections), about two at once, or about nothing in particular, or shows a page of what it was
told so far. It picks the subjects at random, never by the request's hints: which to ask is for RL to
learn. The embedded human answers the subjects named, says nothing to a question that names none,
and names what differs in a page shown. Every page is colbench/page.py's template with what the human's
replies told (read as any agent reads them, colbench/frontend.py read_facts) and the kind's default page
for the rest (never the reference's departures: nothing to memorize), with a told color miscopied now and
then (SLIP). Now and then the script answers too late: at its last turn it asks once more
(LAST_TURN_QUESTION), and the dialogue ends with no page but one it showed: the offline data shows the cost.
"""
import argparse
import random
import re

from colbench.cli import fail, non_negative_int, positive_int
from colbench.data import DataError, load_tasks, task_kind, write_jsonl
from colbench.env import ANSWER_MARKER, Episode
from colbench.frontend import departures, facts_heard, reference_facts, topics_told
from colbench.page import build_page, default_facts
from colbench.scripted import request_title, subject_words
from colbench.simulators import EmbeddedSimulator, facts_told, hidden_facts

# A backend turn before the last: the weights of what the script asks, and how likely it answers instead.
MOVES = {"an untold fact": 16, "a subject the task lacks": 3, "nothing in particular": 1, "two things at once": 1}
ANSWER_EARLY = {"some facts untold": 0.1, "every fact told": 0.5}
SLIP = 0.1  # the chance that an answer miscopies one told number
SUBJECT_QUESTIONS = ["What is the {}?", "Could you tell me the {}?", "How about the {}?", "What {} do you want?",
                     "Is there a {}?", "Can you give me the {}?", "What should the {} be?", "Tell me about the {}."]
GENERAL_QUESTIONS = ["What details do you need me to know?", "Could you tell me the specifics?",
                     "Is there anything else I should know?", "Can you tell me more?"]
# A frontend turn before the last: the weights of what the script does; a subject by the words the human knows it by.
PAGE_MOVES = {"an untold subject": 8, "two untold subjects": 8, "nothing in particular": 1, "a page": 3}
PAGE_SUBJECTS = {"colors": ["colors", "color scheme", "palette", "colours"], "accent": ["accent color", "accent"],
                 "layout": ["layout", "page structure"], "sections": ["sections", "content sections", "menu"]}
PAGE_QUESTIONS = ["What {} do you want?", "Which {} should it have?", "Could you tell me the {}?", "How about the {}?",
                  "What should the {} be?", "Tell me about the {}."]
SHOW_PAGE = ["Here is a first draft: {} How does it look?", "How about this? {}", "Is this close? {}"]
LAST_TURN_QUESTION = 0.05  # the chance that a frontend dialogue that reaches its last turn asks there
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


def question(fact, facts, rng):
    """A question about `fact` in words drawn from those that name its subject."""
    names = subject_words(fact, facts) or ["details"]
    return rng.choice(SUBJECT_QUESTIONS).format(" ".join(names[:rng.choice([1, 2])]))


def both(first, second):
    """Two questions asked as one: "What is the rate, and what is the minimum?"."""
    return f"{first.rstrip('?.')}, and {second[0].lower()}{second[1:]}"


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
            text = both(first, second)
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


def page_subject_question(topic, rng):
    """A question about one topic of a page, in words drawn from PAGE_SUBJECTS."""
    return rng.choice(PAGE_QUESTIONS).format(rng.choice(PAGE_SUBJECTS[topic]))


def frontend_dialogue(task, sample_idx, rng, max_turns=3):
    """One trajectory line of the turn-by-turn script (PAGE_MOVES) on a frontend task."""
    episode, human, topics = Episode(task, sample_idx, max_turns), EmbeddedSimulator(), reference_facts(task)
    moves, weights = list(PAGE_MOVES), list(PAGE_MOVES.values())
    title = request_title(task) or "Welcome"
    for _ in range(max_turns - 1):
        heard = facts_heard(episode.dialogue)  # what the human's replies told
        known, untold = {**default_facts(task), **heard}, [topic for topic in topics if topic not in heard]
        if rng.random() < ANSWER_EARLY["some facts untold" if untold else "every fact told"]:
            break
        move = rng.choices(moves, weights)[0]
        if move == "an untold subject" and untold:
            text = page_subject_question(rng.choice(untold), rng)
        elif move == "two untold subjects" and len(untold) > 1:
            first, second = (page_subject_question(topic, rng) for topic in rng.sample(untold, 2))
            text = both(first, second)
        elif move == "a page":
            text = rng.choice(SHOW_PAGE).format(build_page(known, title))
        else:
            text = rng.choice(GENERAL_QUESTIONS)
        episode.add_agent_turn(Scripted(text, ""))
        episode.add_human_turn(human.reply(task, episode.dialogue))
    heard = facts_heard(episode.dialogue)
    facts = {**default_facts(task), **heard}
    if episode.agent_turns == max_turns - 1 and rng.random() < LAST_TURN_QUESTION:  # too late: no page
        untold = [topic for topic in topics if topic not in heard]
        episode.add_agent_turn(Scripted(page_subject_question(rng.choice(untold), rng) if untold
                                        else rng.choice(GENERAL_QUESTIONS), ""))
        return episode.record()
    if "colors" in heard and rng.random() < SLIP:
        part = rng.choice(sorted(facts["colors"]))
        facts["colors"] = dict(facts["colors"], **{part: rng.choice(["white", "black", "gray", "red", "blue"])})
    episode.add_agent_turn(Scripted(f"{ANSWER_MARKER}\n{build_page(facts, title)}", ""))
    return episode.record()


def every_fact_told(row):
    task, dialogue = row["task"], row["dialogue_history"]
    if task_kind(task) == "frontend":
        return set(departures(task)) <= set(topics_told(task, dialogue))
    return len(facts_told(task, dialogue)) == len(hidden_facts(task))


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
                rows.append(frontend_dialogue(task, k, rng, args.max_turns))
            else:
                rows.append(backend_dialogue(task, k, peers, rng, args.max_turns))
    write_jsonl(args.out, rows)
    questions = [turn["content"] for row in rows for turn in row["dialogue_history"][1:-1] if turn["role"] == "assistant"]
    told = sum(map(every_fact_told, rows))
    print(f"warm start: {len(rows)} scripted dialogues -> {args.out} | {len(questions)} questions, "
          f"{len(set(questions))} distinct | every fact told in {told}")


if __name__ == "__main__":
    main()
