"""Models: the Transformer and RNNsearch, interchangeable behind ``Seq2SeqModel``; each family's
entry in ``seq2seq.models.registry`` holds what differs between them.

Importing this package loads no JAX: the registry, the families' config dataclasses and the FLOP
formulas are plain Python, so a config is made and checked (every command's flags) in a fraction
of a second. The models themselves (``Seq2SeqModel``, ``Transformer``, ``RNNSearch``,
``Dropout``) load with JAX when first named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import ml_collections

from seq2seq.models.flops import TRAIN_FORWARD_MULTIPLE
from seq2seq.models.registry import (
    FAMILIES,
    MODELS,
    BenchTargets,
    ModelFamily,
    register,
    unregister,
)
from seq2seq.models.rnnsearch_config import RNNSearchConfig
from seq2seq.models.transformer_config import TransformerConfig
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID

if TYPE_CHECKING:
    from seq2seq.models.base import Dropout, Seq2SeqModel
    from seq2seq.models.rnnsearch import RNNSearch
    from seq2seq.models.transformer import Transformer

# The names that bring JAX, and the module each is imported from when first asked for.
_WITH_JAX = {
    "Dropout": "seq2seq.models.base",
    "Seq2SeqModel": "seq2seq.models.base",
    "RNNSearch": "seq2seq.models.rnnsearch",
    "Transformer": "seq2seq.models.transformer",
}


def __getattr__(name: str) -> object:
    """``from seq2seq.models import Transformer`` (and the other names in ``_WITH_JAX``)."""
    if name in _WITH_JAX:
        return getattr(importlib.import_module(_WITH_JAX[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def model_family(config: ml_collections.ConfigDict) -> ModelFamily:
    """The registry's entry for ``config.model.name``."""
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
    import jax

    return "bfloat16" if jax.default_backend() in BFLOAT16_BACKENDS else "float32"


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "FAMILIES",
    "MODELS",
    "BenchTargets",
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
    "compute_dtype",
    "count_params",
    "model_config",
    "model_family",
    "model_section",
    "register",
    "schedule_width",
    "train_flops",
    "unregister",
]


def model_config(
    config: ml_collections.ConfigDict,
    source_vocab_size: int,
    target_vocab_size: int,
    dtype: str | None = None,
) -> object:
    """The chosen family's typed config: its ``config.model.<name>`` section, the vocabulary
    sizes and the compute dtype, by default ``compute_dtype(config)`` (checked by the dataclass:
    ``schema.FieldError`` names a field)."""
    return model_family(config).typed_config(
        model_section(config),
        source_vocab_size,
        target_vocab_size,
        compute_dtype(config) if dtype is None else dtype,
    )


def build_model(
    config: ml_collections.ConfigDict, source_vocab_size: int, target_vocab_size: int, seed: int
) -> Seq2SeqModel:
    """Builds the model named by ``config.model.name`` with freshly initialised parameters."""
    from flax import nnx

    return model_family(config).load_model_class()(
        model_config(config, source_vocab_size, target_vocab_size), rngs=nnx.Rngs(params=seed)
    )


def count_params(params) -> int:
    """How many numbers ``params`` holds: any tree of arrays or of their shapes (abstract)."""
    import jax
    import numpy as np

    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
