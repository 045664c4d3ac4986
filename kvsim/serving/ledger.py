"""The books of one simulator run: where memory went, what happened, one timeline row per jump.

Contract (pure Python + numpy)
- ``SPLIT`` names the parts of the memory split (see :mod:`kvsim.serving.sim`); ``DETAIL`` names
  sums reported beside it: logical tokens (a shared block counted once per table that lists it)
  and the buddy allocator's rounding (a part of external_frag). A jump of k iterations adds its
  slot-iterations (Σ over the k iterations of slots in that part) to every total, and to the
  saturated totals too when a request was waiting (the server under load).
- Two averaging windows: ``share`` is over the whole run (what Kwon et al.'s Figure 2 averages),
  ``share_saturated`` over the iterations with a waiting request. Shares are slot-iterations over
  capacity_tokens · iterations of the window (at least one iteration).
- ``stats`` counts events and tokens (completions, output, prefill and recomputed tokens,
  preemptions, running and saturated iterations, and running iterations while saturated).
- :meth:`Ledger.result` closes the books into a :class:`SimResult` (summary + timeline arrays).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SPLIT = ("token_states", "reservation", "internal_frag", "cached", "external_frag", "idle")
DETAIL = ("logical_tokens", "buddy_rounding")
TIMELINE_COLUMNS = ("t", "iterations", "running", "waiting") + SPLIT


@dataclass
class SimResult:
    """``summary``: totals and shares of capacity; ``timeline``: one row per jump (arrays)."""

    summary: dict
    timeline: dict = field(repr=False)


class Ledger:
    """Running totals of the memory split and of the run's events (see module docstring)."""

    def __init__(self):
        self.slot_iterations = {k: 0 for k in SPLIT + DETAIL}
        self.saturated_slot_iterations = {k: 0 for k in SPLIT + DETAIL}  # iterations with a waiting request
        self.stats = {"completed": 0, "output_tokens": 0, "prefill_tokens": 0,
                      "recomputed_tokens": 0, "preemptions": 0, "running_iterations": 0,
                      "saturated_iterations": 0, "saturated_running_iterations": 0}
        self.rows = []

    def record(self, split: dict, iteration: int, steps: int, running: int, waiting: int):
        """Add a jump of ``steps`` iterations from ``iteration``: split = {part: slot-iterations}
        (DETAIL keys may come with it), ``running`` requests throughout, ``waiting`` at its start."""
        for key, value in split.items():
            self.slot_iterations[key] += value
            if waiting:
                self.saturated_slot_iterations[key] += value
        self.stats["running_iterations"] += steps * running
        if waiting:
            self.stats["saturated_iterations"] += steps
            self.stats["saturated_running_iterations"] += steps * running
        self.rows.append((iteration, steps, running, waiting, *(split.get(s, 0) / steps for s in SPLIT)))

    def summary(self, run: dict, capacity_tokens: int) -> dict:
        """``run`` (its description, ending with ``iterations``) + stats, throughput and shares."""
        iterations, total = max(run["iterations"], 1), self.slot_iterations
        s = {**run, **self.stats}
        s["tokens_per_iteration"] = s["output_tokens"] / iterations  # throughput proxy (= mean_running:
        # every running request generates one token per iteration, prefill and recompute included)
        saturated, busy = max(s["saturated_iterations"], 1), self.saturated_slot_iterations
        s["mean_running"] = s["running_iterations"] / iterations
        s["mean_running_saturated"] = s["saturated_running_iterations"] / saturated
        s["slot_iterations"] = dict(total)                                # raw sums: Σ over iterations
        s["share"] = {k: total[k] / (capacity_tokens * iterations) for k in SPLIT}
        s["share_saturated"] = {k: busy[k] / (capacity_tokens * saturated) for k in SPLIT}
        s["logical_token_share"] = total["logical_tokens"] / (capacity_tokens * iterations)
        s["buddy_rounding_share"] = total["buddy_rounding"] / (capacity_tokens * iterations)
        s["buddy_rounding_share_saturated"] = busy["buddy_rounding"] / (capacity_tokens * saturated)
        return s

    def result(self, run: dict, capacity_tokens: int) -> SimResult:
        """The summary (see :meth:`summary`) and the timeline."""
        return SimResult(self.summary(run, capacity_tokens), self.timeline())

    def timeline(self) -> dict:
        """{column: array with one value per jump}; split parts are per-iteration averages."""
        rows = np.array(self.rows, dtype=float).reshape(-1, len(TIMELINE_COLUMNS))
        return {name: rows[:, i] for i, name in enumerate(TIMELINE_COLUMNS)}
