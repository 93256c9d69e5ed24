"""Tests of the frontend half of ColBench: tasks, rendering, the simulated human, CLIP scoring, win rate.

They need Debian's chromium (`make test` installs it) and run the real scripts on a tiny random
model and a tiny random CLIP model.
"""
import os
import re
import subprocess
import sys

import pytest
import torch
from PIL import Image

from colbench import frontend
from colbench.data import load_tasks, task_kind
from colbench.env import ANSWER_MARKER, Episode, html_page
from colbench.models import Reply
from colbench.render import render
from colbench.simulators import make_simulator
from test_all import ROOT, StubOpenAI, read_jsonl, run_script, stub_server, tiny_model, write_jsonl  # noqa: F401 (fixtures)

DATA = os.path.join(ROOT, "colbench", "data")
PAGE = ("<!DOCTYPE html><html><head><style>body{background:#0f1c3f;color:#f5f5f5;font-family:Georgia,serif}"
        "nav{background:#d4a017;padding:12px} nav a{color:#0f1c3f;margin-right:20px}</style></head><body>"
        "<nav><a href='#'>Home</a><a href='#menu'>Menu</a><a href='#visit'>Visit</a></nav><h1>Golden Crust</h1>"
        "<section><h2>Menu</h2><p>Bread.</p></section><section><h2>Visit</h2><p>Maple Street.</p></section>"
        "<footer>2024</footer></body></html>")
PAGE_TASK = {"task_id": "bakery", "problem_description": "I run a bakery called Golden Crust; make me a website.",
             "ground_truth": PAGE}


