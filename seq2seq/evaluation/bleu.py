"""Corpus BLEU with sacreBLEU (Post 2018): detokenized, cased output against raw references."""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU


def sacrebleu_score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, object]:
    """{"bleu": float, "signature": str}, sacreBLEU's defaults (13a tokenization, cased)."""
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses for {len(references)} references; they must align"
        )
    metric = BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": score.score, "signature": str(metric.get_signature())}
