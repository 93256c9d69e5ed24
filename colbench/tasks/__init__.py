"""The shipped ColBench tasks: the JSONL files in this folder and the generators that write them.

backend.py   the backend (programming) tasks: backend_{train,valid,test}.jsonl
frontend.py  the frontend (web design) tasks: frontend_{train,test}.jsonl

    python -m colbench.tasks.backend     # rewrites backend_{train,valid,test}.jsonl here, byte for byte
    python -m colbench.tasks.frontend    # rewrites frontend_{train,test}.jsonl here, byte for byte
"""
import os

FOLDER = os.path.dirname(os.path.abspath(__file__))  # where the task files live, and where the generators write
