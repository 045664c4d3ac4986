"""The lesson wing: one package per lesson (``lNN_topic/``: data, measure, plots, views), the exercises
and their checker.

``VIEWS`` maps a view's name to its factory, returning a :class:`~kvsim.ui.base.View`. It resolves
lazily: looking one name up imports that lesson's ``views`` module only, so importing one lesson loads
one lesson. The tests build every entry and move every control to its minimum, maximum and default.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module

# view name -> (lesson package, factory in its views module)
_VIEW_HOMES = {
    "kv_size": ("l02_how_big", "kv_size_view"),
    "capacity": ("l02_how_big", "capacity_view"),
    "ring_buffer": ("l04_windows", "ring_buffer_view"),
    "chunks": ("l04_windows", "chunk_view"),
    "window_bytes": ("l04_windows", "window_bytes_view"),
    "hybrid": ("l05_hybrids", "hybrid_view"),
    "quantized_kv": ("l06_quantized", "quantized_kv_view"),
    "block_tables": ("l07_paged", "block_table_view"),
    "serving": ("l07_paged", "serving_view"),
    "slider_demo": ("l00_start", "slider_demo_view"),
    "recompute": ("l01_why_a_cache", "recompute_view"),
    "variants": ("l03_attention_variants", "variants_view"),
    "decode_speed": ("l08_decode_speed", "decode_speed_view"),
    "roofline": ("l08_decode_speed", "roofline_view"),
    "batch_floors": ("l08_decode_speed", "batch_floor_view"),
    "h200_variants": ("l08_decode_speed", "h200_variants_view"),
    "speculation": ("l09_speculation", "speculation_view"),
    "step_grid": ("l01_why_a_cache", "step_grid_view"),
    "tokens_fed_log": ("l01_why_a_cache", "tokens_fed_log_view"),
    "seed_figure": ("l02_how_big", "seed_figure_view"),
    "head_sharing": ("l03_attention_variants", "head_sharing_view"),
    "mla": ("l03_attention_variants", "mla_view"),
    "masks": ("l04_windows", "mask_view"),
    "ring_link": ("l04_windows", "ring_link_view"),
    "kind_share": ("l04_windows", "kind_share_view"),
    "channel_quant": ("l06_quantized", "channel_quant_view"),
    "draft_round": ("l09_speculation", "round_view"),
    "state_update": ("l05_hybrids", "state_update_view"),
    "short_context": ("l05_hybrids", "short_context_view"),
    "preemption": ("l07_paged", "preemption_view"),
    "tp_bytes": ("l07_paged", "tp_view"),
    "admission": ("l10_engine", "admission_view"),
    "engine_batch": ("l10_engine", "batch_view"),
    # lesson 11
    "copy_bytes": ("l11_paged_read", "copy_bytes_view"),
    "cascade_bytes": ("l11_paged_read", "cascade_bytes_view"),
    "split_k": ("l11_paged_read", "split_k_view"),
}


class _LazyViews(Mapping):
    """Read-only ``{name: factory}`` that imports a lesson's views module on the first lookup."""

    def __getitem__(self, name):
        lesson, factory = _VIEW_HOMES[name]
        return getattr(import_module(f"{__name__}.{lesson}.views"), factory)

    def __iter__(self):
        return iter(_VIEW_HOMES)

    def __len__(self):
        return len(_VIEW_HOMES)


VIEWS = _LazyViews()

__all__ = ["VIEWS"]
