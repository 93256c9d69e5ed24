"""Stage 2 of SWEET-RL: score trajectories, backend answers by unit tests, frontend pages by image.

    python evaluate.py runs/backend_train.traj.jsonl     # -> runs/backend_train.scored.jsonl

Backend: the final code is taken out of `answer` and run, with the task's solution, on every test call
in colbench/sandbox.py (never in this process). A test passes when the two return values are equal
under `==` and the solution's is not None, the official rule; a test whose solution gives no value is
the task's fault, left out and named in `broken_tests`. Adds `reward` (fraction of tests passed),
`success` (all passed), `tests_passed`, `tests_total`, `test_results`, `failure` and `failure_detail`.
Frontend: `reward` is the similarity of the final page's full-page screenshot to the target page's,
the CLIP cosine with --clip (the paper's), else `edge-color` (edges and colors agreeing, 0 for a blank
page); `image_score` names it, `answered_page` says whether there was a page, and `success` that the
reward is its task's best in the file and above the task's worst (frontend_success). --against adds
the win rate per task. Prints the metrics.
"""
import argparse
import collections
import functools
import json
import os
import queue
import re
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from tqdm import tqdm

from colbench import frontend
from colbench.cli import fail, positive_float, positive_int, trajectories_or_fail
from colbench.data import default_output, grouped, succeeded, task_kind, write_jsonl
from colbench.env import ANSWER_MARKER
from colbench.render import ChromiumMissing
from colbench.sandbox import Sandbox

CATEGORIES = ("syntax error", "exception", "timeout", "wrong output", "out of memory", "crashed",
              "banned substring")
BROKEN = "broken test"  # in test_results: the reference gave nothing to compare with

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("trajectories",
                    help="trajectory JSONL (project schema or official offline file)")
parser.add_argument("--out", help="scored JSONL (default: runs/<stem>.scored.jsonl)")
parser.add_argument("--workers", type=positive_int, default=len(os.sched_getaffinity(0)),
                    help="sandboxes running side by side (default: number of cores)")
parser.add_argument("--timeout", type=positive_float, default=1.0,
                    help="seconds per test call, wall clock, as in the official evaluator")
parser.add_argument("--summary-json", help="also write the summary metrics to this file")
parser.add_argument("--official-scoring", action="store_true",
                    help="backend: the official evaluator's rules (first code block, code run "
                         "inside a function, banned substrings score 0), still in the sandbox")
parser.add_argument("--keep-rewards", action="store_true",
                    help="keep a `reward` already in the input instead of re-scoring that line")
parser.add_argument("--clip",
                    help="frontend: score pages by this CLIP checkpoint (a folder with the "
                         "model and its image processor, or a hub id: the paper's is "
                         f"{frontend.DEFAULT_CLIP}); "
                         "without it, by the screenshots' edges and colors (edge-color)")
parser.add_argument("--against",
                    help="another scored JSONL: print the win rate per task both files hold")


# --- code extraction -----------------------------------------------------------------------------
FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.S)
PYTHON_TAGS = ("", "python", "python3", "py")
KEYWORDS = set("""False None True and as assert async await break class continue def del elif else
except finally for from global if import in is lambda nonlocal not or pass raise return try while
with yield match case print""".split())


def is_prose(line):
    """A top-level line that reads as English rather than Python: 'Here is the code:'."""
    words = re.match(r"([A-Za-z][\w'’]*)[,:]?\s+[A-Za-z`(\"']", line)
    return bool(words) and words.group(1) not in KEYWORDS


