"""Tests for the synthetic translation task.

The structural checks re-derive what each rule must have done from the exported lexicon and the
sentences themselves; they never compare against outputs copied from the generator.
"""

import collections
import dataclasses
import random
import re
import statistics
from collections import defaultdict

import pytest

from seq2seq.data import synthetic as syn

# Source noun form (one or two words) -> (target form, is plural, gender of the target noun).
SOURCE_NOUNS = {
    noun.source[i]: (noun.target[i], bool(i), noun.gender)
    for noun in syn.NOUNS + syn.COMPOUNDS
    for i in (0, 1)
}
TARGET_NOUNS = {target for target, _, _ in SOURCE_NOUNS.values()}
SEPARABLE = {s for s, (sg, _) in syn.TRANSITIVE_VERBS.items() if len(sg.split()) == 2}
ADJECTIVE_FORMS = {
    adj: {syn.adjective_form(adj, c) for c in ("m", "f", "n", "pl")} for adj in syn.ADJECTIVES
}
ALL_ADJECTIVE_FORMS = set().union(*ADJECTIVE_FORMS.values())


@pytest.fixture(scope="module")
def train():
    return syn.load_split_pairs("train")


def source_items(sentence: str) -> list[str]:
    """Source words, with each compound noun ("apple tree") kept as one item."""
    words, items, i = sentence.split(), [], 0
    while i < len(words):
        two = " ".join(words[i : i + 2])
        step = 2 if " " in two and two in SOURCE_NOUNS else 1
        items.append(" ".join(words[i : i + step]))
        i += step
    return items


def test_same_seed_same_pairs_and_other_seed_other_pairs():
    first = syn.load_split("train", 300, seed=0)
    syn._generated.cache_clear()  # drawn again, not read from the process's cache
    assert syn.load_split("train", 300, seed=0) == first
    other = syn.load_split("train", 300, seed=1)
    assert len(set(other) & set(syn.load_split("train", 300, seed=0))) < 30
    assert syn.generate_pair(random.Random(7)) == syn.generate_pair(random.Random(7))


def test_smaller_request_is_prefix_and_default_sizes():
    assert syn.load_split("validation", 40) == syn.load_split("validation", 120)[:40]
    for split in ("validation", "test"):
        assert len(syn.load_split(split)) == syn.DEFAULT_SIZES[split]


def test_splits_are_disjoint_on_source_sentences(train):
    sources = {"train": [p.source for p in train]}
    for split in ("validation", "test"):
        sources[split] = [p.source for p in syn.load_split_pairs(split)]
    for split, sentences in sources.items():
        assert len(set(sentences)) == len(sentences) == syn.DEFAULT_SIZES[split]
    assert not set(sources["train"]) & set(sources["validation"])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["validation"]) & set(sources["test"])


def test_unknown_split_raises_naming_valid_splits():
    with pytest.raises(ValueError, match="train.*validation.*test"):
        syn.load_split("dev")


def test_lengths_words_and_vocabulary(train):
    lengths = [len(p.source.split()) for p in train]
    assert min(lengths) >= 3 and max(lengths) <= 40
    assert 10 <= statistics.mean(lengths) <= 14
    assert max(lengths) >= 35  # a tail of long sentences exists
    assert 0.03 <= sum(n > 20 for n in lengths) / len(lengths) <= 0.3
    for p in train[:2000]:
        assert re.fullmatch(r"[a-z]+( [a-z]+)*", p.source) and re.fullmatch(
            r"[a-z]+( [a-z]+)*", p.target
        )
    source_vocab = {w for p in train for w in p.source.split()}
    target_vocab = {w for p in train for w in p.target.split()}
    assert 90 <= len(source_vocab) <= 210 and 90 <= len(target_vocab) <= 210


def test_each_phenomenon_is_common(train):
    for p in train:
        assert p.phenomena <= syn.PHENOMENA
    for phenomenon in syn.PHENOMENA:
        share = sum(phenomenon in p.phenomena for p in train) / len(train)
        assert share >= 0.15, (phenomenon, share)


def test_flags_agree_with_the_source(train):
    for p in train:
        items = source_items(p.source)
        has_adjective = any(w in syn.ADJECTIVES for w in items)
        assert ("adjective_noun_reordering" in p.phenomena) == has_adjective, p
        assert ("verb_final" in p.phenomena) == bool({"that", "which"} & set(items)), p
        assert ("one_to_two" in p.phenomena) == bool(SEPARABLE & set(items)), p


