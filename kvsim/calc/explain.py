"""Step-by-step explanation of a KV-cache size: the formula with the config's numbers plugged in.

Contract: :func:`explain` returns an :class:`Explanation` whose ``text`` (for the CLI's
``--explain``) and ``latex`` (for lessons) show one line per group of identical layers, then the
totals, then one note per assumption or cache-neutral feature (:func:`~kvsim.calc.families.spec_notes`:
MoE, ALiBi, partial rotary, NoPE ...). Every number comes from :mod:`kvsim.calc.memory`; this module only formats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import memory, units
from .config import LayerSpec, ModelSpec
from .families import spec_notes


@dataclass
class Explanation:
    """Lines of a worked calculation, as plain text and as LaTeX."""

    text_lines: list[str] = field(default_factory=list)
    latex_lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.text_lines)

    @property
    def latex(self) -> str:
        return "\\begin{aligned}\n" + " \\\\\n".join(self.latex_lines) + "\n\\end{aligned}"

    def _repr_markdown_(self):
        return "$$\n" + self.latex + "\n$$"


def _n(x) -> str:
    return f"{int(x):,}"


def _tex(x) -> str:
    return f"{int(x):,}".replace(",", "{,}")


def _elem(dt: memory.KVDtype, dim: int) -> tuple[str, str]:
    """How one stored vector of ``dim`` elements is costed, as (text, latex)."""
    if not dt.quantized:
        b = units.DTYPE_BYTES[dt.name]
        return f"{dim} × {b} B", f"{dim} \\times {b}\\,\\text{{B}}"
    s = units.DTYPE_BYTES[dt.scale_dtype]
    t = f"({dim}·{dt.bits}/8 + 2·{dim}/{dt.group_size}·{s}) B"
    x = (f"\\left({dim}\\cdot\\tfrac{{{dt.bits}}}{{8}} + "
         f"2\\cdot\\tfrac{{{dim}}}{{{dt.group_size}}}\\cdot {s}\\right)\\text{{B}}")
    return t, x


def _layer_line(layer: LayerSpec, count: int, dt, tp: int, tokens: int, batch: int):
    per_tok = memory.layer_token_bytes(layer, dt, tp)
    kept = memory.kept_tokens(layer, tokens)
    if layer.has_kv_heads:
        heads = memory.heads_per_rank(layer, tp)
        copies = memory.ranks_per_copy(layer, tp)
        replicated = f" (each replicated on {copies} ranks)" if copies > 1 else ""
        what = {"full": "full-attention", "sliding": f"sliding (W={layer.sliding_window})",
                "chunked": f"chunked (C={layer.attention_chunk_size})"}[layer.kind]
        kt, kx = _elem(dt, layer.head_dim)
        if layer.k_eq_v:  # DeepSeek-V4: one tensor is both K and V
            text = f"{count} {what} layers × 1 (K = V) × {heads} KV head{replicated} × {kt}"
            tex = f"{count} \\times {heads} \\times {kx}"
        elif layer.v_head_dim == layer.head_dim:
            text = f"{count} {what} layers × 2 (K,V) × {heads} KV heads{replicated} × {kt}"
            tex = f"{count} \\times 2 \\times {heads} \\times {kx}"
        else:
            vt, vx = _elem(dt, layer.v_head_dim)
            text = f"{count} {what} layers × {heads} KV heads{replicated} × ({kt} + {vt})"
            tex = f"{count} \\times {heads} \\times ({kx} + {vx})"
        if layer.index_head_dim and not layer.compress_ratio:  # MiniMax-M3's sparse layers
            it, ix = _elem(dt, layer.index_head_dim)
            text += f" + indexer key {it}"
            tex += f" + {ix}"
    elif layer.kind == "mla":
        rt, rx = _elem(dt, layer.kv_lora_rank)
        pt, px = _elem(dt, layer.qk_rope_head_dim)
        it, ix = _elem(dt, layer.index_head_dim) if layer.index_head_dim else ("", "")
        text = f"{count} MLA layers × (latent {rt} + RoPE key {pt}" + (f" + DSA indexer key {it}" if it else "") + ")" + (
            f" (replicated on every one of the {tp} ranks)" if tp > 1 else "")
        tex = f"{count} \\times ({rx} + {px}" + (f" + {ix}" if ix else "") + ")"
    else:
        return None
    total = count * per_tok
    kept_note = "" if kept == tokens else f", keeping {_n(kept)} of {_n(tokens)} tokens"
    bytes_at_t = count * memory.layer_kv_bytes(layer, tokens, dt, batch, tp=tp)
    text += f" = {_n(total)} B/token{kept_note}"
    tex += f" &= {_tex(total)}\\,\\text{{B/token}}"
    if layer.compress_ratio:  # DeepSeek-V4: ⌊T/m⌋ compressed entries beside the window
        entries = int(layer.compressed_entries(tokens))
        et, ex = _elem(dt, layer.head_dim)
        it, ix = _elem(dt, layer.index_head_dim) if layer.index_head_dim else ("", "")
        text += (f"; + ⌊T/{layer.compress_ratio}⌋ = {_n(entries)} compressed entries × ({et}"
                 + (f" + indexer key {it}" if it else "") + f") = {_n(count * memory.compressed_entry_bytes(layer, dt))}"
                 " B/entry")
        tex += (f" + \\lfloor T/{layer.compress_ratio}\\rfloor \\times {count} \\times ({ex}"
                + (f" + {ix}" if ix else "") + ")")
    text += f" → {units.format_bytes(bytes_at_t)}"
    return text, tex


def _state_line(layer: LayerSpec, count: int, state_dtype):
    """One group of recurrent layers: Σ_tensors elements × bytes of that tensor's dtype, as (text, latex)."""
    dtypes = dict(layer.state_dtypes(state_dtype=state_dtype))
    parts = [(name, shape, units.DTYPE_BYTES[dtypes[name]]) for name, shape in layer.state_shapes]
    terms = " + ".join(f"{name} {'×'.join(map(str, shape))} × {b} B ({dtypes[name]})"
                       for name, shape, b in parts)
    tex = " + ".join(f"{_tex(math.prod(shape))} \\times {b}" for _, shape, b in parts)
    per_seq = count * memory.state_bytes(layer, state_dtype)
    text = (f"{count} {layer.recurrent_family} layers × ({terms})"
            f" = {_n(per_seq)} B per sequence (fixed, independent of T)")
    return text, f"{count} \\times ({tex}) &= {_tex(per_seq)}\\,\\text{{B/sequence}}"


