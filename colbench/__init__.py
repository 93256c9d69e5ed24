"""ColBench: the collaborative agent benchmark of SWEET-RL (Zhou et al. 2025), rebuilt small.

data.py       reading tasks and trajectories (JSONL), clear errors, output paths, resumable writing
models.py     the embedded default model, loading any Hugging Face causal LM, chat formatting
env.py        the interaction protocol: agent prompt, answer marker, the turn loop
simulators.py the simulated human: embedded (offline), OpenAI-compatible URL, local model
backend_tasks.py  the generator of the shipped backend task set (colbench/data/)
"""
