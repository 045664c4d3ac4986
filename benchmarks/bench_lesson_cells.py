"""Benchmark: CPU seconds each lesson notebook's code cells spend (what `make test` pays twice per lesson).

Each notebook runs in a fresh Python process (one per notebook, as a kernel would be) inside an IPython
InteractiveShell, with notebooks/ as the working directory, the worktree first on sys.path and matplotlib's
inline backend off (Agg). Around every code cell: ``time.process_time`` (CPU seconds of every thread of the
process, so other processes on the shared machine do not count) and ``time.perf_counter`` (wall).
Cells slower than ``--show`` CPU-s are listed; totals per notebook always are.

``--profile NB:CELL`` prints the top of a cProfile of that one cell (cumulative), after running the cells before it.
``--before FILE.json`` puts an earlier run's CPU seconds beside this run's (the before/after table).
``--before-root DIR`` (a checkout of the code before, e.g. ``git worktree add /tmp/before main``) runs each
notebook there and here alternately, ``--reps`` times each, and keeps each cell's fewest CPU seconds on each
side: on a shared machine, load changes from minute to minute, and alternating lets both sides meet the same load.

Writes benchmarks/results/lesson_cells.{json,md} (``--out`` changes the stem).
Run: python benchmarks/bench_lesson_cells.py [08 05 ...] [--before old.json] [--profile 08:10]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
OUT = Path(__file__).parent / "results"

# The child: runs one notebook's code cells, prints one JSON line per cell on stdout's last line.
CHILD = r"""
import cProfile, io, json, os, pstats, sys, time
import matplotlib
matplotlib.use("Agg")
import nbformat
from IPython.core.interactiveshell import InteractiveShell
path, profile_cells = sys.argv[1], {int(c) for c in sys.argv[2].split(",")}
nb = nbformat.read(path, as_version=4)
shell = InteractiveShell.instance()
shell.run_cell("%matplotlib agg", silent=True)
rows = []
devnull = open(os.devnull, "w")
for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
        continue
    prof = cProfile.Profile() if i in profile_cells else None
    c0, w0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    out = sys.stdout
    sys.stdout = devnull
    try:
        res = shell.run_cell(cell.source, silent=False, store_history=False)
    finally:
        sys.stdout = out
    if prof:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if not res.success:
        raise SystemExit(f"cell {i} failed: {res.error_in_exec or res.error_before_exec}")
    import matplotlib.pyplot as plt
    plt.close("all")
    rows.append({"cell": i, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "first_line": cell.source.split("\n")[0][:70]})
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
        print(f"=== cell {i}", s.getvalue(), file=sys.stderr)
