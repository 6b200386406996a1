"""An ensemble of models behind the one model contract, so every decoder serves it unchanged.

At each step the ensemble's next-token scores are the members' log-probabilities averaged,

    log p_E(y_t | y_<t, x) = log softmax( (1/M) sum_m log p_m(y_t | y_<t, x) ),

the renormalised geometric mean of the members' distributions (the decoders apply the softmax;
``next_token_log_probs``). Averaging inside one search, rather than searching with each model and
voting, lets the members agree on every prefix (Sutskever et al. 2014, Section 3.6, ensemble
left-to-right beam search). The members may be of any architecture: each keeps its own encoder
outputs and cache, and only the target vocabulary must be one.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from seq2seq.decoding.search_parts import cache_reorder
from seq2seq.models.base import Seq2SeqModel

Array = jax.Array


class Ensemble:
    """M models read as one; ``source`` is one [B, S] array, or a tuple of M (one per member,
    where the members tokenize the source differently)."""

    def __init__(self, members: Sequence[Seq2SeqModel]):
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = tuple(members)

    def _sources(self, source) -> tuple[Array, ...]:
        if isinstance(source, tuple | list):
            if len(source) != len(self.members):
                raise ValueError(f"{len(source)} sources for {len(self.members)} models")
            return tuple(source)
        return (source,) * len(self.members)

    def encode(self, source, **kwargs) -> dict:
        return {
            f"member_{m}": model.encode(member_source, **kwargs)
            for m, (model, member_source) in enumerate(
                zip(self.members, self._sources(source), strict=True)
            )
        }

    def start_decoding(self, encoded: dict, max_length: int) -> tuple[dict, dict]:
        started = [
            model.start_decoding(encoded[f"member_{m}"], max_length)
            for m, model in enumerate(self.members)
        ]
        return (
            {f"member_{m}": member_encoded for m, (member_encoded, _) in enumerate(started)},
            {f"member_{m}": member_cache for m, (_, member_cache) in enumerate(started)},
        )

    def reorder_cache(self, cache: dict, rows: Array) -> dict:
        """Each member's cache rows reordered as that member reorders them."""
        return {
            f"member_{m}": cache_reorder(model)(cache[f"member_{m}"], rows)
            for m, model in enumerate(self.members)
        }

    def decode(self, encoded: dict, target_inputs: Array, *, cache: dict | None = None, **kwargs):
        """The members' log-probabilities averaged [B, T, V], no aux, and the members' caches."""
        log_probs, new_cache = [], {}
        for m, model in enumerate(self.members):
            name = f"member_{m}"
            logits, _, member_cache = model.decode(
                encoded[name],
                target_inputs,
                cache=None if cache is None else cache[name],
                **kwargs,
            )
            log_probs.append(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1))
            new_cache[name] = member_cache
        average = sum(log_probs) / len(log_probs)
        return average, {}, None if cache is None else new_cache

    def __call__(self, source, target_inputs, **kwargs):
        logits, aux, _ = self.decode(self.encode(source), target_inputs, **kwargs)
        return logits, aux
