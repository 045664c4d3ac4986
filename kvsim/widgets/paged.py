"""Lesson 07 views: block tables of a real allocator step by step, and KV memory over time in the
serving simulator under one reservation policy.
"""

from __future__ import annotations

from functools import lru_cache

import ipywidgets as widgets

from ..plots.paged import plot_block_tables, plot_split_over_time, sequence_colors
from ..serving import fragmentation, sim
from ..serving.blockview import sharing_scenario
from ..serving.workload import make_workload
from ..ui.base import dropdown, int_slider, make_view

VIEW_REQUESTS = 200          # requests per simulated run in the view (a redraw stays well under a second)
RATES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
BLOCK_SIZES = (4, 8, 16, 32, 64, 128, 256)


@lru_cache(maxsize=16)
def _scenario(block_size: int):
    return sharing_scenario(block_size=block_size)


def draw_block_tables(ax, step=3, block_size=4):
    """Step ``step`` (0-4) of :func:`kvsim.serving.blockview.sharing_scenario` on a real allocator."""
    steps = _scenario(block_size)
    snap = steps[min(step, len(steps) - 1)]
    return plot_block_tables(ax, snap, colors=sequence_colors(steps),
                             title=f"step {step}: {snap.label} (block size {block_size})")


def block_table_view(step=3, block_size=4):
    """Sliders for the scenario step and the block size over :func:`draw_block_tables`."""
    return make_view(draw_block_tables, {
        "step": int_slider("step", step, 0, len(_scenario(block_size)) - 1),
        "block_size": int_slider("block size", block_size, 2, 8),
    }, figsize=(8, 3.6), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.9))


@lru_cache(maxsize=64)
def _run(policy: str, block_size: int, rate: float, num_requests: int = VIEW_REQUESTS):
    w = make_workload(num_requests, "chat", rate=rate, seed=0)
    return sim.simulate(w, policy, capacity_tokens=fragmentation.kwon_setup_capacity_tokens(),
                        block_size=block_size)


def draw_serving(ax, policy="paged", block_size=16, rate=0.05):
    """KV memory split over time for 200 chat-like requests arriving at ``rate`` per iteration."""
    res = _run(policy, block_size, rate)
    t, shares = fragmentation.split_over_time(res, bins=100)
    s = res.summary
    what = f"blocks of {block_size}" if policy == "paged" else fragmentation.POLICY_LABELS[policy]
    plot_split_over_time(ax, t, shares, title=(
        f"{policy} ({what}), {rate} requests/iteration: {100 * s['share']['token_states']:.1f} % of KV memory "
        f"holds tokens\n{s['num_requests']} requests in {s['iterations']:,} iterations, "
        f"{s['mean_running']:.1f} running on average, {s['preemptions']} preemptions"))
    return ax


def serving_view(policy="paged", block_size=16, rate=0.05):
    """Policy, block size and arrival rate over :func:`draw_serving` (OPT-13B on an A100 40GB budget)."""
    return make_view(draw_serving, {
        "policy": dropdown("policy", sim.POLICIES, policy),
        "block_size": widgets.SelectionSlider(options=BLOCK_SIZES, value=block_size, description="block size",
                                              continuous_update=False),
        "rate": widgets.SelectionSlider(options=RATES, value=rate, description="arrivals / iteration",
                                        continuous_update=False),
    }, figsize=(7.5, 4.4), margins=dict(left=0.1, right=0.97, bottom=0.3, top=0.86))
