"""Frontend tasks: what the simulated human says about a page, and how a final page is scored.

The embedded simulator (offline, deterministic) knows the facts of its reference page (`page_facts`:
colors, accent, layout, sections; colbench/page.py) and says each in one sentence that gives the value
as the page writes it (`fact_sentence`), so an agent can copy it into its page. Asked about subjects,
at most MAX_TOPICS_PER_QUESTION at once (a question naming more is asked to name fewer), it tells those,
the kind's default values too where the task does not depart from them (a turn spent). Shown a page, it
reads the page's facts the same way and names the subject that differs most outstandingly (DIFFERENCE_ORDER),
MAX_DIFFERENCES a turn, in the same sentences. A turn with neither (a request for "any details", "what
should it look like?") gets NOTHING_ASKED, as the backend human's "I don't know". The request hints at
the subjects the task departs in (HINTS): which to ask about is the skill.

The vision-endpoint simulator sends both screenshots to an OpenAI-compatible chat server as
image data URLs, with the prompt below.

Evaluation: the reward of a final page is the similarity of its full-page screenshot to the reference
page's. The paper's is the cosine of their CLIP image embeddings (`ClipScorer`, given a checkpoint);
offline, with no weights to download, `EdgeColorSimilarity` compares the screenshots' edges and colors.
The win rate against another system's scored file counts, per task both files hold, a higher mean
reward as 1 and a tie as 1/2.
"""
import base64
import html.parser
import io
import os
import re
import socket
import urllib.parse

import numpy
from PIL import Image

from colbench.env import ANSWER_MARKER, html_page
from colbench.page import LAYOUTS, SUBJECTS
from colbench.render import failed_image, render, render_many

MAX_REPLY_CHARS = 1000
MAX_DIFFERENCES = 1     # the human names at most this many differences per turn
NO_PAGE = "You didn't show me a page this time, so I can't compare."
NOTHING_ASKED = NO_PAGE + " And I can't tell which part of the page you are asking about."
TOO_MANY_TOPICS = "You are asking about many things at once; ask me about one or two of them."
MAX_TOPICS_PER_QUESTION = 2
LOOKS_RIGHT = "That looks exactly like what I want."

# ---------------------------------------------------------------- what a page is made of


class PageParser(html.parser.HTMLParser):
    """Collects the parts of a page the simulator talks about; tolerant of broken HTML."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open_tags, self.tags, self.classes = [], set(), {}
        self.headings = {"h1": [], "h2": []}
        self.css = []
        self._text = None  # (tag, [pieces]) of the heading being read

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.classes.setdefault(tag, (dict(attrs).get("class") or "").strip())  # the first of each tag's
        if tag in self.headings and self._text is None:
            self._text = (tag, [])
        if tag not in ("br", "img", "input", "meta", "link", "hr"):
            self.open_tags.append(tag)

    def handle_endtag(self, tag):
        if self._text and self._text[0] == tag:
            text = " ".join("".join(self._text[1]).split())
            if text:
                self.headings[tag].append(text)
            self._text = None
        if tag in self.open_tags:
            while self.open_tags.pop() != tag:
                pass

    def handle_data(self, data):
        if self.open_tags and self.open_tags[-1] == "style":
            self.css.append(data)
        elif self._text is not None:
            self._text[1].append(data)


def css_rules(css_text):
    """{selector: {property: value}} of a style sheet, var(--name) replaced by the :root's value; later
    rules win, as in a browser."""
    rules = {}
    css_text = re.sub(r"/\*.*?\*/", "", css_text, flags=re.S)
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css_text):
        declarations = dict((p.strip().lower(), v.strip().lower()) for p, _, v in
                            (d.partition(":") for d in body.split(";")) if v.strip())
        for selector in selectors.split(","):
            rules.setdefault(" ".join(selector.split()).lower(), {}).update(declarations)
    variables = rules.get(":root", {})
    return {selector: {p: re.sub(r"var\((--[\w-]+)\)", lambda m: variables.get(m.group(1), m.group(0)), v)
                       for p, v in declarations.items()} for selector, declarations in rules.items()}


def parsed(page):
    parser = PageParser()
    try:
        parser.feed(page or "")
        parser.close()
    except Exception:  # html.parser can still choke on some garbage; what was read so far counts
        pass
    return parser


def page_facts(page):
    """What a person who wants `page` can tell about it, read off its HTML: {topic: value}. Exact for
    colbench/page.py's template; for any other page, its nearest reading (a sidebar for an <aside>, ...)."""
    parser = parsed(page)
    rules = css_rules(" ".join(parser.css))

    def first(selectors, prop):
        return next((rules[s][prop] for s in selectors if rules.get(s, {}).get(prop)), None)
    colors = {"background": first(["body"], "background") or first(["body"], "background-color"),
              "text": first(["body"], "color")}
    accent = first(["h2", "header"], "background") or first(["h2", "a"], "color")
    layout = parser.classes.get("body", "")
    if layout not in LAYOUTS:
        layout = ("sidebar" if "aside" in parser.tags else "hero" if ".hero" in rules
                  else "cards" if re.search(r"grid-template-columns|columns:", " ".join(parser.css)) else "single")
    facts = {"colors": {part: color for part, color in colors.items() if color}, "accent": accent, "layout": layout,
             "sections": parser.headings["h2"]}
    return {topic: value for topic, value in facts.items() if value is not None}


