"""A made-up third model family, kept outside the package: its model, its config section and its
registry entry, which is all a family is (``seq2seq.models.registry``).

The attentive bigram model predicts each target word from the one before it and a context over
the source words: ``q_i = E_t y_{i-1}``, ``alpha_ij = softmax_j(q_i . E_s x_j)``,
``c_i = sum_j alpha_ij E_s x_j``, ``p(y_i) = softmax(W_o tanh(W_c [q_i; c_i]) + b_o)``. It keeps
no state between words, so its decoding cache is empty. Shape letters as in the package: B
sentences, N hypotheses per sentence, S source and T target positions, D width, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.attention.equations import dot_product_scores, masked_softmax, weighted_values
from seq2seq.linear import Linear
from seq2seq.logical_axes import lookup, metadata
from seq2seq.models.base import (
    PAD_ID,
    Cache,
    Dropout,
    Encoded,
    EncoderDecoder,
    OutputLayer,
    apply_dropout,
)
from seq2seq.models.registry import ModelFamily

Array = jax.Array
NAME = "attentive_bigram"


@dataclasses.dataclass(frozen=True)
class AttentiveBigramConfig:
    """The schema of ``config.model.attentive_bigram``. No ``__post_init__``: the registry checks
    each field (a dropout rate in [0, 1), a positive width) whatever the dataclass does."""

    source_vocab_size: int  # from the run's tokenizer
    target_vocab_size: int
    width: int = 16  # D: word embeddings, attention and the combined features
    dropout_rate: float = 0.0  # on the word embeddings of both sides
    dtype: str = "float32"  # compute dtype (train.dtype)


class AttentiveBigram(EncoderDecoder):
    """The attentive bigram model behind the ``Seq2SeqModel`` contract."""

    def __init__(self, config: AttentiveBigramConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.dtype = jnp.dtype(config.dtype)
        width = config.width

        def embedding(vocab_size):
            return nnx.Embed(
                vocab_size, width, embedding_metadata=metadata("vocab", "embed"), rngs=rngs
            )

        self.source_embedding = embedding(config.source_vocab_size)  # E_s
        self.target_embedding = embedding(config.target_vocab_size)  # E_t
        self.combine = Linear(2 * width, width, names=(None, "embed"), dtype=self.dtype, rngs=rngs)
        self.output = Linear(
            width, config.target_vocab_size, names=("embed", "vocab"), dtype=self.dtype, rngs=rngs
        )  # W_o, b_o

    def encode(
        self, source: Array, *, source_segments: Array | None = None, dropout: Dropout | None = None
    ) -> Encoded:
        if source_segments is not None:
            raise ValueError(f"{NAME} does not support packed examples; set data.pack=False")
        words = lookup(self.source_embedding, source).astype(self.dtype)
        words = apply_dropout(words, self.config.dropout_rate, dropout)  # [B, S, D]
        return {"words": words, "valid": source != PAD_ID}

    def start_decoding(self, encoded: Encoded, max_length: int) -> tuple[Encoded, Cache]:
        del max_length
        return encoded, {}  # no state: each word reads only the word before it

    def decode(
        self,
        encoded: Encoded,
        target_inputs: Array,
        *,
        cache: Cache | None = None,
        target_segments: Array | None = None,
        dropout: Dropout | None = None,
        return_attention: bool = False,
        project: bool = True,
    ) -> tuple[Array, dict[str, Array], Cache | None]:
        if target_segments is not None:
            raise ValueError(f"{NAME} does not support packed examples; set data.pack=False")
        queries = lookup(self.target_embedding, target_inputs).astype(self.dtype)
        queries = apply_dropout(queries, self.config.dropout_rate, dropout)  # [B * N, T, D]
        rows, length, width = queries.shape
        words = encoded["words"]  # [B, S, D]
        sentences = words.shape[0]
        # One head; a cached step's N hypotheses per sentence read as N * T queries of it.
        grouped = queries.reshape(sentences, -1, 1, width)  # [B, N * T, 1, D]
        scores = dot_product_scores(grouped, words[:, :, None])  # [B, 1, N * T, S]
        weights = masked_softmax(scores, encoded["valid"][:, None, None, :])
        context = weighted_values(weights, words[:, :, None])  # [B, N * T, 1, D]
        context = context.reshape(rows, length, width)  # [B * N, T, D]
        features = jnp.tanh(self.combine(jnp.concatenate([queries, context], axis=-1)))
        aux = {}
        if return_attention:
            aux["cross_attention"] = weights.reshape(rows, 1, 1, length, -1)  # [B*N, 1, 1, T, S]
        if not project:
            return features, aux, cache
        return self.output_layer()(features), aux, cache

    def output_layer(self) -> OutputLayer:
        return OutputLayer(self.output.kernel[...], self.output.bias[...], dtype=self.dtype)


def forward_flops(section, vocab: int, source_length, target_length):
    """Per target word: the scores and the weighted sum (2 S D each), W_c, W_o."""
    s, width = source_length, section.width
    return target_length * (4 * s * width + 2 * (2 * width) * width + 2 * width * vocab)


FAMILY = ModelFamily(
    name=NAME,
    title="Attentive bigram",
    model_class=AttentiveBigram,
    config_class=AttentiveBigramConfig,
    forward_flops=forward_flops,
    schedule_width=lambda section: section.width,
)
