"""Using a trained model: n-best lists, ensembles, sampling, streamed input and their errors."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.config import default_config
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.decoding.beam_search import beam_search, length_penalty
from seq2seq.decoding.ensemble import Ensemble
from seq2seq.decoding.sampling import SamplingMethod, sample
from seq2seq.decoding.search_parts import NEVER_OUTPUT
from seq2seq.evaluation.stream import line_batches
from seq2seq.evaluation.translator import Member, Translator
from seq2seq.records.run_directory import RunDirectory
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID
from tests.conftest import REPO
from tests.test_decoding import SOURCES, RandomTree, _rnnsearch, _transformer

LIMITS = np.array([6, 5, 6, 4, 6, 5], np.int32)


def _teacher_forced_log_probs(model, source, tokens):
    """[B, T, V] log p(. | y_<t, x) by one teacher-forced pass over ``tokens`` [B, T]."""
    inputs = np.concatenate([np.full((len(tokens), 1), BOS_ID), tokens[:, :-1]], axis=1)
    logits, _ = model(jnp.asarray(source), jnp.asarray(inputs, jnp.int32))
    return np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1), np.float64)


@functools.partial(jax.jit, static_argnames=("graphdef", "beam_size", "nbest"))
def _beam(graphdef, params, source, *, beam_size, nbest=None):
    model = nnx.merge(graphdef, params)
    model = model if not isinstance(model, list) else Ensemble(model)
    return beam_search(model, source, 6, beam_size=beam_size, alpha=0.6, limits=LIMITS, nbest=nbest)


def _search(model, **static):
    return _beam(*nnx.split(model), jnp.asarray(SOURCES), **static)


@pytest.mark.parametrize("make_model", [_transformer, RandomTree], ids=["transformer", "random"])
def test_nbest_lists_are_sorted_and_start_with_the_beam_output(make_model):
    model = make_model()
    best_tokens, best_scores = _search(model, beam_size=4)
    tokens, scores = _search(model, beam_size=4, nbest=4)  # [B, 4, T], [B, 4]
    np.testing.assert_array_equal(tokens[:, 0], best_tokens)
    np.testing.assert_array_equal(scores[:, 0], best_scores)
    assert np.all(np.diff(np.asarray(scores), axis=1) <= 0), scores
    for b in range(len(SOURCES)):
        finished = np.isfinite(np.asarray(scores[b]))
        kept = [tuple(row) for row in np.asarray(tokens[b])[finished]]
        assert len(set(kept)) == len(kept) >= 2, "an n-best list repeats or holds one output"
    # Each entry's score is its own: log P(Y | x) / lp(Y) by teacher forcing.
    flat = np.asarray(tokens).reshape(-1, tokens.shape[-1])
    log_probs = _teacher_forced_log_probs(model, np.repeat(SOURCES, 4, axis=0), flat)
    picked = np.take_along_axis(log_probs, flat[..., None], axis=-1)[..., 0]
    lengths = (flat != PAD_ID).sum(axis=1)
    expected = np.where(flat != PAD_ID, picked, 0).sum(axis=1) / length_penalty(lengths, 0.6)
    finite = np.isfinite(np.asarray(scores).reshape(-1))
    np.testing.assert_allclose(np.asarray(scores).reshape(-1)[finite], expected[finite], rtol=1e-4)


def test_an_ensemble_of_a_model_with_itself_is_the_model():
    model = _transformer()
    alone = _search(model, beam_size=3)
    graphdef, params = nnx.split([model, model])
    twice = _beam(graphdef, params, jnp.asarray(SOURCES), beam_size=3)
    np.testing.assert_array_equal(twice[0], alone[0])
    np.testing.assert_allclose(twice[1], alone[1], rtol=1e-5)


def test_a_mixed_ensemble_scores_by_the_renormalised_mean_of_log_probabilities():
    transformer, rnnsearch = _transformer(), _rnnsearch()
    graphdef, params = nnx.split([transformer, rnnsearch])
    tokens, scores = _beam(graphdef, params, jnp.asarray(SOURCES), beam_size=3)
    tokens = np.asarray(tokens)
    mean = sum(_teacher_forced_log_probs(m, SOURCES, tokens) for m in (transformer, rnnsearch)) / 2
    # Renormalised over the whole vocabulary; PAD and BOS are then never picked (as for one model).
    log_probs = mean - np.log(np.exp(mean).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
    lengths = (tokens != PAD_ID).sum(axis=1)
    expected = np.where(tokens != PAD_ID, picked, 0).sum(axis=1) / length_penalty(lengths, 0.6)
    np.testing.assert_allclose(scores, expected, rtol=1e-4)
    alone = [np.asarray(_search(m, beam_size=3)[0]) for m in (transformer, rnnsearch)]
    assert any((tokens != output).any() for output in alone), "the ensemble decoded as one model"


@functools.partial(jax.jit, static_argnames=("graphdef", "method"))
def _sample(graphdef, params, source, keys, method):
    model = nnx.merge(graphdef, params)
    return sample(model, source, 8, keys=keys, method=method, temperature=1.5)


def _keys(seed, count):
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(jax.random.key(seed), jnp.arange(count))


@pytest.mark.parametrize("text", ["topk:2", "topp:0.5"])
def test_sampling_is_reproducible_and_draws_only_allowed_tokens(text):
    method = SamplingMethod.parse(text)
    model = RandomTree()
    graphdef, params = nnx.split(model)
    sources = jnp.asarray(np.tile(SOURCES, (4, 1)))  # each sentence 4 times, each its own key
    tokens, log_probs = _sample(graphdef, params, sources, _keys(0, len(sources)), method)
    again, _ = _sample(graphdef, params, sources, _keys(0, len(sources)), method)
    other, _ = _sample(graphdef, params, sources, _keys(1, len(sources)), method)
    np.testing.assert_array_equal(tokens, again)
    assert (np.asarray(tokens) != np.asarray(other)).any()
    # Sentence 2 alone, with its key, draws what it drew in the batch.
    alone, _ = _sample(graphdef, params, sources[2:3], _keys(0, 3)[2:], method)
    np.testing.assert_array_equal(alone[0], tokens[2])
    tokens = np.asarray(tokens)
    model_log_probs = _teacher_forced_log_probs(model, np.asarray(sources), tokens)
    model_log_probs[..., list(NEVER_OUTPUT)] = -np.inf
    drawn = tokens != PAD_ID
    order = np.argsort(-model_log_probs, axis=-1, kind="stable")
    rank = np.argmax(order == tokens[..., None], axis=-1)  # 0 = the most probable token
    if method.kind == "topk":
        assert rank[drawn].max() == method.value - 1, "the k-th best token was never drawn"
    else:  # the probability of the tokens ranked above a drawn token is below p (tempered)
        tempered = np.sort(model_log_probs / 1.5, axis=-1)[..., ::-1]
        probs = np.exp(tempered - np.log(np.exp(tempered).sum(-1, keepdims=True)))
        before = np.take_along_axis(np.cumsum(probs, -1) - probs, rank[..., None], -1)[..., 0]
        assert np.all(before[drawn] < method.value) and rank[drawn].max() >= 1
    picked = np.take_along_axis(model_log_probs, tokens[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(log_probs, np.where(drawn, picked, 0).sum(axis=1), rtol=1e-5)
    assert ((tokens == EOS_ID).sum(axis=1) <= 1).all()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topk:0", "topk takes a whole number >= 1"),
        ("topp:1.5", "topp takes a probability in (0, 1]"),
        ("beam:3", "unknown method 'beam'"),
        ("topk", "is not KIND:VALUE"),
    ],
)
def test_bad_sampling_methods_are_named(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SamplingMethod.parse(text)


def test_stream_batches_hold_every_line_in_order():
    read, write = os.pipe()
    os.write(write, "".join(f"line {i}\n" for i in range(7)).encode() + b"last, unterminated")
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        batches = list(line_batches(stream, 3))
    assert [len(b) for b in batches] == [3, 3, 2]
    assert sum(batches, []) == [f"line {i}" for i in range(7)] + ["last, unterminated"]


def _tokenizer(tmp_path, words):
    pairs = [(f"{w} {v}", f"{v} {w}") for w in words for v in words]
    return train_tokenizer(
        pairs, model_type="word", vocab_size=len(words) + 4, shared=True,
        directory=tmp_path, source_lang="en", target_lang="de",
    )  # fmt: skip


def _run_without_parameters(path, words):
    """A work directory with a config and a tokenizer only: enough for the vocabulary check."""
    path.mkdir()
    RunDirectory(path).save_config(default_config())
    return _tokenizer(RunDirectory(path).tokenizer_dir, words)


def test_an_ensemble_of_different_target_vocabularies_is_refused(tmp_path):
    first = _run_without_parameters(tmp_path / "a", ["cat", "dog", "tree"])
    second = _run_without_parameters(tmp_path / "b", ["cat", "dog", "house"])
    config = default_config()
    with pytest.raises(ValueError, match="different target vocabularies"):
        Translator(config, first, None, None, others=[Member(config, second, None, None)])
    result = _eval("--workdir", tmp_path / "a", "--workdir", tmp_path / "b", "--beam_size", "1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "different target vocabularies" in result.stderr and "tree" in result.stderr


def _eval(*args):
    return subprocess.run(
        [sys.executable, "eval.py", *map(str, args)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nbest", "0", "--input", "-"], "--nbest 0 must be at least 1"),
        (["--engine", "torch"], "unknown --engine 'torch'"),
        (["--sampling", "topk:0"], "topk takes a whole number"),
        (["--temperature", "0.5"], "--temperature applies to sampling"),
        (["--sampling", "topk:5", "--temperature", "inf"], "--temperature inf must be a finite"),
        (["--nbest", "2"], "--nbest writes K lines per sentence"),
        (["--batch_size", "0"], "--batch_size 0 must be at least 1"),
        (["--sampling", "topk:5", "--beam_size", "8"], "--beam_size applies to beam search"),
        (["--sampling", "topp:0.9", "--alpha", "1"], "--alpha applies to beam search"),
    ],
)
def test_bad_decoding_options_are_one_line(args, message, tmp_path):
    result = _eval("--workdir", tmp_path, *args)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert message in result.stderr


def test_an_ensemble_of_one_run_twice_is_refused_as_the_server_refuses_it(tmp_path):
    result = _eval("--workdir", tmp_path, "--workdir", f"{tmp_path}/")  # it was decoded and filed
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: --workdir {tmp_path}/ is the run of --workdir {tmp_path}; pass each run once"
    )
