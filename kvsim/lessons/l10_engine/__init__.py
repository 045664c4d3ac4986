"""Lesson 10 (the engine: a pool, a queue, a batch): CachePool, the admission queue, continuous batching,
model-owned state and attention dispatch by the cache.

Modules: ``data`` (pure numbers), ``measure`` (MLX runs), ``plots`` (drawing), ``views`` (controls). This
package imports none of them: importing one loads only what it needs.
"""