# ---------------------------------------------------------------- the human's sentences, and reading them back

TOPIC_WORDS = {"colors": ("color", "colour", "palette", "background", "theme"),
               "accent": ("accent", "highlight"),
               "layout": ("layout", "laid out", "structure", "arrange"),
               "sections": ("section", "content", "parts", "menu")}
ACCENT_COLOR = re.compile(r"(accent|highlight)\s+colou?rs?")  # names the accent, not the page's colors
SENTENCES = {  # topic -> (how the human says its value, the pattern that reads it back)
    "colors": ("Colors: {}.", r"Colors: ((?:\w+ [^,.\s]+(?:, )?)+)\."),
    "accent": ("Accent: {}.", r"Accent: ([\w#-]+)\."),
    "layout": ("Layout: {} ({}).", r"Layout: (\w+) \("),
    "sections": ("Sections, in this order: {}.", r"Sections, in this order: ([^.]+)\."),
}
# subject -> how a request hints that the task departs from its kind's default there, never at the value
HINTS = {
    "colors": ["I have my own colors in mind for the page.", "The background and text colors matter to me.",
               "I'd like the page in colors of my choosing."],
    "accent": ["I'm particular about the accent color.", "I have an accent color in mind.",
               "The accent color matters to me."],
    "layout": ["I have a particular layout in mind.", "The way the page is laid out matters to me.",
               "I want a layout of my own."],
    "sections": ["I know which sections I want, and in what order.", "The sections and their order matter to me.",
                 "I have my own list of sections in mind."],
}


def fact_sentence(topic, value):
    """How the human says one topic's value: as the page writes it, so that an agent can copy it."""
    template = SENTENCES[topic][0]
    if topic == "colors":
        return template.format(", ".join(f"{part} {color}" for part, color in value.items()))
    if topic == "sections":
        return template.format(", ".join(value))
    return template.format(value, LAYOUTS.get(value, "?")) if topic == "layout" else template.format(value)


def read_facts(text):
    """{topic: value} of every fact sentence in `text`, the last one of each topic: what an agent copies."""
    facts = {}
    for topic, (_, pattern) in SENTENCES.items():
        found = re.findall(pattern, text)
        if found:
            value = found[-1]
            facts[topic] = (dict(pair.split(" ", 1) for pair in value.split(", ")) if topic == "colors"
                            else value.split(", ") if topic == "sections" else value)
    return facts


def departures(task):
    """The subjects in which the task's page departs from its kind's default page (`departures`, as
    colbench/tasks/frontend.py draws them); a page of no such task: every subject."""
    return task.get("departures") or [topic for topic in SUBJECTS if topic in reference_facts(task)]


def page_summary(task):
    """c, with --page-facts: what departs from the kind's default page, as the human tells it (fact_sentence of
    each departure)."""
    facts = reference_facts(task)
    return " ".join(fact_sentence(topic, facts[topic]) for topic in departures(task))


def topics_asked(message):
    """The topics whose words `message` holds, in TOPIC_WORDS' order ("accent color" names the accent alone)."""
    message = message.lower()
    words_of = {"colors": ACCENT_COLOR.sub("", message)}
    return [topic for topic, words in TOPIC_WORDS.items() if any(w in words_of.get(topic, message) for w in words)]


