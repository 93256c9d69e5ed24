"""The simulated human who holds the hidden information of a task.

`--simulator embedded` (default): offline and deterministic. It answers from the task's
`hidden_facts` (or facts read off the reference code when a task has none) what it is asked, and no
more, as the official human answers only from its hidden information: one fact per question, the one
whose subject the question names. A fact's subject is its words less those every fact of the task
shares (the thing the function computes) and less words that ask for nothing in particular, so "any
other details?" gets "I don't know", and a question naming two facts equally is asked to name one.
It reads the agent's latest message only. It quotes code where a fact does: an easy task's twist fact
quotes its line (`min(..., 31)`), and facts read off a reference code name its numbers and strings.
`--simulator URL`: an OpenAI-compatible chat server; `--simulator MODEL`: a local Hugging Face
model. Both play the human from a prompt holding the reference solution, at temperature 0.
Frontend tasks (an HTML reference; colbench/frontend.py): the embedded human reads the facts of the
agent's latest page and of the reference page off their HTML; a URL must serve a vision model, which
gets both screenshots. Each task gets the human of its kind, so one file
may mix kinds.
"""
import ast
import re

from colbench import frontend
from colbench.cli import fail
from colbench.data import task_kind
from colbench.models import EndpointChat, open_chat

MAX_REPLY_CHARS = 400
REPLY_LIMITS = {"backend": (MAX_REPLY_CHARS, 128), "frontend": (frontend.MAX_REPLY_CHARS, 256)}  # (chars, tokens)
DONT_KNOW = "I don't know, I haven't thought about that."
ONE_AT_A_TIME = "You are asking about several things at once; ask me about one of them."

# Words that name no subject: they never match a question to a fact.
STOPWORDS = set("""a an the is are was were be been being do does did should would could can will shall may
might must what which who whom whose how when where why if then than that this these those it its of to in on
for with by at from as and or but not no yes you your i me my we our us they them their there here please
thanks thank any some more about into over under just also so such function python code write return value
detail requirement specific specifics clarify information info rule tell explain know need else other
particular additional further exact exactly number numbers constraint preference want like share give provide
help mind thing anything everything something question questions input output result calculation formula
handle case edge let ok okay sure right correct same kind sort type use used work one every each all
per much many has have had plus get go make""".split())
# Words to bring to one form, beyond what stem() does.
SYNONYMS = {"percentage": "percent", "min": "minimum", "max": "maximum", "cap": "maximum", "capped": "maximum",
            "rounded": "round", "rounding": "round", "kg": "kilogram", "km": "kilometre", "liter": "litre",
            "liters": "litre", "milliliter": "millilitre", "milliliters": "millilitre"}


def stem(word):
    """A crude stem: the plural and -ed/-ing endings dropped, so 'decimals' and 'decimal' match."""
    word = SYNONYMS.get(word, word)
    for ending in ("ing", "ed", "s"):
        if len(word) > len(ending) + 2 and word.endswith(ending) and not word.endswith("ss"):
            return SYNONYMS.get(word[:-len(ending)], word[:-len(ending)])
    return word


def words(text):
    """The stems of a text's words that can name a subject (numbers included; `quoted code` left out)."""
    prose = re.sub(r"`[^`]*`", " ", text)
    found = re.findall(r"[a-z][a-z0-9]*|\d+(?:\.\d+)?", prose.lower().replace("_", " "))
    return {stem(w) for w in found if w not in STOPWORDS} - STOPWORDS


def subjects(facts):
    """Each fact's subject: its words less those that every fact shares (when there are two or more)."""
    shared = set.intersection(*map(words, facts)) if len(facts) > 1 else set()
    return [words(fact) - shared for fact in facts]


def answer_from_facts(facts, question):
    """The embedded human's reply to `question`: the one fact whose subject shares the most words with it;
    DONT_KNOW when none shares any, ONE_AT_A_TIME when several share as many."""
    asked = words(question)
    overlaps = [len(asked & subject) for subject in subjects(facts)]
    best = max(overlaps, default=0)
    if best == 0:
        return DONT_KNOW
    matching = [fact for fact, overlap in zip(facts, overlaps) if overlap == best]
    return matching[0] if len(matching) == 1 else ONE_AT_A_TIME


def hidden_facts(task):
    """The facts the embedded human knows: the task's `hidden_facts`, or facts read off its reference code."""
    return task.get("hidden_facts") or facts_from_code(task["ground_truth"])


