"""Lesson 00 (start here): one slider over the KV formula.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
