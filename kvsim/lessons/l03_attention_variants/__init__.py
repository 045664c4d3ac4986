"""Lesson 03 (MHA, GQA, MQA, MLA): how query heads share what is cached.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs, where the lesson has any), ``plots`` (drawing),
``views`` (controls). This package imports none of them: importing one loads only what it needs.
"""
