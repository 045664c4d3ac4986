"""The numbers a lesson's prose may type without printing them: seed and paper figures, each recomputed.

Contract (pure: no MLX, matplotlib or ipywidgets)
- Every number with a unit in a lesson's markdown comes from code in that notebook (tests/test_prose_numbers.py),
  except the :class:`Literal` entries listed here: a figure a seed, a paper or another lesson states, which the
  lesson quotes.
- Each entry names its lesson ("02"), the text exactly as the prose writes it ("26 GB"), its source, and
  ``shown()``: kvsim's own computation of that figure, formatted as the prose writes it. The test checks that
  ``shown() == text`` and that the text is in the lesson, so a quoted figure that kvsim disagrees with fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Literal:
    """A figure a lesson quotes from a seed or a paper, with kvsim's computation of it."""

    lesson: str
    text: str
    source: str
    shown: Callable[[], str]


def _fed_without_cache() -> str:
    from ..calc.tokens_fed import tokens_fed
    return f"{tokens_fed(1000, 1000, cached=False):,} token"


def _mla_share_of_mha_percent() -> str:
    """DeepSeek-V2-Lite (the paper's ~16B MoE): latent + RoPE key over an MHA cache of 16 heads × 128, K and V."""
    from ..calc.registry import load_model
    spec = load_model("deepseek-v2-lite")
    layer = next(l for l in spec.layers if l.kind == "mla")
    mha = 2 * spec.num_attention_heads * spec.v_head_dim
    return f"{100 * (layer.kv_lora_rank + layer.qk_rope_head_dim) / mha:.0f} %"


def _lesson07_own_tokens() -> str:
    from .l11_paged_read.data import LESSON07_GROUP
    return f"{LESSON07_GROUP['own_tokens']} tokens"


def _llama70b_bytes_per_token() -> str:
    from ..calc import memory
    from ..calc.registry import load_model
    return f"{memory.bytes_per_token(load_model('llama-3-70b'), 'bf16'):,} B"


def _h100_memory_gib() -> str:
    from ..calc.hardware import get_accelerator
    return f"{get_accelerator('H100 80GB').memory_gib:.0f} GiB"


def _alpaca_mean_output_tokens() -> str:
    from ..serving.workload import LENGTHS
    return f"{LENGTHS['short']['output'][1]} tokens"


LITERALS: tuple[Literal, ...] = (
    Literal("00", "1,499,500 token", "seed 001's example: a 1,000-token prompt and a 1,000-token answer, no cache "
            "(kvsim.calc.tokens_fed)", _fed_without_cache),
    Literal("02", "80 GiB", "kvsim's accelerator table: the H100 80GB's memory (kvsim.calc.hardware)",
            _h100_memory_gib),
    Literal("03", "14 %", "DeepSeek-V2 paper, Appendix D.2: MLA's cache against MHA's for the small MoE model "
            "(DeepSeek-V2-Lite's config)", _mla_share_of_mha_percent),
    Literal("03", "327,680 B", "lesson 02's exercise 02.1: Llama 3 70B's bf16 bytes per token, quoted in an "
            "exercise question", _llama70b_bytes_per_token),
    Literal("07", "58 tokens", "Kwon et al. 2023: Alpaca's mean output length, the 'short' workload's mean "
            "(kvsim.serving.workload.LENGTHS)", _alpaca_mean_output_tokens),
    Literal("11", "60 tokens", "lesson 07's prefix-sharing example: each request's own tokens "
            "(l11_paged_read.data.LESSON07_GROUP)", _lesson07_own_tokens),
)
