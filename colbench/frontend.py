"""Frontend tasks: what the simulated human says about a page, and how a final page is scored.

The embedded simulator (offline, deterministic) answers a question about the colors, the font, the
layout, the menu, the sections or the title with what the reference page has (`page_facts`), for at
most MAX_TOPICS_PER_QUESTION of them at once (a question naming more is asked to name fewer). Shown a
page, it compares it with the reference page twice over: their screenshots (colbench/render.py) for
the colors one sees, and their HTML for structure (navigation, title, sections, sidebar, card grid,
footer) and styles (fonts, sizes, text color). Each difference found gets a weight; the few heaviest
are said in plain words, cut at MAX_REPLY_CHARS. A turn with neither (a request for "any details",
"what should it look like?") gets nothing but NOTHING_ASKED, as the backend human's "I don't know":
what to ask is the skill.

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

from colbench.env import html_page
from colbench.render import failed_image, render, render_many

MAX_REPLY_CHARS = 1000
MAX_DIFFERENCES = 3     # the human names at most this many differences per turn
NO_PAGE = "You didn't show me a page this time, so I can't compare."
NOTHING_ASKED = NO_PAGE + " And I can't tell which part of the page you are asking about."
TOO_MANY_TOPICS = "You are asking about many things at once; ask me about one or two of them."
MAX_TOPICS_PER_QUESTION = 2
LOOKS_RIGHT = "That looks very close to what I want."

# ---------------------------------------------------------------- colors in words

NAMED_COLORS = {
    "white": (255, 255, 255), "off-white": (245, 240, 230), "cream": (253, 246, 227), "light gray": (220, 222, 225),
    "gray": (150, 150, 150), "dark gray": (80, 80, 80), "charcoal": (40, 40, 40), "black": (10, 10, 10),
    "navy": (15, 28, 63), "dark blue": (21, 60, 140), "blue": (30, 136, 229), "light blue": (228, 242, 253),
    "teal": (0, 128, 118), "mint": (225, 248, 238), "dark green": (27, 80, 35), "green": (46, 160, 60),
    "light green": (225, 242, 225), "lime": (164, 228, 0), "olive": (110, 110, 30), "yellow": (250, 225, 40),
    "gold": (212, 160, 23), "beige": (244, 233, 216), "orange": (255, 122, 26), "brown": (120, 66, 30),
    "dark brown": (60, 40, 30), "terracotta": (192, 88, 58), "dark red": (130, 20, 20), "red": (205, 40, 40),
    "pink": (240, 160, 190), "light pink": (255, 236, 240), "magenta": (214, 63, 108), "plum": (142, 36, 95),
    "purple": (110, 70, 180), "dark purple": (70, 40, 120), "lavender": (238, 230, 250),
}


def color_distance(a, b):
    """A cheap perceptual distance between two RGB triples ('redmean'), 0 to about 765."""
    mean_red = (a[0] + b[0]) / 2
    dr, dg, db = a[0] - b[0], a[1] - b[1], a[2] - b[2]
    return ((2 + mean_red / 256) * dr * dr + 4 * dg * dg + (2 + (255 - mean_red) / 256) * db * db) ** 0.5


def color_name(rgb):
    return min(NAMED_COLORS, key=lambda name: color_distance(rgb, NAMED_COLORS[name]))


def parse_color(value):
    """'#abc', '#aabbcc', 'rgb(1, 2, 3)' or a few names -> (r, g, b); None otherwise."""
    value = value.strip().lower()
    hex_match = re.fullmatch(r"#([0-9a-f]{3}|[0-9a-f]{6})(?:[0-9a-f]{2})?", value)
    if hex_match:
        digits = hex_match.group(1)
        digits = "".join(c * 2 for c in digits) if len(digits) == 3 else digits
        return tuple(int(digits[i:i + 2], 16) for i in (0, 2, 4))
    rgb_match = re.fullmatch(r"rgba?\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+).*\)", value)
    if rgb_match:
        return tuple(min(255, int(c)) for c in rgb_match.groups())
    basic = {"white": (255, 255, 255), "black": (0, 0, 0), "red": (255, 0, 0), "blue": (0, 0, 255),
             "green": (0, 128, 0), "gray": (128, 128, 128), "grey": (128, 128, 128), "navy": (0, 0, 128)}
    return basic.get(value)


# ---------------------------------------------------------------- what a page is made of

class PageParser(html.parser.HTMLParser):
    """Collects the parts of a page the simulator talks about; tolerant of broken HTML."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open_tags = []
        self.tags = set()
        self.headings = {"h1": [], "h2": []}
        self.nav_links, self.buttons, self.css = [], [], []
        self.body_style = ""
        self._text = None  # (tag, [pieces]) of the heading, link or button being read

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag == "body":
            self.body_style = attrs.get("style") or ""
        if tag in ("h1", "h2", "a", "button") and self._text is None:
            self._text = (tag, [])
        if tag not in ("br", "img", "input", "meta", "link", "hr"):
            self.open_tags.append(tag)

    def handle_endtag(self, tag):
        if self._text and self._text[0] == tag:
            text = " ".join("".join(self._text[1]).split())
            if text:
                if tag in self.headings:
                    self.headings[tag].append(text)
                elif tag == "a" and ("nav" in self.open_tags or "aside" in self.open_tags):
                    self.nav_links.append(text)
                elif tag == "button" or tag == "a":
                    self.buttons.append(text)
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
    """{selector: {property: value}} of a style sheet; later rules win, as in a browser."""
    rules = {}
    css_text = re.sub(r"/\*.*?\*/", "", css_text, flags=re.S)
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css_text):
        declarations = dict((p.strip().lower(), v.strip()) for p, _, v in
                            (d.partition(":") for d in body.split(";")) if v.strip())
        for selector in selectors.split(","):
            rules.setdefault(" ".join(selector.split()).lower(), {}).update(declarations)
    return rules


