"""The simulated human who holds the hidden information of a task.

`--simulator embedded` (default): offline and deterministic. It answers from the task's
`hidden_facts` (or facts read off the reference code when a task has none): the facts that share
the most words with the agent's message, at most two sentences; a plain request for details
gets the next fact not yet told; anything else gets "I don't know". It never shows code.
Facts tie-broken: the best-matching ones (at most two), those not yet told first.
`--simulator URL`: an OpenAI-compatible chat server; `--simulator MODEL`: a local Hugging Face
model. Both play the human from a prompt holding the reference solution, at temperature 0.
Frontend tasks (an HTML reference; colbench/frontend.py): the embedded human compares the
screenshots and HTML of the agent's latest page and the reference page; a URL must serve a
vision model, which gets both screenshots. Each task gets the human of its kind, so one file
may mix kinds.
"""
import ast
import re

from colbench import frontend
from colbench.cli import fail
from colbench.data import task_kind
from colbench.env import html_page
from colbench.models import EndpointChat, open_chat
from colbench.render import render_many

MAX_REPLY_CHARS = 400
REPLY_LIMITS = {"backend": (MAX_REPLY_CHARS, 128), "frontend": (frontend.MAX_REPLY_CHARS, 256)}  # (chars, tokens)
DONT_KNOW = "I don't know, I haven't thought about that."

# Words that carry no meaning for matching a question to a fact.
STOPWORDS = set("""a an the is are was were be been do does did should would could can will shall may
what which who whom how when where why if then than that this these those it its of to in on for
with by at from as and or but not no yes you your i me my we our us they them their there here
please thanks thank any some more about into over under just also so such function python code
write return returns value values""".split())
# A message made of these asks for details in general: the next untold fact answers it.
DETAIL_WORDS = {"detail", "details", "requirement", "requirements", "specific", "specifics", "clarify",
                "information", "info", "rule", "rules", "tell", "explain", "know", "need", "else", "other"}


def words(text):
    """Lower-cased content words, crudely stemmed (plural s dropped)."""
    found = re.findall(r"[a-z][a-z0-9]*|\d+(?:\.\d+)?", text.lower().replace("_", " "))
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in found if w not in STOPWORDS}


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
    """Answers from the hidden facts by word overlap; deterministic, offline, instant."""
    name = "embedded"

    def respond(self, episodes):
        # Frontend: render the agents' pages side by side first; reply() then finds them in the render cache.
        render_many([html_page(dialogue[-1]["content"]) or "" for task, dialogue in episodes
                     if task_kind(task) == "frontend"])
        return [self.reply(task, dialogue) for task, dialogue in episodes]

    def reply(self, task, dialogue):
        if task_kind(task) == "frontend":
            return frontend.embedded_reply(task, dialogue)
        facts = task.get("hidden_facts") or facts_from_code(task["ground_truth"])
        told = " ".join(turn["content"] for turn in dialogue if turn["role"] == "user")
        asked = words(dialogue[-1]["content"])
        scored = sorted(((len(asked & words(fact)), fact not in told, -i, fact) for i, fact in enumerate(facts)),
                        reverse=True)
        best = scored[0][0] if scored else 0
        chosen = [fact for overlap, untold, _, fact in scored if overlap == best > 0][:2]
        if not chosen and asked & DETAIL_WORDS:
            chosen = [fact for fact in facts if fact not in told][:1] or facts[:1]
        return (" ".join(chosen) or DONT_KNOW)[:MAX_REPLY_CHARS]


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
