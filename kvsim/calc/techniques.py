"""Attention techniques against the cache formula: what each changes in bytes STORED and bytes READ per step.

Contract
- Pure arithmetic over :mod:`kvsim.calc.memory` (no MLX), vectorized over ``tokens`` where it says so.
- :func:`technique_table`: the seeds' table, one row per technique, every number computed from
  real configs: which term of ``M_token = 2·n_layers·n_kv·d_h·b`` it changes, what stays in the
  cache, and the bytes stored and read per decode step relative to the baseline it is compared with.
- Sparse attention keeps every token but reads a few per step:
  * NSA (Yuan et al., 2025): a query reads ⌊T/d⌋ compressed blocks, n selected blocks of l' tokens
    and a window of w tokens: ``min(T, ⌊T/d⌋ + n·l' + w)`` token equivalents (d=16, n=16, l'=64,
    w=512: 2,048 at 8K and 5,632 at 64K, the paper's Table 4);
  * DSA (DeepSeek-V3.2): a lightning indexer scores all T tokens on its own small key
    (``index_head_dim`` = 128 fp8 elements + one fp32 scale per 128 = 132 B per token per layer,
    as serving engines store it), then attention reads the top ``index_topk`` = 2048 tokens.
    Stored: latent + indexer key (more than MLA alone); read: T indexer keys + 2048 latents.
- :func:`cache_read_intensity`: FLOPs a decode step does per byte of cache it reads (a multiply-add
  is 2 FLOPs): 2·g/b for K/V heads shared by g query heads, 2·H·(2r + r_rope)/((r + r_rope)·b) for
  absorbed MLA; :func:`weight_read_intensity`: 2·B/b per weight byte for a batch of B.
"""

from __future__ import annotations

import numpy as np

from . import hybrid, memory, units
from .config import Kind, LayerSpec, ModelSpec
from .counterfactual import as_mha, attention_variants, full_attention
from .registry import load_model
from .units import InputError

NSA = {"compress_stride": 16, "selected_blocks": 16, "block_tokens": 64, "window": 512}
DSA = {"index_topk": 2048, "index_head_dim": 128, "scale_block": 128, "scale_bytes": 4}


# ---------------------------------------------------------------- sparse reads


