"""Lesson 09 helpers: trim on a real KVCache, rotating rewind limits, recurrent snapshot/restore,
speculative sweeps against greedy decoding, the i.i.d. expectation, padded prefill.
"""

import matplotlib.pyplot as plt
import mlx.core as mx
import numpy as np
import pytest

from kvsim.cache import KVCache, RotatingKVCache
from kvsim.calc.units import InputError
from kvsim.lessons.l09_speculation.data import (
    expected_speedup,
    expected_tokens_per_pass,
    prompt_lookup_draft,
    round_stages,
)
from kvsim.lessons.l09_speculation.measure import (
    padded_prefill_refusal,
    padded_prefill_rows,
    rewind_limits,
    slots,
    snapshot_restore,
    speculation_sweep,
    trim_walkthrough,
    try_trim,
)
from kvsim.lessons.l09_speculation.measure import tokens_per_pass_series
from kvsim.lessons.l09_speculation.plots import plot_round
from kvsim.lessons.l09_speculation.views import draw_expected_speedup, draw_tokens_per_pass
from kvsim.model import perturbed


PROMPT = [5, 17, 3, 99, 42, 8, 61, 23, 7, 70, 11, 2, 88]


def test_trim_rewinds_offset_frees_nothing_and_the_next_write_overwrites():
    rows = trim_walkthrough()                              # Llama 3 8B layer: 8 KV heads x 128, bf16
    assert [r["offset"] for r in rows] == [0, 6, 4, 5]
    per_token = 2 * 8 * 128 * 2
    assert [r["nbytes"] for r in rows] == [0, 256 * per_token, 256 * per_token, 256 * per_token]
    assert [r["used_bytes"] for r in rows] == [0, 6 * per_token, 4 * per_token, 5 * per_token]
    assert [r["slots 0-7"] for r in rows] == ["| . . . . . . . .", "11 12 13 14 15 16 | . .",
                                              "11 12 13 14 | 15 16 . .", "11 12 13 14 42 | 16 . ."]


def test_slots_marks_offset_and_unwritten():
    cache = KVCache(step=4)
    assert slots(cache, 3) == "| . . ."
    x = mx.array([[[[7.0]], [[9.0]]]]).reshape(1, 1, 2, 1)
    cache.update_and_fetch(x, x)
    assert slots(cache, 5) == "7 9 | . . ."


def test_rotating_rewind_limits():
    rows = {(r["rewind_tokens"], r["offset"]): r for r in rewind_limits(max_size=8, rewind_tokens=(0, 4))}
    assert rows[0, 3]["trimmable_tokens"] == 3 and rows[0, 8]["trimmable_tokens"] == 8   # nothing overwritten yet
    assert rows[0, 9]["trimmable_tokens"] == rows[0, 20]["trimmable_tokens"] == 1       # after the wrap
    assert rows[4, 12]["trimmable_tokens"] == 12 and rows[4, 20]["trimmable_tokens"] == 5
    assert rows[0, 20]["slots"] == 8 and rows[4, 20]["slots"] == 12


def test_try_trim_reports_what_the_ring_could_rewind():
    cache = RotatingKVCache(4)
    x = mx.ones((1, 1, 6, 2))
    cache.update_and_fetch(x, x)
    assert try_trim(cache, 3) == "trimmed 1 of 3: offset 6 -> 5"  # only the newest token can go
    assert try_trim(cache, 1) == "trimmed 0 of 1: offset 5 -> 5"
    assert try_trim(cache, -1).startswith("refused: n must be a non-negative integer") and cache.offset == 5


def test_recurrent_state_snapshot_restore(toys):
    rows = snapshot_restore(toys["jamba"], PROMPT[:8], extra=(1, 2, 3))
    assert [r["offset"] for r in rows] == [8, 8, 11, 8]
    assert rows[1]["action"] == "trim(3) rewinds 0"
    assert [r["state = after prefill"] for r in rows] == [True, True, False, True]
    assert len({r["nbytes"] for r in rows}) == 1           # a state does not grow


