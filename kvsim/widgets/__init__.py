"""Interactive views for the lessons: each is a plain drawing function plus sliders.

``VIEWS`` maps a name to a factory returning a :class:`~kvsim.widgets.base.View`; the tests build
every entry and move every control to its minimum, maximum and default.
"""

from ..ui.base import View, make_view
from .cache_grid import step_grid_view, tokens_fed_log_view
from .channel_quant import channel_quant_view
from .decode_speed import decode_speed_view
from .draft_round import round_view
from .head_sharing import head_sharing_view, mla_view
from .hybrids import hybrid_view
from .masks import kind_share_view, mask_view, ring_link_view
from .paged import block_table_view, serving_view
from .preemption import preemption_view, tp_view
from .quantized import quantized_kv_view
from .recompute import recompute_view
from .roofline import batch_floor_view, h200_variants_view, roofline_view
from .seed_figure import seed_figure_view
from .size import capacity_view, kv_size_view
from .speculative import speculation_view
from .start import slider_demo_view
from .state_update import short_context_view, state_update_view
from .variants import variants_view
from .windows import chunk_view, ring_buffer_view, window_bytes_view

VIEWS = {
    "kv_size": kv_size_view,
    "capacity": capacity_view,
    "ring_buffer": ring_buffer_view,
    "chunks": chunk_view,
    "window_bytes": window_bytes_view,
    "hybrid": hybrid_view,
    "quantized_kv": quantized_kv_view,
    "block_tables": block_table_view,
    "serving": serving_view,
    "slider_demo": slider_demo_view,
    "recompute": recompute_view,
    "variants": variants_view,
    "decode_speed": decode_speed_view,
    "roofline": roofline_view,
    "batch_floors": batch_floor_view,
    "h200_variants": h200_variants_view,
    "speculation": speculation_view,
    "step_grid": step_grid_view,
    "tokens_fed_log": tokens_fed_log_view,
    "seed_figure": seed_figure_view,
    "head_sharing": head_sharing_view,
    "mla": mla_view,
    "masks": mask_view,
    "ring_link": ring_link_view,
    "kind_share": kind_share_view,
    "channel_quant": channel_quant_view,
    "draft_round": round_view,
    "state_update": state_update_view,
    "short_context": short_context_view,
    "preemption": preemption_view,
    "tp_bytes": tp_view,
}

__all__ = ["VIEWS", "View", "make_view", "kv_size_view", "capacity_view"]
