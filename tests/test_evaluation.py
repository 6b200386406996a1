"""Scores equal sacreBLEU and hand computation; eval.py keeps every line in order, blank ones
blank, and opens a run once; averaging."""

from __future__ import annotations

import importlib.metadata
import io
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import ml_collections
import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import CheckpointError
from seq2seq.checkpoints.store import Checkpoints, IncompatibleCheckpointError
from seq2seq.data import synthetic
from seq2seq.data.pipeline import load_pairs
from seq2seq.data.tokenizer import load_tokenizer
from seq2seq.decoding.sampling import SamplingMethod
from seq2seq.evaluation import partial, processes, restore
from seq2seq.evaluation.averaging import write_averaged_run
from seq2seq.evaluation.bleu import bleu_by_source_length
from seq2seq.evaluation.evaluate import (
    evaluate,
    format_report,
    nbest_lines,
    read_lines,
    translate_file,
)
from seq2seq.evaluation.restore import choose_checkpoints, restore_model
from seq2seq.evaluation.stream import line_batches, translate_stream
from seq2seq.evaluation.tokenized_bleu import papers_tokenize, split_compounds, tokenized_bleu
from seq2seq.evaluation.translator import (
    LineTranslator,
    Sampling,
    Translations,
    Translator,
    truncate_source,
)
from seq2seq.records import provenance
from seq2seq.records.run_directory import RunDirectory
from seq2seq.report.alignment import cross_attention
from seq2seq.training.trainer import create_state, train
from seq2seq.vocabulary import EOS_ID
from tests.conftest import REPO, Terminal, subprocess_env, tiny_config

# -- the papers' tokenized BLEU -------------------------------------------------------------


def test_tokenized_bleu_matches_a_hand_computed_case():
    hypotheses = ["Der Hund bellt.", "Ein Fünf-Sterne-Hotel, bitte."]
    references = ["Der Hund bellt laut.", "Ein Vier-Sterne-Hotel, bitte."]
    # Moses splits off "." and ","; compound splitting turns each "-" into "##AT##-##AT##" (@):
    #   hyp 1: Der Hund bellt .                      ref 1: Der Hund bellt laut .
    #   hyp 2: Ein Fünf @ Sterne @ Hotel , bitte .   ref 2: Ein Vier @ Sterne @ Hotel , bitte .
    # Matches / n-grams, sentence 1 + sentence 2:
    #   1-grams: 4/4 + 8/9 ("Fünf" misses)
    #   2-grams: 2/3 ("bellt ." misses) + 6/8 ("Ein Fünf", "Fünf @" miss)
    #   3-grams: 1/2 + 5/7
    #   4-grams: 0/1 + 4/6
    precisions = [12 / 13, 8 / 11, 6 / 9, 4 / 7]
    brevity_penalty = math.exp(1 - 14 / 13)  # 13 hypothesis tokens, 14 reference tokens
    expected = 100 * brevity_penalty * math.exp(sum(math.log(p) for p in precisions) / 4)
    result = tokenized_bleu(hypotheses, references, "de")
    assert result["tok_bleu"] == pytest.approx(expected, rel=1e-9)
    assert "compound splitting" in result["tok_bleu_method"]


def test_compound_splitting_is_perl_s_non_overlapping_substitution():
    assert split_compounds("Fünf-Sterne-Hotel") == "Fünf ##AT##-##AT## Sterne ##AT##-##AT## Hotel"
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"  # "b" went to the first match
    assert split_compounds("Juni - Juli") == "Juni - Juli"


def test_only_german_targets_are_compound_split():
    assert papers_tokenize(["E-Mail."], "de") == ["E ##AT##-##AT## Mail ."]
    assert papers_tokenize(["e-mail."], "en") == ["e-mail ."]


# -- BLEU by source length ------------------------------------------------------------------


def test_bleu_by_source_length_groups_sentences_by_source_words():
    sources = ["one two three", " ".join(["w"] * 10), " ".join(["w"] * 11), "", "x " * 25]
    hypotheses = ["a b c d", "a b c", "d e f g h", "a", "p q r s t"]
    references = ["a b c d", "a b x", "d e f g", "b", "p q r s t u"]
    rows = bleu_by_source_length(sources, hypotheses, references, bucket_size=10)
    assert [(r["min_words"], r["max_words"], r["n"]) for r in rows] == [
        (1, 10, 3),
        (11, 20, 1),
        (21, 30, 1),
    ]
    first = BLEU().corpus_score(
        [hypotheses[i] for i in (0, 1, 3)], [[references[i] for i in (0, 1, 3)]]
    )
    assert rows[0]["bleu"] == pytest.approx(first.score)


# -- inputs ---------------------------------------------------------------------------------


class _TimedEcho:
    """A translator that echoes its lines, each taking ``seconds_per_line`` on a fake clock,
    and notes the size of each call (a piece)."""

    def __init__(self, batch_size: int, seconds_per_line: float):
        self.config = ml_collections.ConfigDict({"eval": {"batch_size": batch_size},
                                                 "decode": {"beam_size": 4}})  # fmt: skip
        self.seconds_per_line, self.now, self.sizes = seconds_per_line, 0.0, []

    def translate(self, lines, first_index=0, progress=None):
        self.now += self.seconds_per_line * len(lines)
        self.sizes.append(len(lines))
        return Translations(list(lines), [], [[] for _ in lines])


@pytest.mark.parametrize(
    ("seconds_per_line", "sizes"),
    [
        (0.01, [8, 16, 32, 64, 128, 128, 128, 96]),  # doubles to the largest piece, 16 batches
        (1.0, [8, 16, 32, 32, 32, 32]),  # 32 s a piece: between half a minute and one
        (10.0, [8] * 17),  # over a minute for one batch: one batch at a time
    ],
)
def test_pieces_grow_from_one_batch_while_they_take_under_half_a_minute(
    tmp_path, monkeypatch, seconds_per_line, sizes
):
    """Pieces of 16 batches were all a slow model's Ctrl-C could lose: minutes on a CPU."""
    translator = _TimedEcho(8, seconds_per_line)
    monkeypatch.setattr(partial, "clock", lambda: translator.now)
    sources = [f"line {i}" for i in range(sum(sizes))]
    side = tmp_path / "out.txt.partial"
    found, resumed = partial.translate_keeping(translator, sources, side, {}, lambda n: None)
    assert translator.sizes == sizes and resumed == 0 and found.hypotheses == sources
    kept = [json.loads(line) for line in side.read_text().splitlines()[1:]]
    assert [len(piece["hypotheses"]) for piece in kept] == sizes


def test_a_side_file_cut_off_in_its_first_line_starts_afresh(tmp_path):
    """Ctrl-C while the name line was written left a file that failed the rerun."""
    translator = _TimedEcho(8, 0.0)
    side = tmp_path / "out.txt.partial"
    side.write_text('{"translat', encoding="utf-8")
    sources = [f"line {i}" for i in range(200)]
    found, resumed = partial.translate_keeping(translator, sources, side, {}, lambda n: None)
    assert resumed == 0 and found.hypotheses == sources
    assert json.loads(side.read_text().splitlines()[0])["translates"]


class _StoppedEcho(_TimedEcho):
    """A ``_TimedEcho`` that a Ctrl-C stops after ``pieces`` finished pieces."""

    def __init__(self, pieces: int):
        super().__init__(8, 0.0)
        self.pieces = pieces

    def translate(self, lines, first_index=0, progress=None):
        if len(self.sizes) == self.pieces:
            raise KeyboardInterrupt
        return super().translate(lines, first_index, progress)


