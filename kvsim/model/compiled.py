"""A decode step with its fixed-shape parts compiled: the same logits as ``model(tokens, caches)``,
fewer kernel launches and less Python per step.

Contract
- ``compiled_step(model, fuse_projections=True)`` -> :class:`CompiledStep`; ``step(tokens (B, L),
  caches, kv_dtype=None)`` returns the logits (B, L, vocab) of ``model(tokens, caches, kv_dtype)``
  (fp32: allclose 1e-5; greedy tokens identical, tested in tests/test_compiled_step.py).
- What is compiled (``mx.compile``, one trace per input shape, so one per layer shape): for every
  attention or MLA block, ``mixer_in`` = RMSNorm, the query/key/value projections and RoPE at the
  cache's offset, passed as an array (a new offset re-uses the trace); ``mixer_out`` = the output
  projection, the residual, RMSNorm, the SwiGLU FFN and the second residual; and the final norm
  with the LM head. ``chain``: block i's output part and block i+1's input part run as one compiled
  call (one trace per pair of layer shapes). What stays eager: the cache update and attention (their shapes grow every
  step) — the same :func:`~kvsim.model.layers.attend_cached` and MLA absorbed/materialized code the
  eager model runs. An MLA decode step on the absorbed path (:meth:`MLA.absorbs_step`) moves its
  fixed-shape attention work into the pieces too: the input part forms q_lat = q_nope·W_uk and
  q_pe·scale, the output part applies W_uv, so only the latent cache update, the RoPE scores and the
  SDPA call run eagerly (:meth:`MLA.attend_absorbed_step`), the ops mlx-lm's deepseek_v3 runs there.
- ``fuse_projections``: the query, key and value weights of a layer are stored as row views of one
  (H·D + 2·H_kv·D, hidden) matrix, and the FFN's gate and up as views of one (2·I, hidden) matrix,
  so a step runs 4 weight products per layer instead of 7. The model's own ``wq``/``wk``/``wv``/
  ``gate``/``up`` become those views (same values, no extra memory), so the eager model still works.
- Batches of separate sequences (one :class:`~kvsim.model.layers.Rows` of caches per layer, as
  ``batched_generate`` decodes) run the compiled parts over the whole batch, RoPE at each row's own
  offset, and attention row by row (row isolation). Blocks the compiled step does not cover
  (recurrent mixers, MLA over Rows) run their eager ``Block.__call__``: the result is the same.
- The step holds the weights the model has when it is built (looked up once: attribute access on an
  ``nn.Module`` costs host time every step); build a new step after changing the model's weights.
- Host time matters: MLX builds a step's graph in Python before any kernel runs, so on a GPU that
  time adds to the step (``benchmarks/bench_step_breakdown.py`` measures it: about 1 ms of a 6.5 ms
  Llama 3 8B step on an H200); the compiled pieces, one RoPE offset array per distinct offset and the
  weights looked up once are what make the compiled step's graph cheaper to build.
- The step hands its graph to the device every ``model.overlap_layers`` layers as the eager step does
  (``mx.async_eval`` of the hidden state and the next block's pending inputs; none over Rows).
- The eager ``Model.__call__`` stays the readable reference; ``benchmarks/bench_roofline.py`` times both.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn

from .attention import Attention
from .layers import Rows, attend_cached, hands_over
from .mla import MLA

__all__ = ["CompiledStep", "compiled_step"]


def compiled_step(model, fuse_projections: bool = True, chain: bool = True) -> "CompiledStep":
    """A step function equal to ``model(tokens, caches, kv_dtype)`` with its fixed-shape parts compiled."""
    return CompiledStep(model, fuse_projections, chain)


def _fuse_rows(module, names: tuple[str, ...]) -> mx.array:
    """Concatenate ``module``'s weights ``names`` along rows and re-store each as a view of the result."""
    weights = [getattr(module, n) for n in names]
    fused = mx.concatenate(weights, axis=0)
    mx.eval(fused)
    start = 0
    for n, w in zip(names, weights):
        setattr(module, n, fused[start:start + w.shape[0]])
        start += w.shape[0]
    return fused


# --- the pieces, written plainly; every constant that shapes a trace is an argument of its factory ---

