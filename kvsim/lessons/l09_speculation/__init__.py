"""Lesson 09 (speculative decoding and rewind): draft rounds, acceptance and rolling a cache back.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
