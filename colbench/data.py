"""Reading and writing the JSONL files that the four stages pass along.

Every error names the file, the line and the field, so a bad record is found in one look.
Schemas (see README.md): a task has `problem_description` and `ground_truth` (backend tasks
also `test_cases`); a trajectory has `task`, `dialogue_history` and `answer`. Files in the
official ColBench format are read as they are: a missing `task_id` is derived from the problem
description, a missing `sample_idx` numbers a task's trajectories in file order.
"""
import hashlib
import json
import math
import os
import shutil


class DataError(ValueError):
    """A bad input file; the message says where (file:line) and what (field)."""


def parse_record(line, where):
    """One JSONL line as a JSON object; `where` is 'file:line'."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    return record


def read_jsonl(path, allow_empty=False):
    """Return [(line_number, record), ...] for every non-blank line; each record a JSON object. An
    empty file is an error unless `allow_empty`."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if line.strip():
                rows.append((line_number, parse_record(line, f"{path}:{line_number}")))
    if not rows and not allow_empty:
        raise DataError(f"{path}: the file is empty")
    return rows


def require(record, field, kind, where):
    """record[field], checked to be of `kind` (a type or tuple of types); `where` is 'file:line'. JSON's true
    and false are not numbers here, though Python's bool is an int."""
    if field not in record:
        raise DataError(f"{where}: missing field '{field}'")
    value = record[field]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise DataError(f"{where}: field '{field}' must be {expected}, got {type(value).__name__}")
    return value


def derive_task_id(problem_description):
    """A stable id from the description, for files that carry none."""
    return "task-" + hashlib.sha1(problem_description.encode("utf-8")).hexdigest()[:12]


def task_kind(task):
    """'frontend' when the solution (`ground_truth`) is an HTML page, else 'backend'."""
    head = task["ground_truth"].lstrip()[:200].lower()
    return "frontend" if head.startswith(("<!doctype html", "<html")) else "backend"


def check_task(record, where):
    """Validate one task in place (adds `task_id` when absent) and return it."""
    require(record, "problem_description", str, where)
    require(record, "ground_truth", str, where)
    record.setdefault("task_id", derive_task_id(record["problem_description"]))
    require(record, "task_id", str, where)
    if "stylesheet" in record:  # frontend: the CSS every page of the task's site shares (colbench/page.py)
        require(record, "stylesheet", str, where)
    if task_kind(record) == "backend":
        tests = require(record, "test_cases", dict, where)
        for name, call in tests.items():
            if not isinstance(call, str):
                raise DataError(f"{where}: field 'test_cases.{name}' must be str, got {type(call).__name__}")
    if "hidden_facts" in record:
        facts = require(record, "hidden_facts", list, where)
        if not all(isinstance(fact, str) for fact in facts):
            raise DataError(f"{where}: field 'hidden_facts' must be a list of strings")
    return record


def load_tasks(path):
    """The tasks of a task file, validated, in file order."""
    tasks = [check_task(record, f"{path}:{n}") for n, record in read_jsonl(path)]
    seen = set()
    for task in tasks:
        if task["task_id"] in seen:
            raise DataError(f"{path}: task_id {task['task_id']!r} appears twice")
        seen.add(task["task_id"])
    return tasks


def check_reward(record, where, rewards_for):
    """Fail unless record['reward'] is a finite number (not true/false), which `rewards_for` needs."""
    reward = record.get("reward")
    if "reward" not in record:
        problem = "missing field 'reward'"
    elif isinstance(reward, bool) or not isinstance(reward, (int, float)):
        problem = f"field 'reward' must be a number, got {type(reward).__name__}"
    elif not math.isfinite(reward):
        problem = f"field 'reward' must be finite, got {reward}"
    else:
        return
    raise DataError(f"{where}: {problem}, which {rewards_for} needs: score the file with evaluate.py first")