def explain(spec: ModelSpec, tokens: int, batch: int = 1, kv_dtype="bf16", tp: int = 1,
            state_dtype=None) -> Explanation:
    """Explain M_token = Σ_layers 2·n_kv·d_h·b (or d_c + d_h^R for MLA) and M_total at T tokens, B sequences."""
    dt = memory.parse_kv_dtype(kv_dtype)
    ex = Explanation()
    ex.text_lines.append(f"{spec.name}: {spec.num_hidden_layers} layers {spec.kinds}, KV dtype {dt.name}"
                         + (f", tp={tp}" if tp > 1 else ""))
    for layer, count in memory.layer_groups(spec):
        line = _layer_line(layer, count, dt, tp, tokens, batch)
        if line:
            ex.text_lines.append("  " + line[0])
            ex.latex_lines.append(line[1])
        if layer.state_shapes:  # recurrent layers, and attention layers with a mixer beside (Falcon-H1)
            line = _state_line(layer, count, state_dtype)
            ex.text_lines.append("  " + line[0])
            ex.latex_lines.append(line[1])
    per_token = memory.bytes_per_token(spec, dt, tp)
    kv = memory.kv_bytes(spec, tokens, batch, dt, tp)
    state = memory.fixed_state_bytes(spec, batch, state_dtype)
    ex.text_lines.append(f"  M_token = {_n(per_token)} B ({units.format_bytes(per_token)}) per token per sequence")
    ex.text_lines.append(f"  KV at T={_n(tokens)}, B={batch}: {_n(kv)} B = {units.format_bytes(kv)}"
                         + (f"; + recurrent state {units.format_bytes(state)}" if state else ""))
    ex.text_lines.extend(f"  note: {n}" for n in spec_notes(spec))  # what leaves the cache unchanged
    ex.latex_lines.append(f"M_{{\\text{{token}}}} &= {_tex(per_token)}\\,\\text{{B}}")
    ex.latex_lines.append(f"M_{{\\text{{total}}}}(T={_tex(tokens)}, B={batch}) &= {_tex(kv + state)}\\,\\text{{B}}")
    return ex
