"""The shipped frontend (web design) tasks of ColBench: the page template of colbench/page.py, filled with drawn facts.

    python -m colbench.tasks.frontend              # rewrites colbench/tasks/frontend_{train,test}.jsonl
    python -m colbench.tasks.frontend --out DIR    # writes the two files into DIR instead

The output is byte-identical on every run: every draw comes from a `random.Random` seeded with
`--seed`, the split and the task's number, never from the clock.

A task is a vague request for a small website ("I run a bakery called Golden Crust and would like a
simple site for it...") and the reference page: its kind's default page (colbench/page.py DEFAULTS) with
DEPARTURES of its four subjects drawn anew. The request names the business (the page's title) and hints at
each departure in plain words, never at its value (colbench/frontend.py HINTS); `departures` lists them.
"""
import argparse
import os
import random

from colbench.data import write_jsonl
from colbench.frontend import HINTS
from colbench.page import (ACCENTS, COLOR_PARTS, DARK, DEFAULTS, LAYOUTS, PALETTES, SECTIONS, STYLE, SUBJECTS,
                           build_page)
from colbench.tasks import FOLDER

SEED = 5400
N_TRAIN, N_TEST = 120, 40
DEPARTURES = 2  # subjects a task departs in, of the four: a fixed script asks two, and two at random fit 1 in 6

# kind of site (a key of DEFAULTS) -> (the word the request uses, business names)
SITES = {
    "bakery": ("bakery", ["Golden Crust", "Rise and Shine Bakery", "The Flour Pot", "Sweet Crumb"]),
    "law firm": ("law firm", ["Carter Associates", "Hale Legal Group", "Whitmore Law", "Brightline Attorneys"]),
    "hiking club": ("hiking club", ["Summit Seekers", "Trailblazers Club", "Ridge Runners", "Pine Path Hikers"]),
    "dental clinic": ("dental clinic", ["Bright Smile Dental", "Gentle Care Dentistry", "Pearl Dental Studio",
                                        "Riverside Dental"]),
    "yoga studio": ("yoga studio", ["Lotus Flow", "Still Water Yoga", "Sunrise Studio", "Breathe Yoga Loft"]),
    "bookstore": ("bookstore", ["Paper Lantern Books", "The Reading Nook", "Chapter One", "Owl and Ink Books"]),
    "coffee shop": ("coffee shop", ["Bean There", "The Daily Grind", "Copper Cup Cafe", "Morning Ritual"]),
    "gym": ("gym", ["Iron Works Gym", "Peak Fitness", "Core Strength Club", "Pulse Athletics"]),
}
REQUESTS = [
    "I run a {what} called {name} and I'd like a simple website for it.",
    "Can you make a homepage for {name}? It's a {what}.",
    "We need a website for our {what}, {name}.",
    "I want a one-page site for {name}, my {what}, so people can find out about us.",
    "Please build a landing page for {name}, a {what} in town.",
]


def departed(subject, default, rng):
    """A value of `subject` other than the kind's `default` page's."""
    if subject == "colors":  # light for dark, or dark for light: colors that move the page
        dark = next(name in DARK for name, colors in PALETTES.items() if list(colors) == list(default["colors"].values()))
        return dict(zip(COLOR_PARTS, PALETTES[rng.choice([name for name in sorted(PALETTES) if (name in DARK) != dark])]))
    if subject == "accent":
        return rng.choice([accent for accent in ACCENTS if accent != default["accent"]])
    if subject == "layout":
        return rng.choice([layout for layout in sorted(LAYOUTS) if layout != default["layout"]])
    sections = list(default["sections"])  # two of the kind's sections replaced by others, and a new order
    others = [title for title, _ in SECTIONS.values() if title not in sections]
    for position in rng.sample(range(len(sections)), 2):
        sections[position] = others.pop(rng.randrange(len(others)))
    rng.shuffle(sections)
    return sections


def draw_task(rng):
    """{site, departures, problem_description, ground_truth, stylesheet} of one task, from `rng`."""
    site = rng.choice(sorted(SITES))
    what, names = SITES[site]
    name, default = rng.choice(names), DEFAULTS[site]
    while True:  # the accent never the background: a heading's bar would vanish
        departures = sorted(rng.sample(SUBJECTS, DEPARTURES), key=SUBJECTS.index)
        facts = {**default, **{subject: departed(subject, default, rng) for subject in departures}}
        if facts["accent"] != facts["colors"]["background"]:
            break
    hints = [rng.choice(HINTS[subject]) for subject in departures]
    rng.shuffle(hints)
    request = " ".join([rng.choice(REQUESTS).format(what=what, name=name), *hints])
    return {"site": site, "departures": departures, "problem_description": request,
            "ground_truth": build_page(facts, name), "stylesheet": STYLE}


def make_tasks(split, count, seed=SEED, pages=None):
    """`count` tasks of `split`, each page unlike those in `pages` (a set it adds to): a task is drawn again from
    its own rng until its page is new, so that no page fits two tasks of any split."""
    pages, tasks = set() if pages is None else pages, []
    for number in range(1, count + 1):
        rng = random.Random(f"{seed}-{split}-{number}")
        task = draw_task(rng)
        while task["ground_truth"] in pages:
            task = draw_task(rng)
        pages.add(task["ground_truth"])
        tasks.append({"task_id": f"frontend-{split}-{number:04d}", **task})
    return tasks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FOLDER,
                        help="folder for frontend_train.jsonl and frontend_test.jsonl")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of every draw")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pages = set()
    for split, count in (("train", N_TRAIN), ("test", N_TEST)):
        path = os.path.join(args.out, f"frontend_{split}.jsonl")
        tasks = make_tasks(split, count, args.seed, pages)
        write_jsonl(path, tasks)
        sizes = [len(task["ground_truth"]) for task in tasks]
        print(f"{path}: {len(tasks)} tasks, pages {min(sizes)}-{max(sizes)} characters")


if __name__ == "__main__":
    main()
