"""The model families: one entry per family holds every fact that differs between them.

An entry names the family's model class and its config dataclass (the schema of
``config.model.<name>``: fields, defaults, allowed values and rules), its FLOP formula, the width
its learning-rate schedule scales by, what it can do (read packed rows, be exported to
CTranslate2) and what the bench holds it to. Everything else is derived from the entries: the
config's model sections and ``seq2seq.config.MODEL_NAMES``, the checks of family options, the
bench's targets and tables. So a new family is its model file, its config dataclass and one
entry in ``FAMILIES`` (or a ``register`` call, for a family defined outside the package: a
test's made-up family).

Shared embeddings are no flag here: a family that can share them has a ``share_embeddings``
field, and the check that it then needs one vocabulary (``data.shared_vocab``) reads that field.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

import ml_collections

from seq2seq.models import schema
from seq2seq.models.flops import rnnsearch_forward_flops, transformer_forward_flops
from seq2seq.models.rnnsearch_config import RNNSearchConfig
from seq2seq.models.transformer_config import TransformerConfig


@dataclasses.dataclass(frozen=True)
class BenchTargets:
    """What ``python -m seq2seq.bench`` holds a family to on the 2-core development CPU."""

    config: str  # configs/<config>.py: the family's bench model (``bench all``)
    beam_size: int  # the beam its decoding targets are stated at
    decode_sentences_per_s: float  # beam search on the bench config's model, untrained
    split_decode_sentences_per_s: float  # a trained Multi30k run, its 1,000 test sentences
    train_mfu: float | None = None  # model FLOPs utilisation of a training step; None: no target
    # Step time of the plain Flax linen yardstick over the family's own (bench/linen_baseline.py,
    # a Transformer); None: the family has no yardstick and the bench measures none.
    speedup_over_linen: float | None = None


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """What differs between model families, registered once so no caller branches on a name.

    Everything else (encode, decode with a cache, attention weights in ``aux``) is the shared
    ``Seq2SeqModel`` contract (``seq2seq.models.base``).
    """

    name: str  # config.model.name, and its section config.model.<name>
    title: str  # the family as tables and reports write it
    # model_class(config_class(...), rngs=nnx.Rngs(params=seed)); or "module:Class", imported on
    # first use (``load_model_class``): the package's families, whose modules bring JAX, which
    # making and checking a config does not need
    model_class: type | str
    # A frozen dataclass: the section's fields (all but ``schema.RUN_FIELDS``) with their
    # defaults, ``Literal`` choices and, in ``__post_init__``, the rules between fields.
    config_class: type
    # (config.model.<name>, vocabulary, source length(s), target length(s)) -> forward FLOPs
    forward_flops: Callable[..., object]
    # the width that scales the Transformer schedule (Eq. 3): d_model, or the decoder state
    schedule_width: Callable[[ml_collections.ConfigDict], int]
    packing: bool = False  # reads packed rows (several pairs per row, segment ids): data.pack
    ctranslate2_export: bool = False  # CTranslate2 can express it (seq2seq.export)
    bench: BenchTargets | None = None  # None: the bench leaves the family out

    def load_model_class(self) -> type:
        """The model class, imported now if ``model_class`` names it as ``"module:Class"``."""
        if not isinstance(self.model_class, str):
            return self.model_class
        module, name = self.model_class.split(":")
        return getattr(importlib.import_module(module), name)

    def check(self, config: ml_collections.ConfigDict) -> None:
        """This family's options in ``config``: each field of its section alone, and, when it
        is the run's model, the run options that concern it (packing, shared embeddings) and
        its own rules (with the vocabulary the config sets).

        Raises:
          ValueError: one line that starts with the key inside the config, e.g.
            ``model.rnnsearch.init='xavier' is not one of paper, modern`` (a
            ``schema.FieldError`` where one field is at fault); ``seq2seq.config.validate``
            reports it as a ``ConfigError``.
        """
        section = config.model[self.name]
        chosen = config.model.name == self.name
        if chosen:
            self._check_run_options(config, section)
        try:
            # Whatever the dataclass's own checks: a family need not call ``schema.check``.
            schema.check_fields(self.config_class, section.to_dict())
            if chosen:
                # Not resolved: checking a config must not start JAX's backend before a
                # multi-process run joins its job, and no rule reads the dtype.
                vocab = config.data.vocab_size
                self.typed_config(section, vocab, vocab, config.train.dtype)
        except schema.FieldError as error:
            raise error.within(f"model.{self.name}") from None
        except ValueError as error:  # a rule of the dataclass that names no single field
            raise ValueError(f"model.{self.name}: {error}") from None

    def _check_run_options(
        self, config: ml_collections.ConfigDict, section: ml_collections.ConfigDict
    ) -> None:
        if config.data.pack and not self.packing:
            packing = " or ".join(repr(name) for name, f in MODELS.items() if f.packing)
            raise ValueError(
                f"data.pack=True needs model.name={packing or 'a family that packs'} "
                f"(model.name={self.name!r} reads each row as one sentence); set data.pack=False"
            )
        if section.get("share_embeddings", False) and not config.data.shared_vocab:
            raise ValueError(f"model.{self.name}.share_embeddings needs data.shared_vocab=True")

    def typed_config(
        self,
        section: ml_collections.ConfigDict,
        source_vocab_size: int,
        target_vocab_size: int,
        dtype: str,
    ) -> object:
        """The family's dataclass from its config section and the run's fields (checked by the
        dataclass: ``schema.FieldError`` names a field)."""
        return self.config_class(
            source_vocab_size=source_vocab_size,
            target_vocab_size=target_vocab_size,
            dtype=dtype,
            **section.to_dict(),
        )


FAMILIES = (
    ModelFamily(
        name="transformer",
        title="Transformer",
        model_class="seq2seq.models.transformer:Transformer",
        config_class=TransformerConfig,
        forward_flops=transformer_forward_flops,
        schedule_width=lambda t: t.d_model,
        packing=True,
        ctranslate2_export=True,
        bench=BenchTargets(
            config="bench_small",
            beam_size=4,  # Vaswani et al.
            decode_sentences_per_s=40.0,
            split_decode_sentences_per_s=80.0,
            train_mfu=0.60,
            speedup_over_linen=1.3,
        ),
    ),
    ModelFamily(
        name="rnnsearch",
        title="RNNsearch",
        model_class="seq2seq.models.rnnsearch:RNNSearch",
        config_class=RNNSearchConfig,
        forward_flops=rnnsearch_forward_flops,
        schedule_width=lambda r: r.decoder_hidden_size,
        bench=BenchTargets(
            config="bench_small_rnnsearch",
            beam_size=5,
            decode_sentences_per_s=90.0,
            split_decode_sentences_per_s=200.0,
        ),
    ),
)

# The registry, by name, in ``FAMILIES``' order (then registration order). Changed only by
# ``register`` and ``unregister``.
MODELS: dict[str, ModelFamily] = {family.name: family for family in FAMILIES}


def register(family: ModelFamily) -> None:
    """Adds a family defined outside this module; configs made from now on have its section.

    Raises:
      ValueError: a family of that name is registered already.
    """
    if family.name in MODELS:
        raise ValueError(f"a model family named {family.name!r} is registered already")
    MODELS[family.name] = family


def unregister(name: str) -> None:
    """Removes a family that ``register`` added (a package family stays).

    Raises:
      ValueError: no such family was registered, or it is one of ``FAMILIES``.
    """
    if name not in MODELS or any(family.name == name for family in FAMILIES):
        raise ValueError(f"no registered model family {name!r} to remove")
    del MODELS[name]
