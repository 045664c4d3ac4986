"""mlx-lm twins of kvsim models: the same weights in mlx-lm's own model classes and caches.

Contract
- :func:`twin(model)` returns a :class:`Twin`: mlx-lm's model holding the very arrays of ``model``
  (shared, not copied) and a ``make_caches(bits=None)`` that builds mlx-lm's own caches for it
  (``bits``: mlx-lm's ``QuantizedKVCache(group_size=64, bits)`` for full and MLA layers). kvsim's
  full and sliding attention layers become mlx-lm's ``llama`` (sliding layers get mlx-lm's
  ``RotatingKVCache(window)``: at decode its mask is None and it attends over the ring as stored);
  MLA layers become ``deepseek_v3`` with dense MLPs (its absorbed decode path), with ``kv_b``
  split into mlx-lm's ``embed_q`` / ``unembed_out``. Other layer kinds raise ValueError.
- Twins compute the same function as kvsim (same RoPE, norms, SwiGLU), so their logits agree
  with kvsim's (allclose) and greedy tokens are the same. mlx-lm's deepseek_v3 rotates
  interleaved pairs (``traditional=True``) where kvsim rotates halves, as Hugging Face does;
  the twin's RoPE is switched to halves (same cost).
- mlx-lm is imported without running ``mlx_lm/__init__.py`` (which loads the generate/convert
  utilities and, through them, transformers): only ``mlx_lm.models.*`` is loaded, so a machine
  with mlx, mlx-lm and numpy alone can run the twins. ImportError when mlx-lm is not installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

__all__ = ["Twin", "twin", "mlx_lm_module", "mlx_lm_version"]


@contextmanager
def _without_package_init(name: str):
    """Import submodules of package ``name`` without executing its ``__init__.py``."""
    if name in sys.modules:
        yield
        return
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed (needed for the side-by-side runs)")
    stub = types.ModuleType(name)
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules[name] = stub
    try:
        yield
    finally:  # a later `import mlx_lm` runs the real __init__ and finds these submodules loaded
        if sys.modules.get(name) is stub:
            del sys.modules[name]


def mlx_lm_module(name: str):
    """``mlx_lm.<name>`` (e.g. 'models.llama'), loaded without mlx_lm's top-level imports."""
    with _without_package_init("mlx_lm"):
        return importlib.import_module(f"mlx_lm.{name}")


def mlx_lm_version() -> str | None:
    """Installed mlx-lm version, or None when mlx-lm is not installed."""
    try:  # the installed distribution's metadata: mlx_lm._version is private
        return importlib.metadata.version("mlx-lm")
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Twin:
    """mlx-lm's model with kvsim's weights; ``make_caches()`` gives mlx-lm's caches for it."""

    model: object
    make_caches: Callable[..., list]              # make_caches(bits=None)
    family: str                                   # 'llama' or 'deepseek_v3'


def _common_weights(model) -> list:
    return [("model.embed_tokens.weight", model.embed), ("model.norm.weight", model.norm),
            ("lm_head.weight", model.lm_head)]


def _block_weights(i: int, block) -> list:
    p = f"model.layers.{i}."
    return [(p + "mlp.gate_proj.weight", block.ffn.gate), (p + "mlp.up_proj.weight", block.ffn.up),
            (p + "mlp.down_proj.weight", block.ffn.down), (p + "input_layernorm.weight", block.mixer_norm),
            (p + "post_attention_layernorm.weight", block.ffn_norm)]


def _load(twin_model, weights: list):
    twin_model.update(tree_unflatten(weights))   # mlx-lm's own (lazy) init is dropped, never computed
    mx.eval(twin_model.parameters())
    return twin_model


