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
from kvsim.calc.engines_transformers import transformers_rows  # noqa: E402
from kvsim.calc.hf_config import from_hf_config  # noqa: E402
from kvsim.measure import transformers_bytes as tb  # noqa: E402
from tests.transformers_configs import CONFIGS, transformers_config  # noqa: E402

pytestmark = pytest.mark.engines
transformers.logging.set_verbosity_error()

PROMPT, STEPS = 12, 5  # T = 17 > the tiny window / chunk of 8


def measured(name, dtype, prompt, steps, cache="dynamic", max_cache_len=None):
    """[(class, view bytes, storage bytes)] per layer of the cache generate leaves (+ module-held state)."""
    model = tb.tiny_model(transformers_config(name), dtype)
    c = tb.run_generate(model, prompt, steps, cache, max_cache_len)
    rows = [(type(x).__name__, tb.layer_bytes(x), tb.layer_storage_bytes(x)) for x in tb.cache_layers(c)]
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
    if from_hf_config(CONFIGS[name]).config.get("use_cache") is False:  # mpt's class default
        assert got == [] and all(b == 0 for _, b, _ in want)
        return
    assert got == want
    assert any(b for _, b, _ in got)  # the cache holds something: the comparison can fail


@pytest.mark.parametrize("name", ["gemma2", "mistral", "llama4_text"])
def test_prefill_only_sliding_view_pins_the_whole_prompt(name):
    got, want = measured(name, "fp32", PROMPT, 0), predicted(name, "fp32", PROMPT, 0)
    assert got == want
    assert any(held > view for _, view, held in got)


@pytest.mark.parametrize("name", ["llama", "gemma2", "deepseek_v3", "qwen3_next", "mamba2"])
def test_static_cache_bytes_equal_transformers(name):
    got = measured(name, "bf16", PROMPT, STEPS, "static", 24)
    assert got == predicted(name, "bf16", PROMPT, STEPS, "static", 24)


def test_engine_bytes_sums_the_transformers_rows():
    spec = from_hf_config(CONFIGS["gemma2"])
    eb = engine_bytes(spec, "transformers", prompt_tokens=PROMPT, decode_steps=STEPS, kv_dtype="fp32")
    rows = measured("gemma2", "fp32", PROMPT, STEPS)
    assert eb.total_bytes == sum(v for _, v, _ in rows) and eb.storage_bytes == sum(s for _, _, s in rows)
    assert eb.feeds == (PROMPT,) + (1,) * STEPS
