"""Lesson 00 helpers: run the ``kvsim`` command line from a notebook, and a one-slider demo view.

Contract
- :func:`run_cli` runs ``kvsim <args>`` in a child process with the kernel's own Python
  (``python -m kvsim.cli``), so it works whether or not the ``kvsim`` script is on ``PATH``,
  and returns what a terminal would show (stdout, then stderr). The CLI is deterministic, so
  nbval can compare its output.
- :func:`draw_slider_demo` / :func:`slider_demo_view`: the smallest interactive view, one model's
  KV bytes against tokens with a dot at the slider's value (the pattern every lesson uses).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from .. import memory
from ..plots.size import plot_kv_vs_tokens
from ..registry import load_model
from .base import dropdown, int_slider, make_view

_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the kvsim package


def run_cli(command: str, timeout_seconds: float = 60) -> str:
    """Output of ``kvsim <command>`` run in a subprocess (a leading ``kvsim`` word is optional)."""
    args = shlex.split(command)
    if args[:1] == ["kvsim"]:
        args = args[1:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "kvsim.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout_seconds)
    return (proc.stdout + proc.stderr).rstrip("\n")


def draw_slider_demo(ax, tokens=8192, kv_dtype="bf16", model="llama-3-8b", max_tokens=131_072):
    """KV bytes of one sequence of ``model`` for 0..max_tokens tokens, with a dot at ``tokens``."""
    spec = load_model(model)
    t = np.linspace(0, max_tokens, 129).astype(np.int64)
    at = memory.kv_bytes(spec, tokens, 1, kv_dtype)
    plot_kv_vs_tokens(ax, t, {f"{model}, {kv_dtype}": memory.kv_bytes(spec, t, 1, kv_dtype)}, unit="GiB",
                      points={f"{tokens:,} tokens: {memory.format_bytes(at)}": (tokens, at)},
                      title=f"{model}: {memory.format_bytes(memory.bytes_per_token(spec, kv_dtype))} per token")
    ax.set_xlabel("tokens in the sequence")
    return ax


def slider_demo_view(tokens=8192, kv_dtype="bf16"):
    """A tokens slider and a dtype dropdown over :func:`draw_slider_demo`."""
    return make_view(draw_slider_demo, {
        "tokens": int_slider("tokens", tokens, 0, 131_072, step=1024),
        "kv_dtype": dropdown("KV dtype", ("bf16", "fp8", "fp32"), kv_dtype),
    }, figsize=(7, 3.6))
