"""Lesson 07 (paged attention and serving): block tables, fragmentation, preemption, capacity.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
