"""Benchmark: time from a slider value change to a redrawn figure, for every view in kvsim.lessons.VIEWS.

One sample = set a control's value until the view's image widget holds the new PNG. A state (the controls'
values) not shown before is drawn: the observer runs the drawing function, renders the figure on its frozen
layout (laid out again only when its structure changed or its labels outgrew it, see kvsim.ui.layout)
and encodes the PNG the browser receives. A state shown before is served from the view's cache of finished
frames. Per view, 3 rounds over every control: its minimum, middle, maximum, and back to its default (values
equal to the current one are skipped); the first round draws, the later ones mostly revisit.

Reported per view and over all views: the wall-clock median and p90 of the redraws of new states, their CPU
time in this process (less sensitive to other work on a shared machine), renders per drawn state (1 = the
layout held; 2 = laid out again after the render), and the median of the revisited states. The machine's
1-minute load average is recorded before and after, and after each view. The machine's speed is recorded too:
the median time of a fixed reference render (:func:`reference_ms`: stock matplotlib, no kvsim code) before and after
the views; the same code on the same machine has measured ~1.4× slower on one day than another at a similar load
average, so compare two runs by their redraw medians over their reference times as well. Targets (issue 16):
median redraw ≤ 60 ms over all views, revisited state ≤ 5 ms.
Writes benchmarks/results/<name>.{json,md} (name: widgets). Run: python benchmarks/bench_widgets.py [rounds] [name]
"""

import json
import os
import sys
import time
from pathlib import Path

import matplotlib
import numpy as np
from IPython.utils.capture import capture_output
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvsim.lessons import VIEWS

OUT = Path(__file__).parent / "results"
TARGET_MS = 60
REVISIT_TARGET_MS = 5


def _values(control):
    options = [o[1] if isinstance(o, tuple) else o for o in getattr(control, "options", ())]
    if options:
        return [options[0], options[len(options) // 2], options[-1]]
    middle = (control.min + control.max) / 2 if isinstance(control.value, float) else (control.min + control.max) // 2
    return [control.min, middle, control.max]


def reference_ms(repeats: int = 15) -> float:
    """Median wall time of one stock Agg render (matplotlib's own canvas and renderer, none of kvsim) of a fixed
    7.5 × 4.2 in figure at 100 dpi: a line of 200 points, title, axis labels, grid and legend."""
    fig = Figure(figsize=(7.5, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = np.linspace(0, 10, 200)
    ax.plot(x, np.sin(x) * x, label="reference line")
    ax.set(title="a fixed reference figure, 1,024 tokens", xlabel="tokens per sequence", ylabel="KV cache (GiB)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.canvas.draw()  # warm: font lookups, tick creation
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fig.canvas.draw()
        times.append(time.perf_counter() - t0)
    return round(1000 * float(np.median(times)), 1)


def time_view(factory, rounds: int = 3):
    """(wall seconds, CPU seconds, served from the frame cache) of every slider move of ``rounds`` rounds, and
    the renders of each state drawn."""
    with capture_output():
        view = factory()
    start = len(view.renders)
    wall, cpu, cached = [], [], []
    for _ in range(rounds):
        for control in view.controls.values():
            for value in _values(control) + [control.value]:
                if value == control.value:
                    continue
                t0, c0 = time.perf_counter(), time.process_time()
                with capture_output():
                    control.value = value
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                cached.append(view.served_from_cache[-1])
    return wall, cpu, cached, view.renders[start:]


def _ms(samples, q=50):
    if not samples:
        return None
    ms = 1000 * float(np.percentile(samples, q))
    return round(ms, 2 if ms < 10 else 1)


def main(rounds: int = 3, name: str = "widgets"):
    load_before, reference_before = os.getloadavg()[0], reference_ms()
    per_view, new_wall, new_cpu, revisit_wall = {}, [], [], []
    for view_name, factory in sorted(VIEWS.items()):
        wall, cpu, cached, renders = time_view(factory, rounds)
        drawn = [w for w, c in zip(wall, cached) if not c]
        drawn_cpu = [t for t, c in zip(cpu, cached) if not c]
        served = [w for w, c in zip(wall, cached) if c]
        new_wall += drawn
        new_cpu += drawn_cpu
        revisit_wall += served
        per_view[view_name] = {"median_ms": _ms(drawn), "p90_ms": _ms(drawn, 90), "cpu_median_ms": _ms(drawn_cpu),
                               "renders_per_redraw": round(float(np.mean(renders)), 2) if renders else None,
                               "samples": len(drawn), "revisited_median_ms": _ms(served), "revisits": len(served),
                               "load_average_1min": round(os.getloadavg()[0], 2)}
    worst = max(per_view, key=lambda k: per_view[k]["median_ms"])
    result = {"median_ms_all_views": _ms(new_wall), "cpu_median_ms_all_views": _ms(new_cpu),
              "median_of_view_medians_ms": round(float(np.median([v["median_ms"] for v in per_view.values()])), 1),
              "worst_view": worst, "worst_view_median_ms": per_view[worst]["median_ms"],
              "revisited_median_ms_all_views": _ms(revisit_wall), "revisited_p90_ms_all_views": _ms(revisit_wall, 90),
              "target_ms": TARGET_MS, "revisited_target_ms": REVISIT_TARGET_MS,
              "matplotlib": matplotlib.__version__, "cpus": os.cpu_count(),
              "load_average_1min_before": round(load_before, 2), "load_average_1min_after": round(os.getloadavg()[0], 2),
              "reference_ms_before": reference_before, "reference_ms_after": reference_ms(),
              "views": per_view}
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| view | median | p90 | CPU median | renders per redraw | samples | revisited median | revisits | load |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {k} | {v['median_ms']} ms | {v['p90_ms']} ms | {v['cpu_median_ms']} ms | "
              f"{v['renders_per_redraw']} | {v['samples']} | {v['revisited_median_ms']} ms | {v['revisits']} | "
              f"{v['load_average_1min']} |" for k, v in per_view.items()]
    lines.append(f"| **all views** | **{result['median_ms_all_views']} ms** | | "
                 f"**{result['cpu_median_ms_all_views']} ms** | | {len(new_wall)} | "
                 f"**{result['revisited_median_ms_all_views']} ms** | {len(revisit_wall)} | |")
    (OUT / f"{name}.md").write_text("\n".join(lines) + (
        f"\n\nmatplotlib {result['matplotlib']}. Median and p90: redraws of states not shown before (drawn, rendered, "
        f"encoded); revisited: states served from the view's frame cache. Worst view: {worst} "
        f"({result['worst_view_median_ms']} ms). Targets: median ≤ {TARGET_MS} ms over all views, revisited ≤ "
        f"{REVISIT_TARGET_MS} ms. {result['cpus']} CPUs; 1-minute load average {result['load_average_1min_before']} "
        f"before, {result['load_average_1min_after']} after (load column: after each view; the machine is shared, "
        f"so wall-clock times grow with the load, CPU times less). Machine speed: the reference render (stock "
        f"matplotlib, a fixed figure) took {result['reference_ms_before']} ms before, "
        f"{result['reference_ms_after']} ms after.\n"))
    print(json.dumps({k: v for k, v in result.items() if k != "views"}, indent=2))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2] if len(sys.argv) > 2 else "widgets")
