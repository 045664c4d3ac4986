"""Where KV memory goes under each reservation policy: kvsim's simulator against Kwon et al. (2023).

Contract (pure numpy over :mod:`kvsim.serving.sim`; deterministic for a given workload)
- The paper's published numbers live in one block below (``KWON_*``), each with the table or
  figure it comes from: Table 1's KV budget, Figure 2's memory split, Figure 13's mean number of
  running requests (ShareGPT and Alpaca). ``KWON_CAPACITY_TOKENS`` = 12 GiB / 800 KiB = 15,728 token slots (Table 1's
  "15.7K"); :func:`kwon_setup_capacity_tokens` computes it for other budgets.
- Two averaging windows (:data:`WINDOWS`): ``"whole run"`` averages over every iteration, as the
  paper's Figure 2 does ("average ... during the experiment"); ``"while waiting"`` only over the
  iterations in which a request waited (the server full). They differ by the start and the drain
  of a finite run, when memory sits idle.
- Figure 2's four parts from kvsim's split: token states, reservation, internal fragmentation, and
  external fragmentation & others = external_frag (holes, the buddy allocator's rounding) + cached
  + idle. :func:`figure2_split` gives them in %; :func:`figure2_rows` puts the paper's split and
  running count beside kvsim's in both windows; :func:`running_rows` compares Figure 13.
- :func:`compare_policies` runs one workload under every policy; :func:`split_over_time` bins a
  run's timeline for plotting.
"""

from __future__ import annotations

import numpy as np

from ..calc.progress import Progress
from ..calc.units import DEFAULT_BLOCK_SIZE, InputError
from . import sim
from .ledger import SPLIT, SimResult
from .workload import Workload

# ---- Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
# PagedAttention" (SOSP'23): every published number kvsim compares with, and where it comes from.
OPT13B_TOKEN_BYTES = 2 * 40 * 5120 * 2   # 800 KiB: K and V, 40 layers, hidden 5120, fp16 (§3)
KWON_TABLE1_KV_BYTES = 12 * 2**30        # Table 1, OPT-13B on one A100 40GB: 12 GB for the KV cache;
KWON_CAPACITY_TOKENS = KWON_TABLE1_KV_BYTES // OPT13B_TOKEN_BYTES  # its "15.7K" slots: GiB (decimal GB gives 14.6K)
KWON_MAX_LEN = 2048                      # §6.1: Orca (Max) reserves "the maximum sequence length ... 2048"
FIGURE2_PARTS = ("token_states", "reservation", "internal_frag", "external_frag_and_others")
# Figure 2: average % of KV memory during the §6.2 experiment (OPT-13B, ShareGPT). The figure labels
# vLLM's token states only (the other 3.7 % are not split): None = not published. Provenance: the
# token-state shares, Max's 8.9 % and the Figure 13 counts are the ones the project's notes quote; the
# other parts were transcribed from the figure's bar labels (each Orca row sums to 99.9-100 %) and have
# not been re-read against the PDF since.
KWON_FIGURE2 = {
    "max": {"token_states": 20.4, "reservation": 13.3, "internal_frag": 57.3, "external_frag_and_others": 8.9},
    "pow2": {"token_states": 26.8, "reservation": 17.9, "internal_frag": 13.6, "external_frag_and_others": 41.6},
    "oracle": {"token_states": 38.2, "reservation": 25.2, "internal_frag": 0.0, "external_frag_and_others": 36.6},
    "paged": {"token_states": 96.3, "reservation": None, "internal_frag": None, "external_frag_and_others": None},
}
# Figure 13: average number of batched (running) requests, OPT-13B; (a) ShareGPT at 2 requests/s,
# (b) Alpaca at 30 requests/s (kvsim compares its Pow2 and Oracle counts).
KWON_FIGURE13 = {"sharegpt": {"max": 7.00, "pow2": 9.81, "oracle": 13.62, "paged": 30.42},
                  "alpaca": {"pow2": 43.24, "oracle": 72.75}}
# ----

WINDOWS = {"whole run": "", "while waiting": "_saturated"}  # window -> suffix of the summary keys
POLICY_LABELS = {"max": "reserve max length (Orca Max)", "pow2": "reserve output to a power of 2 (Orca Pow2)",
                 "oracle": "reserve true length (Orca Oracle)", "paged": "paged blocks (vLLM)"}
PART_COLUMNS = {"token_states": "token states %", "reservation": "reservation %",
                "internal_frag": "internal frag %", "external_frag_and_others": "external frag & others %"}