def font_kind(family):
    family = family.lower()
    if "mono" in family or "courier" in family:
        return "a monospace (typewriter) font"
    if "sans" in family or any(f in family for f in ("arial", "helvetica", "verdana", "trebuchet")):
        return "a sans-serif font"
    if "serif" in family or any(f in family for f in ("georgia", "times", "palatino")):
        return "a serif font"
    return None


def page_features(page):
    """What the simulator compares, read off a page's HTML ('' for no page)."""
    parser = PageParser()
    try:
        parser.feed(page or "")
        parser.close()
    except Exception:  # html.parser can still choke on some garbage; what was read so far counts
        pass
    rules = css_rules(" ".join(parser.css))
    body = dict(rules.get("body", {}))
    body.update(css_rules("body{" + parser.body_style + "}").get("body", {}))
    h1_size = re.match(r"(\d+(?:\.\d+)?)px", rules.get("h1", {}).get("font-size", ""))
    css_text = " ".join(parser.css).lower() + " " + (page or "").lower()
    return {
        "title": parser.headings["h1"][0] if parser.headings["h1"] else None,
        "sections": parser.headings["h2"],
        "nav": "nav" in parser.tags or bool(parser.nav_links),
        "nav_links": parser.nav_links,
        "sidebar": "aside" in parser.tags,
        "card_grid": "grid-template-columns" in css_text and "card" in css_text,
        "footer": "footer" in parser.tags,
        "form": "form" in parser.tags or "input" in parser.tags,
        "text_color": parse_color(body.get("color", "")) or (0, 0, 0),
        "font": font_kind(body.get("font-family", "")) or "a serif font",  # a browser's default is serif
        "title_size": float(h1_size.group(1)) if h1_size else 32.0,         # and 2em for an h1
    }


