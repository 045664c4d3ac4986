"""Lesson 02 (how big is it): KV bytes against tokens, and what fits next to the weights.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
