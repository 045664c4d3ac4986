"""The view kit shared by every lesson: :class:`~kvsim.ui.base.View` and :func:`~kvsim.ui.base.make_view`
(controls around a drawing function), the caching renderer (:mod:`kvsim.ui.render`), the layout fit
(:mod:`kvsim.ui.layout`) and the drawing style (:mod:`kvsim.ui.style`).

Contract: nothing here computes a lesson's numbers and nothing here loads MLX (tests/test_layering.py
checks it in a fresh interpreter).
"""