def kwon_setup_capacity_tokens(kv_bytes: int = KWON_TABLE1_KV_BYTES, token_bytes: int = OPT13B_TOKEN_BYTES) -> int:
    """⌊KV budget / bytes per token⌋: Table 1's 12 GiB / 800 KiB = 15,728 token slots."""
    for name, value in (("kv_bytes", kv_bytes), ("token_bytes", token_bytes)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(kv_bytes) // int(token_bytes)


def compare_policies(workload: Workload, capacity_tokens: int, policies=sim.POLICIES,
                     block_size: int = DEFAULT_BLOCK_SIZE, progress: bool = False, **kwargs) -> dict:
    """{policy: SimResult} for one workload; ``kwargs`` go to :func:`kvsim.serving.sim.simulate`."""
    it = Progress(policies, desc="simulating policies", unit="policies", enabled=progress)
    return {p: sim.simulate(workload, p, capacity_tokens=capacity_tokens, block_size=block_size, **kwargs)
            for p in it}


def _suffix(window: str) -> str:
    if window not in WINDOWS:
        raise InputError(f"window {window!r} is not one of {', '.join(WINDOWS)}")
    return WINDOWS[window]


def figure2_split(result: SimResult, window: str = "whole run") -> dict:
    """{Figure 2 part: % of KV memory} over ``window``; external & others = external_frag + cached + idle."""
    sh = result.summary["share" + _suffix(window)]
    return {"token_states": 100 * sh["token_states"], "reservation": 100 * sh["reservation"],
            "internal_frag": 100 * sh["internal_frag"],
            "external_frag_and_others": 100 * (sh["external_frag"] + sh["cached"] + sh["idle"])}


def figure2_rows(results: dict, paper: dict = KWON_FIGURE2,
                 paper_running: dict = KWON_FIGURE13["sharegpt"]) -> list[dict]:
    """Per policy three rows: Kwon et al. (Figure 2 split, Figure 13a running), kvsim over the whole
    run, kvsim while requests waited; "buddy rounding %" is the part of external & others that the
    buddy allocator's rounding holds."""
    rows = []
    for policy, res in results.items():
        s = res.summary
        rows.append({"policy": policy, "source": "Kwon et al.",
                     **{PART_COLUMNS[k]: paper.get(policy, {}).get(k) for k in FIGURE2_PARTS},
                     "buddy rounding %": None, "mean running": paper_running.get(policy)})
        for window, suffix in WINDOWS.items():
            split = figure2_split(res, window)
            rows.append({"policy": policy, "source": f"kvsim, {window}",
                         **{PART_COLUMNS[k]: round(v, 1) for k, v in split.items()},
                         "buddy rounding %": None if policy == "paged" else
                         round(100 * s["buddy_rounding_share" + suffix], 1),
                         "mean running": round(s["mean_running" + suffix], 2)})
    return rows


def running_rows(results: dict, paper: dict) -> list[dict]:
    """One row per policy: the paper's mean running requests (Figure 13) and kvsim's in both windows."""
    return [{"policy": policy, "Kwon et al.": paper.get(policy),
             **{f"kvsim, {w}": round(res.summary["mean_running" + sfx], 2) for w, sfx in WINDOWS.items()}}
            for policy, res in results.items()]


def policy_splits(results: dict, window: str = "whole run", labels: dict = POLICY_LABELS) -> dict:
    """{label: {part: share}} of the memory split over ``window``, for a stacked-bar plot
    (parts that are zero under every policy are left out)."""
    shares = {p: r.summary["share" + _suffix(window)] for p, r in results.items()}
    parts = [k for k in SPLIT if any(sh[k] > 0 for sh in shares.values())]
    return {labels.get(p, p): {k: sh[k] for k in parts} for p, sh in shares.items()}


def split_over_time(result: SimResult, bins: int = 100) -> tuple[np.ndarray, dict]:
    """(bin centres in iterations, {part: share of capacity per bin}), iteration-weighted.

    Timeline rows hold per-iteration averages over a jump of ``iterations`` steps starting at ``t``;
    each jump's slot-iterations are spread evenly over the iterations it covers.
    """
    tl = result.timeline
    end = float(tl["t"][-1] + tl["iterations"][-1]) if len(tl["t"]) else 1.0
    edges = np.linspace(0.0, end, bins + 1)
    start, stop = tl["t"], tl["t"] + tl["iterations"]
    # overlap (in iterations) of every jump with every bin: (rows, bins)
    overlap = np.minimum(stop[:, None], edges[None, 1:]) - np.maximum(start[:, None], edges[None, :-1])
    overlap = np.clip(overlap, 0, None)
    width = np.diff(edges)
    shares = {part: (tl[part][:, None] * overlap).sum(axis=0) / width / result.summary["capacity_tokens"]
              for part in SPLIT}
    return (edges[:-1] + edges[1:]) / 2, shares