def test_pieces_kept_after_a_piece_cut_off_mid_line_are_read_back(tmp_path, monkeypatch):
    """A SIGKILL after SIGTERM's grace (or a full disk) cut a piece off mid-line; the rerun
    kept the pieces before it but appended its own after the cut line, where the next rerun
    could read none of them: each rerun translated them again."""
    monkeypatch.setattr(partial, "clock", lambda: 0.0)  # pieces of 8, 16, 32, ... sentences
    sources, side = [f"line {i}" for i in range(200)], tmp_path / "out.txt.partial"
    with pytest.raises(KeyboardInterrupt):
        partial.translate_keeping(_StoppedEcho(3), sources, side, {}, lambda n: None)
    with side.open("a", encoding="utf-8") as kept:
        kept.write('{"hypotheses": ["line 24", "li')  # the fourth piece, cut off
    with pytest.raises(KeyboardInterrupt):
        partial.translate_keeping(_StoppedEcho(2), sources, side, {}, lambda n: None)
    last = _TimedEcho(8, 0.0)
    found, resumed = partial.translate_keeping(last, sources, side, {}, lambda n: None)
    assert resumed == (8 + 16 + 32) + (8 + 16) and sum(last.sizes) == 200 - resumed
    assert found.hypotheses == sources


def test_read_lines_keeps_empty_lines_and_splits_on_newlines_only(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("first\r\n\nthird has a \u2028 inside\nlast without newline", encoding="utf-8")
    assert read_lines(path) == ["first", "", "third has a \u2028 inside", "last without newline"]
    with pytest.raises(FileNotFoundError, match="no input file at"):
        read_lines(tmp_path / "missing.txt")


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    """Files saved by some Windows editors start with one: it made the first line another
    sentence, and moved BLEU (95.94 -> 95.85 on 100 quickstart test sentences)."""
    path = tmp_path / "input.txt"
    path.write_bytes("\ufeffein Hund\r\n\ufeffzwei\r\n".encode())
    assert read_lines(path) == ["ein Hund", "\ufeffzwei"]  # only the file's first character
    read, write = os.pipe()
    os.write(write, path.read_bytes())
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        assert list(line_batches(stream, batch_size=8)) == [["ein Hund", "\ufeffzwei"]]


def test_a_line_that_is_not_utf8_is_named_by_its_number(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(b"first\nsecond \xff\nthird\n")
    with pytest.raises(ValueError, match=r"^input file .*input.txt line 2 is not UTF-8 \("):
        read_lines(path)
    # a stream: the lines before it are handed over first, however the input arrives
    for tail in (b"\nthird\n", b""):
        read, write = os.pipe()
        os.write(write, b"first\nsecond \xff" + tail)
        os.close(write)
        with os.fdopen(read, "rb") as stream:
            batches = line_batches(stream, batch_size=8)
            assert next(batches) == ["first"]
            with pytest.raises(ValueError, match=r"^standard input line 2 is not UTF-8"):
                next(batches)


def test_a_stream_counts_the_lines_it_wrote_whole_before_a_ctrl_c(tmp_path):
    """A Ctrl-C that cut a batch's write short (a slowly read pipe) left a translation cut off
    mid-line, while the command said "the lines translated so far were written"."""
    from seq2seq.evaluation.stream import Written

    class Echo:
        config = ml_collections.ConfigDict({"eval": {"batch_size": 3}})
        nbest = 0

        def translate(self, lines, first_index=0):
            return Translations([line.upper() for line in lines], [], [[] for _ in lines])

    class CutShort(io.StringIO):
        def write(self, text):  # the second batch: half of it out, then the Ctrl-C
            if self.getvalue():
                super().write(text[: len(text) // 2])
                raise KeyboardInterrupt
            return super().write(text)

    read, write = os.pipe()
    os.write(write, "".join(f"line {i}\n" for i in range(6)).encode())
    os.close(write)
    written, output = Written(), CutShort()
    with os.fdopen(read, "rb") as stream, pytest.raises(KeyboardInterrupt):
        translate_stream(Echo(), stream, output, written)
    assert (written.lines, written.upto) == (3, 6)
    assert output.getvalue().startswith("LINE 0\nLINE 1\nLINE 2\nLI")


def test_a_truncated_input_still_ends_with_eos():
    ids = np.array([5, 6, 7, 8, EOS_ID], np.int32)
    np.testing.assert_array_equal(truncate_source(ids, 3), [5, 6, EOS_ID])
    np.testing.assert_array_equal(truncate_source(ids, 5), ids)


BLANKS = ["", "   ", "\t", " \u00a0 "]  # empty, spaces, a tab, a no-break space


class _Echo(LineTranslator):
    """An engine that says which sentence number it saw: ``"N:line"``, and cuts "long" ones."""

    def __init__(self):
        self.seen: list[str] = []

    def translate_sentences(self, sentences, numbers, progress):
        self.seen += sentences
        outputs = [f"{number}:{line}" for line, number in zip(sentences, numbers, strict=True)]
        truncated = [i for i, line in enumerate(sentences) if line == "long"]
        for start in range(0, len(sentences), 2):  # in batches of two
            progress(len(sentences[start : start + 2]))
        return Translations(outputs, truncated, [[(-1.0, output)] for output in outputs])


def test_blank_lines_are_never_decoded_and_leave_every_other_line_in_place():
    lines = ["a", BLANKS[0], "long", BLANKS[1], BLANKS[2], "b", BLANKS[3]]
    engine = _Echo()
    translations = engine.translate(lines, first_index=10)
    assert engine.seen == ["a", "long", "b"]
    assert translations.hypotheses == ["10:a", "", "12:long", "", "", "15:b", ""]
    assert translations.truncated == [2]  # an index into ``lines``, not into the decoded ones
    assert [len(entries) for entries in translations.nbest] == [1, 0, 1, 0, 0, 1, 0]
    assert nbest_lines(translations, first_index=10) == [
        "10\t-1.000000\t10:a", "12\t-1.000000\t12:long", "15\t-1.000000\t15:b",
    ]  # fmt: skip
    engine.seen = []
    assert engine.translate(BLANKS).hypotheses == [""] * len(BLANKS) and engine.seen == []


def test_progress_counts_blank_lines_at_once_and_sentences_batch_by_batch():
    lines = ["a", BLANKS[0], "b", "c", BLANKS[1], "d", "e"]
    told = []
    _Echo().translate(lines, progress=told.append)
    assert told == [2, 2, 2, 1]  # the two blank lines, then batches of two of the five others
    told = []
    _Echo().translate(BLANKS, progress=told.append)
    assert told == [len(BLANKS)]


@pytest.mark.parametrize(
    ("mine", "count", "told"),
    [
        (3, 8, [2, 3, 3]),  # each of this process's 3 stands for 8 / 3, the last ends the whole
        (4, 4, [1, 1, 1, 1]),  # one process: its own count
        (2, 7, [3, 4]),
    ],
)
def test_a_process_s_share_of_progress_is_counted_as_the_whole(mine, count, told):
    seen = []
    update = processes.whole_progress(seen.append, mine, count)
    for _ in range(mine):
        update(1)
    assert seen == told and sum(seen) == count


def test_a_process_with_no_sentences_tells_the_whole_at_once():
    seen = []
    processes.whole_progress(seen.append, 0, 5)(0)
    assert seen == [5]


# -- choosing and averaging checkpoints -----------------------------------------------------


def test_checkpoint_choices(tmp_path):
    steps = [10, 30, 20]
    assert choose_checkpoints("latest", steps, tmp_path).steps == (30,)
    assert choose_checkpoints("20", steps, tmp_path).steps == (20,)
    assert choose_checkpoints("average:2", steps, tmp_path).steps == (20, 30)
    for spec, message in [
        ("15", "no checkpoint at step 15 .*saved steps: 10, 20, 30"),
        # a short run, not a small checkpoint.keep: it said "raise config.checkpoint.keep"
        ("average:4", "needs the last 4 .* holds 3 .*; lower K, or give the run more saves"),
        ("avg:2", "not understood"),
        ("average:0", "averages no checkpoint; K must be at least 1"),
    ]:
        with pytest.raises(CheckpointError, match=message):
            choose_checkpoints(spec, steps, tmp_path)
    with pytest.raises(CheckpointError, match="holds no trained model yet .* train first"):
        choose_checkpoints("latest", [], tmp_path)


def test_a_committed_record_says_it_keeps_no_model_instead_of_train_first():
    """``eval.py --workdir docs/records/...``: the run trained, its record kept no model."""
    record = REPO / "docs" / "records" / "multi30k_frontier_tuned" / "transformer-small-seed0"
    run = RunDirectory(record)
    said = (
        f"{record} is a run's record (config, metrics and scores, with no tokenizer or "
        "checkpoints); read its scores in eval/, or train the run again to translate with it"
    )
    with pytest.raises(FileNotFoundError) as error:
        restore.load_run_tokenizer(run)
    assert str(error.value) == said
    with pytest.raises(CheckpointError) as error:
        choose_checkpoints("average:5", [], record)
    assert str(error.value) == said


def test_averaging_leaves_out_an_old_best_checkpoint(tmp_path):
    # keep=2: the newest two (40, 50) plus the best validated one, step 10.
    steps = [10, 40, 50]
    assert choose_checkpoints("average:2", steps, tmp_path, keep=2).steps == (40, 50)
    assert choose_checkpoints("latest", steps, tmp_path, keep=2).steps == (50,)
    with pytest.raises(CheckpointError, match=r"holds 2 \(steps 40, 50\); lower K or raise con"):
        choose_checkpoints("average:3", steps, tmp_path, keep=2)


def test_best_checkpoint_is_the_saved_step_with_the_highest_validation_bleu(tmp_path):
    records = [
        {"step": 10, "kind": "train", "loss": 3.0},
        {"step": 10, "kind": "validation", "bleu": 20.0, "perplexity": 9.0},
        {"step": 15, "kind": "validation", "bleu": 40.0, "perplexity": 5.0},  # not saved
        {"step": 20, "kind": "validation", "bleu": 31.5, "perplexity": 6.0},
        {"step": 30, "kind": "validation", "bleu": 28.0, "perplexity": 7.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert choose_checkpoints("best", [10, 20, 30], tmp_path).steps == (20,)
    # a tie goes to the later step
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 30, "kind": "validation", "bleu": 31.5}) + "\n")
    assert choose_checkpoints("best", [10, 20, 30], tmp_path).steps == (30,)
    with pytest.raises(CheckpointError, match="no saved checkpoint .* validation BLEU record"):
        choose_checkpoints("best", [40], tmp_path)


# -- a trained tiny model -------------------------------------------------------------------

STEPS = (50, 100, 150)


def _run(*args, check=True):
    result = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(),  # the shared compilation cache: each eval.py compiles the same steps
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A tiny Transformer trained long enough to translate a few words right (BLEU > 0)."""
    config = tiny_config("transformer")
    config.train.steps = STEPS[-1]
    config.train.schedule = "constant"
    config.train.learning_rate = 3e-3
    config.train.log_every_steps = 50
    config.checkpoint.every_steps = STEPS[0]
    config.decode.beam_size = 2
    # A synthetic target is at most a few words longer than its source; the default 50 extra
    # tokens let an undertrained model's runaway outputs set the pace of every decode below.
    config.decode.max_extra_length = 10
    config.eval.batch_size = 128
    path = tmp_path_factory.mktemp("run")
    train(config, path)
    return path


def _evaluate(workdir, split, checkpoint="latest", *, ensemble_with=(), **options):
    """What ``eval.py --split SPLIT --checkpoint CHECKPOINT`` scores and files."""
    translator = Translator.restore(workdir, checkpoint, ensemble_with=ensemble_with)
    return evaluate(translator, RunDirectory(workdir), split, filed_as=checkpoint, **options)


@pytest.fixture(scope="module")
def evaluated(workdir):
    result = _run("eval.py", "--workdir", str(workdir), "--checkpoint", "average:2")
    return result.stdout.strip().splitlines()


@pytest.mark.slow
def test_bleu_and_chrf_equal_sacrebleu_on_the_hypothesis_file(workdir, evaluated):
    result = json.loads(evaluated[-1])
    hypotheses = (workdir / "eval" / "test@average2.hyp.txt").read_text("utf-8").split("\n")
    assert hypotheses.pop() == ""  # the file ends with a newline
    references = [target for _, target in synthetic.load_split("test")]
    assert len(hypotheses) == len(references) == result["n"]
    bleu, chrf = BLEU(), CHRF()
    assert result["bleu"] == pytest.approx(bleu.corpus_score(hypotheses, [references]).score)
    assert result["signature"] == str(bleu.get_signature())
    assert result["chrf"] == pytest.approx(chrf.corpus_score(hypotheses, [references]).score)
    assert result["bleu"] > 0, "a model that gets nothing right makes this test vacuous"


@pytest.mark.slow
def test_scores_cut_short_by_an_interruption_leave_no_file_a_comparison_fails_on(
    workdir, monkeypatch
):
    """A Ctrl-C, SIGKILL or full disk while eval.py wrote ``eval/SPLIT.json`` left it cut
    short (the old one already gone): every later comparison failed the run on it, for good."""
    scored = dict(filed_as="latest", max_sentences=8, variant=["cut"])
    translator = Translator.restore(workdir, "latest")
    first = evaluate(translator, RunDirectory(workdir), "test", **scored)
    write_text = Path.write_text

    def cut_short(self, text, *args, **kwargs):
        write_text(self, text[: len(text) // 2], *args, **kwargs)
        if self.name.endswith(".json") or ".json.tmp" in self.name:
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut_short)
    with pytest.raises(KeyboardInterrupt):
        evaluate(translator, RunDirectory(workdir), "test", **scored)
    monkeypatch.undo()
    files = sorted(path.name for path in (workdir / "eval").iterdir() if "-cut" in path.name)
    assert all(not name.endswith(".json") for name in files), files  # none, rather than cut
    assert RunDirectory(workdir).read_eval_result("test", "latest-cut") is None
    again = evaluate(translator, RunDirectory(workdir), "test", **scored)
    assert again["bleu"] == first["bleu"]


@pytest.mark.slow
def test_printed_scores_and_json_file_agree(workdir, evaluated):
    printed = json.loads(evaluated[-1])
    saved = json.loads((workdir / "eval" / "test@average2.json").read_text())
    assert saved.pop("provenance")["evaluation"]["commit"]  # in the file, not on the line
    assert printed == saved
    hypotheses = (workdir / "eval" / "test@average2.hyp.txt").read_text("utf-8").splitlines()
    references = [target for _, target in synthetic.load_split("test")]
    # The scores printed are those of the file written (tokenized_bleu is checked by hand above).
    assert printed["tok_bleu"] == pytest.approx(
        tokenized_bleu(hypotheses, references, "de")["tok_bleu"]
    )
    assert sum(row["n"] for row in printed["bleu_by_source_length"]) == printed["n"]
    assert printed["checkpoint"] == f"average of the last 2: steps {STEPS[1]}, {STEPS[2]}"
    assert printed["beam_size"] == 2 and printed["truncated_inputs"] == 0
    # A new process traces (and compiles or loads) its search loops: that is not decoding speed.
    decoding = printed["decode_seconds"] - printed["compile_seconds"]
    assert printed["compile_seconds"] > 0 and decoding > 0
    # The report's first line said only "..., 19.1 s", of which 18.1 s could be compiling.
    assert evaluated[0].endswith(
        f", {printed['decode_seconds']:.1f} s ({printed['compile_seconds']:.1f} s of it compiling)"
    )
    assert printed["sentences_per_second"] == pytest.approx(printed["n"] / decoding)
    report = "\n".join(evaluated[:-1])
    assert "sacreBLEU" in report and "chrF2" in report and "tokenized BLEU" in report


@pytest.mark.slow
def test_the_scores_carry_the_run_s_provenance_and_the_evaluator_s(workdir, evaluated):
    saved = json.loads((workdir / "eval" / "test@average2.json").read_text())["provenance"]
    assert saved["run"] == provenance.read_entries(workdir)[-1]
    assert saved["run"]["packages"]["flax"] == importlib.metadata.version("flax")
    assert saved["changed_during_run"] == []
    evaluation = saved["evaluation"]
    assert evaluation["packages"]["sacrebleu"] == importlib.metadata.version("sacrebleu")
    assert evaluation["device_kind"] == jax.devices()[0].device_kind


@pytest.mark.slow
def test_a_file_is_translated_line_for_line_in_order(workdir, tmp_path):
    sources = [source for source, _ in synthetic.load_split("validation")[:12]]
    too_long = " ".join(sources) + " " + " ".join(sources)  # over 256 tokens
    lines = [*sources[:6], "", too_long, *sources[6:]]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "reversed.txt").write_text("\n".join(lines[::-1]), encoding="utf-8")
    translator = Translator.restore(workdir)
    result = translate_file(translator, tmp_path / "in.txt", tmp_path / "out.txt")
    backwards = translate_file(translator, tmp_path / "reversed.txt", tmp_path / "back.txt")
    output = read_lines(tmp_path / "out.txt")
    assert len(output) == len(lines) == result["n"]
    assert read_lines(tmp_path / "back.txt") == output[::-1]
    assert result["truncated_inputs"] == 1 and result["truncated_lines"] == [8]
    assert backwards["truncated_lines"] == [len(lines) - 7]


def test_an_output_that_reaches_its_cap_unfinished_is_flagged_and_no_other(workdir, tmp_path):
    """Greedy search at a cap of one token beyond the input: an output flagged capped is one
    the search cut off (a longer cap lets it go on), and any other ended on its own (a longer
    cap gives the same words). eval.py's report and JSON name the capped lines."""
    sources = [source for source, _ in synthetic.load_split("validation")[:40]]
    tight = Translator.restore(workdir, beam_size=1, max_extra_length=1).translate(sources)
    roomy = Translator.restore(workdir, beam_size=1, max_extra_length=10).translate(sources)
    capped = set(tight.capped)
    assert 0 < len(capped) < len(sources), "all or none capped proves little"
    went_on = 0
    for i, (short, long) in enumerate(zip(tight.hypotheses, roomy.hypotheses, strict=True)):
        if i in capped:  # cut off: given room, greedy search goes on from where it stopped
            assert long.startswith(short), i  # (it may write at once the EOS the cap left out)
            went_on += len(long.split()) > len(short.split())
        else:  # ended: more room changes nothing
            assert long == short, i
    assert went_on, "no capped output wrote on given room: the cap cut nothing off"
    assert not roomy.capped or set(roomy.capped) < capped
    (tmp_path / "in.txt").write_text("\n".join(["", *sources]) + "\n", encoding="utf-8")
    tight_translator = Translator.restore(workdir, beam_size=1, max_extra_length=1)
    result = translate_file(tight_translator, tmp_path / "in.txt", tmp_path / "out.txt")
    assert result["capped_lines"] == [i + 2 for i in tight.capped]  # a blank line 1 first
    assert f"{len(capped)} translations stopped at the output cap" in format_report(result)
    # Its attention ends at the last word the model wrote, not at an EOS it never wrote.
    first = min(capped)
    ended, cut = (
        cross_attention(tight_translator, sources[first], tight.hypotheses[first], ended=ended)
        for ended in (True, False)
    )
    assert ended.target_pieces[-1] == "</s>" and cut.target_pieces == ended.target_pieces[:-1]
    np.testing.assert_array_equal(cut.weights, ended.weights[:, :, :-1])


def test_batch_size_changes_the_batches_not_the_translations(workdir, tmp_path):
    sources = [source for source, _ in synthetic.load_split("validation")[:7]]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    translator = Translator.restore(workdir)  # the run's batch, 128
    translate_file(translator, tmp_path / "in.txt", tmp_path / "out.txt")
    result = _run(
        "eval.py", "--workdir", str(workdir), "--input", str(tmp_path / "in.txt"),
        "--output", str(tmp_path / "out3.txt"), "--batch_size", "3",
    )  # fmt: skip
    assert json.loads(result.stdout.splitlines()[-1])["batch_size"] == 3
    assert read_lines(tmp_path / "out3.txt") == read_lines(tmp_path / "out.txt")


@pytest.mark.slow
def test_standard_input_is_translated_in_order_with_nbest_lists(workdir, tmp_path):
    """``--input -`` in several batches (batch_size 128 < 150 lines), each sentence's n-best
    list best first, its first entry what a file translation gives."""
    sources = [source for source, _ in synthetic.load_split("validation")[:150]]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    translate_file(Translator.restore(workdir), tmp_path / "in.txt", tmp_path / "out.txt")
    result = subprocess.run(
        [sys.executable, "eval.py", "--workdir", str(workdir), "--input", "-", "--nbest", "2"],
        input="".join(line + "\n" for line in sources), cwd=REPO, capture_output=True,
        text=True, timeout=600, env=subprocess_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert json.loads(result.stderr.strip().splitlines()[-1])["batches"] >= 2
    firsts = {}
    for index, score, hypothesis in rows:
        firsts.setdefault(int(index), []).append((float(score), hypothesis))
    assert sorted(firsts) == list(range(len(sources)))
    assert all(1 <= len(entries) <= 2 for entries in firsts.values())
    assert all(entries == sorted(entries, reverse=True) for entries in firsts.values())
    assert [firsts[i][0][1] for i in range(len(sources))] == read_lines(tmp_path / "out.txt")


@pytest.mark.slow
@pytest.mark.parametrize("ensemble", [False, True], ids=["one run", "an ensemble of two"])
def test_an_evaluation_opens_each_run_once_and_loads_its_tokenizer_once(
    workdir, tmp_path, monkeypatch, ensemble
):
    """eval.py's path: the run opened once, one translator built from it, then scored."""
    other = tmp_path / "other"
    if ensemble:
        shutil.copytree(workdir, other, ignore=shutil.ignore_patterns("eval"))
    opened, tokenizers = [], []
    open_run, load = RunDirectory.__init__, restore.load_tokenizer

    def opening(self, path):
        opened.append(Path(path))
        open_run(self, path)

    def loading(directory):
        tokenizers.append(Path(directory))
        return load(directory)

    monkeypatch.setattr(RunDirectory, "__init__", opening)
    monkeypatch.setattr(restore, "load_tokenizer", loading)
    run = RunDirectory(workdir)
    translator = Translator.from_run(
        run, run.load_config(), str(STEPS[0]), ensemble_with=[other] if ensemble else []
    )
    result = evaluate(translator, run, "test", filed_as=str(STEPS[0]), max_sentences=8)
    runs = [workdir, other] if ensemble else [workdir]
    assert opened == runs
    assert tokenizers == [path / "tokenizer" for path in runs]
    assert result["n"] == 8 and result["checkpoint"].count(f"step {STEPS[0]}") == len(runs)


# -- blank lines: never decoded, left blank ------------------------------------------------


def _lines_with_blanks() -> list[str]:
    """Four sentences with every kind of blank line around and between them."""
    sources = [source for source, _ in synthetic.load_split("validation")[:4]]
    return [BLANKS[0], sources[0], BLANKS[1], BLANKS[2], *sources[1:3], BLANKS[3], sources[3], ""]


def _expected_output(translator, lines: list[str]) -> list[str]:
    """The output lines for ``lines``: the sentences decoded by themselves, each numbered by its
    line and put back on it, the blank lines left blank (no entries in an n-best list)."""
    kept = [i for i, line in enumerate(lines) if line.strip()]
    decoded = translator.translate_sentences([lines[i] for i in kept], kept)
    hypotheses, nbest = [""] * len(lines), [[] for _ in lines]
    for position, index in enumerate(kept):
        hypotheses[index], nbest[index] = decoded.hypotheses[position], decoded.nbest[position]
    if translator.nbest:
        return nbest_lines(Translations(hypotheses, [], nbest))
    return hypotheses


def _never_decodes_blank_lines(translator, monkeypatch) -> list[str]:
    """Every sentence ``translator`` decodes from now on (the list fills as it decodes)."""
    decoded, decode = [], translator.translate_sentences

    def recording(sentences, numbers, *progress):
        decoded.extend(sentences)
        return decode(sentences, numbers, *progress)

    monkeypatch.setattr(translator, "translate_sentences", recording)
    return decoded


def _translate_file_and_stream(translator, lines, tmp_path) -> tuple[list[str], list[str]]:
    """The output lines of ``lines`` translated from a file and from a stream (eval.py's two
    ways), in two batches of the stream (batch size 5)."""
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = translate_file(translator, tmp_path / "in.txt", tmp_path / "out.txt")
    assert result["n"] == len(lines)
    read, write = os.pipe()
    os.write(write, "".join(line + "\n" for line in lines).encode())
    os.close(write)
    translator.config.eval.batch_size = 5  # the stream's batches; the file's went in one
    streamed = io.StringIO()
    with os.fdopen(read, "rb") as stream:
        assert translate_stream(translator, stream, streamed)["batches"] == 2
    return read_lines(tmp_path / "out.txt"), streamed.getvalue().splitlines()


def _without_scores(lines: list[str]) -> list[str]:
    """n-best lines (``INDEX\tSCORE\tHYP``) without their scores; other lines as they are.
    Batches of other sizes round a score's last digits differently."""
    return [
        line.split("\t")[0] + "\t" + line.split("\t")[-1] if "\t" in line else line
        for line in lines
    ]


def _scores(lines: list[str]) -> list[float]:
    return [float(line.split("\t")[1]) for line in lines if line.count("\t") == 2]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["beam", "nbest", "sampling", "ensemble"])
def test_blank_lines_come_back_blank_from_a_file_and_a_stream(workdir, tmp_path, mode, monkeypatch):
    options = {
        "nbest": {"nbest": 2},
        "sampling": {"sampling": Sampling(SamplingMethod.parse("topk:3"), temperature=1.0)},
        "ensemble": {"ensemble_with": [workdir]},
    }.get(mode, {})
    translator = Translator.restore(workdir, **options)
    lines = _lines_with_blanks()
    decoded = _never_decodes_blank_lines(translator, monkeypatch)
    from_file, from_stream = _translate_file_and_stream(translator, lines, tmp_path)
    assert decoded and all(sentence.strip() for sentence in decoded), decoded
    translator.config.eval.batch_size = 128  # the expected output decoded as the file was
    expected = _expected_output(translator, lines)
    assert from_file == expected
    if mode != "sampling":  # other batches search alike (a sample may differ by rounding)
        assert _without_scores(from_stream) == _without_scores(expected)
        assert _scores(from_stream) == pytest.approx(_scores(expected), abs=1e-4)
    for output in (from_file, from_stream):
        if mode == "nbest":  # the blank lines (0, 2, 3, 6, 8) have no entries
            assert sorted({int(row.split("\t")[0]) for row in output}) == [1, 4, 5, 7]
        else:
            assert len(output) == len(lines)
            assert [output[i] for i in (0, 2, 3, 6, 8)] == [""] * 5


@pytest.mark.slow
def test_blank_lines_come_back_blank_from_the_exported_model(workdir, tmp_path, monkeypatch):
    from seq2seq.export.run import exported_translator

    translator = exported_translator(workdir, "float32", nbest=2)
    lines = _lines_with_blanks()
    decoded = _never_decodes_blank_lines(translator, monkeypatch)
    from_file, from_stream = _translate_file_and_stream(translator, lines, tmp_path)
    assert decoded and all(sentence.strip() for sentence in decoded), decoded
    translator.config.eval.batch_size = 128  # the expected output decoded as the file was
    expected = _expected_output(translator, lines)
    assert from_file == expected
    # CTranslate2 too rounds a score's last digit by batch (seen on an AVX2-only CPU)
    assert _without_scores(from_stream) == _without_scores(expected)
    assert _scores(from_stream) == pytest.approx(_scores(expected), abs=1e-4)
    assert sorted({int(row.split("\t")[0]) for row in from_file}) == [1, 4, 5, 7]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["jax", "ctranslate2"])
def test_each_engine_tells_progress_batch_by_batch(workdir, engine):
    """What a bar counts: each batch's sentences as it ends, every line once in all."""
    from seq2seq.export.run import exported_translator

    translator = Translator.restore(workdir) if engine == "jax" else exported_translator(workdir)
    translator.config.eval.batch_size = 4
    sources = [source for source, _ in synthetic.load_split("validation")[:10]]
    lines = [*sources[:5], BLANKS[0], *sources[5:]]
    told = []
    hypotheses = translator.translate(lines, progress=told.append).hypotheses
    assert told[0] == 1  # the blank line, at once
    assert sum(told) == len(lines) and all(1 <= n <= 4 for n in told[1:]) and len(told) >= 4
    assert hypotheses == translator.translate(lines).hypotheses  # counting changes nothing


def _stderr_on_a_terminal(command: list[str]) -> tuple[int, str]:
    """Runs ``command`` with its standard error on a pseudo-terminal, as a person at a shell
    sees it; returns the exit status and what it wrote there."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    main, terminal = pty.openpty()
    # 40 rows of 120 columns: a new pseudo-terminal has none, and tqdm draws nothing in none
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=terminal, env=subprocess_env()
    )
    os.close(terminal)
    chunks = []

    def read():  # all along: a full terminal buffer would stop the command
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the command closed its end
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    status = process.wait(timeout=600)
    reader.join(timeout=60)
    os.close(main)
    return status, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_eval_py_draws_a_bar_on_a_terminal_and_none_into_a_pipe(workdir, tmp_path):
    sources = [source for source, _ in synthetic.load_split("validation")[:30]]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    command = [
        sys.executable, "eval.py", "--workdir", str(workdir), "--input", str(tmp_path / "in.txt"),
        "--output", str(tmp_path / "out.txt"), "--batch_size", "8",
    ]  # fmt: skip
    status, terminal = _stderr_on_a_terminal(command)
    assert status == 0, terminal[-3000:]
    assert "translating: 100%" in terminal and "30/30" in terminal, terminal[-3000:]
    piped = _run(*command[1:])
    assert "translating" not in piped.stderr and "30/30" not in piped.stderr


@pytest.mark.slow
def test_a_file_interrupted_midway_goes_on_from_its_finished_pieces(
    workdir, tmp_path, monkeypatch, caplog
):
    """Ctrl-C lost every translation of a file or split: they were written at the end."""
    translator = Translator.restore(workdir)
    translator.config.eval.batch_size = 4  # pieces of 4, 8, 16, 32, then 64 sentences
    ticks = iter(range(10**6))
    monkeypatch.setattr(partial, "clock", lambda: next(ticks))  # each piece takes 1 "second"
    sources = [source for source, _ in synthetic.load_split("validation")[:150]]
    given = tmp_path / "in.txt"
    given.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    whole = translate_file(translator, given, tmp_path / "whole.txt")  # never interrupted
    assert "resumed_sentences" not in whole
    output, side = tmp_path / "out.txt", partial.side_file(tmp_path / "out.txt")
    assert not partial.side_file(tmp_path / "whole.txt").exists()  # deleted once written
    starts, translate = [], translator.translate

    def recorded(lines, first_index=0, **options):
        starts.append(first_index)
        if len(starts) == stop_at:
            raise KeyboardInterrupt
        return translate(lines, first_index, **options)

    monkeypatch.setattr(translator, "translate", recorded)
    stop_at = 2  # Ctrl-C during the second piece
    with pytest.raises(KeyboardInterrupt):
        translate_file(translator, given, output)
    assert not output.exists() and len(side.read_text().splitlines()) == 2  # its name, a piece
    starts.clear()
    stop_at = None
    resumed = translate_file(translator, given, output)
    assert starts == [4, 8, 16, 32, 64, 128] and resumed["resumed_sentences"] == 4
    assert read_lines(output) == read_lines(tmp_path / "whole.txt") and not side.exists()
    # the pieces of one decoding are never read by another
    starts.clear()
    stop_at = 2
    with pytest.raises(KeyboardInterrupt):
        translate_file(translator, given, output)
    translator.config.decode.alpha = 0.0
    starts.clear()
    stop_at = None
    with caplog.at_level(logging.WARNING, logger="seq2seq"):
        assert "resumed_sentences" not in translate_file(translator, given, output)
    assert starts == [0, 4, 12, 28, 60, 124]
    # and it says so: the 4 sentences kept were dropped without a word
    assert f"{side} holds 1 finished piece(s) of another translation" in caplog.text


@pytest.mark.slow
def test_blank_lines_piped_through_eval_py_come_back_blank(workdir, tmp_path):
    """The report of issue 42: ``eval.py --input -`` turned a blank line into a sentence."""
    lines = _lines_with_blanks()
    sentences = [line for line in lines if line.strip()]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in sentences), encoding="utf-8")
    translate_file(Translator.restore(workdir), tmp_path / "in.txt", tmp_path / "out.txt")
    result = subprocess.run(
        [sys.executable, "eval.py", "--workdir", str(workdir), "--input", "-"],
        input="".join(line + "\n" for line in lines), cwd=REPO, capture_output=True, text=True,
        timeout=600, env=subprocess_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout.split("\n")
    assert output.pop() == ""  # the last line's newline
    translations = iter(read_lines(tmp_path / "out.txt"))  # of the sentences alone, in order
    assert output == [next(translations) if line.strip() else "" for line in lines]


@pytest.mark.slow
def test_the_exported_model_translates_as_this_package_does(workdir):
    """Greedy outputs of the CTranslate2 export equal JAX's; eval.py scores through it."""
    from seq2seq.export.run import exported_translator

    sources = [source for source, _ in synthetic.load_split("validation")[:200]]
    ours_found = Translator.restore(workdir, beam_size=1).translate(sources)
    theirs_found = exported_translator(workdir, "float32", beam_size=1).translate(sources)
    ours, theirs = ours_found.hypotheses, theirs_found.hypotheses
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= 0.99 * len(sources)
    assert len(set(ours)) > len(sources) // 2, "a model that says one thing proves little"
    # An output cut off at its cap is flagged alike, though CTranslate2 leaves EOS out of all.
    same = {i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a == b}
    assert ours_found.capped, "no output reached its cap: the flag goes untested"
    assert same & set(ours_found.capped) == same & set(theirs_found.capped)
    result = _run(
        "eval.py", "--workdir", str(workdir), "--engine", "ctranslate2", "--quantization", "int8"
    )
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert scores["engine"] == "ctranslate2" and scores["n"] == len(synthetic.load_split("test"))
    assert "exported at int8" in scores["checkpoint"]
    assert RunDirectory(workdir).eval_result_file("test", "latest-ctranslate2-int8").is_file()


@pytest.mark.slow
def test_bench_decode_of_a_split_translates_all_of_it_to_eval_s_bleu(workdir, tmp_path):
    """``bench decode --split test`` counts every sentence of the split and scores the same
    translations that eval.py scores."""
    from seq2seq.bench.measure import split_decode_benchmark

    run = tmp_path / "run"
    shutil.copytree(workdir, run, ignore=shutil.ignore_patterns("eval"))
    bench = split_decode_benchmark(run, "test")  # what `bench decode --split test` prints
    evaluated = _evaluate(run, "test")
    assert bench["sentences"] == evaluated["n"] == len(synthetic.load_split("test"))
    assert bench["bleu"] == pytest.approx(evaluated["bleu"])
    assert bench["bleu"] > 0, "a model that gets nothing right makes this test vacuous"
    small = split_decode_benchmark(run, "test", batch_size=3)  # --batch_size 3
    assert small["batch_size"] == 3 != bench["batch_size"]
    assert small["bleu"] == pytest.approx(bench["bleu"])  # a translation is batch-blind


@pytest.mark.slow
def test_bench_decode_with_ctranslate2_sets_its_figures_beside_jax_s(workdir, tmp_path):
    """``bench decode --split test --engine ctranslate2``: the float32 export finds JAX's
    translations (it computes the same log-probabilities), and its pace is set beside JAX's."""
    from seq2seq.bench.measure import split_decode_benchmark

    run = tmp_path / "run"
    shutil.copytree(workdir, run, ignore=shutil.ignore_patterns("eval"))
    bench = split_decode_benchmark(run, "test", engine="ctranslate2", quantizations=("float32",))
    assert bench["ctranslate2_float32_same_outputs"] >= 0.9, bench
    assert bench["ctranslate2_float32_bleu"] == pytest.approx(bench["bleu"], abs=1.0)
    ratio = bench["sentences_per_s"] / bench["ctranslate2_float32_sentences_per_s"]
    assert bench["jax_over_ctranslate2_float32"] == pytest.approx(ratio)


@pytest.mark.slow
def test_eval_split_roles_name_the_configs_splits(workdir, tmp_path):
    """``--split validation`` translates the config's eval split, under that split's own name."""
    data = tmp_path / "data"
    data.mkdir()
    pairs = synthetic.load_split("validation")[:8]
    (data / "dev.en").write_text("".join(f"{source}\n" for source, _ in pairs), encoding="utf-8")
    (data / "dev.de").write_text("".join(f"{target}\n" for _, target in pairs), encoding="utf-8")
    run = tmp_path / "run"
    shutil.copytree(workdir, run, ignore=shutil.ignore_patterns("eval"))
    saved = json.loads((run / "config.json").read_text())
    saved["data"].update(source="text", dir=str(data), eval_split="dev")
    (run / "config.json").write_text(json.dumps(saved))
    result = json.loads(
        _run("eval.py", "--workdir", str(run), "--split", "validation").stdout.splitlines()[-1]
    )
    assert result["split"] == "dev" and result["n"] == 8
    assert len(read_lines(run / "eval" / "dev.hyp.txt")) == 8


def _restored_params(workdir, step):
    config = config_lib.load_saved(workdir / "config.json")
    tokenizer = load_tokenizer(workdir / "tokenizer")
    template, _ = create_state(config, tokenizer.source_vocab_size, tokenizer.target_vocab_size)
    checkpoints = Checkpoints(workdir / "checkpoints", keep=5)
    state, _ = checkpoints.restore(template, step)
    checkpoints.close()
    return state.params


@pytest.mark.slow
def test_averaged_run_holds_the_mean_of_the_last_checkpoints(workdir, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())  # a bar counts the checkpoints read
    record = write_averaged_run(workdir, 2, tmp_path / "averaged")
    assert "averaging: 100%" in sys.stderr.getvalue() and "2/2" in sys.stderr.getvalue()
    monkeypatch.undo()
    assert record["steps"] == list(STEPS[1:])
    config = config_lib.load_saved(workdir / "config.json")
    _, _, averaged, choice = restore_model(tmp_path / "averaged", config)
    assert "the average of steps 100, 150" in choice.describe()
    trained_by = json.loads((workdir / "provenance.json").read_text())["entries"]
    assert trained_by and provenance.read_entries(tmp_path / "averaged") == trained_by
    _, _, on_the_fly, _ = restore_model(workdir, config, "average:2")
    first, second = (_restored_params(workdir, step) for step in STEPS[1:])
    expected = jax.tree.map(lambda a, b: (np.asarray(a) + np.asarray(b)) / 2, first, second)
    for got in (averaged, on_the_fly):
        jax.tree.map(
            lambda g, e: np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7), got, expected
        )
    differs = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - b).max()), first, expected)
    assert max(jax.tree.leaves(differs)) > 0, "the two checkpoints must differ for this to test"


