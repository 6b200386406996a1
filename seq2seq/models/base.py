"""The one contract both models keep, and the small pieces they share.

A model is used in three ways, and both models serve all three through the same methods:

* training (teacher forcing): ``logits, aux = model(source, target_inputs, dropout=...)``, or
  with ``project=False`` the decoder's output features [B, T, D] before the pre-softmax
  projection, which ``model.output_layer()`` returns (the loss applies it chunk by chunk);
* decoding: ``encoded = model.encode(source)``,
  ``encoded, cache = model.start_decoding(encoded, max_length)``, then
  ``logits, aux, cache = model.decode(encoded, tokens, cache=cache)`` one token at a time;
* inspection: ``aux["cross_attention"]`` holds attention weights for alignment plots.

``encoded`` and ``cache`` are dicts of batch-leading arrays with different owners. ``encoded``
belongs to the sentence: what every hypothesis reads and none changes (encoder outputs, and what
``start_decoding`` projects from them once, such as the Transformer's cross-attention keys and
values or RNNsearch's projected annotations). ``cache`` belongs to a hypothesis: what each one's
own past has written (self-attention keys and values, a recurrent state). A beam search repeats
and reorders the cache rows (with one ``tree_map`` whatever the model, or with the model's own
``reorder_cache(cache, rows)`` where it has one), and never copies ``encoded``: in a cached
step the models read ``tokens`` and ``cache`` rows as N consecutive hypotheses per ``encoded``
row (``attention.layers.group_rows``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.dropout import dropout
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: F401 (re-exported)

Array = jax.Array
Encoded = dict[str, Array]
Cache = dict[str, Any]


class OutputLayer(NamedTuple):
    """The pre-softmax projection, ``logits = features @ W + b``, as parameters.

    One definition for decoding (``__call__``) and for the training loss, which applies it to a
    few hundred tokens at a time (``seq2seq.training.losses.projected_cross_entropy``). The
    product runs in the model's compute dtype and accumulates in float32, like every other
    layer's; the logits are float32 whatever that dtype.
    """

    weights: Array  # [V, D] when vocab_first (an embedding table, tied output), else [D, V]
    bias: Array | None = None  # [V]
    vocab_first: bool = False
    dtype: Any = jnp.float32  # compute dtype of the product
    bias_in_product: bool = False  # see __call__

    def __call__(self, features: Array) -> Array:
        """Logits [..., V] in float32 from features [..., D].

        With ``bias_in_product`` the bias is a last row of the weights, met by a feature of 1:
        ``[features, 1] @ [W; b]``. The product then writes the finished logits; added after
        it, the bias costs a pass that reads and writes every logit (twice on a CPU, where XLA
        writes the sum once per layout its readers want). A beam step's logits are large (1,280
        hypotheses x 8,000 tokens) and read back at once, so its decoders ask for this; the sum
        differs from the other by rounding only.
        """
        weights = self.weights.astype(self.dtype)
        weights = weights.T if self.vocab_first else weights  # [D, V]
        features = features.astype(self.dtype)
        if self.bias is not None and self.bias_in_product:
            ones = jnp.ones((*features.shape[:-1], 1), self.dtype)
            features = jnp.concatenate([features, ones], axis=-1)
            weights = jnp.concatenate([weights, self.bias.astype(self.dtype)[None]], axis=0)
        logits = jnp.matmul(features, weights, preferred_element_type=jnp.float32)
        if self.bias is None or self.bias_in_product:
            return logits
        return logits + self.bias.astype(jnp.float32)


class Seq2SeqModel(Protocol):
    """What the loss, the trainer, the decoders and the reports rely on."""

    def encode(
        self, source: Array, *, source_segments: Array | None = None, dropout: Dropout | None = None
    ) -> Encoded:
        """[B, S] token ids (0 = padding) -> encoder outputs, batch-leading."""

    def start_decoding(self, encoded: Encoded, max_length: int) -> tuple[Encoded, Cache]:
        """``encoded`` as a step reads it, and an empty cache for up to ``max_length`` tokens,
        both with ``encoded``'s rows (a beam search repeats the cache's for its hypotheses)."""

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
        """Next-token logits [B, T, V] for a target prefix [B, T].

        Without a cache the whole prefix is decoded in parallel (teacher forcing). With a cache
        (from ``start_decoding``), ``target_inputs`` is the single newest token [B * N, 1] of
        each of N hypotheses per sentence, and the cache carries their past. With
        ``project=False`` the first output is the features [B, T, D] that ``output_layer()``
        turns into those logits.
        """

    def output_layer(self) -> OutputLayer:
        """The pre-softmax projection's parameters (read by the training loss)."""

    def __call__(
        self,
        source: Array,
        target_inputs: Array,
        *,
        source_segments: Array | None = None,
        target_segments: Array | None = None,
        dropout: Dropout | None = None,
        return_attention: bool = False,
        project: bool = True,
    ) -> tuple[Array, dict[str, Array]]:
        """Teacher-forced logits [B, T, V] (features [B, T, D] if not ``project``) and aux."""


