"""From a config to batches: filter counts in the log, config checks, the Multi30k configs."""

import io
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from seq2seq.config import ConfigError, load_config_file, validate
from seq2seq.data import pipeline
from seq2seq.data.encoded import FILTER_REASONS, filter_pairs
from seq2seq.data.pipeline import build_training_data, load_pairs, real_tokens
from seq2seq.data.sources import DataError
from tests.conftest import REPO, Terminal, tiny_config

CONFIGS = ["configs/multi30k_transformer.py", "configs/multi30k_rnnsearch.py"]


def _text_config(folder: Path):
    config = tiny_config()
    config.data.source = "text"
    config.data.dir = str(folder)
    config.data.train_split = "train"
    config.data.max_length = 16
    config.data.max_length_ratio = 3.0
    return config


def _write_corpus(folder: Path, pairs):
    (folder / "train.en").write_text("".join(s + "\n" for s, _ in pairs))
    (folder / "train.de").write_text("".join(t + "\n" for _, t in pairs))


@pytest.mark.parametrize("pack", [False, True])
def test_filter_counts_and_efficiency_are_logged(tmp_path, caplog, pack):
    good = [(f"the dog {i % 9} runs", f"der hund {i % 9} läuft") for i in range(40)]
    bad = [
        ("", "leer"),  # empty source
        ("a b c", ""),  # empty target
        (" ".join(["word"] * 30), " ".join(["wort"] * 30)),  # too long for max_length 16
        ("one", "eins zwei drei vier fünf sechs sieben"),  # 1 vs 7 words: ratio over 3
    ]
    _write_corpus(tmp_path, good[:20] + bad + good[20:])
    config = _text_config(tmp_path)
    config.data.pack = pack
    with caplog.at_level(logging.INFO, logger="seq2seq"):
        data = build_training_data(config, tmp_path / "run")
    expected = {"read": 44, "kept": 40, "empty": 2, "too_long": 1, "length_ratio": 1}
    assert data.counts == expected
    assert (
        "training pairs: 44 read, 40 kept; dropped 2 empty, 1 longer than data.max_length, 1 past "
        "data.max_length_ratio"
    ) in [r.getMessage() for r in caplog.records]
    mode = "packed" if pack else "bucketed"
    assert any(r.getMessage().startswith(f"{mode} batches: ") for r in caplog.records)
    batch = next(iter(data.batches))
    assert ("source_segments" in batch) == pack


def test_nothing_left_after_filtering_is_one_line(tmp_path):
    _write_corpus(tmp_path, [("", "leer")] * 5)
    with pytest.raises(DataError) as error:
        build_training_data(_text_config(tmp_path), tmp_path / "run")
    assert "no training pairs left" in str(error.value) and "\n" not in str(error.value)


def test_packing_is_rejected_for_rnnsearch_in_one_line():
    config = tiny_config("rnnsearch")
    config.data.pack = True
    with pytest.raises(ConfigError, match="data.pack=True needs model.name='transformer'"):
        validate(config)
    config.model.name = "transformer"
    validate(config)


def test_length_ratio_below_one_is_rejected():
    config = tiny_config()
    config.data.max_length_ratio = 0.5
    with pytest.raises(ConfigError, match="max_length_ratio"):
        validate(config)


@pytest.mark.parametrize("path", CONFIGS)
def test_multi30k_configs_point_at_the_shared_corpus(path):
    config = load_config_file(REPO / path)
    assert Path(config.data.dir).is_absolute()
    assert Path(config.data.dir).resolve() == (REPO.parent / "shared/data/multi30k").resolve()
    assert (config.data.src_lang, config.data.tgt_lang) == ("de", "en")
    assert config.data.pack == (config.model.name == "transformer")


@pytest.mark.parametrize("path", CONFIGS)
def test_multi30k_configs_find_their_data_from_any_directory(multi30k, tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)  # not the repository: the config finds the data on its own
    config = load_config_file(REPO / path)
    pairs = load_pairs(config, config.data.eval_split)
    assert len(pairs) == 1014  # the Multi30k validation captions
    german, english = pairs[0]
    assert german != english and len(german.split()) > 2


