"""A decoder-only MLX transformer built from a :class:`~kvsim.calc.config.ModelSpec`.

Contract
- ``build_model(spec, num_layers=, vocab_size=, intermediate_size=, hidden_size=, seed=, dtype=)``:
  real-geometry mode. Every cache-relevant dimension stays the real model's (attention heads, KV
  heads, head_dim, window, chunk, NoPE layers, MLA ranks incl. q_lora_rank / qk_nope_head_dim /
  v_head_dim, recurrent state shapes); the number of layers, the vocabulary, the FFN width (MoE
  becomes one dense SwiGLU FFN) and optionally the residual width may shrink. A reduced layer
  count keeps a representative slice of the layer pattern (:func:`select_layers`): the first
  layer of every distinct kind, filled up with the earliest other layers, in model order.
- ``toy_spec(kind)``: a tiny spec (hidden 64, vocab 128, 2–3 layers) per variant, parsed from a
  config.json-style dict by :func:`~kvsim.calc.hf_config.from_hf_config`, for quick lessons and tests.
- Every module reads the spec's typed fields (``rope_theta``, ``qk_nope_head_dim``, ...), never
  ``spec.config``; the head is always its own random matrix, even where ``tie_word_embeddings``.
- ``model(tokens (B, L), caches=None, kv_dtype=None) -> logits (B, L, vocab)``: ``caches`` is None
  (no cache: the whole sequence must be fed), or one cache per layer (``model.make_caches(...)``),
  or per layer a :class:`~kvsim.model.layers.Rows` of per-sequence caches (batched decode).
  ``kv_dtype`` (mx dtype, None = compute dtype) is the dtype K/V are written to the caches in.
- A decode step (L = 1 with caches) takes each block's fast ``step`` (fewer host calls and ops: no
  per-layer re-checks after ``check_caches``, heads split by one reshape, weights read as
  ``module[name]``, the cache's one-token ``update_step``); ``model.fast_decode = False`` runs the
  readable reference path instead. Both give the same logits (tests/test_step_build_fast_paths.py).
- ``model.overlap_layers`` (k > 0): a decode step over one cache per layer hands its graph to the device
  (``mx.async_eval``) after every k layers, so the device runs those layers while Python builds the next
  ones (MLX is lazy: otherwise the device idles for the whole build). Default on a GPU:
  :func:`overlap_every` of the largest layer (Llama 3 8B every 2 layers, DeepSeek-V3 every layer); 0 on a
  CPU and never over Rows. The numbers are the same either way (tests/test_decode_overlap.py).
- ``model.spec`` is the reduced spec: hand it to ``make_caches`` and to :mod:`kvsim.calc.memory`.
- Weights are deterministic in ``seed``; float32 by default (MLX bf16/fp16 math is slow on a
  Linux CPU), bf16 and fp16 work too. ``init`` replaces the numpy draws (``WeightInit(seed)``),
  e.g. by :class:`~kvsim.model.layers.DeviceWeightInit` to build a multi-GB model on a GPU fast.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace

import mlx.core as mx
import mlx.nn as nn

from ..cache.base import mx_dtype
from ..calc.config import LayerSpec, ModelSpec
from ..calc.hf_config import from_hf_config
from ..calc.units import positive_int
from .attention import Attention
from .cache_checks import check_caches, check_tokens
from .layers import MLP, Rows, WeightInit, forget_derived, hands_over, rms_norm, swiglu, transposed
from .mla import MLA, MLA_PATHS
from .recurrent import MIXERS

_FFN_WEIGHTS = operator.itemgetter("gate", "up", "down")   # what Block.step reads (transposed once)
# A decode step on a GPU hands its graph to the device (mx.async_eval) after every k layers, k such that
# one hand-over covers about GPU_OVERLAP_PARAMS weights (0.8 GB in bf16, ~0.25 ms of reads on an H200):
# the device runs what is built while Python builds the next layers instead of idling for the whole build
# (about 2 ms of a 7 ms Llama 3 8B step). Measured best on an H200: every 2 layers for Llama 3 8B's
# 0.22 B-parameter layers, every layer for DeepSeek-V3's 0.58 B (benchmarks/results/probe_gpu_step_h25_*.md).
# Off on a CPU, and for Rows of per-sequence caches (no gain measured there).
GPU_OVERLAP_PARAMS = 400_000_000


def overlap_every(layer_params: int) -> int:
    """Layers per hand-over on a GPU: round(GPU_OVERLAP_PARAMS / parameters of the largest layer), at least 1."""
    return max(1, round(GPU_OVERLAP_PARAMS / max(1, layer_params)))

__all__ = ["Model", "Block", "BuildInfo", "build_model", "perturbed", "select_layers", "toy_spec",
           "TOY_KINDS"]


@dataclass(frozen=True)
class BuildInfo:
    """Where a model came from: the full spec's name/layer count and which layers were kept."""

    source_name: str
    source_num_layers: int
    source_layers: tuple[int, ...]
    seed: int
    dtype: str


