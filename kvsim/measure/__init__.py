"""The MLX measurements lessons show: every number is read from real caches, models and decode runs."""
