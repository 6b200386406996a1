"""Translate a split (or any file) with a trained model and score it: what ``eval.py`` runs."""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Sequence
from pathlib import Path

from seq2seq import progress
from seq2seq.data.pipeline import load_pairs
from seq2seq.data.sources import resolve_split
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.evaluation import partial
from seq2seq.evaluation.bleu import bleu_by_source_length, chrf_score, sacrebleu_score
from seq2seq.evaluation.tokenized_bleu import tokenized_bleu
from seq2seq.evaluation.translator import LineTranslator, Sampling, Translations
from seq2seq.records import provenance
from seq2seq.records.run_directory import RunDirectory
from seq2seq.records.whole import write_whole
from seq2seq.runtime.compile_time import compiling
from seq2seq.vocabulary import UNK_ID


def score(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    target_lang: str,
    bucket_size: int,
    tokenizer: Tokenizer | None = None,
) -> dict[str, object]:
    """Every score of one set of translations (see ``eval.py`` for what each means); with the
    run's ``tokenizer``, a word vocabulary's score without unknown words too."""
    return {
        **sacrebleu_score(hypotheses, references, target_lang),
        **chrf_score(hypotheses, references),
        **tokenized_bleu(hypotheses, references, target_lang),
        "n": len(hypotheses),
        "bleu_by_source_length": bleu_by_source_length(
            sources, hypotheses, references, bucket_size, target_lang
        ),
        **no_unk_score(tokenizer, sources, hypotheses, references, target_lang),
    }


def no_unk_score(
    tokenizer: Tokenizer | None,
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    target_lang: str,
) -> dict[str, object]:
    """Bahdanau et al.'s second column of Table 1: sacreBLEU over the sentences with no
    unknown word in the source or the reference (``bleu_no_unk``, ``n_no_unk`` of them).

    Only a word vocabulary has unknown words (a subword one spells any word), so for any other
    the result is empty and the first column is the only one.
    """
    if tokenizer is None or tokenizer.source_words is None or tokenizer.target_words is None:
        return {}
    known = [
        UNK_ID not in source and UNK_ID not in reference
        for source, reference in zip(
            tokenizer.encode_source(sources), tokenizer.encode_target(references), strict=True
        )
    ]
    kept = [i for i, all_known in enumerate(known) if all_known]
    bleu = (
        sacrebleu_score([hypotheses[i] for i in kept], [references[i] for i in kept], target_lang)
        if kept
        else {"bleu": None}
    )
    return {"bleu_no_unk": bleu["bleu"], "n_no_unk": len(kept)}


def decoding_facts(translator: LineTranslator) -> dict[str, object]:
    """How ``translator`` decodes, for the result's JSON."""
    decode = translator.config.decode
    facts: dict[str, object] = {
        "checkpoint": translator.describe_checkpoint(),
        "beam_size": decode.beam_size,
        "alpha": decode.alpha,
        "batch_size": translator.config.eval.batch_size,
    }
    facts["engine"] = getattr(translator, "engine_name", "jax")
    if len(translator.members) > 1:
        facts["ensemble"] = [member.name for member in translator.members]
    if translator.nbest is not None:
        facts["nbest"] = translator.nbest
    if translator.sampling is not None:  # drawn, not searched: no beam and no length penalty
        del facts["beam_size"], facts["alpha"]
        sampling = translator.sampling
        facts["sampling"] = f"{sampling.method.kind}:{sampling.method.value}"
        facts["temperature"], facts["seed"] = sampling.temperature, sampling.seed
    return facts


def _translate(
    translator: LineTranslator, sources: Sequence[str], output: Path
) -> tuple[Translations, dict]:
    """All of ``sources`` translated, with the facts of the decoding. Finished pieces are kept
    beside ``output`` until the caller has written it (``partial``): a rerun after Ctrl-C goes
    on from them, and its speed counts the sentences it translated."""
    facts = decoding_facts(translator)
    start = time.monotonic()
    with (
        compiling() as compile_time,
        progress.bar(len(sources), "sentence", "translating", lines=True) as bar,
    ):
        translations, resumed = partial.translate_keeping(
            translator, sources, partial.side_file(output), facts, bar.update
        )
    seconds = time.monotonic() - start
    decoding = max(seconds - compile_time.seconds, 1e-9)  # a new shape compiles; it is not speed
    facts |= {
        "truncated_inputs": len(translations.truncated),
        "truncated_lines": [i + 1 for i in translations.truncated],  # 1-based line numbers
        "max_input_length": translator.config.decode.max_input_length,
        "capped_outputs": len(translations.capped),
        "capped_lines": [i + 1 for i in translations.capped],  # 1-based line numbers
        "max_extra_length": translator.config.decode.max_extra_length,
        "decode_seconds": seconds,
        "compile_seconds": compile_time.seconds,  # within decode_seconds
        "sentences_per_second": (len(sources) - resumed) / decoding,
    }
    if resumed:
        facts["resumed_sentences"] = resumed  # read back from an interrupted run's pieces
    return translations, facts


