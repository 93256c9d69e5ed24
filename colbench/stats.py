"""The few statistics the demo reports: a task-level bootstrap and a rank correlation.

Dialogues of one task are not independent (the same hidden details, the same tests), so a
confidence interval resamples whole tasks, not single dialogues or pairs.
"""
import random


def bootstrap_mean_ci(values_by_task, samples=2000, seed=0):
    """95% interval of the mean of all values, resampling tasks with replacement.

    values_by_task: {task_id: [values]}, e.g. a success difference per (task, sample) or a held-out
    pair's outcome (1 right, 0.5 tie, 0 wrong). Returns (low, high)."""
    groups = [values for values in values_by_task.values() if values]
    rng = random.Random(seed)
    means = []
    for _ in range(samples):
        drawn = [value for _ in groups for value in rng.choice(groups)]
        means.append(sum(drawn) / len(drawn))
    means.sort()
    return means[int(0.025 * samples)], means[int(0.975 * samples) - 1]


def ranks(values):
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(xs, ys):
    """Spearman's rank correlation (Pearson's on the ranks); None when either side is constant."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    covariance = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    spread = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return covariance / spread if spread else None


def pair_outcomes(margins):
    """Each preference pair's outcome from its margin (chosen score minus rejected score): 1 when the
    chosen one scores higher, 0 when lower, and a tie (as when the critic equals π_ref) counts half."""
    return [1.0 if margin > 0 else 0.5 if margin == 0 else 0.0 for margin in margins]
