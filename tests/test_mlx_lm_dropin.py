"""kvsim's caches inside mlx-lm (issue 12): the same greedy tokens as mlx-lm's own caches and as no cache.

Each family is a tiny random-weight mlx-lm model (fp32 weights, seeded; 2 layers, hidden <= 64, except
llama4, whose mlx-lm model reads cache[3] and so needs 4 layers). kvsim parses the same config dict
(``from_hf_config``) and builds its caches with ``make_caches``; those caches are handed to mlx-lm's own
model as ``cache=`` and to mlx-lm's generation code (``generate_step``, ``speculative_generate_step``,
``trim_prompt_cache``, prompt-cache deep copies). Windows, chunks and rings are small, so every test
crosses them.
"""

import copy

import mlx.core as mx
import pytest
from mlx.utils import tree_map
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.models.base import quantized_scaled_dot_product_attention
from mlx_lm.models.cache import (
    ArraysCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.models.cache import QuantizedKVCache as MlxQuantizedKVCache

from kvsim.cache import (
    ChunkedKVCache,
    KVCache,
    LatentCache,
    QuantizedKVCache,
    RecurrentStateCache,
    RotatingKVCache,
    load_caches,
    make_caches,
    save_caches,
)
from kvsim.cache.sdpa import quantized_sdpa
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.memory import fixed_state_bytes, state_bytes
from kvsim.measure.mlx_lm_bytes import build_mlx_lm_model

# mlx-lm is a real engine: this file runs in make test's engines stage (the unit stage ignores it, so its
# workers never import mlx-lm, transformers and torch: ~5 CPU-s each).
pytestmark = pytest.mark.engines

BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "intermediate_size": 64, "vocab_size": 96, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 4096, "tie_word_embeddings": False}
FULL, SLIDING = "full_attention", "sliding_attention"
CONFIGS = {
    "llama": {**BASE, "model_type": "llama"},
    "llama+layer_types": {**BASE, "model_type": "llama", "sliding_window": 6, "layer_types": [FULL, SLIDING]},
    # mlx-lm runs mistral as llama without a window (kvsim, like transformers, keeps Mistral 7B's 4096);
    # the window is longer than the test, so both attend to the same keys
    "mistral": {**BASE, "model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768},
    "gemma3_text": {**BASE, "model_type": "gemma3_text", "sliding_window": 6, "sliding_window_pattern": 2,
                    "query_pre_attn_scalar": 32},
    "gpt_oss": {**BASE, "model_type": "gpt_oss", "sliding_window": 6, "layer_types": [SLIDING, FULL],
                "num_local_experts": 2, "num_experts_per_tok": 1},
    "llama4": {"model_type": "llama4", "text_config": {
        **BASE, "model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 4,
        "attention_bias": False, "interleave_moe_layer_step": 4, "intermediate_size_mlp": 64,
        "num_local_experts": 2, "num_experts_per_tok": 1, "rope_scaling": None, "use_qk_norm": True}},
    "deepseek_v3": {**BASE, "model_type": "deepseek_v3", "kv_lora_rank": 32, "q_lora_rank": None,
                    "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": None,
                    "moe_intermediate_size": 32, "num_key_value_heads": 4},
    "mamba2": {"model_type": "mamba2", "num_hidden_layers": 2, "hidden_size": 32, "expand": 2,
               "intermediate_size": 64, "num_heads": 4, "head_dim": 16, "state_size": 16, "n_groups": 1,
               "conv_kernel": 4, "layer_norm_epsilon": 1e-5, "use_bias": False, "use_conv_bias": True,
               "tie_word_embeddings": True, "time_step_limit": (0.001, 100.0), "time_step_rank": "auto",
               "vocab_size": 96},
    "jamba": {**BASE, "model_type": "jamba", "hidden_size": 32, "num_key_value_heads": 2, "head_dim": 8,
              "attn_layer_offset": 1, "attn_layer_period": 2, "expert_layer_offset": 1,
              "expert_layer_period": 2, "mamba_d_conv": 4, "mamba_d_state": 8, "mamba_expand": 2,
              "num_experts": 1, "num_experts_per_tok": 1},
    "qwen3_next": {**BASE, "model_type": "qwen3_next", "hidden_size": 32, "head_dim": 8,
                   "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 8,
                   "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 0,
                   "num_experts_per_tok": 1, "decoder_sparse_step": 1, "shared_expert_intermediate_size": 32,
                   "mlp_only_layers": [], "moe_intermediate_size": 32, "partial_rotary_factor": 0.25,
                   "full_attention_interval": 2},
}
PROMPT = [3, 17, 42, 8, 65, 23, 11, 90, 5, 31, 77, 14, 2]
DECODE_STEPS = 10
RECURRENT = ("mamba2", "jamba", "qwen3_next")
# weight seeds whose greedy continuations are not one repeated token (a stronger comparison)
SEEDS = {"deepseek_v3": 8, "gemma3_text": 1, "gpt_oss": 2, "jamba": 3, "llama": 0, "llama+layer_types": 5,
         "llama4": 6, "mamba2": 2, "mistral": 8, "qwen3_next": 9}

_built = {}


def build(name, dtype=mx.float32):
    """(mlx-lm model with seeded random weights in ``dtype``, kvsim's spec of the same config)."""
    if (name, dtype) not in _built:
        config = CONFIGS[name]
        mx.random.seed(SEEDS[name])
        model = build_mlx_lm_model(config)
        model.update(tree_map(lambda p: p.astype(dtype), model.parameters()))
        mx.eval(model.parameters())
        _built[name, dtype] = model, from_hf_config(config)
    return _built[name, dtype]


def run(model, caches, prompt=PROMPT, steps=DECODE_STEPS, chunks=(5,)):
    """(greedy tokens after ``prompt``, the logits each was picked from (steps, vocab)).

    The prompt is fed in pieces of ``chunks`` (then the rest). ``caches=None`` is the no-cache
    baseline: the whole sequence is run again at every step.
    """
    tokens, picked = list(prompt), []
    if caches is None:
        for _ in range(steps):
            picked.append(model(mx.array([tokens]))[0, -1])
            tokens.append(int(mx.argmax(picked[-1]).item()))
        return tokens[len(prompt):], mx.stack(picked)
    fed = 0
    for size in (*chunks, len(prompt)):
        piece = prompt[fed:fed + size]
        if piece:
            logits = model(mx.array([piece]), cache=caches)
            fed += len(piece)
    out = []
    for _ in range(steps):
        picked.append(logits[0, -1])
        out.append(int(mx.argmax(picked[-1]).item()))
        logits = model(mx.array([[out[-1]]]), cache=caches)
    return out, mx.stack(picked)


def greedy(model, caches, **kwargs):
    return run(model, caches, **kwargs)[0]


def kvsim_caches(name, **kwargs):
    return make_caches(build(name)[1], **kwargs)


# ---------------------------------------------------------------- every family drops in


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_greedy_tokens_as_mlx_lm_caches_and_no_cache(name):
    model, spec = build(name)
    theirs = make_prompt_cache(model)
    ours = make_caches(spec)
    assert all(type(c).__module__.startswith("kvsim.cache.") for c in ours)
    (no_cache, want), (with_theirs, theirs_logits), (with_ours, ours_logits) = (
        run(model, None), run(model, theirs), run(model, ours))
    assert with_ours == with_theirs == no_cache and len(set(no_cache)) > 3
    assert mx.allclose(ours_logits, theirs_logits, atol=1e-4).item() and mx.allclose(ours_logits, want, atol=1e-4).item()
    fed = len(PROMPT) + DECODE_STEPS
    assert {c.offset for c in ours} <= {fed, 0} and max(c.offset for c in ours) == fed  # jamba: no advance()


def test_layouts_are_the_ones_the_layers_need():
    kinds = {name: [type(c) for c in kvsim_caches(name)] for name in CONFIGS}
    assert kinds["llama+layer_types"] == [KVCache, RotatingKVCache] and kinds["mistral"] == [RotatingKVCache] * 2
    assert kinds["gpt_oss"] == [RotatingKVCache, KVCache] and kinds["gemma3_text"] == [RotatingKVCache, KVCache]
    assert kinds["llama4"] == [ChunkedKVCache] * 3 + [KVCache] and kinds["deepseek_v3"] == [LatentCache] * 2
    assert kinds["jamba"] == [RecurrentStateCache, KVCache] and kinds["mamba2"] == [RecurrentStateCache] * 2
    assert kinds["qwen3_next"] == [RecurrentStateCache, KVCache]


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_llama_same_tokens_as_mlx_lm_quantized_cache(bits):
    model, spec = build("llama")
    ours = make_caches(spec, kv_dtype=f"q{bits}", group_size=32)
    theirs = [MlxQuantizedKVCache(group_size=32, bits=bits) for _ in ours]
    got = greedy(model, ours)
    assert got == greedy(model, theirs)
    assert all(a.nbytes == b.nbytes for a, b in zip(ours, theirs))   # same packed data, scales, biases
    if bits == 8:
        assert got == greedy(model, None)        # 8 bits keeps the greedy tokens of the tiny model


def test_quantized_fetch_through_mlx_lm_attention_equals_kvsim_attention():
    cache = QuantizedKVCache(bits=4, group_size=32)
    k, v = (mx.random.normal((1, 2, 7, 64), key=mx.random.key(i)) for i in range(2))
    q = mx.random.normal((1, 4, 7, 64), key=mx.random.key(9))        # 4 query heads over 2 KV heads
    mask = cache.make_mask(7)
    keys, values = fetched = cache.update_and_fetch(k, v)
    ours = quantized_sdpa(q, fetched.keys, fetched.values, mask, 0.125, group_size=32, bits=4)
    theirs = quantized_scaled_dot_product_attention(q, keys, values, scale=0.125, mask=mask,  # scales q in place
                                                     group_size=cache.group_size, bits=cache.bits)
    assert mx.allclose(theirs, ours, atol=1e-5).item()


# ---------------------------------------------------------------- mlx-lm's generation code


def _mlx_generate(model, cache, **kwargs):
    steps = generate_step(mx.array(PROMPT), model, max_tokens=DECODE_STEPS, prompt_cache=cache, **kwargs)
    return [int(token) for token, _ in steps]


@pytest.mark.parametrize("name", ["llama+layer_types", "gpt_oss", "llama4", "deepseek_v3", "qwen3_next"])
def test_generate_step_with_kvsim_caches(name):
    model, _ = build(name)
    want = greedy(model, None)
    assert _mlx_generate(model, kvsim_caches(name), prefill_step_size=4) == want


def test_generate_step_quantizes_kvsim_caches_with_to_quantized():
    model, _ = build("llama")
    ours, theirs = kvsim_caches("llama"), make_prompt_cache(model)
    opts = dict(kv_bits=8, kv_group_size=32, quantized_kv_start=5, prefill_step_size=4)
    assert _mlx_generate(model, ours, **opts) == _mlx_generate(model, theirs, **opts)
    assert all(isinstance(c, QuantizedKVCache) and c.bits == 8 for c in ours)


def test_speculative_generate_step_with_kvsim_caches():
    model, _ = build("llama")
    draft = build_mlx_lm_model(CONFIGS["llama"])
    mx.random.seed(123)                          # the target's weights plus a little noise: some drafts
    draft.update(tree_map(lambda p: p + 0.01 * mx.random.normal(p.shape), model.parameters()))  # rejected
    caches = kvsim_caches("llama") + kvsim_caches("llama")
    assert can_trim_prompt_cache(caches)         # fresh caches: mlx-lm refused them before (defect 2)
    out = list(speculative_generate_step(mx.array(PROMPT), model, draft, num_draft_tokens=3,
                                         max_tokens=DECODE_STEPS, prompt_cache=caches, prefill_step_size=4))
    assert [int(t) for t, _, _ in out] == greedy(model, None)
    assert any(from_draft for _, _, from_draft in out) and not all(from_draft for _, _, from_draft in out)


def test_trim_prompt_cache_and_can_trim():
    model, spec = build("llama+layer_types")
    caches = make_caches(spec)
    assert can_trim_prompt_cache(caches)         # fresh caches are trimmable (a capability)
    greedy(model, caches, steps=1, chunks=(4,))  # 14 tokens fed: the window of 6 has wrapped
    assert not can_trim_prompt_cache(caches)     # the ring can no longer rewind everything
    assert trim_prompt_cache(caches, 3) == 0 and {c.offset for c in caches} == {14}
    assert caches[1].trim(3) == 1                # asked directly, it trims what it can and says so
    short = make_caches(spec)
    greedy(model, short, prompt=PROMPT[:4], steps=1)
    assert can_trim_prompt_cache(short) and trim_prompt_cache(short, 2) == 2 and short[1].offset == 3
    assert not can_trim_prompt_cache(kvsim_caches("jamba"))     # a recurrent state never is


def test_deepcopied_prompt_cache_continues_like_the_original():
    """mlx-lm's LRU prompt cache and batch generator deep-copy a used prompt cache."""
    for name in ("gemma3_text", "llama4", "deepseek_v3", "qwen3_next"):
        model, _ = build(name)
        caches = kvsim_caches(name)
        first = greedy(model, caches, steps=3)
        twin = copy.deepcopy(caches)
        assert greedy(model, twin, prompt=[first[-1]], steps=4, chunks=()) == \
            greedy(model, caches, prompt=[first[-1]], steps=4, chunks=())


def test_save_load_through_kvsim_continues_exactly(tmp_path):
    for name in ("gpt_oss", "llama4", "jamba"):
        model, _ = build(name)
        caches = kvsim_caches(name)
        first = greedy(model, caches, steps=3)
        save_caches(tmp_path / f"{name}.safetensors", caches, {"family": name})
        loaded, meta = load_caches(tmp_path / f"{name}.safetensors")
        assert meta == {"family": name}
        assert greedy(model, loaded, prompt=[first[-1]], steps=4, chunks=()) == \
            greedy(model, caches, prompt=[first[-1]], steps=4, chunks=())


# ---------------------------------------------------------------- recurrent state: layout and dtype


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_state_matches_mlx_lm_arrays_cache_in_bf16(name):
    """Section 3: in a bf16 model, mlx-lm keeps Mamba-2 / delta-rule state in fp32, Jamba's in bf16."""
    model, spec = build(name, mx.bfloat16)
    theirs, ours = make_prompt_cache(model), make_caches(spec, dtype=mx.bfloat16)
    greedy(model, theirs, steps=2)
    greedy(model, ours, steps=2)
    pairs = [(a, b) for a, b in zip(theirs, ours) if isinstance(a, ArraysCache)]
    assert pairs and all(isinstance(b, RecurrentStateCache) for _, b in pairs)
    for a, b in pairs:
        for i in (0, 1):                       # conv window, then SSM / delta-rule state
            assert (a[i].shape, a[i].dtype) == (b[i].shape, b[i].dtype), (name, i)
        assert a.nbytes == b.nbytes == state_bytes(next(x for x in spec.layers if x.kind == "recurrent"))
    layers = [x for x in spec.layers if x.kind == "recurrent"]
    assert sum(a.nbytes for a, _ in pairs) == fixed_state_bytes(spec) == len(layers) * state_bytes(layers[0])