def nbest_lines(translations: Translations, first_index: int = 0) -> list[str]:
    """``INDEX<TAB>SCORE<TAB>HYPOTHESIS`` per hypothesis, INDEX the 0-based input line, each
    sentence's hypotheses best first (the n-best format of Marian and fairseq, tab-separated)."""
    return [
        f"{first_index + i}\t{score:.6f}\t{hypothesis}"
        for i, entries in enumerate(translations.nbest)
        for score, hypothesis in entries
    ]


def decoding_label(
    checkpoint: str, ensemble_with: Sequence[Path] = (), sampling: Sampling | None = None
) -> str:
    """The rule a split's scores are filed under: the checkpoint rule, with the ensemble's other
    runs and the sampling settings appended, so no decoding overwrites another's scores."""
    label = checkpoint
    if ensemble_with:
        label += "-ensemble-" + "-".join(Path(other).name for other in ensemble_with)
    if sampling is not None:
        method = sampling.method
        label += f"-{method.kind}{method.value}-T{sampling.temperature}-seed{sampling.seed}"
    return label.replace(".", "_")


def _write_lines(path: Path, lines: Sequence[str], whole: bool = False) -> None:
    """``lines`` as ``path``; ``whole``: there whole or not at all (a file of the run's, that
    later commands read; not ``--output``, which may be a device such as /dev/stdout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    if whole:
        write_whole(path, text)
    else:
        path.write_text(text, encoding="utf-8")


def read_lines(path: Path, what: str = "input") -> list[str]:
    """One sentence per line (``\\n`` only: other line separators stay inside sentences).

    Raises:
      FileNotFoundError: no file at ``path``.
      ValueError: one line naming the file and the line that is not UTF-8.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no {what} file at {path}")
    raw = path.read_bytes().removeprefix(codecs.BOM_UTF8)  # an editor's mark, not text
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{what} file {path} line {line} is not UTF-8 ({error.reason}); convert the file to "
            "UTF-8"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


def evaluate(
    translator: LineTranslator,
    run: RunDirectory,
    split: str | None = None,
    *,
    filed_as: str,
    max_sentences: int | None = None,
    variant: Sequence[str] = (),
) -> dict[str, object]:
    """Translates ``split`` (default: the config's test split) with ``translator``, scores it
    and files the translations and scores in ``run``.

    ``split`` is a role (``train``, ``validation``, ``test``: the splits of the translator's
    config) or a split's own name or file stem (``test_2016_flickr``). Writes
    ``eval/SPLIT.hyp.txt`` (line i translates source line i) and ``eval/SPLIT.json``, SPLIT being
    the split's own name, under the checkpoint rule ``filed_as``: the rule the translator's
    checkpoint was chosen by (``eval.py --checkpoint``; the comparison's ``best`` for the step it
    resolved to). Under any rule but ``latest`` the files are ``eval/SPLIT@RULE.*``
    (``RunDirectory``), so scoring one run by two rules keeps both; an ensemble, sampling and
    another engine add to the name (``decoding_label``). ``max_sentences`` scores only the first
    N pairs (quick looks and tests; recorded). ``variant``: what else sets these scores apart
    from the run's own, added to their name (``eval.py``'s ``beam1``, ``alpha0_6`` against the
    run's decoding, ``corpus-NAME`` for another corpus's folder), so that they never overwrite
    or stand in for them.
    """
    config = translator.config
    split = resolve_split(config.data, split or "test")
    pairs = load_pairs(config, split)[:max_sentences]
    sources = [source for source, _ in pairs]
    hypotheses_file, scores_file = filed_in(translator, run, split, filed_as, variant)
    translations, facts = _translate(translator, sources, hypotheses_file)
    hypotheses = translations.hypotheses
    result = {
        **score(
            sources,
            hypotheses,
            [target for _, target in pairs],
            target_lang=config.data.tgt_lang,
            bucket_size=config.eval.length_bucket_size,
            tokenizer=getattr(translator, "tokenizer", None),
        ),
        "split": split,
        # the folder the split was read from (``eval.py --data_dir``, or the run's own)
        "data_dir": str(Path(config.data.dir).resolve()) if config.data.dir else None,
        "max_sentences": max_sentences,
        **facts,
        "provenance": provenance.for_evaluation(run),
    }
    # Each file whole or not at all, and no old scores beside new hypotheses: an interrupted
    # write left a cut JSON that failed the run in every later comparison.
    scores_file.unlink(missing_ok=True)
    _write_lines(hypotheses_file, hypotheses, whole=True)
    write_whole(scores_file, json.dumps(result, indent=2) + "\n")
    partial.forget(partial.side_file(hypotheses_file))
    return result


