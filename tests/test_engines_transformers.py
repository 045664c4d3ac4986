"""``--engine transformers`` against transformers itself: tiny random-weight models run ``generate`` and the
bytes their caches hold equal kvsim's prediction to the byte, per layer, in fp32 and bf16.

Marked ``engines`` (its own stage, ``make test-engines``): each case builds a torch model.
"""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny models from config objects only: never a download
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kvsim.calc.engines import engine_bytes  # noqa: E402
from kvsim.calc.engines_transformers import UNCACHED_MODEL_TYPES, transformers_rows  # noqa: E402
from kvsim.calc.families_hybrid import SEQ2SEQ_DECODERS  # noqa: E402
from kvsim.calc.hf_config import from_hf_config  # noqa: E402
from kvsim.measure import transformers_bytes as tb  # noqa: E402
from tests.transformers_configs import CONFIGS, transformers_config  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING  # noqa: E402

pytestmark = pytest.mark.engines
transformers.logging.set_verbosity_error()

PROMPT, STEPS = 12, 2  # T = 14 > the tiny window / chunk of 8; 3 model calls
torch.set_num_threads(1)  # tiny models: threads only add overhead on a shared machine


def measured(name, dtype, prompt, steps, cache="dynamic", max_cache_len=None):
    """[(class, view bytes, storage bytes)] per layer of the cache generate leaves (+ module-held state)."""
    model = tb.tiny_model(transformers_config(name), dtype)
    if CONFIGS[name]["model_type"] == "rwkv":  # no Cache: generate carries the state in its model kwargs
        return tb.rwkv_state_rows(model, prompt, steps)
    c = tb.run_generate(model, prompt, steps, cache, max_cache_len)
    rows = [(type(x).__name__, tb.layer_bytes(x), tb.layer_storage_bytes(x)) for x in tb.cache_layers(c)]
    if CONFIGS[name]["model_type"] == "minimax":  # lightning state in MiniMaxCache.linear_cache
        rows = tb.decoder_layer_rows(c, model.config.num_hidden_layers)
    if CONFIGS[name]["model_type"] in SEQ2SEQ_DECODERS:
        # DynamicCache(config) builds num_hidden_layers layers, the encoder's count: those past the decoder stay empty
        decoder_layers = from_hf_config(CONFIGS[name]).num_hidden_layers
        assert all(b == 0 for _, b, _ in rows[decoder_layers:]) and len(rows) >= decoder_layers
        rows = rows[:decoder_layers]
    if CONFIGS[name]["model_type"] == "recurrent_gemma":
        rows = [(cls, v + mv, s + ms) for (cls, v, s), (mv, ms) in zip(rows, tb.module_state_bytes(model))]
    return rows


def predicted(name, dtype, prompt, steps, cache="dynamic", max_cache_len=None):
    spec = from_hf_config(CONFIGS[name])
    return [(r.cache, r.total_bytes, r.storage_bytes)
            for r in transformers_rows(spec, prompt, steps, dtype, cache, max_cache_len)]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dynamic_cache_bytes_equal_transformers_per_layer(name, dtype):
    got, want = measured(name, dtype, PROMPT, STEPS), predicted(name, dtype, PROMPT, STEPS)
    spec = from_hf_config(CONFIGS[name])
    if spec.config.get("use_cache") is False:  # mpt's class default: generate keeps no cache
        assert got == [] and all(b == 0 for _, b, _ in want)
        return
    if spec.model_type in UNCACHED_MODEL_TYPES:  # the cache is built but its attention never writes it
        assert got == want and all(b == 0 for _, b, _ in got)
        return
    assert got == want
    assert any(b for _, b, _ in got)  # the cache holds something: the comparison can fail


@pytest.mark.parametrize("name", ["gemma2", "mistral", "llama4_text", "deepseek_v4"])
def test_prefill_only_sliding_view_pins_the_whole_prompt(name):
    got, want = measured(name, "fp32", PROMPT, 0), predicted(name, "fp32", PROMPT, 0)
    assert got == want
    assert any(held > view for _, view, held in got)


@pytest.mark.parametrize("name", ["llama", "gemma2", "deepseek_v3", "qwen3_next", "mamba2", "minimax_m3_vl_text"])
def test_static_cache_bytes_equal_transformers(name):
    got = measured(name, "bf16", PROMPT, STEPS, "static", 24)
    assert got == predicted(name, "bf16", PROMPT, STEPS, "static", 24)


@pytest.mark.parametrize("prompt, steps", [(13, 3), (5, 0)])
def test_deepseek_v4_buffers_and_entries_at_other_lengths(prompt, steps):
    """T = 16 closes every window (empty buffers pinning the last concatenation); T = 5 < the HCA rate (no entry)."""
    assert measured("deepseek_v4", "bf16", prompt, steps) == predicted("deepseek_v4", "bf16", prompt, steps)


def test_engine_bytes_sums_the_transformers_rows():
    spec = from_hf_config(CONFIGS["gemma2"])
    eb = engine_bytes(spec, "transformers", prompt_tokens=PROMPT, decode_steps=STEPS, kv_dtype="fp32")
    rows = measured("gemma2", "fp32", PROMPT, STEPS)
    assert eb.total_bytes == sum(v for _, v, _ in rows) and eb.storage_bytes == sum(s for _, _, s in rows)
    assert eb.feeds == (PROMPT,) + (1,) * STEPS