@lru_cache(maxsize=None)
def _attention_in(eps: float, heads: int, kv_heads: int, head_dim: int, v_head_dim: int, rope_dims: int,
                  rope_base: float):
    """x (B, L, hidden), offset (int array) -> q (B, H, L, D), k (B, H_kv, L, D), v (B, H_kv, L, D_v).

    One product with the fused weight; when D_v = D one RoPE call rotates queries and keys together
    (both sit at the same positions), (B, H + H_kv, L, D), instead of two.
    """
    splits = (heads * head_dim, heads * head_dim + kv_heads * head_dim)
    rot = dict(traditional=False, base=rope_base, scale=1.0)

    def f(x, norm_w, wqkv, offset):
        B, L, _ = x.shape
        qkv = mx.fast.rms_norm(x, norm_w, eps) @ wqkv.T
        if head_dim == v_head_dim:
            qkv = qkv.reshape(B, L, heads + 2 * kv_heads, head_dim).transpose(0, 2, 1, 3)
            qk, v = qkv[:, :heads + kv_heads], qkv[:, heads + kv_heads:]
            if rope_dims:
                qk = mx.fast.rope(qk, rope_dims, offset=offset, **rot)
            return qk[:, :heads], qk[:, heads:], v
        q, k, v = mx.split(qkv, splits, axis=-1)
        q = q.reshape(B, L, heads, head_dim).transpose(0, 2, 1, 3)
        k = k.reshape(B, L, kv_heads, head_dim).transpose(0, 2, 1, 3)
        v = v.reshape(B, L, kv_heads, v_head_dim).transpose(0, 2, 1, 3)
        if rope_dims:
            q, k = (mx.fast.rope(a, rope_dims, offset=offset, **rot) for a in (q, k))
        return q, k, v

    return f


@lru_cache(maxsize=None)
def _block_out(eps: float, intermediate: int, uv: bool = False):
    """x, attention output (B, H, L, D_v) -> x + o·wo; then + FFN(RMSNorm(.)), the SwiGLU on one gate|up product.

    ``uv``: the attention output is MLA's absorbed Σ p·latent (B, H, L, r) and one more argument,
    W_uv (H, v, r), expands it to (B, H, L, v) first (what :meth:`MLA._absorbed_fused` does eagerly).
    """

    def f(x, attn, wo, ffn_norm_w, w_gate_up, w_down, *w_uv):
        B, L, _ = x.shape
        if uv:
            attn = attn @ w_uv[0].swapaxes(-1, -2)               # (B,H,L,r) @ (H,r,v) -> (B,H,L,v)
        h = x + attn.transpose(0, 2, 1, 3).reshape(B, L, -1) @ wo.T
        gate, up = mx.split(mx.fast.rms_norm(h, ffn_norm_w, eps) @ w_gate_up.T, [intermediate], axis=-1)
        return h + (nn.silu(gate) * up) @ w_down.T

    return f


@lru_cache(maxsize=None)
def _mla_in(eps: float, heads: int, q_lora_rank: int, nope: int, rope_dim: int, kv_lora_rank: int,
            rope_base: float, absorbed: bool = False, scale: float = 1.0):
    """x -> q_nope (B,H,L,nope), q_pe (B,H,L,rope) roped, latent (B,1,L,r) normed, k_pe (B,1,L,rope) roped.

    ``absorbed`` (a decode step on MLA's absorbed path): one more argument, W_uk (H, nope, r), and the
    queries leave already absorbed, q_lat = q_nope·W_uk (B,H,L,r) and q_pe·scale, as
    :meth:`MLA._absorbed_fused` forms them eagerly (:meth:`MLA.attend_absorbed_step` takes them).
    """

    def f(x, norm_w, wq_a, q_norm, wq_b, wkv_a, kv_norm, *rest):
        *w_uk, offset = rest
        B, L, _ = x.shape
        h = mx.fast.rms_norm(x, norm_w, eps)
        q = (mx.fast.rms_norm(h @ wq_a.T, q_norm, eps) @ wq_b.T) if q_lora_rank else h @ wq_b.T
        q = q.reshape(B, L, heads, nope + rope_dim).transpose(0, 2, 1, 3)
        kv = h @ wkv_a.T
        latent = mx.fast.rms_norm(kv[..., :kv_lora_rank], kv_norm, eps)[:, None]
        rot = dict(traditional=False, base=rope_base, scale=1.0, offset=offset)
        k_pe = mx.fast.rope(kv[..., kv_lora_rank:][:, None], rope_dim, **rot)
        q_nope, q_pe = q[..., :nope], mx.fast.rope(q[..., nope:], rope_dim, **rot)
        if absorbed:
            return q_nope @ w_uk[0], q_pe * scale, latent, k_pe
        return q_nope, q_pe, latent, k_pe

    return f


# --- their compiled forms: mx.compile keeps one trace per input shape ---

@lru_cache(maxsize=None)
def _compiled_in(key: tuple):
    kind, *args = key
    return mx.compile((_attention_in if kind == "attention" else _mla_in)(*args))


