"""Where a trained model looks: its cross-attention over the source while it translates."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from flax import nnx

from seq2seq.evaluation.translator import Translator
from seq2seq.models.base import shift_right
from seq2seq.vocabulary import PAD_ID

PADDED_TO = 8  # sequences are padded to a multiple of this: one compiled pass per bucket


@dataclasses.dataclass
class Alignment:
    source_pieces: list[str]  # S subword pieces, EOS last
    # T subword pieces of the model's own translation, EOS last (unless cut off at the cap)
    target_pieces: list[str]
    weights: np.ndarray  # [L, H, T, S] cross-attention weights (one layer, one head for RNNs)

    def averaged(self, layer: int = -1) -> np.ndarray:
        """[T, S]: one layer's weights averaged over its heads (rows still sum to one)."""
        return self.weights[layer].mean(axis=0)


def cross_attention(
    translator: Translator, sentence: str, target: str | None = None, *, ended: bool = True
) -> Alignment | None:
    """Translates ``sentence``, then reads the attention that produced each output token.

    The translation is fed back with teacher forcing, which gives exactly the decoding pass's
    weights (the cache changes nothing, as the tests check) in one call. Given a ``target`` (a
    reference translation, or a translation searched before), the model is forced to produce
    that instead: its weights then show where it looks for each word of it. ``ended=False``
    says the given translation stopped at the output cap (``Translations.capped``): the model
    never wrote its EOS, so EOS's row is left out. Returns None for a model without attention
    (RNNencdec, ``model.rnnsearch.attention="none"``): it has nothing to show.
    """
    tokenizer = translator.tokenizer
    source = tokenizer.encode_source([sentence])[0]
    if target is None:
        found = translator.translate([sentence])
        target, ended = found.hypotheses[0], not found.capped
    target_ids = tokenizer.encode_target([target])[0]
    member = translator.members[0]
    weights = teacher_forced_attention(member.graphdef, member.params, source, target_ids)
    if weights is None:
        return None
    rows = len(target_ids) if ended or len(target_ids) == 1 else len(target_ids) - 1
    return Alignment(
        source_pieces=[tokenizer.source.id_to_piece(int(i)) for i in source],
        target_pieces=[tokenizer.target.id_to_piece(int(i)) for i in target_ids[:rows]],
        weights=weights[:, :, :rows],
    )


def _padded(ids: np.ndarray) -> np.ndarray:
    """[1, L] ids, 0-padded to a multiple of ``PADDED_TO``."""
    length = -(-len(ids) // PADDED_TO) * PADDED_TO
    return np.pad(ids, (0, length - len(ids)), constant_values=PAD_ID)[None]


@functools.partial(jax.jit, static_argnums=0)
def _cross_attention_of_pass(graphdef, params, source, target_inputs):
    _, aux = nnx.merge(graphdef, params)(source, target_inputs, return_attention=True)
    return aux.get("cross_attention")  # [1, L, H, T, S], or None without attention


def teacher_forced_attention(
    graphdef: nnx.GraphDef, params: nnx.State, source: np.ndarray, target: np.ndarray
) -> np.ndarray | None:
    """[L, H, T, S] cross-attention of one teacher-forced pass over ``target`` given ``source``
    (both 1-D ids ending in EOS); None for a model without attention.

    One compiled pass per pair of lengths rounded up to ``PADDED_TO`` (an eager pass re-traces
    RNNsearch's scan every call, a second or more): padded source positions are masked out of
    the attention, and padded target positions come after every real one, which causal decoding
    never looks at, so the cut-out weights are those of the unpadded pass.
    """
    weights = _cross_attention_of_pass(
        graphdef, params, _padded(source), shift_right(_padded(target))
    )
    if weights is None:
        return None
    return np.asarray(weights[0, :, :, : len(target), : len(source)])
