"""A decode step that hands its graph to the device every k layers (``Model.overlap_layers``, mx.async_eval) gives
the same tokens and logits as one evaluation per step, eager and compiled, one cache or Rows of caches."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.model import build_model, toy_spec
from kvsim.model.compiled import compiled_step
from kvsim.model.layers import Rows, hands_over
from kvsim.calc.registry import load_model
from kvsim.model.transformer import GPU_OVERLAP_PARAMS, overlap_every
from test_compiled_step import PROMPT, greedy  # prefill PROMPT, then one-token greedy steps: tokens and logits

def five_layers(kind: str, overlap: int, reference: bool = False):
    model = build_model(toy_spec(kind, num_hidden_layers=5), seed=11)
    model.overlap_layers = overlap
    model.fast_decode = not reference
    return model


def test_the_default_is_off_on_a_cpu():
    assert mx.default_device().type == mx.cpu
    assert build_model(toy_spec("gqa")).overlap_layers == 0


@pytest.mark.parametrize("name, every", [("llama-3-8b", 2), ("mistral-7b-v0.1", 2), ("deepseek-v3", 1)])
def test_gpu_hand_over_follows_the_layer_parameters(name, every):
    """The layer counts measured best on an H200: Llama 3 8B / Mistral 7B every 2 layers, DeepSeek-V3 every layer.
    Parameters per layer counted from the real config (attention + the dense FFN the model builds)."""
    spec = load_model(name)
    h, ffn = spec.hidden_size, spec.intermediate_size or spec.moe_intermediate_size
    layer = spec.layers[0]
    if layer.kind == "mla":
        H, qk = spec.num_attention_heads, spec.qk_nope_head_dim + layer.qk_rope_head_dim
        attn = (h * spec.q_lora_rank + spec.q_lora_rank * H * qk + h * (layer.kv_lora_rank + layer.qk_rope_head_dim)
                + layer.kv_lora_rank * H * (spec.qk_nope_head_dim + spec.v_head_dim) + H * spec.v_head_dim * h)
    else:
        attn = h * spec.num_attention_heads * layer.head_dim * 2 + h * layer.num_key_value_heads * layer.head_dim * 2
    assert overlap_every(attn + 3 * h * ffn) == every
    assert overlap_every(1) == GPU_OVERLAP_PARAMS and overlap_every(10**12) == 1


def test_hand_over_points():
    """The eager step (after block i, while blocks remain) and the compiled one (before block i) share this rule."""
    assert [b for b in range(1, 32) if hands_over(b, 2)] == list(range(2, 32, 2))   # Llama 3 8B: 15 hand-overs
    assert [b for b in range(1, 4) if hands_over(b, 1)] == [1, 2, 3]                # DeepSeek-V3's 4 layers
    assert not any(hands_over(b, 0) for b in range(64)) and not hands_over(0, 1)


@pytest.mark.parametrize("kind", ["gqa", "sliding", "mla", "jamba"])
@pytest.mark.parametrize("overlap", [1, 2, 7])
def test_overlapped_steps_equal_the_reference(kind, overlap):
    """Eager fast step and compiled step, handing over every ``overlap`` layers, against the readable reference
    path evaluated once per step (5 layers: 1 and 2 hand over inside the step, 7 never does)."""
    ref = five_layers(kind, 0, reference=True)
    want_tokens, want = greedy(lambda t, c: ref(t, c), ref, 8)
    eager = five_layers(kind, overlap)
    got_tokens, got = greedy(lambda t, c: eager(t, c), eager, 8)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    model = five_layers(kind, overlap)
    comp_tokens, comp = greedy(compiled_step(model), model, 8)
    assert comp_tokens == want_tokens
    np.testing.assert_allclose(comp, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_overlapped_steps_over_rows_equal_one_evaluation(kind):
    """Separate sequences at different offsets (Rows per layer, as batched_generate decodes)."""
    models = {k: five_layers(kind, k) for k in (0, 1)}
    steps = {k: compiled_step(m) for k, m in models.items()}
    rows = {(k, c): [m.make_caches() for _ in range(3)] for k, m in models.items() for c in (False, True)}
    for (k, c), per_seq in rows.items():
        for r, n in enumerate((3, 7, 11)):
            (steps[k] if c else models[k])(mx.array([PROMPT[:n]]), per_seq[r])
    per_layer = lambda per_seq: [Rows([per_seq[r][i] for r in range(3)]) for i in range(5)]   # noqa: E731
    tokens = mx.array([[5], [9], [13]])
    for _ in range(3):
        want = models[0](tokens, per_layer(rows[0, False]))
        for k in (0, 1):
            got_eager = models[k](tokens, per_layer(rows[k, False])) if k else want
            got_comp = steps[k](tokens, per_layer(rows[k, True]))
            np.testing.assert_allclose(np.array(got_eager), np.array(want), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.array(got_comp), np.array(want), rtol=1e-5, atol=1e-5)
        tokens = mx.argmax(want[:, -1:], axis=-1)