def strip_prose(text):
    """The code between prose lines of an answer without code fences."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() and not is_prose(line)),
                 len(lines))
    end = next((i for i in range(start, len(lines))
                if lines[i][:1].isalpha() and is_prose(lines[i])), len(lines))
    return "\n".join(lines[start:end])


def after_marker(answer):
    return answer.split(ANSWER_MARKER, 1)[1] if ANSWER_MARKER in answer else answer


def extract_code(answer):
    """The final program in an answer: after `I WANT TO ANSWER:`, out of code fences, dedented."""
    text = after_marker(answer).lstrip(" \t")  # code that starts on the marker's line
    blocks = [(tag.strip().lower(), body) for tag, body in FENCE.findall(text)]
    if blocks:
        bodies = ([body for tag, body in blocks if tag in PYTHON_TAGS]
                  or [body for _, body in blocks])
        code = next((body for body in bodies if re.search(r"^\s*(async\s+)?def ", body, re.M)),
                    bodies[0])
    else:
        code = strip_prose(text.replace("```", ""))
    return textwrap.dedent(code).strip("\n") + "\n"


# --- the official evaluator's rules (--official-scoring) -----------------------------------------
# An answer holding any of these scores 0 in the official evaluator: the list its
# `check_correctness` applies, matched as plain substrings of the answer after the marker, prose
# included ("exit(" in "sys.exit(" too). A second list in the official code (print(, open(, write)
# sits in a helper that nothing calls: not applied.
OFFICIAL_BANNED = ("import os", "from os", "import sys", "from sys", "sudo", "transformers",
                   "exit(", "quit(", "argparse")


def banned_substring(answer):
    """The first of OFFICIAL_BANNED in the answer, or None."""
    return next((banned for banned in OFFICIAL_BANNED if banned in after_marker(answer)), None)


def official_code(answer):
    """The official evaluator's program: the first ```python block, else the first ``` block (its
    tag, if any, left in), else the whole answer."""
    text = after_marker(answer)
    for fence in ("```python", "```"):
        if fence in text:
            return text.split(fence, 1)[1].split("```", 1)[0].strip()
    return text.strip()


def in_function_scope(code, calls):
    """`code` and its test calls rewritten to run as the official evaluator ran them, by exec and
    eval inside a function: the program's top-level names (imports, helper functions) land in that
    function's local namespace, where the functions the program defines cannot see them."""
    program = ("_globals, _locals = {'__name__': 'solution'}, {}\n"
               f"exec(compile({code!r}, '<answer>', 'exec'), _globals, _locals)\n")
    return program, [(name, f"eval({call!r}, _globals, _locals)") for name, call in calls]


# --- backend scoring -----------------------------------------------------------------------------
def broken_reason(expected):
    """Why a test cannot count, from the reference function's result on it (`expected`); None when
    it has a value to compare with."""
    if expected.get("value") is not None:
        return None
    if "value" in expected:
        return "reference returned None"  # the official rule never counts it
    error, detail = expected.get("error", "crashed"), expected.get("detail", "")
    if error == "exception":
        return f"reference raised {detail}"
    return f"reference: {error}" + (f" ({detail})" if detail else "")


def broken_tests(task, expected_results):
    """{test name: why it cannot count} for the task's tests whose reference function gave no
    value."""
    reasons = {name: broken_reason(expected_results.get(name, {"error": "crashed"}))
               for name in task["test_cases"]}
    return {name: reason for name, reason in reasons.items() if reason}


def verdict(result, expected):
    """('pass' or a failure category, detail) for one test whose expected value is not None."""
    if "value" not in result:
        error = result.get("error")
        return (error if error in CATEGORIES else "crashed"), result.get("detail", "")
    try:
        if result["value"] == expected:
            return "pass", ""
    except Exception:  # e.g. RecursionError on deeply nested values: not equal
        pass
    return "wrong output", f"returned {result['value']!r:.90}, expected {expected!r:.90}"


def main_failure(outcomes):
    """The most frequent failure category among the tests (the first one on ties), or None."""
    failures = [outcome for outcome in outcomes if outcome != "pass"]
    if not failures:
        return None
    counts = collections.Counter(failures)
    return max(failures, key=lambda category: (counts[category], -failures.index(category)))


def task_key(task):
    """Records of one task (the same id, reference and tests) share one run of the reference
    function."""
    return json.dumps([task["task_id"], task["ground_truth"], task["test_cases"]], sort_keys=True)


def sandbox_program(code, task, official_scoring):
    """What the sandbox runs: the code and the task's test calls, or as the official evaluator ran
    them."""
    calls = list(task["test_cases"].items())
    return in_function_scope(code, calls) if official_scoring else (code, calls)


def run_in_sandbox(sandboxes, isolation, code, calls):
    """The results of `calls` after `code`, in a free sandbox from the queue `sandboxes`; adds the
    sandbox's isolation report to `isolation`."""
    sandbox = sandboxes.get()
    try:
        reply = sandbox.run(code, calls)
    finally:
        sandboxes.put(sandbox)
    isolation.update(reply.get("isolation", {}))
    return reply["results"]