def make_mixer(layer: LayerSpec, spec: ModelSpec, init: WeightInit) -> nn.Module:
    """The token mixer of one layer of ``spec``: Attention, MLA or a recurrent mixer."""
    if layer.kind != "recurrent" and layer.state_shapes:
        raise ValueError(f"{spec.name}: attention beside a {layer.recurrent_family} mixer in one layer "
                         "(Falcon-H1) is not modelled; the calculator sizes such layers")
    if layer.has_kv_heads:
        return Attention(layer, spec, init)
    if layer.kind == "mla":
        return MLA(layer, spec, init)
    if layer.kind == "recurrent" and layer.recurrent_family not in MIXERS:
        raise ValueError(f"{spec.name}: kvsim has no MLX {layer.recurrent_family} mixer (accepted: "
                         f"{', '.join(MIXERS)}); the calculator sizes such layers")
    if layer.kind == "recurrent":
        return MIXERS[layer.recurrent_family](layer, spec, init)
    raise ValueError(f"layer kind {layer.kind!r} has no mixer; accepted: full, sliding, chunked, mla, recurrent")


class Block(nn.Module):
    """Pre-norm residual block: h = x + mixer(norm(x)); out = h + ffn(norm(h))."""

    def __init__(self, layer: LayerSpec, spec: ModelSpec, intermediate_size: int, init: WeightInit):
        super().__init__()
        self.layer, self.eps = layer, spec.rms_norm_eps
        self.mixer_norm = mx.ones((spec.hidden_size,))
        self.mixer = make_mixer(layer, spec, init)
        self.ffn_norm = mx.ones((spec.hidden_size,))
        self.ffn = MLP(spec.hidden_size, intermediate_size, init)

    def __call__(self, x: mx.array, cache=None, kv_dtype=None) -> mx.array:
        h = x + self.mixer(rms_norm(x, self.mixer_norm, self.eps), cache, kv_dtype)
        return h + self.ffn(rms_norm(h, self.ffn_norm, self.eps))

    def step(self, x: mx.array, cache, kv_dtype=None) -> mx.array:
        """:meth:`__call__` for a decode step (x (B, 1, hidden)) whose cache the model checked this step:
        the mixer's fast ``step`` when the cache is exactly the class it serves, else the reference.
        Weights are read as ``self[name]`` (a dict lookup, no Python ``__getattr__`` call)."""
        mixer = self["mixer"]
        if type(cache) is not getattr(mixer, "fast_cache", None):
            return self(x, cache, kv_dtype)
        h = x + mixer.step(mx.fast.rms_norm(x, self["mixer_norm"], self.eps), cache, kv_dtype)
        ffn, n = self["ffn"], mx.fast.rms_norm(h, self["ffn_norm"], self.eps)
        gate_t, up_t, down_t = transposed(ffn, _FFN_WEIGHTS)
        return h + swiglu(n @ gate_t, n @ up_t) @ down_t