def hinted_subjects(request):
    """The subjects whose HINTS the request holds, in SUBJECTS' order."""
    return [topic for topic in SUBJECTS if any(hint in request for hint in HINTS[topic])]


def as_shown(task, page):
    """`page` as a browser draws it on the task's site: the site's shared style sheet (the task's optional
    `stylesheet`, as a linked CSS file) ahead of the page's own CSS. A blank page stays blank."""
    sheet = task.get("stylesheet")
    return f"<style>{sheet}</style>{page}" if sheet and page and page.strip() else page


def reference_facts(task):
    """page_facts of the page the human has in mind."""
    return page_facts(as_shown(task, task["ground_truth"]))


def facts_heard(dialogue):
    """{topic: value} that the human's replies in `dialogue` told (its opening request aside), read as any
    agent can read them (read_facts)."""
    return read_facts(" ".join(turn["content"] for turn in dialogue[1:] if turn["role"] == "user"))


def topics_told(task, dialogue):
    """{topic: value} of the reference page's facts that the human's replies in `dialogue` told."""
    told = facts_heard(dialogue)
    facts = reference_facts(task)
    return {topic: value for topic, value in told.items() if facts.get(topic) == value}


def can_still_tell(task, history, reply, last_turn):
    """Whether `reply`, the agent's turn after `history`, can still bring its final page closer to the reference,
    by the embedded human's rules: 1 or 0, or None where the order depends on what follows. At the last turn, a
    page 1; a question 0, or None after a page was shown (that page is the answer). Before it, 1 for a question
    naming an untold subject (MAX_TOPICS_PER_QUESTION at most) or a page shown with the dialogue going on; 0 for
    a question naming no untold subject (or too many subjects) or an answer written while a subject is untold;
    None for an answer with every subject told. The subjects that count: those the task departs in."""
    if last_turn:
        shown_before = any(html_page(turn["content"]) for turn in history if turn["role"] == "assistant")
        return 1 if html_page(reply) is not None else None if shown_before else 0
    untold = set(departures(task)) - set(topics_told(task, history))
    if html_page(reply) is not None:
        return 1 if ANSWER_MARKER not in reply else 0 if untold else None
    asked = topics_asked(reply)
    return int(len(asked) <= MAX_TOPICS_PER_QUESTION and bool(untold & set(asked)))


# ---------------------------------------------------------------- the embedded human

DIFFERENCE_ORDER = ("layout", "colors", "sections", "accent")  # most outstanding first: harness/room.py measures it


def describe_differences(reference_page, agent_page):
    """What the human says of `agent_page`: the fact sentence of the subjects whose values differ from the
    reference page's, MAX_DIFFERENCES of them, most outstanding first; LOOKS_RIGHT when none differs."""
    want, have = page_facts(reference_page), page_facts(agent_page)
    differing = [topic for topic in DIFFERENCE_ORDER if topic in want and want[topic] != have.get(topic)]
    return " ".join(fact_sentence(t, want[t]) for t in differing[:MAX_DIFFERENCES]) or LOOKS_RIGHT


def embedded_reply(task, dialogue):
    """The embedded human's answer to the agent's latest turn of a frontend task: shown a page, the differences
    from the reference page; else the facts of the topics the question names (at most MAX_TOPICS_PER_QUESTION),
    or nothing (NOTHING_ASKED) when it names none."""
    page = html_page(dialogue[-1]["content"])
    if page is not None:
        return describe_differences(as_shown(task, task["ground_truth"]), as_shown(task, page))[:MAX_REPLY_CHARS]
    facts = reference_facts(task)
    asked = topics_asked(dialogue[-1]["content"])
    if len(asked) > MAX_TOPICS_PER_QUESTION:
        return TOO_MANY_TOPICS
    told = [fact_sentence(topic, facts[topic]) for topic in asked if topic in facts]
    return " ".join(told)[:MAX_REPLY_CHARS] if told else NOTHING_ASKED


# ---------------------------------------------------------------- the vision endpoint's messages

