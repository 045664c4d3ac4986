"""One request, every engine: what each registered engine holds per layer kind, and the rule behind it (pure).

Contract
- :data:`RULES` is the one source of the per-kind rules: for each engine and layer kind, one line saying
  what that engine keeps and a source (the engine file and function). ``kvsim calc --engine all`` prints
  them under its table and ``tools/write_engines_doc.py`` writes ``docs/engines.md`` from them
  (:func:`engines_markdown`; ``tests/test_engines_all.py`` checks the committed page equals it).
- :func:`vllm_summary` is the JSON block of ``kvsim calc --engine vllm``.
- :func:`engine_table` sizes one request (P prompt tokens, D decode steps) with every engine in
  :data:`kvsim.calc.engines.ENGINES` (plus the variants an engine registers in
  ``engines.ENGINE_VARIANTS``, e.g. a static cache), summing each engine's bytes per layer kind. An engine
  that refuses the model or a setting gets its one-line reason instead of numbers.
- :func:`config_key_notes`: one line per place where the engines read different config keys for the same
  layers of this model (Bailing-Hybrid's KDA sizes), printed under the rules, so a column that differs says why.
"""

from __future__ import annotations

from . import engines, engines_vllm
from .config import Kind, ModelSpec
from .units import InputError, format_bytes

KIND_ORDER = Kind.ALL

# engine -> kind -> (what it keeps, where the rule lives)
RULES = {
    "kvsim": {
        "full": ("⌈T/256⌉·256 slots, whatever the calls", "kvsim/calc/memory.py layer_kv_bytes"),
        "sliding": ("min(⌈T/256⌉·256, W) slots on every layer the config windows; DeepSeek-V4: one K = V "
                    "tensor, plus ⌊T/m⌋ compressed entries grown in 256-entry steps", "kvsim/calc/memory.py"),
        "chunked": ("the current chunk, ≤ C slots", "kvsim/calc/memory.py"),
        "mla": ("the latent, kv_lora_rank + qk_rope_head_dim elements per token (+ index_head_dim on DSA "
                "indexer layers)", "kvsim/calc/memory.py"),
        "recurrent": ("conv K − 1 columns + the state; SSM / delta-rule / RG-LRU state fp32, conv in the "
                      "model dtype (or one --state-dtype)", "kvsim/calc/config.py REFERENCE_FP32_STATES"),
    },
    "mlx-lm": {
        "full": ("KVCache: on overflow cap = (offset if offset % 256 else cap) + 256·⌈S/256⌉, so slots depend "
                 "on the calls", "mlx_lm/models/cache.py KVCache.update_and_fetch"),
        "sliding": ("RotatingKVCache(W) only where the model's make_cache builds one (llama with layer_types, "
                    "gemma3, cohere2, gpt_oss, recurrent_gemma); mistral, phi3, gemma2, qwen2: no window",
                    "mlx_lm/models/cache.py RotatingKVCache; make_cache of each model file"),
        "chunked": ("llama4: ChunkedKVCache(C) trimmed to C before each call (C + 256 slots after one); "
                    "llama4_text: a KVCache, no chunk", "mlx_lm/models/llama4.py make_cache"),
        "mla": ("the latent in a KVCache (keys 512, values 64); deepseek_v2 caches K/V expanded per head",
                "mlx_lm/models/deepseek_v3.py, deepseek_v2.py"),
        "recurrent": ("conv K − 1 columns in the model dtype; Mamba-2 and Gated DeltaNet state fp32, Mamba-1 "
                      "state in the model dtype", "mlx_lm/models/ssm.py, gated_delta.py, mamba.py"),
    },
    "transformers": {
        "full": ("DynamicCache: exactly T (StaticCache: max_cache_len slots)",
                 "transformers/cache_utils.py DynamicLayer, StaticLayer"),
        "sliding": ("DynamicSlidingWindowLayer keeps min(T, W − 1), only on the layers layer_types marks "
                    "sliding (sliding_window is read only without layer_types: jamba, qwen3_next, nemotron_h "
                    "are never windowed); StaticSlidingWindowLayer keeps W. DeepSeek-V4's CSA / HCA layers: K = V "
                    "once, ⌊T/m⌋ compressed entries, the T mod m tokens each compressor buffers (kv + gate) and "
                    "CSA's overlap state (gates fp32)",
                    "transformers/cache_utils.py get_layer_types_and_kwargs, DynamicSlidingWindowLayer.update"),
        "chunked": ("a sliding layer of window C: min(T, C − 1) whatever the chunk boundaries (static: C)",
                    "transformers/cache_utils.py get_layer_types_and_kwargs"),
        "mla": ("the latent, deepseek_v2 and deepseek_v3 alike; DSA models add indexer keys",
                "transformers/models/deepseek_v3/modeling_deepseek_v3.py"),
        "recurrent": ("conv K columns (RecurrentGemma K − 1) in the model dtype; Mamba-1, Mamba-2 and GDN "
                      "recurrent state fp32", "transformers/cache_utils.py LinearAttentionLayer"),
    },
    "vllm": {
        "full": ("⌈T/bs⌉ blocks, bs = 16 (64 for fp8 MLA; raised for attention + Mamba hybrids)",
                 "vllm/v1/kv_cache_interface.py FullAttentionSpec; platforms/interface.py"),
        "sliding": ("blocks below processed − W + 1 freed before each step: ⌈W/bs⌉ + 1 or so, but the whole "
                    "prompt chunk during prefill; every layer of a model with no layer_types (mistral, phi3)",
                    "vllm/v1/core/single_type_kv_cache_manager.py SlidingWindowManager"),
        "chunked": ("blocks below ⌊processed/C⌋·C freed: the current chunk's blocks (the whole prompt chunk "
                    "during prefill)", "vllm/v1/core/single_type_kv_cache_manager.py ChunkedLocalAttentionManager"),
        "mla": ("576 elements per token, no V, replicated on every TP rank; fp8: 576 B in 64-token FlashMLA "
                "blocks, one per-tensor scale", "vllm/v1/kv_cache_interface.py MLAAttentionSpec"),
        "recurrent": ("conv K − 1 columns + state, both in the model dtype (NemotronH's SSM and KDA's state fp32; "
                      "LFM2's short conv no state), the page padded up to the attention page; 1 block, 2 around "
                      "prefill steps in align mode",
                      "vllm/model_executor/layers/mamba/mamba_utils.py; MambaManager"),
    },
}

