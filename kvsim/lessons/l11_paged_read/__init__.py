"""Lesson 11 (how a paged cache is read): gather vs block table, sparse pages, cascade, split-K.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs), ``plots`` (drawing), ``views`` (controls).
This package imports none of them: importing one loads only what it needs.
"""