@lru_cache(maxsize=None)
def _compiled_out(key: tuple):
    return mx.compile(_block_out(*key))


@lru_cache(maxsize=None)
def _compiled_out_in(out_key: tuple, in_key: tuple):
    """Block i's output part and block i+1's input part as one compiled function (one call, one trace)."""
    out, (kind, *args) = _block_out(*out_key), in_key
    pre = (_attention_in if kind == "attention" else _mla_in)(*args)
    n_out = 5 if out_key[2:3] == (True,) else 4             # wo, ffn norm, gate|up, down (+ W_uv)

    def f(x, attn, *weights_and_pre):
        x = out(x, attn, *weights_and_pre[:n_out])
        return (x, *pre(x, *weights_and_pre[n_out:]))

    return mx.compile(f)


@lru_cache(maxsize=None)
def _head(eps: float):
    return mx.compile(lambda x, norm_w, lm_head: mx.fast.rms_norm(x, norm_w, eps) @ lm_head.T)


class CompiledStep:
    """``model``'s forward pass with compiled fixed-shape parts; see the module contract."""

    def __init__(self, model, fuse_projections: bool = True, chain: bool = True):
        self.model, self.chain = model, chain
        self.weights = [self._layer_weights(b, fuse_projections) for b in model.blocks]
        self.mixers = [b.mixer for b in model.blocks]
        self.mla = [isinstance(a, MLA) for a in self.mixers]
        # per layer, two variants indexed by "absorbed" (MLA's absorbed decode path: W_uk / W_uv products
        # inside the compiled pieces); attention layers only ever use variant False
        self.in_keys = [(self._in_key(b, False), self._in_key(b, True)) if w else None
                        for b, w in zip(model.blocks, self.weights)]
        self.out_keys = [((b.eps, b.ffn.gate.shape[0], False), (b.eps, b.ffn.gate.shape[0], True)) if w else None
                         for b, w in zip(model.blocks, self.weights)]
        # the weights each compiled call takes, looked up once (nn.Module attribute access is slow per step)
        self.in_weights = [self._in_weights(i) if w else None for i, w in enumerate(self.weights)]
        self.out_weights = [self._out_weights(i) if w else None for i, w in enumerate(self.weights)]
        # the latent's bytes per element (what MLA's path choice reads), for each MLA layer
        self.dtype_bytes = [a["wkv_a"].dtype.size if m else 0 for a, m in zip(self.mixers, self.mla)]
        n = len(model.blocks)
        self.in_fns = [tuple(_compiled_in(k) for k in ks) if ks else None for ks in self.in_keys]
        self.out_fns = [tuple(_compiled_out(k) for k in ks) if ks else None for ks in self.out_keys]
        self.out_in_fns = [tuple(tuple(_compiled_out_in(ok, ik) for ik in self.in_keys[i + 1]) for ok in self.out_keys[i])
                           if i + 1 < n and self.out_keys[i] and self.in_keys[i + 1] else None for i in range(n)]

    @staticmethod
    def _layer_weights(block, fuse: bool) -> dict | None:
        """The arrays the compiled pieces of ``block`` take, or None when the block runs eagerly."""
        mixer, ffn = block.mixer, block.ffn
        if not isinstance(mixer, (Attention, MLA)):
            return None
        gate_up = _fuse_rows(ffn, ("gate", "up")) if fuse else mx.concatenate([ffn.gate, ffn.up], axis=0)
        w = {"gate_up": gate_up}
        if isinstance(mixer, Attention):
            names = ("wq", "wk", "wv")
            w["qkv"] = _fuse_rows(mixer, names) if fuse else mx.concatenate([getattr(mixer, n) for n in names])
        mx.eval(w)
        return w

    @staticmethod
    def _in_key(block, absorbed: bool) -> tuple:
        a = block.mixer
        if isinstance(a, MLA):
            return ("mla", block.eps, a.n_heads, a.q_lora_rank, a.nope_dim, a.rope_dim, a.kv_lora_rank, a.rope_base,
                    absorbed, a.scale)
        return ("attention", block.eps, a.n_heads, a.n_kv_heads, a.head_dim, a.v_head_dim, a.rope_dims, a.rope_base)

    def _in_weights(self, i: int) -> tuple:
        """Block i's input-part weights, (plain, absorbed): its norm and projection weights (+ MLA's W_uk)."""
        block, a = self.model.blocks[i], self.model.blocks[i].mixer
        if isinstance(a, MLA):
            wq_a = a.wq_a if a.q_lora_rank else a.wkv_a          # unused placeholders without q_lora
            q_norm = a.q_norm if a.q_lora_rank else a.kv_norm
            wq_b = a.wq_b if a.q_lora_rank else a.wq
            w = (block.mixer_norm, wq_a, q_norm, wq_b, a.wkv_a, a.kv_norm)
            return w, (*w, a._w_uk_uv()[0])
        w = (block.mixer_norm, self.weights[i]["qkv"])
        return w, w

    def _out_weights(self, i: int) -> tuple:
        """Block i's output-part weights, (plain, absorbed): (+ MLA's W_uv on the absorbed path)."""
        block = self.model.blocks[i]
        w = (block.mixer.wo, block.ffn_norm, self.weights[i]["gate_up"], block.ffn.down)
        return w, ((*w, block.mixer._w_uk_uv()[1]) if self.mla[i] else w)

    def _in_args(self, i: int, cache, offsets: dict, absorbed: bool) -> tuple:
        """Block i's input-part arrays: its weights and the offset(s) RoPE starts at (one array per value)."""
        key = tuple(c.offset for c in cache.caches) if type(cache) is Rows else cache.offset
        if key not in offsets:
            offsets[key] = mx.array(list(key) if type(key) is tuple else key)
        return (*self.in_weights[i][absorbed], offsets[key])

    def _covered(self, i: int, cache) -> bool:
        """Does block i run compiled with this cache? (not for recurrent mixers, no cache, MLA over Rows)"""
        return (self.weights[i] is not None and cache is not None
                and not (self.mla[i] and isinstance(cache, Rows)))

    def __call__(self, tokens: mx.array, caches, kv_dtype=None) -> mx.array:
        m = self.model
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be (B, L) token ids, got shape {tuple(tokens.shape)}")
        if len(caches) != len(m.blocks):
            raise ValueError(f"caches must hold one entry per layer ({len(m.blocks)}), got {len(caches)}")
        x, pending, n, offsets, L = m["embed"][tokens], None, len(caches), {}, tokens.shape[1]
        ab = False                                                # block i's pieces: MLA's absorbed variant?
        every = m.overlap_for(caches)                             # see Model: async_eval every k layers
        for i, cache in enumerate(caches):
            if hands_over(i, every):                              # blocks < i built: the device starts on them
                mx.async_eval(x, pending)
            if not self._covered(i, cache):
                x, pending = m["blocks"][i](x, cache, kv_dtype), None
                continue
            if pending is None:                                   # block i's input part, on its own
                ab = self.mla[i] and self.mixers[i].absorbs_step(cache, L, self.dtype_bytes[i])
                pending = self.in_fns[i][ab](x, *self._in_args(i, cache, offsets, ab))
            attn = self._attend(self.mixers[i], cache, pending, kv_dtype, ab)   # eager: the cache grows
            if self.chain and i + 1 < n and self._covered(i + 1, caches[i + 1]):
                nab = self.mla[i + 1] and self.mixers[i + 1].absorbs_step(caches[i + 1], L, self.dtype_bytes[i + 1])
                x, *pending = self.out_in_fns[i][ab][nab](
                    x, attn, *self.out_weights[i][ab], *self._in_args(i + 1, caches[i + 1], offsets, nab))
                ab = nab
            else:
                x, pending = self.out_fns[i][ab](x, attn, *self.out_weights[i][ab]), None
        return _head(m.spec.rms_norm_eps)(x, m["norm"], m["lm_head"])

    @staticmethod
    def _attend(a, cache, pending, kv_dtype, absorbed: bool = False):
        """Store the new K/V (or latent) in ``cache`` and attend: the eager model's own code (its decode
        fast paths when the cache is exactly the class the layer's ``step`` serves; MLA's absorbed step
        with the queries already absorbed by the compiled input part)."""
        if absorbed:
            return a.attend_absorbed_step(*pending, cache, kv_dtype)    # (B,H,1,r), W_uv in the output part
        fast = type(cache) is a.fast_cache
        if type(a) is MLA:
            return a.attend_roped_step(*pending, cache, kv_dtype) if fast else a.attend_roped(*pending, cache, kv_dtype)
        q, k, v = pending
        if fast:
            if kv_dtype is not None:
                k, v = k.astype(kv_dtype), v.astype(kv_dtype)
            return cache.attend_step(q, k, v, a.scale)
        if isinstance(cache, Rows) and len(cache) != q.shape[0]:   # row r: its own sequence and offset
            raise ValueError(f"Rows holds {len(cache)} caches but the batch has {q.shape[0]} rows")
        return attend_cached(q, k, v, cache, a.scale, kv_dtype)
