"""One self-contained HTML page to look at a run: dialogues, critic credit per turn, training curves.

    python -m harness.report runs/backend_train.scored.jsonl --critic runs/backend_train.critic \
        --policy runs/backend_train.policy --out runs/report.html

Each dialogue is shown with its reward; when the critic's `advantages.jsonl` is given, every agent
turn is shaded by its advantage (green: the critic credits it, red: blames it), so a reader sees
which turn made the difference. The critic's and the policy's `log.jsonl` become small plots.
No network, no scripts: it opens from disk on a projector.
"""
import argparse
import base64
import html
import io
import os

from colbench.cli import fail, non_negative_int, positive_int, trajectories_or_fail
from colbench.data import DataError, read_jsonl, task_kind
from colbench.env import html_page
from colbench.frontend import as_shown


def svg_plot(points, title, width=360, height=160):
    """A line plot of (step, value) points as inline SVG."""
    if len(points) < 2:
        return f"<div class='plot'><b>{html.escape(title)}</b><p>(fewer than two steps logged)</p></div>"
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    y1 = y1 if y1 > y0 else y0 + 1e-9
    pad = 30

    def scale(x, y):  # a point's place in the plot area
        return (pad + (x - x0) / ((x1 - x0) or 1) * (width - 2 * pad),
                height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad))

    line = " ".join(f"{a:.1f},{b:.1f}" for a, b in (scale(x, y) for x, y in points))
    return (f"<div class='plot'><b>{html.escape(title)}</b><svg width='{width}' height='{height}'>"
            f"<rect x='{pad}' y='{pad}' width='{width - 2 * pad}' height='{height - 2 * pad}' "
            "fill='#fafafa' stroke='#ccc'/>"
            f"<polyline points='{line}' fill='none' stroke='#2563eb' stroke-width='2'/>"
            f"<text x='2' y='{pad + 4}' font-size='11'>{y1:.3g}</text>"
            f"<text x='2' y='{height - pad}' font-size='11'>{y0:.3g}</text>"
            f"<text x='{pad}' y='{height - 8}' font-size='11'>step {x0}</text>"
            f"<text x='{width - pad - 40}' y='{height - 8}' font-size='11'>step {x1}</text></svg></div>")


def curves(log_path, label):
    """Plots of every numeric field of a training log (one JSON line per step)."""
    rows = [record for _, record in read_jsonl(log_path, allow_empty=True)]
    if not rows:
        return ""
    fields = [k for k in rows[0] if k not in ("step", "epoch") and isinstance(rows[0][k], (int, float))]
    plots = []
    for k in fields:
        points = [(r.get("step", i), r[k]) for i, r in enumerate(rows) if isinstance(r.get(k), (int, float))]
        plots.append(svg_plot(points, f"{label}: {k}"))
    return "".join(plots)


def shade(advantage, scale):
    """Background colour of a turn: green for positive advantage, red for negative, stronger when larger."""
    if advantage is None:
        return "#ffffff"
    strength = min(abs(advantage) / scale, 1.0) if scale else 0.0
    return f"rgba({'22,163,74' if advantage > 0 else '220,38,38'},{0.08 + 0.5 * strength:.2f})"