VISION_PROMPT = """You are a person who asked an assistant to build a web page. You know exactly what you \
want: the first image is the page you have in mind, which the assistant cannot see. {second}

Reply to the assistant as this person would, in at most a few sentences of plain words: name the most \
important differences between the two pages (background and text colors, layout, navigation, title, missing \
or extra sections, sizes), most visible first. If the assistant asked a question, answer it from the page \
you have in mind. Never write HTML or CSS."""
SECOND_IMAGE = "The second image is the page the assistant proposed in its latest message."
NO_SECOND_IMAGE = ("The assistant did not propose a page in its latest message: answer what it asked about yours, "
                   "at most two things; if it named nothing in particular, say that you can't tell what it is asking.")


def data_url(image):
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def vision_messages(task, dialogue):
    """OpenAI chat messages for a vision model playing the human: the prompt, the transcript, both screenshots."""
    agent_page = html_page(dialogue[-1]["content"])
    transcript = "\n\n".join(("Assistant: " if turn["role"] == "assistant" else "You: ") + turn["content"]
                             for turn in dialogue)
    images = [render(as_shown(task, page)) for page in (task["ground_truth"], agent_page) if page is not None]
    system = VISION_PROMPT.format(second=SECOND_IMAGE if agent_page is not None else NO_SECOND_IMAGE)
    content = [{"type": "text", "text": f"The conversation so far:\n\n{transcript}\n\nYour reply:"}]
    content += [{"type": "image_url", "image_url": {"url": data_url(image)}} for image in images]
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


# ---------------------------------------------------------------- evaluation: CLIP cosine and win rate

DEFAULT_CLIP = "openai/clip-vit-base-patch32"


class ClipUnavailable(RuntimeError):
    """The CLIP checkpoint cannot be loaded; the message says how to pass a local one."""


