"""Pure sizing arithmetic: config parsing, the memory formula and its views, units, weights, hardware.

No MLX, matplotlib or ipywidgets: numpy and the standard library only (a test imports every module
here in a fresh interpreter and checks).
"""