def screenshot(task, page, caption):
    """A page's full-page screenshot on the task's site (as_shown), inline as a PNG 360 pixels wide, with its
    caption."""
    from colbench.render import render
    image = render(as_shown(task, page), full_page=True)
    image = image.resize((360, max(1, image.height * 360 // image.width)))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return (f"<figure><img src='data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def dialogue_html(trajectory, advantages, scale, screenshots=False):
    """One dialogue; with `screenshots` (frontend), the page the human has in mind and each page the agent showed."""
    reward = "None" if trajectory.get("reward") is None else f"{trajectory['reward']:.2f}"
    success = " ✔" if trajectory.get("success") else ""
    head = (f"<h3>{html.escape(str(trajectory['task_id']))} · sample {trajectory['sample_idx']} · "
            f"reward {reward}{success}</h3>")
    if screenshots:
        head += screenshot(trajectory["task"], trajectory["task"]["ground_truth"], "the page the human has in mind (c)")
    turns, agent_turn = [], 0
    for message in trajectory["dialogue_history"]:
        advantage = None
        if message["role"] == "assistant":
            advantage = advantages.get((trajectory["task_id"], trajectory["sample_idx"], agent_turn))
            agent_turn += 1
        note = f"<span class='adv'>A = {advantage:+.4f}</span>" if advantage is not None else ""
        page = html_page(message["content"]) if screenshots and message["role"] == "assistant" else None
        turns.append(f"<div class='turn {message['role']}' style='background:{shade(advantage, scale)}'>"
                     f"<b>{'agent' if message['role'] == 'assistant' else 'human'}</b>{note}"
                     f"<pre>{html.escape(message['content'])}</pre>"
                     f"{screenshot(trajectory['task'], page, 'the page of this turn') if page else ''}</div>")
    return f"<section>{head}{''.join(turns)}</section>"


STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
         "figure{display:inline-block;margin:.4em;vertical-align:top}img{border:1px solid #999}"
         "pre{white-space:pre-wrap;margin:.3em 0;font-size:14px}\n"
         ".turn{border:1px solid #ddd;border-radius:6px;padding:.4em .7em;margin:.3em 0}"
         ".user{margin-right:15%}.assistant{margin-left:15%}\n"
         ".adv{float:right;font-family:monospace}.plot{display:inline-block;margin:.5em}"
         "section{border-top:2px solid #333;margin-top:1.5em}")


def write_report(out, trajectories, advantage_rows=(), logs=(), max_dialogues=40, screenshots=0):
    """The report page; the first `screenshots` frontend dialogues shown with the screenshots of their pages."""
    advantages = {(r["task_id"], r["sample_idx"], r["turn"]): r["advantage"] for r in advantage_rows}
    scale = max((abs(a) for a in advantages.values()), default=0.0)
    # Dialogues the critic scored come first: they are the ones with shading.
    shown = sorted(trajectories, key=lambda t: ((t["task_id"], t["sample_idx"], 0) not in advantages,
                                                str(t["task_id"]), t["sample_idx"]))[:max_dialogues]
    rewards = [t["reward"] for t in trajectories if isinstance(t.get("reward"), (int, float))]
    backend = all(task_kind(t["task"]) == "backend" for t in trajectories)  # a frontend page has no success
    summary = f"{len(trajectories)} dialogues"
    if not rewards:
        summary += " (not scored)"
    else:
        summary += f", mean reward {sum(rewards) / len(rewards):.3f}"
        if backend:
            summary += f", success {sum(bool(t.get('success')) for t in trajectories) / len(trajectories):.1%}"
    shading = (f"agent turns shaded by the critic's advantage (green = credited, red = blamed; strongest |A| = "
               f"{scale:.4f})" if advantages else "no critic advantages given (--critic)")
    body = "".join(curves(path, label) for label, path in logs)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>SWEET-RL run report</title><style>{STYLE}</style>"
            f"</head><body><h1>SWEET-RL run report</h1><p>{summary}. Showing {len(shown)}; {shading}.</p>"
            f"<h2>Training curves</h2>{body or '<p>(no training logs given)</p>'}<h2>Dialogues</h2>"
            + "".join(dialogue_html(t, advantages, scale, i < screenshots and task_kind(t["task"]) == "frontend")
                      for i, t in enumerate(shown)) + "</body></html>")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)


def main():
    parser = argparse.ArgumentParser(description="Write one HTML report of a run.")
    parser.add_argument("scored", help="scored (or plain) trajectories JSONL")
    parser.add_argument("--critic", help="critic folder: advantages.jsonl shades the turns, log.jsonl is plotted")
    parser.add_argument("--policy", help="policy folder: its log.jsonl is plotted")
    parser.add_argument("--out", default="runs/report.html", help="the HTML file to write")
    parser.add_argument("--max-dialogues", type=positive_int, default=40, help="dialogues shown at most")
    parser.add_argument("--screenshots", type=non_negative_int, default=0,
                        help="frontend: show the pages of the first N dialogues as screenshots (needs chromium)")
    args = parser.parse_args()
    trajectories = trajectories_or_fail(args.scored)
    advantage_rows, logs = [], []
    if args.critic and os.path.exists(os.path.join(args.critic, "advantages.jsonl")):
        try:
            advantages = read_jsonl(os.path.join(args.critic, "advantages.jsonl"), allow_empty=True)
        except DataError as e:
            fail(e)
        advantage_rows = [row for _, row in advantages]
    for label, folder in (("critic", args.critic), ("policy", args.policy)):
        if folder and os.path.exists(os.path.join(folder, "log.jsonl")):
            logs.append((label, os.path.join(folder, "log.jsonl")))
    write_report(args.out, trajectories, advantage_rows, logs, args.max_dialogues, args.screenshots)
    print(f"report -> {args.out}")


if __name__ == "__main__":
    main()