def test_the_same_data_rnnsearch_config_reads_what_the_transformer_configs_read():
    """configs/wmt14_ende_rnnsearch.py promises the Transformer's data: the same pairs kept
    and the same vocabulary; only the batches (80 sentences, as Bahdanau et al.) differ."""
    ours = load_config_file(REPO / "configs/wmt14_ende_rnnsearch.py").data.to_dict()
    theirs = load_config_file(REPO / "configs/wmt14_ende_transformer_base.py").data.to_dict()
    batching = {"tokens_per_batch", "sentences_per_batch"}
    differing = {key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key)}
    assert differing == batching, {k: (ours.get(k), theirs.get(k)) for k in differing - batching}


def test_rnnsearch50_config_batches_exactly_80_sentences(tmp_path):
    config = load_config_file(REPO / "configs/wmt14_enfr_rnnsearch50.py")
    assert config.data.sentences_per_batch == 80
    config.data.source, config.data.src_lang, config.data.tgt_lang = "synthetic", "en", "de"
    config.data.max_train_examples = 2000  # 25 batches an epoch
    config.data.vocab_size = 1000
    data = build_training_data(config, tmp_path / "run")
    assert data.counts["kept"] == 2000
    batches = iter(data.batches)
    for _ in range(60):  # more than two epochs
        batch = next(batches)
        sentences = (batch["source"] != 0).any(axis=1) & (batch["target"] != 0).any(axis=1)
        assert batch["source"].shape[0] == 80 and sentences.sum() == 80
        assert batch["source"].shape[1] % config.data.bucket_width == 0


def test_sentences_per_batch_must_divide_among_devices_and_excludes_packing(tmp_path):
    config = tiny_config()
    config.data.sentences_per_batch = 80
    config.data.max_train_examples = 400
    with pytest.raises(ValueError, match=r"sentences_per_batch=80 is not a multiple of 3 \("):
        build_training_data(config, tmp_path / "run", batch_multiple=3)  # e.g. 3 devices
    build_training_data(config, tmp_path / "run", batch_multiple=4)
    config.data.pack = True
    with pytest.raises(ConfigError, match="set data.pack=False or data.sentences_per_batch=0"):
        validate(config)
    config.data.pack, config.data.sentences_per_batch = False, -1
    with pytest.raises(ConfigError, match="sentences_per_batch=-1 must be >= 0"):
        validate(config)


def _long_sentences_config(tokenizer: str = "word", max_length: int = 72):
    config = tiny_config()
    data = config.data
    data.synthetic_lengths, data.synthetic_min_words, data.synthetic_max_words = "uniform", 3, 60
    data.max_length = max_length
    data.tokenizer = tokenizer
    data.max_train_examples = 4000
    return validate(config)


