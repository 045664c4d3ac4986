"""Which of transformers' causal-LM model types kvsim reads, and whether transformers' own cache equals kvsim's.

Prints one row per model type of ``transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``
that kvsim reads (model type, the real config it is checked on, layer kinds and notes), then the count of types
read. The vLLM column says whether ``kvsim calc --engine vllm`` plans the real config (else its one-line refusal)
and how many golden rows of that model type (``tests/data/vllm_golden.json``, computed by vLLM 0.33's own planning
code: tools/vllm_golden.py) kvsim's plan equals, by the assertions of tests/test_engines_vllm.py. The mlx-lm column
says whether mlx-lm has a model file for the type and which tiny configs tests/test_engines_mlx_lm.py checks
byte-exact against its measured nbytes (tests/mlx_lm_configs.py). With ``--measure``
it also runs the tiny random-weight model of each family (tests/transformers_configs.py)
through ``generate`` in fp32 and bf16 and prints whether every layer's bytes equal
:func:`kvsim.calc.engines_transformers.transformers_rows` (what tests/test_engines_transformers.py asserts).

    PYTHONPATH=. python tools/family_coverage.py [--measure]
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def real_configs() -> dict:
    """model_type -> the real config file (registry first, then data/models/families)."""
    from kvsim.calc.registry import data_dir, model_info, model_names
    out = {}
    for name in model_names():
        raw = json.loads((data_dir() / model_info(name)["file"]).read_text())
        for t in (raw.get("model_type"), (raw.get("text_config") or {}).get("model_type")):
            if t:
                out.setdefault(t, f"{name} ({model_info(name)['hf_repo']})")
    sources = json.loads((data_dir() / "models" / "families" / "SOURCES.json").read_text())
    for stem, src in sorted(sources.items()):
        out.setdefault(src["model_type"], f"families/{stem}.json ({src['checkpoint']})")
    return out


def measured_equal(model_type: str) -> str:
    """'yes' when every tiny config of this model type matches transformers per layer in fp32 and bf16."""
    from kvsim.calc.engines_transformers import transformers_rows
    from kvsim.calc.families_hybrid import SEQ2SEQ_DECODERS
    from kvsim.calc.hf_config import from_hf_config
    from kvsim.measure import transformers_bytes as tb
    from tests.transformers_configs import CONFIGS, transformers_config
    names = [n for n, c in CONFIGS.items() if c["model_type"] == model_type]
    if not names:
        return "no tiny config"
    for name in names:
        for dtype in ("fp32", "bf16"):
            model = tb.tiny_model(transformers_config(name), dtype)
            cache = None if model_type == "rwkv" else tb.run_generate(model, 12, 2)
            got = [tb.layer_bytes(x) for x in tb.cache_layers(cache)]
            if model_type == "rwkv":  # h22-fam-hybrid: no Cache, the state generate carries in its kwargs
                got = [v for _, v, _ in tb.rwkv_state_rows(model, 12, 2)]
            if model_type == "recurrent_gemma":
                got = [g + m for g, (m, _) in zip(got, tb.module_state_bytes(model))]
            want = [r.total_bytes for r in transformers_rows(from_hf_config(CONFIGS[name]), 12, 2, dtype)]
            # ---- h22-fam-hybrid: MiniMax's lightning state sits in MiniMaxCache.linear_cache; a seq2seq
            # decoder's DynamicCache has the encoder's layer count, those past the decoder empty
            if model_type == "minimax":
                got = [v for _, v, _ in tb.decoder_layer_rows(cache, model.config.num_hidden_layers)]
            if model_type in SEQ2SEQ_DECODERS and not any(got[len(want):]):
                got = got[:len(want)]
            # ---- end h22-fam-hybrid
            if got != want and not (got == [] and not any(want)):
                return f"NO ({name} {dtype})"
    return "yes"


def tested_by(model_type: str) -> str:
    """Without --measure: the tiny configs tests/test_engines_transformers.py checks this model type with."""
    from tests.transformers_configs import CONFIGS
    names = [n for n, c in CONFIGS.items() if c["model_type"] == model_type]
    text = {"gemma3": "gemma3_text", "llama4": "llama4_text",
            # h22-fam-attn: multimodal wrappers read through their text_config
            "gemma3n": "gemma3n_text", "gemma4": "gemma4_text", "gemma4_unified": "gemma4_unified_text"}.get(model_type)
    return (f"tested: {', '.join(names)}" if names else
            f"text part tested as {text}" if text else "no tiny config")


def mlx_lm_cell(model_type: str) -> str:
    """Whether mlx-lm has a model file for this type (after its MODEL_REMAPPING), and the tiny configs
    tests/test_engines_mlx_lm.py checks byte-exact against mlx-lm's measured nbytes (tests/mlx_lm_configs.py)."""
    import importlib.util

    from mlx_lm.utils import MODEL_REMAPPING
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))  # mlx_lm_configs imports its sibling transformers_configs
    from mlx_lm_configs import CONFIGS, NEW_CONFIGS
    module = MODEL_REMAPPING.get(model_type, model_type)
    if importlib.util.find_spec(f"mlx_lm.models.{module}") is None:
        return "no model file"
    names = sorted(n for n, c in {**CONFIGS, **NEW_CONFIGS}.items()
                   if model_type in (c.get("model_type"), (c.get("text_config") or {}).get("model_type")))
    return f"models/{module}.py; " + (f"tested: {', '.join(names)}" if names else "no tiny config")


