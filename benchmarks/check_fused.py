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

# fp32: MLX's CUDA kernels may multiply in TF32 (relative error near 3e-4, seen for MQA decode on an H200);
# bf16: bf16 operands (softmax in fp32 both ways)
TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2}
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


def quantized_shapes() -> list[dict]:
    """Which one-query quantized attention shapes ``mx.quantized_matmul`` runs here (keys T, 8 and 4 bits).

    A decode step over a quantized cache multiplies q (1 × 128) by T packed keys; MLX's CUDA backend
    does not implement every T, so record which ones run (T = a multiple of 256 is what a cache padded
    to its allocated slots would ask for)."""
    rows = []
    for bits in (8, 4):
        for T in (1024, 1025, 1032, 1040, 1056, 1088, 1152, 1280):
            k = mx.random.normal((1, 8, T, 128)).astype(mx.bfloat16)
            q = mx.random.normal((1, 8, 4, 1, 128)).astype(mx.bfloat16)
            packed = [a[:, :, None] for a in mx.quantize(k, group_size=64, bits=bits)]
            try:
                mx.eval(mx.quantized_matmul(q, *packed, transpose=True, group_size=64, bits=bits))
                ok, err = True, ""
            except RuntimeError as e:
                ok, err = False, str(e).splitlines()[0][:120]
            rows.append({"bits": bits, "keys": T, "runs": ok, "error": err})
            print(f"quantized_matmul q(1x128) x K(T={T}) {bits}-bit: {'runs' if ok else 'no implementation'}",
                  flush=True)
    return rows


def quantized_slices() -> list[dict]:
    """The same one-query product on what a quantized cache returns: rows [:T] sliced out of a larger
    buffer (kvsim's and mlx-lm's QuantizedKVCache both answer with such slices), and mlx-lm's own
    quantized attention on its own QuantizedKVCache at T = 1025."""
    from kvsim.measure.twins import mlx_lm_module

    rows = []
    for T in (1024, 1025):
        k = mx.random.normal((1, 8, 1280, 128)).astype(mx.bfloat16)
        q = mx.random.normal((1, 8, 4, 1, 128)).astype(mx.bfloat16)
        packed = [a[:, :, None, :T] for a in mx.quantize(k, group_size=64, bits=8)]
        rows.append(_try(f"sliced buffer, T={T}", lambda: mx.quantized_matmul(
            q, *packed, transpose=True, group_size=64, bits=8)))
    try:
        cache_mod, base = mlx_lm_module("models.cache"), mlx_lm_module("models.base")
        cache = cache_mod.QuantizedKVCache(group_size=64, bits=8)
        kv = mx.random.normal((1, 8, 1025, 128)).astype(mx.bfloat16)
        keys, values = cache.update_and_fetch(kv, kv)
        q = mx.random.normal((1, 32, 1, 128)).astype(mx.bfloat16)
        rows.append(_try("mlx-lm quantized attention, T=1025", lambda: base.scaled_dot_product_attention(
            q, keys, values, cache=cache, scale=0.088, mask=None)))
    except ImportError as err:
        rows.append({"case": "mlx-lm quantized attention", "runs": False, "error": f"mlx-lm missing: {err}"})
    return rows


def _try(case: str, fn) -> dict:
    try:
        mx.eval(fn())
        ok, err = True, ""
    except RuntimeError as e:
        ok, err = False, str(e).splitlines()[0][:160]
    print(f"{case}: {'runs' if ok else 'no implementation: ' + err}", flush=True)
    return {"case": case, "runs": ok, "error": err}


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
    report = {"device": str(mx.default_device()), "mlx": mx.__version__, "cases": rows,
              "quantized_matmul": quantized_shapes(), "quantized_slices": quantized_slices()}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "check_fused.json").write_text(json.dumps(report, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
