"""Where queries, keys and values come from: the inputs of each attention layer in a forward pass.

The Transformer never names Q, K and V as tensors of its own: each ``MultiHeadAttention`` receives
a query input and a key/value input and projects them (``Q W_i^Q``, ``K W_i^K``, ``V W_i^V``).
``record_attention_inputs`` runs one teacher-forced pass and keeps, for every attention module,
the arrays those projections were applied to, so a notebook can show which sequence each came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import jax
import numpy as np
from flax import nnx

from seq2seq.attention.layers import MultiHeadAttention


@dataclasses.dataclass
class AttentionInputs:
    module: str  # the module's path in the model, e.g. "decoder_layers/0/cross_attention"
    query_inputs: np.ndarray  # [B, T, D]: what W^Q was applied to
    key_value_inputs: np.ndarray  # [B, S, D]: what W^K and W^V were applied to


@contextlib.contextmanager
def _recording_projections(calls: dict[int, dict[str, np.ndarray]]) -> Iterator[None]:
    """Within the block, every MultiHeadAttention records its projections' inputs by module id.

    ``calls`` gains one entry per module, in the order the modules project their queries. The
    class's methods are wrapped for the duration of the block only.
    """
    project_query = MultiHeadAttention.project_query
    project_keys_values = MultiHeadAttention.project_keys_values
    keys_values: dict[int, np.ndarray] = {}

    def recording_query(module, x):
        calls[id(module)] = {"query": np.asarray(x)}
        return project_query(module, x)

    def recording_keys_values(module, x, **kwargs):
        keys_values[id(module)] = np.asarray(x)
        return project_keys_values(module, x, **kwargs)

    MultiHeadAttention.project_query = recording_query
    MultiHeadAttention.project_keys_values = recording_keys_values
    try:
        yield
    finally:
        MultiHeadAttention.project_query = project_query
        MultiHeadAttention.project_keys_values = project_keys_values
        for key, inputs in calls.items():
            inputs["keys_values"] = keys_values[key]


def record_attention_inputs(
    model: nnx.Module, source: jax.Array, target_inputs: jax.Array
) -> list[AttentionInputs]:
    """Runs ``model(source, target_inputs)`` (evaluation mode) and returns each attention's inputs.

    Args:
      model: a model built of ``MultiHeadAttention`` modules (the Transformer).
      source: [B, S] source token ids.
      target_inputs: [B, T] decoder inputs (the target shifted right).

    Returns:
      One entry per attention module, in the order the forward pass projected their queries
      (encoder layers, then each decoder layer's self- and cross-attention).
    """
    paths = {
        id(node): "/".join(str(part) for part in path)
        for path, node in nnx.iter_graph(model)
        if isinstance(node, MultiHeadAttention)
    }
    calls: dict[int, dict[str, np.ndarray]] = {}
    with _recording_projections(calls):
        model(source, target_inputs)
    return [
        AttentionInputs(paths[key], inputs["query"], inputs["keys_values"])
        for key, inputs in calls.items()
    ]