def reward_fields(task, verdicts, broken, official_scoring):
    """The reward fields of a record, from verdicts: {counted test name: (outcome, detail)} and
    broken: {test name: why it is not counted}."""
    outcomes = {name: outcome for name, (outcome, _) in verdicts.items()}
    if official_scoring:  # the official evaluator fails a broken test for every candidate
        outcomes.update({name: BROKEN for name in broken})
    passed = sum(outcome == "pass" for outcome in outcomes.values())
    failure = main_failure(outcomes.values())
    if failure == BROKEN:
        detail = next(iter(broken.values()))
    else:
        detail = next((d for o, d in verdicts.values() if o == failure), None)
    return dict(reward=passed / len(outcomes) if outcomes else 0.0,
                success=bool(outcomes) and passed == len(outcomes),
                tests_passed=passed, tests_total=len(outcomes), failure=failure,
                failure_detail=detail,
                test_results={name: outcomes.get(name, BROKEN) for name in task["test_cases"]},
                broken_tests=broken)


def reference_results(pool, run, tasks, official_scoring, progress):
    """{task key: the reference function's result on each test}, the reference run once per task by
    `run(code, calls)` (run_in_sandbox) on the thread pool `pool`."""
    progress.total += len(tasks)
    jobs = {pool.submit(run, *sandbox_program(task["ground_truth"], task, official_scoring)): key
            for key, task in tasks.items()}
    results = {}
    for job in as_completed(jobs):
        results[jobs[job]] = job.result()
        progress.update(1)
    return results


def score_answers(pool, run, records, expected_results, official_scoring, progress):
    """Run each record's answer on its task's tests and add the reward fields to the record."""
    jobs = {}
    for record in records:
        banned = banned_substring(record["answer"]) if official_scoring else None
        if banned:  # never run: the official evaluator scored it 0 as it stood
            task = record["task"]
            broken = broken_tests(task, expected_results[task_key(task)])
            verdicts = {name: ("banned substring", f"the answer holds {banned!r}")
                        for name in task["test_cases"] if name not in broken}
            record.update(reward_fields(task, verdicts, broken, official_scoring))
            progress.update(1)
            continue
        code = (official_code(record["answer"]) if official_scoring
                else extract_code(record["answer"]))
        jobs[pool.submit(run, *sandbox_program(code, record["task"], official_scoring))] = record
    for job in as_completed(jobs):
        record, results = jobs[job], job.result()
        task = record["task"]
        expected = expected_results[task_key(task)]
        broken = broken_tests(task, expected)
        verdicts = {name: verdict(results.get(name, {"error": "crashed"}), expected[name]["value"])
                    for name in task["test_cases"] if name not in broken}
        record.update(reward_fields(task, verdicts, broken, official_scoring))
        progress.update(1)


def score_backend(records, args, progress):
    """Add reward fields to each backend record, in place; returns the sandbox's isolation
    report."""
    sandboxes = queue.Queue()
    for _ in range(args.workers):
        sandboxes.put(Sandbox(timeout=args.timeout).start())  # started here: see PR_SET_PDEATHSIG
    isolation = {}
    run = functools.partial(run_in_sandbox, sandboxes, isolation)
    tasks = {task_key(r["task"]): r["task"] for r in records}
    try:
        with ThreadPoolExecutor(args.workers) as pool:
            expected_results = reference_results(pool, run, tasks, args.official_scoring, progress)
            score_answers(pool, run, records, expected_results, args.official_scoring, progress)
    finally:
        while not sandboxes.empty():
            sandboxes.get().close()
    return isolation


# --- frontend scoring ----------------------------------------------------------------------------
def score_frontend(records, args, progress):
    """Add `reward` (the final page's similarity to the reference page), `image_score` and
    `answered_page` to each frontend record."""
    try:
        scorer = frontend.ClipScorer(args.clip) if args.clip else frontend.EdgeColorSimilarity()
        print(f"frontend image score: {scorer.name}"
              + ("" if args.clip else " (the screenshots' edges and colors "
                                      "agreeing; --clip PATH for the paper's CLIP cosine)"))
        rewards = frontend.score_pages(scorer, [r["answer"] for r in records], [r["task"] for r in records])
    except (frontend.ClipUnavailable, ChromiumMissing) as e:
        fail(e)
    for record, reward in zip(records, rewards):
        record.update(reward=reward, image_score=scorer.name,
                      answered_page=bool(record["answer"].strip()))
    progress.update(len(records))
    return {}


