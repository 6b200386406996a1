"""What every model family's typed config shares: the fields a config sets, and their checks.

A family's dataclass (``TransformerConfig``, ``RNNSearchConfig``) is its one schema: the fields,
their defaults and what they mean, the choices a field allows (its ``Literal`` type) and the rules
between fields (its ``__post_init__``). ``seq2seq.config`` generates the ``model.<family>``
section of every config from it (``section_defaults``), and ``seq2seq.models.build_model`` builds
the model from that section, so a new hyperparameter is one line of the dataclass.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping

# Fields the run supplies, not the config's model section: the tokenizer's vocabulary sizes and
# the compute dtype (``train.dtype``).
RUN_FIELDS = ("source_vocab_size", "target_vocab_size", "dtype")


class FieldError(ValueError):
    """A field holds a value the model cannot take; the message is ``FIELD=VALUE what is wrong``."""

    def __init__(self, field: str, value: object, problem: str):
        super().__init__(f"{field}={value!r} {problem}")
        self.field, self.value, self.problem = field, value, problem

    def within(self, section: str) -> FieldError:
        """The same error, the field named inside ``section`` (``model.rnnsearch``)."""
        return FieldError(f"{section}.{self.field}", self.value, self.problem)


def section_defaults(config_class: type) -> dict[str, object]:
    """The fields a config's ``model.<family>`` section holds (all but ``RUN_FIELDS``), with their
    defaults, in the dataclass's order."""
    return {
        field.name: field.default
        for field in dataclasses.fields(config_class)
        if field.name not in RUN_FIELDS
    }


def choices(config_class: type) -> dict[str, tuple]:
    """The allowed values of every field typed ``Literal[...]``."""
    hints = typing.get_type_hints(config_class)
    return {
        name: typing.get_args(hint)
        for name, hint in hints.items()
        if typing.get_origin(hint) is typing.Literal
    }


def check_fields(config_class: type, values: Mapping[str, object]) -> None:
    """Each value against its field alone: a ``Literal`` field takes one of its choices, an
    integer field (a size, a count) is positive, or at least 0 where its default is 0 (a count
    that may be off), a dropout rate lies in [0, 1).

    Raises:
      FieldError: the first field that fails, named with its value.
    """
    allowed = choices(config_class)
    hints = typing.get_type_hints(config_class)
    may_be_zero = {f.name for f in dataclasses.fields(config_class) if f.default == 0}
    for name, value in values.items():
        if name in allowed and value not in allowed[name]:
            raise FieldError(name, value, f"is not one of {', '.join(allowed[name])}")
        if hints.get(name) is int and name in may_be_zero and not value >= 0:
            raise FieldError(name, value, "must be >= 0")
        if hints.get(name) is int and name not in may_be_zero and not value > 0:
            raise FieldError(name, value, "must be positive")
        if name.endswith("dropout_rate") and not 0.0 <= value < 1.0:
            raise FieldError(name, value, "must be in [0, 1)")


def check(config: object) -> None:
    """``check_fields`` on every field of a dataclass instance (its ``__post_init__`` calls it
    before the family's own rules)."""
    values = {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}
    check_fields(type(config), values)


def check_shared_vocabulary(config) -> None:
    """One embedding table for both languages needs one vocabulary; raises ValueError if not."""
    if config.share_embeddings and config.source_vocab_size != config.target_vocab_size:
        raise ValueError(
            "share_embeddings needs one shared vocabulary, got source "
            f"{config.source_vocab_size} and target {config.target_vocab_size} tokens"
        )
