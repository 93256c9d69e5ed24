"""ColBench: the collaborative agent benchmark of SWEET-RL (Zhou et al. 2025), rebuilt small.

The benchmark layer: it never imports a stage (rollout.py, evaluate.py, critic.py, policy.py); what
drives the stages is in harness/.

cli.py         argument types that refuse bad values at parse time; fail() for bad input (exit 2),
               trajectories_or_fail() for the stages' input files
data.py        reading tasks and trajectories (JSONL) with clear errors, output paths, resumable writing,
               output folders written whole or not at all, subsets of trajectories and of tasks
distributed.py torchrun in one place: ranks, DDP or FSDP2 wrapping, shares kept in step (filler passes),
               the gradient's scale, gathers, checkpoints
env.py         the interaction protocol: the agent's prompt, the answer marker, a dialogue's turns
fast_logps.py  token log-probs the fast way (a shared prefix encoded once), held equal to critic.py's
fast_sampling.py  sampling the fast way (a batch that shrinks as replies end), held equal to models.py's
frontend.py    frontend tasks: the embedded human's answers and page comparison, vision prompts, CLIP
               scoring, win rate
models.py      loading the embedded default model or any Hugging Face causal LM, chat formatting and the
               agent turns' tokens, batched sampling, OpenAI-compatible servers
render.py      screenshots of HTML pages with headless chromium, offline and time-limited
sandbox.py     where model-written code runs, never in the evaluator's own process
scripted.py    scripted agents that show a benchmark's room: a fixed script against asking by subject
simulators.py  the simulated human: embedded (offline), an OpenAI-compatible URL, or a local model
stats.py       a task-level bootstrap interval and a rank correlation
tasks/         the shipped task files and their generators (tasks/backend.py, tasks/frontend.py)
"""
