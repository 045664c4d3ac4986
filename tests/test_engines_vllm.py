"""kvsim's ``--engine vllm`` against vLLM 0.33.0's own planning code.

CI path: ``tests/data/vllm_golden.json`` was written by ``tools/vllm_golden.py``, which runs vLLM 0.33.0's
spec classes, ``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``,
``get_max_concurrency_for_kv_cache_config`` and ``KVCacheManager.allocate_slots`` on a CPU (provenance in
the JSON). The test extra cannot install vLLM (its wheel pulls a CUDA torch), so CI compares against that
file. Where vLLM's source is importable (``VLLM_SRC``/``VLLM_DEPS``, as the tool's docstring sets up), the
live test below reruns the tool's computation for a subset and checks it equals the committed file, so
the golden values cannot drift from what vLLM computes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from kvsim.calc.memory import heads_per_rank

from kvsim.calc.engines import engine_bytes
from kvsim.calc.engines_vllm import (
    SPEC_CLASSES,
    layer_specs,
    mamba_blocks_held,
    vllm_plan,
)
from kvsim.calc.engines_all import vllm_summary
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.registry import load_model
from kvsim.calc.units import InputError

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "data" / "vllm_golden.json").read_text())
KV_CACHE = GOLDEN["kv_cache_memory_bytes"]


def _spec(row):
    """A registry model, or one of issue 17's family configs (``families/<type>``: data/models/families/<type>.json)
    with the row's config_overrides set in its (text) config."""
    if not row["model"].startswith("families/"):
        return load_model(row["model"])
    cfg = json.loads((ROOT / "data" / "models" / f"{row['model']}.json").read_text())
    cfg.get("text_config", cfg).update(row.get("config_overrides", {}))
    return from_hf_config(cfg)


def _kvsim(row):
    return vllm_plan(_spec(row), row["prompt_tokens"], row["decode_steps"], row["kv_dtype"],
                     max_num_batched_tokens=GOLDEN["max_num_batched_tokens"],
                     kv_cache_memory_bytes=row.get("kv_cache_memory_bytes", KV_CACHE))


def _overrides(family, key):
    """The config_overrides of the golden rows of ``families/<family>`` that set ``key`` (a tools/vllm_golden.py
    #variant: keys the family's real checkpoints write)."""
    return next(r["config_overrides"] for r in GOLDEN["rows"]
                if r["model"] == f"families/{family}" and key in r.get("config_overrides", {}))


def _ids(row):
    return f"{row['model']}-{row['kv_dtype']}-T{row['tokens']}-D{row['decode_steps']}"


@pytest.mark.parametrize("row", GOLDEN["rows"], ids=_ids)
def test_plan_equals_vllm(row):
    _assert_plan_equals(row)


def _assert_plan_equals(row):
    plan = _kvsim(row)
    assert plan.blocks.block_size_tokens == row["block_size_tokens"]
    got = [{"spec": SPEC_CLASSES[g.spec], "layers": len(g.layers), "page_size_bytes": plan.blocks.pages[g.layers[0]],
            "block_size_tokens": g.block_size_tokens, "blocks_held": n}
           for g, n in zip(plan.groups, plan.held_blocks)]
    assert sorted(got, key=str) == sorted(row["kv_cache_groups"], key=str)
    assert plan.num_blocks == row["num_blocks"]
    assert plan.block_id_bytes == row["block_id_bytes"]
    assert plan.held_bytes == row["held_bytes"]
    assert plan.max_concurrency == pytest.approx(row["max_concurrency"], rel=1e-12)


def test_golden_covers_the_brief():
    models = {r["model"] for r in GOLDEN["rows"]}
    assert len(models) >= 10 and {1024, 8192, 131072} <= {r["tokens"] for r in GOLDEN["rows"]}
    specs = {g["spec"] for r in GOLDEN["rows"] for g in r["kv_cache_groups"]}
    assert specs == {"FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec", "MLAAttentionSpec",
                     "MambaSpec"}
    assert {"fp8", "bf16"} <= {r["kv_dtype"] for r in GOLDEN["rows"]}
    assert GOLDEN["vllm_version"] == "0.33.0" and GOLDEN["functions"]


