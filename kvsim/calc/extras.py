"""Which pip extra a kvsim folder needs, and the one-line error when it is missing.

Contract
- ``pip install kvsim`` is the pure core (numpy only: calc, serving, the command line). The MLX folders
  (cache, model, decode, measure) need the ``mlx`` extra; each calls :func:`require_mlx` first thing in its
  ``__init__``, so importing any of their modules without MLX raises one ``ImportError`` line naming the extra.
- This module imports nothing heavy itself: MLX is imported only when :func:`require_mlx` is called, that is
  by a folder that is about to import it anyway.
"""

from __future__ import annotations

import importlib

MLX_EXTRA = "mlx"
MLX_PLATFORMS = "Linux or macOS on Apple silicon"  # where the mlx extra's platform markers install a wheel


def missing_mlx_message(module: str, reason: str) -> str:
    """The one line that says ``module`` needs the mlx extra, and why importing MLX failed."""
    return f"{module} needs MLX ({MLX_PLATFORMS}): pip install 'kvsim[{MLX_EXTRA}]' ({reason})"


def require_mlx(module: str) -> None:
    """Import ``mlx.core``; when that fails, raise one ImportError line naming ``module`` and the extra.

    A broken install (on Linux, the plain ``mlx`` wheel without ``mlx[cpu]``'s libmlx) fails the same way, and
    its reason is kept at the end of the line.
    """
    try:
        importlib.import_module("mlx.core")
    except ImportError as e:
        raise ImportError(missing_mlx_message(module, str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
