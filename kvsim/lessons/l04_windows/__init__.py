"""Lesson 04 (sliding windows and chunks): masks, ring buffers and bytes by attention kind.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
