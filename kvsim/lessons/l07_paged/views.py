"""Lesson 07 (paged attention and serving): the lesson's controls: each view wraps this lesson's data/measure
functions and its plots; it computes nothing.

Lesson 07 views: block tables of a real allocator step by step, and KV memory over time in the
serving simulator under one reservation policy.

Lesson 07 views: preemptions as events (a few requests on a real allocator), and the per-GPU KV of GQA
against MLA under tensor parallelism.

Contract
- :func:`draw_preemption_story` / :func:`preemption_view`: :func:`kvsim.lessons.l07_paged.data.preemption_story`
  for four requests arriving together (6-token prompts) on a pool of ``num_blocks`` blocks of 4 tokens.
- :func:`draw_tp_bytes` / :func:`tp_view`: bytes per token each GPU holds at tp = 1..16
  (:func:`kvsim.calc.memory.bytes_per_token` with ``tp``): KV heads split down to one per GPU, an MLA
  latent replicated on every GPU.
"""

from __future__ import annotations

from functools import lru_cache

import ipywidgets as widgets

from ...serving import sim
from ...ui.base import dropdown, int_slider, make_view
from .data import (TPS, last_step, preemption_story, scenario_step, serving_numbers, sharing_scenario, story_requests,
                   tp_bytes_series)
from .plots import (
    plot_block_tables,
    plot_preemption_story,
    plot_split_over_time,
    plot_tp_bytes,
    sequence_colors,
)


RATES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
SATURATED_RATE = 1.0  # the lesson's own rate: requests queue, memory stays full, the policy decides what it holds
BLOCK_SIZES = (4, 8, 16, 32, 64, 128, 256)


@lru_cache(maxsize=16)
def _scenario(block_size: int):
    return sharing_scenario(block_size=block_size)


def draw_block_tables(ax, step=3, block_size=4):
    """Step ``step`` (0-4) of :func:`kvsim.lessons.l07_paged.data.sharing_scenario` on a real allocator."""
    steps = _scenario(block_size)
    snap = scenario_step(steps, step)
    return plot_block_tables(ax, snap, colors=sequence_colors(steps),
                             title=f"step {step}: {snap.label} (block size {block_size})")


def block_table_view(step=3, block_size=4):
    """Sliders for the scenario step and the block size over :func:`draw_block_tables`."""
    return make_view(draw_block_tables, {
        "step": int_slider("step", step, 0, last_step(_scenario(block_size))),
        "block_size": int_slider("block size", block_size, 2, 8),
    }, figsize=(8, 3.6), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.9))


def draw_serving(ax, policy="paged", block_size=16, rate=SATURATED_RATE):
    """KV memory split over time for 200 chat-like requests arriving at ``rate`` per iteration."""
    d = serving_numbers(policy, block_size, rate)
    s = d["summary"]
    plot_split_over_time(ax, d["t"], d["shares"], title=(
        f"{policy} ({d['policy_label']}), {rate} requests/iteration: {d['token_states_percent']:.1f} % of KV memory "
        f"holds tokens\n{s['num_requests']} requests in {s['iterations']:,} iterations, "
        f"{s['mean_running']:.1f} running on average, {s['preemptions']} preemptions"))
    return ax


def serving_view(policy="paged", block_size=16, rate=SATURATED_RATE):
    """Policy, block size and arrival rate over :func:`draw_serving` (OPT-13B on an A100 40GB budget)."""
    return make_view(draw_serving, {
        "policy": dropdown("policy", sim.POLICIES, policy),
        "block_size": widgets.SelectionSlider(options=BLOCK_SIZES, value=block_size, description="block size",
                                              continuous_update=False),
        "rate": widgets.SelectionSlider(options=RATES, value=rate, description="arrivals / iteration",
                                        continuous_update=False),
    }, figsize=(7.5, 4.4), margins=dict(left=0.1, right=0.97, bottom=0.3, top=0.86))




def draw_preemption_story(ax, num_blocks=11, output_tokens=10, requests=4):
    """Four (or ``requests``) requests of 6 + ``output_tokens`` tokens on ``num_blocks`` blocks of 4."""
    story = preemption_story(story_requests(output_tokens, requests), num_blocks, block_size=4)
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
    series = tp_bytes_series((gqa_model, mla_model), kv_dtype, TPS)
    return plot_tp_bytes(ax, TPS, series, title=f"KV per token on EACH GPU ({kv_dtype}): split heads, or a copy")


def tp_view(gqa_model="llama-3-70b", kv_dtype="bf16"):
    """A GQA model and the KV dtype over :func:`draw_tp_bytes` (against DeepSeek-V3's MLA)."""
    return make_view(draw_tp_bytes, {
        "gqa_model": dropdown("GQA model", ("llama-3-70b", "llama-3-8b", "llama-3.1-405b", "mixtral-8x7b"), gqa_model),
        "kv_dtype": dropdown("KV dtype", ("bf16", "fp8"), kv_dtype),
    }, figsize=(7.5, 4), margins=dict(left=0.13, right=0.97, bottom=0.13, top=0.9))