def test_speculation_sweep_equals_greedy_and_counts(toys):
    target = toys["gqa"]
    runs = speculation_sweep(target, {"itself": target, "noisy": perturbed(target, 0.2, seed=5)}, PROMPT, 12,
                             ks=(1, 3), progress=False)
    assert all(r.same_as_greedy for r in runs) and len(runs) == 4
    itself = [r for r in runs if r.draft == "itself"]
    assert all(r.result.acceptance_rate == 1.0 for r in itself)
    assert [r.row()["tokens per pass"] for r in itself] == [2.0, 4.0]
    noisy = [r for r in runs if r.draft == "noisy"]
    assert all(r.result.acceptance_rate < 1.0 for r in noisy)
    fig, ax = plt.subplots()
    draw_tokens_per_pass(ax, runs)
    assert len(ax.get_lines()) == 4                        # two measured, two i.i.d. expectations
    series, expected = tokens_per_pass_series(runs)
    for r in runs:                                          # measured: tokens emitted / target passes
        k, per_pass = series[r.draft]
        assert per_pass[k.index(r.num_draft)] == len(r.result.tokens) / r.result.rounds
    lines = {ln.get_label(): ln.get_ydata().tolist() for ln in ax.get_lines()}
    for label, (_, y) in {**series, **expected}.items():
        assert lines[label] == list(y)
    plt.close(fig)


def test_speculation_on_a_hybrid_restores_and_refeeds(toys):
    target = toys["jamba"]
    runs = speculation_sweep(target, {"noisy": perturbed(target, 0.2, seed=5)}, PROMPT, 10, ks=(3,), progress=False)
    r = runs[0].result
    assert runs[0].same_as_greedy
    plain_positions = len(PROMPT) - 1 + r.proposed + r.rounds
    assert r.target_positions_fed > plain_positions        # accepted tokens fed again after each restore


def test_expected_tokens_per_pass_and_speedup():
    k = np.arange(1, 9)
    for alpha in (0.0, 0.3, 0.8):
        direct = [sum(alpha**i for i in range(n + 1)) for n in k]
        assert np.allclose(expected_tokens_per_pass(alpha, k), direct)
    assert np.array_equal(expected_tokens_per_pass(1.0, k), k + 1)
    assert np.allclose(expected_speedup(0.8, k, 0.0), expected_tokens_per_pass(0.8, k))
    assert np.all(expected_speedup(0.8, k, 0.5) < expected_tokens_per_pass(0.8, k))
    with pytest.raises(ValueError, match="acceptance"):
        expected_tokens_per_pass(1.5, k)
    with pytest.raises(ValueError, match="draft_cost"):
        expected_speedup(0.5, k, -1)


def test_draw_expected_speedup_stars_the_best_k():
    fig, ax = plt.subplots()
    draw_expected_speedup(ax, acceptance=0.8, draft_cost=0.05, max_draft=16)
    star = [ln for ln in ax.get_lines() if ln.get_marker() == "*"][0]
    k = np.arange(1, 17)
    speed = expected_speedup(0.8, k, 0.05)
    assert star.get_xdata()[0] == k[np.argmax(speed)]
    plt.close(fig)


def test_padded_prefill_same_as_unpadded(toys):
    rows = padded_prefill_rows(toys["gqa"], PROMPT, pad_multiples=(None, 8, 16), answer_tokens=4)
    assert [r["tokens in the prefill pass"] for r in rows] == [13, 16, 16]
    assert all(r["offset after trim"] == "13" and r["same tokens"] and r["logits within 1e-5"] for r in rows)


def test_padded_prefill_refused_for_recurrent_layers(toys):
    assert padded_prefill_refusal(toys["jamba"], PROMPT).startswith("refused: padded prefill is not supported")
    assert "recurrent" in padded_prefill_refusal(toys["jamba"], PROMPT)
    assert padded_prefill_refusal(toys["gqa"], PROMPT) == "accepted"


def test_round_stages_match_a_real_cache():
    for k, n in ((4, 2), (1, 0), (5, 5)):
        r = round_stages(7, k, n)
        cache = KVCache()
        kv = mx.zeros((1, 1, 7, 2))
        cache.update_and_fetch(kv, kv)
        cache.update_and_fetch(mx.zeros((1, 1, k + 1, 2)), mx.zeros((1, 1, k + 1, 2)))
        assert cache.offset == r.offset_after_verify
        cache.trim(r.trimmed)
        assert cache.offset == r.offset_after and r.emitted == n + 1
    with pytest.raises(InputError, match="accepted"):
        round_stages(7, 2, 3)