def frontend_success(records):
    """Add `success` to each frontend record: its reward is the best of its task's samples in this file and
    above the task's worst. A page's similarity has no pass mark of its own (CLIP's and edge-color's scales
    differ); the best of k is what rejection sampling keeps (harness/baselines.py --method rft)."""
    records_of_task = grouped(records, lambda record: record["task_id"])
    for record in records:
        task_rewards = [other["reward"] for other in records_of_task[record["task_id"]]]
        record["success"] = record["reward"] == max(task_rewards) > min(task_rewards)


# Scorers by task kind: each adds `reward` (and backend `success`) to its records.
SCORERS = {"backend": score_backend, "frontend": score_frontend}


# --- metrics -------------------------------------------------------------------------------------
def percent(values):
    values = list(values)
    return round(100 * sum(values) / len(values), 2) if values else 0.0


def summarize(records):
    """Mean % tests passed, success rate, and best-of-k of both when tasks have k > 1 samples."""
    records_of_task = grouped(records, lambda record: record["task_id"])
    if all(task_kind(r["task"]) == "frontend" for r in records):
        summary = {"trajectories": len(records), "tasks": len(records_of_task),
                   "image_score": records[0].get("image_score"),
                   "mean_score": round(sum(r["reward"] for r in records) / len(records), 4)}
        if max(len(samples) for samples in records_of_task.values()) > 1:
            summary["best_of_k_score"] = round(
                sum(max(r["reward"] for r in s) for s in records_of_task.values()) / len(records_of_task), 4)
        return summary
    summary = {"trajectories": len(records), "tasks": len(records_of_task),
               "mean_tests_passed_pct": percent(r["reward"] for r in records),
               "success_rate_pct": percent(succeeded(r) for r in records)}
    sizes = sorted({len(samples) for samples in records_of_task.values()})
    if sizes[-1] > 1:
        summary["best_of_k"] = {
            "k": sizes[0] if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}",
            "tests_passed_pct": percent(max(r["reward"] for r in s) for s in records_of_task.values()),
            "success_rate_pct": percent(any(succeeded(r) for r in s) for s in records_of_task.values())}
    summary["failures"] = dict(collections.Counter(r["failure"] for r in records
                                                   if r.get("failure")))
    broken = {(r["task_id"], name): reason
              for r in records for name, reason in r.get("broken_tests", {}).items()}
    summary["broken_tests"] = [f"task {task_id} {name}: {reason}"
                               for (task_id, name), reason in sorted(broken.items())]
    return summary


def by_kind(records):
    """{task kind: its records}, in file order."""
    kinds = collections.defaultdict(list)
    for record in records:
        kinds[task_kind(record["task"])].append(record)
    return kinds


def refuse_other_image_score(others, against, image_score):
    """Stop when the --against file's frontend rewards come from another image score than this
    run's."""
    theirs = ({r.get("image_score") for r in others if task_kind(r["task"]) == "frontend"}
              - {image_score})
    if theirs:  # two rewards of different scores say nothing about each other
        fail(f"--against {against} was scored by "
             f"{', '.join(map(str, sorted(theirs, key=str)))}, this file by "
             f"{image_score}: score both the same way")


def score_all(to_score, args):
    """Score every record by the scorer of its kind, in place; returns the seconds it took."""
    start = time.monotonic()
    with tqdm(total=len(to_score), desc="scoring (references, then answers)", unit="run",
              mininterval=1.0) as progress:
        for kind, kind_records in by_kind(to_score).items():
            isolation = SCORERS[kind](kind_records, args, progress)
            if isolation:
                print(f"sandbox: network namespace {'on' if isolation.get('network') else 'OFF'}, "
                      f"PID namespace {'on' if isolation.get('pids') else 'OFF'}, "
                      f"{isolation['tmp']}, programs run as {isolation.get('user', '?')}")
    return time.monotonic() - start


