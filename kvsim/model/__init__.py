"""The MLX model: a decoder-only transformer that runs every attention variant on real geometry.

Modules: :mod:`.layers` (weights, RoPE, masks, FFN), :mod:`.attention` (MHA/GQA/MQA, sliding,
chunked, NoPE), :mod:`.mla` (latent attention, materialized and absorbed), :mod:`.recurrent`
(Mamba, Mamba-2, Gated DeltaNet, RG-LRU) with :mod:`.state` (state in the cache list) and
:mod:`.owned_state` (state the model keeps per SequenceId, seed 000's design), and :mod:`.transformer`
(``build_model``, ``toy_spec``, ``Model``, ``perturbed``).

Left out on purpose, because none of it changes what a layer caches: MoE routing (one dense
SwiGLU FFN instead), YaRN / llama3 RoPE scaling and MLA's mscale, Gemma's logit soft-capping and
sandwich norms, Llama 4's QK-norm and NoPE attention temperature, Qwen3-Next's output gate, and
Griffin's block-diagonal gates and reset at position 0 (dense gates here).
"""

from ..calc.extras import require_mlx

require_mlx(__name__)  # one ImportError line naming the mlx extra, before any module here imports mlx

from .layers import Rows, reference_mask  # noqa: E402
from .transformer import (  # noqa: E402
                          TOY_KINDS,
                          BuildInfo,
                          Model,
                          build_model,
                          perturbed,
                          select_layers,
                          toy_spec,
)

__all__ = ["Model", "BuildInfo", "Rows", "build_model", "perturbed", "select_layers", "toy_spec", "TOY_KINDS",
           "reference_mask"]