def load_trajectories(path, rewards_for=None):
    """The trajectories of a trajectory file, validated; ids derived for official files. Stages key a
    trajectory by (task_id, sample_idx), so a pair that appears twice is refused, naming both lines. With
    `rewards_for` (what needs them, e.g. "the critic"), every trajectory must carry a numeric 'reward'."""
    trajectories, samples_seen, line_of = [], {}, {}
    for n, record in read_jsonl(path):
        where = f"{path}:{n}"
        task = check_task(require(record, "task", dict, where), f"{where}: field 'task'")
        dialogue = require(record, "dialogue_history", list, where)
        for i, turn in enumerate(dialogue):
            turn_where = f"{where}: dialogue_history[{i}]"
            if not isinstance(turn, dict):
                raise DataError(f"{turn_where} must be an object, got {type(turn).__name__}")
            if require(turn, "role", str, turn_where) not in ("user", "assistant", "system"):
                raise DataError(f"{turn_where}: field 'role' must be user, assistant or system")
            require(turn, "content", str, turn_where)
        require(record, "answer", str, where)
        task_id = require(record, "task_id", str, where) if "task_id" in record else task["task_id"]
        if "sample_idx" in record:
            sample_idx = require(record, "sample_idx", int, where)
        else:  # official files carry none: number a task's trajectories in file order
            sample_idx = samples_seen.get(task_id, 0)
        samples_seen[task_id] = max(samples_seen.get(task_id, 0), sample_idx) + 1
        if (task_id, sample_idx) in line_of:
            raise DataError(f"{where}: fields 'task_id', 'sample_idx': ({task_id!r}, {sample_idx}) appears twice, "
                            f"on lines {line_of[task_id, sample_idx]} and {n}")
        line_of[task_id, sample_idx] = n
        if rewards_for:
            check_reward(record, where, rewards_for)
        record["task_id"], record["sample_idx"] = task_id, sample_idx
        trajectories.append(record)
    return trajectories


def default_output(input_path, suffix):
    """runs/<stem><suffix>: `runs/backend_train.traj.jsonl` -> `runs/backend_train.scored.jsonl`."""
    stem = os.path.basename(input_path)
    for ending in (".jsonl", ".scored", ".traj"):
        stem = stem[: -len(ending)] if stem.endswith(ending) else stem
    return os.path.join("runs", stem + suffix)


def partial_folder(out):
    """A new, empty sibling of the folder `out` for a stage to write into; finish_folder renames it to `out`
    once all is written, so that a folder at `out` is always whole (the demo skips a step whose folder
    exists). A run killed midway leaves `<out>.partial`, which the next run clears."""
    partial = out.rstrip("/" + os.sep) + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    return partial


def finish_folder(partial, out):
    """The whole `partial` folder renamed to `out`, in place of an older `out`."""
    shutil.rmtree(out, ignore_errors=True)
    os.replace(partial, out)