ENGINE_TITLES = {"kvsim": "kvsim", "mlx-lm": "mlx-lm 0.32", "transformers": "transformers 5.24",
                 "vllm": "vLLM 0.33"}


def _columns():
    """(label, engine, keyword arguments) for every registered engine and variant."""
    variants = getattr(engines, "ENGINE_VARIANTS", {})
    out = []
    for name in engines.ENGINES:
        for label, kwargs in variants.get(name, ((name, {}),)):
            out.append((label, name, kwargs))
    return out


def engine_table(spec: ModelSpec, prompt_tokens: int, decode_steps: int = 0, kv_dtype="bf16", tp: int = 1,
                 vllm_options: dict | None = None) -> dict:
    """Bytes per layer kind for every registered engine after one request: {kinds, engines: [...], rules}."""
    kinds = [k for k in KIND_ORDER if k in spec.kinds]
    cols = []
    for label, name, kwargs in _columns():
        try:
            if name == "vllm":
                eb = engines.vllm_bytes(spec, prompt_tokens, decode_steps, kv_dtype, tp,
                                **{k: v for k, v in (vllm_options or {}).items() if v is not None})
            else:
                if name == "kvsim":  # kvsim's own default, as `--engine kvsim` (each state its reference dtype)
                    kwargs = {"state_dtype": None, **kwargs}
                eb = engines.engine_bytes(spec, name, prompt_tokens=prompt_tokens, decode_steps=decode_steps,
                                          kv_dtype=kv_dtype, tp=tp, **kwargs)
        except InputError as e:
            cols.append({"engine": label, "refused": str(e).splitlines()[0]})
            continue
        per_kind = {k: sum(r.total_bytes for r in eb.layers if r.kind == k) for k in kinds}
        cols.append({"engine": label, "bytes_by_kind": per_kind, "total_bytes": eb.total_bytes})
    rules = {k: {name: RULES[name][k][0] for name in engines.ENGINES if name in RULES and k in RULES[name]}
             for k in kinds if k != "none"}
    return {"engine": "all", "prompt_tokens": prompt_tokens, "decode_steps": decode_steps, "kinds": kinds,
            "layers_by_kind": {k: spec.count(k) for k in kinds}, "engines": cols, "rules": rules,
            "notes": config_key_notes(spec)}