def pixel_features(image):
    """Colors one sees: the page's main background, and the color along the top and the left edge."""
    small = image.convert("RGB").resize((64, 48))
    pixels = [tuple(pixel) for pixel in numpy.asarray(small).reshape(-1, 3).tolist()]

    def dominant(region):
        """The mean color of the most common of 16^3 color bins."""
        bins = {}
        for pixel in region:
            bins.setdefault(tuple(c // 16 for c in pixel), []).append(pixel)
        members = max(bins.values(), key=len)
        return tuple(round(sum(p[i] for p in members) / len(members)) for i in range(3))

    return {"background": dominant(pixels),
            "top": dominant(pixels[: 64 * 6]),                                   # the top eighth
            "left": dominant([p for i, p in enumerate(pixels) if i % 64 < 12]),  # the left fifth
            "thumbnail": small}


# ---------------------------------------------------------------- the differences, heaviest first

def similar_text(a, b):
    words_a, words_b = set(re.findall(r"\w+", a.lower())), set(re.findall(r"\w+", b.lower()))
    return len(words_a & words_b) / max(1, len(words_a | words_b)) >= 0.5


def missing_from(wanted, present):
    return [w for w in wanted if not any(similar_text(w, p) for p in present)]


def quoted(names):
    names = [f"'{n}'" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def sections(names):
    return "section" if len(names) == 1 else "sections"


def differences(reference_page, reference_image, agent_page, agent_image):
    """[(weight, sentence), ...] of how the agent's page differs from the reference, heaviest first."""
    want, have = page_features(reference_page), page_features(agent_page)
    want_px, have_px = pixel_features(reference_image), pixel_features(agent_image)
    found = []

    def color_difference(weight, where, wanted, had):
        distance = color_distance(wanted, had)
        if distance > 120 and color_name(wanted) != color_name(had):
            found.append((weight * min(1.0, distance / 400),
                          f"{where} should be {color_name(wanted)}, not {color_name(had)}."))

    color_difference(1.0, "The page background", want_px["background"], have_px["background"])
    if want["nav"] and not have["nav"]:
        where = "down the left side" if want["sidebar"] else "at the top"
        found.append((0.9, f"I want a navigation menu {where} with links like {quoted(want['nav_links'][:4])}."))
    elif have["nav"] and not want["nav"]:
        found.append((0.45, "I don't want a navigation menu at all."))
    elif want["nav"] and missing_from(want["nav_links"], have["nav_links"]):
        found.append((0.5, f"The menu should have the links {quoted(want['nav_links'][:5])}."))
    if want["title"] and (not have["title"] or not similar_text(want["title"], have["title"])):
        found.append((0.85, f"The main title should say '{want['title']}'."))
    if want["sidebar"] != have["sidebar"]:
        found.append((0.8, "The page should have a colored sidebar on the left holding the title and the menu."
                      if want["sidebar"] else "I don't want a sidebar: the content should run across the page."))
    for edge, where, weight in (("top", "The band across the top", 0.7), ("left", "The left side", 0.6)):
        # Only a band of its own color (a header, a sidebar); a band of background color was covered above.
        wanted_band = color_distance(want_px[edge], want_px["background"])
        proposed_band = color_distance(have_px[edge], have_px["background"])
        if max(wanted_band, proposed_band) > 120:
            color_difference(weight, where, want_px[edge], have_px[edge])
    missing = missing_from(want["sections"], have["sections"])
    if missing:
        found.append((0.55 + 0.05 * len(missing), f"You're missing the {sections(missing)} {quoted(missing)}."))
    extra = missing_from(have["sections"], want["sections"])
    if extra and have["sections"]:
        found.append((0.35, f"I don't need the {sections(extra)} {quoted(extra[:3])}."))
    reordered = have["sections"] != want["sections"] and len(have["sections"]) == len(want["sections"])
    if not missing and want["sections"] and reordered:
        found.append((0.3, f"The sections should come in this order: {quoted(want['sections'])}."))
    if want["card_grid"] and not have["card_grid"]:
        found.append((0.5, "Some content should be laid out as a grid of cards, three to a row."))
    color_difference(0.5, "The text", want["text_color"], have["text_color"])
    if want["font"] != have["font"]:
        found.append((0.3, f"The text should be in {want['font']}, not {have['font']}."))
    ratio = want["title_size"] / max(have["title_size"], 1.0)
    if ratio > 1.35 or ratio < 1 / 1.35:
        found.append((0.3, f"The main title should be much {'bigger' if ratio > 1 else 'smaller'}."))
    if want["footer"] != have["footer"]:
        found.append((0.25, "There should be a footer at the bottom." if want["footer"] else "I don't want a footer."))
    if want["form"] and not have["form"]:
        found.append((0.2, "The contact part should have a small form with an email box and a button."))
    return sorted(found, key=lambda item: -item[0])


def describe_differences(reference_page, agent_page, reference_image=None, agent_image=None):
    """What the human says about `agent_page`, at most MAX_REPLY_CHARS."""
    reference_image = reference_image or render(reference_page)
    found = differences(reference_page, reference_image, agent_page, agent_image or render(agent_page))
    sentences = [sentence for _, sentence in found[:MAX_DIFFERENCES]] or [LOOKS_RIGHT]
    return " ".join(sentences)[:MAX_REPLY_CHARS]


# ---------------------------------------------------------------- what the human tells when asked

# A topic -> the words that ask about it. A request for details that names none gets NOTHING_ASKED.
TOPIC_WORDS = {"colors": ("color", "colour", "palette", "background", "theme"), "font": ("font", "typeface"),
               "layout": ("layout", "laid out", "structure", "arrange"), "menu": ("menu", "navigation", "links"),
               "sections": ("section", "content", "parts"), "title": ("title", "heading", "name")}
LAYOUTS = {"sidebar": "a sidebar on the left holding the title and the menu, the content beside it",
           "hero": "a big banner across the top with the title, the content below it",
           "cards": "the content as a grid of cards, three to a row",
           "single": "one simple column"}


def page_facts(page):
    """What a person who wants `page` can tell about it, read off its HTML: {topic: value}. colors: the
    background, the text, the headings and (where there is one) the header band, as CSS hex colors."""
    parser = PageParser()
    parser.feed(page)
    rules = css_rules(" ".join(parser.css))
    colors = {"background": rules.get("body", {}).get("background"), "text": rules.get("body", {}).get("color"),
              "headings": rules.get("h2", {}).get("color") or rules.get("a", {}).get("color")}
    for band in (".hero", "aside", "header", "nav", "footer"):
        if rules.get(band, {}).get("background"):
            colors["header"] = rules[band]["background"]
            break
    layout = ("sidebar" if "aside" in parser.tags else "hero" if ".hero" in rules
              else "cards" if "grid-template-columns" in " ".join(parser.css) else "single")
    facts = {"colors": {part: color for part, color in colors.items() if color},
             "font": rules.get("body", {}).get("font-family"), "layout": layout, "menu": parser.nav_links,
             "sections": parser.headings["h2"], "title": parser.headings["h1"][0] if parser.headings["h1"] else None}
    return {topic: value for topic, value in facts.items() if value is not None}


def fact_sentence(topic, value):
    """How the human says one topic's facts: exact values, so that an agent can copy them into its page."""
    if topic == "colors":
        parts = [f"{'the ' if i else 'The '}{part} {color} ({color_name(parse_color(color) or (0, 0, 0))})"
                 for i, (part, color) in enumerate(value.items())]
        return "Colors: " + ", ".join(parts) + "."
    if topic == "font":
        return f"The font is {value}."
    if topic == "layout":
        return f"The layout: {LAYOUTS[value]}."
    if topic == "menu":
        return f"A menu with the links {', '.join(value)}." if value else "No menu."
    if topic == "sections":
        return f"The sections, in this order: {', '.join(value)}."
    return f"The title is '{value}'."


def page_summary(page):
    """Everything the human can tell about `page`: each topic's fact_sentence, in page_facts' order."""
    return " ".join(fact_sentence(topic, value) for topic, value in page_facts(page).items())


def topics_asked(message):
    """The topics whose words `message` holds, in TOPIC_WORDS' order."""
    message = message.lower()
    return [topic for topic, words in TOPIC_WORDS.items() if any(word in message for word in words)]


def topics_told(task, dialogue):
    """{topic: value} of the reference page's facts (page_facts) that the human's replies in `dialogue` told."""
    told = " ".join(turn["content"] for turn in dialogue[1:] if turn["role"] == "user")
    facts = page_facts(task["ground_truth"])
    return {topic: value for topic, value in facts.items() if fact_sentence(topic, value) in told}


def embedded_reply(task, dialogue):
    """The embedded human's answer to the agent's latest turn of a frontend task: shown a page, the differences
    from the reference page; else the facts of the topics the question names (at most MAX_TOPICS_PER_QUESTION),
    or nothing (NOTHING_ASKED) when it names none."""
    page = html_page(dialogue[-1]["content"])
    if page is not None:
        return describe_differences(task["ground_truth"], page)
    facts = page_facts(task["ground_truth"])
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
    images = [render(task["ground_truth"])] + ([render(agent_page)] if agent_page is not None else [])
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


def score_pages(scorer, pages, reference_pages):
    """The frontend reward of each final page: its full-page screenshot's similarity with the reference's,
    by `scorer` (EdgeColorSimilarity or ClipScorer). No page scores as a failed one: a black image, as in
    the official evaluator."""
    screenshots = render_many(pages, full_page=True)
    screenshots = [image if page and page.strip() else failed_image() for page, image in zip(pages, screenshots)]
    return scorer.similarity(screenshots, render_many(reference_pages, full_page=True))


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
