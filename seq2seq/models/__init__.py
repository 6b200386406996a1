"""Models: the Transformer and RNNsearch, interchangeable behind ``Seq2SeqModel``."""

from __future__ import annotations

import dataclasses

import ml_collections
from flax import nnx

from seq2seq.models.base import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Dropout, Seq2SeqModel
from seq2seq.models.rnnsearch import RNNSearch, RNNSearchConfig
from seq2seq.models.transformer import Transformer, TransformerConfig

MODELS = {
    "transformer": (Transformer, TransformerConfig),
    "rnnsearch": (RNNSearch, RNNSearchConfig),
}

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MODELS",
    "PAD_ID",
    "UNK_ID",
    "Dropout",
    "RNNSearch",
    "RNNSearchConfig",
    "Seq2SeqModel",
    "Transformer",
    "TransformerConfig",
    "build_model",
    "model_config",
]


def model_config(
    config: ml_collections.ConfigDict, source_vocab_size: int, target_vocab_size: int
) -> TransformerConfig | RNNSearchConfig:
    """The model's dataclass config from ``config.model`` (the fields of the chosen model only)."""
    _, config_class = MODELS[config.model.name]
    section = config.model[config.model.name]
    fields = {field.name for field in dataclasses.fields(config_class)}
    values = {key: value for key, value in section.items() if key in fields}
    return config_class(
        source_vocab_size=source_vocab_size,
        target_vocab_size=target_vocab_size,
        dtype=config.train.dtype,
        **values,
    )


def build_model(
    config: ml_collections.ConfigDict, source_vocab_size: int, target_vocab_size: int, seed: int
) -> Seq2SeqModel:
    """Builds the model named by ``config.model.name`` with freshly initialised parameters."""
    model_class, _ = MODELS[config.model.name]
    return model_class(
        model_config(config, source_vocab_size, target_vocab_size), rngs=nnx.Rngs(params=seed)
    )
