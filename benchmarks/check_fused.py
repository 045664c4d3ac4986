"""Check on the current device that kvsim's fused attention equals its plain reference.

The unit tests check this on the CPU (tests/test_attention.py); a GPU runs other kernels (MLX's fused
decode and prefill kernels on Metal and CUDA), so this script repeats the check there: MHA, GQA and
MQA at Llama 3 8B's head size, one query (decode, no mask) and a prefill chunk (causal and sliding bool
masks), fp32 and bf16, fresh random inputs each time. It prints one line per case, the relative error
‖fused − reference‖ / ‖reference‖ computed in fp32, and exits 1 if any case is off (NaN included).

Run: python benchmarks/check_fused.py [--out DIR]
"""

import argparse
import json
from pathlib import Path

import mlx.core as mx

from kvsim.cache.sdpa import reference_sdpa, sdpa
from kvsim.model.layers import reference_mask

TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2}  # fp32 arithmetic vs bf16 operands (softmax in fp32 both ways)
DTYPES = {"fp32": mx.float32, "bf16": mx.bfloat16}


def case(heads: int, kv_heads: int, queries: int, keys: int, mask_kind: str, dtype: str, seed: int) -> float:
    """Relative error of the fused path against the reference on one random problem."""
    k1, k2, k3 = mx.random.split(mx.random.key(seed), 3)
    dt = DTYPES[dtype]
    q = mx.random.normal((1, heads, queries, 128), key=k1).astype(dt)
    k = mx.random.normal((1, kv_heads, keys, 128), key=k2).astype(dt)
    v = mx.random.normal((1, kv_heads, keys, 128), key=k3).astype(dt)
    window = 256 if mask_kind == "sliding" else None
    mask = None if mask_kind == "none" else reference_mask(queries, keys, keys - queries, window=window)
    fast = sdpa(q, k, v, mask, 128 ** -0.5).astype(mx.float32)
    ref = reference_sdpa(q, k, v, mask, 128 ** -0.5).astype(mx.float32)
    return (mx.linalg.norm((fast - ref).flatten()) / mx.linalg.norm(ref.flatten())).item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write check_fused.json into this folder")
    args = parser.parse_args()
    rows, seed = [], 0
    for name, heads, kv_heads in (("MHA", 32, 32), ("GQA-8", 32, 8), ("MQA", 32, 1)):
        for queries, keys, mask_kind in ((1, 8192, "none"), (64, 1024, "causal"), (64, 1024, "sliding")):
            for dtype in DTYPES:
                seed += 1
                err = case(heads, kv_heads, queries, keys, mask_kind, dtype, seed)
                ok = err <= TOLERANCE[dtype]  # False for NaN
                rows.append({"variant": name, "queries": queries, "keys": keys, "mask": mask_kind,
                             "dtype": dtype, "relative_error": err, "ok": ok})
                print(f"{name:6s} L={queries:3d} T={keys:5d} mask={mask_kind:8s} {dtype}: "
                      f"{err:.2e} {'ok' if ok else 'OFF'}", flush=True)
    report = {"device": str(mx.default_device()), "mlx": mx.__version__, "cases": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "check_fused.json").write_text(json.dumps(report, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