def _real_configs():
    from kvsim.calc.registry import data_dir, model_names
    paths = [data_dir() / "models" / "families" / f for f in sorted(os.listdir(data_dir() / "models" / "families"))
             if f.endswith(".json") and f != "SOURCES.json"]
    return [("registry", n) for n in model_names()] + [("file", str(p)) for p in paths]


@pytest.mark.parametrize("where, name", _real_configs(), ids=lambda x: os.path.basename(str(x)))
def test_real_config_layer_classes_and_windows_equal_the_dynamic_cache_transformers_builds(where, name):
    """Every real config: the cache-layer classes and windows DynamicCache(config=...) builds (no model run)."""
    import json

    from kvsim.calc.registry import data_dir, load_model, model_info
    from kvsim.calc.engines_transformers import transformers_layer
    path = data_dir() / model_info(name)["file"] if where == "registry" else name
    raw = json.loads(open(path).read())
    spec = load_model(name) if where == "registry" else from_hf_config(raw)
    if "model_type" not in raw:  # a state-spaces mamba_ssm config: transformers reads its own Mamba2Config
        pytest.skip("mamba_ssm config: no model_type for transformers")
    if spec.config.get("use_cache") is False:  # generate keeps no cache at all
        assert all(r.cache == "" and r.total_bytes == 0 for r in transformers_rows(spec, 8, 0))
        return
    if raw["model_type"] in ("minimax", "rwkv"):  # generate builds a MiniMaxCache / no Cache (RWKV's state)
        pytest.skip("not a DynamicCache(config=...): the tiny-model run checks where the state is kept")
    model_type = {"kimi_k2": "deepseek_v3"}.get(raw["model_type"], raw["model_type"])
    args = {k: v for k, v in raw.items() if k != "model_type"}
    if "text_config" in args:
        args = {**args, "text_config": dict(args["text_config"])}
    outer = transformers.AutoConfig.for_model(model_type, **args)
    # generate imports the model's module before it builds the cache, and that module is where a family's own
    # cache-layer classes register (DeepSeek-V4's compressed layers): import it here too, whatever ran before
    if type(outer) in MODEL_FOR_CAUSAL_LM_MAPPING:
        MODEL_FOR_CAUSAL_LM_MAPPING[type(outer)]
    config = outer.get_text_config()
    cache = transformers.DynamicCache(config=config)
    got = [(type(x).__name__, getattr(x, "sliding_window", None)) for x in cache.layers]
    rows = transformers_rows(spec, 8, 0)
    layers = [transformers_layer(spec, x, i) for i, x in enumerate(spec.layers)]
    # DeepSeek-V4's DeepseekV4CSACache / DeepseekV4HCACache subclass DynamicSlidingWindowLayer: windowed too
    windowed = ("SlidingWindowLayer", "DeepseekV4CSACache", "DeepseekV4HCACache")
    want = [(r.cache, x.window_tokens if r.cache.endswith(windowed) else None) for r, x in zip(rows, layers)]
    if spec.model_type == "dory":  # per_loop: DoryModel.forward appends the later loops' copies of the recurrent layers
        n_in = spec.config["n_input_layers"]
        assert want[len(got):] == got[n_in:n_in + spec.config["n_recurrent_layers"]] * (spec.config["n_recurrent_loops"] - 1)
        want = want[:len(got)]
    assert got == want


@pytest.mark.parametrize("family, overrides", [
    ("bailing_hybrid", {}),  # linear_head_dim 128 beside head_dim 64 (= qk_rope_head_dim, as to_dict writes it)
    ("bailing_hybrid", "no linear_* keys"),  # BailingHybridConfig derives them from the other three
    ("kimi_linear", {}),
    ("kimi_linear", {"linear_attn_config": {"num_heads": 16, "head_dim": 64, "short_conv_kernel_size": 3}}),
])
def test_real_config_kda_layer_equals_the_module_transformers_builds(family, overrides):
    """The real family config: kvsim's KDA layer (H, d, K) is the one the model's linear-attention module is built
    with (num_heads, head_dim, conv_kernel_size, conv width 3·H·d), read off the module on the meta device."""
    import importlib
    import json

    from kvsim.calc.registry import data_dir
    raw = json.loads((data_dir() / "models" / "families" / f"{family}.json").read_text())
    raw = ({k: v for k, v in raw.items() if not k.startswith("linear_")} if overrides == "no linear_* keys"
           else {**raw, **overrides})
    config = transformers.AutoConfig.for_model(**raw)
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    cls = {"bailing_hybrid": "BailingHybridDeltaAttention", "kimi_linear": "KimiLinearDeltaAttention"}[family]
    with torch.device("meta"):
        kda = getattr(module, cls)(config, 0)
    layer = next(x for x in from_hf_config(raw).layers if x.recurrent_family == "kda")
    shapes = dict(layer.state_shapes)
    assert shapes["ssm"] == (kda.num_heads, kda.head_dim, kda.head_dim)
    assert shapes["conv"] == (kda.conv_kernel_size - 1, kda.conv_dim)
