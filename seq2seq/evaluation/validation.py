"""Validation during training: loss, perplexity, BLEU and a few sample translations."""

from __future__ import annotations

import functools
import math

import jax
import ml_collections
import numpy as np

from seq2seq.data.batching import BucketSpec, collate, plan_batches
from seq2seq.data.pipeline import load_pairs
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.evaluation import processes
from seq2seq.evaluation.bleu import sacrebleu_score
from seq2seq.evaluation.translator import Translator
from seq2seq.training.step import TrainState, eval_step


def _loss_batches(examples, config: ml_collections.ConfigDict) -> list[dict[str, np.ndarray]]:
    """Fixed-shape batches of (source, target) examples for the validation loss.

    Every example is in exactly one batch, grouped by bucket and cut by the token budget (the
    training buckets without shuffling); examples over the longest bucket are cut to it.
    """
    spec = BucketSpec(
        config.data.max_length, config.data.bucket_width, config.data.tokens_per_batch
    )
    lengths = np.array([max(len(source), len(target)) for source, target in examples], np.int64)
    return [
        collate(
            [examples[i] for i in planned.members],
            spec.batch_size(planned.padded_length),
            planned.padded_length,
        )
        for planned in plan_batches(lengths, spec)
    ]


@functools.partial(jax.jit, static_argnums=0)
def _loss(graphdef, params, batch: dict[str, np.ndarray]) -> dict:
    """``eval_step`` of one batch; one function for every run, so that the runs of one process
    whose models have one structure (equal graphdefs) share its traces."""
    return eval_step(TrainState.for_evaluation(graphdef, params), batch)


def make_validate_fn(config: ml_collections.ConfigDict, tokenizer: Tokenizer, graphdef):
    """``state -> metrics`` on the first ``config.eval.num_examples`` validation pairs.

    Decodes greedily, whatever ``config.decode.beam_size``: validation tracks progress during
    training, where beam search would cost several times more; ``eval.py`` uses the beam.
    """
    pairs = load_pairs(config, config.data.eval_split)
    if config.eval.num_examples:
        pairs = pairs[: config.eval.num_examples]
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    examples = list(
        zip(tokenizer.encode_source(sources), tokenizer.encode_target(references), strict=True)
    )
    loss_batches = _loss_batches(examples, config)
    my_loss_batches = [loss_batches[i] for i in processes.share(len(loss_batches))]

    greedy = config.copy_and_resolve_references()
    greedy.decode.beam_size = 1
    translator = Translator(greedy, tokenizer, None, graphdef)

    def validate(state: TrainState) -> dict:
        """With several processes, each scores and decodes its share; all get the totals."""
        params = processes.local_copy(state.params)
        totals = jax.device_get([_loss(graphdef, params, batch) for batch in my_loss_batches])
        nll_sum, tokens = processes.sum_over_processes(
            np.array([[float(t["nll_sum"]), float(t["target_tokens"])] for t in totals]).sum(axis=0)
            if totals
            else np.zeros(2)
        )
        nll = float(nll_sum) / float(tokens)
        translator.params = params
        hypotheses = translator.translate(sources).hypotheses
        samples = [
            f"source: {sources[i]}\nreference: {references[i]}\noutput: {hypotheses[i]}"
            for i in range(min(config.eval.num_samples, len(pairs)))
        ]
        return {
            "loss": nll,
            "perplexity": math.exp(min(nll, 50.0)),
            "bleu": sacrebleu_score(hypotheses, references, config.data.tgt_lang)["bleu"],
            "n": len(pairs),
            "samples": samples,
        }

    return validate