def _llama_twin(model) -> Twin:
    llama, cache = mlx_lm_module("models.llama"), mlx_lm_module("models.cache")
    spec, first = model.spec, model.blocks[0].mixer
    args = llama.ModelArgs(model_type="llama", hidden_size=spec.hidden_size,
                           num_hidden_layers=len(model.blocks), intermediate_size=model.blocks[0].ffn.up.shape[0],
                           num_attention_heads=first.n_heads, num_key_value_heads=first.n_kv_heads,
                           head_dim=first.head_dim, rms_norm_eps=spec.rms_norm_eps, vocab_size=spec.vocab_size,
                           rope_theta=first.rope_base, tie_word_embeddings=False)
    weights = _common_weights(model)
    for i, b in enumerate(model.blocks):
        a, p = b.mixer, f"model.layers.{i}.self_attn."
        if (a.n_kv_heads, a.head_dim, a.rope_dims) != (first.n_kv_heads, first.head_dim, first.head_dim):
            raise ValueError("a llama twin needs every layer with the same KV heads and full RoPE")
        weights += [(p + "q_proj.weight", a.wq), (p + "k_proj.weight", a.wk), (p + "v_proj.weight", a.wv),
                    (p + "o_proj.weight", a.wo)] + _block_weights(i, b)
    windows = [b.mixer.window for b in model.blocks]

    def make_caches(bits: int | None = None):
        if bits is not None and any(windows):
            raise ValueError("mlx-lm has no quantized sliding-window cache")
        if bits is not None:
            return [cache.QuantizedKVCache(group_size=64, bits=bits) for _ in windows]
        return [cache.KVCache() if w is None else cache.RotatingKVCache(max_size=w) for w in windows]

    return Twin(_load(llama.Model(args), weights), make_caches, "llama")


def _deepseek_twin(model) -> Twin:
    ds, cache = mlx_lm_module("models.deepseek_v3"), mlx_lm_module("models.cache")
    spec, first = model.spec, model.blocks[0].mixer
    args = ds.ModelArgs(vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
                        intermediate_size=model.blocks[0].ffn.up.shape[0], num_hidden_layers=len(model.blocks),
                        num_attention_heads=first.n_heads, num_key_value_heads=first.n_heads,
                        kv_lora_rank=first.kv_lora_rank, q_lora_rank=first.q_lora_rank or None,
                        qk_rope_head_dim=first.rope_dim, v_head_dim=first.v_head_dim,
                        qk_nope_head_dim=first.nope_dim, rms_norm_eps=spec.rms_norm_eps,
                        rope_theta=first.rope_base, n_routed_experts=None, rope_scaling=None)
    weights = _common_weights(model)
    for i, b in enumerate(model.blocks):
        m, p = b.mixer, f"model.layers.{i}.self_attn."
        w_uk, w_uv = m._w_uk_uv()                     # (H, nope, r), (H, v, r)
        weights += [(p + "kv_a_proj_with_mqa.weight", m.wkv_a), (p + "kv_a_layernorm.weight", m.kv_norm),
                    (p + "embed_q.weight", mx.contiguous(w_uk.swapaxes(-1, -2))),
                    (p + "unembed_out.weight", mx.contiguous(w_uv)), (p + "o_proj.weight", m.wo)]
        if m.q_lora_rank:
            weights += [(p + "q_a_proj.weight", m.wq_a), (p + "q_a_layernorm.weight", m.q_norm),
                        (p + "q_b_proj.weight", m.wq_b)]
        else:
            weights.append((p + "q_proj.weight", m.wq))
        weights += _block_weights(i, b)
    twin_model = _load(ds.Model(args), weights)
    for layer in twin_model.model.layers:              # kvsim rotates halves (traditional=False)
        layer.self_attn.rope = nn.RoPE(first.rope_dim, traditional=False, base=first.rope_base)
    n = len(model.blocks)

    def make_caches(bits: int | None = None):
        return [cache.KVCache() if bits is None else cache.QuantizedKVCache(group_size=64, bits=bits)
                for _ in range(n)]

    return Twin(twin_model, make_caches, "deepseek_v3")


def twin(model) -> Twin:
    """The mlx-lm twin of a kvsim model whose layers are all attention (full/sliding) or all MLA."""
    kinds = {layer.kind for layer in model.spec.layers}
    if kinds <= {"full", "sliding"}:
        return _llama_twin(model)
    if kinds == {"mla"}:
        return _deepseek_twin(model)
    raise ValueError(f"no mlx-lm twin for layer kinds {sorted(kinds)}; accepted: full/sliding, or mla")
