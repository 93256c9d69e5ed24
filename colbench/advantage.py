"""The critic's advantage A_θ(o_t, a_t, c) of an agent turn (Eq. 3): what the critic reads, the advantage,
and a trained critic scoring candidate replies.

critic.py trains the critic (Eq. 2) on the `turn_advantages` of its `critic_views`; policy.py ranks its
candidates with `score_candidates`, and so do colbench/judge.py and colbench/bench.py. They live here, in
colbench/, because colbench/ imports no stage script.
"""
import dataclasses
import json
import os

import torch

from colbench.env import agent_messages, turn_budget
from colbench.fast_logps import shared_prefix_logps
from colbench.models import autocast, load_model, tokenize_turns

SOLUTION_HEADER = "Reference solution (shown to you, never to the assistant):\n"


def critic_messages(task, dialogue, max_turns, use_solution=True):
    """What the agent saw (its system prompt, the budget of `max_turns` turns included, then the dialogue),
    with the solution c put before the system prompt when `use_solution`."""
    messages = agent_messages(task, dialogue, max_turns)
    if use_solution:
        c = SOLUTION_HEADER + task["ground_truth"].strip() + "\n\n"
        messages[0] = {"role": "system", "content": c + messages[0]["content"]}
    return messages


def fit_to_length(tokenizer, task, dialogue, max_turns, use_solution, max_length):
    """(ids, agent-turn spans, agent turns dropped, what was cut or '') of the critic's view, cut to
    `max_length` tokens: the oldest exchanges (an agent turn and the human's reply to it) go first. The
    problem and c always stay; a dialogue still too long with one agent turn left is kept whole."""
    dropped = 0
    while True:
        ids, spans = tokenize_turns(tokenizer, critic_messages(task, dialogue, max_turns, use_solution))
        agent_turns = [i for i, turn in enumerate(dialogue) if turn["role"] == "assistant"]
        if len(ids) <= max_length or len(agent_turns) < 2:
            cuts = [f"dropped the oldest {dropped} agent turn(s)"] if dropped else []
            if len(ids) > max_length:
                cuts.append(f"still {len(ids)} tokens, kept whole")
            return ids, spans, dropped, ", ".join(cuts)
        first = agent_turns[0]
        reply = first + 1 < len(dialogue) and dialogue[first + 1]["role"] == "user"
        dialogue, dropped = dialogue[:first] + dialogue[first + 1 + reply:], dropped + 1


def key(trajectory):
    return trajectory["task_id"], trajectory["sample_idx"]


def critic_views(tokenizer, trajectories, use_solution, max_length):
    """{trajectory key: view}, each trajectory tokenized once as the critic sees it: the token ids, the
    [start, end) token spans of the agent turns, and the number of the first turn kept."""
    views, cut = {}, 0
    for t in trajectories:
        ids, spans, dropped, note = fit_to_length(tokenizer, t["task"], t["dialogue_history"], turn_budget(t),
                                                  use_solution, max_length)
        views[key(t)] = {"ids": ids, "spans": spans, "first_turn": dropped}
        if note:
            cut += 1
            if cut <= 5:
                print(f"warning: {t['task_id']}/{t['sample_idx']} is longer than --max-length {max_length}: {note}")
    if cut:
        print(f"warning: {cut} of {len(trajectories)} dialogues were cut to --max-length {max_length} tokens")
    return views


# --- the SWEET-RL part: the advantage of each agent turn (Eq. 3) -----------------------------------------

def turn_advantages(critic_logps, reference_logps, spans, normalize=True):
    """Eq. 3: A_t = (1/L_t) Σ_l [log π_θ(a_t^l | o_t, a_t^<l, c) − log π_ref(a_t^l | o_t, a_t^<l, c)].
    critic_logps, reference_logps: [seq - 1], entry i - 1 is token i's log-prob; spans: agent turn
    t's tokens are [start, end). normalize=False sums over the tokens (w/o normalization)."""
    log_ratio = critic_logps - reference_logps                        # [seq - 1]
    per_turn = [log_ratio[start - 1:end - 1] for start, end in spans]  # L_t entries each
    return torch.stack([turn.mean() if normalize else turn.sum() for turn in per_turn])  # [turns]


# ---------------------------------------------------------------- a trained critic, scoring candidates

@dataclasses.dataclass
class Critic:
    model: torch.nn.Module            # the trained critic π_θ, frozen
    reference_model: torch.nn.Module  # π_ref: the initial weights it was trained from
    tokenizer: object
    use_solution: bool = True
    normalize: bool = True
    dtype: torch.dtype = torch.float32  # of the forward passes (fp32 weights, autocast to bf16 as in training)
    # The prefix each model encoded last and its KV cache (fast_logps.encode_prefix): the next turn state of
    # the same dialogue encodes only what the turn added.
    memory: dict = dataclasses.field(default_factory=lambda: {"critic": {}, "reference": {}})


def load_critic(critic_dir, device=None, dtype=torch.float32):
    """A critic folder of critic.py -> Critic scoring in `dtype`; π_ref is rebuilt from the model named
    in its args.json. Weights stay fp32: the trained critic differs from π_ref by updates too small
    for bf16 weights to hold."""
    with open(os.path.join(critic_dir, "args.json")) as f:
        saved = json.load(f)
    model, tokenizer = load_model(critic_dir, device=device, dtype=torch.float32)
    base = saved["model_path"] if os.path.isdir(saved["model_path"]) else saved["model"]  # 'embedded' moves machines
    reference_model, _ = load_model(base, device=device, dtype=torch.float32)
    return Critic(model, reference_model, tokenizer, not saved["no_solution"], not saved["no_normalize"], dtype)


@torch.no_grad()
def score_candidates(critic, task, history, max_turns, candidates):
    """A(o_t, a, c) of each candidate reply a to the dialogue `history` (ending with a user turn), played
    under a budget of `max_turns`.
    The shared prefix is encoded once by the critic and once by π_ref; its KV cache serves each distinct
    candidate in one batch. Equals scoring each full sequence on its own, up to float rounding."""
    if not candidates:
        return []
    distinct = list(dict.fromkeys(candidates))  # a reply sampled twice is scored once
    encoded = [tokenize_turns(critic.tokenizer, critic_messages(
        task, history + [{"role": "assistant", "content": reply}], max_turns, critic.use_solution))
        for reply in distinct]
    sequences = [ids for ids, _ in encoded]
    reply_start = min(spans[-1][0] for _, spans in encoded)
    with autocast(critic.model.device, critic.dtype):
        critic_logps, _ = shared_prefix_logps(critic.model, sequences, reply_start, critic.memory["critic"])
        reference_logps, _ = shared_prefix_logps(critic.reference_model, sequences, reply_start,
                                                 critic.memory["reference"])
    scores = {reply: turn_advantages(critic_row, reference_row, spans[-1:], critic.normalize).item()  # its turn
              for reply, critic_row, reference_row, (_, spans) in zip(distinct, critic_logps, reference_logps, encoded)}
    return [scores[reply] for reply in candidates]
