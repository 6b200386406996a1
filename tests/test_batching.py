"""Bucketed and packed batches: every pair once per epoch, no attention across packed pairs,
honest padding figures, and iterator states that resume the identical stream."""

import collections
import itertools
import json

import numpy as np
import pytest
from flax import nnx

from seq2seq.data.batching import (
    BucketedBatches,
    BucketSpec,
    PlannedBatch,
    inference_batches,
    plan_batches,
    plan_epoch,
)
from seq2seq.data.encoded import EncodedCorpus, filter_pairs
from seq2seq.data.packing import PackedBatches, first_fit
from seq2seq.data.pipeline import padding_share, real_tokens
from seq2seq.evaluation.validation import _loss_batches
from seq2seq.models import build_model
from seq2seq.models.base import EOS_ID, shift_right
from tests.conftest import tiny_config

FIRST_ID = 10  # pair i's sentences both start with token FIRST_ID + i, which names the pair


def make_corpus(count: int, max_length: int, seed: int = 0, vocab: int = 40) -> EncodedCorpus:
    """``count`` pairs of random lengths in [2, max_length]; each side starts with its pair's id."""
    rng = np.random.default_rng(seed)

    def sentence(i):
        middle = rng.integers(4, vocab, rng.integers(0, max_length - 1))
        return np.concatenate([[FIRST_ID + i], middle, [EOS_ID]]).astype(np.int32)

    pairs = [(sentence(i), sentence(i)) for i in range(count)]
    return EncodedCorpus.from_sentences([s for s, _ in pairs], [t for _, t in pairs])


def pair_ids(batch: dict[str, np.ndarray]) -> list[int]:
    """The pairs in a batch, from each example's first source token."""
    source = batch["source"]
    segments = batch.get("source_segments", (source > 0).astype(np.int32))
    starts = (segments > 0) & (segments != np.pad(segments, ((0, 0), (1, 0)))[:, :-1])
    return (source[starts] - FIRST_ID).tolist()


def bucketed(corpus, seed=0, tokens=96, multiple=1, host=0, hosts=1):
    spec = BucketSpec(16, bucket_width=4, tokens_per_batch=tokens)
    return BucketedBatches(corpus, np.arange(len(corpus)), spec, seed, host, hosts, multiple)


def exact(corpus, seed=0, sentences=8, multiple=1, host=0, hosts=1):
    spec = BucketSpec(16, 4, tokens_per_batch=0, sentences_per_batch=sentences)
    return BucketedBatches(corpus, np.arange(len(corpus)), spec, seed, host, hosts, multiple)


def packed(corpus, seed=0, tokens=56, multiple=1, host=0, hosts=1):
    return PackedBatches(
        corpus,
        np.arange(len(corpus)),
        row_length=16,
        tokens_per_batch=tokens,
        seed=seed,
        shard_index=host,
        shard_count=hosts,
        row_multiple=multiple,
    )


def draw(iterator, count):
    return [next(iterator) for _ in range(count)]


