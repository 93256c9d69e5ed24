"""The ColBench interaction protocol: what the agent is told, and how a dialogue advances.

The human opens with the vague problem description. Each agent turn either asks or proposes,
or starts with ANSWER_MARKER followed by the final answer; the turn budget's last reply is the
answer whatever it says. The simulated human (colbench/simulators.py) answers everything else.

Frontend: a turn may hold one HTML page (`<html>...</html>`); the simulated human compares it
with the page it has in mind. The final answer is the last page the agent proposed in any turn.
"""
import re

from colbench.data import task_kind
from colbench.models import plain_messages

ANSWER_MARKER = "I WANT TO ANSWER:"

# The agent's system prompt, one per task kind. The critic (critic.py) shows it to its model too.
SYSTEM_PROMPTS = {
    "backend": (
        "You are helping a person write one Python function. Their request is vague: the exact "
        "numbers, rules and formats live only in their head, so ask them short, specific questions "
        "first, one per turn. When you know enough, reply with " + ANSWER_MARKER + " followed by the "
        "complete Python function and nothing else."
    ),
    "frontend": (
        "You are helping a person build a web page. Their request is vague: the colors, layout and "
        "sections they want live only in their head. Ask them short questions, or show them "
        "a complete page as <html>...</html> with its CSS in a <style> tag (no scripts, no links to "
        "other files) and they will tell you how it differs from what they want. When you know enough, "
        "reply with " + ANSWER_MARKER + " followed by the final page."
    ),
}
# The agent learns of its turn budget up front, as from the official ColBench agent prompt, and the
# environment marks the human's message before its last turn with LAST_TURN_NOTE (a departure: a small model
# does not count turns). Both are in the dialogue the critic (critic.py) reads with c.
TURN_BUDGET_NOTE = (" You have at most {max_turns} turns with them; whatever you reply at the last one is "
                    "taken as your final answer.")
LAST_TURN_NOTE = "\n\n(Your next reply is your last turn: it is taken as your final answer.)"
OFFICIAL_MAX_TURNS = 10  # the budget of trajectories that do not record theirs (the official offline files)


def agent_messages(task, dialogue, max_turns):
    """The messages the agent sees at the turn that follows `dialogue`: its system prompt, which states
    the budget of `max_turns` agent turns, then the dialogue."""
    system = SYSTEM_PROMPTS[task_kind(task)] + TURN_BUDGET_NOTE.format(max_turns=max_turns)
    return [{"role": "system", "content": system}] + plain_messages(dialogue)


def turn_budget(trajectory):
    """The turn budget a trajectory was played under (rollout.py records it)."""
    return trajectory.get("max_turns", OFFICIAL_MAX_TURNS)


def without_oldest_exchange(dialogue):
    """The dialogue without its first agent turn and the human's reply to it; a LAST_TURN_NOTE that reply ended
    with moves to the message before (critic.py cuts a dialogue too long for its critic so)."""
    first = next(i for i, turn in enumerate(dialogue) if turn["role"] == "assistant")
    reply = first + 1 < len(dialogue) and dialogue[first + 1]["role"] == "user"
    note = LAST_TURN_NOTE if reply and dialogue[first + 1]["content"].endswith(LAST_TURN_NOTE) else ""
    shorter = dialogue[:first] + dialogue[first + 1 + reply:]
    if note and first > 0:
        shorter[first - 1] = dict(shorter[first - 1], content=shorter[first - 1]["content"] + note)
    return shorter


def turn_states(trajectories):
    """(trajectory, agent turn number, history) for every agent turn that answers a user turn; history is
    the dialogue before that turn (policy.py samples and ranks replies there, so does harness/judge.py)."""
    states = []
    for trajectory in trajectories:
        dialogue = plain_messages(trajectory["dialogue_history"])
        for i, turn in enumerate(dialogue):
            if turn["role"] == "assistant" and i > 0 and dialogue[i - 1]["role"] == "user":
                states.append((trajectory, sum(t["role"] == "assistant" for t in dialogue[:i]), dialogue[:i]))
    return states


# From an opening <html> (or <!DOCTYPE html>) to its </html>, or to the end of a reply cut short.
PAGE = re.compile(r"(?:<!doctype\s+html[^>]*>\s*)?<html\b.*?(?:</html\s*>|\Z)", re.IGNORECASE | re.DOTALL)


def html_page(text):
    """The page an agent's reply proposes: its last <html> snippet, or None."""
    pages = PAGE.findall(text)
    return pages[-1].strip() if pages else None


def extract_answer(task, text, last_page=None):
    """The final answer inside an agent's last reply: what follows the marker, if any.

    Frontend: the page of this reply, else `last_page` (the last one proposed before), else ''."""
    if task_kind(task) == "frontend":
        return html_page(text) or last_page or ""
    return text.split(ANSWER_MARKER, 1)[1].strip() if ANSWER_MARKER in text else text.strip()


class Episode:
    """One dialogue between the agent and the simulated human about one task."""

    def __init__(self, task, sample_idx, max_turns):
        self.task, self.sample_idx, self.max_turns = task, sample_idx, max_turns
        self.dialogue = [{"role": "user", "content": task["problem_description"]}]
        self.agent_turns = 0
        self.answer = None
        self.answered_with_marker = False
        self.last_page = None  # frontend: the latest page the agent proposed

    @property
    def done(self):
        return self.answer is not None

    def agent_view(self):
        return agent_messages(self.task, self.dialogue, self.max_turns)

    def add_agent_turn(self, reply):
        """Record the agent's reply (`reply.prompt` is the exact prompt it saw); True when it ends the dialogue."""
        self.dialogue.append({"role": "assistant", "content": reply.text, "input": reply.prompt, "output": reply.text})
        self.agent_turns += 1
        self.answered_with_marker = ANSWER_MARKER in reply.text
        if self.answered_with_marker or self.agent_turns >= self.max_turns:
            self.answer = extract_answer(self.task, reply.text, self.last_page)
        if task_kind(self.task) == "frontend":
            self.last_page = html_page(reply.text) or self.last_page
        return self.done

    def add_human_turn(self, text):
        last_turn_next = self.agent_turns == self.max_turns - 1
        self.dialogue.append({"role": "user", "content": text + (LAST_TURN_NOTE if last_turn_next else "")})

    def record(self):
        """The trajectory line (schema in README.md)."""
        return {"task_id": self.task["task_id"], "sample_idx": self.sample_idx, "task": self.task,
                "dialogue_history": self.dialogue, "answer": self.answer,
                "answered_with_marker": self.answered_with_marker, "max_turns": self.max_turns}
