"""Decoding on the MLX model, with real caches: one module per way of decoding.

- :mod:`.generate`: ``generate`` (prefill + decode, or the no-cache baseline), token positions fed,
  the per-step trace, padded prefill.
- :mod:`.speculative`: ``speculative_generate`` (draft proposes, target verifies, caches rewound).
- :mod:`.batched`: ``batched_generate`` (several sequences per forward pass through a CachePool).
- :mod:`.continuous`: ``continuous_generate`` (iteration-level batching: sequences join and leave
  between steps; a per-step schedule).
"""

from ..calc.extras import require_mlx

require_mlx(__name__)  # one ImportError line naming the mlx extra, before any module here imports mlx

from .batched import batched_generate  # noqa: E402
from .continuous import Request, Schedule, continuous_generate  # noqa: E402
from .generate import (  # noqa: E402
                       Generation,
                       StepTrace,
                       cache_dtypes,
                       check_padded_prefill,
                       generate,
                       kv_dtype_spec,
                       pick_token,
                       positions_fed,
                       prefill,
)
from .speculative import Speculation, speculative_generate  # noqa: E402

__all__ = ["Generation", "StepTrace", "Speculation", "generate", "speculative_generate",
           "batched_generate", "continuous_generate", "Request", "Schedule", "positions_fed", "prefill",
           "check_padded_prefill", "cache_dtypes",
           "kv_dtype_spec", "pick_token"]
