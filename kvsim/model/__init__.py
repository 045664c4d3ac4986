"""The MLX model: a decoder-only transformer that runs every attention variant on real geometry.

Modules: :mod:`.layers` (weights, RoPE, masks, FFN), :mod:`.attention` (MHA/GQA/MQA, sliding,
chunked, NoPE), :mod:`.mla` (latent attention, materialized and absorbed), :mod:`.recurrent`
(Mamba, Mamba-2, Gated DeltaNet, RG-LRU) with :mod:`.state`, and :mod:`.transformer`
(``build_model``, ``toy_spec``, ``Model``).
"""

from .layers import Rows, reference_mask
from .transformer import (MX_DTYPES, TOY_KINDS, BuildInfo, Model, build_model, perturbed,
                          select_layers, toy_spec)

__all__ = ["Model", "BuildInfo", "Rows", "build_model", "perturbed", "select_layers", "toy_spec", "TOY_KINDS",
           "MX_DTYPES", "reference_mask"]