def config_key_notes(spec: ModelSpec) -> list[str]:
    """Lines naming the config keys each engine sizes a layer by, where the engines disagree for this model:
    Bailing-Hybrid's KDA layers (H heads of d, kernel K) when vLLM's keys give other sizes than transformers'."""
    kda = next((x for x in spec.layers if x.recurrent_family == "kda"), None)
    if spec.model_type != "bailing_hybrid" or kda is None:
        return []
    shapes = dict(kda.state_shapes)
    h, d, _ = shapes["ssm"]
    k = shapes["conv"][0] + 1
    try:
        keys = engines_vllm.vllm_model_keys(spec)
    except InputError:  # vLLM refuses the config: its column says so
        return []
    vh, vd, vk = keys["kda_heads"], keys["kda_head_dim"], keys["kda_kernel"]
    if (h, d, k) == (vh, vd, vk):
        return []
    return [f"recurrent: KDA layers differ by config key: kvsim and transformers {h} heads of {d}, K {k} "
            f"(linear_num_heads, linear_head_dim, linear_conv_kernel_dim); vLLM {vh} of {vd}, K {vk} "
            "(num_attention_heads, head_dim = qk_rope_head_dim, short_conv_kernel_size; models/bailing_moe_v3.py); "
            "mlx-lm's bailing_hybrid.py runs GLA instead (one fp32 state of num_attention_heads × head_dim², no conv)"]


def format_engine_table(t: dict) -> str:
    """The table ``kvsim calc --engine all`` prints: bytes per layer kind per engine, then one rule per line."""
    head = ["layer kind"] + [c["engine"] for c in t["engines"]]
    rows = []
    for k in t["kinds"]:
        rows.append([f"{k} ×{t['layers_by_kind'][k]}"] + [
            format_bytes(c["bytes_by_kind"][k]) if "bytes_by_kind" in c else "refused" for c in t["engines"]])
    rows.append(["total"] + [format_bytes(c["total_bytes"]) if "total_bytes" in c else "refused"
                             for c in t["engines"]])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"  one request: {t['prompt_tokens']:,}-token prompt + {t['decode_steps']:,} decode steps"]
    lines += ["  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
              for r in [head, *rows]]
    for c in t["engines"]:
        if "refused" in c:
            lines.append(f"  {c['engine']} refused: {c['refused']}")
    for k, by_engine in t["rules"].items():
        for name, rule in by_engine.items():
            lines.append(f"  {k} · {name}: {rule}")
    lines += [f"  note: {line}" for line in t.get("notes", ())]
    return "\n".join(lines)


def vllm_summary(spec: ModelSpec, prompt_tokens: int, decode_steps: int = 0, kv_dtype="bf16", tp: int = 1,
                 **options) -> dict:
    """The JSON block of ``kvsim calc --engine vllm``: engine_summary's keys plus the plan's
    (:func:`kvsim.calc.engines_vllm.plan_fields`)."""
    plan = engines_vllm.vllm_plan(spec, prompt_tokens, decode_steps, kv_dtype, tp, **options)
    eb = engines.vllm_bytes(spec, prompt_tokens, decode_steps, kv_dtype, tp, **options)
    out = engines.engine_summary(eb, prompt_tokens, 0, decode_steps)
    del out["prefill_step"]
    return {**out, **engines_vllm.plan_fields(plan)}


# ---------------------------------------------------------------- docs/engines.md

DOC_ENGINES = ("kvsim", "mlx-lm", "transformers", "vllm")

DOC_HEAD = """# What each engine keeps in its KV cache

<!-- Generated by tools/write_engines_doc.py from kvsim/calc/engines_all.py RULES; do not edit by hand. -->

kvsim's calculator has one *theoretical* size per model (the tokens each layer keeps × bytes per token), but a
real engine allocates differently: it grows buffers in steps or blocks, applies some windows and not others, and
keeps recurrent state in its own dtype. `kvsim calc MODEL --engine kvsim|mlx-lm|vllm --prompt-tokens P
--decode-steps D` sizes the caches of one engine, and `--engine all` prints every registered engine side by side
per layer kind, with the rules below.

- **kvsim**: kvsim's own MLX caches (`kvsim.cache`), sized by the calculator's allocated view.
- **mlx-lm 0.32**: what `make_prompt_cache` builds and `update_and_fetch` grows (`kvsim/calc/mlx_lm_rules.py`);
  `tests/test_engines_mlx_lm.py` checks it against mlx-lm's measured `nbytes` to the byte. `generate_step`
  feeds a P-token prompt as P − 1 tokens in calls of at most S (2048), then the last prompt token alone, then
  one token per decode step.
- **transformers 5.24**: `DynamicCache` after `generate` (T = P + D), `StaticCache` with `max_cache_len`.
- **vLLM 0.33**: what one request holds on one GPU (`kvsim/calc/engines_vllm.py`), checked against vLLM's own
  planning code and KV-cache manager run on a CPU (`tools/vllm_golden.py`, `tests/data/vllm_golden.json`).
"""

