"""The ``tfds`` source, through the real ``tfds`` builders with real Multi30k sentences mocked in
as the prepared data: each side gets its language, in both directions."""

import sys
import tempfile
from pathlib import Path

import ml_collections
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from seq2seq.data.pipeline import build_training_data  # noqa: E402
from seq2seq.data.sources import DataError, load_pairs, open_corpus  # noqa: E402
from tests.conftest import tiny_config  # noqa: E402

STEMS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}  # TFDS split -> file
LIMIT = 300  # sentences per mocked split
GERMAN_WORDS = {"der", "die", "das", "und", "ein", "eine", "einem", "einer", "mit", "auf"}
ENGLISH_WORDS = {"the", "a", "and", "is", "are", "with", "of", "on", "while", "his"}
FRENCH_WORDS = {"le", "la", "les", "un", "une", "et", "des", "est", "avec", "sur"}


@pytest.fixture(autouse=True)
def _tfds_temporary_folders_in_the_tests_own(tmp_path, monkeypatch):
    """Opening a builder whose data is not prepared makes tfds look for its metadata online, in a
    temporary folder it never removes (``DatasetInfo.initialize_from_bucket``); those folders go
    in the test's own, which pytest clears."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture
def mocked_wmt(multi30k):
    """Serves Multi30k's sentences as the records of whichever WMT dataset is opened."""
    calls = []

    def as_data_source(builder, split, decoders=None, deserialize_method=None, **kwargs):
        languages = list(builder.info.features.keys())  # e.g. ["de", "en"]: what WMT holds
        calls.append((builder.name, builder.builder_config.name, split))
        lines = {
            language: (multi30k / f"{STEMS[split]}.{language}").read_text("utf-8").splitlines()
            for language in languages
        }
        return [{lang: lines[lang][i].encode("utf-8") for lang in languages} for i in range(LIMIT)]

    with tfds.testing.mock_data(as_data_source_fn=as_data_source):
        yield calls


def _data(name, source, target, **overrides):
    data = ml_collections.ConfigDict(
        {"source": "tfds", "name": name, "dir": "", "src_lang": source, "tgt_lang": target}
    )
    data.update(overrides)
    return data


def _share_with_words(sentences, words):
    return sum(bool(words & set(s.lower().replace(".", " ").split())) for s in sentences) / len(
        sentences
    )


@pytest.mark.parametrize(
    "name, source, target",
    [
        ("wmt14_translate/de-en", "en", "de"),  # the paper's direction
        ("wmt14_translate/de-en", "de", "en"),
        ("wmt17_translate/de-en", "de", "en"),
        ("wmt14_translate/fr-en", "en", "fr"),
    ],
)
def test_each_side_gets_its_language(mocked_wmt, multi30k, name, source, target):
    words = {"de": GERMAN_WORDS, "en": ENGLISH_WORDS, "fr": FRENCH_WORDS}
    pairs = load_pairs(_data(name, source, target), "train")
    assert len(pairs) == LIMIT
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    assert _share_with_words(sources, words[source]) > 0.9
    assert _share_with_words(targets, words[target]) > 0.9
    other = ({"de", "en", "fr"} - {source, target}).pop()
    assert _share_with_words(sources, words[target] - words[source] - words[other]) < 0.1
    expected = (multi30k / f"train.{source}").read_text("utf-8").splitlines()[:LIMIT]
    assert sources == expected
    assert mocked_wmt == [tuple(name.split("/")) + ("train",)]


def test_splits_and_limits_reach_tfds(mocked_wmt, multi30k):
    data = _data("wmt14_translate/de-en", "en", "de")
    validation = open_corpus(data, "validation", limit=50)
    assert len(validation) == 50
    assert validation.take([0, 49]) == [
        (
            (multi30k / "val.en").read_text("utf-8").splitlines()[i],
            (multi30k / "val.de").read_text("utf-8").splitlines()[i],
        )
        for i in (0, 49)
    ]
    load_pairs(data, "test")
    assert [split for _, _, split in mocked_wmt] == ["validation", "test"]


def test_training_data_from_tfds(mocked_wmt, tmp_path):
    config = tiny_config()
    config.data.source = "tfds"
    config.data.name = "wmt14_translate/de-en"
    config.data.tokenizer = "unigram"
    config.data.vocab_size = 500
    data = build_training_data(config, tmp_path)
    assert data.counts["read"] == LIMIT and data.counts["kept"] > 0.9 * LIMIT
    batch = next(iter(data.batches))
    english = data.tokenizer.source.decode(batch["source"][0].tolist())
    assert _share_with_words([english], ENGLISH_WORDS) == 1.0


def test_language_the_dataset_lacks_is_one_line():
    with pytest.raises(DataError) as error:
        open_corpus(_data("wmt14_translate/de-en", "en", "fr"), "train")
    assert "tgt_lang='fr'" in str(error.value) and "\n" not in str(error.value)


def test_unprepared_dataset_says_how_to_prepare_it(tmp_path):
    with pytest.raises(DataError) as error:
        open_corpus(_data("wmt14_translate/de-en", "en", "de", dir=str(tmp_path)), "train")
    message = str(error.value)
    assert "\n" not in message and "tfds build" in message and str(tmp_path) in message
    assert f"`{Path(sys.executable).parent / 'tfds'} build" in message  # the venv's, by its path


def test_training_on_an_unprepared_dataset_stops_before_writing(tmp_path):
    from seq2seq.training.trainer import train

    config = tiny_config()
    config.data.update(source="tfds", name="wmt14_translate/de-en", dir=str(tmp_path / "tfds"))
    config.data.update(src_lang="en", tgt_lang="de")
    with pytest.raises(DataError, match="is not prepared in .*tfds build"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # no config.json or provenance.json left behind


def test_unknown_dataset_is_one_line():
    with pytest.raises(DataError) as error:
        open_corpus(_data("wmt99_translate/de-en", "en", "de"), "train")
    assert "wmt99_translate" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(DataError) as error:  # TFDS's message lists every dataset it knows
        open_corpus(_data("wmt14_translat/de-en", "en", "de"), "train")
    assert str(error.value).startswith(
        "config.data.name='wmt14_translat/de-en': TFDS has no dataset 'wmt14_translat'; did you "
        "mean wmt14_translate"
    )


def test_a_config_the_dataset_lacks_names_the_ones_it_has():
    with pytest.raises(DataError) as error:  # TFDS's message ended in an empty list
        open_corpus(_data("wmt14_translate/de-xx", "en", "de"), "train")
    assert str(error.value) == (
        "config.data.name='wmt14_translate/de-xx': wmt14_translate has no config 'de-xx'; its "
        "configs are cs-en, de-en, fr-en, hi-en, ru-en"
    )
