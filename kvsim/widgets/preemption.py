"""Lesson 07 views: preemptions as events (a few requests on a real allocator), and the per-GPU KV of GQA
against MLA under tensor parallelism.

Contract
- :func:`draw_preemption_story` / :func:`preemption_view`: :func:`kvsim.serving.preemption_story.preemption_story`
  for four requests arriving together (6-token prompts) on a pool of ``num_blocks`` blocks of 4 tokens.
- :func:`draw_tp_bytes` / :func:`tp_view`: bytes per token each GPU holds at tp = 1..16
  (:func:`kvsim.calc.memory.bytes_per_token` with ``tp``): KV heads split down to one per GPU, an MLA
  latent replicated on every GPU.
"""

from __future__ import annotations

from ..calc import memory
from ..calc.registry import load_model
from ..plots.preemption import plot_preemption_story
from ..plots.tp_split import plot_tp_bytes
from ..serving.preemption_story import preemption_story
from ..ui.base import dropdown, int_slider, make_view

TPS = (1, 2, 4, 8, 16)


def draw_preemption_story(ax, num_blocks=11, output_tokens=10, requests=4):
    """Four (or ``requests``) requests of 6 + ``output_tokens`` tokens on ``num_blocks`` blocks of 4."""
    story = preemption_story(((0, 6, output_tokens),) * requests, num_blocks, block_size=4)
    return plot_preemption_story(ax, story.states, story.preempted, title=(
        f"{requests} requests, {story.events} preemption events (the allocator's count) on {num_blocks} blocks of 4"))


def preemption_view(num_blocks=11, output_tokens=10):
    """Sliders for the pool size and the answer length over :func:`draw_preemption_story`."""
    return make_view(draw_preemption_story, {
        "num_blocks": int_slider("blocks", num_blocks, 7, 20),
        "output_tokens": int_slider("output tokens", output_tokens, 4, 16),
    }, figsize=(8, 3.4), margins=dict(left=0.24, right=0.98, bottom=0.33, top=0.88))


def draw_tp_bytes(ax, gqa_model="llama-3-70b", mla_model="deepseek-v3", kv_dtype="bf16"):
    """KV bytes per token on each GPU against tensor parallelism, for a GQA and an MLA model."""
    series = {}
    for name in (gqa_model, mla_model):
        spec = load_model(name)
        kind = "MLA latent" if any(x.kind == "mla" for x in spec.layers) else \
            f"{spec.layers[0].num_key_value_heads} KV heads"
        series[f"{name} ({kind})"] = [memory.bytes_per_token(spec, kv_dtype, tp=tp) for tp in TPS]
    return plot_tp_bytes(ax, TPS, series, title=f"KV per token on EACH GPU ({kv_dtype}): split heads, or a copy")


def tp_view(gqa_model="llama-3-70b", kv_dtype="bf16"):
    """A GQA model and the KV dtype over :func:`draw_tp_bytes` (against DeepSeek-V3's MLA)."""
    return make_view(draw_tp_bytes, {
        "gqa_model": dropdown("GQA model", ("llama-3-70b", "llama-3-8b", "llama-3.1-405b", "mixtral-8x7b"), gqa_model),
        "kv_dtype": dropdown("KV dtype", ("bf16", "fp8"), kv_dtype),
    }, figsize=(7.5, 4), margins=dict(left=0.13, right=0.97, bottom=0.13, top=0.9))