def test_golden_covers_issue17_families():
    """Attention-only families and the Mamba-2 / Gated DeltaNet / short-conv / KDA hybrids vLLM 0.33 runs, each at
    1K/8K/128K, each row naming the vLLM model file its layer list transcribes."""
    families = {"gpt2", "qwen3_moe", "glm4", "gemma", "starcoder2", "olmoe", "zamba2", "olmo_hybrid", "qwen3_5",
                "gemma3n", "lfm2", "lfm2_moe", "kimi_linear", "bailing_hybrid", "kolibri1", "beam"}
    rows = [r for r in GOLDEN["rows"] if r["model"].startswith("families/")]
    assert {r["model"].split("/")[1] for r in rows} == families
    for family in families:
        mine = [r for r in rows if r["model"] == f"families/{family}"]
        assert {r["tokens"] for r in mine} == {1024, 8192, 131072}
        assert all(r["provenance"]["layers"].startswith("models/") for r in mine)
    hybrids = [r for r in rows if r["model"] in ("families/zamba2", "families/olmo_hybrid", "families/qwen3_5",
                                                 "families/lfm2_moe") or r.get("config_overrides", {}).get("conv_dim")]
    assert sum(r["model"] in ("families/lfm2", "families/lfm2_moe") for r in hybrids) == 12  # both short-conv files
    assert all({g["spec"] for g in r["kv_cache_groups"]} == {"MambaSpec", "FullAttentionSpec"} for r in hybrids)
    kda = [r for r in rows if r["model"] in ("families/kimi_linear", "families/bailing_hybrid")]
    assert len(kda) == 12
    assert all({g["spec"] for g in r["kv_cache_groups"]} == {"MambaSpec", "MLAAttentionSpec"} for r in kda)


def test_kda_state_is_a_model_dtype_conv_and_an_fp32_recurrent_state():
    """KDA (kda_state_shape / kda_state_dtype): conv (K − 1, 3·H·d) bf16 and (H, d, d) fp32; Kimi-Linear 32 heads
    of 128, Bailing-Hybrid 32 of 64 (transformers' BailingHybridConfig sets head_dim = qk_rope_head_dim)."""
    kimi = {"model": "families/kimi_linear", "config_overrides": _overrides("kimi_linear", "linear_attn_config")}
    # Bailing: num_attention_heads, head_dim, short_conv_kernel_size, whatever linear_* say (transformers' keys)
    linear_keys = {"model": "families/bailing_hybrid",
                   "config_overrides": {"linear_num_heads": 16, "linear_head_dim": 96, "linear_conv_kernel_dim": 3}}
    for row, d in ((kimi, 128), ({"model": "families/bailing_hybrid"}, 64), (linear_keys, 64)):
        states = {x.state for x in layer_specs(_spec(row)) if x.spec == "mamba"}
        assert states == {(("conv", (3, 3 * 32 * d), 2), ("ssm", (32, d, d), 4))}
    assert {x.state_shapes for x in _spec(linear_keys).layers if x.state_shapes} == {  # kvsim: transformers' keys
        (("conv", (2, 3 * 16 * 96)), ("ssm", (16, 96, 96)))}


