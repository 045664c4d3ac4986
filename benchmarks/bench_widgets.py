"""Benchmark: time from a slider value change to a redrawn figure, for every view in kvsim.widgets.VIEWS.

One sample = set a control's value until the view's image widget holds the new PNG (the observer runs the
drawing function and renders the figure once; that PNG is what the browser receives). Target (issue 6):
median < 100 ms.
Writes benchmarks/results/widgets.{json,md}. Run: python benchmarks/bench_widgets.py
"""

import json
import os
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from kvsim.widgets import VIEWS  # noqa: E402

OUT = Path(__file__).parent / "results"


def _values(control):
    options = [o[1] if isinstance(o, tuple) else o for o in getattr(control, "options", ())]
    if options:
        return [options[0], options[len(options) // 2], options[-1]]
    return [control.min, (control.min + control.max) / 2 if isinstance(control.value, float) else (control.min + control.max) // 2, control.max]


def time_view(factory, rounds: int = 3):
    with capture_output():
        view = factory()
    samples = []
    for _ in range(rounds):
        for control in view.controls.values():
            for value in _values(control) + [control.value]:
                if value == control.value:
                    continue
                t0 = time.perf_counter()
                with capture_output():
                    control.value = value
                samples.append(time.perf_counter() - t0)
    return samples


def main():
    per_view, every = {}, []
    for name, factory in sorted(VIEWS.items()):
        s = time_view(factory)
        every += s
        per_view[name] = {"median_ms": round(1000 * float(np.median(s)), 1), "p90_ms": round(1000 * float(np.percentile(s, 90)), 1),
                          "samples": len(s)}
    result = {"median_ms_all_views": round(1000 * float(np.median(every)), 1), "target_ms": 100,
              "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2), "views": per_view}
    OUT.mkdir(exist_ok=True)
    (OUT / "widgets.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| view | median | p90 | samples |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['median_ms']} ms | {v['p90_ms']} ms | {v['samples']} |" for k, v in per_view.items()]
    lines.append(f"| **all views** | **{result['median_ms_all_views']} ms** | | {len(every)} |")
    (OUT / "widgets.md").write_text("\n".join(lines) + f"\n\nTarget: median < 100 ms. Load average at the end: {result['load_average_1min']}.\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
