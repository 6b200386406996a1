"""SentencePiece: round trips restore real text; the vocabulary is a function of the seed."""

import pytest

from seq2seq.data.pipeline import build_tokenizer
from seq2seq.data.sources import ListCorpus, TextCorpus
from seq2seq.data.tokenizer import load_tokenizer, sample_indices, train_tokenizer
from seq2seq.models.base import EOS_ID
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def german_english(multi30k):
    return TextCorpus(multi30k, "train", "de", "en", limit=3000)


def _train(corpus, directory, seed=0, shared=True, model_type="unigram"):
    sample = corpus.take(sample_indices(len(corpus), 1500, seed))
    return train_tokenizer(
        sample, model_type=model_type, vocab_size=800, shared=shared, directory=directory
    )


def test_sample_is_seeded_random_and_not_the_first_lines():
    first = sample_indices(10_000, 100, seed=0)
    assert first == sample_indices(10_000, 100, seed=0)
    assert first != sample_indices(10_000, 100, seed=1)
    assert first != list(range(100)) and first == sorted(set(first))
    assert max(first) > 5_000  # spread over the corpus
    assert sample_indices(50, 100, seed=0) == list(range(50))


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_round_trip_restores_unseen_sentences(german_english, multi30k, tmp_path, model_type):
    tokenizer = _train(german_english, tmp_path, model_type=model_type)
    seen = {c for source, target in german_english.pairs() for c in source + target}
    validation = TextCorpus(multi30k, "val", "de", "en").pairs()
    sentences = [s for pair in validation for s in pair if set(s) <= seen]
    assert len(sentences) > 0.95 * 2 * len(validation)
    ids = tokenizer.encode_target(sentences)
    assert all(row[-1] == EOS_ID for row in ids)
    assert max(len(row) for row in ids) < max(len(s) for s in sentences)  # subwords, not chars
    decoded = [tokenizer.decode_target(row) for row in ids]
    assert decoded == sentences


def test_same_seed_same_vocabulary_other_seed_other(german_english, tmp_path):
    first = _train(german_english, tmp_path / "a", seed=3)
    again = _train(german_english, tmp_path / "b", seed=3)
    other = _train(german_english, tmp_path / "c", seed=4)
    pieces = [first.source.id_to_piece(i) for i in range(first.source_vocab_size)]
    assert pieces == [again.source.id_to_piece(i) for i in range(again.source_vocab_size)]
    assert (tmp_path / "a/shared.model").read_bytes() == (tmp_path / "b/shared.model").read_bytes()
    assert pieces != [other.source.id_to_piece(i) for i in range(other.source_vocab_size)]


def test_separate_vocabularies_follow_their_language(german_english, tmp_path):
    tokenizer = _train(german_english, tmp_path, shared=False)
    assert tokenizer.source is not tokenizer.target
    german = {tokenizer.source.id_to_piece(i) for i in range(tokenizer.source_vocab_size)}
    english = {tokenizer.target.id_to_piece(i) for i in range(tokenizer.target_vocab_size)}
    assert "▁Mann" in german and "▁Mann" not in english
    assert "▁the" in english and "▁the" not in german
    reloaded = load_tokenizer(tmp_path)
    assert reloaded.encode_source(["Ein Hund."])[0].tolist() == (
        tokenizer.encode_source(["Ein Hund."])[0].tolist()
    )


def test_work_directory_tokenizer_is_reused_not_retrained(tmp_path):
    config = tiny_config()
    pairs = [(f"a b c {i % 7}", f"x y z {i % 5}") for i in range(200)]
    first = build_tokenizer(config, tmp_path, ListCorpus(pairs))
    other_text = ListCorpus([("q r s t", "u v w")] * 200)
    second = build_tokenizer(config, tmp_path, other_text)
    assert second.source.serialized_model_proto() == first.source.serialized_model_proto()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.model"]


def test_flat_encoding_matches_per_sentence_encoding(tmp_path):
    config = tiny_config()
    pairs = [("a b c", "x y"), ("c", "z z z z")]
    tokenizer = build_tokenizer(config, tmp_path, ListCorpus(pairs * 20))
    flat, lengths = tokenizer.encode_target_flat([t for _, t in pairs])
    rows = tokenizer.encode_target([t for _, t in pairs])
    assert lengths.tolist() == [len(r) for r in rows]
    assert flat.tolist() == [i for r in rows for i in r.tolist()]
