"""Two scripted agents, rows beside the trained ones in the demo's table: what a fixed script gets from
the embedded human, and what asking for each hidden fact by its subject gets.

    python rollout.py runs/demo/test_tasks.jsonl --agent scripted:fixed --max-turns 3
    python rollout.py runs/demo/test_tasks.jsonl --agent scripted:by-subject --max-turns 3

scripted:fixed sends one request that names nothing of the task, every turn but the last;
scripted:by-subject reads the task's hidden facts (it cheats: no agent can) and asks for the first
untold one by the words that name its subject, one fact per turn. Both answer as soon as every hidden
fact was told, or at their last turn, and write code as an oracle would: the reference solution when
every fact was told, else a function that returns None. Their success is the share of dialogues that
drew every hidden fact: the asking alone, with the coding taken out.
"""
import re

from colbench.env import ANSWER_MARKER
from colbench.models import Reply
from colbench.simulators import facts_told, hidden_facts, stem, subjects

AGENTS = ("scripted:fixed", "scripted:by-subject")
FIXED_REQUEST = "Could you tell me more about what you need?"


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


class ScriptedAgent:
    """rollout.py's agent interface (`chat`) for AGENTS; `tasks` are the tasks it may be asked about."""

    def __init__(self, name, tasks, max_turns):
        if name not in AGENTS:
            raise ValueError(f"unknown scripted agent {name!r}: one of {', '.join(AGENTS)}")
        self.name, self.max_turns, self.tasks = name, max_turns, {}
        for task in tasks:  # tasks of one family may share a description: the human's replies tell them apart
            self.tasks.setdefault(task["problem_description"], []).append(task)

    def reply(self, dialogue):
        task = max(self.tasks[dialogue[0]["content"]], key=lambda candidate: len(facts_told(candidate, dialogue)))
        facts, told = hidden_facts(task), facts_told(task, dialogue)
        last_turn = sum(turn["role"] == "assistant" for turn in dialogue) == self.max_turns - 1
        if last_turn or len(told) == len(facts):
            return f"{ANSWER_MARKER}\n{oracle_code(task, len(told) == len(facts))}"
        if self.name == "scripted:fixed":
            return FIXED_REQUEST
        untold = next(fact for fact in facts if fact not in told)
        return f"Could you tell me about the {' '.join(subject_words(untold, facts))}?"

    def chat(self, conversations, max_new_tokens=None, temperature=None):
        return [Reply(self.reply([m for m in messages if m["role"] != "system"]), "", 0)
                for messages in conversations]
