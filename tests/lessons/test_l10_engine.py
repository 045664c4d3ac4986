"""Lesson 10 helpers: the mixed pool against Σ nbytes and the calculator, the lock race, the admission sweep,
continuous batching against decoding alone, model-owned state, dispatch dense vs paged; plots and views."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc.units import InputError
from kvsim.lessons.l10_engine.data import admission_at, admission_curves, burst, ids_after
from kvsim.lessons.l10_engine.measure import (
    continuous_run,
    dispatch_rows,
    owned_vs_cache_rows,
    pool_timeline,
    race_rows,
)
from kvsim.lessons.l10_engine.plots import CELL_COLORS, plot_schedule
from kvsim.lessons.l10_engine.views import (
    admission_view,
    batch_view,
    draw_admission,
    draw_admission_sweep,
    draw_batch,
    draw_pool_timeline,
)
from kvsim.serving.admission import SlotPool, admission_sweep


def test_pool_timeline_agrees_with_nbytes_and_calculator_on_every_event():
    rows = pool_timeline()
    assert [r["id"] for r in rows] == [0, 1, 2, 3, None, 1, 4]
    assert [r["next_id"] for r in rows] == [1, 2, 3, 4, 4, 4, 5]
    assert all(r["memory_usage_bytes"] == r["Σ nbytes"] == r["calculator"] > 0 for r in rows)
    assert all(sum(r["per_sequence"].values()) == r["memory_usage_bytes"] for r in rows)
    assert "max_sequences=4" in rows[4]["error"] and rows[4]["per_sequence"] == rows[3]["per_sequence"]
    released = rows[3]["per_sequence"][1]
    assert rows[5]["memory_usage_bytes"] == rows[3]["memory_usage_bytes"] - released
    # a Jamba-like sequence holds its fixed state from the start: 3 tokens cost more than 5 of the Llama-like one
    assert rows[3]["per_sequence"][3] > rows[3]["per_sequence"][0]


def test_race_loses_an_update_only_without_the_lock():
    racy_rows, racy = race_rows("ABABAB", locked=False)
    safe_rows, safe = race_rows("ABABAB", locked=True)
    assert racy.lost_updates == 1 and safe.lost_updates == 0
    assert [r["action"] for r in racy_rows[:4]] == ["check count", "check count", "read next_id", "read next_id"]
    assert sum(r["action"] == "waits for lock" for r in safe_rows) == 3
    assert race_rows("AAAABBBB", locked=False)[1].lost_updates == 0


def test_admission_curves_are_the_sweep_and_behave():
    rates = (0.02, 0.14, 0.3)
    curves = admission_curves(rates, num_requests=120)
    sweep = admission_sweep(rates, 8, 16, 120, "short", 0)
    for policy in ("wait", "busy"):
        assert list(curves[policy]["rejected"]) == [r.rejected_count for r in sweep[policy]]
        assert list(curves[policy]["max_queue"]) == [r.max_queue_length for r in sweep[policy]]
        assert np.allclose(curves[policy]["mean_ttft"], [r.mean_ttft for r in sweep[policy]])
    assert (curves["busy"]["mean_ttft"] == 1).all() and (curves["busy"]["max_queue"] == 0).all()
    assert (curves["wait"]["rejected"] <= curves["busy"]["rejected"]).all()
    assert curves["wait"]["mean_ttft"][-1] > curves["wait"]["mean_ttft"][0] == 1
    assert curves["wait"]["max_queue"].max() <= 16
    at = admission_at(0.3, num_requests=120)
    assert at["wait"].rejected_count == curves["wait"]["rejected"][-1]


def test_burst_by_hand():
    wait, busy = burst(10, 3, 4, 4, "wait"), burst(10, 3, 4, 4, "busy")
    assert list(wait.ttft_iterations[:8]) == [1] * 4 + [4] * 4 and wait.rejected_count == 2
    assert busy.rejected_count == 6 and list(busy.ttft_iterations[:4]) == [1] * 4
    assert max(wait.running) == 4 and max(wait.queue_length) == 4
    with pytest.raises(InputError, match="policy"):
        burst(3, 1, 1, policy="drop")
    with pytest.raises(InputError, match="num_requests"):
        burst(0, 1, 1)


def test_ids_after_never_reuses():
    assert ids_after(["a", "a", 0, "a", 1, "a"]) == [0, 1, 2, 3]
    assert ids_after(["a"] * 3, max_sequences=3) == [0, 1, 2]
    with pytest.raises(Exception, match="full"):
        ids_after(["a"] * 3, max_sequences=2)
    assert SlotPool(2).next_id == 0


@pytest.mark.parametrize("kind", ["gqa", "jamba", "rg_lru"])
def test_continuous_run_equals_decoding_alone(kind):
    run = continuous_run(kind, 2)
    assert run["all_equal"] and all(run["equal_alone"]) and run["max_abs_diff"] < 1e-4
    assert run["schedule"].slots == (1 if kind == "rg_lru" else 2)
    assert run["supports_batching"] == (kind != "rg_lru")


def test_model_owned_state_same_tokens_same_total():
    cache, model = owned_vs_cache_rows()
    assert cache["tokens"] == model["tokens"] and cache["pool offset"] == model["pool offset"] == 11
    assert cache["model bytes"] == 0 and model["model bytes"] > 0
    assert cache["total bytes"] == model["total bytes"] == model["pool bytes"] + model["model bytes"]
    assert continuous_run("jamba", 2, state_owner="model")["tokens"] == continuous_run("jamba", 2)["tokens"]


def test_dispatch_paged_equals_dense():
    rows = dispatch_rows()
    assert [r["dense cache"] for r in rows] == ["KVCache", "RotatingKVCache", "ChunkedKVCache"]
    assert {r["dense path"] for r in rows} == {"dense sdpa"} and {r["paged path"] for r in rows} == {"paged block table"}
    assert all(r["max |Δ logit|"] < 1e-4 for r in rows)


def test_plots_draw(ax):
    rows = pool_timeline()
    ids = {sid for r in rows for sid in r["per_sequence"]}
    draw_pool_timeline(ax, rows)
    assert len(ax.patches) == len(ids) * len(rows)               # one segment per SequenceId per event
    draw_pool_timeline(ax, rows)                                 # redraw on the same Axes: no pile-up
    assert len(ax.patches) == len(ids) * len(rows)
    heights = {round(sum(p.get_height() for p in ax.patches if abs(p.get_x() + p.get_width() / 2 - i) < 0.01) * 1024)
               for i in range(len(rows))}
    assert heights == {r["memory_usage_bytes"] for r in rows}
    curves = admission_curves((0.02, 0.3), num_requests=60)
    draw_admission_sweep(ax, curves, "rejected")
    assert [tuple(line.get_ydata()) for line in ax.lines] == [tuple(curves["wait"]["rejected"]),
                                                              tuple(curves["busy"]["rejected"])]
    draw_admission(ax, 0.3, 4, 4)
    assert "rejected" in ax.get_title()
    draw_batch(ax, "gqa", 2)
    assert "True" in ax.get_title()


def test_schedule_colours(ax):
    codes = [[2, 3, 4], [1, 2, 3]]
    plot_schedule(ax, codes, (0, 1, 1))
    mesh = ax.collections[0]
    assert mesh.get_array().reshape(2, 3).tolist() == codes and len(CELL_COLORS) == 5
    assert [t.get_text() for t in ax.texts[:3]] == ["0", "1", "1"]


def test_views_redraw_on_controls():
    view = admission_view()
    before = [len(line) for line in view.lines()]
    view.controls["rate"].value = 0.3
    assert [len(line) for line in view.lines()] != before           # another run: another length
    bv = batch_view()
    bv.controls["kind"].value = "rg_lru"
    assert "one slot" in bv.ax.get_title()
    plt.close("all")


def test_slots_label_worked_by_hand():
    from kvsim.lessons.l10_engine.data import slots_label
    from kvsim.lessons.l10_engine.views import batch_view
    assert (slots_label(1), slots_label(2), slots_label(16)) == ("1 slot", "2 slots", "16 slots")
    view = batch_view("gqa", 2)
    assert "max_batch 2 → 2 slots: " in view.ax.get_title()
    view.controls["kind"].value = "rg_lru"  # a recurrent state cannot be batched: one slot
    assert "max_batch 2 → 1 slot (cannot batch" in view.ax.get_title()
    plt.close(view.figure)
