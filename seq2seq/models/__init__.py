"""Models: the Transformer and RNNsearch, interchangeable behind ``Seq2SeqModel``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.models import schema
from seq2seq.models.base import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Dropout, Seq2SeqModel
from seq2seq.models.flops import (
    TRAIN_FORWARD_MULTIPLE,
    rnnsearch_forward_flops,
    transformer_forward_flops,
)
from seq2seq.models.rnnsearch import RNNSearch, RNNSearchConfig
from seq2seq.models.transformer import Transformer, TransformerConfig


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """What differs between model families, registered once so no caller branches on a name.

    Everything else (encode, decode with a cache, attention weights in ``aux``) is the shared
    ``Seq2SeqModel`` contract.
    """

    model_class: type
    config_class: type
    # (config.model.<name>, vocabulary, source length(s), target length(s)) -> forward FLOPs
    forward_flops: Callable[..., object]
    # the width that scales the Transformer schedule (Eq. 3): d_model, or the decoder state
    schedule_width: Callable[[ml_collections.ConfigDict], int]


MODELS = {
    "transformer": ModelFamily(
        Transformer, TransformerConfig, transformer_forward_flops, lambda t: t.d_model
    ),
    "rnnsearch": ModelFamily(
        RNNSearch, RNNSearchConfig, rnnsearch_forward_flops, lambda r: r.decoder_hidden_size
    ),
}


def model_family(config: ml_collections.ConfigDict) -> ModelFamily:
    return MODELS[config.model.name]


def model_section(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """``config.model.<name>``: the chosen model's own fields."""
    return config.model[config.model.name]


def schedule_width(config: ml_collections.ConfigDict) -> int:
    return model_family(config).schedule_width(model_section(config))


def train_flops(config: ml_collections.ConfigDict, vocab: int, source_length, target_length):
    """Analytic training FLOPs (forward and backward) of sentence pairs of these lengths."""
    forward = model_family(config).forward_flops(
        model_section(config), vocab, source_length, target_length
    )
    return TRAIN_FORWARD_MULTIPLE * forward


# JAX backends whose matrix units run bfloat16 several times faster than float32: there,
# ``train.dtype = "auto"`` computes in bfloat16.
BFLOAT16_BACKENDS = ("gpu", "tpu")


def compute_dtype(config: ml_collections.ConfigDict) -> str:
    """The dtype the model computes in: ``train.dtype``, with "auto" resolved for JAX's backend.

    "auto" is bfloat16 where ``jax.default_backend()`` is one of ``BFLOAT16_BACKENDS`` and
    float32 elsewhere (a CPU runs bfloat16 products no faster). Parameters, optimizer state and
    the loss stay float32 either way. Asking starts JAX's backend, so a multi-process run asks
    only after it has joined its job.
    """
    if config.train.dtype != "auto":
        return config.train.dtype
    return "bfloat16" if jax.default_backend() in BFLOAT16_BACKENDS else "float32"


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MODELS",
    "ModelFamily",
    "PAD_ID",
    "UNK_ID",
    "Dropout",
    "RNNSearch",
    "RNNSearchConfig",
    "Seq2SeqModel",
    "Transformer",
    "TransformerConfig",
    "build_model",
    "check_model_sections",
    "compute_dtype",
    "count_params",
    "model_config",
    "model_family",
    "model_section",
    "schedule_width",
    "train_flops",
]


def model_config(
    config: ml_collections.ConfigDict,
    source_vocab_size: int,
    target_vocab_size: int,
    dtype: str | None = None,
) -> TransformerConfig | RNNSearchConfig:
    """The chosen family's typed config: its ``config.model.<name>`` section, the vocabulary
    sizes and the compute dtype, by default ``compute_dtype(config)`` (checked by the dataclass:
    ``schema.FieldError`` names a field)."""
    return model_family(config).config_class(
        source_vocab_size=source_vocab_size,
        target_vocab_size=target_vocab_size,
        dtype=compute_dtype(config) if dtype is None else dtype,
        **model_section(config).to_dict(),
    )


def check_model_sections(config: ml_collections.ConfigDict) -> None:
    """Every family's ``config.model.<name>`` against its schema: each field alone, and for the
    chosen family its own rules too, with the vocabulary the config sets (``data.vocab_size``).

    Raises:
      FieldError: prefixed with the section, e.g. ``model.rnnsearch.init='xavier' is not ...``.
    """
    for name, family in MODELS.items():
        try:
            if name == config.model.name:
                # Not resolved: checking a config must not start JAX's backend before a
                # multi-process run joins its job, and no rule reads the dtype.
                vocab = config.data.vocab_size
                model_config(config, vocab, vocab, dtype=config.train.dtype)
            else:
                schema.check_fields(family.config_class, config.model[name].to_dict())
        except schema.FieldError as error:
            raise error.within(f"model.{name}") from None


def build_model(
    config: ml_collections.ConfigDict, source_vocab_size: int, target_vocab_size: int, seed: int
) -> Seq2SeqModel:
    """Builds the model named by ``config.model.name`` with freshly initialised parameters."""
    return model_family(config).model_class(
        model_config(config, source_vocab_size, target_vocab_size), rngs=nnx.Rngs(params=seed)
    )


def count_params(params) -> int:
    """How many numbers ``params`` holds: any tree of arrays or of their shapes (abstract)."""
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
