"""Validation during training: loss, perplexity, BLEU and a few sample translations."""

from __future__ import annotations

import functools
import math

import jax
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.data.batching import BucketSpec, collate, inference_batches
from seq2seq.data.pipeline import load_pairs
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.greedy import greedy_search
from seq2seq.evaluation.bleu import sacrebleu_score
from seq2seq.training.step import TrainState, eval_step


def _loss_batches(examples, config: ml_collections.ConfigDict) -> list[dict[str, np.ndarray]]:
    """Fixed-shape batches of (source, target) examples for the validation loss."""
    spec = BucketSpec(
        config.data.max_length, config.data.bucket_width, config.data.tokens_per_batch
    )
    limit = spec.padded_max_length
    examples = [(s[:limit], t[:limit]) for s, t in examples]
    padded = np.array([spec.padded_length(max(len(s), len(t))) for s, t in examples])
    batches = []
    for length in np.unique(padded):
        members = [examples[i] for i in np.flatnonzero(padded == length)]
        size = spec.batch_size(int(length))
        for start in range(0, len(members), size):
            batches.append(collate(members[start : start + size], size, int(length)))
    return batches


def make_validate_fn(config: ml_collections.ConfigDict, tokenizer: Tokenizer, graphdef):
    """``state -> metrics`` on the first ``config.eval.num_examples`` validation pairs."""
    pairs = load_pairs(config, config.data.eval_split)
    if config.eval.num_examples:
        pairs = pairs[: config.eval.num_examples]
    sources = tokenizer.encode_source([s for s, _ in pairs])
    targets = tokenizer.encode_target([t for _, t in pairs])
    loss_batches = _loss_batches(list(zip(sources, targets, strict=True)), config)
    decode_batches = inference_batches(
        sources,
        config.eval.batch_size,
        config.data.bucket_width,
        config.decode.max_input_length,
    )
    loss_fn = jax.jit(eval_step)

    @functools.partial(jax.jit, static_argnums=2)
    def search(params, source, max_length):
        return greedy_search(nnx.merge(graphdef, params), source, max_length)

    def validate(state: TrainState) -> dict:
        totals = [jax.device_get(loss_fn(state, batch)) for batch in loss_batches]
        nll = sum(float(t["nll_sum"]) for t in totals) / sum(
            float(t["target_tokens"]) for t in totals
        )
        hypotheses = [""] * len(pairs)
        for indices, source in decode_batches:
            max_length = source.shape[1] + config.decode.max_extra_length
            tokens = jax.device_get(search(state.params, source, max_length))
            for row, index in enumerate(indices):
                hypotheses[index] = tokenizer.decode_target(tokens[row])
        score = sacrebleu_score(hypotheses, [t for _, t in pairs])
        samples = [
            f"source: {pairs[i][0]}\nreference: {pairs[i][1]}\noutput: {hypotheses[i]}"
            for i in range(min(config.eval.num_samples, len(pairs)))
        ]
        return {
            "loss": nll,
            "perplexity": math.exp(min(nll, 50.0)),
            "bleu": score["bleu"],
            "n": len(pairs),
            "samples": samples,
        }

    return validate