def turn(text):
    """A dialogue whose latest message is the agent's `text`."""
    return [{"role": "user", "content": PAGE_TASK["problem_description"]}, {"role": "assistant", "content": text}]


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory):
    """A random CLIPModel with 32x32 images, saved with its CLIPImageProcessor."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel
    folder = str(tmp_path_factory.mktemp("tiny_clip"))
    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=8)
    CLIPModel(config).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


# ---------------------------------------------------------------- the task files

def test_frontend_task_files_are_valid_varied_and_reproducible(tmp_path):
    train, test = (load_tasks(os.path.join(DATA, f"frontend_{split}.jsonl")) for split in ("train", "test"))
    assert len(train) >= 100 and len(test) >= 30
    for task in train + test:
        page = task["ground_truth"]
        assert task_kind(task) == "frontend" and len(page) < 4000
        assert "<style>" in page and "<script" not in page and not re.search(r"(src|href)=\"(https?:)?//", page)
    assert len({t["site"] for t in train}) >= 10 and {t["layout"] for t in train} == {"single", "hero", "sidebar", "cards"}
    assert len({t["palette"] for t in train}) >= 10 and len({t["nav"] for t in train}) >= 5
    run_script("-m", "colbench.frontend_tasks", "--out", str(tmp_path))
    for split in ("train", "test"):
        with open(os.path.join(DATA, f"frontend_{split}.jsonl"), "rb") as shipped:
            assert (tmp_path / f"frontend_{split}.jsonl").read_bytes() == shipped.read()


# ---------------------------------------------------------------- rendering

def test_frontend_render_page_and_broken_pages():
    image = render(PAGE)
    assert image.size == (1024, 768) and image.getpixel((500, 700)) == (15, 28, 63)   # the navy background
    assert image.getpixel((500, 20)) == (212, 160, 23)                                # the gold navigation bar
    unclosed = render("<html><body style='background:#ff0000'><h1>cut sh")           # broken HTML still renders
    assert unclosed.getpixel((500, 500)) == (255, 0, 0)
    offline = render("<html><head><script src='https://cdn.example.com/x.js'></script></head>"
                     "<body style='background:#00ff00'></body></html>", timeout=8)    # no network, no wait
    assert offline.getpixel((10, 10)) == (0, 255, 0)
    hanging = render("<html><body style='background:red'><script>while (true) {}</script></body></html>", timeout=2)
    assert hanging.getextrema() == ((255, 255),) * 3                                  # fails -> blank
    assert render("").getextrema() == ((255, 255),) * 3


# ---------------------------------------------------------------- the protocol and the simulated human

def test_frontend_episode_answer_is_the_last_page_proposed():
    assert html_page("Here: <html><body>one</body></html> and <HTML><body>two</body></HTML> ok") == "<HTML><body>two</body></HTML>"
    assert html_page("<!DOCTYPE html>\n<html><body>cut short") == "<!DOCTYPE html>\n<html><body>cut short"
    assert html_page("What colors do you like?") is None
    episode = Episode(PAGE_TASK, 0, max_turns=3)
    assert "<html>" in episode.agent_view()[0]["content"]
    episode.add_agent_turn(Reply("Draft: <html><body>first</body></html>", "p", 1))
    episode.add_human_turn("More blue.")
    episode.add_agent_turn(Reply("Is blue fine? <html><body>second</body></html>", "p", 1))
    episode.add_human_turn("Yes.")
    assert episode.add_agent_turn(Reply(f"{ANSWER_MARKER} that one.", "p", 1))
    assert episode.answer == "<html><body>second</body></html>" and episode.answered_with_marker


def test_frontend_simulator_names_planted_differences():
    simulator = make_simulator("embedded")
    say = lambda page: simulator.respond([(PAGE_TASK, turn(f"How is this? {page}"))])[0]
    assert say(PAGE) == frontend.LOOKS_RIGHT
    recolored = say(PAGE.replace("background:#0f1c3f", "background:#ffffff"))
    assert recolored.startswith("The page background should be navy, not white.")
    no_nav = say(re.sub(r"<nav>.*?</nav>", "", PAGE))
    assert "navigation menu at the top" in no_nav and "'Menu'" in no_nav
    missing = say(PAGE.replace("<section><h2>Visit</h2><p>Maple Street.</p></section>", "").replace("Golden Crust", "Bakery"))
    assert "The main title should say 'Golden Crust'." in missing and "missing the section 'Visit'" in missing
    plain = say("<html><body><h1>Hello</h1></body></html>")
    assert len(plain) <= frontend.MAX_REPLY_CHARS and plain.count(".") <= frontend.MAX_DIFFERENCES + 2
    assert "<" not in plain and "#0f1c3f" not in plain                                # never pastes the reference
    no_page = say("What colors do you like?")
    assert no_page.startswith(frontend.NO_PAGE) and "navy" in no_page


def test_frontend_vision_endpoint_gets_both_screenshots(stub_server):
    simulator = make_simulator(stub_server)
    reply = simulator.respond([(PAGE_TASK, turn("Draft: <html><body>hi</body></html>"))])[0]
    assert reply.startswith("The tip is 18 percent.") and len(reply) > 400  # the frontend limit, not the backend's
    content = StubOpenAI.requests_seen[-1]["messages"][1]["content"]
    images = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
    assert len(images) == 2 and all(url.startswith("data:image/png;base64,") for url in images)
    simulator.respond([(PAGE_TASK, turn("Which colors?"))])
    assert sum(part["type"] == "image_url" for part in StubOpenAI.requests_seen[-1]["messages"][1]["content"]) == 1


# ---------------------------------------------------------------- scoring: CLIP cosine and win rate

def test_frontend_clip_cosine_with_a_tiny_random_clip(tiny_clip):
    scorer = frontend.ClipScorer(tiny_clip)
    red, blue = Image.new("RGB", (64, 48), "red"), Image.new("RGB", (64, 48), "blue")
    same, different = scorer.cosine([red, blue], [red.copy(), red])
    assert same == pytest.approx(1.0, abs=1e-5) and -1.0 <= different < 0.999
    with pytest.raises(frontend.ClipUnavailable, match="--clip PATH"):
        frontend.ClipScorer(os.path.join(tiny_clip, "absent"))


def test_frontend_win_rate_counts_ties_half():
    mine = {"a": [0.9], "b": [0.5, 0.7], "c": [0.3], "d": [0.8], "only-mine": [1.0]}
    theirs = {"a": [0.8], "b": [0.6], "c": [0.4], "d": [0.8], "only-theirs": [0.0]}
    assert frontend.win_rate(mine, theirs) == (pytest.approx((1 + 0.5 + 0 + 0.5) / 4), 1, 2, 1)  # b: 0.6 == 0.6
    assert frontend.win_rate({"x": [1.0]}, {"y": [0.0]}) == (None, 0, 0, 0)


def test_frontend_rollout_two_turns_then_clip_evaluation_and_win_rate(tmp_path, tiny_model, tiny_clip):
    tasks = write_jsonl(tmp_path / "front.jsonl", [dict(PAGE_TASK, task_id=f"page{i}") for i in range(2)])
    trajectories, scored = str(tmp_path / "t.jsonl"), str(tmp_path / "s.jsonl")
    run_script("rollout.py", tasks, "--agent", tiny_model, "--max-turns", "2", "--max-new-tokens", "8", "--out", trajectories)
    for record in read_jsonl(trajectories):
        assert [t["role"] for t in record["dialogue_history"]] == ["user", "assistant", "user", "assistant"]
        assert record["dialogue_history"][2]["content"].startswith(frontend.NO_PAGE)  # the tiny model writes no page
        assert record["answer"] == ""
    result = run_script("evaluate.py", trajectories, "--out", scored, "--clip", tiny_clip)
    assert "mean CLIP cosine" in result.stdout
    assert all(-1.0 <= r["reward"] <= 1.0 and r["answered_page"] is False for r in read_jsonl(scored))
    result = run_script("evaluate.py", trajectories, "--out", str(tmp_path / "s2.jsonl"), "--clip", tiny_clip,
                        "--against", scored)
    assert "win rate against" in result.stdout and "50.0% over 2 matched tasks (0 wins, 2 ties, 0 losses)" in result.stdout


def test_frontend_evaluate_without_clip_weights_says_how_to_pass_them(tmp_path):
    record = {"task_id": "bakery", "sample_idx": 0, "task": PAGE_TASK, "answer": PAGE,
              "dialogue_history": [{"role": "user", "content": "hi"}]}
    path = write_jsonl(tmp_path / "t.jsonl", [record])
    result = subprocess.run([sys.executable, "evaluate.py", path, "--out", str(tmp_path / "s.jsonl"), "--clip",
                             str(tmp_path / "no-such-clip")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--clip PATH" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "s.jsonl").exists()
