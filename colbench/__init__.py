"""ColBench: the collaborative agent benchmark of SWEET-RL (Zhou et al. 2025), rebuilt small.

advantage.py   the critic's view and advantage (Eq. 3), a trained critic scoring candidate replies
baselines.py   the paper's baselines (Multi-Turn DPO, RFT) and the demo's warm start (sft)
bench.py       benchmarks: how much faster the stages run than the simple way of doing the same
cli.py         argument types that refuse bad values at parse time; fail() for bad input (exit 2),
               trajectories_or_fail() for the stages' input files
data.py        reading tasks and trajectories (JSONL) with clear errors, output paths, resumable writing,
               output folders written whole or not at all, the preference pairs of trajectories (Eq. 2)
demo.py        `make demo` / `make experiment`: the whole chain on the embedded model, one results table
distributed.py torchrun in one place: ranks, DDP or FSDP2 wrapping, padded shares, gathers, checkpoints
env.py         the interaction protocol: the agent's prompt, the answer marker, a dialogue's turns
fast_logps.py  token log-probs the fast way (a shared prefix encoded once), held equal to models.py's
fast_sampling.py  sampling the fast way (a batch that shrinks as replies end), held equal to models.py's
frontend.py    frontend tasks: the embedded human's page comparison, vision prompts, CLIP scoring, win rate
judge.py       the critic as a judge of final answers, checked against the tests
models.py      the plain way: the embedded default model, loading any Hugging Face causal LM, chat
               formatting, token log-probs, batched sampling, OpenAI-compatible servers
render.py      screenshots of HTML pages with headless chromium, offline and time-limited
report.py      one HTML page of a run: dialogues shaded by the critic's advantages, training curves
sandbox.py     where model-written code runs, never in the evaluator's own process
simulators.py  the simulated human: embedded (offline), an OpenAI-compatible URL, or a local model
stats.py       a task-level bootstrap interval and a rank correlation
training.py    what the trainers share: completion log-probs, π_ref cached, batches, log lines, saving
tasks/         the shipped task files and their generators (tasks/backend.py, tasks/frontend.py)
warmstart.py   scripted dialogues that warm-start the embedded model for the demo
"""