# Word tokens: 60 words + EOS, and targets up to ~6 words longer. Subwords: up to ~2 per word.
@pytest.mark.parametrize("tokenizer, max_length", [("word", 72), ("unigram", 128)])
def test_long_synthetic_sentences_survive_the_filters_evenly_spread(
    tmp_path, tokenizer, max_length
):
    config = _long_sentences_config(tokenizer, max_length)
    data = build_training_data(config, tmp_path / "run")
    assert data.counts["kept"] == data.counts["read"] == 4000  # no pair filtered out
    for split in ("validation", "test"):  # what BLEU by sentence length (Figure 2) buckets
        pairs = load_pairs(config, split)
        words = np.array([len(source.split()) for source, _ in pairs])
        assert words.min() >= 3 and words.max() == 60
        shares = np.bincount((words - 1) // 10, minlength=6) / len(pairs)
        assert len(shares) == 6 and shares.min() >= 0.1, shares  # 1-10, ..., 51-60 words
        sources = data.tokenizer.encode_source([source for source, _ in pairs])
        targets = data.tokenizer.encode_target([target for _, target in pairs])
        source_lengths = np.array([len(ids) for ids in sources])
        target_lengths = np.array([len(ids) for ids in targets])
        assert np.all(source_lengths >= words + 1)  # a word is at least one token, EOS too
        kept, _ = filter_pairs(source_lengths, target_lengths, config.data.max_length, 9.0)
        assert len(kept) == len(pairs)  # the training filters would keep every one


def test_long_synthetic_sentences_refuse_a_max_length_that_drops_them(tmp_path):
    config = _long_sentences_config()
    config.data.max_length = 60
    with pytest.raises(ConfigError, match="max_length=60 would drop the synthetic sentences"):
        validate(config)
    config.data.max_length = 62  # holds every source sentence, not every (longer) target
    with pytest.raises(DataError, match=r"drops \d+ synthetic pairs.*set it to at least 6\d "):
        build_training_data(config, tmp_path / "run")


def _real_tokens(config, tokenizer_dir: Path, batches: int = 200) -> tuple[np.ndarray, int]:
    """[batches, 2] real (source, target) tokens of the first training batches of ``config``,
    and how many of them may fall short: one per batch shape (a bucket; packed rows have one)
    and epoch they span, the batch that closes its share of the epoch."""
    data = build_training_data(config, tokenizer_dir)
    iterator = iter(data.batches)
    drawn = [next(iterator) for _ in range(batches)]
    epochs = iterator.get_state()["epoch"] + 1
    tokens = np.array([[real_tokens(b, "source"), real_tokens(b, "target")] for b in drawn])
    return tokens, data.batches.shapes * epochs


def _assert_near_the_budget(tokens: np.ndarray, may_fall_short: int, budget: int) -> None:
    """Each batch holds up to ``budget`` real tokens per side, and its fuller side within 5% of
    that, but for the batches that close a bucket's share of an epoch."""
    fullest = tokens.max(axis=1)
    assert fullest.max() <= budget
    short = np.count_nonzero(fullest < 0.95 * budget)
    assert short <= may_fall_short, (short, may_fall_short, np.sort(fullest)[:20])


def test_the_unknown_share_of_a_word_shortlist_is_logged(tmp_path, caplog):
    """A shortlist of the 3 most frequent words each side ("the dog runs", "der hund läuft")
    leaves every sentence's digit unknown: 1 word in 4."""
    pairs = [(f"the dog {i % 9} runs", f"der hund {i % 9} läuft") for i in range(40)]
    _write_corpus(tmp_path, pairs)
    config = _text_config(tmp_path)
    config.data.tokenizer, config.data.vocab_size, config.data.shared_vocab = "word", 7, False
    config.data.src_lang, config.data.tgt_lang = "en", "de"
    with caplog.at_level(logging.INFO, logger="seq2seq"):
        build_training_data(config, tmp_path / "run")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("unknown")]
    assert lines == [
        "unknown tokens: 25.00% of the training split's source, 25.00% of its target (words "
        "outside shortlists of data.vocab_size=7)"
    ]
    # Four words in every sentence for three places: ties go in byte order, so "the" and
    # "läuft" join the digits outside (2 words in 5).
    pairs = [(f"the old dog {i % 9} runs", f"der alte hund {i % 9} läuft") for i in range(40)]
    _write_corpus(tmp_path, pairs)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="seq2seq"):
        build_training_data(config, tmp_path / "run2")
    assert "unknown tokens: 40.00% of the training split's source, 40.00% of its target" in (
        caplog.text
    )


@pytest.mark.parametrize("pack", [False, True], ids=["bucketed", "packed"])
def test_batches_hold_the_budget_in_real_tokens_on_the_synthetic_task(tmp_path, pack):
    config = load_config_file(REPO / "configs/quickstart_transformer.py")
    config.data.pack = pack
    _assert_near_the_budget(*_real_tokens(config, tmp_path), config.data.tokens_per_batch)


@pytest.mark.parametrize("path", CONFIGS)
def test_batches_hold_the_budget_in_real_tokens_on_multi30k(multi30k, tmp_path_factory, path):
    config = load_config_file(REPO / path)
    tokenizer_dir = tmp_path_factory.getbasetemp() / "multi30k_tokenizer"  # one for both configs
    _assert_near_the_budget(*_real_tokens(config, tokenizer_dir), config.data.tokens_per_batch)