def test_prompt_lookup_draft():
    words = "the cat sat on the mat . the cat".split()
    assert prompt_lookup_draft(words, 4) == ["sat", "on", "the", "mat"]
    assert prompt_lookup_draft([1, 2, 3, 1, 2, 4, 1, 2], 2) == [4, 1]  # the latest earlier occurrence
    assert prompt_lookup_draft([1, 2, 3, 1, 2], 9) == [3, 1, 2]         # fewer at the end of the context
    assert prompt_lookup_draft([1, 2, 3, 4], 3) == [] and prompt_lookup_draft([1], 3) == []




def test_round_picture(ax):
    plot_round(ax, round_stages(10, 3, 1))
    texts = [t.get_text() for t in ax.texts]
    assert "d2 ✗" in texts and "t1" in texts and texts.count("stale") == 2


def test_speedup_curve_and_the_view_marks_its_best_k():
    from kvsim.lessons.l09_speculation.data import expected_speedup, speedup_curve
    from kvsim.lessons.l09_speculation.views import draw_expected_speedup
    d = speedup_curve(0.7, 0.1, 12)
    assert list(d["k"]) == list(range(1, 13))
    assert d["best_speedup"] == pytest.approx(max(expected_speedup(0.7, k, 0.1) for k in range(1, 13)))
    assert expected_speedup(0.7, d["best_k"], 0.1) == pytest.approx(d["best_speedup"])
    fig, ax = plt.subplots()
    draw_expected_speedup(ax, 0.7, 0.1, 12)
    labels = [t.get_text() for t in ax.texts] + [ln.get_label() for ln in ax.get_lines()]
    assert any(f"best k = {d['best_k']}: {d['best_speedup']:.2f}x" in x for x in labels), labels
    assert ax.get_title() == "α = 0.70, draft step = 0.10 target steps"
    plt.close(fig)


def test_a_real_round_keeps_the_last_token_and_the_accepted_drafts(toys):
    """Lesson 09's rewind, run: after a round the caches hold the context before ``last``, ``last`` and the n
    accepted drafts (offset P + n + 1, trimmed k − n); the target's replacement token is not in the cache."""
    from kvsim.cache import make_caches
    from kvsim.decode.generate import cache_dtypes
    from kvsim.decode.speculative import _round
    from kvsim.lessons.exercises import EXERCISES

    target = toys["gqa"]
    draft = perturbed(target, 0.2, seed=5)
    k, seen = 4, set()
    for cut in range(4, len(PROMPT)):
        prompt = PROMPT[:cut]
        models, dtypes = (target, draft), [cache_dtypes(m, None) for m in (target, draft)]
        caches = [make_caches(m.spec, dtype=d[1], rewind_tokens=k + 1) for m, d in zip(models, dtypes)]
        for m, c, d in zip(models, caches, dtypes):
            m(mx.array([prompt[:-1]]), c, d[0])
        tokens, n, _ = _round(models, caches, [d[0] for d in dtypes], prompt[-1], k)
        stages = round_stages(len(prompt) - 1, k, n)
        assert [c.offset for c in caches[0] if c is not None] == [stages.offset_after] * target.spec.num_hidden_layers
        assert stages.trimmed == k - n and len(tokens) == n + 1
        # the kept rows equal a fresh prefill of prompt + the n accepted drafts: the replacement tokens[-1] is absent
        fresh = make_caches(target.spec, dtype=dtypes[0][1])
        target(mx.array([prompt + tokens[:n]]), fresh, dtypes[0][0])
        for c, f in zip(caches[0], fresh):
            kept, ref = c.state[0][..., :c.offset, :], f.state[0][..., :f.offset, :]
            assert kept.shape == ref.shape and mx.allclose(kept, ref, atol=1e-4).item()
        seen.add(n)
    assert seen & set(range(k)), "no round rejected a draft: the test did not exercise a rewind"
    derivation = EXERCISES["09.2"].solve().derivation
    assert "the last token and the 2 accepted drafts" in derivation and "not in the cache" in derivation
    assert "stays" not in derivation


# --- decode lookahead and padded prefill, taught (issue 18) ----------------------------------------------------

def test_lookahead_curve_is_the_calc_rows():
    from kvsim.calc.padded_prefill import lookahead_rows_per_layer
    from kvsim.lessons.l09_speculation.data import lookahead_curve
    d = lookahead_curve(1024, 5)
    for i, k in enumerate(d["k"]):
        rows = lookahead_rows_per_layer(1024, int(k))
        assert d["spare_slots"][i] == rows["spare_slots"]["peak"] - 1024 == k - 1
        assert d["overwrite_log_pending"][i] == k and d["overwrite_log_idle"][i] == 0
    assert d["copied_per_step"] == {"spare_slots": 0, "overwrite_log": 1}


