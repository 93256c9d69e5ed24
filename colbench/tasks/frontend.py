"""The shipped frontend (web design) tasks of ColBench: the page template of colbench/page.py, filled with drawn facts.

    python -m colbench.tasks.frontend              # rewrites colbench/tasks/frontend_{train,test}.jsonl
    python -m colbench.tasks.frontend --out DIR    # writes the two files into DIR instead

The output is byte-identical on every run: every draw comes from a `random.Random` seeded with
`--seed`, the split and the task's number, never from the clock.

A task is a vague request for a small website ("I run a bakery called Golden Crust and would like a
simple site for it...") and the reference page: colbench/page.py's template filled with the task's
facts, drawn here: a palette, a layout, and three or four of the section kinds in some order.
The request names the business (the page's title) and nothing about the design; the facts are what
the agent has to find out from the simulated human.
"""
import argparse
import os
import random

from colbench.data import write_jsonl
from colbench.page import COLOR_PARTS, LAYOUTS, PALETTES, SECTIONS, STYLE, build_page
from colbench.tasks import FOLDER

SEED = 5400
N_TRAIN, N_TEST = 120, 40

# kind of site -> (the word the request uses, business names)
SITES = {
    "bakery": ("bakery", ["Golden Crust", "Rise and Shine Bakery", "The Flour Pot", "Sweet Crumb"]),
    "law firm": ("law firm", ["Carter Associates", "Hale Legal Group", "Whitmore Law", "Brightline Attorneys"]),
    "hiking club": ("hiking club", ["Summit Seekers", "Trailblazers Club", "Ridge Runners", "Pine Path Hikers"]),
    "dental clinic": ("dental clinic", ["Bright Smile Dental", "Gentle Care Dentistry", "Pearl Dental Studio",
                                        "Riverside Dental"]),
    "yoga studio": ("yoga studio", ["Lotus Flow", "Still Water Yoga", "Sunrise Studio", "Breathe Yoga Loft"]),
    "bookstore": ("bookstore", ["Paper Lantern Books", "The Reading Nook", "Chapter One", "Owl and Ink Books"]),
    "coffee shop": ("coffee shop", ["Bean There", "The Daily Grind", "Copper Cup Cafe", "Morning Ritual"]),
    "architecture firm": ("architecture studio", ["Linea Architects", "Northlight Studio", "Form and Field",
                                                  "Atelier Stone"]),
    "music festival": ("music festival", ["Harbor Sound Fest", "Meadow Beats", "Riverside Jazz Days",
                                          "Echo Valley Festival"]),
    "animal shelter": ("animal shelter", ["Happy Paws Rescue", "Second Chance Shelter", "Whisker Haven",
                                          "Safe Harbor Animal Rescue"]),
    "plumbing company": ("plumbing company", ["FlowRight Plumbing", "Pipe Pros", "Clearwater Plumbing",
                                              "Steady Drip Repairs"]),
    "tech startup": ("software startup", ["Nimbus Notes", "Pixelcraft", "TaskPilot", "Loopwise"]),
    "florist": ("flower shop", ["Petal and Stem", "Wild Bloom", "The Flower Cart", "Rosewood Florals"]),
    "fitness gym": ("gym", ["Iron Works Gym", "Peak Fitness", "Core Strength Club", "Pulse Athletics"]),
}
REQUESTS = [
    "I run a {what} called {name} and I'd like a simple website for it.",
    "Can you make a homepage for {name}? It's a {what}.",
    "We need a website for our {what}, {name}. Nothing fancy, just something that looks good.",
    "I want a one-page site for {name}, my {what}, so people can find out about us.",
    "Please build a landing page for {name}, a {what} in town.",
]
REQUEST_ENDINGS = ["", " I have a look in mind, so ask me.", " I'll tell you what I think as we go.",
                   " Show me a draft and I'll say what to change."]


def draw_task(rng):
    """{site, palette, layout, sections, problem_description, ground_truth, stylesheet} of one task, from `rng`."""
    site = rng.choice(sorted(SITES))
    what, names = SITES[site]
    name = rng.choice(names)
    palette = rng.choice(sorted(PALETTES))
    facts = {"colors": dict(zip(COLOR_PARTS, PALETTES[palette])), "layout": rng.choice(sorted(LAYOUTS)),
             "sections": [SECTIONS[kind][0] for kind in rng.sample(sorted(SECTIONS), rng.choice([3, 4]))]}
    request = rng.choice(REQUESTS).format(what=what, name=name) + rng.choice(REQUEST_ENDINGS)
    return {"site": site, "palette": palette, **{k: v for k, v in facts.items() if k != "colors"},
            "problem_description": request, "ground_truth": build_page(facts, name), "stylesheet": STYLE}


def make_tasks(split, count, seed=SEED):
    return [{"task_id": f"frontend-{split}-{number:04d}", **draw_task(random.Random(f"{seed}-{split}-{number}"))}
            for number in range(1, count + 1)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FOLDER,
                        help="folder for frontend_train.jsonl and frontend_test.jsonl")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of every draw")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for split, count in (("train", N_TRAIN), ("test", N_TEST)):
        path = os.path.join(args.out, f"frontend_{split}.jsonl")
        tasks = make_tasks(split, count, args.seed)
        write_jsonl(path, tasks)
        sizes = [len(task["ground_truth"]) for task in tasks]
        print(f"{path}: {len(tasks)} tasks, pages {min(sizes)}-{max(sizes)} characters")


if __name__ == "__main__":
    main()