def _first_batches(data, count=3):
    batches = iter(data.batches)
    return [next(batches) for _ in range(count)]


def test_a_second_start_reads_the_encoded_split_from_disk_not_the_corpus(tmp_path, monkeypatch):
    folder = tmp_path / "text"
    folder.mkdir()
    _write_corpus(
        folder, [(f"the dog {i % 7} runs far", f"der hund {i % 7} läuft") for i in range(60)]
    )
    config = _text_config(folder)
    run, encoded_dir = tmp_path / "run" / "tokenizer", tmp_path / "run" / "encoded"
    first = build_training_data(config, run, encoded_dir=encoded_dir)
    (written,) = encoded_dir.iterdir()
    assert written.name.startswith("train-") and (written / "target_offsets.npy").exists()

    def no_reading(*args, **kwargs):
        raise AssertionError("the corpus was read again")

    with monkeypatch.context() as patch:
        patch.setattr(pipeline.sources, "open_corpus", no_reading)
        patch.setattr(pipeline, "encode_corpus", no_reading)
        again = build_training_data(config, run, encoded_dir=encoded_dir)
    assert again.counts == first.counts
    for a, b in zip(_first_batches(first), _first_batches(again), strict=True):
        assert all(np.array_equal(a[key], b[key]) for key in a)

    config.data.pack = True  # the same corpus batched another way: read from disk again
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "encode_corpus", no_reading)
        assert build_training_data(config, run, encoded_dir=encoded_dir).counts == first.counts
    config.data.pack = False
    # The same files in another folder (a run's identity check compares their bytes), and
    # another split to validate on: neither is read by encoding, so nothing is read again.
    config.data.dir = str(shutil.copytree(folder, tmp_path / "moved"))
    config.data.eval_split = "dev"
    with monkeypatch.context() as patch:
        patch.setattr(pipeline.sources, "open_corpus", no_reading)
        patch.setattr(pipeline, "encode_corpus", no_reading)
        assert build_training_data(config, run, encoded_dir=encoded_dir).counts == first.counts
    assert [p.name for p in encoded_dir.iterdir()] == [written.name]
    # Another corpus (a start that made nothing may change the data) is encoded afresh, and the
    # first encoding goes, with the half-written folder of a start that died while encoding.
    (encoded_dir / f"{written.name}.partial-4242").mkdir()
    config.data.max_train_examples = 30
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "encode_corpus", no_reading)
        with pytest.raises(AssertionError, match="read again"):
            build_training_data(config, run, encoded_dir=encoded_dir)
    assert build_training_data(config, run, encoded_dir=encoded_dir).counts["read"] == 30
    (kept,) = encoded_dir.iterdir()
    assert kept.name != written.name and kept.name.startswith("train-")
    # An old run keeps the encoding it reads and loses one left from an older way of naming.
    shutil.copytree(kept, encoded_dir / "train-0123456789abcdef")
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "encode_corpus", no_reading)
        assert build_training_data(config, run, encoded_dir=encoded_dir).counts["read"] == 30
    assert [p.name for p in encoded_dir.iterdir()] == [kept.name]


def test_encoding_a_corpus_draws_a_bar_of_its_pairs_on_a_terminal(tmp_path, monkeypatch):
    folder = tmp_path / "text"
    folder.mkdir()
    _write_corpus(folder, [(f"the cat {i} sat", f"die katze {i} sass") for i in range(45)])
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    build_training_data(_text_config(folder), tmp_path / "tokenizer")
    assert "encoding the training split: 100%" in terminal.getvalue()
    assert "45/45" in terminal.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a log file: no bar
    build_training_data(_text_config(folder), tmp_path / "tokenizer")
    assert "encoding" not in sys.stderr.getvalue()


def test_the_pairs_line_names_every_reason_the_filters_have():
    assert tuple(pipeline.DROPPED) == FILTER_REASONS
    counts = {"read": 1200, "kept": 1200, "empty": 0, "too_long": 0, "length_ratio": 0}
    assert pipeline.pairs_line(counts) == "training pairs: 1,200 read, all kept"