def nsa_read_tokens(tokens, compress_stride: int = 16, selected_blocks: int = 16, block_tokens: int = 64,
                    window: int = 512):
    """Token equivalents one NSA query reads: min(T, ⌊T/d⌋ + n·l' + w)."""
    t = np.asarray(tokens, dtype=np.int64)
    read = np.minimum(t, t // compress_stride + selected_blocks * block_tokens + window)
    return int(read) if np.ndim(tokens) == 0 else read


def dsa_indexer_key_bytes(index_head_dim: int = 128, scale_block: int = 128, scale_bytes: int = 4) -> int:
    """Bytes of one token's indexer key in one layer: d_I fp8 bytes + one scale per block."""
    return index_head_dim + (index_head_dim // scale_block) * scale_bytes


def sparse_bytes(spec: ModelSpec, tokens, method: str, kv_dtype="bf16") -> dict:
    """{'stored', 'read'} bytes of one sequence at T under ``method`` (dense, nsa, dsa), summed over layers.

    Windowed layers keep and read min(T, W) whatever the method; full and MLA layers keep all T
    and read T (dense), the NSA budget, or T indexer keys + top-k tokens (DSA, which also stores the keys).
    """
    if method not in ("dense", "nsa", "dsa"):
        raise InputError(f"method {method!r} is not one of dense, nsa, dsa")
    t = np.asarray(tokens, dtype=np.int64)
    stored = np.zeros_like(t)
    read = np.zeros_like(t)
    idx = dsa_indexer_key_bytes()
    for layer, count in memory.layer_groups(spec):
        if not layer.caches_tokens:
            continue
        kept = np.asarray(memory.layer_kv_bytes(layer, t, kv_dtype), dtype=np.int64)
        per_token = memory.layer_token_bytes(layer, kv_dtype)
        sparse = not layer.is_windowed and method != "dense"
        if not sparse:
            s, r = kept, kept
        elif method == "nsa":
            s, r = kept, nsa_read_tokens(t, **NSA) * per_token
        else:
            s = kept + t * idx
            r = t * idx + np.minimum(t, DSA["index_topk"]) * per_token
        stored, read = stored + count * s, read + count * np.asarray(r, dtype=np.int64)
    if np.ndim(tokens) == 0:
        return {"stored": int(stored), "read": int(read)}
    return {"stored": stored, "read": read}


# ---------------------------------------------------------------- arithmetic per byte read


def cache_read_intensity(layer: LayerSpec, num_attention_heads: int, kv_dtype="bf16") -> float:
    """FLOPs per cache byte read when one new query attends (decode), for one layer.

    K/V heads: each of the g = H / n_kv query heads sharing a KV head does d_k + d_v multiply-adds
    per cached token, so FLOPs = 2·H·(d_k + d_v) per token against n_kv·(d_k + d_v)·b bytes:
    2·g / b (MHA in bf16: 1 FLOP per byte). MLA, absorbed: every head scores the latent and the
    RoPE key (r + r_rope) and sums the latent (r): 2·H·(2r + r_rope) FLOPs per (r + r_rope)·b bytes.
    """
    per_token = memory.layer_token_bytes(layer, kv_dtype)
    if layer.has_kv_heads:
        flops = 2 * num_attention_heads * (layer.head_dim + layer.v_head_dim)
    elif layer.kind == "mla":
        flops = 2 * num_attention_heads * (2 * layer.kv_lora_rank + layer.qk_rope_head_dim)
    else:
        raise InputError(f"layer kind {layer.kind!r} reads no K/V cache; accepted: {', '.join(Kind.CACHED)}")
    return flops / per_token


def weight_read_intensity(batch: int = 1, weights_dtype: str = "bf16") -> float:
    """FLOPs per weight byte read in one decode step: 2 per parameter per sequence, B sequences per read: 2B / b."""
    if not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be a positive integer, got {batch!r}")
    return 2 * batch / units.DTYPE_BYTES[weights_dtype]


# ---------------------------------------------------------------- the seed's table


def _pct(part, whole) -> float:
    return round(100 * float(part) / float(whole), 2)


def _row(name, term, stays, example, stored, read) -> dict:
    return {"technique": name, "term changed": term, "what stays in the cache": stays,
            "example": example, "stored %": stored, "read/step %": read}


def _fewer_heads_rows(llama, t: int = 8192) -> list[dict]:
    """MQA/GQA (Llama 3 8B vs its MHA twin) and MLA (DeepSeek-V3 sizes vs MHA)."""
    v = attention_variants()
    gqa, mha = memory.kv_bytes(llama, t), memory.kv_bytes(as_mha(llama), t)
    mla, full = memory.bytes_per_token(v["MLA"]), memory.bytes_per_token(v["MHA"])
    latent = v["MLA"].layers[0]
    return [
        _row("MQA, GQA", "n_kv", "one K/V pair per group", f"Llama 3 8B vs its MHA: {mha / gqa:.0f}x smaller",
             _pct(gqa, mha), _pct(memory.read_bytes_per_step(llama, t), memory.read_bytes_per_step(as_mha(llama), t))),
        _row("MLA", "2·n_kv·d_h", f"latent {latent.kv_lora_rank} + RoPE key {latent.qk_rope_head_dim} per layer",
             "DeepSeek-V3 sizes vs MHA", _pct(mla, full), _pct(mla, full)),
    ]


def _quantization_rows(llama) -> list[dict]:
    """fp8 and 2-bit K/V on Llama 3 8B against bf16, the 2-bit one with and without its scales/biases."""
    bf16, fp8 = memory.bytes_per_token(llama, "bf16"), memory.bytes_per_token(llama, "fp8")
    q2 = memory.parse_kv_dtype("q2")
    q2_data = sum(n * 2 * layer.num_key_value_heads * q2.vector_bytes(layer.head_dim, metadata=False)
                  for layer, n in memory.layer_groups(llama))
    q2_all = memory.bytes_per_token(llama, "q2")
    return [
        _row("KV quantization (fp8)", "b", "the same K/V, 1 byte each", "Llama 3 8B, fp8 vs bf16",
             _pct(fp8, bf16), _pct(fp8, bf16)),
        _row("KV quantization (2-bit)", "b", "2-bit K/V (+ scales, biases)", "Llama 3 8B, data only vs bf16",
             _pct(q2_data, bf16), _pct(q2_data, bf16)),
        _row("  same, with metadata", "b", "+ bf16 scale and bias per 64", "group_size 64",
             _pct(q2_all, bf16), _pct(q2_all, bf16)),
    ]


def _fewer_tokens_rows(mistral, jamba, mixtral) -> list[dict]:
    """Sliding windows (Mistral 7B at 32K) and a Mamba hybrid (Jamba vs Mixtral at 256K)."""
    t = 32_768
    sw, nosw = memory.kv_bytes(mistral, t), memory.kv_bytes(full_attention(mistral), t)
    window = _row("sliding window", "T -> min(T, W) per layer", "the last W tokens, in a ring",
                  f"Mistral 7B (W=4096) at 32K: {nosw / sw:.0f}x smaller", _pct(sw, nosw),
                  _pct(memory.read_bytes_per_step(mistral, t), memory.read_bytes_per_step(full_attention(mistral), t)))
    t = 262_144
    j, m = hybrid.cache_split(jamba, t)["total"], hybrid.cache_split(mixtral, t)["total"]
    n_rec = jamba.count("recurrent")
    mamba = _row("hybrid (Mamba + attention)", "n_layers -> attention layers",
                 f"K/V of {jamba.num_hidden_layers - n_rec} layers + {n_rec} fixed states",
                 f"Jamba {units.format_bytes(j)} vs Mixtral {units.format_bytes(m)} at 256K", _pct(j, m),
                 _pct(memory.read_bytes_per_step(jamba, t), memory.read_bytes_per_step(mixtral, t)))
    return [window, mamba]


def _same_bytes_rows(llama, dsv3, nsa_tokens: int, dsa_tokens: int) -> list[dict]:
    """Techniques that keep every token: sparse reads (NSA, DSA), paged storage, faster kernels."""
    dense, nsa = sparse_bytes(llama, nsa_tokens, "dense"), sparse_bytes(llama, nsa_tokens, "nsa")
    dense_v3, dsa = sparse_bytes(dsv3, dsa_tokens, "dense"), sparse_bytes(dsv3, dsa_tokens, "dsa")
    held, reserved = 500, 2048
    paged = memory.allocated_bytes(llama, held, block_size=units.DEFAULT_BLOCK_SIZE)
    read_held = memory.read_bytes_per_step(llama, held)
    return [
        _row("NSA", "none", "every token's K/V", f"NSA budget on Llama 3 8B at {nsa_tokens // 1024}K",
             _pct(nsa["stored"], dense["stored"]), _pct(nsa["read"], dense["read"])),
        _row("DSA", "none", "every token's latent + indexer key",
             f"DeepSeek-V3 sizes at {dsa_tokens // 1024}K, top-2048",
             _pct(dsa["stored"], dense_v3["stored"]), _pct(dsa["read"], dense_v3["read"])),
        _row("PagedAttention", "none", f"the same K/V in {units.DEFAULT_BLOCK_SIZE}-token blocks",
             f"{held} tokens held, {reserved} reserved: allocated", _pct(paged, memory.kv_bytes(llama, reserved)),
             _pct(read_held, read_held)),
        _row("FlashAttention, Flash-Decoding", "none", "the same K/V", "a faster kernel reading the same bytes",
             100.0, 100.0),
    ]


def technique_table(nsa_tokens: int = 65_536, dsa_tokens: int = 131_072) -> list[dict]:
    """One row per technique: term changed, what stays cached, example, stored % and read-per-step % of baseline."""
    llama, mistral = load_model("llama-3-8b"), load_model("mistral-7b-v0.1")
    jamba, mixtral, dsv3 = load_model("jamba-v0.1"), load_model("mixtral-8x7b"), load_model("deepseek-v3")
    return (_fewer_heads_rows(llama) + _quantization_rows(llama) + _fewer_tokens_rows(mistral, jamba, mixtral)
            + _same_bytes_rows(llama, dsv3, nsa_tokens, dsa_tokens))
