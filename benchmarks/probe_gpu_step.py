"""Probe: where a decode step's time goes on a GPU, kvsim eager, kvsim compiled and mlx-lm side by side (issue 21).

For GQA-8 (Llama 3 8B, 32 layers), sliding 4096 (Mistral 7B) and MLA (DeepSeek-V3 dimensions, 4 layers),
bench_roofline's models, at a few contexts, every side gets its own filled caches and the sides' steps are
interleaved; per step the probe times (a) ``build``: Python building the lazy graph (nothing runs on the device
before ``mx.eval`` unless the step hands part of it over itself) and (b) ``total``: build + ``mx.eval``. Sides:
kvsim eager and compiled with ``overlap_layers`` 0 (one evaluation per step) and k > 0 (``mx.async_eval`` every k
layers: the device runs the first layers while Python builds the rest), and mlx-lm's twin. Then, for MLA, the
pieces of one layer's decode step each timed alone behind an ``mx.eval`` barrier (launch + sync + kernel), at each
context, and one layer's attention (cache update + attention) of each engine; for GQA, the weight matrix-vector
products x @ Wᵀ of each shape chained 16 times in one evaluation (GB/s).

Run: python benchmarks/probe_gpu_step.py --out DIR [--repeats N] [--only "sliding,MLA,GQA-8 (Llama"] [--kinds eager];
writes DIR/probe_gpu_step.{json,md}; the JSON keeps every round (total, build and the main thread's CPU time, ms).
"""

import argparse
import datetime
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

from bench_roofline import build, plan
from kvsim.measure.roofline import device_summary
from kvsim.measure.step_time import fill_caches
from kvsim.measure.twins import mlx_lm_version, twin
from kvsim.model.compiled import compiled_step
from kvsim.model.layers import Rows, transposed
from kvsim.model.mla import _WEIGHTS_LORA

K = 1024


def step_sides(model, cstep, tw, T: int, overlaps, kinds=("eager", "compiled")) -> dict:
    """{side: zero-argument step function}, each side with its own caches filled to T tokens."""
    tok = mx.array([[1]])
    sides = {}

    def kv(fn, k):
        caches = model.make_caches()
        fill_caches(model, caches, T)

        def step():
            model.overlap_layers = k
            return fn(tok, caches)
        return step

    for k in overlaps:
        for kind in kinds:
            sides[f"{kind} ov{k}"] = kv(model if kind == "eager" else cstep, k)
    tc = tw.make_caches(None)
    fill_caches(model, tc, T)
    sides["mlx-lm"] = lambda: tw.model(tok, cache=tc)
    return sides


def batch_sides(model, cstep, tw, T: int, B: int, overlaps) -> dict:
    """B separate sequences at T tokens: kvsim's Rows of per-sequence caches (batched_generate's step), eager
    and compiled per overlap, beside mlx-lm's BatchKVCache (its BatchGenerator's cache)."""
    from kvsim.measure.roofline import mlx_lm_batch_cache
    tok, sides = mx.array([[1]] * B), {}

    def rows(fn, k):
        per_seq = [model.make_caches() for _ in range(B)]
        for r, caches in enumerate(per_seq):
            fill_caches(model, caches, T, seed=r)
        layers = [Rows([per_seq[r][i] for r in range(B)]) for i in range(len(model.blocks))]

        def step():
            model.overlap_layers = k
            return fn(tok, layers)
        return step

    for k in overlaps:
        sides[f"eager ov{k}"] = rows(model, k)
        sides[f"compiled ov{k}"] = rows(cstep, k)
    caches = [mlx_lm_batch_cache()([0] * B) for _ in model.blocks]
    fill_caches(model, caches, T, batch=B)
    sides["mlx-lm"] = lambda: tw.model(tok, cache=caches)
    return sides


def time_sides(sides: dict, repeats: int) -> dict:
    """Interleaved rounds (order reversed every other round); per side best/median total and median build, ms."""
    for fn in sides.values():
        mx.eval(fn())
        mx.eval(fn())
    build_s, total_s, cpu_s = ({k: [] for k in sides} for _ in range(3))
    order, start = list(sides.items()), time.time()
    for r in range(repeats):
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            c0, t0 = time.thread_time(), time.perf_counter()
            out = fn()
            t1 = time.perf_counter()
            mx.eval(out)
            t2, c2 = time.perf_counter(), time.thread_time()
            build_s[name].append(t1 - t0)
            total_s[name].append(t2 - t0)
            cpu_s[name].append(c2 - c0)
    ms = lambda xs: [round(1e3 * x, 3) for x in xs]                    # noqa: E731
    return {k: {"best_ms": 1e3 * min(total_s[k]), "median_ms": 1e3 * statistics.median(total_s[k]),
                "build_median_ms": 1e3 * statistics.median(build_s[k]),
                "cpu_median_ms": 1e3 * statistics.median(cpu_s[k]),
                "rounds": {"unix_start": round(start, 3), "total_ms": ms(total_s[k]), "build_ms": ms(build_s[k]),
                           "cpu_ms": ms(cpu_s[k])}} for k in sides}


