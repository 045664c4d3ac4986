"""Lesson 08 (decode is memory-bound): the bytes a decode step reads and the time floor they set.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
