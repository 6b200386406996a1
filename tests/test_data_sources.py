"""Text corpora: line-aligned files read in order, and one-line errors for bad folders."""

import gzip

import ml_collections
import pytest

from seq2seq.data.sources import (
    DataError,
    TextCorpus,
    check_split_keys,
    load_pairs,
    open_corpus,
    resolve_split,
)

GERMAN = ["Ein Hund läuft.", "Zwei Männer stehen am Herd.", "", "Eine Frau liest."]
ENGLISH = ["A dog runs.", "Two men are at the stove.", "Empty source.", "A woman reads."]


def _write(folder, name, lines, compress=False):
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    path = folder / (name + (".gz" if compress else ""))
    path.write_bytes(gzip.compress(text) if compress else text)
    return path


def _data(folder, **overrides):
    data = ml_collections.ConfigDict(
        {"source": "text", "dir": str(folder), "src_lang": "de", "tgt_lang": "en", "name": ""}
    )
    data.update(overrides)
    return data


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_reads_aligned_pairs_in_order_and_either_direction(tmp_path):
    _write(tmp_path, "train.de", GERMAN)
    _write(tmp_path, "train.en", ENGLISH)
    assert load_pairs(_data(tmp_path), "train") == list(zip(GERMAN, ENGLISH, strict=True))
    reverse = load_pairs(_data(tmp_path, src_lang="en", tgt_lang="de"), "train")
    assert reverse == list(zip(ENGLISH, GERMAN, strict=True))


def test_windows_files_read_like_unix_ones(tmp_path):
    """CRLF line ends, and the byte-order mark some editors write first."""
    for language, lines in (("de", GERMAN), ("en", ENGLISH)):
        text = "\ufeff" + "".join(line + "\r\n" for line in lines)
        (tmp_path / f"train.{language}").write_bytes(text.encode("utf-8"))
    assert load_pairs(_data(tmp_path), "train") == list(zip(GERMAN, ENGLISH, strict=True))


def test_gzip_files_read_like_plain_ones(tmp_path):
    _write(tmp_path, "train.de", GERMAN, compress=True)
    _write(tmp_path, "train.en", ENGLISH)
    assert load_pairs(_data(tmp_path), "train") == list(zip(GERMAN, ENGLISH, strict=True))


def test_chunks_limit_and_take(tmp_path):
    lines = [f"satz {i}" for i in range(50)]
    _write(tmp_path, "train.de", lines)
    _write(tmp_path, "train.en", [f"sentence {i}" for i in range(50)])
    corpus = open_corpus(_data(tmp_path), "train", limit=30)
    assert len(corpus) == 30
    chunks = list(corpus.chunks(size=7))
    assert [len(c) for c in chunks] == [7, 7, 7, 7, 2]
    assert corpus.take([0, 8, 29]) == [(f"satz {i}", f"sentence {i}") for i in (0, 8, 29)]


def test_missing_folder_is_one_line_naming_it(tmp_path):
    with pytest.raises(DataError) as error:
        open_corpus(_data(tmp_path / "nowhere"), "train")
    assert str(tmp_path / "nowhere") in _one_line(error)
    assert "config.data.dir" in str(error.value)


def test_missing_file_names_the_file_and_what_is_there(tmp_path):
    _write(tmp_path, "train.de", GERMAN)
    _write(tmp_path, "train.fr", ENGLISH)
    with pytest.raises(DataError) as error:
        open_corpus(_data(tmp_path), "train")
    message = _one_line(error)
    assert "train.en" in message and "train.fr" in message


def test_misaligned_files_name_both_files_and_counts(tmp_path):
    source = _write(tmp_path, "train.de", GERMAN)
    target = _write(tmp_path, "train.en", ENGLISH[:3])
    with pytest.raises(DataError) as error:
        TextCorpus(tmp_path, "train", "de", "en")
    message = _one_line(error)
    assert str(source) in message and str(target) in message
    assert f"{len(GERMAN)} lines" in message and f"has {3}" in message


@pytest.mark.parametrize("compress", [False, True])
def test_line_counts_agree_with_the_pairs_read(tmp_path, compress):
    """Counted in blocks of 1 MiB: a line across a block's end counts once, and a last line
    without its newline counts as the reader reads it."""
    lines = [f"Satz {i} " + "x" * (i % 97) for i in range(40_000)]  # about 2.2 MB
    for language in ("de", "en"):
        path = _write(tmp_path, f"train.{language}", lines, compress=compress)
        if not compress:  # the last line's newline dropped
            path.write_bytes(path.read_bytes()[:-1])
    corpus = TextCorpus(tmp_path, "train", "de", "en")
    assert len(corpus) == 40_000
    assert sum(len(chunk) for chunk in corpus.chunks()) == 40_000


