"""Benchmark: simulator speed, and the Kwon et al. (2023) Figure 2 reproduction.

Speed: simulated requests per minute of CPU time (``time.process_time``, so other processes on
the shared machine do not count against it; wall time is reported too) for every policy on
two scenarios: the Figure 2 setting (OPT-13B on one A100 40GB, ~14K token slots, saturated) and a
large budget (Llama 3 8B on H100 80GB, ~467K slots, Poisson arrivals). Target (issue 5): at least
100,000 simulated requests per minute on this machine.

Figure 2: share of KV memory holding real tokens while requests wait (saturated iterations) for
Orca-style contiguous reservation (max length 2048, next power of two, oracle length) and paged
blocks of 16, with the chat (ShareGPT-like) workload. Paper: 20.4 %, 26.8 %, 38.2 %, 96.3 %.
Writes benchmarks/results/sim.{json,md}. Run: python benchmarks/bench_sim.py [--requests 20000]
"""

import argparse
import json
import platform
import time
from pathlib import Path

from kvsim.calc import capacity, memory
from kvsim.calc.config import LayerSpec, ModelSpec
from kvsim.calc.hardware import get_accelerator
from kvsim.serving.ledger import SPLIT
from kvsim.serving.sim import POLICIES, capacity_tokens_for, simulate
from kvsim.serving.workload import make_workload

OUT = Path(__file__).parent / "results"
PAPER = {"max": 20.4, "pow2": 26.8, "oracle": 38.2, "paged": 96.3}
LABEL = {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)", "paged": "vLLM (paged, bs 16)"}


def opt_13b_capacity_tokens() -> int:
    """OPT-13B (40 layers, 40 heads of 128, fp16, 12.85e9 parameters) on an A100 40GB at 0.9."""
    layer = LayerSpec(kind="full", num_key_value_heads=40, head_dim=128)
    spec = ModelSpec(name="opt-13b", model_type="opt", layers=(layer,) * 40, hidden_size=5120,
                     num_attention_heads=40, vocab_size=50272)
    budget = capacity.kv_budget_bytes(get_accelerator("A100 40GB").memory_bytes, 0.9, 12.85e9 * 2)
    return budget // memory.bytes_per_token(spec, "fp16")  # 819,200 B per token


def timed(workload, policy, cap, **kw):
    c0, w0 = time.process_time(), time.perf_counter()
    s = simulate(workload, policy, capacity_tokens=cap, **kw).summary
    return s, time.process_time() - c0, time.perf_counter() - w0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    args = ap.parse_args()
    n = args.requests
    scenarios = {
        "fig2: OPT-13B / A100 40GB, all at t=0": (make_workload(n, "chat", seed=0), opt_13b_capacity_tokens()),
        "Llama 3 8B / H100 80GB, Poisson 0.5/iter": (make_workload(n, "chat", rate=0.5, seed=0),
                                                     capacity_tokens_for("llama-3-8b", "H100 80GB")),
    }
    speed, fig2 = [], []
    for name, (w, cap) in scenarios.items():
        for policy in POLICIES:
            s, cpu, wall = timed(w, policy, cap)
            speed.append({"scenario": name, "policy": policy, "capacity_tokens": cap, "requests": n,
                          "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                          "requests_per_min_cpu": round(n / cpu * 60), "iterations": s["iterations"],
                          "preemptions": s["preemptions"], "mean_running": round(s["mean_running"], 1)})
            if name.startswith("fig2"):
                fig2.append({"policy": policy, "label": LABEL[policy], "paper_pct": PAPER[policy],
                             **{f"{k}_pct": round(100 * v, 1) for k, v in s["share_saturated"].items()},
                             "tokens_per_iteration": round(s["tokens_per_iteration"], 2),
                             "preemptions": s["preemptions"]})
    worst = min(r["requests_per_min_cpu"] for r in speed)
    OUT.mkdir(exist_ok=True)
    meta = {"machine": platform.platform(), "processor": platform.processor(), "target_requests_per_min": 100000}
    (OUT / "sim.json").write_text(json.dumps({**meta, "speed": speed, "figure2": fig2}, indent=2) + "\n")
    lines = [f"Figure 2 of Kwon et al. 2023: share of KV memory (%) while requests wait; OPT-13B on "
             f"A100 40GB ({scenarios[next(iter(scenarios))][1]:,} token slots), {n:,} chat requests at t=0.", "",
             "| system | paper: token states | kvsim: " + " | ".join(SPLIT[:3] + SPLIT[4:5]) + " | tokens/iter |",
             "|---|---:|" + "---:|" * 5]
    for r in fig2:
        lines.append(f"| {r['label']} | {r['paper_pct']} | " + " | ".join(
            str(r[f"{k}_pct"]) for k in SPLIT[:3] + SPLIT[4:5]) + f" | {r['tokens_per_iteration']} |")
    lines += ["", f"Simulator speed ({n:,} requests per run, CPU time):", "",
              "| scenario | policy | requests / min | CPU s | wall s | preemptions |", "|---|---|---:|---:|---:|---:|"]
    for r in speed:
        lines.append(f"| {r['scenario']} | {r['policy']} | {r['requests_per_min_cpu']:,} | {r['cpu_s']} | "
                     f"{r['wall_s']} | {r['preemptions']:,} |")
    lines += ["", f"Slowest: {worst:,} requests per minute (target >= 100,000): "
                  f"{'met' if worst >= 100000 else 'NOT met'}."]
    (OUT / "sim.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
