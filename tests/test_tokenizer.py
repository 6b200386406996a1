"""SentencePiece: round trips restore real text; the vocabulary is a function of the seed."""

import collections
import logging
import random
import string

import pytest
from sacremoses import MosesDetokenizer, MosesTokenizer

from seq2seq.data.pipeline import build_tokenizer
from seq2seq.data.sources import DataError, ListCorpus, TextCorpus
from seq2seq.data.tokenizer import (
    MosesWords,
    load_tokenizer,
    sample_indices,
    train_tokenizer,
)
from seq2seq.models.base import EOS_ID, UNK_ID
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
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert saved == ["moses.json", "shared.model"]  # a word vocabulary: Moses' languages too


def test_a_vocabulary_smaller_than_asked_for_is_logged(tmp_path, caplog):
    """A sample with fewer distinct words than data.vocab_size gave a smaller vocabulary
    without a word, while config.json kept the size asked for."""
    config = tiny_config()  # a word vocabulary
    config.data.vocab_size = 100
    pairs = [(f"a b c {i % 7}", f"x y z {i % 5}") for i in range(200)]
    with caplog.at_level(logging.WARNING, logger="seq2seq"):
        tokenizer = build_tokenizer(config, tmp_path / "small", ListCorpus(pairs))
    # one shared list: 4 special ids, the words a b c x y z and the digits 0-6
    assert tokenizer.source_vocab_size == tokenizer.target_vocab_size == 4 + 6 + 7
    assert "vocabulary: 17 pieces, fewer than data.vocab_size=100:" in caplog.text
    caplog.clear()
    config.data.vocab_size = 12  # the 12 most frequent: as asked, so nothing to say
    with caplog.at_level(logging.WARNING, logger="seq2seq"):
        assert (
            build_tokenizer(config, tmp_path / "exact", ListCorpus(pairs)).source_vocab_size == 12
        )
    assert "vocabulary:" not in caplog.text


def test_flat_encoding_matches_per_sentence_encoding(tmp_path):
    config = tiny_config()
    pairs = [("a b c", "x y"), ("c", "z z z z")]
    tokenizer = build_tokenizer(config, tmp_path, ListCorpus(pairs * 20))
    flat, lengths = tokenizer.encode_target_flat([t for _, t in pairs])
    rows = tokenizer.encode_target([t for _, t in pairs])
    assert lengths.tolist() == [len(r) for r in rows]
    assert flat.tolist() == [i for r in rows for i in r.tolist()]


def test_the_tokenizer_trains_on_every_core_the_process_may_use(tmp_path, monkeypatch):
    import os

    import sentencepiece as spm

    threads = []
    trainer = spm.SentencePieceTrainer.train

    def train(**options):
        threads.append(options.get("num_threads"))
        return trainer(**options)

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", train)
    build_tokenizer(tiny_config(), tmp_path, ListCorpus([("a b c", "x y"), ("c", "z z")] * 20))
    assert threads == [6]  # one shared vocabulary, trained on the six cores it was given


def _word_tokenizer(pairs, directory, vocab_size=30000, shared=False):
    return train_tokenizer(
        pairs,
        model_type="word",
        vocab_size=vocab_size,
        shared=shared,
        directory=directory,
        source_lang="de",
        target_lang="en",
    )


def test_word_vocabulary_splits_punctuation_as_moses_does(tmp_path):
    pairs = [("Hallo, Welt!", "Hello, world!"), ("Das ist's.", "It's a dog's life.")] * 3
    tokenizer = _word_tokenizer(pairs, tmp_path)
    pieces = [
        tokenizer.target.id_to_piece(int(i)) for i in tokenizer.encode_target(pairs[0][1:])[0]
    ]
    assert pieces == ["▁Hello", "▁,", "▁world", "▁!", "</s>"]  # not "Hello," and "world!"
    english = {tokenizer.target.id_to_piece(i) for i in range(tokenizer.target_vocab_size)}
    assert {"▁'s", "▁It", "▁life", "▁."} <= english  # Moses' English clitic split: It 's
    assert tokenizer.decode_target(tokenizer.encode_target(["It's a dog's life."])[0]) == (
        "It's a dog's life."
    )
    reloaded = load_tokenizer(tmp_path)
    assert reloaded.decode_target(reloaded.encode_target(["Hello, world!"])[0]) == "Hello, world!"


def test_word_round_trip_restores_real_multi30k_sentences(german_english, multi30k, tmp_path):
    tokenizer = _word_tokenizer(german_english.pairs(), tmp_path)
    validation = TextCorpus(multi30k, "val", "de", "en").pairs()[:300]
    ids = tokenizer.encode_target([target for _, target in validation])
    restored = [
        (tokenizer.decode_target(row), target)
        for row, (_, target) in zip(ids, validation, strict=True)
        if UNK_ID not in row.tolist()  # a word outside the 3000 training captions' vocabulary
    ]
    assert len(restored) > 100
    assert all(decoded == target for decoded, target in restored)
    assert any(target.endswith(".") for _, target in restored)  # punctuation went both ways
    tokens = [len(row) - 1 for row in ids]  # EOS excluded
    assert sum(tokens) > sum(len(target.split()) for _, target in validation)  # "." split off