def _interrupt_once(monkeypatch, module, name: str):
    """Makes ``module.name`` write nothing and raise KeyboardInterrupt once, as a Ctrl-C in
    the middle of the command's writing would; the next call is the real one."""
    real = getattr(module, name)

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(module, name, real)
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, interrupted)


def test_an_interrupted_average_or_export_leaves_no_half_folder_and_its_rerun_goes_on(
    workdir, tmp_path, monkeypatch
):
    """Interrupted while writing, each left a half folder (a config with no checkpoint, a
    model.bin of 4 of 119 MB), and its rerun refused it as not empty."""
    from seq2seq.checkpoints import store
    from seq2seq.export import converter
    from seq2seq.export.run import export_run
    from seq2seq.records.whole import partial_folder

    averaged, exported = tmp_path / "averaged", tmp_path / "exported"
    _interrupt_once(monkeypatch, store.Checkpoints, "save")
    with pytest.raises(KeyboardInterrupt):
        write_averaged_run(workdir, 2, averaged)
    _interrupt_once(monkeypatch, converter.shutil, "copytree")  # after model.bin, before the rest
    with pytest.raises(KeyboardInterrupt):
        export_run(workdir, exported)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # a command killed outright (SIGKILL, a second Ctrl-C) leaves its hidden partial folder
    for output in (averaged, exported):
        partial_folder(output).mkdir()
        (partial_folder(output) / "model.bin").write_bytes(b"half")
    assert write_averaged_run(workdir, 2, averaged)["steps"] == list(STEPS[1:])
    export_run(workdir, exported)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["averaged", "exported"]
    assert (averaged / "averaged_from.json").exists() and (exported / "seq2seq.json").exists()
    assert restore_model(averaged, config_lib.load_saved(workdir / "config.json"))[3].steps


