"""The papers' BLEU: multi-bleu on Moses-tokenized text, with compound splitting for German.

Vaswani et al. 2017 report BLEU as computed by tensor2tensor's ``get_ende_bleu.sh``: both sides
go through the Moses tokenizer (``tokenizer.perl -l de``), every hyphen between two non-space
characters is split off as ``##AT##-##AT##`` (so ``Fünf-Sterne-Hotel`` counts as five tokens),
and ``multi-bleu.perl`` scores the tokens as they are: cased, no smoothing. Luong et al. 2015
report the same kind ("tokenized BLEU"), and Bahdanau et al. 2015 tokenize with Moses too. Such
scores run about 1.5 BLEU above sacreBLEU for the same output (tensor2tensor issue 317) and are
not comparable with it; they are reported to compare with the papers' tables.

The Moses tokenizer is ``sacremoses``, the Python port of ``tokenizer.perl``; multi-bleu's
arithmetic is sacreBLEU's with tokenization and smoothing turned off.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sacrebleu.metrics import BLEU

# tensor2tensor's get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")


def split_compounds(text: str) -> str:
    """``Fünf-Sterne-Hotel`` -> ``Fünf ##AT##-##AT## Sterne ##AT##-##AT## Hotel``.

    Matches do not overlap, exactly as with Perl's ``s///g``: in ``a-b-c`` only the first
    hyphen is split, because ``b`` was used by the first match.
    """
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", text)


def papers_tokenize(sentences: Sequence[str], lang: str) -> list[str]:
    """Moses tokenization (escaping as ``tokenizer.perl`` does), and compound splitting for de."""
    # Imported here: loading sacremoses compiles its rules (0.2 s in every process that imports
    # evaluation), and only the papers' tokenized scores use it.
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    tokenized = [tokenizer.tokenize(sentence, return_str=True) for sentence in sentences]
    return [split_compounds(text) for text in tokenized] if lang == "de" else tokenized


def describe(lang: str) -> str:
    """A label for the score, saying how it was computed and what it compares with."""
    splitting = ", compound splitting (##AT##-##AT##)" if lang == "de" else ""
    return (
        f"multi-bleu on Moses-tokenized text (sacremoses, lang={lang}){splitting}, cased, "
        "no smoothing: the papers' kind of BLEU, not comparable with sacreBLEU"
    )


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lang: str
) -> dict[str, object]:
    """{"tok_bleu", "tok_bleu_method"}: corpus BLEU as the papers computed it.

    Args:
      hypotheses: detokenized system output, one sentence each.
      references: raw reference sentences, aligned with ``hypotheses``.
      lang: the target language code (``de`` turns on compound splitting).
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses for {len(references)} references; they must align"
        )
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    score = metric.corpus_score(
        papers_tokenize(hypotheses, lang), [papers_tokenize(references, lang)]
    )
    return {"tok_bleu": score.score, "tok_bleu_method": describe(lang)}
