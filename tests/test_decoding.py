"""Beam search: exact on a space small enough to enumerate, argmax at width one, cache-blind."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.decoding.beam_search import beam_search, length_penalty, stage_sizes
from seq2seq.decoding.search_parts import (
    best_next_tokens,
    cache_reorder,
    expand_to_beams,
    next_token_log_probs,
    output_limits,
    select_beams,
    top_k,
)
from seq2seq.models import RNNSearch, RNNSearchConfig, Transformer, TransformerConfig
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID

VOCAB = 6  # PAD, UNK, BOS, EOS and two words: small enough to enumerate every output
WORDS = (UNK_ID, 4, 5)  # what may precede EOS (a translation never holds PAD or BOS)
SOURCES = np.array(
    [[4, 5, 1, 3], [5, 3, 0, 0], [1, 1, 4, 3], [5, 4, 4, 3], [4, 3, 0, 0], [1, 5, 3, 0]], np.int32
)


def _transformer():
    config = TransformerConfig(
        VOCAB, VOCAB, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
        encoder_layers=1, decoder_layers=1, tie_output=False,
    )  # fmt: skip
    model = Transformer(config, rngs=nnx.Rngs(0))
    # A sharper output layer than at initialisation, so outputs differ in probability and the
    # best one is often not the greedy one (checked below: the test would be vacuous otherwise).
    kernel = model.output_projection.kernel
    kernel[...] = np.random.default_rng(1).normal(size=kernel.shape).astype(np.float32)
    return model


def _rnnsearch(attention="additive"):
    config = RNNSearchConfig(
        VOCAB, VOCAB, embedding_size=8, encoder_hidden_size=8, decoder_hidden_size=8,
        alignment_size=8, maxout_size=4, attention=attention,
    )  # fmt: skip
    graphdef, params = nnx.split(RNNSearch(config, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(0)  # N(0, 1.5^2) everywhere: far from uniform
    params = jax.tree.map(lambda p: rng.normal(0.0, 1.5, p.shape).astype(np.float32), params)
    return nnx.merge(graphdef, params)


class RandomTree(nnx.Module):
    """A stand-in model whose next-token logits are drawn at random for each source and prefix.

    A small network at initialisation ranks outputs in simple patterns (one token repeated, or
    EOS at once); this one follows none, so greedy search is often wrong and the winner is often
    not the beam's leader at every step: the hard case for a search. It keeps the model contract,
    with the prefix (as a number) for its cache.
    """

    SOURCES = 64  # distinct sources before codes wrap around
    TABLE = 4096  # distinct prefixes before codes wrap around (only long outputs ever do)

    def __init__(self, seed: int = 0):
        logits = np.random.default_rng(seed).normal(0.0, 2.0, (self.SOURCES, self.TABLE, VOCAB))
        logits[..., EOS_ID] -= 2.0  # longer outputs, so that most searches go deep
        self.logits = nnx.Param(jnp.asarray(logits, jnp.float32))  # [source, prefix, V]

    def encode(self, source, **unused):
        code = jnp.zeros(source.shape[:1], jnp.int32)
        for s in range(source.shape[1]):
            code = jnp.where(source[:, s] == PAD_ID, code, (code * VOCAB + source[:, s]))
        return {"key": code % self.SOURCES}  # [B]

    def start_decoding(self, encoded, max_length):
        return encoded, {"prefix": jnp.zeros_like(encoded["key"])}  # [B]

    def decode(self, encoded, target_inputs, *, cache=None, **unused):
        # With a cache, rows are N hypotheses per sentence (the contract of models/base.py).
        key = jnp.repeat(encoded["key"], target_inputs.shape[0] // encoded["key"].shape[0])
        prefix = jnp.zeros_like(key) if cache is None else cache["prefix"]
        codes = []
        for t in range(target_inputs.shape[1]):
            prefix = (prefix * VOCAB + target_inputs[:, t]) % self.TABLE
            codes.append(prefix)
        logits = self.logits[...][key[:, None], jnp.stack(codes, axis=1)]  # [B, T, V]
        return logits, {}, None if cache is None else {"prefix": prefix}

    def __call__(self, source, target_inputs, **unused):
        logits, aux, _ = self.decode(self.encode(source), target_inputs)
        return logits, aux


MODELS = {
    "transformer": _transformer,
    "rnnsearch": _rnnsearch,
    "rnnencdec": lambda: _rnnsearch("none"),
    "random_tree": RandomTree,
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


@functools.partial(
    jax.jit, static_argnames=("graphdef", "max_length", "beam_size", "use_cache", "min_rows")
)
def _beam(
    graphdef, params, source, limits, alpha, *, max_length, beam_size, use_cache=True, min_rows=8
):
    model = nnx.merge(graphdef, params)
    return beam_search(
        model, source, max_length, beam_size=beam_size, alpha=alpha, limits=limits,
        use_cache=use_cache, min_rows=min_rows,
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames="graphdef")
def _teacher_forced(graphdef, params, source, target_inputs):
    logits, _ = nnx.merge(graphdef, params)(source, target_inputs)
    return logits


def _search(model, source, limits, alpha=0.6, **static):
    graphdef, params = nnx.split(model)
    return _beam(graphdef, params, jnp.asarray(source), jnp.asarray(limits), alpha, **static)


def _all_outputs(limit: int) -> list[list[int]]:
    """Every output of at most ``limit`` tokens: words then EOS, or ``limit`` tokens cut there."""
    outputs = []
    for length in range(1, limit + 1):
        for words in itertools.product(WORDS, repeat=length - 1):
            outputs.append([*words, EOS_ID])
            if length == limit:
                outputs.extend([*words, last] for last in WORDS)
    return outputs


def _log_probs(model, outputs: list[list[int]], width: int) -> np.ndarray:
    """[sentence, output] log P(Y | x) by one teacher-forced pass (no cache, no search code)."""
    targets = np.full((len(outputs), width), PAD_ID, np.int32)
    for row, output in enumerate(outputs):
        targets[row, : len(output)] = output
    targets = np.tile(targets, (len(SOURCES), 1))  # [sentence * output, T]
    inputs = np.concatenate([np.full((len(targets), 1), BOS_ID), targets[:, :-1]], axis=1)
    sources = np.repeat(SOURCES, len(outputs), axis=0)
    logits = _teacher_forced(*nnx.split(model), jnp.asarray(sources), jnp.asarray(inputs))
    log_probs = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    return np.where(targets != PAD_ID, picked, 0.0).sum(axis=1).reshape(len(SOURCES), -1)


@pytest.fixture(scope="module")
def enumerated(model):
    """Every output for length limits 2 to 4, and its log-probability for each sentence."""
    outputs = sorted({tuple(output) for limit in (2, 3, 4) for output in _all_outputs(limit)})
    outputs = [list(output) for output in outputs]
    return outputs, _log_probs(model, outputs, width=4)


def _as_list(tokens: np.ndarray) -> list[int]:
    return [int(t) for t in tokens if t != PAD_ID]


def test_length_penalty_is_wu_et_al():
    # lp(Y) = ((5 + |Y|) / 6)^alpha: one token gives 1; seven give 2^alpha.
    np.testing.assert_allclose(length_penalty(1, 0.6), 1.0)
    np.testing.assert_allclose(length_penalty(7, 0.6), 2.0**0.6, rtol=1e-6)
    np.testing.assert_allclose(length_penalty(jnp.arange(1, 9), 0.0), np.ones(8))


# A search's score against the same output's log-probability from one teacher-forced pass: two
# programs that sum the same float32 terms in another order (the RNN encoder-decoder's differ by
# up to 1.6e-5 relative when XLA fuses them another way, tests/conftest.py), while a wrong token,
# step or length penalty moves a score by far more.
SCORE_TOLERANCE = {"rtol": 5e-5, "atol": 1e-5}


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_best_output_by_exhaustive_search(model, enumerated, alpha):
    max_length = 4
    limits = np.array([4, 3, 4, 2, 4, 3], np.int32)
    # Width 36 holds every candidate until the last step: 4 tokens follow each of 3^2 prefixes.
    tokens, scores = _search(model, SOURCES, limits, alpha, max_length=max_length, beam_size=36)
    narrow_tokens, narrow_scores = _search(
        model, SOURCES, limits, alpha, max_length=max_length, beam_size=2
    )
    greedy = _search(model, SOURCES, limits, alpha, max_length=max_length, beam_size=1)[0]
    all_outputs, log_probs = enumerated
    greedy_differs = 0
    for b, limit in enumerate(limits):
        outputs = _all_outputs(int(limit))
        rows = [all_outputs.index(output) for output in outputs]
        lengths = np.array([len(output) for output in outputs])
        exact = log_probs[b, rows] / np.asarray(length_penalty(lengths, alpha))
        best = int(np.argmax(exact))
        assert _as_list(tokens[b]) == outputs[best], f"sentence {b}"
        np.testing.assert_allclose(scores[b], exact[best], **SCORE_TOLERANCE)
        # A narrow beam may miss the best output, but reports the true score of what it found.
        narrow = outputs.index(_as_list(narrow_tokens[b]))
        np.testing.assert_allclose(narrow_scores[b], exact[narrow], **SCORE_TOLERANCE)
        assert narrow_scores[b] <= scores[b] + 1e-5
        greedy_differs += _as_list(greedy[b]) != outputs[best]
    if alpha > 0:
        assert greedy_differs > 0, "a case where greedy search is already optimal proves little"


@functools.partial(jax.jit, static_argnames="graphdef")
def _decode_one(graphdef, params, encoded, previous, cache):
    logits, _, cache = nnx.merge(graphdef, params).decode(encoded, previous, cache=cache)
    return logits, cache


def _argmax_by_hand(model, source: np.ndarray, limits: np.ndarray, max_length: int):
    """Greedy decoding written out: one ``model.decode`` call per step, NumPy argmax, no search.

    Returns (outputs as token lists, their log P(Y | x)).
    """
    graphdef, params = nnx.split(model)
    encoded, cache = model.start_decoding(model.encode(jnp.asarray(source)), max_length)
    previous = np.full((len(source),), BOS_ID, np.int32)
    outputs = [[] for _ in source]
    log_probs = np.zeros(len(source))
    for _ in range(max_length):
        logits, cache = _decode_one(graphdef, params, encoded, previous[:, None], cache)
        scores = np.asarray(jax.nn.log_softmax(logits[:, 0].astype(jnp.float32)), np.float64)
        scores[:, [PAD_ID, BOS_ID]] = -np.inf  # never part of a translation
        previous = scores.argmax(axis=1).astype(np.int32)
        for b, output in enumerate(outputs):
            done = (output and output[-1] == EOS_ID) or len(output) >= limits[b]
            if not done:
                output.append(int(previous[b]))
                log_probs[b] += scores[b, previous[b]]
    return outputs, log_probs


def test_beam_of_one_takes_the_most_probable_token_at_every_step(model):
    source = np.random.default_rng(0).integers(1, VOCAB, (8, 7)).astype(np.int32)
    source[:, -1] = EOS_ID
    source[3, 4:] = PAD_ID
    limits = np.asarray(output_limits(jnp.asarray(source), 3))  # 6 to 10 tokens
    tokens, scores = _search(model, source, limits, 0.6, max_length=10, beam_size=1)
    expected, log_probs = _argmax_by_hand(model, source, limits, max_length=10)
    assert [_as_list(row) for row in np.asarray(tokens)] == expected
    lengths = np.array([len(output) for output in expected])
    np.testing.assert_allclose(scores, log_probs / ((5 + lengths) / 6) ** 0.6, rtol=1e-5)
    assert lengths.max() > 1, "outputs of EOS alone would make this test vacuous"


def test_decoding_with_the_cache_equals_rerunning_the_whole_prefix(model):
    source = np.random.default_rng(1).integers(1, VOCAB, (5, 6)).astype(np.int32)
    source[1, 3:] = PAD_ID
    limits = np.array([8, 5, 8, 2, 7], np.int32)
    cached = _search(model, source, limits, max_length=8, beam_size=3)
    uncached = _search(model, source, limits, max_length=8, beam_size=3, use_cache=False)
    np.testing.assert_array_equal(cached[0], uncached[0])
    np.testing.assert_allclose(cached[1], uncached[1], rtol=1e-5)


def test_a_reordered_cache_continues_the_reordered_prefixes(model):
    beam_size, steps = 3, 18  # a Transformer's cache: two whole blocks and two positions of one
    rng = np.random.default_rng(2)
    prefixes = rng.integers(1, VOCAB, (2 * beam_size, steps)).astype(np.int32)  # [B * N, 3]
    prefixes[:, 0] = BOS_ID
    newest = rng.integers(1, VOCAB, (2 * beam_size, 1)).astype(np.int32)  # [B * N, 1]
    origin = np.array([[2, 0, 0], [1, 2, 1]])  # [B, N]: beams copied, dropped and moved
    reordered = prefixes[(np.arange(2)[:, None] * beam_size + origin).reshape(-1)]
    graphdef, params = nnx.split(model)

    @jax.jit
    def cached_and_full(params):
        model = nnx.merge(graphdef, params)
        encoded = model.encode(jnp.asarray(SOURCES[:2]))  # [B, ...]: one row per sentence
        per_sentence, cache = model.start_decoding(encoded, steps + 1)
        cache = expand_to_beams(cache, beam_size)  # [B * N, ...]: one row per hypothesis
        for t in range(steps):
            _, _, cache = model.decode(per_sentence, prefixes[:, t : t + 1], cache=cache)
        cache = select_beams(cache, jnp.asarray(origin), cache_reorder(model))
        cached, _, _ = model.decode(per_sentence, newest, cache=cache)  # [B * N, 1, V]
        full, _, _ = model.decode(  # teacher forcing, the sentence copied per hypothesis
            expand_to_beams(encoded, beam_size), np.concatenate([reordered, newest], axis=1)
        )
        return cached[:, 0], full[:, steps]

    cached, full = cached_and_full(params)
    np.testing.assert_allclose(cached, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("written", [0, 5, 8, 20, 48])
def test_a_transformer_cache_moves_every_written_position(written):
    model = _transformer()
    rng = np.random.default_rng(4)
    rows = jnp.asarray([2, 0, 0, 5, 4, 4])
    _, cache = model.start_decoding(model.encode(jnp.asarray(SOURCES)), 41)
    assert cache["self_keys_0"].shape[2] == 48, "room for 41 positions, in whole blocks of 8"
    cache = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), cache)
    cache["index"] = jnp.full((len(SOURCES),), written, jnp.int32)
    moved = model.reorder_cache(cache, rows)
    for name, x in cache.items():
        expected = np.asarray(x)[np.asarray(rows)]
        if name == "index":
            np.testing.assert_array_equal(moved[name], expected)
        else:  # [R, H, T, K]: the written positions, each from its new row's origin
            np.testing.assert_array_equal(moved[name][:, :, :written], expected[:, :, :written])


@pytest.mark.parametrize(("vocab", "k", "group"), [(2048, 4, 64), (1000, 5, 16), (300, 1, 16)])
def test_top_k_in_groups_equals_jax_top_k_ties_included(vocab, k, group):
    rng = np.random.default_rng(vocab)
    x = rng.integers(-30, 8, (3, 4, vocab)).astype(np.float32)  # many equal values
    x[..., :2] = -np.inf  # as never-output tokens are
    x[0, 0] = 7.0  # a row of one value: every index ties
    # A tie across groups whose maxima differ: the 5 of the first group comes first.
    x[1, 1] = -np.inf
    x[1, 1, [3, 5]] = 5.0
    x[1, 1, [group, group + 1]] = [9.0, 5.0]
    values, indices = top_k(jnp.asarray(x), k, group)
    expected_values, expected_indices = jax.lax.top_k(jnp.asarray(x), k)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize(("vocab", "k"), [(8000, 5), (2050, 4), (6, 5)])
def test_best_next_tokens_equal_the_top_of_the_log_probabilities(vocab, k):
    """Bit for bit, never-output ids excluded; at 6 tokens (2 never output) the fifth is -inf."""
    rng = np.random.default_rng(vocab)
    logits = rng.normal(0, 4, (3, 4, vocab)).astype(np.float32)
    logits[0, 0, PAD_ID] = logits[0, 0, BOS_ID] = 50.0  # the largest logits, never output
    logits[0, 1, PAD_ID] = logits[0, 1, BOS_ID] = 50.0  # ... beside an allowed id that wins
    logits[0, 1, 5] = 45.0
    logits[1, 2, 3:9] = 2.5  # ties
    values, ids = best_next_tokens(jnp.asarray(logits), k)
    expected_values, expected_ids = top_k(next_token_log_probs(jnp.asarray(logits)), k)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(ids, expected_ids)
    assert not np.isin(np.asarray(ids)[np.isfinite(values)], [PAD_ID, BOS_ID]).any()


def test_a_sentence_translates_the_same_alone_or_in_a_batch(model):
    limits = np.full((len(SOURCES),), 6, np.int32)
    together, _ = _search(model, SOURCES, limits, max_length=6, beam_size=3)
    for b in (1, 5):  # padded in the batch, unpadded alone
        alone_source = SOURCES[b : b + 1, : int((SOURCES[b] != PAD_ID).sum())]
        alone, _ = _search(model, alone_source, limits[:1], max_length=6, beam_size=3)
        np.testing.assert_array_equal(alone[0], together[b])


def _uneven_sources() -> np.ndarray:
    """Eight sentences of 1 to 11 tokens (EOS included), 0-padded to 11, unsorted."""
    rng = np.random.default_rng(3)
    lengths = [11, 1, 3, 9, 2, 6, 1, 4]
    source = np.zeros((len(lengths), max(lengths)), np.int32)
    for row, length in enumerate(lengths):
        source[row, : length - 1] = rng.integers(UNK_ID, VOCAB, length - 1)
        source[row, length - 1] = EOS_ID
    return source


def test_finished_sentences_leaving_the_loop_change_no_output(model):
    source = _uneven_sources()
    limits = np.asarray(output_limits(jnp.asarray(source), 3))  # 4 to 14 tokens
    kept = _search(model, source, limits, max_length=14, beam_size=3, min_rows=len(source))
    shrunk = _search(model, source, limits, max_length=14, beam_size=3, min_rows=1)  # 8 4 2 1
    np.testing.assert_array_equal(shrunk[0], kept[0])
    np.testing.assert_allclose(shrunk[1], kept[1], rtol=1e-5)
    lengths = (np.asarray(kept[0]) != PAD_ID).sum(axis=1)
    assert lengths.min() < lengths.max(), "outputs of one length would leave the loop together"


def test_the_search_shrinks_its_batch_on_a_cpu_and_keeps_it_whole_on_an_accelerator():
    assert stage_sizes(64, 0, "cpu") == [64, 32, 16, 8]
    assert stage_sizes(64, 0, "gpu") == stage_sizes(64, 0, "tpu") == [64]
    assert stage_sizes(64, 16, "gpu") == [64, 32, 16]  # a size the config names is kept
    assert stage_sizes(64, 64, "cpu") == [64]


def _loops(jaxpr) -> int:
    """How many while-loops the search runs one after another (its top-level ``while``s)."""
    return sum(equation.primitive.name == "while" for equation in jaxpr.eqns)


def test_one_loop_on_a_gpu_gives_the_outputs_of_the_shrinking_loops(model, monkeypatch):
    source = np.concatenate([_uneven_sources(), _uneven_sources()[::-1]])  # 16 sentences
    limits = output_limits(jnp.asarray(source), 3)
    graphdef, params = nnx.split(model)

    def run_on(backend: str):
        monkeypatch.setattr(jax, "default_backend", lambda: backend)

        # A new function for each backend: JAX caches a trace by function and arguments only.
        def search(params, source, limits):  # min_rows 0: by platform
            model = nnx.merge(graphdef, params)
            return beam_search(model, source, 14, beam_size=3, alpha=0.6, limits=limits)

        loops = _loops(jax.make_jaxpr(search)(params, source, limits).jaxpr)
        return loops, jax.jit(search)(params, source, limits)

    cpu_loops, (cpu_tokens, cpu_scores) = run_on("cpu")
    gpu_loops, (gpu_tokens, gpu_scores) = run_on("gpu")
    assert (cpu_loops, gpu_loops) == (2, 1)  # 16 rows then 8 on the CPU; 16 throughout
    np.testing.assert_array_equal(gpu_tokens, cpu_tokens)
    np.testing.assert_allclose(gpu_scores, cpu_scores, rtol=1e-5)


def test_a_sentence_translates_the_same_alone_or_among_longer_and_shorter_ones(model):
    source = _uneven_sources()
    limits = np.asarray(output_limits(jnp.asarray(source), 3))
    together = _search(model, source, limits, max_length=14, beam_size=3, min_rows=1)
    for b in (0, 1, 5):  # the longest, a shortest, a middle one
        length = int((source[b] != PAD_ID).sum())
        alone = _search(model, source[b : b + 1, :length], limits[b : b + 1], max_length=14,
                        beam_size=3)  # fmt: skip
        np.testing.assert_array_equal(alone[0][0], together[0][b])
        np.testing.assert_allclose(alone[1][0], together[1][b], rtol=1e-5)


def test_a_sentence_without_room_gets_no_output(model):
    limits = np.array([6, 0, 6, 0, 6, 6], np.int32)
    tokens, scores = _search(model, SOURCES, limits, max_length=6, beam_size=2)
    assert np.all(np.asarray(tokens)[limits == 0] == PAD_ID)
    assert np.all(np.isneginf(np.asarray(scores)[limits == 0]))
    assert np.all(np.isfinite(np.asarray(scores)[limits > 0]))


@pytest.mark.parametrize(
    ("beam_size", "alpha", "message"), [(0, 0.6, "beam_size=0"), (2, -1.0, "alpha=-1.0")]
)
def test_bad_search_settings_are_named(beam_size, alpha, message):
    with pytest.raises(ValueError, match=message):
        beam_search(_transformer(), jnp.asarray(SOURCES), 4, beam_size=beam_size, alpha=alpha)


def test_a_negative_min_rows_is_named():
    with pytest.raises(ValueError, match="min_rows=-1"):
        beam_search(_transformer(), jnp.asarray(SOURCES), 4, beam_size=2, alpha=0.6, min_rows=-1)