def test_averaging_more_checkpoints_than_kept_names_the_flag_before_building(workdir, tmp_path):
    with pytest.raises(CheckpointError) as error:
        write_averaged_run(workdir, 9, tmp_path / "averaged")
    message = str(error.value)  # it said --checkpoint=average:9, eval.py's flag
    assert message.startswith("--last 9 needs the last 9 checkpoints but ")
    assert "lower --last or raise config.checkpoint.keep" in message
    assert not (tmp_path / "averaged").exists()


@pytest.mark.slow
def test_a_checkpoint_that_does_not_fit_the_config_is_one_clear_line(workdir, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(workdir, edited, ignore=shutil.ignore_patterns("eval"))
    saved = json.loads((edited / "config.json").read_text())
    saved["model"]["transformer"]["d_ff"] *= 2
    (edited / "config.json").write_text(json.dumps(saved))
    with pytest.raises(IncompatibleCheckpointError, match="w_1.* the config builds"):
        write_averaged_run(edited, 2, tmp_path / "averaged")
    result = _run("eval.py", "--workdir", str(edited), "--checkpoint", "average:2", check=False)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "the config builds" in result.stderr


@pytest.mark.slow
def test_another_beam_or_length_penalty_is_filed_beside_the_runs_own_scores(workdir, evaluated):
    """``eval.py --alpha 0`` overwrote eval/test.json, the run's own decoding's scores."""
    own = (workdir / "eval" / "test@average2.json").read_text()
    flags = ["--checkpoint", "average:2", "--beam_size", "1", "--alpha", "0.6"]  # 0.6: its own
    result = json.loads(_run("eval.py", "--workdir", str(workdir), *flags).stdout.splitlines()[-1])
    assert result["beam_size"] == 1
    assert (workdir / "eval" / "test@average2.json").read_text() == own
    apart = json.loads((workdir / "eval" / "test@average2-beam1.json").read_text())
    assert apart["beam_size"] == 1 and apart["bleu"] == result["bleu"]
    assert (workdir / "eval" / "test@average2-beam1.hyp.txt").is_file()


def test_the_first_sentences_of_a_split_are_scored_apart_from_the_whole(workdir, evaluated):
    own = (workdir / "eval" / "test@average2.json").read_text()
    flags = ["--checkpoint", "average:2", "--max_sentences", "40"]
    printed = _run("eval.py", "--workdir", str(workdir), *flags).stdout.splitlines()
    result = json.loads(printed[-1])
    assert printed[0].startswith("test: the first 40 sentences, beam 2")
    assert (result["n"], result["max_sentences"]) == (40, 40)
    assert (workdir / "eval" / "test@average2.json").read_text() == own  # the whole's, kept
    part = (workdir / "eval" / "test@average2-first40.hyp.txt").read_text("utf-8").splitlines()
    whole = (workdir / "eval" / "test@average2.hyp.txt").read_text("utf-8").splitlines()
    assert part == whole[:40]  # the same sentences, translated as in the whole split
    references = [target for _, target in synthetic.load_split("test")][:40]
    assert result["bleu"] == pytest.approx(BLEU().corpus_score(part, [references]).score)


def test_a_run_whose_corpus_moved_is_scored_from_its_new_folder(workdir, evaluated, tmp_path):
    """A run trained on a text corpus that has since moved: its config names a folder that is
    gone. eval.py says so in one line naming --data_dir, and with --data_dir scores the same
    sentences as before the move, leaving the run's config as it was. (The folder holds the
    test split's first 40 pairs: they are translated as in the whole split.)"""
    moved = tmp_path / "run"
    shutil.copytree(workdir, moved, ignore=shutil.ignore_patterns("eval"))
    config = RunDirectory(workdir).load_config()
    corpus = tmp_path / "corpus"  # the run's own test split, written out as a text corpus
    corpus.mkdir()
    pairs = load_pairs(config, config.data.test_split)[:40]
    for side, language in enumerate((config.data.src_lang, config.data.tgt_lang)):
        lines = "".join(pair[side] + "\n" for pair in pairs)
        (corpus / f"{config.data.test_split}.{language}").write_text(lines, "utf-8")
    saved = json.loads((moved / "config.json").read_text())
    saved["data"]["source"], saved["data"]["dir"] = "text", str(tmp_path / "gone")
    (moved / "config.json").write_text(json.dumps(saved))
    written = (moved / "config.json").read_text()

    refused = _run("eval.py", "--workdir", str(moved), "--checkpoint", "average:2", check=False)
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"data folder {tmp_path / 'gone'} does not exist" in refused.stderr
    assert "--data_dir" in refused.stderr

    flags = ["--checkpoint", "average:2", "--data_dir", str(corpus)]
    result = json.loads(_run("eval.py", "--workdir", str(moved), *flags).stdout.splitlines()[-1])
    whole = read_lines(workdir / "eval" / "test@average2.hyp.txt")  # before the move
    assert result["n"] == len(pairs) == 40
    assert read_lines(moved / "eval" / "test@average2.hyp.txt") == whole[:40]
    references = [target for _, target in pairs]
    assert result["bleu"] == pytest.approx(BLEU().corpus_score(whole[:40], [references]).score)
    assert (moved / "config.json").read_text() == written

    # Had the run recorded training files the folder lacks, the folder would be another corpus,
    # whose scores are filed apart from the run's own.
    own = (moved / "eval" / "test@average2.json").read_text()
    (moved / "corpus.json").write_text(json.dumps({"train.de": {"bytes": 1, "sha256": "0"}}))
    again = json.loads(_run("eval.py", "--workdir", str(moved), *flags).stdout.splitlines()[-1])
    assert again["bleu"] == result["bleu"]
    assert (moved / "eval" / "test@average2.json").read_text() == own
    apart = json.loads((moved / "eval" / "test@average2-corpus-corpus.json").read_text())
    assert apart["data_dir"] == str(corpus.resolve()) and apart["bleu"] == result["bleu"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workdir", "/nonexistent/run"], "no work directory at /nonexistent/run"),
        (["--input", "/nonexistent/in.txt", "--output", "out.txt"], "no input file at"),
        (["--data_dir", "/nonexistent/corpus"], "--data_dir /nonexistent/corpus is not a folder"),
        (["--data_dir", "/tmp", "--input", "-"], "--input reads no split"),
    ],
)
def test_missing_paths_end_eval_with_one_line(args, message, tmp_path):
    if "--workdir" not in args:
        args = ["--workdir", str(tmp_path), *args]
    result = _run("eval.py", *args, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
    assert message in result.stderr


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("in.txt", "--output {tmp}/in.txt is the --input file; name another file"),
        ("./sub/../in.txt", "is the --input file"),  # the same file by another path
        ("ref.txt", "is the --reference file; name another file"),
        ("sub", "--output {tmp}/sub is a folder; name a file in it"),
        (
            "in.txt/out.txt",
            "--output {tmp}/in.txt/out.txt lies under {tmp}/in.txt, which is a file, not a dir",
        ),
    ],
)
def test_an_output_that_would_overwrite_an_input_or_cannot_be_a_file_is_refused(
    output, message, tmp_path
):
    (tmp_path / "sub").mkdir()
    (tmp_path / "in.txt").write_text("ein Hund\n")
    (tmp_path / "ref.txt").write_text("a dog\n")
    output = str(tmp_path / output) if not output.startswith(".") else f"{tmp_path}/{output[2:]}"
    result = _run(
        "eval.py", "--workdir", str(tmp_path), "--input", str(tmp_path / "in.txt"),
        "--reference", str(tmp_path / "ref.txt"), "--output", output, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
    assert message.format(tmp=tmp_path) in result.stderr
    assert (tmp_path / "in.txt").read_text() == "ein Hund\n"
    assert (tmp_path / "ref.txt").read_text() == "a dog\n"


@pytest.mark.slow
def test_an_ensemble_s_scores_are_filed_beside_the_run_s_own(workdir):
    """Scoring a split with an ensemble writes its own files (the run's own scores untouched);
    a model ensembled with itself translates as the model alone."""
    alone = _evaluate(workdir, "test", str(STEPS[1]), max_sentences=40)
    own = (workdir / "eval" / f"test@step{STEPS[1]}.hyp.txt").read_text("utf-8")
    both = _evaluate(workdir, "test", str(STEPS[1]), max_sentences=40, ensemble_with=[workdir])
    filed = sorted(path.name for path in (workdir / "eval").glob(f"test@step{STEPS[1]}*.hyp.txt"))
    assert filed == [
        f"test@step{STEPS[1]}-ensemble-{workdir.name}.hyp.txt",
        f"test@step{STEPS[1]}.hyp.txt",
    ]
    assert (workdir / "eval" / f"test@step{STEPS[1]}.hyp.txt").read_text("utf-8") == own
    assert (workdir / "eval" / filed[0]).read_text("utf-8") == own
    assert both["bleu"] == pytest.approx(alone["bleu"]) and alone["bleu"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["Ctrl-C", "SIGTERM"],
)
def test_a_stopped_stream_says_so_and_promises_no_resume(workdir, stop, status, said):
    """``eval.py --input -`` said "rerun the same command to continue" on Ctrl-C; a stream
    read from standard input cannot go on where it stopped. SIGTERM outside training ended
    every command silently (status -15), as if it had not been asked."""
    process = subprocess.Popen(
        [sys.executable, "eval.py", "--workdir", str(workdir), "--input", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        text=True, env=subprocess_env(),
    )  # fmt: skip
    process.stdin.write(synthetic.load_split("validation")[0][0] + "\n")
    process.stdin.flush()
    assert process.stdout.readline().strip()  # one line translated: the stream is running
    process.send_signal(stop)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == status, stderr[-2000:]
    # The signal may land after the line's flush but before the count; either way it is true.
    assert stderr.strip().splitlines()[-1] in (
        f"{said}: the translations of input line 1 were written; standard input cannot be "
        "resumed, so send it again from line 2",
        f"{said}: the translations of line 1 were being written (the output's last line may be "
        "cut short); standard input cannot be resumed, so send it again from the first line "
        "the output lacks",
    )