class Model(nn.Module):
    """Embedding, blocks, final norm, LM head. ``spec`` is the (reduced) spec it implements."""

    def __init__(self, spec: ModelSpec, intermediate_size: int, info: BuildInfo, init: WeightInit):
        super().__init__()
        self.spec, self.info = spec, info
        self.embed = init.normal((spec.vocab_size, spec.hidden_size), 1.0)
        self.blocks = [Block(layer, spec, intermediate_size, init) for layer in spec.layers]
        self.norm = mx.ones((spec.hidden_size,))
        self.lm_head = init.linear(spec.vocab_size, spec.hidden_size)
        self.fast_decode = True      # False: decode steps take the reference path (tests compare the two)
        # > 0: a decode step (one cache per layer) hands its graph to the device every this many layers
        # (mx.async_eval), so the device runs those layers while Python builds the next ones; 0: one
        # evaluation at the end. Default: overlap_every(largest layer) if MLX's default device is a GPU when
        # the model is built, else 0
        self.overlap_layers = 0
        if mx.default_device().type == mx.gpu:   # the largest layer's parameters, counted only where they are used
            self.overlap_layers = overlap_every(
                max(sum(p.size for _, p in nn.utils.tree_flatten(b.parameters())) for b in self.blocks))

    def overlap_for(self, caches) -> int:
        """Layers per hand-over (mx.async_eval) in a decode step over ``caches``: ``overlap_layers``, 0 over Rows."""
        return self.overlap_layers if type(caches[0]) is not Rows else 0

    def __call__(self, tokens: mx.array, caches=None, kv_dtype=None) -> mx.array:
        # every input checked before any layer writes its cache: a failed call changes nothing
        tokens = check_tokens(tokens, self.spec.vocab_size)
        if caches is not None:
            check_caches(self.spec, caches, tokens.shape[0], kv_dtype or self.dtype)
        x = self["embed"][tokens]
        if caches is not None and tokens.shape[1] == 1 and self.fast_decode:   # a decode step: the fast path
            every, n = self.overlap_for(caches), len(caches)
            for i, (block, cache) in enumerate(zip(self["blocks"], caches)):
                x = block.step(x, cache, kv_dtype)
                if i + 1 < n and hands_over(i + 1, every):   # start the device on what is built
                    mx.async_eval(x)
            return mx.fast.rms_norm(x, self["norm"], self.spec.rms_norm_eps) @ self["lm_head"].T
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], kv_dtype)
        return rms_norm(x, self.norm, self.spec.rms_norm_eps) @ self.lm_head.T

    def update(self, parameters: dict, strict: bool = True) -> "Model":
        """nn.Module.update, after dropping what the decode fast paths derived from the old weights
        (:func:`~kvsim.model.layers.forget_derived`; ``set_dtype`` and ``load_weights`` come through here)."""
        forget_derived(self)
        return super().update(parameters, strict)

    def compiled_step(self):
        """This model's decode step with its fixed-shape parts compiled (:mod:`kvsim.model.compiled`),
        built on first use and kept: ``model.compiled_step()(tokens, caches)`` equals ``model(tokens, caches)``."""
        if getattr(self, "_compiled_step", None) is None:
            from .compiled import compiled_step
            self._compiled_step = compiled_step(self)
        return self._compiled_step

    def make_caches(self, **kwargs) -> list:
        """One cache per layer for this model's spec (kvsim.cache.make_caches)."""
        from ..cache import make_caches
        return make_caches(self.spec, **kwargs)

    @property
    def dtype(self):
        return self.embed.dtype

    @property
    def weight_bytes(self) -> int:
        """Bytes of every parameter (what one decode step reads besides the cache)."""
        return sum(p.nbytes for _, p in nn.utils.tree_flatten(self.parameters()))

    @property
    def mla_path(self) -> str:
        paths = {b.mixer.path for b in self.blocks if isinstance(b.mixer, MLA)}
        return paths.pop() if len(paths) == 1 else "auto"

    @mla_path.setter
    def mla_path(self, path: str):
        if path not in MLA_PATHS:
            raise ValueError(f"mla_path {path!r} is not one of {', '.join(MLA_PATHS)}")
        for b in self.blocks:
            if isinstance(b.mixer, MLA):
                b.mixer.path = path


def select_layers(spec: ModelSpec, num_layers: int) -> tuple[int, ...]:
    """Indices of a representative slice: first layer of each distinct kind, then the earliest others."""
    n = spec.num_hidden_layers
    firsts: dict = {}  # layers that differ in any field (kind, geometry, RoPE) count as distinct kinds
    for i, layer in enumerate(spec.layers):
        firsts.setdefault(layer, i)
    if not isinstance(num_layers, int) or not len(firsts) <= num_layers <= n:
        raise ValueError(f"num_layers must be an integer in [{len(firsts)}, {n}] "
                         f"({len(firsts)} distinct layer kinds in {spec.name}), got {num_layers!r}")
    chosen = set(firsts.values())
    for i in range(n):
        if len(chosen) == num_layers:
            break
        chosen.add(i)
    return tuple(sorted(chosen))


def _ffn_width(spec: ModelSpec) -> int:
    """The dense FFN width, else one expert's (MoE becomes one dense FFN), else 4·hidden_size."""
    return spec.intermediate_size or spec.moe_intermediate_size or 4 * spec.hidden_size


