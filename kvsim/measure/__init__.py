"""The MLX measurements lessons show: every number is read from real caches, models and decode runs."""

from ..calc.extras import require_mlx

require_mlx(__name__)  # one ImportError line naming the mlx extra, before any module here imports mlx