def hub_reachable(timeout=3.0):
    """Whether the Hugging Face hub answers at all (offline, the hub client retries for a minute first)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return False
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


class EdgeColorSimilarity:
    """The offline image score, which needs no model weights: how well the two screenshots' edges (where the
    boxes, borders and text of a page are) agree, times how close their colors are.

    Both images are scaled to WIDTH pixels wide, the shorter one padded at the bottom with its own most
    common color (a page that ends early shows its background below). A pixel's edge is the size of the
    color change to its right and below it; the edges agree by the share of both pages' edge strength that
    the other page matches within SLACK pixels (a box moved a little still counts). The colors agree by 1
    minus the mean absolute difference of the pixels' RGB values / 255. 1 for the same page, lower the more
    of it differs; a page with no edges, blank or the black image of a failed page, 0. (SSIM, the score this
    replaced, ranked a blank page above a restyled one: flat windows agree with flat windows.)"""
    name = "edge-color"
    WIDTH, SLACK = 128, 1

    def similarity(self, images, reference_images):
        return [self.score(image, reference) for image, reference in zip(images, reference_images)]

    @classmethod
    def score(cls, image, reference):
        scaled = [cls.scaled_down(image), cls.scaled_down(reference)]
        height = max(s.height for s in scaled)
        page, target = (numpy.asarray(cls.padded(s, height), dtype=numpy.float64) for s in scaled)  # [height, WIDTH, 3]
        colors = 1 - numpy.abs(page - target).mean() / 255
        return float(cls.edge_agreement(cls.edges(page), cls.edges(target)) * colors)

    @classmethod
    def edge_agreement(cls, edges, reference_edges):
        """The share of both pages' edge strength that the other page has within SLACK pixels: 1 for two plain pages."""
        total = edges.sum() + reference_edges.sum()
        if total == 0:
            return 1.0
        matched = (numpy.minimum(edges, cls.nearby_max(reference_edges)).sum()
                   + numpy.minimum(reference_edges, cls.nearby_max(edges)).sum())
        return matched / total

    @staticmethod
    def edges(pixels):
        """The size of the color change from each pixel to the next one right and below: [height - 1, WIDTH - 1]."""
        down = numpy.abs(numpy.diff(pixels, axis=0))[:, :-1].sum(-1)
        across = numpy.abs(numpy.diff(pixels, axis=1))[:-1].sum(-1)
        return down + across

    @classmethod
    def nearby_max(cls, edges):
        """The largest edge within SLACK pixels of each pixel."""
        side = 2 * cls.SLACK + 1
        return numpy.lib.stride_tricks.sliding_window_view(numpy.pad(edges, cls.SLACK), (side, side)).max(axis=(-2, -1))

    @classmethod
    def scaled_down(cls, picture):
        height = max(2, cls.WIDTH * picture.height // picture.width)
        return picture.convert("RGB").resize((cls.WIDTH, height))

    @staticmethod
    def padded(image, height):
        colors = image.getcolors(image.width * image.height)
        canvas = Image.new("RGB", (image.width, height), max(colors)[1])
        canvas.paste(image, (0, 0))
        return canvas


def image_score_name(clip=None):
    """What scores a page, as each scored line's `image_score` names it: 'clip:<checkpoint>', or 'edge-color'."""
    return f"clip:{clip}" if clip else EdgeColorSimilarity.name


class ClipScorer:
    """Image embeddings of any CLIP checkpoint (a folder with the model and its image processor, or a hub id)."""

    def __init__(self, path_or_id=DEFAULT_CLIP, device=None):
        self.name = image_score_name(path_or_id)
        import torch
        from transformers import CLIPImageProcessor, CLIPModel

        def load(local_files_only):
            return (CLIPImageProcessor.from_pretrained(path_or_id, local_files_only=local_files_only),
                    CLIPModel.from_pretrained(path_or_id, local_files_only=local_files_only))
        try:
            try:  # a folder, or a hub id already in the local cache
                self.processor, self.model = load(local_files_only=True)
            except OSError:
                if os.path.isdir(path_or_id) or not hub_reachable():
                    raise
                self.processor, self.model = load(local_files_only=False)
        except (OSError, ValueError) as e:
            raise ClipUnavailable(
                f"cannot load the CLIP checkpoint {path_or_id!r} ({str(e).splitlines()[0][:160]}). Offline, pass a "
                "local copy with --clip PATH: a folder holding a CLIPModel and its CLIPImageProcessor (save_pretrained "
                f"of both), e.g. {DEFAULT_CLIP} downloaded on a machine with network access.") from None
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.eval().to(self.device)

    def embed(self, images, batch_size=16):
        """[n, dim] unit-length image embeddings."""
        import torch
        chunks = []
        with torch.no_grad():
            for start in range(0, len(images), batch_size):
                pixels = self.processor(images=images[start:start + batch_size], return_tensors="pt")["pixel_values"]
                features = self.model.get_image_features(pixel_values=pixels.to(self.device))
                features = getattr(features, "pooler_output", features)  # some versions return an output object
                chunks.append(torch.nn.functional.normalize(features.float(), dim=-1).cpu())
        return torch.cat(chunks)

    def similarity(self, images, reference_images):
        """Cosine similarity of each image with its reference, in [-1, 1]."""
        return (self.embed(images) * self.embed(reference_images)).sum(-1).clamp(-1, 1).tolist()


def score_pages(scorer, pages, tasks):
    """The frontend reward of each final page: its full-page screenshot's similarity with its task's reference
    page's, both as shown on the task's site (as_shown), by `scorer` (EdgeColorSimilarity or ClipScorer). No
    page scores as a failed one: a black image, as in the official evaluator."""
    screenshots = render_many([as_shown(task, page) for page, task in zip(pages, tasks)], full_page=True)
    screenshots = [image if page and page.strip() else failed_image() for page, image in zip(pages, screenshots)]
    return scorer.similarity(screenshots, render_many([as_shown(t, t["ground_truth"]) for t in tasks], full_page=True))


def task_outcomes(rewards, other_rewards):
    """{task_id: 1 (a win), 0.5 (a tie) or 0 (a loss)} over the tasks both hold, by the mean of each side's
    rewards ({task_id: [reward, ...]} each)."""
    outcomes = {}
    for task_id in sorted(set(rewards) & set(other_rewards)):
        mine = round(sum(rewards[task_id]) / len(rewards[task_id]), 6)
        theirs = round(sum(other_rewards[task_id]) / len(other_rewards[task_id]), 6)
        outcomes[task_id] = 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0
    return outcomes


def win_rate(rewards, other_rewards):
    """Win rate over the tasks both hold (task_outcomes: a higher mean wins, a tie counts 1/2).

    Returns (rate or None when no task matches, wins, ties, losses)."""
    outcomes = list(task_outcomes(rewards, other_rewards).values())
    wins, ties, losses = (outcomes.count(value) for value in (1.0, 0.5, 0.0))
    return (sum(outcomes) / len(outcomes) if outcomes else None), wins, ties, losses
