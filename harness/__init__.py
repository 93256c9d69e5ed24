"""The harness: what drives the four stages, each run as a user would run it.

baselines.py   the paper's baselines (Multi-Turn DPO with policy.py's loss, RFT) and the warm start (sft)
bench.py       benchmarks: how much faster the fast paths run than the plain way of doing the same
demo.py        `make demo` / `make experiment` / `make frontend`: the whole chain on the embedded model
judge.py       the critic as a judge of final answers, checked against the tests
report.py      one HTML page of a run: dialogues shaded by the critic's advantages, training curves
warmstart.py   scripted dialogues that warm-start the embedded model for the demo
"""