class EncoderDecoder(nnx.Module):
    """Teacher forcing, shared by both models: ``decode(encode(source), target_inputs)``."""

    def __call__(
        self,
        source: Array,
        target_inputs: Array,
        *,
        source_segments: Array | None = None,
        target_segments: Array | None = None,
        dropout: Dropout | None = None,
        return_attention: bool = False,
        project: bool = True,
    ) -> tuple[Array, dict[str, Array]]:
        """Teacher-forced logits [B, T, V] and aux (``cross_attention`` when asked for); with
        ``project=False`` the features [B, T, D] before ``output_layer()`` instead of logits."""
        encoded = self.encode(source, source_segments=source_segments, dropout=dropout)
        outputs, aux, _ = self.decode(
            encoded,
            target_inputs,
            target_segments=target_segments,
            dropout=dropout,
            return_attention=return_attention,
            project=project,
        )
        return outputs, aux


class Dropout:
    """Dropout randomness for one forward pass: hands out a fresh key per dropout site.

    Built inside the jitted step from a key derived with ``fold_in(rng, step)``; passing
    ``dropout=None`` to a model means evaluation mode. Keeping the keys explicit keeps the step
    a pure function.
    """

    def __init__(self, rng: Array):
        self._rngs = nnx.Rngs(dropout=rng)

    def next_key(self) -> Array:
        return self._rngs.dropout()

    def __call__(self, x: Array, rate: float) -> Array:
        """Zeroes each element with probability ``rate`` and rescales the rest
        (``seq2seq.dropout``: 16 random bits per element)."""
        if rate <= 0.0:
            return x
        return dropout(x, rate, self.next_key())


def apply_dropout(x: Array, rate: float, dropout: Dropout | None) -> Array:
    """``dropout(x, rate)`` in training, the identity in evaluation (``dropout is None``)."""
    return x if dropout is None else dropout(x, rate)


def shift_right(targets: Array, segments: Array | None = None) -> Array:
    """Decoder inputs from targets: BOS, then the targets without their last token.

    With packed examples (``segments`` given) every example starts with its own BOS, so no
    example sees the previous example's last token.

    Args:
      targets: [B, T] token ids ending in EOS, 0-padded.
      segments: [B, T] segment ids of packed examples, or None.

    Returns:
      [B, T] decoder inputs.
    """
    shifted = jnp.pad(targets, ((0, 0), (1, 0)), constant_values=BOS_ID)[:, :-1]
    if segments is not None:
        starts = segments != jnp.pad(segments, ((0, 0), (1, 0)))[:, :-1]
        shifted = jnp.where(starts, BOS_ID, shifted)
    return jnp.where(targets == PAD_ID, PAD_ID, shifted)