def test_word_counts_balance(train):
    """Every rule is one-to-one except separable verbs (+1), compounds and fusions (-1 each)."""
    for p in train:
        items = source_items(p.source)
        extra = sum(w in SEPARABLE for w in items)
        compounds = sum(" " in w for w in items)
        fused = sum(w in syn.FUSED.values() for w in p.target.split())
        assert len(p.target.split()) == len(p.source.split()) + extra - compounds - fused, p
        assert ("two_to_one" in p.phenomena) == bool(compounds + fused), p


def test_adjective_follows_its_noun(train):
    for p in (p for p in train if "adjective_noun_reordering" in p.phenomena):
        items, target = source_items(p.source), p.target.split()
        bigrams = set(zip(target, target[1:], strict=False))
        for adj, noun in zip(items, items[1:], strict=False):
            if adj in syn.ADJECTIVES:
                noun_target = SOURCE_NOUNS[noun][0]
                assert any((noun_target, form) in bigrams for form in ADJECTIVE_FORMS[adj]), p
        # ...and never the source order: no target adjective directly before a noun.
        assert not any(a in ALL_ADJECTIVE_FORMS and b in TARGET_NOUNS for a, b in bigrams), p


def test_adjective_and_determiner_forms_follow_gender(train):
    adjective_forms = defaultdict(set)  # (adjective, class) -> target forms seen
    first_determiner = defaultdict(set)  # class of the first noun -> target word for "the"
    for p in train:
        items, target = source_items(p.source), p.target.split()
        bigrams = set(zip(target, target[1:], strict=False))
        for adj, noun in zip(items, items[1:], strict=False):
            if adj in syn.ADJECTIVES:
                noun_target, plural, gender = SOURCE_NOUNS[noun]
                seen = {form for form in ADJECTIVE_FORMS[adj] if (noun_target, form) in bigrams}
                adjective_forms[adj, "pl" if plural else gender] |= seen
        head = next(w for w in items if w in SOURCE_NOUNS)
        if items[0] == "the":
            _, plural, gender = SOURCE_NOUNS[head]
            first_determiner["pl" if plural else gender].add(target[0])
    for adj in syn.ADJECTIVES:
        forms = [adjective_forms[adj, c] for c in ("m", "f", "n", "pl")]
        assert all(len(f) == 1 for f in forms), (adj, forms)  # one form per class...
        assert len(set().union(*forms)) == 4, (adj, forms)  # ...and a different one for each
    determiners = [first_determiner[c] for c in ("m", "f", "n")]
    assert all(len(d) == 1 for d in determiners) and len(set().union(*determiners)) == 3


def test_verb_agrees_with_subject_number(train):
    forms = defaultdict(set)  # (source verb, subject is plural) -> first target word of the verb
    for p in train:
        items = source_items(p.source)
        head = next(i for i, w in enumerate(items) if w in SOURCE_NOUNS)
        # A simple subject "DET [ADJ] NOUN" directly followed by a verb used once in the sentence.
        verb = items[head + 1] if head + 1 < len(items) else None
        if verb not in syn.VERBS or items.count(verb) != 1:
            continue
        candidates = {f.split()[0] for f in syn.VERBS[verb]}
        forms[verb, SOURCE_NOUNS[items[head]][1]] |= candidates & set(p.target.split())
    for verb in syn.VERBS:
        singular, plural = forms[verb, False], forms[verb, True]
        assert len(singular) == len(plural) == 1 and singular != plural, (verb, singular, plural)


def test_relative_clause_agrees_with_its_antecedent(train):
    pronouns = defaultdict(set)  # class of the antecedent -> target relative pronoun
    verb_forms = defaultdict(set)  # (verb after "which", antecedent is plural) -> target forms
    for p in train:
        items, target = source_items(p.source), p.target.split()
        if items.count("which") != 1:
            continue
        at = items.index("which")
        noun_target, plural, gender = SOURCE_NOUNS[items[at - 1]]  # "which" follows its noun
        verb = items[at + 1]
        if target.count(noun_target) != 1 or items.count(verb) != 1:
            continue
        after = target.index(noun_target) + 1
        after += target[after] in ALL_ADJECTIVE_FORMS  # the noun's adjective comes first
        pronouns["pl" if plural else gender].add(target[after])
        candidates = {f.split()[0] for f in syn.VERBS[verb]}
        verb_forms[verb, plural] |= candidates & set(target)
    by_gender = [pronouns[c] for c in ("m", "f", "n")]
    assert all(len(x) == 1 for x in by_gender) and len(set().union(*by_gender)) == 3, pronouns
    assert len(pronouns["pl"]) == 1
    checked = [v for v in syn.VERBS if (v, False) in verb_forms and (v, True) in verb_forms]
    assert len(checked) >= len(syn.VERBS) // 2
    for verb in checked:
        singular, plural = verb_forms[verb, False], verb_forms[verb, True]
        assert len(singular) == len(plural) == 1 and singular != plural, (verb, singular, plural)


