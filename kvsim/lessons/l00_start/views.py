"""Lesson 00 view: the smallest interactive view.

Contract
- :func:`draw_slider_demo` / :func:`slider_demo_view`: the smallest interactive view, one model's
  KV bytes against tokens with a dot at the slider's value (the pattern every lesson uses).
"""

from __future__ import annotations

from ...calc import units
from ...ui.base import dropdown, int_slider, make_view
from ...ui.charts import plot_kv_vs_tokens
from .data import slider_demo_curve


def draw_slider_demo(ax, tokens=8192, kv_dtype="bf16", model="llama-3-8b", max_tokens=131_072):
    """KV bytes of one sequence of ``model`` for 0..max_tokens tokens, with a dot at ``tokens``."""
    d = slider_demo_curve(model, tokens, kv_dtype, max_tokens)
    at = d["at_bytes"]
    plot_kv_vs_tokens(ax, d["tokens"], {f"{model}, {kv_dtype}": d["kv_bytes"]}, unit="GiB",
                      points={f"{tokens:,} tokens: {units.format_bytes(at)}": (tokens, at)},
                      title=f"{model}: {units.format_bytes(d['per_token_bytes'])} per token")
    ax.set_xlabel("tokens in the sequence")
    return ax


def slider_demo_view(tokens=8192, kv_dtype="bf16"):
    """A tokens slider and a dtype dropdown over :func:`draw_slider_demo`."""
    return make_view(draw_slider_demo, {
        "tokens": int_slider("tokens", tokens, 0, 131_072, step=1024),
        "kv_dtype": dropdown("KV dtype", ("bf16", "fp8", "fp32"), kv_dtype),
    }, figsize=(7, 3.6))
