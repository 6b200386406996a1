"""sacreBLEU (Post 2018): BLEU and chrF of detokenized, cased output, and BLEU by source length.

These are the comparable numbers: sacreBLEU's signature pins down the tokenization and settings,
so two results with the same signature can be compared. The papers' own (tokenized) BLEU is in
``seq2seq.evaluation.tokenized_bleu``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF


def _check_aligned(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses for {len(references)} references; they must align"
        )


def bleu_metric(target_lang: str = "") -> BLEU:
    """sacreBLEU's BLEU as it scores text in ``target_lang`` by default: cased, with the
    tokenizer sacreBLEU picks for that language (13a for English, German and French; its own
    for Chinese, Japanese and Korean). The signature names the tokenizer."""
    return BLEU(trg_lang=target_lang or "")


def sacrebleu_score(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str = ""
) -> dict[str, object]:
    """{"bleu", "signature"}: corpus BLEU with sacreBLEU's defaults for the target language."""
    _check_aligned(hypotheses, references)
    metric = bleu_metric(target_lang)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": score.score, "signature": str(metric.get_signature())}


def chrf_score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, object]:
    """{"chrf", "chrf_signature"}: chrF2 (Popovic 2015), character 6-grams, with sacreBLEU."""
    _check_aligned(hypotheses, references)
    metric = CHRF()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"chrf": score.score, "chrf_signature": str(metric.get_signature())}


def bleu_by_source_length(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    bucket_size: int,
    target_lang: str = "",
) -> list[dict[str, object]]:
    """sacreBLEU of sentences grouped by source length in words (Bahdanau et al. 2015, Fig. 2).

    Bucket ``k`` holds sources of ``k * bucket_size + 1`` to ``(k + 1) * bucket_size`` words
    (an empty source falls in the first); empty buckets are left out.

    Returns:
      One {"min_words", "max_words", "n", "bleu"} per bucket, shortest first.
    """
    _check_aligned(sources, hypotheses)
    _check_aligned(hypotheses, references)
    buckets: dict[int, list[int]] = {}
    for index, source in enumerate(sources):
        words = len(source.split())
        buckets.setdefault(max(words - 1, 0) // bucket_size, []).append(index)
    rows = []
    for bucket in sorted(buckets):
        members = buckets[bucket]
        score = sacrebleu_score(
            [hypotheses[i] for i in members], [references[i] for i in members], target_lang
        )
        rows.append(
            {
                "min_words": bucket * bucket_size + 1,
                "max_words": (bucket + 1) * bucket_size,
                "n": len(members),
                "bleu": score["bleu"],
            }
        )
    return rows