def filed_in(
    translator: LineTranslator,
    run: RunDirectory,
    split: str,
    filed_as: str,
    variant: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Where ``evaluate`` files a split's translations and its scores (``eval/SPLIT.hyp.txt``
    and ``eval/SPLIT.json`` under ``latest``; the rule, decoding label and ``variant`` name the
    others: ``eval/SPLIT@best-beam1.json``, ``eval/SPLIT-corpus-NAME.json``)."""
    ensemble_with = [Path(member.name) for member in translator.members[1:]]
    rule = decoding_label(filed_as, ensemble_with, translator.sampling)
    rule += getattr(translator, "label", "")
    rule += "".join(f"-{part}".replace(".", "_") for part in variant)
    return run.hypotheses_file(split, rule), run.eval_result_file(split, rule)


def translate_file(
    translator: LineTranslator,
    input_path: Path,
    output_path: Path,
    *,
    reference_path: Path | None = None,
) -> dict[str, object]:
    """Translates ``input_path`` line by line into ``output_path``; scores it given references.

    With the translator's ``nbest`` the output holds ``nbest_lines`` and references score each
    first hypothesis.
    """
    sources = read_lines(input_path)
    references = read_lines(reference_path, "reference") if reference_path else None
    if references is not None and len(references) != len(sources):
        raise ValueError(
            f"{reference_path} has {len(references)} lines but {input_path} has {len(sources)}; "
            "a reference file must align line by line with the input"
        )
    translations, facts = _translate(translator, sources, output_path)
    hypotheses = translations.hypotheses
    _write_lines(output_path, nbest_lines(translations) if translator.nbest else hypotheses)
    partial.forget(partial.side_file(output_path))
    result: dict[str, object] = {"input": str(input_path), "output": str(output_path)}
    if references is not None:
        config = translator.config
        result.update(
            score(
                sources,
                hypotheses,
                references,
                target_lang=config.data.tgt_lang,
                bucket_size=config.eval.length_bucket_size,
                tokenizer=getattr(translator, "tokenizer", None),
            )
        )
    else:
        result["n"] = len(hypotheses)
    return {**result, **facts}


def format_report(result: dict[str, object]) -> str:
    """The scores as a few readable lines (the JSON line follows them in ``eval.py``)."""
    what = result.get("split") or result.get("input")
    compiling = result.get("compile_seconds") or 0.0
    if "sampling" in result:  # the beam is not searched
        decoding = (
            f"sampling {result['sampling']}, temperature {result['temperature']:g}, "
            f"seed {result['seed']}"
        )
    else:
        decoding = f"beam {result['beam_size']}, alpha {result['alpha']}"
    jax_compiled = result.get("engine", "jax") == "jax" and compiling >= 0.05
    first = "the first " if result.get("max_sentences") == result["n"] else ""  # a part
    lines = [
        f"{what}: {first}{_count(result['n'], 'sentence')}, {decoding}, {result['checkpoint']}, "
        f"{result['decode_seconds']:.1f} s"
        + (f" ({compiling:.1f} s of it compiling)" if jax_compiled else "")
    ]
    if result["truncated_inputs"]:
        lines.append(
            f"  {_count(result['truncated_inputs'], 'input')} over "
            f"{result['max_input_length']} tokens cut to fit (see truncated_lines)"
        )
    if result.get("capped_outputs"):
        lines.append(
            f"  {_count(result['capped_outputs'], 'translation')} stopped at the output cap "
            f"(input length + {result['max_extra_length']} tokens) before the model ended it: "
            "cut off, not finished (see capped_lines)"
        )
    if "bleu" in result:
        lines += [
            f"  sacreBLEU       {result['bleu']:6.2f}  {result['signature']}",
            f"  chrF2           {result['chrf']:6.2f}  {result['chrf_signature']}",
            f"  tokenized BLEU  {result['tok_bleu']:6.2f}  {result['tok_bleu_method']}",
            *_no_unk_line(result),
            "  sacreBLEU by source length (words): "
            + ", ".join(
                f"{row['min_words']}-{row['max_words']}: {row['bleu']:.1f} (n={row['n']})"
                for row in result["bleu_by_source_length"]
            ),
        ]
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    """``1 sentence``, ``3 sentences``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _no_unk_line(result: dict[str, object]) -> list[str]:
    if "n_no_unk" not in result:
        return []
    n, bleu = result["n_no_unk"], result["bleu_no_unk"]
    shown = f"{bleu:6.2f}" if bleu is not None else "     -"
    return [
        f"  no-UNK BLEU     {shown}  on the {n} of {result['n']} sentences without a word "
        "outside the shortlists in source or reference (Bahdanau et al.'s Table 1)"
    ]