def test_subordinate_verb_moves_past_its_object(train):
    checked = 0
    for p in train:
        items, target = source_items(p.source), p.target.split()
        if items.count("that") != 1 or {"which", "and", "but"} & set(items):
            continue
        clause = items[items.index("that") + 1 :]
        verbs = [i for i, w in enumerate(clause) if w in syn.TRANSITIVE_VERBS]
        if len(verbs) != 1 or not any(w in SOURCE_NOUNS for w in clause[verbs[0] + 1 :]):
            continue
        # Source: the verb precedes its object noun. Target: after "dass" come subject and object
        # (two or more nouns), and the verb (one of its two forms) closes the sentence.
        sub_target = target[target.index("dass") + 1 :]
        verb_forms = [f.split() for f in syn.TRANSITIVE_VERBS[clause[verbs[0]]]]
        assert any(sub_target[-len(f) :] == f for f in verb_forms), p
        verb_start = len(sub_target) - len(verb_forms[0])
        assert sum(w in TARGET_NOUNS for w in sub_target[:verb_start]) >= 2, p
        assert not any(w in TARGET_NOUNS for w in sub_target[verb_start:]), p
        checked += 1
    assert checked >= 500


def test_main_clause_verb_stays_before_its_object(train):
    checked = 0
    for p in train:
        items, target = source_items(p.source), p.target.split()
        verbs = [w for w in items if w in syn.TRANSITIVE_VERBS]
        if {"that", "which", "and", "but"} & set(items) or len(verbs) != 1:
            continue
        verb_forms = {f.split()[0] for f in syn.TRANSITIVE_VERBS[verbs[0]]}
        position = next(i for i, w in enumerate(target) if w in verb_forms)
        assert any(w in TARGET_NOUNS for w in target[position:]), p
        checked += 1
    assert checked >= 1000


def test_one_to_two_keeps_both_target_words_together(train):
    for p in (p for p in train if "one_to_two" in p.phenomena):
        target = f" {p.target} "
        for verb in SEPARABLE & set(source_items(p.source)):
            assert any(f" {form} " in target for form in syn.TRANSITIVE_VERBS[verb]), p


def test_pair_is_frozen_and_a_large_split_has_the_size_asked_for():
    """How fast generation is lives in ``python -m seq2seq.bench data`` (its ``read_s``)."""
    pair = syn.generate_pair(random.Random(0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        pair.source = "x"  # type: ignore[misc]
    assert len(syn.load_split("train", 20000, seed=123)) == 20000


@pytest.fixture(scope="module")
def long_train():
    return syn.load_split_pairs("train", 3000, lengths="uniform", min_words=3, max_words=60)


@pytest.mark.parametrize(
    "check",
    [
        test_flags_agree_with_the_source,
        test_word_counts_balance,
        test_verb_agrees_with_subject_number,
        test_relative_clause_agrees_with_its_antecedent,
        test_one_to_two_keeps_both_target_words_together,
    ],
)
def test_uniform_lengths_keep_the_grammar(long_train, check):
    check(long_train)  # (checks of one-clause sentences only would find too few long ones)


def test_uniform_lengths_spread_evenly_over_every_length(long_train):
    counts = collections.Counter(len(p.source.split()) for p in long_train)
    assert set(counts) == set(range(3, 61))  # every length from 3 to 60 words
    expected = len(long_train) / 58
    assert all(0.5 * expected <= n <= 1.5 * expected for n in counts.values()), counts  # ~3.5 sd
    assert (
        syn.load_split("test", 50, lengths="uniform", max_words=60)
        == syn.load_split("test", 80, lengths="uniform", max_words=60)[:50]
    )
    with pytest.raises(ValueError, match="min_words <= max_words"):
        syn.load_split("test", 5, lengths="uniform", min_words=10, max_words=5)


def test_a_large_uniform_split_has_the_size_asked_for_and_keeps_its_bound():
    pairs = syn.load_split_pairs("train", 20000, lengths="uniform", max_words=60)
    assert len(pairs) == 20000
    assert max(len(p.source.split()) for p in pairs) <= 60