def finished_keys(path):
    """(task_id, sample_idx) of every complete line already in `path`, for resuming.

    A line torn by a kill (no final newline) is cut off, so the file stays valid JSONL; only once
    every complete line is known to be a trajectory's, so a wrong --out is refused untouched.
    """
    if not os.path.exists(path):
        return set()
    with open(path, "rb") as f:
        content = f.read()
    complete = content[: content.rfind(b"\n") + 1]
    keys = set()
    # split("\n"), not splitlines(): a reply may hold U+2028 and the like, which json.dumps leaves raw.
    for line_number, line in enumerate(complete.decode("utf-8", errors="replace").split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{line_number}"
        record = parse_record(line, where)
        keys.add((require(record, "task_id", str, where), require(record, "sample_idx", int, where)))
    if len(complete) < len(content):
        print(f"resume: dropping a torn last line of {path}")
        with open(path, "r+b") as f:
            f.truncate(len(complete))
    return keys


def write_jsonl(path, records):
    """Write a whole JSONL file: one record per line, UTF-8, '\\n' line ends on every platform. Its folder
    is made if missing."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


class JsonlAppender:
    """Appends one record per line, each in a single write() so a kill leaves no torn line."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record):
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        while data:  # a regular file takes it in one call; loop only for safety
            data = data[os.write(self.fd, data):]

    def close(self):
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def trajectory_id(trajectory):
    """A trajectory's key: (task id, sample index)."""
    return trajectory["task_id"], trajectory["sample_idx"]


def grouped(items, key):
    """{key(item): [its items]}, keys and items in the order given: trajectories by task, pairs by task."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def split_by_task(pairs, eval_fraction, rng, train_only=frozenset()):
    """(train pairs, held-out pairs): the pairs of a random `eval_fraction` of the paired tasks but those named in
    `train_only` are held out, so that no held-out task is seen in training; one task at least on each side."""
    tasks = list(dict.fromkeys(pair[0]["task_id"] for pair in pairs if pair[0]["task_id"] not in train_only))
    rng.shuffle(tasks)
    n_eval = min(max(1, round(eval_fraction * len(tasks))), len(tasks) - 1) if eval_fraction > 0 else 0
    held_out = set(tasks[:n_eval])
    return ([pair for pair in pairs if pair[0]["task_id"] not in held_out],
            [pair for pair in pairs if pair[0]["task_id"] in held_out])


def split_counts(pairs, train_pairs, eval_pairs, heading):
    """(the trajectories of `pairs` each once, the counts of their split by task for metrics.json), printed after
    `heading`."""
    tasks, eval_tasks = ({pair[0]["task_id"] for pair in some} for some in (pairs, eval_pairs))
    used = list({trajectory_id(t): t for pair in pairs for t in pair}.values())
    counts = {"tasks": len(tasks), "trajectories": len(used), "pairs": len(pairs),
              "train_tasks": len(tasks) - len(eval_tasks), "train_pairs": len(train_pairs),
              "eval_tasks": len(eval_tasks), "eval_pairs": len(eval_pairs), "eval_task_ids": sorted(eval_tasks)}
    print(f"{heading}; used: {len(tasks)} tasks, {len(used)} trajectories, {len(pairs)} pairs -> train "
          f"{counts['train_tasks']} tasks / {len(train_pairs)} pairs, held out {len(eval_tasks)} tasks / "
          f"{len(eval_pairs)} pairs" + ("" if eval_pairs else ": no held-out accuracy"), flush=True)
    return used, counts


def task_batches(train_pairs, epochs, batch_size, rng):
    """critic.py's batches of each epoch: the tasks in a new random order from `rng`, consecutive tasks grouped
    into batches of at least `batch_size` pairs (a task's together), a batch being a list of its tasks' pair lists."""
    pairs_of_task = grouped(train_pairs, lambda pair: pair[0]["task_id"])
    batches_of_epoch = []
    for _ in range(epochs):
        order = list(pairs_of_task)
        rng.shuffle(order)
        batches = [[]]
        for task_id in order:
            if sum(map(len, batches[-1])) >= batch_size:
                batches.append([])
            batches[-1].append(pairs_of_task[task_id])
        batches_of_epoch.append(batches)
    return batches_of_epoch


def succeeded(trajectory):
    """Success as evaluate.py records it (backend: every test passed); a file without `success` counts a
    reward of 1.0 as success."""
    return bool(trajectory.get("success", trajectory["reward"] >= 1.0))


def task_subset(trajectories, fraction, rng):
    """The trajectories of a random `fraction` of their tasks (one task at least), in file order. A subset
    by task keeps each task's trajectories together, as harness/baselines.py's pairs need them."""
    if fraction >= 1.0:
        return trajectories
    tasks = sorted({t["task_id"] for t in trajectories}, key=str)
    kept = set(rng.sample(tasks, max(1, round(fraction * len(tasks)))))
    return [t for t in trajectories if t["task_id"] in kept]


def trajectory_subset(trajectories, fraction, rng):
    """A random `fraction` of the trajectories (one at least), in file order: policy.py's turn states come
    from as many tasks as the fraction reaches, not from the few tasks a subset by task would keep."""
    if fraction >= 1.0:
        return trajectories
    kept = set(rng.sample(range(len(trajectories)), max(1, round(fraction * len(trajectories)))))
    return [t for i, t in enumerate(trajectories) if i in kept]
