"""Seed 000's padded-prefill refusals and the decode-lookahead memory of two sliding-cache designs (pure).

Contract
- :data:`PADDED_PREFILL_REFUSALS`: the families seed 000 lists with ``supports_padded_prefill() ==
  false``, one row each: the model, its config ``model_type``, the kind of layer that forbids
  padding and why. The seed gives the list, not the reasons; each reason is the one kvsim's layer
  kinds give (:func:`kvsim.decode.generate.check_padded_prefill` refuses the same kinds), and
  tests/test_lookahead.py checks it against the real configs kvsim ships.
  Contrast: dense transformers pad and trim their caches; Gemma 3 pads too, trimming its
  model-owned sliding caches with ``trim_state``.
- :func:`lookahead_rows_per_layer`: token rows one sliding layer (window W) holds to undo the last
  k speculative one-token appends exactly, in two designs: kvsim's spare slots
  (``RotatingKVCache(rewind_tokens=R)``: a ring of W + R slots, always; R = k - 1 extra, since a
  trim of one token after a write never needs the overwritten row) and Gemma 3's overwrite log
  (a ring of exactly W slots, plus the row each pending decode write overwrote: k rows, held only
  while a lookahead is pending). ``bytes`` multiply by the row bytes 2·n_kv_heads·head_dim·b.
"""

from __future__ import annotations

from .units import positive_int

PADDED_PREFILL_REFUSALS = (
    {"model": "NemotronH", "model_type": "nemotron_h", "kind": "recurrent",
     "reason": "Mamba-2 layers: the pads are mixed into the SSM state, which a trim cannot un-mix"},
    {"model": "AFMoE", "model_type": "afmoe", "kind": "sliding",
     "reason": "sliding-window layers: pads past the window evict real tokens from the ring; "
               "trimming the pads cannot bring them back"},
    {"model": "Llama 4", "model_type": "llama4_text", "kind": "chunked",
     "reason": "chunked layers: pads that cross a chunk boundary start a new chunk, which drops "
               "the real tokens of the last one"},
    {"model": "Gemma 4", "model_type": "gemma4", "kind": "sliding",
     "reason": "sliding-window layers: pads past the window evict real tokens from the ring"},
    {"model": "DeepSeek V4", "model_type": "deepseek_v4", "kind": "compressed",
     "reason": "compressed attention (CSA/HCA): pads are pooled into compressed entries and the "
               "compressor buffer, which a trim cannot separate again"},
    {"model": "Bailing linear", "model_type": "bailing_hybrid", "kind": "recurrent",
     "reason": "linear-attention layers: the pads enter the recurrent state"},
    {"model": "Qwen3-Next", "model_type": "qwen3_next", "kind": "recurrent",
     "reason": "Gated DeltaNet layers: the pads enter the delta-rule state"},
)


def refusal_for(model_type: str) -> dict | None:
    """The refusal row of a config ``model_type``, or None if seed 000 lets it pad."""
    return next((r for r in PADDED_PREFILL_REFUSALS if r["model_type"] == model_type), None)


def lookahead_rows_per_layer(window: int, lookahead_tokens: int) -> dict:
    """{design: rows} to undo ``lookahead_tokens`` = k one-token appends on a window of W.

    spare_slots: W + (k - 1) rows, always allocated. overwrite_log: W ring rows always, plus k
    saved rows while the lookahead is pending (0 otherwise).
    """
    w, k = positive_int("window", window), positive_int("lookahead_tokens", lookahead_tokens)
    return {"spare_slots": {"ring": w + k - 1, "saved": 0, "peak": w + k - 1, "idle": w + k - 1},
            "overwrite_log": {"ring": w, "saved": k, "peak": w + k, "idle": w}}
