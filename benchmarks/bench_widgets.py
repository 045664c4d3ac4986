"""Benchmark: time from a slider value change to a redrawn figure, for every view in kvsim.widgets.VIEWS.

One sample = set a control's value until the view's image widget holds the new PNG (the observer runs the
drawing function, renders the figure, fits its layout and encodes the PNG the browser receives). Per view,
3 rounds over every control: its minimum, middle, maximum, and back to its default (values equal to the
current one are skipped). Reported: wall-clock median and p90 per view and over all samples, the CPU time of
this process (less sensitive to other work on a shared machine), and renders per redraw (1 = the layout held;
2 = it was refitted, see kvsim.widgets.layout). Target (issue 10): median ≤ 50 ms.
Writes benchmarks/results/widgets.{json,md}. Run: python benchmarks/bench_widgets.py [rounds]
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from IPython.utils.capture import capture_output

from kvsim.lessons import VIEWS

OUT = Path(__file__).parent / "results"
TARGET_MS = 50


def _values(control):
    options = [o[1] if isinstance(o, tuple) else o for o in getattr(control, "options", ())]
    if options:
        return [options[0], options[len(options) // 2], options[-1]]
    middle = (control.min + control.max) / 2 if isinstance(control.value, float) else (control.min + control.max) // 2
    return [control.min, middle, control.max]


def time_view(factory, rounds: int = 3):
    """(wall seconds, CPU seconds, renders per redraw) of every slider move of ``rounds`` rounds."""
    with capture_output():
        view = factory()
    renders = getattr(view, "renders", [])  # (views before issue 10 did not count them)
    start = len(renders)
    wall, cpu = [], []
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
    return wall, cpu, renders[start:]


def _ms(samples, q=50):
    return round(1000 * float(np.percentile(samples, q)), 1)


def main(rounds: int = 3):
    load_before = os.getloadavg()[0]
    per_view, every_wall, every_cpu = {}, [], []
    for name, factory in sorted(VIEWS.items()):
        wall, cpu, renders = time_view(factory, rounds)
        every_wall += wall
        every_cpu += cpu
        per_view[name] = {"median_ms": _ms(wall), "p90_ms": _ms(wall, 90), "cpu_median_ms": _ms(cpu),
                          "renders_per_redraw": round(float(np.mean(renders)), 2) if renders else None,
                          "samples": len(wall)}
    result = {"median_ms_all_views": _ms(every_wall), "cpu_median_ms_all_views": _ms(every_cpu),
              "median_of_view_medians_ms": round(float(np.median([v["median_ms"] for v in per_view.values()])), 1),
              "target_ms": TARGET_MS, "cpus": os.cpu_count(), "load_average_1min_before": round(load_before, 2),
              "load_average_1min_after": round(os.getloadavg()[0], 2), "views": per_view}
    OUT.mkdir(exist_ok=True)
    (OUT / "widgets.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| view | median | p90 | CPU median | renders per redraw | samples |", "|---|---|---|---|---|---|"]
    lines += [f"| {k} | {v['median_ms']} ms | {v['p90_ms']} ms | {v['cpu_median_ms']} ms | "
              f"{v['renders_per_redraw']} | {v['samples']} |" for k, v in per_view.items()]
    lines.append(f"| **all views** | **{result['median_ms_all_views']} ms** | | "
                 f"**{result['cpu_median_ms_all_views']} ms** | | {len(every_wall)} |")
    (OUT / "widgets.md").write_text("\n".join(lines) + (
        f"\n\nTarget: median ≤ {TARGET_MS} ms over all slider moves. {result['cpus']} CPUs; 1-minute load average "
        f"{result['load_average_1min_before']} before, {result['load_average_1min_after']} after.\n"))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