def test_word_shortlist_keeps_the_most_frequent_words(german_english, tmp_path):
    vocab_size = 500
    tokenizer = _word_tokenizer(german_english.pairs(), tmp_path, vocab_size=vocab_size)
    moses = MosesWords("en")
    counts = collections.Counter(
        word for _, target in german_english.pairs() for word in moses.tokenize(target).split()
    )
    kept = {tokenizer.target.id_to_piece(i)[1:] for i in range(4, tokenizer.target_vocab_size)}
    assert tokenizer.target_vocab_size == vocab_size and len(kept) == vocab_size - 4
    assert min(counts[w] for w in kept) >= max(counts[w] for w in counts.keys() - kept)
    rare = next(w for w in counts if w not in kept)
    assert tokenizer.encode_target([f"a {rare}"])[0].tolist()[1] == UNK_ID


@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_plain_words_skip_moses_only_where_moses_changes_nothing(language):
    rng = random.Random(language)
    alphabet = string.ascii_letters + string.digits
    plain = [
        " ".join("".join(rng.choices(alphabet, k=rng.randint(1, 8))) for _ in range(5))
        for _ in range(200)
    ]
    words = MosesWords(language)
    moses, unmoses = MosesTokenizer(lang=language), MosesDetokenizer(lang=language)
    for text in plain:
        assert words.tokenize(text) == moses.tokenize(text, escape=False, return_str=True)
        assert words.detokenize(text) == unmoses.detokenize(text.split())
    assert words.tokenize("a  b") == "a b" and words.tokenize("no.") == "no ."  # not skipped


def test_word_vocabulary_needs_languages(tmp_path):
    with pytest.raises(ValueError, match="source_lang and target_lang"):
        train_tokenizer(
            [("a", "b")], model_type="word", vocab_size=10, shared=True, directory=tmp_path
        )


def test_a_vocabulary_smaller_than_the_corpus_characters_is_one_line(tmp_path):
    """SentencePiece's own check ended in its multi-line INTERNAL message."""
    pairs = [("abc def ghi", "jkl mno pqr"), ("stu vwx", "yz äöü")]  # 27 characters in all
    with pytest.raises(DataError) as error:
        train_tokenizer(pairs, model_type="unigram", vocab_size=12, shared=True, directory=tmp_path)
    message = str(error.value)
    assert message.startswith("config.data.vocab_size=12 is smaller than the ")
    needed = int(message.split("smaller than the ")[1].split()[0])
    assert needed > 27 and message.endswith(f"raise it to at least {needed}")
    assert "\n" not in message and not any(tmp_path.iterdir())  # no model half written
    train_tokenizer(pairs, model_type="unigram", vocab_size=needed, shared=True, directory=tmp_path)


def test_every_word_outside_the_shortlist_is_its_own_unk(german_english, multi30k, tmp_path):
    """Bahdanau et al.: each word outside the shortlist becomes UNK, so a sentence keeps its
    length in words; SentencePiece's own encoder folds a run of unknown words into one UNK."""
    tokenizer = _word_tokenizer(german_english.pairs(), tmp_path, vocab_size=500)
    moses = MosesWords("en")
    vocabulary = tokenizer.target
    kept = {vocabulary.id_to_piece(i): i for i in range(4, tokenizer.target_vocab_size)}
    targets = [target for _, target in TextCorpus(multi30k, "val", "de", "en").pairs()[:300]]
    runs = 0
    for target, ids in zip(targets, tokenizer.encode_target(targets), strict=True):
        words = moses.tokenize(target).split(" ")
        assert ids.tolist() == [kept.get(f"▁{word}", UNK_ID) for word in words] + [EOS_ID]
        folded = vocabulary.encode(moses.tokenize(target), add_eos=True)
        runs += len(folded) < len(ids)
        if UNK_ID not in folded:
            assert ids.tolist() == folded  # known words: SentencePiece's own ids
    assert runs > 10  # sentences where SentencePiece would have folded unknown words together
    flat, lengths = tokenizer.encode_target_flat(targets[:5])
    assert flat.tolist() == sum((row.tolist() for row in tokenizer.encode_target(targets[:5])), [])
    assert lengths.tolist() == [len(row) for row in tokenizer.encode_target(targets[:5])]


@pytest.mark.parametrize("damaged", ["shared.model", "moses.json"])
def test_a_damaged_tokenizer_file_is_named_in_one_line(tmp_path, damaged):
    """eval.py, export and a resume read a run's tokenizer: a damaged file showed as
    "Expecting value: line 1 column 1 (char 0)" or SentencePiece's "INTERNAL: ...(109)", naming
    neither the file nor what to do."""
    config = tiny_config()
    build_tokenizer(
        config, tmp_path, ListCorpus([(f"a b {i % 7}", f"x y {i % 5}") for i in range(50)])
    )
    (tmp_path / damaged).write_bytes(b"\x00junk")
    with pytest.raises(DataError) as refused:
        load_tokenizer(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / damaged} cannot be read (") and "\n" not in message
    assert message.endswith(
        "restore its tokenizer/ folder from a copy of the run (training again makes a new one)"
    )
