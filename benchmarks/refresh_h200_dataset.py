"""Refresh lesson 08's H200 dataset (data/h200/) from the GPU benchmark results in benchmarks/results/.

Reproducible: reads only files in the repository, writes only data/h200/.
- roofline_cuda.json: benchmarks/results/roofline_cuda.json (compiled step, the Rows batch sweep beside
  mlx-lm's BatchKVCache, quantized-KV kernels), plus the one-tensor batch sweep of run 3
  (repeats/roofline_cuda_run3_53938c4.json), merged by kvsim.lessons.l08_decode_speed.data.dataset_from_results;
  roofline_cuda.md copied beside it;
- step_breakdown_cuda.{json,md}: benchmarks/results/step_breakdown_cuda.*, copied;
- repeats/: the repeat runs of both benchmarks (roofline_cuda_repeat.json as run 4, step_breakdown_cuda_repeat).

Run: python benchmarks/refresh_h200_dataset.py   (then check: git diff --stat data/h200)
"""

import json
import shutil
from pathlib import Path

from kvsim.lessons.l08_decode_speed.data import dataset_from_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS, DATA = ROOT / "benchmarks" / "results", ROOT / "data" / "h200"
RUN3 = "repeats/roofline_cuda_run3_53938c4.json"


def main():
    roofline = json.loads((RESULTS / "roofline_cuda.json").read_text())
    run3 = json.loads((DATA / RUN3).read_text())
    merged = dataset_from_results(roofline, run3, RUN3)
    (DATA / "roofline_cuda.json").write_text(json.dumps(merged, indent=1) + "\n")
    repeat = json.loads((RESULTS / "roofline_cuda_repeat.json").read_text())
    copies = {"roofline_cuda.md": "roofline_cuda.md",
              "roofline_cuda_repeat.json": f"repeats/roofline_cuda_run4_{repeat['meta']['kvsim_commit']}.json",
              "step_breakdown_cuda.json": "step_breakdown_cuda.json",
              "step_breakdown_cuda.md": "step_breakdown_cuda.md",
              "step_breakdown_cuda_repeat.json": "repeats/step_breakdown_cuda_repeat.json"}
    for src, dst in copies.items():
        shutil.copyfile(RESULTS / src, DATA / dst)
    for name in ["roofline_cuda.json", *copies.values()]:
        print(f"wrote data/h200/{name}")


if __name__ == "__main__":
    main()