def golden_rows_by_type() -> dict:
    """model_type -> the vLLM golden rows of configs of that type (a row's config: a registry model or
    ``data/models/families/<type>.json``; the type of a multimodal wrapper and of its text_config both count)."""
    from kvsim.calc.registry import data_dir, model_info
    golden = json.loads((ROOT / "tests" / "data" / "vllm_golden.json").read_text())
    out: dict = {}
    for row in golden["rows"]:
        name = row["model"]
        file = f"models/{name}.json" if name.startswith("families/") else model_info(name)["file"]
        raw = json.loads((data_dir() / file).read_text())
        for t in {raw.get("model_type"), (raw.get("text_config") or {}).get("model_type")} - {None}:
            out.setdefault(t, []).append(row)
    return out


def vllm_equal(spec, rows) -> tuple[str, bool, int]:
    """(cell, plans, golden rows equal): 'plans' or the refusal for the real config (8K prompt), then
    'vLLM = kvsim on e of n golden rows'."""
    from kvsim.calc.engines_vllm import vllm_plan
    from tests.test_engines_vllm import test_plan_equals_vllm
    try:
        vllm_plan(spec, 8192)
        plan = "plans"
    except ValueError as e:  # InputError / ConfigError: the one-line reason
        plan = f"refused: {e}"
    if not rows:
        return f"{plan}; no golden row", plan == "plans", 0
    equal = 0
    for row in rows:
        try:
            test_plan_equals_vllm(row)
            equal += 1
        except AssertionError:
            pass
    variants = " (some with checkpoint keys)" if any(r.get("config_overrides") for r in rows) else ""
    return f"{plan}; vLLM = kvsim on {equal} of {len(rows)} golden rows{variants}", plan == "plans", equal


def main(measure: bool) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from kvsim.calc.families import SUPPORTED_MODEL_TYPES, spec_notes
    from kvsim.calc.hf_config import load_config
    from kvsim.calc.registry import data_dir, load_model
    if measure:
        import transformers
        transformers.logging.set_verbosity_error()
    sources = real_configs()
    read = [t for t in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) if t in SUPPORTED_MODEL_TYPES]
    golden = golden_rows_by_type()
    print("| model type | real config | layers | notes | transformers measured = kvsim | vLLM 0.33 | mlx-lm "
          f"{__import__('importlib.metadata').metadata.version('mlx-lm')} measured = kvsim |")
    print("|---|---|---|---|---|---|---|")
    vllm_cells, mlx_cells = {}, {}
    for t in read:
        src = sources.get(t, "")
        name = src.split(" ")[0]
        spec = (load_config(data_dir() / "models" / name) if name.startswith("families/") else load_model(name)) \
            if name else None
        kinds = ", ".join(f"{n} {k}" for k, n in spec.kinds.items()) if spec else ""
        notes = "; ".join(n.split(":")[0] for n in spec_notes(spec)) if spec else ""
        vllm_cells[t] = vllm_equal(spec, golden.get(t, [])) if spec else ("no real config", False, 0)
        print(f"| {t} | {src} | {kinds} | {notes} | {measured_equal(t) if measure else tested_by(t)} "
              f"| {vllm_cells[t][0]} | {mlx_cells.setdefault(t, mlx_lm_cell(t))} |")
    print(f"\nkvsim reads {len(read)} of the {len(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)} causal-LM model types of "
          f"transformers {__import__('transformers').__version__} (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES); "
          f"kvsim also reads {', '.join(sorted(set(SUPPORTED_MODEL_TYPES) - set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)))}, "
          "which that mapping does not list.")
    plans = [t for t, (_, ok, _) in vllm_cells.items() if ok]
    checked = [t for t in read if golden.get(t)]
    equal = [t for t in checked if vllm_cells[t][2] == len(golden[t])]
    print(f"vLLM 0.33: kvsim plans {len(plans)} of these {len(read)} types; golden rows computed by vLLM's own code "
          f"check {len(checked)} types, vLLM = kvsim on every row for {len(equal)} of them.")
    has = [t for t, c in mlx_cells.items() if c != "no model file"]
    print(f"mlx-lm: a model file for {len(has)} of these {len(read)} types; tiny configs checked byte-exact against "
          f"its measured nbytes for {sum('tested: ' in mlx_cells[t] for t in has)} of them.")


if __name__ == "__main__":
    main("--measure" in sys.argv[1:])
