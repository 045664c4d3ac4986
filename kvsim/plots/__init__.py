"""Drawing only: every function takes computed numbers and an Axes, draws, and returns the Axes.

No formula is evaluated here; callers pass what :mod:`kvsim.memory`, :mod:`kvsim.capacity`,
:mod:`kvsim.decode` or :mod:`kvsim.sim` computed.
"""

from .size import plot_kv_vs_tokens, plot_memory_split

__all__ = ["plot_kv_vs_tokens", "plot_memory_split"]