def test_mla_hybrid_block_is_a_multiple_of_128_and_pads_the_kda_page():
    """Platform._align_hybrid_block_size beside MLA: block = 128·⌈state / (128·576·2)⌉, the state padded to it."""
    plan = vllm_plan(_spec({"model": "families/bailing_hybrid"}), 8192)
    state = 3 * 3 * 32 * 64 * 2 + 32 * 64 * 64 * 4
    assert plan.blocks.block_size_tokens == 128 * -(-state // (128 * 1152)) == 512
    assert plan.blocks.mamba_padding_bytes == 512 * 1152 - state


def test_lfm2_short_conv_state_is_one_conv_of_conv_dim():
    """LFM2 conv layers: (conv_L_cache − 1, conv_dim) in the model dtype, no recurrent state (lfm2.py reads conv_dim,
    lfm2_moe.py hidden_size)."""
    row = {"model": "families/lfm2", "config_overrides": _overrides("lfm2", "conv_dim")}
    assert {x.state for x in layer_specs(_spec(row)) if x.spec == "mamba"} == {(("conv", (2, 2560), 2),)}
    row["config_overrides"] = {**row["config_overrides"], "conv_dim": 1280}
    assert {x.state for x in layer_specs(_spec(row)) if x.spec == "mamba"} == {(("conv", (2, 1280), 2),)}
    moe = {x.state for x in layer_specs(_spec({"model": "families/lfm2_moe"})) if x.spec == "mamba"}
    assert moe == {(("conv", (2, 2048), 2),)}


@pytest.mark.parametrize("overrides, match", [
    ({"full_attn_idxs": [2, 5], "layer_types": None}, "models/lfm2.py sizes LFM2's conv state by conv_dim"),
    ({}, "linear_attn_config"),
    ({"mla_use_nope": False}, "mla_use_nope true"),
    ({"linear_attn_config": {"kda_layers": [1, 2], "full_attn_layers": [3]}}, "kda_layers"),
    ({"layer_types": ["linear_attention"] * 41 + ["full_attention"]}, "models/bailing_moe_v3.py"),
], ids=["lfm2-no-conv_dim", "kimi-no-linear_attn_config", "kimi-rope-mla", "kimi-other-layers", "bailing-layers"])
def test_configs_vllm_cannot_run_are_refused_with_the_key(overrides, match):
    family = "lfm2" if "full_attn_idxs" in overrides else "bailing_hybrid" if "layer_types" in overrides else \
        "kimi_linear"
    if family == "kimi_linear" and overrides:
        overrides = {**_overrides("kimi_linear", "linear_attn_config"), **overrides}
    spec = _spec({"model": f"families/{family}", "config_overrides": overrides})
    with pytest.raises(InputError, match=match):
        vllm_plan(spec, 1024)


def test_minimax_lightning_state_is_still_refused():
    with pytest.raises(InputError, match="kvsim does not model vLLM .*lightning"):
        vllm_plan(_spec({"model": "families/minimax"}), 1024)


def test_qwen3_5_ssm_state_follows_mamba_ssm_dtype():
    """Qwen3.5 checkpoints write mamba_ssm_dtype float32: vLLM keeps the GDN state in fp32, the conv state bf16."""
    row = {"model": "families/qwen3_5"}
    states = {x.state for x in layer_specs(_spec(row)) if x.spec == "mamba"}
    assert {b for s in states for n, _, b in s} == {2}
    row["config_overrides"] = {"mamba_ssm_dtype": "float32"}
    assert {(n, b) for s in {x.state for x in layer_specs(_spec(row)) if x.spec == "mamba"} for n, _, b in s} == {
        ("conv", 2), ("ssm", 4)}
    assert any(r.get("config_overrides") == row["config_overrides"] for r in GOLDEN["rows"])


def test_fp8_mla_is_576_bytes_in_64_token_blocks():
    plan = vllm_plan(load_model("deepseek-v3"), 8192, kv_dtype="fp8")
    assert plan.blocks.block_size_tokens == 64 and set(plan.blocks.pages) == {64 * 576}
    assert vllm_plan(load_model("deepseek-v3"), 8192, tp=8).blocks.pages == plan.blocks.pages[:0] + tuple(
        [16 * 576 * 2] * 61)  # bf16, 16-token blocks, the latent replicated on every rank


def test_gemma3_reservation_is_not_what_a_request_holds():
    # 4.71 GB reserved per 8K request (issue 17) against about 1.2 GB held once decoding
    decoding = vllm_plan(load_model("gemma-3-27b"), 8000, 192, kv_cache_memory_bytes=KV_CACHE)
    reserved = KV_CACHE / decoding.max_concurrency
    assert reserved == pytest.approx(4.71e9, rel=0.01)
    assert decoding.held_bytes < reserved / 3
    # during a one-chunk prefill every window group holds the whole prompt: the bound is reached
    prefill = vllm_plan(load_model("gemma-3-27b"), 8192, kv_cache_memory_bytes=KV_CACHE)
    assert prefill.held_bytes == pytest.approx(reserved, rel=0.01)


def test_tp_rule_split_replicate_refuse():
    spec = load_model("llama-3-8b")                           # 8 KV heads: vLLM's rule is kvsim's one rule
    assert heads_per_rank(spec.layers[0], 2) == 4 and heads_per_rank(spec.layers[0], 16) == 1
    for tp in (3, 12):
        with pytest.raises(InputError, match=f"tp[ =]{tp} "):
            vllm_plan(spec, 1024, tp=tp)
    assert vllm_plan(spec, 1024, tp=2).blocks.pages[0] * 2 == vllm_plan(spec, 1024).blocks.pages[0]


def test_nemotron_ssm_state_is_fp32_and_other_states_bf16():
    nem = [x for x in layer_specs(load_model("nemotron-h-8b")) if x.spec == "mamba"][0]
    assert dict((n, b) for n, _, b in nem.state) == {"conv": 2, "ssm": 4}
    gran = [x for x in layer_specs(load_model("granite-4.0-h-small")) if x.spec == "mamba"][0]
    assert dict((n, b) for n, _, b in gran.state) == {"conv": 2, "ssm": 2}


def test_pure_mamba_has_no_prefix_caching_and_one_block():
    plan = vllm_plan(load_model("falcon-mamba-7b"), 8192, 10)
    assert not plan.blocks.prefix_caching and plan.blocks.mamba_cache_mode == "none"
    assert plan.held_blocks == (1,)


def test_mamba_align_mode_holds_two_states_around_a_prefill():
    # jamba-style Mamba-1 (no checkpoint), 80-token blocks, prompt in 256-token chunks: 3, then 2, then 1
    steps = (256, 256, 256, 232)
    assert mamba_blocks_held(80, steps, 1000) == 3
    assert mamba_blocks_held(80, steps + (1,), 1000) == 2
    assert mamba_blocks_held(80, steps + (1, 1), 1000) == 1


def test_engine_bytes_and_summary_keys():
    spec = load_model("gemma-3-27b")
    eb = engine_bytes(spec, "vllm", prompt_tokens=8000, decode_steps=192)
    s = vllm_summary(spec, 8000, 192, kv_cache_memory_bytes=KV_CACHE)
    for key in ("block_size_tokens", "kv_cache_groups", "page_size_bytes", "blocks_held", "max_concurrency"):
        assert key in s
    assert s["allocated_total_bytes"] == eb.total_bytes
    padding = sum((s["group_size"] - len(g["layers"])) * g["blocks_held"] for g in s["kv_cache_groups"])
    assert s["padding_slots"] == 8 and s["held_bytes"] - eb.total_bytes == padding * s["page_size_bytes"]


@pytest.mark.parametrize("kv", ["q8", "q4"])
def test_grouped_quantization_has_no_vllm_mode(kv):
    with pytest.raises(InputError, match="int8_per_token_head"):
        layer_specs(load_model("llama-3-8b"), kv)


def test_recurrent_gemma_is_refused():
    with pytest.raises(InputError, match="RecurrentGemma"):
        vllm_plan(load_model("recurrentgemma-2b"), 1024)


def _vllm_importable() -> bool:
    src = os.environ.get("VLLM_SRC", "/tmp/vllm_src")
    return Path(src, "vllm", "v1", "kv_cache_interface.py").exists() and importlib.util.find_spec("torch") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_importable(), reason="vLLM 0.33.0's source is not unzipped here (VLLM_SRC): "
                    "CI checks the committed golden JSON instead (see the module docstring)")
