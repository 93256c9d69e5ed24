"""The room of the frontend tasks: what each subject the human tells is worth to a page's score.

    python -m harness.room colbench/tasks/frontend_test.jsonl     # -> runs/room.json, and a table

On each task, the offline image score (colbench/frontend.py EdgeColorSimilarity) of: a blank page; its kind's
default page (colbench/page.py DEFAULTS, under the request's name: what a script that asks nothing writes);
the default page with one subject set right; the reference page with one subject left at the default; and the
reference itself. A subject is set right or left at the default only where the task departs in it. A departure
worth telling moves the mean when set right alone; none should make up most of the room (default page to
reference) alone. And the page that one question about a fixed pair of subjects lets a script write (the default
page with the pair's departures right): what any fixed question gets in two turns, where reading the request's
hints gets the reference.
"""
import argparse
import itertools
import json

from colbench.cli import fail
from colbench.data import DataError, load_tasks
from colbench.frontend import EdgeColorSimilarity, reference_facts, score_pages
from colbench.page import SUBJECTS, build_page, default_facts
from colbench.scripted import request_title


def variants(task):
    """{name: page} of one task: blank, default, '+subject' (default, that subject right), '-subject'
    (reference, that subject at the default), reference."""
    facts, default, title = reference_facts(task), default_facts(task), request_title(task)
    pages = {"blank": "", "default": build_page(default, title)}
    for subject in SUBJECTS:
        pages[f"+{subject}"] = build_page({**default, subject: facts[subject]}, title)
        pages[f"-{subject}"] = build_page({**facts, subject: default[subject]}, title)
    for pair in itertools.combinations(SUBJECTS, 2):
        pages["ask " + "+".join(pair)] = build_page({**default, **{s: facts[s] for s in pair}}, title)
    pages["reference"] = task["ground_truth"]
    return pages


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", help="frontend tasks JSONL (colbench/page.py's template pages)")
    parser.add_argument("--out", default="runs/room.json", help="JSON of the mean scores")
    args = parser.parse_args()
    try:
        tasks = load_tasks(args.tasks)
    except DataError as e:
        fail(e)
    pages = [variants(task) for task in tasks]
    names = list(pages[0])
    scores = score_pages(EdgeColorSimilarity(), [p[n] for p in pages for n in names], [t for t in tasks for _ in names])
    mean = {n: sum(scores[i * len(names) + k] for i in range(len(tasks))) / len(tasks) for k, n in enumerate(names)}
    room = mean["reference"] - mean["default"]
    print(f"{len(tasks)} tasks; the room, default page {mean['default']:.3f} to reference {mean['reference']:.3f}: "
          f"{room:.3f}; blank page {mean['blank']:.3f}\n\n| subject | set right alone | share of the room | "
          "left at the default alone | cost |\n|---|---|---|---|---|")
    for s in SUBJECTS:
        gain, cost = mean[f"+{s}"] - mean["default"], mean["reference"] - mean[f"-{s}"]
        print(f"| {s} | {mean[f'+{s}']:.3f} ({gain:+.3f}) | {gain / room:.0%} | {mean[f'-{s}']:.3f} | {cost:+.3f} |")
    pairs = [name for name in names if name.startswith("ask ")]
    print("\n| asked, a fixed pair | mean score |\n|---|---|\n" + "\n".join(
        f"| {name[4:]} | {mean[name]:.3f} |" for name in sorted(pairs, key=mean.get, reverse=True)))
    with open(args.out, "w") as f:
        json.dump({"tasks": len(tasks), "mean_score": mean}, f, indent=1)


if __name__ == "__main__":
    main()