def facts_told(task, dialogue):
    """The hidden facts that the human's replies in `dialogue` told, in the order of the task's facts."""
    told = " ".join(turn["content"] for turn in dialogue[1:] if turn["role"] == "user")
    return [fact for fact in hidden_facts(task) if fact in told]


def facts_from_code(source):
    """Plain-language facts read off a reference function, for tasks that carry no hidden_facts."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    facts = []
    ops = {ast.Gt: "more than", ast.GtE: "at least", ast.Lt: "less than", ast.LtE: "at most",
           ast.Eq: "exactly", ast.NotEq: "anything but"}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            names = ", ".join(a.arg for a in node.args.args)
            facts.append(f"The function is called {node.name} and takes {names or 'nothing'}.")
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in ops
              and isinstance(node.left, ast.Name) and isinstance(node.comparators[0], ast.Constant)):
            facts.append(f"Something special happens when {node.left.id.replace('_', ' ')} is "
                         f"{ops[type(node.ops[0])]} {node.comparators[0].value!r}.")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
              and not isinstance(node.value, bool) and node.value not in (0, 1)):
            facts.append(f"The number {node.value} matters in the calculation.")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
            facts.append(f"The text {node.value!r} appears in the result.")
    return list(dict.fromkeys(facts))  # unique, in order


class EmbeddedSimulator:
    """Answers one hidden fact per question, the one the question names; deterministic, offline, instant."""
    name = "embedded"

    def respond(self, episodes):
        return [self.reply(task, dialogue) for task, dialogue in episodes]

    def reply(self, task, dialogue):
        if task_kind(task) == "frontend":
            return frontend.embedded_reply(task, dialogue)
        return answer_from_facts(hidden_facts(task), dialogue[-1]["content"])[:MAX_REPLY_CHARS]


HUMAN_PROMPT = """You are a person who asked an assistant to write a Python function for you. You know exactly \
what you want: it is described by the hidden information below, which the assistant cannot see.

Hidden information:
{hidden}

Reply to the assistant's latest message as this person would: at most two short sentences, in plain \
everyday words, using only the hidden information. If the hidden information does not answer the \
question, say that you don't know. Never write code and never paste the hidden information."""


class ChatSimulator:
    """A chat model (an OpenAI-compatible URL or a local model) playing the human at temperature 0."""

    def __init__(self, spec):
        self.model = open_chat(spec)
        self.name = spec

    def conversation(self, task, dialogue):
        if task_kind(task) == "frontend":
            if not isinstance(self.model, EndpointChat):
                fail("frontend tasks need --simulator embedded or the URL of a vision model server")
            return frontend.vision_messages(task, dialogue)
        hidden = task["ground_truth"]
        if task.get("hidden_facts"):
            hidden += "\n\nIn words:\n" + "\n".join(f"- {fact}" for fact in task["hidden_facts"])
        transcript = "\n\n".join(("Assistant: " if turn["role"] == "assistant" else "You: ") + turn["content"]
                                 for turn in dialogue)
        return [{"role": "system", "content": HUMAN_PROMPT.format(hidden=hidden)},
                {"role": "user", "content": f"The conversation so far:\n\n{transcript}\n\nYour reply:"}]

    def respond(self, episodes):
        answers = [None] * len(episodes)
        for kind, (max_chars, max_tokens) in REPLY_LIMITS.items():
            mine = [i for i, (task, _) in enumerate(episodes) if task_kind(task) == kind]
            replies = self.model.chat([self.conversation(*episodes[i]) for i in mine],
                                      max_new_tokens=max_tokens, temperature=0.0) if mine else []
            for i, reply in zip(mine, replies):
                answers[i] = without_solution(reply.text, episodes[i][0]["ground_truth"])[:max_chars]
        return answers


def without_solution(reply, solution):
    """Drop the lines of a reply that copy a line of the solution (the reference code): the human never pastes it."""
    solution_lines = {line.strip() for line in solution.splitlines() if len(line.strip()) > 8}
    kept = [line for line in reply.splitlines() if line.strip() not in solution_lines]
    return "\n".join(kept).strip() or DONT_KNOW


def make_simulator(spec):
    """'embedded' (default), an http(s) URL, or a local model folder / hub id."""
    return EmbeddedSimulator() if spec in (None, "", "embedded") else ChatSimulator(spec)
