"""Lesson 10 (the engine): the lesson's controls: each view wraps this lesson's data/measure functions and its
plots; it computes nothing.

Contract
- :func:`draw_admission` / :func:`admission_view`: both policies (wait: bounded FIFO; busy: HTTP 503 at once)
  on the same seeded requests (:func:`kvsim.lessons.l10_engine.data.admission_at`): requests waiting and
  running per iteration, with the mean time-to-first-token and the rejected count of each in the title;
  sliders for the arrival rate, max_sequences and the queue bound.
- :func:`draw_admission_sweep`: one measure of :func:`kvsim.lessons.l10_engine.data.admission_curves`
  against arrival rate, both policies.
- :func:`draw_batch` / :func:`batch_view`: the batch over time of a real continuous-batching run
  (:func:`kvsim.lessons.l10_engine.measure.continuous_run`) for a model family and a slot count; a family
  that cannot batch (``supports_batching`` False) runs one slot at a time.
- :func:`draw_pool_timeline`: :func:`kvsim.lessons.l10_engine.measure.pool_timeline`'s rows as bars.
"""

from __future__ import annotations

import ipywidgets as widgets

from ...ui.base import int_slider, make_view
from .data import MAX_QUEUE, MAX_SEQUENCES, RATES, admission_at, slots_label
from .measure import NAMES, continuous_run
from .plots import plot_against_rate, plot_pool_timeline, plot_queue_over_time, plot_schedule

SWEEP_LABELS = {"mean_ttft": "mean time-to-first-token (iterations)", "p95_ttft": "p95 time-to-first-token (iterations)",
                "rejected": "rejected requests (HTTP 503)", "max_queue": "longest queue (requests)"}


def draw_admission(ax, rate=0.14, max_sequences=MAX_SEQUENCES, max_queue=MAX_QUEUE):
    """Waiting and running requests per iteration for the wait and busy policies at one arrival rate."""
    res = admission_at(rate, max_sequences, max_queue)
    summary = "; ".join(f"{p}: mean TTFT {r.mean_ttft:.1f} it, {r.rejected_count} rejected" for p, r in res.items())
    return plot_queue_over_time(ax, {p: r.queue_length for p, r in res.items()},
                                {p: r.running for p, r in res.items()}, max_sequences,
                                title=f"{len(res['wait'].rejected)} requests at {rate:.2f} per iteration, "
                                      f"queue bound {max_queue}\n{summary}")


def admission_view(rate=0.14, max_sequences=MAX_SEQUENCES, max_queue=MAX_QUEUE):
    """Sliders for arrival rate, max_sequences and max_queue over :func:`draw_admission`."""
    return make_view(draw_admission, {
        "rate": widgets.SelectionSlider(options=[(f"{r:.2f}", r) for r in RATES], value=rate,
                                        description="arrivals / iteration", continuous_update=False),
        "max_sequences": int_slider("max_sequences", max_sequences, 1, 16),
        "max_queue": int_slider("max_queue", max_queue, 1, 64),
    }, figsize=(8.5, 4.4))


def draw_admission_sweep(ax, curves: dict, measure: str = "mean_ttft"):
    """``measure`` of :func:`~kvsim.lessons.l10_engine.data.admission_curves` against rate, wait vs busy."""
    return plot_against_rate(ax, curves["rates"], {p: curves[p][measure] for p in ("wait", "busy")},
                             ylabel=SWEEP_LABELS[measure], title=SWEEP_LABELS[measure].split(" (")[0])


def draw_batch(ax, kind="gqa", max_batch=2):
    """The batch over time of a real continuous-batching run of the toy ``kind`` with ``max_batch`` slots."""
    run = continuous_run(kind, max_batch)
    sched = run["schedule"]
    note = "" if run["supports_batching"] else " (cannot batch: one slot)"
    return plot_schedule(ax, sched.codes(), sched.batch, title=(
        f"{NAMES[kind]}, max_batch {max_batch} → {slots_label(sched.slots)}{note}: "
        f"{sched.steps} steps; tokens equal to decoding alone: {run['all_equal']}"))


def batch_view(kind="gqa", max_batch=2):
    """A family dropdown and a slot slider over :func:`draw_batch`."""
    return make_view(draw_batch, {
        "kind": widgets.Dropdown(options=[(NAMES[k], k) for k in ("gqa", "jamba", "rg_lru")], value=kind,
                                 description="model"),
        "max_batch": int_slider("max_batch", max_batch, 1, 4),
    }, figsize=(9, 4.2), margins=dict(left=0.1, right=0.98, bottom=0.25, top=0.88))


def draw_pool_timeline(ax, rows):
    """Rows of :func:`~kvsim.lessons.l10_engine.measure.pool_timeline` as stacked bars per SequenceId."""
    return plot_pool_timeline(ax, [r["label"] for r in rows], [r["per_sequence"] for r in rows],
                              [r["calculator"] for r in rows],
                              title="one CachePool, Llama-like and Jamba-like sequences: bars = Σ nbytes, "
                                    "ticks = calculator")
