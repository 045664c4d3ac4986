"""Lesson 03 measured: MHA, GQA, MQA and MLA decoded for real at DeepSeek-V3's attention geometry.

Contract
- :func:`measure_variants` builds each variant with fewer layers, a small residual width and
  vocabulary but the real per-layer attention geometry, greedy-decodes a prompt with K/V stored
  in bf16, and reads each layer's cache (``offset``, ``used_bytes``, ``nbytes``) after the run:
  the measured bytes per token per layer, to set beside :func:`kvsim.calc.memory.layer_token_bytes`.
- :func:`compare_mla_paths`: the same MLA model decoding with the absorbed and the materialized
  path (:attr:`kvsim.model.Model.mla_path`): same tokens, allclose logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ...calc import memory
from ...calc.config import ModelSpec
from ...calc.counterfactual import decodable_variants
from ...calc.progress import Progress
from ...decode import Generation, generate
from ...model import build_model


@dataclass
class VariantRun:
    """One variant decoded at reduced depth: the full spec, the model's reduced spec, the run."""

    name: str
    full_spec: ModelSpec
    spec: ModelSpec
    generation: Generation
    model: object = None             # the MLX model, when asked to keep it

    @property
    def tokens_cached(self) -> int:
        return self.generation.caches[0].offset

    def measured_token_bytes(self) -> list[int]:
        """Per layer: used_bytes / tokens cached, read from the real caches (exact division checked)."""
        out = []
        for c in self.generation.caches:
            q, r = divmod(c.used_bytes, c.offset)
            if r:
                raise ValueError(f"{self.name}: used_bytes {c.used_bytes} is not a multiple of {c.offset} tokens")
            out.append(q)
        return out

    def row(self, kv_dtype="bf16") -> dict:
        """Layer 0's cache after the run (tokens held, allocated and used bytes), per token beside the formula."""
        per_layer = self.measured_token_bytes()
        n_full = self.full_spec.num_hidden_layers
        return {"variant": self.name, "tokens": self.tokens_cached,
                "nbytes/layer": self.generation.caches[0].nbytes,
                "used_bytes/layer": self.generation.caches[0].used_bytes,
                "measured B/token/layer": per_layer[0],
                "formula": memory.layer_token_bytes(self.spec.layers[0], kv_dtype),
                f"measured × {n_full}": per_layer[0] * n_full,
                f"formula, {n_full} layers": memory.bytes_per_token(self.full_spec, kv_dtype)}


def _prompt(vocab: int, tokens: int, seed: int) -> list[int]:
    return mx.random.randint(0, vocab, (tokens,), key=mx.random.key(seed)).tolist()


def build_variant(spec: ModelSpec, num_layers: int = 2, hidden_size: int = 128, vocab_size: int = 128,
                  intermediate_size: int = 256, seed: int = 0):
    """kvsim.model.build_model with the real per-layer attention geometry and small everything else."""
    return build_model(spec, num_layers=num_layers, hidden_size=hidden_size, vocab_size=vocab_size,
                       intermediate_size=intermediate_size, seed=seed)


def measure_variants(variants: dict[str, ModelSpec] | None = None, num_layers: int = 2, prompt_tokens: int = 16,
                     answer_tokens: int = 8, kv_dtype: str = "bf16", seed: int = 0, progress: bool = True,
                     keep_models: tuple[str, ...] = ()) -> dict[str, VariantRun]:
    """Decode every variant for real (float32 math, K/V stored in ``kv_dtype``) and keep its caches.

    ``keep_models`` names the variants whose MLX model stays in the run (the others are freed).
    """
    variants = variants or decodable_variants()
    runs = {}
    for name, spec in Progress(variants.items(), desc="decode", unit="variants", enabled=progress):
        model = build_variant(spec, num_layers=num_layers, seed=seed)
        g = generate(model, _prompt(model.spec.vocab_size, prompt_tokens, seed), answer_tokens, kv_dtype=kv_dtype)
        runs[name] = VariantRun(name, spec, model.spec, g, model if name in keep_models else None)
    return runs


def compare_mla_paths(model, prompt_tokens: int = 8, answer_tokens: int = 4, seed: int = 0) -> dict:
    """Greedy decode with the absorbed and the materialized MLA path: tokens equal? largest logit gap?"""
    prompt = _prompt(model.spec.vocab_size, prompt_tokens, seed)
    before = model.mla_path
    out = {}
    try:
        for path in ("absorbed", "materialized"):
            model.mla_path = path
            out[path] = generate(model, prompt, answer_tokens)
    finally:
        model.mla_path = before
    a, m = out["absorbed"], out["materialized"]
    return {"same tokens": a.tokens == m.tokens, "tokens": a.tokens,
            "max |logit difference|": float(mx.max(mx.abs(a.logits - m.logits)).item()),
            "max |logit|": float(mx.max(mx.abs(m.logits)).item())}
