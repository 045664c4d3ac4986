"""The exercise checker: friendly verdicts, never a traceback for what a learner types."""

import math

import numpy as np
import pytest

from kvsim.calc.units import InputError
from kvsim.lessons.checking import Exercise, Solution, verdict
from kvsim.lessons.exercises import EXERCISES, check, verdict_for


# What a learner who worked each exercise out by hand would type: literals, not kvsim's own value.
ANSWERS = {
    "01.1": 119_900, "01.2": 699, "01.3": 149 * 512,
    "02.1": 327_680,
    "02.2": 467_291,        # ⌊(0.9 · 80 GiB − 16,060,522,496 B) / 131,072 B⌋ = ⌊467,291.3⌋
    "02.3": 49_013,         # ⌈16,060,522,496 B / 327,680 B⌉ = ⌈49,012.2⌉
    "03.1": 80 * 576 * 2, "03.2": 100 * 92_160 / 327_680, "03.3": 1.125,
    "04.1": 2048, "04.2": (52 * 1024 + 10 * 32_768) * 8192, "04.3": 4,
    "05.1": 4.0, "05.2": 3 * 8192 + 8192 * 16, "05.3": 76,
    "06.1": 36_864, "06.2": 842,
    "07.1": 63, "07.2": 10_240, "07.3": 61 * 576 * 2,
    "08.1": (8_030_261_248 - 525_336_576 + 4096) * 2,
    "08.2": (15_009_857_536 + 2**34) / 3.35e12 * 1e3,  # ms: weights + 128K of KV over 3.35 TB/s
    "08.3": 208,            # the first whole batch past the measured H200's ridge, 7.315e14 / 3.530e12 = 207.2
    "08.4": 4 * 1025 * 2 * 8 * 128 * 4,   # 4 sequences × (1,024 + the step's token) × 2 × 8 × 128 × 4 B
    "09.1": (1 - 0.8**5) / 0.2, "09.2": 3, "09.3": 3,
    "10.1": 3 * (1024 * 16_384 + 8_716_288),   # 3 × (1,024 slots × 4 attention layers' K/V + Mamba state), bf16
    "10.2": 3 + 1,                             # the queued wave starts when the slots free at iteration 3
    # lessons 03/06: 512 slots × (512 + 64) × 2 B; 512 slots × 8 heads × 2 × (64 + 8) B + 256 sign bytes
    "03.4": 512 * 576 * 2, "06.3": 512 * 8 * 2 * 72 + 256,
    # lessons 00/01/09: predict-then-measure (the checker measures a real cache)
    "00.1": 512 * 2 * 8 * 128 * 2,               # ⌈300/256⌉·256 slots × K+V × 8 heads × 128 × bf16
    "01.4": 512 * 2 * 2 * 2 * 32 * 4,            # 299 tokens held → 512 slots × 2 layers × K+V × 2 × 32 × fp32
    "09.4": (1024 + 5) * 2 * 16 * 128 * 2,       # W + k rows of Gemma 3 27B's sliding layer
    # lesson 11: 63 pages × 4,096 B; Llama 3 8B (tb 4,096 B, 32 layers, 32 query heads): (496 + 100·65) tokens + the
    # float32 partial 2·100·32·129·4 B per layer, over 100·561 tokens; ⌈132 SMs / 32 heads⌉
    "11.1": 258_048, "11.2": 100 * ((496 + 100 * 65) * 4096 + 2 * 100 * 32 * 129 * 4) / (100 * 561 * 4096), "11.3": 5,
    # lessons 02/04/05/07: predict-then-measure (the checker measures a real cache or pool)
    "02.4": 1024 * 2 * 16 * 8 * 64 * 2,          # ⌈1000/256⌉·256 slots × K+V × 16 layers × 8 heads × 64 × bf16
    "04.4": 4096 * 2 * 8 * 128 * 2,              # the ring keeps W = 4096 slots of Mistral's layer
    "05.4": 4 * 1024 * 2 * 8 * 128 * 2 + 28 * (3 * 8192 + 8192 * 16) * 2,  # 4 KV caches + 28 bf16 Mamba states
    "07.4": 10 * 16 * 2 * 8 * 128 * 4,           # ⌈150/16⌉ blocks × 16 × K+V × 8 × 128 × fp32
}