def test_a_run_about_to_start_finds_a_misaligned_validation_split(tmp_path):
    for stem, lines in (("train", ENGLISH), ("val", ENGLISH[:2])):
        _write(tmp_path, f"{stem}.de", GERMAN)
        _write(tmp_path, f"{stem}.en", lines)
    data = _data(tmp_path, train_split="train", eval_split="val")
    check_split_keys(data, ("train_split", "eval_split"))  # stems alone: the comparison's check
    with pytest.raises(DataError) as error:
        check_split_keys(data, ("train_split", "eval_split"), require_folder=True)
    assert _one_line(error) == (
        f"{tmp_path / 'val.de'} has 4 lines but {tmp_path / 'val.en'} has 2; the two sides of a "
        "split must be line-aligned"
    )


def test_empty_corpus_is_an_error(tmp_path):
    _write(tmp_path, "train.de", [])
    _write(tmp_path, "train.en", [])
    with pytest.raises(DataError) as error:
        open_corpus(_data(tmp_path), "train")
    assert "empty" in _one_line(error)


def test_invalid_utf8_names_file_and_line(tmp_path):
    _write(tmp_path, "train.de", GERMAN)
    (tmp_path / "train.en").write_bytes(b"fine\nbad \xff byte\nfine\nfine\n")
    with pytest.raises(DataError) as error:
        load_pairs(_data(tmp_path), "train")
    assert "train.en line 2 is not UTF-8" in _one_line(error)


def test_reads_the_shared_multi30k_corpus(multi30k):
    corpus = open_corpus(_data(multi30k), "val")
    assert len(corpus) == 1014
    first_source, first_target = corpus.take([0])[0]
    assert first_source == (multi30k / "val.de").read_text("utf-8").splitlines()[0]
    assert first_target == (multi30k / "val.en").read_text("utf-8").splitlines()[0]


def test_a_split_key_whose_stem_is_absent_names_the_key_the_stems_and_the_fix(tmp_path):
    for stem in ("train", "valid", "newstest2014"):
        _write(tmp_path, f"{stem}.de", GERMAN)
        _write(tmp_path, f"{stem}.en", ENGLISH)
    _write(tmp_path, "dev.de", GERMAN)  # one side only: not a split of de-en
    data = _data(tmp_path, train_split="train", eval_split="val", test_split="test")
    check_split_keys(data, ("train_split",))  # present: nothing to say
    with pytest.raises(DataError) as error:
        check_split_keys(data, ("train_split", "eval_split"))
    assert _one_line(error) == (
        f"data.eval_split='val': no val.de and val.en in {tmp_path} (its de-en splits: "
        "newstest2014, train, valid); pass --config.data.eval_split=valid"
    )
    # a role resolves only to a stem that is there; the test role's fix is the newstest stem
    with pytest.raises(DataError, match=r"data.test_split='test'.*; pass --split=newstest2014$"):
        resolve_split(data, "test")
    assert resolve_split(data, "train") == "train"
    data.eval_split = "dev"  # one side there: the message named both as missing
    with pytest.raises(DataError) as error:
        check_split_keys(data, ("eval_split",))
    assert _one_line(error).startswith(
        f"data.eval_split='dev': no dev.en beside dev.de in {tmp_path} "
    )


def test_a_role_whose_stem_is_absent_reads_the_files_of_its_own_name(tmp_path, caplog):
    """A held-out corpus of train/valid/test files, read by a run configured for Multi30k's
    stems: ``test`` means test.de and test.en there, with a warning, once."""
    for stem in ("train", "valid", "test"):
        _write(tmp_path, f"{stem}.de", GERMAN)
        _write(tmp_path, f"{stem}.en", ENGLISH)
    data = _data(tmp_path, train_split="train", eval_split="val", test_split="test_2016_flickr")
    with caplog.at_level("WARNING"):
        assert resolve_split(data, "test") == "test"
        assert resolve_split(data, "test") == "test"
    assert [r.getMessage() for r in caplog.records] == [
        f"data.test_split='test_2016_flickr': no such files in {tmp_path}; reading its test.de "
        "and test.en, the role's own name"
    ]
    # no files of the role's name ("validation"): the stem to pass is named as before
    with pytest.raises(DataError, match=r"data.eval_split='val'.*; pass --split=valid$"):
        resolve_split(data, "validation")
    # the configured stem, where it is there, comes first
    _write(tmp_path, "test_2016_flickr.de", GERMAN)
    _write(tmp_path, "test_2016_flickr.en", ENGLISH)
    assert resolve_split(data, "test") == "test_2016_flickr"


def test_a_folder_without_the_language_pair_names_the_languages_it_has(tmp_path):
    # no folder: the reader's own error names it, here only where the caller asks
    check_split_keys(_data(tmp_path / "nowhere", eval_split="val"), ("eval_split",))
    with pytest.raises(DataError, match="data folder .*nowhere does not exist"):
        nowhere = _data(tmp_path / "nowhere", eval_split="val")
        check_split_keys(nowhere, ("eval_split",), require_folder=True)
    _write(tmp_path, "train.fr", GERMAN)
    _write(tmp_path, "train.en", ENGLISH, compress=True)
    with pytest.raises(DataError) as error:
        check_split_keys(_data(tmp_path, train_split="train"), ("train_split",))
    assert _one_line(error) == (
        f"no split of {tmp_path} has both a .de and a .en file (its files' languages: en, fr); "
        "check config.data.src_lang and config.data.tgt_lang"
    )
