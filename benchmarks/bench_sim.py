"""Benchmark: simulator speed, and the Kwon et al. (2023) Figure 2 / Figure 13a reproduction.

Speed: simulated requests per minute of CPU time (``time.process_time``, so other processes on
the shared machine do not count against it; wall time is reported too) for every policy on
two scenarios: the Figure 2 setting (OPT-13B on one A100 40GB: Table 1's 15,728 token slots, all
requests at t=0) and a large budget (Llama 3 8B on H100 80GB, ~467K slots, Poisson arrivals).
Target: at least 100,000 simulated requests per minute in the slowest case.

Figure 2: the split of KV memory (token states, reservation, internal fragmentation, external
fragmentation & others) under the paper's Orca baselines (buddy allocator; Max 2048, Pow2 over the
output, Oracle) and paged blocks of 16, with the chat (ShareGPT-like) workload, beside the paper's
split and Figure 13a's mean running requests, in both averaging windows (the whole run, as the paper
averages; the iterations with a waiting request). The paper's numbers come from
:mod:`kvsim.serving.fragmentation`. Writes benchmarks/results/sim.{json,md}.
Run: python benchmarks/bench_sim.py [--requests 20000]
"""

import argparse
import json
import platform
import time
from pathlib import Path

from kvsim.serving import fragmentation as fr
from kvsim.serving.sim import POLICIES, capacity_tokens_for, simulate
from kvsim.serving.workload import make_workload

OUT = Path(__file__).parent / "results"
TARGET_REQUESTS_PER_MIN = 100_000


def timed(workload, policy, cap, **kw):
    c0, w0 = time.process_time(), time.perf_counter()
    r = simulate(workload, policy, capacity_tokens=cap, **kw)
    return r, time.process_time() - c0, time.perf_counter() - w0


def figure2_markdown(rows, n, cap) -> list[str]:
    """The Figure 2 / 13a comparison (:func:`kvsim.serving.fragmentation.figure2_rows`) as markdown lines."""
    columns = ["source", *fr.PART_COLUMNS.values(), "buddy rounding %", "mean running"]
    lines = [f"Kwon et al. 2023, Figure 2 (share of KV memory, %) and Figure 13a (mean running requests): "
             f"OPT-13B on A100 40GB ({cap:,} token slots, Table 1), {n:,} chat requests at t=0. The paper "
             f"averages over the whole experiment; 'while waiting' averages over the iterations with a "
             f"waiting request. Buddy rounding is part of external & others.", "",
             "| policy | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 1)]
    for r in rows:
        cells = ["" if r[c] is None else str(r[c]) for c in columns]
        lines.append(f"| {fr.POLICY_LABELS[r['policy']]} | " + " | ".join(cells) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    args = ap.parse_args()
    n = args.requests
    fig2_name = "fig2: OPT-13B / A100 40GB, all at t=0"
    scenarios = {
        fig2_name: (make_workload(n, "chat", max_len=fr.KWON_MAX_LEN, seed=0), fr.KWON_CAPACITY_TOKENS),
        "Llama 3 8B / H100 80GB, Poisson 0.5/iter": (make_workload(n, "chat", rate=0.5, seed=0),
                                                     capacity_tokens_for("llama-3-8b", "H100 80GB")),
    }
    speed, fig2 = [], {}
    for name, (w, cap) in scenarios.items():
        for policy in POLICIES:
            r, cpu, wall = timed(w, policy, cap)
            s = r.summary
            speed.append({"scenario": name, "policy": policy, "capacity_tokens": cap, "requests": n,
                          "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                          "requests_per_min_cpu": round(n / cpu * 60), "iterations": s["iterations"],
                          "preemptions": s["preemptions"], "mean_running": round(s["mean_running"], 2)})
            if name == fig2_name:
                fig2[policy] = r
    rows = fr.figure2_rows(fig2)
    worst = min(r["requests_per_min_cpu"] for r in speed)
    OUT.mkdir(exist_ok=True)
    meta = {"machine": platform.platform(), "processor": platform.processor(),
            "target_requests_per_min": TARGET_REQUESTS_PER_MIN}
    (OUT / "sim.json").write_text(json.dumps({**meta, "speed": speed, "figure2": rows}, indent=2) + "\n")
    lines = figure2_markdown(rows, n, fr.KWON_CAPACITY_TOKENS)
    lines += ["", f"Simulator speed ({n:,} requests per run, CPU time):", "",
              "| scenario | policy | requests / min | CPU s | wall s | preemptions |", "|---|---|---:|---:|---:|---:|"]
    for r in speed:
        lines.append(f"| {r['scenario']} | {r['policy']} | {r['requests_per_min_cpu']:,} | {r['cpu_s']} | "
                     f"{r['wall_s']} | {r['preemptions']:,} |")
    lines += ["", f"Slowest: {worst:,} requests per minute (target >= {TARGET_REQUESTS_PER_MIN:,}): "
                  f"{'met' if worst >= TARGET_REQUESTS_PER_MIN else 'NOT met'}."]
    (OUT / "sim.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
