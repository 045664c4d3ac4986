"""Lesson 09's picture: one draft → verify → accept / rewind round on the target's cache.

Drawing only: the offsets come from :func:`kvsim.calc.draft_round.round_stages`.
"""

from __future__ import annotations

from matplotlib.patches import Patch, Rectangle

COLORS = {"cache": "0.8", "last": "gold", "draft": "tab:blue", "ok": "tab:green", "no": "tab:red",
          "gone": "0.93", "own": "orange"}
SHOWN = 3  # cached positions shown before the round's first one


def _cell(ax, x, y, text, color, hatch=None, edge="white", text_color="black"):
    ax.add_patch(Rectangle((x, y), 1, 1, fc=color, ec=edge, lw=1.2, hatch=hatch))
    ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=8, color=text_color)


def plot_round(ax, r, title: str | None = None):
    """Five rows (before, draft, verify, trim, next round); columns are positions P-3 .. P+k+1."""
    ax.clear()
    p, k, n = r.offset_before, r.num_draft, r.accepted
    x = {pos: i for i, pos in enumerate(range(p - SHOWN, p + k + 2))}  # position -> column
    rows = ["before the round", f"draft proposes k = {k}", "target verifies k + 1\nin one pass",
            f"trim({r.trimmed}): offset back\nto P + n + 1 = {r.offset_after}", f"next round: t{n} is\nthe new last token"]
    for i, label in enumerate(rows):
        ax.text(-0.4, i * 1.6 + 0.5, label, ha="right", va="center", fontsize=9)
    for pos in range(p - SHOWN, p):  # row 0: what the cache holds, and the last token (not yet cached)
        _cell(ax, x[pos], 0, "", COLORS["cache"])
    _cell(ax, x[p], 0, "last", COLORS["last"])
    for i in range(1, k + 1):  # row 1: drafts at positions p + i
        _cell(ax, x[p + i], 1.6, f"d{i}", COLORS["draft"], text_color="white")
    y = 3.2  # row 2: the verify pass writes positions p .. p+k; mark each draft's fate
    for pos in range(p - SHOWN, p):
        _cell(ax, x[pos], y, "", COLORS["cache"])
    _cell(ax, x[p], y, "last", COLORS["last"], edge="black")
    for i in range(1, k + 1):
        fate = "ok" if i <= n else "no" if i == n + 1 else "gone"
        _cell(ax, x[p + i], y, f"d{i} " + {"ok": "✓", "no": "✗", "gone": ""}[fate], COLORS[fate], edge="black",
              text_color="white" if fate != "gone" else "0.4")
    y = 4.8  # row 3: after the trim the rows past the offset are stale until overwritten
    for pos in range(p - SHOWN, p + n + 1):
        _cell(ax, x[pos], y, "", COLORS["cache"])
    for pos in range(p + n + 1, p + k + 1):
        _cell(ax, x[pos], y, "stale", "white", hatch="//", edge="0.7", text_color="0.5")
    ax.plot([x[p + n + 1]] * 2, [y - 0.2, y + 1.2], color="tab:red", lw=2)
    y = 6.4  # row 4: the target's own token is the next round's last token
    for pos in range(p - SHOWN, p + n + 1):
        _cell(ax, x[pos], y, "", COLORS["cache"])
    _cell(ax, x[p + n + 1], y, f"t{n}", COLORS["own"])
    ax.plot([x[p], x[p]], [-0.3, 7.5], color="black", lw=1, ls=":")
    ax.text(x[p], 7.6, f"P = {p}", ha="center", va="top", fontsize=8)
    handles = [Patch(fc=COLORS[c], ec="0.5", label=t) for c, t in (
        ("cache", "in the target's cache"), ("last", "last token (fed next)"), ("draft", "draft proposal"),
        ("ok", "accepted"), ("no", "first rejection"), ("own", "target's own token"))]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False)
    ax.set_xlim(-8, len(x) + 0.3)
    ax.set_ylim(9.8, -0.6)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax
