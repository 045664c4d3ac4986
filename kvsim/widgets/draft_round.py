"""Lesson 09 view: one speculative round drawn (draft, verify in one pass, accept, trim back).

Contract
- :func:`draw_round` / :func:`round_view`: :func:`kvsim.calc.draft_round.round_stages` for k drafts of
  which n are accepted (n is capped at k), on a cache that held 20 tokens before the round.
"""

from __future__ import annotations

from ..calc.draft_round import round_stages
from ..plots.draft_round import plot_round
from ..ui.base import int_slider, make_view

OFFSET = 20  # tokens in the target's cache before the round


def draw_round(ax, num_draft=4, accepted=2):
    """The four stages of one round with k = ``num_draft`` proposals and n = ``accepted``."""
    r = round_stages(OFFSET, num_draft, min(accepted, num_draft))
    return plot_round(ax, r, title=(
        f"k = {r.num_draft}, n = {r.accepted} accepted: {r.emitted} token{'s' if r.emitted > 1 else ''} "
        f"emitted for one target pass; the cache goes {r.offset_before} → {r.offset_after_verify} → "
        f"{r.offset_after}"))


def round_view(num_draft=4, accepted=2):
    """Sliders for the draft length k and the accepted count n over :func:`draw_round`."""
    return make_view(draw_round, {
        "num_draft": int_slider("draft tokens k", num_draft, 1, 8),
        "accepted": int_slider("accepted n", accepted, 0, 8),
    }, figsize=(9, 5.2), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.9))