DOC_VLLM = """## vLLM 0.33: blocks, groups and concurrency

- **Block size**: 16 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE`); 64 for fp8 MLA, which runs on FlashMLA on SM90;
  attention + Mamba hybrids raise it to a·⌈mamba_page / (a·attention page per token)⌉ (a = 16, or 64 for Gated
  DeltaNet in align mode) and pad the Mamba page up to the attention page (`Platform._align_hybrid_block_size`).
- **Pages**: attention bs·n_kv·(d_k + d_v)·b; MLA bs·576·b (no V, replicated on every TP rank); Mamba the whole
  state of one request.
- **Groups**: layers of one spec share a block table; group size = the smallest bucket of layers unless the largest
  is under 1.5× it; a bucket of n layers becomes ⌈n/size⌉ groups, the gaps are padding slots; all groups draw
  block ids from one pool, each id spanning the largest group's pages (`get_kv_cache_groups`).
- **Held**: one request's blocks at its last step; before each step, blocks wholly below the processed tokens'
  window (sliding) or chunk start (chunked) are freed. Under async scheduling (the default) the previous step is
  still in flight, so a window frees a step later. Pure Mamba models run without prefix caching and hold one
  state block; hybrids run in align mode (2 state blocks around prefill steps).
- **Maximum concurrency** (`get_max_concurrency_for_kv_cache_config`, the figure vLLM logs): block ids in the
  budget ÷ Σ over groups of one L-token request's *reservation*: ⌈L/bs⌉ for full and MLA, ⌈min(W − 1 +
  in-flight, L)/bs⌉ + 1 for a window, ⌈min(C + in-flight, L)/bs⌉ for a chunk, 2 + checkpoint blocks for Mamba in
  align mode, with in-flight = 2 × `max_num_batched_tokens` under async scheduling. A reservation bound, not
  what a request holds: Gemma 3 27B reserves 4.71 GB per 8K request and holds about 1.2 GB.
- **Quantized K/V**: `fp8` keeps one per-tensor K scale and V scale per attention layer, outside the page (fp8
  MLA: 576 B per token per layer; `fp8_ds_mla`'s 656 B is DeepSeek-V3.2's sparse MLA only); int8 exists only as
  `int8_per_token_head` (an fp32 scale per token and head); `nvfp4` has an fp8 scale per 16 elements. No vLLM
  mode keeps a scale per paging block.
- **Tensor parallelism**: KV heads split when tp divides them, one head replicated when tp is a multiple of them,
  refused otherwise; Mamba states are sharded.
"""

DOC_FOOT = """## Cases outside the per-kind rows

- **deepseek_v2 in mlx-lm** caches K = [k_nope, k_pe] and V expanded per head: 4,915,200 B per token for
  DeepSeek-V2 (kvsim, transformers and vLLM keep the 576-element latent).
- **Hybrid patterns** (nemotron_h): layers that are MLP or MoE blocks keep no cache in every engine; mlx-lm's cache
  list is then shorter than the layer list.
- **Attention + Mamba-2 in every layer** (falcon_h1): each layer keeps both, in every engine.
- **Bailing-Hybrid's KDA layers** are sized by different config keys: transformers (and kvsim) read
  linear_num_heads × linear_head_dim and linear_conv_kernel_dim (128 per head in the real config), vLLM reads
  num_attention_heads × head_dim, which BailingHybridConfig sets to qk_rope_head_dim (64), and
  short_conv_kernel_size; mlx-lm's bailing_hybrid.py runs GLA (one fp32 state of num_attention_heads × head_dim²,
  no conv). `--engine all` prints this as a note when the keys give different sizes.
- **Quantized K/V in kvsim and mlx-lm**: kvsim's q8…q2 on every full, sliding and MLA layer; mlx-lm's `kv_bits`
  converts each `KVCache` once it holds `quantized_kv_start` (5000) tokens and refuses `RotatingKVCache`;
  transformers' `QuantizedCache` keeps 128 recent tokens in full precision.
- Batched generation and tensor parallelism are outside the mlx-lm engine view (`--batch`/`--tp` other than 1 are
  refused with `--engine mlx-lm`); `--engine vllm` sizes one request on one TP rank.
"""


def engines_markdown() -> str:
    """docs/engines.md, written from :data:`RULES` (one row per layer kind, one column per engine)."""
    head = "| layer kind | " + " | ".join(ENGINE_TITLES[e] for e in DOC_ENGINES) + " |"
    lines = [DOC_HEAD, "## Per layer kind", "", head, "|" + "---|" * (len(DOC_ENGINES) + 1)]
    for kind in KIND_ORDER[:-1]:
        cells = [f"{RULES[e][kind][0]} ({RULES[e][kind][1]})" for e in DOC_ENGINES]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", DOC_VLLM, DOC_FOOT]
    return "\n".join(lines).rstrip("\n") + "\n"
