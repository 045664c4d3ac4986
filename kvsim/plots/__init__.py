"""Drawing only: every function takes computed numbers and an Axes, draws, and returns the Axes.

No formula is evaluated here; callers pass what :mod:`kvsim.calc.memory`, :mod:`kvsim.calc.capacity`,
:mod:`kvsim.decode` or :mod:`kvsim.serving.sim` computed.
"""

from .size import plot_kv_vs_tokens, plot_memory_split

__all__ = ["plot_kv_vs_tokens", "plot_memory_split"]