def build_model(spec: ModelSpec, *, num_layers: int | None = None, vocab_size: int | None = None,
                intermediate_size: int | None = None, hidden_size: int | None = None,
                seed: int = 0, dtype: str = "fp32", init: WeightInit | None = None) -> Model:
    """A random-weight model with ``spec``'s layer geometry, optionally fewer layers / smaller vocab and FFN."""
    mx_dtype(dtype)  # validate before any work
    indices = select_layers(spec, spec.num_hidden_layers if num_layers is None else num_layers)
    vocab = positive_int("vocab_size", vocab_size or spec.vocab_size)
    ffn = positive_int("intermediate_size", intermediate_size or _ffn_width(spec))
    hidden = positive_int("hidden_size", hidden_size or spec.hidden_size)
    if not spec.num_attention_heads and any(l.kind != "recurrent" for l in spec.layers):
        raise ValueError(f"{spec.name}: num_attention_heads is missing but the model has attention layers")
    # the reduced spec, typed fields and config.json alike, describes the model as built
    config = {**spec.config, "num_hidden_layers": len(indices), "vocab_size": vocab,
              "intermediate_size": ffn, "hidden_size": hidden}
    reduced = replace(spec, layers=tuple(spec.layers[i] for i in indices), vocab_size=vocab,
                      hidden_size=hidden, intermediate_size=ffn, config=config)
    info = BuildInfo(spec.name, spec.num_hidden_layers, indices, seed, dtype)
    model = Model(reduced, ffn, info, init or WeightInit(seed))
    if dtype != "fp32":
        model.set_dtype(mx_dtype(dtype))
    mx.eval(model.parameters())
    return model


def perturbed(model: Model, scale: float, seed: int = 1) -> Model:
    """A copy of ``model`` with every weight w -> w + scale·rms(w)·u, u zero-mean unit-variance noise.

    A cheap stand-in for a smaller draft model in speculative decoding: scale 0 agrees with the
    target on every token, larger scales disagree more often.
    """
    if not scale >= 0:
        raise ValueError(f"scale must be >= 0, got {scale!r}")
    spec = model.spec
    copy = Model(spec, model.blocks[0].ffn.up.shape[0], model.info, WeightInit(model.info.seed))
    init = WeightInit(seed)
    noisy = [(name, w + scale * mx.sqrt(mx.mean(w.astype(mx.float32) ** 2)).astype(w.dtype)
              * init.normal(w.shape, 1.0).astype(w.dtype))
             for name, w in nn.utils.tree_flatten(model.parameters())]
    copy.update(nn.utils.tree_unflatten(noisy))
    mx.eval(copy.parameters())
    return copy


_TOY_BASE = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 32, "vocab_size": 128,
             "intermediate_size": 128, "max_position_embeddings": 4096, "num_hidden_layers": 2}
_TOYS = {
    "mha": {"model_type": "llama", "num_key_value_heads": 4},
    "gqa": {"model_type": "llama", "num_key_value_heads": 2},
    "mqa": {"model_type": "llama", "num_key_value_heads": 1},
    "sliding": {"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": 8},
    "sliding_global": {"model_type": "gemma3_text", "num_key_value_heads": 2, "sliding_window": 8,
                       "sliding_window_pattern": 2, "query_pre_attn_scalar": 32},
    "chunked": {"model_type": "llama4_text", "num_key_value_heads": 2, "attention_chunk_size": 8,
                "nope_layer_interval": 2},
    "mla": {"model_type": "deepseek_v3", "num_key_value_heads": 4, "q_lora_rank": 48,
            "kv_lora_rank": 32, "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 32},
    "mamba": {"model_type": "mamba", "state_size": 8, "conv_kernel": 4},
    "mamba2": {"model_type": "mamba2", "expand": 2, "state_size": 16, "head_dim": 32, "n_groups": 1,
               "conv_kernel": 4, "num_attention_heads": None},
    "jamba": {"model_type": "jamba", "num_key_value_heads": 2, "attn_layer_period": 2,
              "attn_layer_offset": 1, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2},
    "gated_deltanet": {"model_type": "qwen3_next", "num_key_value_heads": 2, "full_attention_interval": 2,
                       "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                       "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25},
    "rg_lru": {"model_type": "recurrent_gemma", "num_key_value_heads": 1, "num_hidden_layers": 3,
               "attention_window_size": 8, "lru_width": 64, "conv1d_width": 4, "partial_rotary_factor": 0.5},
}
TOY_KINDS = tuple(_TOYS)


def toy_spec(kind: str = "gqa", **overrides) -> ModelSpec:
    """A tiny config of one attention variant (see TOY_KINDS), parsed like a real config.json."""
    if kind not in _TOYS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(TOY_KINDS)}")
    cfg = {**_TOY_BASE, **_TOYS[kind], **overrides}
    return from_hf_config(cfg, name=f"toy-{kind}")
