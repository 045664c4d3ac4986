"""Speculative decoding measured: real draft and target models, every draft length, checked against greedy.

Contract
- :func:`speculation_sweep`: :func:`kvsim.decode.speculative_generate` for every draft model and
  draft length k, each compared with plain greedy decoding of the target (:class:`SpeculationRun`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..calc.progress import Progress
from ..decode import Speculation, generate, speculative_generate


@dataclass(frozen=True)
class SpeculationRun:
    """One speculative decode: which draft, how many tokens it proposed per round, the result."""

    draft: str
    num_draft: int
    result: Speculation
    same_as_greedy: bool

    def row(self) -> dict:
        r = self.result
        return {"draft": self.draft, "k": self.num_draft, "proposed": r.proposed, "accepted": r.accepted,
                "acceptance rate": round(r.acceptance_rate, 3), "target passes": r.rounds,
                "tokens per pass": round(len(r.tokens) / r.rounds, 2),
                "target positions fed": r.target_positions_fed, "= greedy": self.same_as_greedy}


def speculation_sweep(target, drafts: dict, prompt, max_new_tokens: int = 48, ks=(1, 2, 3, 4, 6, 8),
                      progress: bool = True) -> list[SpeculationRun]:
    """Speculative decoding for every {label: draft model} and k, each compared with greedy decoding."""
    greedy = generate(target, prompt, max_new_tokens, trace=False).tokens
    runs = []
    with Progress(total=len(drafts) * len(ks), desc="speculative decode", unit="runs", enabled=progress) as bar:
        for label, draft in drafts.items():
            for k in ks:
                res = speculative_generate(target, draft, prompt, max_new_tokens, num_draft=k)
                runs.append(SpeculationRun(label, k, res, res.tokens == greedy))
                bar.update(1)
    return runs