def win_rate_against(records, others, against):
    """The win rate per task of these records' rewards against the --against file's, printed."""
    mine, theirs = collections.defaultdict(list), collections.defaultdict(list)
    for record in records:
        mine[record["task_id"]].append(record["reward"])
    for record in others:
        if isinstance(record.get("reward"), (int, float)):
            theirs[record["task_id"]].append(record["reward"])
    rate, wins, ties, losses = frontend.win_rate(mine, theirs)
    print(f"win rate against {against}: " + (f"{100 * rate:.1f}%" if rate is not None else "n/a")
          + f" over {wins + ties + losses} matched tasks "
            f"({wins} wins, {ties} ties, {losses} losses)")
    return {"against": against, "rate": rate, "wins": wins, "ties": ties, "losses": losses}


def print_frontend(front):
    print(f"frontend: {front['trajectories']} trajectories, {front['tasks']} tasks: "
          f"mean {front['image_score']} {front['mean_score']:.4f}"
          + (f", best-of-k {front['best_of_k_score']:.4f}" if "best_of_k_score" in front else ""))


def print_backend(summary):
    print(f"{summary['trajectories']} trajectories, {summary['tasks']} tasks: "
          f"{summary['mean_tests_passed_pct']:.1f}% tests passed, "
          f"{summary['success_rate_pct']:.1f}% success")
    if "best_of_k" in summary:
        best = summary["best_of_k"]
        print(f"best-of-{best['k']}: {best['tests_passed_pct']:.1f}% tests passed, "
              f"{best['success_rate_pct']:.1f}% success")
    print(f"failures: {summary['failures']}")
    if summary["broken_tests"]:
        shown = summary["broken_tests"][:3]
        more = len(summary["broken_tests"]) - len(shown)
        print(f"broken tests (not counted): {len(summary['broken_tests'])} ({'; '.join(shown)}"
              + (f"; {more} more in the summary and the scored file's broken_tests"
                 if more else "")
              + ")")


def main(args):
    out = args.out or default_output(args.trajectories, ".scored.jsonl")
    print("evaluate.py", json.dumps(vars(args)))
    print(f"output: {out}" + (f", summary: {args.summary_json}" if args.summary_json else ""))
    if os.path.exists(out) and os.path.samefile(out, args.trajectories):
        fail("--out is the input file; evaluate.py never modifies its input")
    records = trajectories_or_fail(args.trajectories)

    to_score = [r for r in records if not (args.keep_rewards and "reward" in r)]
    for kind, kind_records in by_kind(to_score).items():
        if kind not in SCORERS:
            fail(f"{kind} scoring not yet available ({len(kind_records)} {kind} trajectories "
                 f"in {args.trajectories})")
    others = trajectories_or_fail(args.against) if args.against else []
    if "frontend" in by_kind(to_score):
        refuse_other_image_score(others, args.against, frontend.image_score_name(args.clip))
    seconds = score_all(to_score, args)
    kinds = by_kind(records)
    frontend_success(kinds["frontend"])  # of the whole file: kept rewards count too

    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_jsonl(out + ".tmp", records)
    os.replace(out + ".tmp", out)  # a killed run leaves no half-written output

    summary = summarize(kinds["backend"]) if kinds["backend"] else {}
    if kinds["frontend"]:
        summary["frontend"] = summarize(kinds["frontend"])
        print_frontend(summary["frontend"])
    if args.against:
        summary["win_rate"] = win_rate_against(records, others, args.against)
    summary.update(scored=len(to_score), seconds=round(seconds, 2),
                   trajectories_per_s=round(len(to_score) / seconds, 2) if seconds > 0 else None,
                   args=vars(args))
    if kinds["backend"]:
        print_backend(summary)
    print(f"scored {len(to_score)} in {seconds:.1f} s "
          f"({summary['trajectories_per_s']} trajectories/s)")
    print(f"wrote {out}")
    if args.summary_json:
        os.makedirs(os.path.dirname(args.summary_json) or ".", exist_ok=True)
        with open(args.summary_json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
        print(f"wrote {args.summary_json}")


if __name__ == "__main__":
    main(parser.parse_args())