def test_live_vllm_reproduces_golden():
    sys.path.insert(0, str(ROOT / "tools"))
    import vllm_golden

    for row in [r for r in GOLDEN["rows"] if r["tokens"] == 8192][::3]:
        variant = [k for k, v in vllm_golden.VARIANTS.items() if v == row.get("config_overrides")]
        name = row["model"] + "".join(f"#{k}" for k in variant) + ("@fp8" if row["kv_dtype"] == "fp8" else "")
        live = vllm_golden.build(name, row["kv_dtype"], row["tokens"], row["decode_steps"])
        assert live == row


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_importable(), reason="vLLM 0.33.0's source is not unzipped here (VLLM_SRC)")
def test_live_vllm_sizes_bailing_kda_by_its_own_keys():
    """A Bailing-Hybrid config whose linear_* (what transformers reads) differ from num_attention_heads, head_dim
    and short_conv_kernel_size (what vLLM reads): kvsim's vLLM plan equals the one vLLM's calculators give."""
    sys.path.insert(0, str(ROOT / "tools"))
    import vllm_golden

    for tokens in (1024, 8192):
        row = vllm_golden.build("families/bailing_hybrid#linear-keys", "bf16", tokens, 100)
        assert row["config_overrides"] == vllm_golden.VARIANTS["linear-keys"]
        _assert_plan_equals(row)


def test_family_coverage_vllm_column_is_derived_from_the_golden_rows():
    """tools/family_coverage.py's vLLM column: the planner's verdict on the real config, then the golden rows of
    the model type that kvsim's plan equals (by test_plan_equals_vllm)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import family_coverage

    golden = family_coverage.golden_rows_by_type()
    assert {len(golden[t]) for t in ("lfm2_moe", "bailing_hybrid", "kolibri1", "beam")} == {6}
    assert len(golden["lfm2"]) == 12 and len(golden["kimi_linear"]) == 6
    cell, plans, equal = family_coverage.vllm_equal(_spec({"model": "families/kimi_linear"}), golden["kimi_linear"])
    assert not plans and cell.startswith("refused: vLLM 0.33.0 builds Kimi-Linear's KDA layers") and equal == 6
    wrong = [{**golden["beam"][0], "num_blocks": golden["beam"][0]["num_blocks"] + 1}]
    assert family_coverage.vllm_equal(_spec({"model": "families/beam"}), wrong)[1:] == (True, 0)
