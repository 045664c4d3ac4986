"""``kvsim calc --engine all``: every registered engine side by side; docs/engines.md written from the same rules."""

from __future__ import annotations

from pathlib import Path

from kvsim.calc import engines
from kvsim.calc.engines_all import RULES, engine_table, engines_markdown, format_engine_table
from kvsim.calc.engines import vllm_bytes
from kvsim.calc.registry import load_model
from kvsim.cli import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_committed_doc_equals_generated():
    assert (ROOT / "docs" / "engines.md").read_text(encoding="utf-8") == engines_markdown(), \
        "docs/engines.md is stale: run python tools/write_engines_doc.py"


def test_doc_states_none_of_the_wrong_vllm_claims():
    doc = engines_markdown()
    assert "per block |" not in doc and "fp8 / int8 / nvfp4 per block" not in doc
    assert "656 B is DeepSeek-V3.2's sparse MLA only" in doc
    assert "windows every layer with `config.sliding_window`" not in doc
    assert "2 × `max_num_batched_tokens`" in doc


def test_table_has_every_registered_engine_and_sums_its_layers():
    spec = load_model("gemma-3-27b")
    t = engine_table(spec, 8000, 192)
    labels = [c["engine"] for c in t["engines"]]           # one column per engine, or one per variant of it
    assert all(any(lab == e or lab.startswith(e + " ") for lab in labels) for e in engines.ENGINES), labels
    vllm = next(c for c in t["engines"] if c["engine"] == "vllm")
    eb = vllm_bytes(spec, 8000, 192)
    assert vllm["total_bytes"] == eb.total_bytes
    assert vllm["bytes_by_kind"]["sliding"] == sum(r.total_bytes for r in eb.layers if r.kind == "sliding")
    assert set(t["rules"]) == {"full", "sliding"} and all(set(r) == {e for e in engines.ENGINES if e in RULES}
                                                          for r in t["rules"].values())
    text = format_engine_table(t)
    assert "sliding · vllm:" in text and "total" in text


def test_refusing_engine_gets_its_reason():
    t = engine_table(load_model("recurrentgemma-2b"), 1000, 10)
    vllm = next(c for c in t["engines"] if c["engine"] == "vllm")
    assert "RecurrentGemma" in vllm["refused"]


def test_cli_engine_all_and_vllm():
    out = run_cli("calc llama-4-scout --engine all --prompt-tokens 9000 --decode-steps 10", 120)
    assert "chunked ×36" in out and "chunked · mlx-lm" in out
    out = run_cli("calc deepseek-v3 --engine vllm --prompt-tokens 8000 --kv-dtype fp8 --kv-cache-memory 40", 120)
    assert "block 64 tokens" in out and "maximum concurrency" in out
    out = run_cli("calc llama-3-8b --max-model-len 100", 60)
    assert "needs --engine vllm" in out


def test_engine_table_shows_transformers_dynamic_and_static():
    from kvsim.calc.engines import engine_bytes
    from kvsim.calc.engines_all import engine_table
    spec = load_model("gemma-3-27b")
    t = engine_table(spec, 8000, 100)
    cols = {c["engine"]: c for c in t["engines"]}
    assert {"transformers dynamic", "transformers static"} <= set(cols)
    for label, cache in (("transformers dynamic", "dynamic"), ("transformers static", "static")):
        eb = engine_bytes(spec, "transformers", prompt_tokens=8000, decode_steps=100, cache=cache)
        assert cols[label]["total_bytes"] == eb.total_bytes
    # a static sliding layer keeps W slots, a dynamic one W - 1: the two columns differ on sliding layers
    assert cols["transformers static"]["bytes_by_kind"]["sliding"] > cols["transformers dynamic"]["bytes_by_kind"]["sliding"]


def test_bailing_kda_engines_disagree_in_one_line_naming_the_keys():
    """The real Bailing-Hybrid config: transformers (and kvsim) size KDA by linear_head_dim 128, vLLM by head_dim =
    qk_rope_head_dim 64; --engine all says so in one line, and says nothing where the keys agree."""
    import json

    from kvsim.calc.hf_config import from_hf_config
    path = ROOT / "data" / "models" / "families" / "bailing_hybrid.json"
    cfg = json.loads(path.read_text())
    spec = from_hf_config(cfg)
    t = engine_table(spec, 8000, 100)
    assert len(t["notes"]) == 1 and "\n" not in t["notes"][0]
    assert "32 heads of 128, K 4" in t["notes"][0] and "vLLM 32 of 64, K 4" in t["notes"][0]
    cols = {c["engine"]: c["bytes_by_kind"]["recurrent"] for c in t["engines"]}
    assert cols["transformers dynamic"] > 3 * cols["vllm"]  # 128² against 64² per head: the columns do differ
    out = run_cli(f"calc {path} --engine all --prompt-tokens 8000 --decode-steps 100", 60)
    assert sum("note: recurrent: KDA layers differ by config key" in line for line in out.splitlines()) == 1
    agree = from_hf_config({**cfg, "linear_head_dim": cfg["qk_rope_head_dim"]})
    assert engine_table(agree, 8000, 100)["notes"] == []
