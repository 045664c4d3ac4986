"""Lesson 01 (why a KV cache): what decode recomputes without a cache and what it reads with one.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
