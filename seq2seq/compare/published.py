"""Published BLEU on Multi30k's test_2016_flickr, to read this project's scores beside.

None of these is the measurement the records make (cased, detokenized sacreBLEU with the target
language's default tokenizer, 13a for English, German and French): most papers on Multi30k
lowercase and Moses-tokenize the text and score it with multi-bleu, which raises BLEU by
several points on these captions; the OPUS-MT rows are the one kind scored as here, by models
trained on far more than Multi30k. Each entry says how its number was made. Where an entry's
casing was not stated by its source, it says so.
"""

from __future__ import annotations

from typing import NamedTuple


class Published(NamedTuple):
    direction: str  # "en->de"
    system: str
    bleu: float
    scoring: str  # casing and tokenization, as the source states them
    data: str  # what the system trained on
    source: str  # the citation


PUBLISHED = (
    Published(
        "en->de",
        "Transformer-Tiny, text-only",
        41.02,
        "lowercased, Moses-tokenized (fairseq's BLEU), beam 5, last 10 checkpoints averaged",
        "Multi30k",
        "Wu et al. (2021), ACL, the text-only baseline as their repository reproduces it",
    ),
    Published(
        "en->de",
        "Transformer, text-only",
        38.3,
        "lowercased, checkpoints averaged",
        "Multi30k",
        "Helcl, Libovický and Variš (2018), WMT, Table 3",
    ),
    Published(
        "en->de",
        "attentive GRU (Bahdanau et al.)",
        35.5,
        "lowercased, tokenized; German decompounded",
        "Multi30k",
        "Elliott and Kádár (2017), IJCNLP, Table 2",
    ),
    Published(
        "en->de",
        "attentive RNN, text-only",
        33.7,
        "cased, tokenized",
        "Multi30k",
        "Calixto, Liu and Campbell (2017), ACL, Table 1",
    ),
    Published(
        "en->de",
        "OPUS-MT en-de (2020-02-26)",
        36.3,
        "cased, detokenized sacreBLEU, 13a (as here)",
        "OPUS, far beyond Multi30k",
        "Helsinki-NLP OPUS-MT leaderboard",
    ),
    Published(
        "en->fr",
        "Transformer, text-only",
        59.7,
        "lowercased, checkpoints averaged",
        "Multi30k",
        "Helcl, Libovický and Variš (2018), WMT, Table 3",
    ),
    Published(
        "en->fr",
        "attentive RNN (Bahdanau et al.)",
        57.15,
        "lowercased, tokenized",
        "Multi30k",
        "Hirasawa and Komachi (2019), arXiv:1905.10464, Table 4",
    ),
    Published(
        "en->fr",
        "opus-mt-tc-big-en-fr",
        52.4,
        "cased, detokenized sacreBLEU, 13a (as here)",
        "OPUS and back-translations, far beyond Multi30k",
        "Helsinki-NLP OPUS-MT leaderboard",
    ),
    Published(
        "de->en",
        "OPUS-MT de-en (2020-02-26)",
        39.7,
        "cased, detokenized sacreBLEU, 13a (as here)",
        "OPUS, far beyond Multi30k",
        "Helsinki-NLP OPUS-MT leaderboard",
    ),
    Published(
        "de->en",
        "Facebook's WMT19 de-en (Ng et al., 2019)",
        42.4,
        "cased, detokenized sacreBLEU, 13a (as here)",
        "WMT19 news data and back-translations",
        "Helsinki-NLP External-MT leaderboard",
    ),
)


def published_for(direction: str) -> list[Published]:
    """The entries of one direction, best first."""
    return sorted((p for p in PUBLISHED if p.direction == direction), key=lambda p: -p.bleu)


def published_section(directions: list[str]) -> list[str]:
    """Markdown lines: each direction's published results, or a line saying none is listed."""
    lines = [
        "## Published results on test_2016_flickr, for orientation",
        "",
        "Not the same measurement: most papers lowercase and tokenize before scoring, which "
        'raises BLEU on these captions; only the rows marked "as here" are scored like the '
        "table above (and they come from models trained on far more data).",
        "",
    ]
    for direction in directions:
        entries = published_for(direction)
        if not entries:
            lines += [f"- {direction}: no published test_2016_flickr result is listed.", ""]
            continue
        alone = any(p.data == "Multi30k" for p in entries)
        lines.append(f"- {direction}:" + ("" if alone else " (none trained on Multi30k alone)"))
        lines += [
            f"  - {p.bleu:g}: {p.system}; {p.scoring}; trained on {p.data}; {p.source}"
            for p in entries
        ]
        lines.append("")
    return lines
