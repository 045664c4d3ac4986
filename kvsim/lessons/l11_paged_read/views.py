"""Lesson 11 (how a paged cache is read): the lesson's controls: each view wraps this lesson's data functions
and its plots; it computes nothing.

Contract
- :func:`draw_copy_bytes` / :func:`copy_bytes_view`: :func:`kvsim.lessons.l11_paged_read.data.copy_rows`
  (bytes one decode step copies and reads, gather vs block table, 1K-32K tokens) for a model and KV dtype.
- :func:`draw_cascade_bytes` / :func:`cascade_bytes_view`: :func:`kvsim.lessons.l11_paged_read.data.cascade_rows`
  (a group of B sequences, dense vs cascade bytes per step against shared pages) with the gate's thresholds.
- :func:`draw_split_k` / :func:`split_k_view`: :func:`kvsim.lessons.l11_paged_read.data.split_k_rows`
  (blocks of GPU work at batch B against the number of chunks S, the H200's SMs).
"""

from __future__ import annotations

from ...calc.units import format_bytes
from ...ui.base import dropdown, int_slider, log_slider, make_view
from .data import (CASCADE_MIN_MEMBERS, CASCADE_MIN_SHARED_PAGES, CONTEXTS, H200_SMS, LESSON07_GROUP, MODEL,
                   cascade_rows, copy_rows, split_k_rows, whole_pages)
from .plots import plot_cascade, plot_copy_vs_context, plot_split_k

MODELS = ("llama-3-8b", "llama-3-70b", "qwen3-8b", "qwen2.5-7b")
KV_DTYPES = ("fp32", "bf16", "fp8")


def draw_copy_bytes(ax, model=MODEL, kv_dtype="bf16"):
    """Gather vs block table: bytes copied and read per decode step against context, all layers, 16-token blocks."""
    rows = copy_rows(CONTEXTS, model, 16, kv_dtype)
    last = rows[-2]                                             # the gather row at the longest context
    return plot_copy_vs_context(ax, rows, title=(
        f"{model}, {kv_dtype} KV: gathering copies {format_bytes(last['copied_bytes'])} "
        f"per step at {last['context']:,} tokens; the block table copies nothing"))


def copy_bytes_view(model=MODEL, kv_dtype="bf16"):
    """Model and KV dtype over :func:`draw_copy_bytes`."""
    return make_view(draw_copy_bytes, {
        "model": dropdown("model", MODELS, model),
        "kv_dtype": dropdown("KV dtype", KV_DTYPES, kv_dtype),
    }, figsize=(7.5, 4.4), margins=dict(left=0.1, right=0.97, bottom=0.13, top=0.86))


def draw_cascade_bytes(ax, members=LESSON07_GROUP["requests"], suffix_tokens=65, model=MODEL):
    """Dense vs cascade bytes per decode step against shared pages for ``members`` sequences (bf16, 16-token pages)."""
    rows = cascade_rows(members, suffix_tokens, 40, model)
    shared = whole_pages(LESSON07_GROUP["prompt_tokens"], LESSON07_GROUP["block_size"])
    at = rows[shared]
    gate = "open" if at["gate_open"] else f"closed (fewer than {CASCADE_MIN_MEMBERS} members)"
    return plot_cascade(ax, rows, CASCADE_MIN_SHARED_PAGES, mark_pages=shared, title=(
        f"{members} sequence{'s' if members > 1 else ''} of {model}, {suffix_tokens} own tokens each: "
        f"at {shared} shared pages dense reads "
        f"{format_bytes(at['dense_bytes'])}, cascade {format_bytes(at['cascade_bytes'])}; gate {gate}"))


def cascade_bytes_view(members=LESSON07_GROUP["requests"], suffix_tokens=65, model=MODEL):
    """Group size, own tokens and model over :func:`draw_cascade_bytes`."""
    return make_view(draw_cascade_bytes, {
        "members": int_slider("sequences", members, 1, 128),
        "suffix_tokens": int_slider("own tokens", suffix_tokens, 1, 512),
        "model": dropdown("model", MODELS, model),
    }, figsize=(7.5, 4.8), margins=dict(left=0.1, right=0.97, bottom=0.3, top=0.86))


def draw_split_k(ax, context=8192, batch=1, model=MODEL):
    """Blocks of work against split-K chunks S for one decode step at ``batch`` sequences (H200's SMs)."""
    rows = split_k_rows(context, batch=batch, model=model)
    first = rows[0]
    return plot_split_k(ax, rows, H200_SMS, title=(
        f"{model}, batch {batch}, {context:,} tokens: S = 1 fills {first['sm_share']:.0%} of {H200_SMS} SMs; "
        f"every S reads the same {format_bytes(first['kv_bytes'])} of K/V"))


def split_k_view(batch=1, model=MODEL):
    """Batch and model over :func:`draw_split_k` (8,192 tokens)."""
    return make_view(draw_split_k, {
        "batch": log_slider("batch", batch, 1, 16),
        "model": dropdown("model", MODELS, model),
    }, figsize=(7.5, 4.6), margins=dict(left=0.12, right=0.97, bottom=0.28, top=0.86))