def test_lookahead_cache_bytes_both_designs_restore():
    from kvsim.lessons.l09_speculation.measure import lookahead_cache_bytes
    m = lookahead_cache_bytes("gemma-3-4b", 3, prompt_tokens=1100)
    w = m["window"]
    assert m["overwrite_log_rows"] == w + 3 and m["spare_slots_rows"] == w + 2
    assert m["overwrite_log_restored"] and m["spare_slots_trimmed"] == 3 and m["spare_slots_restored"]


def test_padded_mask_no_real_query_sees_a_pad():
    from kvsim.lessons.l09_speculation.data import HIDDEN, PAD_KEY, PAD_ROW, REAL, padded_mask
    c = padded_mask(5, 8)
    assert c.shape == (8, 8) and (c[:5, 5:] == HIDDEN).all()          # real rows never reach a pad key
    assert (c[:5, :5] == np.tril(np.full((5, 5), REAL))).all()
    assert (c[5:, :5] == PAD_ROW).all() and c[7, 7] == PAD_KEY and c[5, 6] == HIDDEN
    with pytest.raises(ValueError, match="padded_tokens"):
        padded_mask(5, 4)


def test_refusal_rows_use_kvsims_check_on_shipped_configs():
    from kvsim.calc.padded_prefill import PADDED_PREFILL_REFUSALS
    from kvsim.lessons.l09_speculation.measure import refusal_rows
    rows = refusal_rows()
    assert [r["model"] for r in rows] == [r["model"] for r in PADDED_PREFILL_REFUSALS]
    by = {r["model"]: r["kvsim's check"] for r in rows}
    assert by["NemotronH"].startswith("nemotron-h-8b: refused") and "recurrent" in by["NemotronH"]
    assert by["Llama 4"].startswith("llama-4-scout: refused") and "chunked" in by["Llama 4"]
    assert by["Qwen3-Next"].startswith("qwen3-next-80b-a3b: refused")
    assert not any("accepted" in v for v in by.values())


def test_lookahead_and_mask_pictures():
    from kvsim.lessons.l09_speculation.views import draw_lookahead_rows, draw_padded_mask
    fig, (a, b) = plt.subplots(1, 2)
    draw_lookahead_rows(a, max_k=4)
    assert "W = 1,024" in a.get_title() and len(a.get_lines()) == 3
    assert list(a.get_lines()[1].get_ydata()) == [1, 2, 3, 4]
    draw_padded_mask(b, 6, 8)
    assert "6 real tokens padded to 8" in b.get_title()
    plt.close(fig)


def test_exercise_09_4_is_what_a_real_lookahead_cache_measures():
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l09_speculation.measure import lookahead_cache_bytes
    m = lookahead_cache_bytes("gemma-3-27b", 5, prompt_tokens=1100)
    assert m["overwrite_log_nbytes"] == EXERCISES["09.4"].solve().value == (1024 + 5) * 8192


def test_round_view_caps_accepted_at_k_worked_by_hand():
    from kvsim.lessons.l09_speculation.data import slider_round
    from kvsim.lessons.l09_speculation.views import round_view
    # P = 20, k = 4, n = 2: verify writes 20 + 4 + 1 = 25, trim keeps 20 + 2 + 1 = 23, 3 tokens emitted
    r = slider_round(20, 4, 2)
    assert (r.offset_after_verify, r.offset_after, r.emitted) == (25, 23, 3)
    r = slider_round(20, 4, 7)  # n past k counts as n = k = 4: 25 -> 25, 5 tokens
    assert (r.accepted, r.offset_after_verify, r.offset_after, r.emitted) == (4, 25, 25, 5)
    view = round_view(num_draft=4, accepted=2)
    assert view.ax.get_title() == ("k = 4, n = 2 accepted: 3 tokens emitted for one target pass; "
                                   "the cache goes 20 → 25 → 23")
    view.controls["accepted"].value = 7
    assert view.ax.get_title() == ("k = 4, n = 4 accepted: 5 tokens emitted for one target pass; "
                                   "the cache goes 20 → 25 → 25")
    plt.close(view.figure)
