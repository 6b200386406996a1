"""Where a trained model looks: its cross-attention over the source while it translates."""

from __future__ import annotations

import dataclasses

import numpy as np

from seq2seq.evaluation.translator import Translator
from seq2seq.models.base import shift_right


@dataclasses.dataclass
class Alignment:
    source_pieces: list[str]  # S subword pieces, EOS last
    target_pieces: list[str]  # T subword pieces of the model's own translation, EOS last
    weights: np.ndarray  # [L, H, T, S] cross-attention weights (one layer, one head for RNNs)

    def averaged(self, layer: int = -1) -> np.ndarray:
        """[T, S]: one layer's weights averaged over its heads (rows still sum to one)."""
        return self.weights[layer].mean(axis=0)


def cross_attention(
    translator: Translator, sentence: str, target: str | None = None
) -> Alignment | None:
    """Translates ``sentence``, then reads the attention that produced each output token.

    The translation is fed back with teacher forcing, which gives exactly the decoding pass's
    weights (the cache changes nothing, as the tests check) in one call. Given a ``target`` (a
    reference translation), the model is forced to produce that instead: its weights then show
    where it looks for each word of the reference. Returns None for a model without attention
    (RNNencdec, ``model.rnnsearch.attention="none"``): it has nothing to show.
    """
    tokenizer = translator.tokenizer
    source = tokenizer.encode_source([sentence])[0]
    if target is None:
        target = translator.translate([sentence]).hypotheses[0]
    target_ids = tokenizer.encode_target([target])[0]
    model = translator.model
    _, aux = model(source[None], shift_right(target_ids[None]), return_attention=True)
    if "cross_attention" not in aux:
        return None
    return Alignment(
        source_pieces=[tokenizer.source.id_to_piece(int(i)) for i in source],
        target_pieces=[tokenizer.target.id_to_piece(int(i)) for i in target_ids],
        weights=np.asarray(aux["cross_attention"][0]),
    )