def assert_same_batches(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_bucketed_epoch_holds_every_pair_once_within_budget():
    corpus = make_corpus(70, 16)
    dataset = bucketed(corpus)
    epoch = len(dataset.plan(0))
    batches = draw(iter(dataset), epoch)
    seen = [i for batch in batches for i in pair_ids(batch)]
    assert sorted(seen) == list(range(70))
    shapes = {(batch["source"].shape, batch["target"].shape) for batch in batches}
    assert len(shapes) == dataset.shapes > 1  # what the step compiles, announced at the start
    for batch in batches:
        rows, length = batch["source"].shape
        assert length % 4 == 0 and rows == dataset.spec.batch_size(length)
        assert max(real_tokens(batch, "source"), real_tokens(batch, "target")) <= 96
        used = np.flatnonzero(np.any(batch["source"] > 0, axis=0) | np.any(batch["target"] > 0, 0))
        assert length - 4 <= used.max() < length  # the smallest bucket that fits
        for row, i in zip(batch["source"], pair_ids(batch), strict=False):
            np.testing.assert_array_equal(row[: len(corpus.source(i))], corpus.source(i))


def test_epochs_are_reshuffled_and_seeds_differ():
    corpus = make_corpus(70, 16)
    dataset = bucketed(corpus)
    plans = [dataset.plan(0), dataset.plan(1)]
    assert [b.members.tolist() for b in plans[0]] != [b.members.tolist() for b in plans[1]]
    assert_same_batches(draw(iter(bucketed(corpus)), 5), draw(iter(bucketed(corpus)), 5))
    other = draw(iter(bucketed(corpus, seed=1)), 5)
    assert [pair_ids(b) for b in other] != [pair_ids(b) for b in draw(iter(dataset), 5)]


@pytest.mark.parametrize("make", [bucketed, exact, packed], ids=["bucketed", "exact", "packed"])
def test_restored_state_resumes_the_identical_stream_across_epochs(make):
    corpus = make_corpus(30, 16)
    iterator = iter(make(corpus))
    before = draw(iterator, 3)
    state = json.loads(json.dumps(iterator.get_state()))  # as saved in a checkpoint
    after = draw(iterator, 12)
    seen_before = sum(len(pair_ids(b)) for b in before)
    seen_after = sum(len(pair_ids(b)) for b in after)
    assert seen_before < len(corpus) < seen_before + seen_after  # crosses an epoch boundary

    restored = iter(make(corpus))
    restored.set_state(state)
    assert_same_batches(draw(restored, 12), after)
    assert_same_batches(draw(iter(make(corpus)), 15), before + after)  # same seed, same stream


def test_packed_rows_hold_whole_pairs_with_matching_segments():
    corpus = make_corpus(60, 16, seed=1)
    dataset = packed(corpus)
    rows = dataset.rows
    batches = draw(iter(dataset), 6)
    counts = collections.Counter()
    for batch in batches:
        assert batch["source"].shape == batch["source_segments"].shape == (rows, 16)
        for side in ("source", "target"):
            tokens, segments = batch[side], batch[f"{side}_segments"]
            np.testing.assert_array_equal(tokens > 0, segments > 0)
            for row_tokens, row_segments in zip(tokens, segments, strict=True):
                used = row_segments[row_segments > 0]
                assert np.all(np.diff(used) >= 0) and np.all(row_segments[len(used) :] == 0)
                assert used.tolist() == sorted(used.tolist())
                assert set(used.tolist()) == set(range(1, used.max(initial=0) + 1))
                for segment in range(1, used.max(initial=0) + 1):
                    ids = row_tokens[row_segments == segment]
                    pair = ids[0] - FIRST_ID
                    expected = corpus.source(pair) if side == "source" else corpus.target(pair)
                    np.testing.assert_array_equal(ids, expected)
                    counts[side, pair] += 1
        # Segment k of the source and of the target are the same pair.
        for row in range(rows):
            for segment in range(1, batch["source_segments"][row].max() + 1):
                source_first = batch["source"][row][batch["source_segments"][row] == segment][0]
                target_first = batch["target"][row][batch["target_segments"][row] == segment][0]
                assert source_first == target_first
    assert max(np.max(b["source_segments"]) for b in batches) >= 2  # rows really are shared
    assert 24 <= len(counts) / 2 < 60 and set(counts.values()) == {1}  # no repeat in an epoch


def test_gather_reads_the_sentences_asked_for_in_their_order():
    corpus = make_corpus(30, 16, seed=2)
    pairs = np.array([7, 2, 7, 29, 0])  # out of order, one twice
    for side, one in (("source", corpus.source), ("target", corpus.target)):
        ids, lengths = corpus.gather(side, pairs)
        np.testing.assert_array_equal(ids, np.concatenate([one(i) for i in pairs]))
        assert lengths.tolist() == [len(one(i)) for i in pairs]
        ids, lengths = corpus.gather(side, np.array([], np.int64))
        assert ids.shape == lengths.shape == (0,)


def test_a_packed_batch_puts_each_pair_after_those_placed_in_its_row_before():
    corpus = make_corpus(40, 6, seed=3)  # pairs of at most 6 tokens: three fit a row of 16
    dataset = packed(corpus)
    assert dataset.rows >= 2
    pairs, rows = np.array([3, 0, 5, 1, 8]), [1, 0, 1, 0, 1]
    batch = dataset.batch(pairs, rows)
    for side, one in (("source", corpus.source), ("target", corpus.target)):
        for row, members in ((0, [0, 1]), (1, [3, 5, 8])):
            ids = np.concatenate([one(i) for i in members])
            segments = np.concatenate([[k + 1] * len(one(i)) for k, i in enumerate(members)])
            np.testing.assert_array_equal(batch[side][row, : len(ids)], ids)
            np.testing.assert_array_equal(batch[f"{side}_segments"][row, : len(ids)], segments)
            assert not batch[side][row, len(ids) :].any()
            assert not batch[f"{side}_segments"][row, len(ids) :].any()
        assert not batch[side][2:].any() and not batch[f"{side}_segments"][2:].any()


def test_packed_attention_never_crosses_pairs():
    """A pair's logits in a packed row equal its logits alone in a row of its own."""
    corpus = make_corpus(12, 8, seed=2, vocab=24)
    dataset = packed(corpus, tokens=32)
    batch = next(iter(dataset))
    model = build_model(tiny_config("transformer"), 40, 40, seed=0)

    @nnx.jit
    def logits(model, source, target, source_segments=None, target_segments=None):
        inputs = shift_right(target, target_segments)
        return model(
            source, inputs, source_segments=source_segments, target_segments=target_segments
        )[0]

    packed_logits = logits(
        model, batch["source"], batch["target"], batch["source_segments"], batch["target_segments"]
    )
    places = [  # (row, segment, pair) of every packed pair
        (row, segment, batch["target"][row][batch["target_segments"][row] == segment][0] - FIRST_ID)
        for row in range(dataset.rows)
        for segment in range(1, batch["target_segments"][row].max() + 1)
    ]
    assert len(places) > 2  # some row holds several pairs
    source = np.zeros((len(places), 16), np.int32)
    target = np.zeros((len(places), 16), np.int32)
    for k, (_, _, pair) in enumerate(places):
        source[k, : len(corpus.source(pair))] = corpus.source(pair)
        target[k, : len(corpus.target(pair))] = corpus.target(pair)
    alone_logits = logits(model, source, target)
    for k, (row, segment, pair) in enumerate(places):
        in_row = packed_logits[row][batch["target_segments"][row] == segment]
        np.testing.assert_allclose(
            in_row, alone_logits[k, : len(corpus.target(pair))], atol=2e-5, rtol=1e-5
        )


@pytest.mark.parametrize("make", [bucketed, packed], ids=["bucketed", "packed"])
def test_padding_share_matches_the_pairs_in_the_batch(make):
    corpus = make_corpus(40, 16, seed=3)
    for batch in draw(iter(make(corpus)), 4):
        ids = pair_ids(batch)
        real = sum(len(corpus.source(i)) + len(corpus.target(i)) for i in ids)
        assert padding_share(batch) == pytest.approx(1 - real / (2 * batch["source"].size))


def test_padding_share_of_a_hand_made_batch():
    batch = {"source": np.array([[5, 6, 3, 0], [5, 3, 0, 0]]), "target": np.zeros((2, 4), int)}
    batch["target"][0, :4] = [7, 7, 7, 3]
    assert padding_share(batch) == pytest.approx(1 - 9 / 16)


def test_hosts_split_each_global_batch_between_them():
    corpus = make_corpus(50, 16, seed=4)
    whole = draw(iter(bucketed(corpus, multiple=2)), 6)
    halves = [draw(iter(bucketed(corpus, multiple=2, host=h, hosts=2)), 6) for h in (0, 1)]
    for batch, first, second in zip(whole, *halves, strict=True):
        for key in ("source", "target"):
            np.testing.assert_array_equal(np.concatenate([first[key], second[key]]), batch[key])


def test_hosts_split_each_packed_global_batch_between_them():
    corpus = make_corpus(40, 16, seed=5)
    whole = draw(iter(packed(corpus, multiple=2)), 6)
    halves = [draw(iter(packed(corpus, multiple=2, host=h, hosts=2)), 6) for h in (0, 1)]
    for batch, first, second in zip(whole, *halves, strict=True):
        assert pair_ids(first) and pair_ids(second)  # both hosts read pairs of every batch
        for key in batch:
            np.testing.assert_array_equal(np.concatenate([first[key], second[key]]), batch[key])


def test_filters_count_each_dropped_pair_under_its_first_reason():
    # lengths include EOS: 1 is an empty sentence.
    source = np.array([5, 1, 5, 70, 2, 30, 12, 1])
    target = np.array([6, 5, 1, 10, 30, 3, 11, 80])
    kept, counts = filter_pairs(source, target, max_length=64, max_length_ratio=9.0)
    assert kept.tolist() == [0, 6]  # pairs 4 and 5: 1 vs 29 and 29 vs 2 tokens, EOS excluded
    assert counts == {"empty": 3, "too_long": 1, "length_ratio": 2}
    kept, counts = filter_pairs(source, target, max_length=64, max_length_ratio=0.0)
    assert kept.tolist() == [0, 4, 5, 6] and counts["length_ratio"] == 0


def test_exact_sentences_per_batch_fills_every_batch_and_buckets_by_length():
    corpus = make_corpus(203, 16, seed=6)
    dataset = exact(corpus)
    epochs = []
    for epoch in range(2):
        plan = plan_epoch(dataset.lengths, dataset.spec, 0, epoch)
        epochs.append([dataset.batch(planned) for planned in plan])
    for batches in epochs:
        assert len(batches) == 203 // 8
        seen = [i for batch in batches for i in pair_ids(batch)]
        assert len(seen) == len(set(seen)) == 200  # 203 mod 8 = 3 pairs sit the epoch out
        for batch in batches:
            rows, length = batch["source"].shape
            assert rows == 8 and np.all(batch["source"][:, 0] > 0)  # no all-padding row
            longest = max(dataset.lengths[i] for i in pair_ids(batch))  # either side, EOS too
            assert length == -(-longest // 4) * 4  # the bucket of its longest pair
        # Sorted by length before cutting: few batches mix two buckets, none mixes three.
        spans = [len({-(-dataset.lengths[i] // 4) for i in pair_ids(b)}) for b in batches]
        assert max(spans) <= 2 and sum(s == 2 for s in spans) <= 3
    left_out = [set(range(203)) - {i for b in batches for i in pair_ids(b)} for batches in epochs]
    assert left_out[0] != left_out[1]  # another epoch, others left out


def test_exact_batches_split_between_hosts_and_reject_an_indivisible_multiple():
    corpus = make_corpus(50, 16, seed=7)
    whole = draw(iter(exact(corpus, multiple=2)), 4)
    halves = [draw(iter(exact(corpus, multiple=2, host=h, hosts=2)), 4) for h in (0, 1)]
    for batch, first, second in zip(whole, *halves, strict=True):
        assert first["source"].shape[0] == 4
        np.testing.assert_array_equal(
            np.concatenate([first["source"], second["source"]]), batch["source"]
        )
    with pytest.raises(ValueError, match="sentences_per_batch=8 is not a multiple of 3"):
        exact(corpus, multiple=3)
    with pytest.raises(ValueError, match="only 5 training pairs"):
        exact(make_corpus(5, 16))


# The one planner, on a hand-made corpus. Lengths, bucket width 4, longest 12: buckets 4, 8, 12;
# by a budget of 8 tokens, 2 sentences per batch of length 4 and 1 of length 8 or 12. The last
# example (20 tokens) is over the longest and is planned at 12.
HAND_LENGTHS = np.array([3, 9, 4, 1, 12, 8, 5, 2, 20])


def as_pairs(plan: list[PlannedBatch]) -> list[tuple[int, list[int]]]:
    return [(b.padded_length, b.members.tolist()) for b in plan]


def test_planner_groups_a_hand_made_corpus_in_the_order_given_or_sorted():
    budget = BucketSpec(12, 4, tokens_per_batch=8)
    assert as_pairs(plan_batches(HAND_LENGTHS, budget)) == [
        (4, [0, 2]), (4, [3, 7]), (8, [5]), (8, [6]), (12, [1]), (12, [4]), (12, [8])
    ]  # fmt: skip
    assert as_pairs(plan_batches(HAND_LENGTHS, budget, sort_by_length=True)) == [
        (4, [3, 7]), (4, [0, 2]), (8, [6]), (8, [5]), (12, [1]), (12, [4]), (12, [8])
    ]  # fmt: skip
    three = BucketSpec(12, 4, tokens_per_batch=0, sentences_per_batch=3)
    assert as_pairs(plan_batches(HAND_LENGTHS, three, sort_by_length=True)) == [
        (4, [3, 7, 0]), (8, [2, 6, 5]), (12, [1, 4, 8])
    ]  # fmt: skip
    four = BucketSpec(12, 4, tokens_per_batch=0, sentences_per_batch=4)
    assert as_pairs(plan_batches(HAND_LENGTHS, four, sort_by_length=True)) == [
        (4, [3, 7, 0, 2]), (12, [6, 5, 1, 4]), (12, [8])  # straddles; the last is short
    ]  # fmt: skip


@pytest.mark.parametrize("sentences", [0, 8], ids=["budget", "exact"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shuffled_plan_holds_each_example_once_in_batches_that_fit(seed, sentences):
    lengths = np.random.default_rng(seed).integers(1, 30, 203)  # some over the longest, 24
    spec = BucketSpec(24, 4, tokens_per_batch=96, sentences_per_batch=sentences)
    plan = plan_batches(lengths, spec, np.random.default_rng(seed))
    members = np.concatenate([b.members for b in plan])
    assert len(members) == len(set(members.tolist()))
    assert len(members) == (203 - 203 % 8 if sentences else 203)
    per_bucket = collections.Counter()
    for batch in plan:
        longest = min(lengths[batch.members].max(), 24)
        assert batch.padded_length == -(-longest // 4) * 4  # the smallest bucket that fits all
        if sentences:
            assert len(batch.members) == 8
        else:  # budget: one bucket per batch, full batches except one per bucket
            assert np.all(
                -(-np.minimum(lengths[batch.members], 24) // 4) * 4 == batch.padded_length
            )
            size = 96 // batch.padded_length
            assert len(batch.members) <= size
            per_bucket[batch.padded_length] += len(batch.members) < size
    assert max(per_bucket.values(), default=0) <= 1
    ordered = [b.padded_length for b in plan]
    assert ordered != sorted(ordered)  # the batches are shuffled too


def test_inference_batches_cover_every_sentence_once_sorted_by_length_longest_first():
    rng = np.random.default_rng(8)
    sources = [rng.integers(4, 40, n).astype(np.int32) for n in rng.integers(1, 20, 23)]
    batches = inference_batches(sources, batch_size=5, bucket_width=4, max_length=12)
    order = np.concatenate([indices for indices, _ in batches])
    assert sorted(order.tolist()) == list(range(23))
    clipped = [[min(len(sources[i]), 12) for i in indices] for indices, _ in batches]
    for batch, after in itertools.pairwise(clipped):  # no sentence longer than any before it
        assert min(batch) >= max(after)
    assert max(clipped[0]) == 12 and min(clipped[-1]) == min(min(len(s), 12) for s in sources)
    for indices, source in batches:
        longest = max(min(len(sources[i]), 12) for i in indices)
        assert source.shape == (5, -(-longest // 4) * 4)
        for row, i in enumerate(indices):
            kept = sources[i][:12]
            np.testing.assert_array_equal(source[row, : len(kept)], kept)
            assert np.all(source[row, len(kept) :] == 0)
        assert np.all(source[len(indices) :] == 0)  # rows past the last sentence are padding


def test_validation_loss_batches_hold_each_pair_once_in_corpus_order_per_bucket():
    examples = [  # pair i: both sides start with its id, the source HAND_LENGTHS[i] tokens long
        (np.r_[FIRST_ID + i, np.full(n - 1, 5)].astype(np.int32), np.array([FIRST_ID + i, EOS_ID]))
        for i, n in enumerate(HAND_LENGTHS)
    ]
    config = tiny_config("transformer")
    config.data.max_length, config.data.bucket_width, config.data.tokens_per_batch = 12, 4, 8
    batches = _loss_batches(examples, config)
    assert [(b["source"].shape, pair_ids(b)) for b in batches] == [
        ((2, 4), [0, 2]), ((2, 4), [3, 7]), ((1, 8), [5]), ((1, 8), [6]),
        ((1, 12), [1]), ((1, 12), [4]), ((1, 12), [8])
    ]  # fmt: skip
    np.testing.assert_array_equal(batches[-1]["source"][0], examples[8][0][:12])  # truncated


# -- The same batches on any mesh; budgets in real tokens ----------------------------------------


@pytest.mark.parametrize("make", [bucketed, packed], ids=["bucketed", "packed"])
def test_devices_and_hosts_only_add_empty_rows_to_the_same_batches(make):
    corpus = make_corpus(90, 16, seed=9)
    alone = draw(iter(make(corpus)), 12)
    padded = 0
    for multiple in (3, 8):
        spread = draw(iter(make(corpus, multiple=multiple)), 12)
        for one, many in zip(alone, spread, strict=True):
            rows = one["source"].shape[0]
            assert many["source"].shape[0] == -(-rows // multiple) * multiple
            padded += many["source"].shape[0] > rows
            for key in one:
                np.testing.assert_array_equal(many[key][:rows], one[key], err_msg=key)
                assert not many[key][rows:].any(), "an added row holds tokens"
    assert padded  # some batches were padded with empty rows
    halves = [draw(iter(make(corpus, multiple=8, host=h, hosts=2)), 12) for h in (0, 1)]
    for whole, first, second in zip(spread, *halves, strict=True):
        for key in whole:
            np.testing.assert_array_equal(np.concatenate([first[key], second[key]]), whole[key])


def first_epoch(dataset) -> list[dict[str, np.ndarray]]:
    """The batches of a bucketed or packed dataset's first epoch."""
    iterator = iter(dataset)
    if isinstance(dataset, BucketedBatches):
        return draw(iterator, len(dataset.plan(0)))
    batches = []
    while iterator.get_state()["pair"] < len(dataset.indices):
        batches.append(next(iterator))
    return batches


@pytest.mark.parametrize("make", [bucketed, packed], ids=["bucketed", "packed"])
def test_batches_hold_up_to_the_budget_in_real_tokens_per_side(make):
    corpus = make_corpus(400, 16, seed=10)
    batches = first_epoch(make(corpus, tokens=96))
    assert sum(len(pair_ids(b)) for b in batches) == 400
    fullest = [max(real_tokens(b, "source"), real_tokens(b, "target")) for b in batches]
    assert max(fullest) <= 96
    # The next pair (16 tokens at most) would have gone over: only the last batch of each bucket
    # (4 of them) or of the packed epoch holds less.
    short = sum(tokens <= 96 - 16 for tokens in fullest)
    assert short <= (4 if make is bucketed else 1), fullest


def test_budget_cuts_a_hand_made_bucket_by_real_tokens_and_rows():
    # One bucket (4); real (source, target) tokens; budget 10 tokens per side.
    sides = np.array([[3, 4], [4, 2], [2, 2], [4, 4], [1, 3]])
    lengths = sides.max(axis=1)
    unbounded = BucketSpec(8, 4, tokens_per_batch=10, bucket_rows=(99, 99))
    # Sources 3+4+2 = 9 and targets 4+2+2 = 8; a fourth pair would bring the source to 13.
    assert as_pairs(plan_batches(lengths, unbounded, sides=sides)) == [(4, [0, 1, 2]), (4, [3, 4])]
    two_rows = BucketSpec(8, 4, tokens_per_batch=10, bucket_rows=(2, 99))
    assert as_pairs(plan_batches(lengths, two_rows, sides=sides)) == [
        (4, [0, 1]), (4, [2, 3]), (4, [4])
    ]  # fmt: skip
    assert as_pairs(plan_batches(lengths, two_rows)) == [(4, [0, 1]), (4, [2, 3]), (4, [4])]


def test_first_fit_places_pairs_in_the_first_row_with_room_on_both_sides():
    sides = np.array([[5, 3], [4, 6], [6, 2], [3, 3]])
    # Pair 1 (4, 6) misses row 0's room (3, 5); pair 2 (6, 2) fits neither row of two.
    assert first_fit(sides, row_length=8, rows=2, tokens=100) == [0, 1]
    assert first_fit(sides, row_length=8, rows=3, tokens=100) == [0, 1, 2, 0]
    assert first_fit(sides, row_length=8, rows=3, tokens=14) == [0, 1]  # sources 5 + 4 + 6 > 14
