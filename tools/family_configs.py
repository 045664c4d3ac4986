"""Write data/models/families/<model_type>.json: one real config per family kvsim reads with its own key names.

Each file is what ``save_pretrained`` writes for the checkpoint transformers 5.24's config class describes
(``PreTrainedConfig.to_dict`` of the class defaults, every key spelled out: the keys that family's config.json
files carry, with the family's own names such as ``n_layer`` or ``attn_config``; ``to_diff_dict`` would drop
the keys equal to the class defaults, which kvsim would then have to know), plus the overrides listed in OVERRIDES
for checkpoints the defaults do not describe (Falcon-40B). The checkpoint named in the class docstring is
the source; data/models/families/SOURCES.json records it per file.

    PYTHONPATH=. python tools/family_configs.py   # needs transformers 5.24
"""

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "models" / "families"
# model type -> (file stem, checkpoint, config overrides) for checkpoints the class defaults do not describe
OVERRIDES = {
    "falcon-40b": ("falcon", "tiiuae/falcon-40b", {
        "hidden_size": 8192, "num_hidden_layers": 60, "num_attention_heads": 128, "num_kv_heads": 8,
        "new_decoder_architecture": True, "parallel_attn": True, "bias": False, "alibi": False,
        "vocab_size": 65024, "bos_token_id": 11, "eos_token_id": 11}),
    # BloomConfig's defaults are a 2-layer toy
    "bloom-560m": ("bloom", "bigscience/bloom-560m", {
        "hidden_size": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 250880, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": 3}),
    # Glm4MoeConfig has no head_dim default (4096 / 96 heads is no integer); GLM-4.5's config.json writes it
    "glm-4.5": ("glm4_moe", "zai-org/GLM-4.5", {
        "hidden_size": 5120, "num_hidden_layers": 92, "num_attention_heads": 96, "num_key_value_heads": 8,
        "head_dim": 128, "num_nextn_predict_layers": 1, "vocab_size": 151552, "partial_rotary_factor": 0.5}),
}
MLA_FAMILIES = ("minicpm3", "glm4_moe_lite")  # parsed by kvsim.calc.families' MLA parser
# no checkpoint in the defaults (bloom, glm4_moe: the override is written); multimodal ones (gemma3n, gemma4)
# are written whole, and kvsim reads their text_config
SKIP_DEFAULTS = ("bloom", "glm4_moe")


# ---- h22-fam-attn: attention-decoder families of kvsim.calc.families_attention (written by `--attention`);
ATTENTION_SKIP = ("mllama_text_model", "emu3_text_model")  # the text parts: written inside mllama, emu3
# ---- end h22-fam-attn


def checkpoint_of(cls) -> str:
    """The first Hub checkpoint the config class docstring links to."""
    found = re.search(r"huggingface\.co/([\w.\-]+/[\w.\-]+)", cls.__doc__ or "")
    return found.group(1).rstrip(".)") if found else ""


def write(stem: str, model_type: str, overrides: dict, checkpoint: str | None = None) -> tuple[str, str]:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, **overrides)
    cfg = {"model_type": model_type, **config.to_dict()}
    for key in ("transformers_version", "architectures", "id2label", "label2id", "problem_type", "return_dict",
                "output_hidden_states", "chunk_size_feed_forward", "tokenizer_class", "task_specific_params"):
        cfg.pop(key, None)
    (OUT / f"{stem}.json").write_text(json.dumps(cfg, indent=2, sort_keys=False) + "\n")
    return stem, checkpoint or checkpoint_of(type(config))


def main(model_types):
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "SOURCES.json"
    sources = json.loads(path.read_text()) if path.exists() else {}  # other families' entries are kept
    for model_type in (t for t in model_types if t not in SKIP_DEFAULTS):
        stem, ckpt = write(model_type, model_type, {})
        sources[stem] = {"model_type": model_type, "checkpoint": ckpt, "how": "config class defaults"}
    for stem, (model_type, ckpt, overrides) in OVERRIDES.items():
        if model_type not in model_types:
            continue
        write(stem, model_type, overrides, ckpt)
        sources[stem] = {"model_type": model_type, "checkpoint": ckpt, "how": "config class with overrides"}
    (OUT / "SOURCES.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__" and "--hybrid" not in sys.argv[1:]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kvsim.calc.families_decoder import FAMILIES
    if sys.argv[1:] == ["--attention"]:  # h22-fam-attn
        from kvsim.calc.families_attention import FAMILIES as ATTENTION
        main(sorted(t for t in ATTENTION if t not in ATTENTION_SKIP))
    else:
        main(sys.argv[1:] or sorted([*FAMILIES, *MLA_FAMILIES]))


# ---------------------------------------------------------------- h22-fam-hybrid: hybrid / recurrent and
# encoder-style families (kvsim.calc.families_hybrid), merged into the existing SOURCES.json:
#     PYTHONPATH=. python tools/family_configs.py --hybrid
# lfm2_moe is left out: Lfm2MoeConfig has no default layer_types (its model cannot be built from the defaults)
# the class docstring's first link is a paper; its checkpoint= argument names the checkpoint
HYBRID_CHECKPOINTS = {"bamba": "ibm-fms/Bamba-9.8b-2.2T-hf"}
HYBRID_SKIP = ("lfm2_moe",)  # written from HYBRID_OVERRIDES
# Lfm2MoeConfig has no default layer_types (its model cannot be built from the defaults): the checkpoint's depth
# and layer pattern (18 conv, 6 attention layers), as its config.json gives them
HYBRID_OVERRIDES = {
    "lfm2_moe": ("LiquidAI/LFM2-8B-A1B", {
        "num_hidden_layers": 24, "layer_types": [
            "conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
            "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention",
            "conv", "conv", "full_attention", "conv", "conv"]}),
}


def main_hybrid():
    from kvsim.calc.families_hybrid import FAMILIES as HYBRID
    sources = json.loads((OUT / "SOURCES.json").read_text())
    for model_type in sorted(t for t in HYBRID if t not in HYBRID_SKIP):
        stem, ckpt = write(model_type, model_type, {})
        ckpt = HYBRID_CHECKPOINTS.get(model_type, ckpt)
        if "/" not in ckpt:  # no checkpoint named in the class docstring: no real config to stand for
            (OUT / f"{stem}.json").unlink()
            print(f"skipped {model_type}: no checkpoint in the config class docstring")
            continue
        sources[stem] = {"model_type": model_type, "checkpoint": ckpt, "how": "config class defaults"}
    for model_type, (ckpt, overrides) in HYBRID_OVERRIDES.items():
        write(model_type, model_type, overrides, ckpt)
        sources[model_type] = {"model_type": model_type, "checkpoint": ckpt, "how": "config class with overrides"}
    (OUT / "SOURCES.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__" and "--hybrid" in sys.argv[1:]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main_hybrid()
# ---------------------------------------------------------------- end h22-fam-hybrid