print(json.dumps(rows))
"""


def notebook_paths(prefixes):
    nbs = sorted(p for p in NB_DIR.glob("[0-9][0-9]_*.ipynb"))
    if prefixes:
        nbs = [p for p in nbs if any(p.name.startswith(x) for x in prefixes)]
    return nbs


def run_notebook(path: Path, profile_cells: str = "-1", root: Path = ROOT) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root / "notebooks" / path.name), profile_cells],
        cwd=root / "notebooks", env=env, capture_output=True, text=True,
    )
    if proc.returncode:
        raise SystemExit(f"{path.name}: {proc.stderr[-3000:]}")
    if profile_cells != "-1":
        print(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fewest(runs: list[list[dict]]) -> list[dict]:
    """Per cell, the run with the fewest CPU seconds (the runs are of one notebook: the same cells)."""
    return [min(cells, key=lambda r: r["cpu_s"]) for cells in zip(*runs)]


def markdown(results, before, show, note: str = "") -> list[str]:
    lines = [
        "# Lesson notebooks: CPU seconds per code cell",
        "",
        f"`python benchmarks/bench_lesson_cells.py` on {platform.machine()} {platform.system()}, "
        f"{os.cpu_count()} cores (shared machine; CPU-s = `time.process_time` of the cell's process).",
        f"Cells listed: those that took at least {show} CPU-s before or after; totals are over every code cell.",
        *([note] if note else []),
        "",
    ]
    head = "| notebook | cell | first line | before CPU-s | after CPU-s |" if before else "| notebook | cell | first line | CPU-s |"
    lines += [head, "|---|---:|---|---:|---:|" if before else "|---|---:|---|---:|"]
    totals = []
    for name, rows in results.items():
        old = {r["cell"]: r for r in before.get(name, [])} if before else {}
        for r in rows:
            o = old.get(r["cell"])
            if max(r["cpu_s"], o["cpu_s"] if o else 0) < show:
                continue
            first = r["first_line"].replace("|", "\\|")
            if before:
                was = f"{o['cpu_s']:.2f}" if o else "–"
                lines.append(f"| {name} | {r['cell']} | `{first}` | {was} | {r['cpu_s']:.2f} |")
            else:
                lines.append(f"| {name} | {r['cell']} | `{first}` | {r['cpu_s']:.2f} |")
        total = sum(r["cpu_s"] for r in rows)
        total_old = sum(r["cpu_s"] for r in before.get(name, [])) if before else None
        totals.append((name, total_old, total))
    lines += ["", "| notebook | " + ("before CPU-s | after CPU-s |" if before else "CPU-s |"),
              "|---|---:|---:|" if before else "|---|---:|"]
    for name, old, new in totals:
        lines.append(f"| {name} | {old:.2f} | {new:.2f} |" if before else f"| {name} | {new:.2f} |")
    if before:
        lines.append(f"| **all** | {sum(t[1] for t in totals):.2f} | {sum(t[2] for t in totals):.2f} |")
    else:
        lines.append(f"| **all** | {sum(t[2] for t in totals):.2f} |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("notebooks", nargs="*", help="notebook number prefixes (default: every lesson)")
    ap.add_argument("--before", type=Path, help="an earlier run's JSON to compare against")
    ap.add_argument("--profile", help="NB:CELLS, e.g. 08:10,14 (cProfile those cells, write nothing)")
    ap.add_argument("--before-root", type=Path, help="a checkout of the code before: run there and here, alternately")
    ap.add_argument("--reps", type=int, default=1, help="with --before-root: runs per side (fewest CPU-s per cell kept)")
    ap.add_argument("--show", type=float, default=0.8, help="list cells of at least this many CPU-s")
    ap.add_argument("--out", default="lesson_cells", help="output stem under benchmarks/results/")
    args = ap.parse_args()
    if args.profile:
        nb, cell = args.profile.split(":")
        run_notebook(notebook_paths([nb])[0], cell)
        return
    results, before = {}, None
    if args.before_root:
        before = {}
        for path in notebook_paths(args.notebooks):
            runs = {"before": [], "after": []}
            for _ in range(args.reps):
                runs["before"].append(run_notebook(path, root=args.before_root.resolve()))
                runs["after"].append(run_notebook(path))
            before[path.stem], results[path.stem] = (fewest(runs[side]) for side in ("before", "after"))
            print(f"{path.stem}: {sum(r['cpu_s'] for r in before[path.stem]):.2f} -> "
                  f"{sum(r['cpu_s'] for r in results[path.stem]):.2f} CPU-s", flush=True)
    else:
        for path in notebook_paths(args.notebooks):
            results[path.stem] = run_notebook(path)
            print(f"{path.stem}: {sum(r['cpu_s'] for r in results[path.stem]):.2f} CPU-s", flush=True)
    if args.before:
        before = json.loads(args.before.read_text())["notebooks"]
    OUT.mkdir(exist_ok=True)
    data = {"machine": f"{platform.machine()} {platform.system()} {os.cpu_count()} cores", "notebooks": results}
    if before:
        data["before"] = before
    (OUT / f"{args.out}.json").write_text(json.dumps(data, indent=1) + "\n")
    note = (f"Before: the checkout at {args.before_root}; after: this tree; the two run alternately, "
            f"{args.reps} time(s) each per notebook, fewest CPU-s per cell kept." if args.before_root else "")
    lines = markdown(results, before, args.show, note)
    (OUT / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
