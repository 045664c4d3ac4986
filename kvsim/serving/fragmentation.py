"""Where KV memory goes under each reservation policy: kvsim's simulator against Kwon et al. Figure 2.

Contract (pure numpy over :mod:`kvsim.serving.sim`; deterministic for a given workload)
- ``KWON_FIGURE2``: the share of KV-cache memory holding real token states that Kwon et al. (2023,
  Figure 2) measured: Orca with reservation of the maximum length 20.4 %, rounded to a power of two
  26.8 %, of the true length (oracle) 38.2 %, and vLLM's paged blocks 96.3 %.
- :func:`kwon_setup_capacity_tokens`: the KV budget of that setup in tokens: 30 % of an A100 40GB
  (Kwon et al. Figure 1) over OPT-13B's 2·40·5120·2 B = 800 KiB per token.
- :func:`compare_policies` runs one workload under every policy; :func:`figure2_rows` reports the
  memory split while requests were waiting (the server under load, which is what Figure 2 shows)
  beside the paper's number; :func:`split_over_time` bins a run's timeline for plotting.
"""

from __future__ import annotations

import numpy as np

from ..calc.progress import Progress
from ..calc.units import DEFAULT_BLOCK_SIZE, InputError
from . import sim

KWON_FIGURE2 = {"max": 20.4, "pow2": 26.8, "oracle": 38.2, "paged": 96.3}
POLICY_LABELS = {"max": "reserve max length (Orca Max)", "pow2": "reserve next power of 2 (Orca Pow2)",
                 "oracle": "reserve true length (Orca Oracle)", "paged": "paged blocks (vLLM)"}
OPT13B_TOKEN_BYTES = 2 * 40 * 5120 * 2     # K and V, 40 layers, 40 heads × 128, fp16


def kwon_setup_capacity_tokens(memory_bytes: int = 40 * 10**9, kv_share: float = 0.30,
                               token_bytes: int = OPT13B_TOKEN_BYTES) -> int:
    """⌊kv_share · memory / bytes per token⌋: 30 % of 40 GB / 800 KiB = 14,648 tokens."""
    if not 0 < kv_share <= 1:
        raise InputError(f"kv_share must be in (0, 1], got {kv_share!r}")
    return int(kv_share * memory_bytes) // token_bytes


def compare_policies(workload: sim.Workload, capacity_tokens: int, policies=sim.POLICIES,
                     block_size: int = DEFAULT_BLOCK_SIZE, progress: bool = False, **kwargs) -> dict:
    """{policy: SimResult} for one workload; ``kwargs`` go to :func:`kvsim.serving.sim.simulate`."""
    it = Progress(policies, desc="simulating policies", unit="policies", enabled=progress)
    return {p: sim.simulate(workload, p, capacity_tokens=capacity_tokens, block_size=block_size, **kwargs)
            for p in it}


def figure2_rows(results: dict, reference: dict = KWON_FIGURE2) -> list[dict]:
    """One row per policy: memory split (%) while requests waited, Kwon's token-state %, throughput proxy."""
    rows = []
    for policy, res in results.items():
        s = res.summary
        sh = s["share_saturated"]
        rows.append({"policy": policy, "token states %": round(100 * sh["token_states"], 1),
                     "Kwon et al. %": reference.get(policy),
                     "reservation %": round(100 * sh["reservation"], 1),
                     "internal frag %": round(100 * sh["internal_frag"], 1),
                     "external frag & others %": round(100 * (sh["external_frag"] + sh["cached"] + sh["idle"]), 1),
                     "mean running": round(s["mean_running"], 1),
                     "tokens/iteration": round(s["tokens_per_iteration"], 2),
                     "preemptions": s["preemptions"]})
    return rows


def saturated_splits(results: dict, labels: dict = POLICY_LABELS) -> dict:
    """{label: {part: share}} of the memory split while requests waited, for a stacked-bar plot
    (parts that are zero under every policy are left out)."""
    shares = {p: r.summary["share_saturated"] for p, r in results.items()}
    parts = [k for k in sim.SPLIT if any(sh[k] > 0 for sh in shares.values())]
    return {labels.get(p, p): {k: sh[k] for k in parts} for p, sh in shares.items()}


def split_over_time(result: sim.SimResult, bins: int = 100) -> tuple[np.ndarray, dict]:
    """(bin centres in iterations, {part: share of capacity per bin}), iteration-weighted.

    Timeline rows hold per-iteration averages over a jump of ``iterations`` steps starting at ``t``;
    each jump's slot-iterations are spread evenly over the iterations it covers.
    """
    tl = result.timeline
    end = float(tl["t"][-1] + tl["iterations"][-1]) if len(tl["t"]) else 1.0
    edges = np.linspace(0.0, end, bins + 1)
    start, stop = tl["t"], tl["t"] + tl["iterations"]
    # overlap (in iterations) of every jump with every bin: (rows, bins)
    overlap = np.clip(np.minimum(stop[:, None], edges[None, 1:]) - np.maximum(start[:, None], edges[None, :-1]), 0, None)
    width = np.diff(edges)
    shares = {part: (tl[part][:, None] * overlap).sum(axis=0) / width / result.summary["capacity_tokens"]
              for part in sim.SPLIT}
    return (edges[:-1] + edges[1:]) / 2, shares