def test_every_exercise_has_a_literal_answer():
    assert set(ANSWERS) == set(EXERCISES)


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_the_hand_worked_answer_is_correct_and_derived(key):
    sol = EXERCISES[key].solve()
    assert sol.value == pytest.approx(ANSWERS[key], rel=1e-3)
    v = verdict_for(key, ANSWERS[key])
    assert v.ok is True and "correct" in v.message and sol.derivation in v.message


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_placeholder_says_what_to_do(key):
    v = verdict_for(key, None)
    assert v.ok is None and "not answered yet" in v.message and "None" in v.message and "hint" in v.message


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_slip_is_recognised(key):
    sol = EXERCISES[key].solve()
    for wrong, meaning in sol.slips:
        assert not math.isclose(wrong, sol.value), f"{key}: a slip equals the answer"
        v = verdict_for(key, wrong)
        assert v.ok is False and meaning in v.message


def test_expected_values_are_the_lessons_numbers():
    expected = {"01.1": 119_900, "01.2": 699, "01.3": 149 * 512, "02.1": 327_680, "03.1": 80 * 576 * 2,
                "03.3": 1.125, "04.1": 2048, "04.3": 4, "05.1": 4.0, "05.2": 3 * 8192 + 8192 * 16,
                "06.1": 36_864, "06.2": 842, "07.1": 63, "07.2": 10_240, "07.3": 61 * 576 * 2,
                "09.2": 3, "09.3": 3}
    for key, value in expected.items():
        assert EXERCISES[key].solve().value == pytest.approx(value), key
    assert EXERCISES["09.1"].solve().value == pytest.approx((1 - 0.8**5) / 0.2)
    assert EXERCISES["03.2"].solve().value == pytest.approx(100 * 92_160 / 327_680)


def test_numbers_in_other_types_are_numbers():
    assert verdict_for("02.1", np.int64(327_680)).ok is True
    assert verdict_for("02.1", 327_680.0).ok is True
    assert verdict_for("02.1", np.array(327_680)).ok is True


def test_what_is_off_for_unknown_mistakes():
    assert "2× too large" in verdict_for("07.1", 126).message
    assert "1,024× too small" in verdict_for("02.1", 320).message
    assert "close" in verdict_for("02.1", 330_000).message
    assert "positive" in verdict_for("02.1", -1).message
    v = verdict_for("02.1", "a lot")
    assert v.ok is False and "expected a number" in v.message
    assert verdict_for("02.1", True).ok is False
    assert verdict_for("02.1", float("nan")).ok is False


def test_fractions_have_a_tolerance_integers_do_not():
    assert verdict_for("09.1", 3.3616).ok is True and verdict_for("09.1", 3.36).ok is True
    assert verdict_for("02.1", 327_681).ok is False


def test_unknown_exercise_is_an_input_error():
    with pytest.raises(InputError, match="exercise '99.9'"):
        verdict_for("99.9", 1)


def test_check_prints_the_verdict(capsys):
    check("07.1", 63)
    out = capsys.readouterr().out
    assert out.startswith("07.1 · ") and "correct: 63 blocks" in out


def test_a_first_miss_diagnoses_without_the_answer_the_second_reveals_it(capsys, monkeypatch):
    from kvsim.lessons import exercises
    monkeypatch.setattr(exercises, "_MISSES", {})  # a fresh kernel
    v = verdict_for("07.1", 126)
    assert v.ok is False and "2× too large" in v.message and "hint: round up" in v.message
    assert "63" not in v.message and EXERCISES["07.1"].solve().derivation not in v.message
    check("07.1", 126)
    first = capsys.readouterr().out
    assert "2× too large" in first and "63" not in first and "second miss" in first
    check("07.1", 62)
    second = capsys.readouterr().out
    assert "kvsim has 63 blocks" in second and EXERCISES["07.1"].solve().derivation in second
    check("07.3", 1, reveal=True)  # asked for at once
    assert "kvsim has 70,272 bytes" in capsys.readouterr().out
    check("07.2", 10_240)  # a right answer shows the derivation, a miss elsewhere is not counted here
    assert "correct: 10,240 blocks" in capsys.readouterr().out and exercises._MISSES == {"07.1": 2, "07.3": 1}


def test_verdict_on_a_custom_exercise():
    ex = Exercise("x.1", "a test", "units", "think", lambda: Solution(10, "5 + 5", ((11, "off by one"),)))
    assert verdict(ex, 10).ok and "off by one" in verdict(ex, 11).message
    assert "10× too large" in verdict(ex, 100).message