def timed(fn, repeats: int) -> float:
    """Best ms of fn() evaluated alone (inputs already evaluated): launch + sync + kernels."""
    mx.eval(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mx.eval(fn())
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def mla_pieces(model, tw, T: int, repeats: int) -> dict:
    """One MLA layer's decode step piece by piece (kvsim's fast path), each behind a barrier; ms."""
    block, a = model.blocks[0], model.blocks[0].mixer
    H, nope, r, R = a.n_heads, a.nope_dim, a.kv_lora_rank, a.rope_dim
    x = mx.random.normal((1, 1, model.spec.hidden_size)).astype(model.dtype)
    wq_a_t, wq_b_t, wkv_a_t, wo_t = transposed(a, _WEIGHTS_LORA)
    w_uk, w_uv = a._w_uk_uv()
    rot = dict(traditional=False, base=a.rope_base, scale=1.0, offset=T)
    q = mx.fast.rms_norm(x @ wq_a_t, a.q_norm, a.eps) @ wq_b_t
    q = q.reshape(1, H, 1, nope + R)
    kv = (x @ wkv_a_t).reshape(1, 1, 1, r + R)
    q_nope, q_pe = q[..., :nope], mx.fast.rope(q[..., nope:], R, **rot)
    q_lat = q_nope @ w_uk
    lat_new, kpe_new = mx.fast.rms_norm(kv[..., :r], a.kv_norm, a.eps), mx.fast.rope(kv[..., r:], R, **rot)
    caches = model.make_caches()
    fill_caches(model, caches, T)
    c = caches[0]
    latents, k_pes = c.keys[..., :T, :], c.values[..., :T, :]
    q_pe_s = q_pe * a.scale
    pe = q_pe_s @ k_pes.swapaxes(-1, -2)
    out_lat = mx.fast.scaled_dot_product_attention(q_lat, latents, latents, scale=a.scale, mask=pe)
    out = out_lat @ w_uv.swapaxes(-1, -2)
    q_nope_c = mx.contiguous(q_nope)
    mx.eval(q, kv, q_nope, q_pe, q_lat, lat_new, kpe_new, pe, out_lat, out, q_pe_s, q_nope_c)
    ffn = block.ffn
    pieces = {
        "q (q_a, norm, q_b)": lambda: mx.fast.rms_norm(x @ wq_a_t, a.q_norm, a.eps) @ wq_b_t,
        "kv_a": lambda: x @ wkv_a_t,
        "ropes + latent norm": lambda: (mx.fast.rope(q[..., nope:], R, **rot), mx.fast.rope(kv[..., r:], R, **rot),
                                        mx.fast.rms_norm(kv[..., :r], a.kv_norm, a.eps)),
        "q_nope @ W_uk (strided q_nope)": lambda: q_nope @ w_uk,
        "q_nope @ W_uk (contiguous)": lambda: q_nope_c @ w_uk,
        "cache update (2 slices)": lambda: _update(c, lat_new, kpe_new),
        "pe scores q_pe·k_peᵀ": lambda: (q_pe * a.scale) @ k_pes.swapaxes(-1, -2),
        "sdpa (latent, pe mask)": lambda: mx.fast.scaled_dot_product_attention(q_lat, latents, latents,
                                                                               scale=a.scale, mask=pe),
        "pe + sdpa": lambda: mx.fast.scaled_dot_product_attention(
            q_lat, latents, latents, scale=a.scale, mask=q_pe_s @ k_pes.swapaxes(-1, -2)),
        "explicit scores+softmax+pv": lambda: _explicit(q_lat, q_pe_s, latents, k_pes, a.scale),
        "@ W_uv": lambda: out_lat @ w_uv.swapaxes(-1, -2),
        "wo": lambda: out.reshape(1, 1, -1) @ wo_t,
        "ffn (norm, gate, up, down)": lambda: block.ffn(mx.fast.rms_norm(x, block.ffn_norm, block.eps)),
        "null (eval of an evaluated array)": lambda: x,
    }
    res = {k: timed(f, repeats) for k, f in pieces.items()}
    # one layer's whole attention, each engine's own code, its own cache (update included)
    kc, mc = model.make_caches()[0], tw.make_caches(None)[0]
    fill_caches(model, [kc] + [None] * (len(model.blocks) - 1), T)
    fill_caches(model, [mc] + [None] * (len(model.blocks) - 1), T)
    xn = mx.fast.rms_norm(x, block.mixer_norm, block.eps)
    mx.eval(xn)
    attn_lm = tw.model.model.layers[0].self_attn
    res["layer attention kvsim (MLA.step)"] = timed(lambda: a.step(xn, kc), repeats)
    res["layer attention mlx-lm (self_attn)"] = timed(lambda: attn_lm(xn, mask=None, cache=mc), repeats)
    return {k: round(v, 4) for k, v in res.items()}


def _update(c, lat, kpe):
    """The cache's one-token write without growing it: rewrite the last slot (offset unchanged)."""
    p = c.offset - 1
    c.keys[..., p:p + 1, :] = lat
    c.values[..., p:p + 1, :] = kpe
    return c.keys, c.values


def _explicit(q_lat, q_pe_s, latents, k_pes, scale):
    s = mx.addmm(q_pe_s @ k_pes.swapaxes(-1, -2), q_lat * scale, latents.swapaxes(-1, -2))
    return mx.softmax(s, axis=-1, precise=True) @ latents


def gemv_shapes(model, repeats: int) -> list:
    """x @ Wᵀ for each weight shape of a Llama layer (and the head), chained 16 times in one eval: GB/s."""
    b, step = model.blocks[0], model.compiled_step()
    shapes = {"qkv (fused)": step.weights[0]["qkv"], "wq": b.mixer.wq, "wo": b.mixer.wo,
              "gate|up (fused)": step.weights[0]["gate_up"], "gate": b.ffn.gate, "down": b.ffn.down,
              "lm_head": model.lm_head}
    out = []
    for name, w in shapes.items():
        x = mx.random.normal((1, 1, w.shape[1])).astype(w.dtype)
        wt = w.T
        mx.eval(x)

        def chain():
            return [x @ wt for _ in range(16)]
        ms = timed(chain, repeats)
        out.append({"weight": name, "shape": list(w.shape), "ms_16": round(ms, 4),
                    "GB_per_s": round(16 * w.nbytes / (ms / 1e3) / 1e9, 1)})
    return out


def markdown(res: dict) -> str:
    m = res["meta"]
    lines = [f"# Decode step probe on {res['device']['name']} ({res['device']['backend']})", "",
             f"MLX {m['mlx']}, mlx-lm {m['mlx_lm']}, {m['date']}, {m['dtype']}, {m['repeats']} interleaved rounds; "
             f"tools: {m['tools']}.", "",
             "## Whole steps: build (Python, before mx.eval) and total (build + eval), ms", "",
             "| variant | context | side | best | median | build (median) | CPU (median) | best / mlx-lm |",
             "|---|---|---|---|---|---|---|---|"]
    for s in res["steps"]:
        ref = s["sides"]["mlx-lm"]["best_ms"]
        for side, t in s["sides"].items():
            lines.append(f"| {s['variant']} | {s['context']:,} | {side} | {t['best_ms']:.3f} | {t['median_ms']:.3f} | "
                         f"{t['build_median_ms']:.3f} | {t.get('cpu_median_ms', float('nan')):.3f} | "
                         f"{t['best_ms'] / ref:.3f} |")
    if res["mla_pieces"]:
        ctxs = [p["context"] for p in res["mla_pieces"]]
        names = list(res["mla_pieces"][0]["ms"])
        lines += ["", "## One MLA layer, piece by piece behind mx.eval barriers (best ms: launch + sync + kernels)", "",
                  "| piece | " + " | ".join(f"{c:,}" for c in ctxs) + " |", "|---|" + "---|" * len(ctxs)]
        lines += [f"| {n} | " + " | ".join(f"{p['ms'][n]:.4f}" for p in res["mla_pieces"]) + " |" for n in names]
    if res["gemv"]:
        lines += ["", "## x @ Wᵀ, 16 in one evaluation", "", "| weight | shape | ms (16) | GB/s |", "|---|---|---|---|"]
        lines += [f"| {g['weight']} | {g['shape']} | {g['ms_16']:.3f} | {g['GB_per_s']:.0f} |" for g in res["gemv"]]
    if res["errors"]:
        lines += ["", "Errors: " + "; ".join(res["errors"])]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--only", default="GQA-8 (Llama,MLA")
    ap.add_argument("--gqa", default="1024,8192", help="GQA contexts")
    ap.add_argument("--mla", default="8192,32768,131072", help="MLA contexts")
    ap.add_argument("--gqa-overlaps", default="0,2,4,8", help="also the sliding variant's")
    ap.add_argument("--mla-overlaps", default="0,1,2")
    ap.add_argument("--sliding", default="1024,8192,32768", help="sliding-window (Mistral 7B) contexts")
    ap.add_argument("--separate", action="store_true",
                    help="time the eager sides and the compiled sides in separate groups (each beside mlx-lm)")
    ap.add_argument("--kinds", default="eager,compiled", help="kvsim sides: eager, compiled or both")
    ap.add_argument("--batch", default="", help="GQA batch points B@T (Rows beside BatchKVCache), e.g. 8@8192")
    ap.add_argument("--no-pieces", action="store_true", help="skip the MLA pieces and the GEMV shapes")
    args = ap.parse_args()
    ints = lambda text: tuple(int(t) for t in text.split(","))            # noqa: E731
    gpu = mx.is_available(mx.gpu)
    mx.set_default_device(mx.gpu if gpu else mx.cpu)
    tools = ", ".join(f"{t}: {'yes' if shutil.which(t) else 'no'}" for t in ("nsys", "ncu", "nvidia-smi"))
    res = {"meta": {"mlx": mx.__version__, "mlx_lm": mlx_lm_version(), "repeats": args.repeats, "tools": tools,
                    "dtype": "bf16" if gpu else "fp32",
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "python": sys.version.split()[0]},
           "device": device_summary(), "steps": [], "mla_pieces": [], "gemv": [], "errors": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save():
        (out / "probe_gpu_step.json").write_text(json.dumps(res, indent=1) + "\n")
        (out / "probe_gpu_step.md").write_text(markdown(res))

    cases = {"GQA-8 (Llama": (ints(args.gqa), ints(args.gqa_overlaps)) if gpu else ((256,), (0, 1)),
             "MLA": (ints(args.mla), ints(args.mla_overlaps)) if gpu else ((256,), (0, 1)),
             "sliding": (ints(args.sliding), ints(args.gqa_overlaps)) if gpu else ((256,), (0, 1))}
    kinds = tuple(args.kinds.split(","))
    groups = tuple((k,) for k in kinds) if args.separate else (kinds,)
    for v in plan(gpu, quick=True)["variants"]:
        key = next((c for c in cases if v.label.startswith(c)), None)
        if key is None or key not in args.only or v.kv_dtype or v.kv_heads is not None:
            continue
        mx.clear_cache()
        model = build(v, "bf16" if gpu else "fp32", device_summary()["memory_available_bytes"])
        cstep = model.compiled_step()
        tw = twin(model)
        contexts, overlaps = cases[key]
        for T in contexts:
            for kinds in groups:
                try:
                    times = time_sides(step_sides(model, cstep, tw, T, overlaps, kinds), args.repeats)
                    res["steps"].append({"variant": v.label, "context": T, "layers": len(model.blocks),
                                         "sides": times})
                    print(v.label, T, {k: round(t["best_ms"], 3) for k, t in times.items()}, flush=True)
                except Exception as err:                             # noqa: BLE001
                    res["errors"].append(f"{v.label} @ {T}: {type(err).__name__}: {err}")
                mx.clear_cache()
                save()
            if key == "MLA" and not args.no_pieces:
                try:
                    res["mla_pieces"].append({"context": T, "ms": mla_pieces(model, tw, T, args.repeats)})
                except Exception as err:                             # noqa: BLE001
                    res["errors"].append(f"mla pieces @ {T}: {type(err).__name__}: {err}")
                mx.clear_cache()
                save()
        for point in (args.batch.split(",") if key.startswith("GQA") and args.batch else []):
            B, T = (int(t) for t in point.split("@"))
            try:
                times = time_sides(batch_sides(model, cstep, tw, T, B, overlaps[:2]), max(5, args.repeats // 3))
                res["steps"].append({"variant": f"{v.label}, B = {B}", "context": T, "layers": len(model.blocks),
                                     "sides": times})
                print(v.label, B, T, {k: round(t["best_ms"], 3) for k, t in times.items()}, flush=True)
            except Exception as err:                                 # noqa: BLE001
                res["errors"].append(f"{v.label} B={B} @ {T}: {type(err).__name__}: {err}")
            mx.clear_cache()
            save()
        if key.startswith("GQA") and not args.no_pieces:
            try:
                res["gemv"] = gemv_shapes(model, args.repeats)
            except Exception as err:                                 # noqa: BLE001
                res["errors"].append(f"gemv: {type(err).__name__}: {err}")
            save()
        model.overlap_layers = 0
        del model, cstep, tw
        mx.clear_cache()
    print(markdown(res), flush=True)


if __name__ == "__main__":
    main()
