"""Scripted agents, rows beside the trained ones in the demo's tables: what a fixed script gets from the
embedded human, and what asking about each subject it holds gets.

    python rollout.py runs/demo/test_tasks.jsonl --agent scripted:fixed --max-turns 3
    python rollout.py runs/demo/test_tasks.jsonl --agent scripted:by-subject --max-turns 3
    python rollout.py colbench/tasks/frontend_test.jsonl --agent scripted:hint-reader --samples 1 --max-turns 2

Backend. scripted:fixed sends one request that names nothing of the task, every turn but the last;
scripted:by-subject reads the task's hidden facts (it cheats: no agent can) and asks for the first
untold one by the words that name its subject, one fact per turn. Both answer as soon as every hidden
fact was told, or at their last turn, and write code as an oracle would: the reference solution when
every fact was told, else a function that returns None. Their success is the share of dialogues that
drew every hidden fact: the asking alone, with the coding taken out.

Frontend. Every page has the same subjects (colbench/page.py: colors, accent, layout, sections), and the
human's sentences can be copied (colbench/frontend.py read_facts). Each script writes colbench/page.py's
template under the name the request gives, with what the human told and its kind's default page (DEFAULTS)
for the rest. scripted:default-at-once writes the default page at its first turn; scripted:fixed-asker asks
about every subject in one fixed order (FIXED_ORDER, most outstanding first), two a turn, then writes;
scripted:draft-then-fix shows the default page, then each turn the page with what the human named changed,
and writes when the human says it looks right or at its last turn; scripted:hint-reader asks about the
subjects the request hints at (hinted_subjects), two a turn, then writes.
"""
import re

from colbench.data import task_kind
from colbench.env import ANSWER_MARKER
from colbench.frontend import DIFFERENCE_ORDER, LOOKS_RIGHT, facts_heard, hinted_subjects, parsed, topics_told
from colbench.models import Reply
from colbench.page import build_page, default_facts
from colbench.simulators import facts_told, hidden_facts, stem, subjects

AGENTS = {"scripted:fixed": "backend", "scripted:by-subject": "backend",
          "scripted:default-at-once": "frontend", "scripted:fixed-asker": "frontend",
          "scripted:draft-then-fix": "frontend", "scripted:hint-reader": "frontend"}  # name -> the tasks it plays
FIXED_REQUEST = "Could you tell me more about what you need?"
FIXED_ORDER = DIFFERENCE_ORDER  # what scripted:fixed-asker asks, two a turn: the subjects whose departure costs most
SHOW_DRAFT = "Here is a draft: {} What should change?"


def subject_words(fact, facts):
    """The words of `fact` that name its subject (colbench.simulators.subjects), as written, numbers left out."""
    subject = subjects(facts)[facts.index(fact)]
    return list(dict.fromkeys(w for w in re.findall(r"[A-Za-z]+", fact) if stem(w.lower()) in subject))


def oracle_code(task, knows_everything):
    """The reference solution, or a function with its signature that returns None."""
    if knows_everything:
        return task["ground_truth"].strip()
    signature = next(line for line in task["ground_truth"].splitlines() if line.startswith("def "))
    return f"{signature}\n    return None"


def request_title(task):
    """The page's title where the request names it (every shipped request names the business), else None."""
    titles = parsed(task["ground_truth"]).headings["h1"]
    return titles[0] if titles and titles[0] in task["problem_description"] else None


def page_question(topics):
    """A question that names `topics` (one or two), in the words the embedded human knows them by."""
    return f"What {' and what '.join(topics)} do you want?"


class ScriptedAgent:
    """rollout.py's agent interface (`chat`) for AGENTS; `tasks` are the tasks it may be asked about."""

    def __init__(self, name, tasks, max_turns):
        if name not in AGENTS:
            raise ValueError(f"unknown scripted agent {name!r}: one of {', '.join(AGENTS)}")
        other = next((task for task in tasks if task_kind(task) != AGENTS[name]), None)
        if other:
            raise ValueError(f"{name} plays {AGENTS[name]} tasks; {other['task_id']} is a {task_kind(other)} task")
        self.name, self.max_turns, self.tasks = name, max_turns, {}
        for task in tasks:  # tasks may share a description: the human's replies tell them apart
            self.tasks.setdefault(task["problem_description"], []).append(task)

    def reply(self, dialogue):
        told = topics_told if AGENTS[self.name] == "frontend" else facts_told
        task = max(self.tasks[dialogue[0]["content"]], key=lambda candidate: len(told(candidate, dialogue)))
        replied = sum(turn["role"] == "assistant" for turn in dialogue)  # the agent turns so far
        return (self.page_reply if AGENTS[self.name] == "frontend" else self.code_reply)(task, dialogue, replied)

    def code_reply(self, task, dialogue, replied):
        facts, told = hidden_facts(task), facts_told(task, dialogue)
        if replied == self.max_turns - 1 or len(told) == len(facts):
            return f"{ANSWER_MARKER}\n{oracle_code(task, len(told) == len(facts))}"
        if self.name == "scripted:fixed":
            return FIXED_REQUEST
        untold = next(fact for fact in facts if fact not in told)
        return f"Could you tell me about the {' '.join(subject_words(untold, facts))}?"

    def page_reply(self, task, dialogue, replied):
        page = build_page({**default_facts(task), **facts_heard(dialogue)}, request_title(task) or "Welcome")
        last = replied == self.max_turns - 1
        looks_right = replied > 0 and dialogue[-1]["content"].startswith(LOOKS_RIGHT)  # the human's latest reply
        asked = {"scripted:fixed-asker": FIXED_ORDER, "scripted:hint-reader": hinted_subjects(dialogue[0]["content"])}
        subjects = asked.get(self.name, [])[2 * replied: 2 * replied + 2]  # two a turn
        if subjects and not last:
            return page_question(subjects)
        if self.name == "scripted:draft-then-fix" and not last and not looks_right:
            return SHOW_DRAFT.format(page)
        return f"{ANSWER_MARKER}\n{page}"

    def chat(self, conversations, max_new_tokens=None, temperature=None):
        return [Reply(self.reply([m for m in messages if m["role"] != "system"]), "", 0)
                for messages in conversations]
