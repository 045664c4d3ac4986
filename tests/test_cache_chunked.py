"""ChunkedKVCache: Llama 4 chunk semantics, no per-step reallocation, exact save/load."""


import mlx.core as mx
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant
from lockstep import LockstepMachine, position_kv, random_kv
from reference_cache import Lockstep, ReferenceCache, fingerprint

from kvsim.cache import ChunkedKVCache, load_cache, save_cache
from kvsim.calc.config import LayerSpec
from kvsim.calc.memory import allocated_slots, kept_tokens, layer_kv_bytes


class ChunkedMachine(LockstepMachine):
    @initialize(chunk=st.integers(1, 10), step=st.integers(1, 8))
    def setup(self, chunk, step):
        layer = LayerSpec(kind="chunked", num_key_value_heads=2, head_dim=4, v_head_dim=3,
                          attention_chunk_size=chunk)
        self.ls = Lockstep(ChunkedKVCache(chunk, step=step), ReferenceCache("chunked", chunk_size=chunk),
                           lambda peak, off: allocated_slots(peak, step, chunk), layer)

    @invariant()
    def matches_calculator(self):
        if hasattr(self, "ls"):
            self.ls.check()
            c = self.ls.cache
            assert c.start_position % c.chunk_size == 0 and c.start_position <= c.offset
            # mlx-lm's llama4 builds its chunk mask over [start_position, offset + S)
            assert c.start_position == int(c.key_positions(1)[0]) == c.offset - c.offset % c.chunk_size


ChunkedMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestChunkedStateful = ChunkedMachine.TestCase


def test_decode_never_reallocates_and_sees_its_chunk():
    layer = LayerSpec(kind="chunked", num_key_value_heads=1, head_dim=2, attention_chunk_size=4)
    cache = ChunkedKVCache(4, step=256)
    cache.update_and_fetch(*position_kv(1))
    buffer = cache.keys.shape
    for t in range(1, 300):
        k, _ = cache.update_and_fetch(*position_kv(1, t))
        assert cache.keys.shape == buffer == (1, 1, 4, 2)  # mlx-lm swings between 4 and 260 slots
        assert np.array(k[0, 0, :, 0]).tolist() == list(range(t - t % 4, t + 1))
        assert cache.size() == kept_tokens(layer, t + 1)
    assert cache.offset == 300 and cache.held_start == 296 and cache.start_position == 300


def test_start_position_at_a_chunk_boundary_is_the_new_chunk():
    """Defect 4: after exactly one chunk, start_position stayed 0 while the next update returns keys from 4."""
    cache = ChunkedKVCache(4)
    cache.update_and_fetch(*position_kv(4))
    assert cache.offset == 4 and cache.start_position == 4
    # mlx-lm's llama4 mask: keys arange(start_position, offset + S), queries arange(offset, offset + S)
    keys_in_mask = cache.offset + 1 - cache.start_position
    k, _ = cache.update_and_fetch(*position_kv(1, 4))
    assert k.shape[2] == keys_in_mask == 1 and np.array(k[0, 0, :, 0]).tolist() == [4]


def test_save_load_restores_offset_after_300_decode_steps(tmp_path):
    # mlx-lm: chunk 4, 300 decode steps, save/load -> offset 260
    cache = ChunkedKVCache(4)
    for t in range(300):
        cache.update_and_fetch(*random_kv(1, seed=t))
    save_cache(tmp_path / "c.safetensors", cache)
    loaded = load_cache(tmp_path / "c.safetensors", ChunkedKVCache)
    assert loaded.offset == 300 and loaded.held_start == 296 and loaded.start_position == 300
    assert fingerprint(loaded) == fingerprint(cache)
    a = cache.update_and_fetch(*random_kv(3, seed=9))
    b = loaded.update_and_fetch(*random_kv(3, seed=9))
    assert all(mx.array_equal(x, y).item() for x, y in zip(a, b))


def test_chunk_crossing_prefill_and_mask():
    cache = ChunkedKVCache(4)
    cache.update_and_fetch(*position_kv(6))
    mask = np.array(cache.visibility_mask(5))  # queries 6..10, keys 4..10
    k, _ = cache.update_and_fetch(*position_kv(5, 6))
    assert np.array(k[0, 0, :, 0]).tolist() == list(range(4, 11))
    want = [[(4 + j) <= q and (4 + j) // 4 == q // 4 for j in range(7)] for q in range(6, 11)]
    assert mask.tolist() == want
    assert np.array(cache.state[0][0, 0, :, 0]).tolist() == [8, 9, 10]  # only the newest chunk kept


@pytest.mark.parametrize("dtype,name", [(mx.bfloat16, "bf16"), (mx.float16, "fp16")])
def test_nbytes_real_dtypes(dtype, name):
    layer = LayerSpec(kind="chunked", num_key_value_heads=2, head_dim=8, attention_chunk_size=40)
    cache = ChunkedKVCache(40, step=16)
    for T, S in ((1, 1), (20, 19), (45, 25), (90, 45)):
        cache.update_and_fetch(*random_kv(S, B=2, D=8, Dv=8, dtype=dtype))
        assert cache.nbytes == layer_kv_bytes(layer, T, name, batch=2, view="allocated", step=16)
        assert cache.used_bytes == layer_kv_bytes(layer, T, name, batch=2)


def test_trim_stays_within_the_current_chunk():
    cache = ChunkedKVCache(4)
    cache.update_and_fetch(*random_kv(6))
    assert cache.trimmable_tokens == 2 and not cache.is_trimmable()  # positions 0..3 were overwritten
    assert cache.trim(3) == 2 and cache.offset == 4 and cache.size() == 0  # back to the chunk start, no further
    assert cache.trim(1) == 0 and cache.offset == 4


def test_bad_input_and_constructor():
    cache = ChunkedKVCache(4)
    cache.update_and_fetch(*random_kv(5))
    before = fingerprint(cache)
    with pytest.raises(ValueError, match=r"keys.shape\[1\] \(n_kv_heads\) must be 2"):
        cache.update_and_fetch(*random_kv(1, H=1))
    assert fingerprint(cache) == before
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        ChunkedKVCache(0)
    assert cache.maybe_trim_front() is None  # mlx-lm's llama4 hook is a no-op
