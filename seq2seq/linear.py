"""Linear maps as one matrix product over all token rows: what every layer's projection uses.

A projection of [B, T, D] activations can contract the kernel with the last axis and keep B and
T as separate axes (``nnx.Linear`` does, as does ``jnp.einsum("btd,dhk->bthk", ...)``). Its
kernel's gradient then contracts two axes, B and T, and XLA on a CPU lays that product out with
transposed copies of the activations, often fused with the layer norm or ReLU that made them
(strided reads of every input). Flattened first to [B * T, D] rows, the same map gives the same
numbers, and its gradient is one plain [D, N] x [N, F] product with no layout copies. Merging
leading axes leaves the last one in place, so the reshapes cost nothing.
"""

from __future__ import annotations

import math

import jax
from flax import nnx

from seq2seq.logical_axes import metadata

Array = jax.Array


def project(
    x: Array,
    kernel: Array,
    in_axes: int = 1,
    *,
    precision=None,
    preferred_element_type=None,
) -> Array:
    """``x [..., *I] . kernel [*I, *O] -> [..., *O]``, as one [N, |I|] x [|I|, |O|] product.

    Args:
      x: activations whose last ``in_axes`` axes are the kernel's first ``in_axes``.
      kernel: [*I, *O], e.g. [D, H, K] for per-head queries or [H, E, D] for W^O.
      in_axes: how many axes the product contracts.
      precision, preferred_element_type: as for ``jax.lax.dot_general``.

    Returns:
      [..., *O], the leading axes of ``x`` followed by the kernel's output axes.
    """
    inputs, outputs = kernel.shape[:in_axes], kernel.shape[in_axes:]
    leading = x.shape[: x.ndim - in_axes]
    if x.shape[x.ndim - in_axes :] != inputs:
        raise ValueError(
            f"cannot project [{', '.join(map(str, x.shape))}] with a kernel of shape "
            f"{kernel.shape}: the last {in_axes} axes must be {inputs}"
        )
    rows = x.reshape(math.prod(leading), math.prod(inputs))  # [N, |I|]
    product = jax.lax.dot_general(
        rows,
        kernel.reshape(math.prod(inputs), math.prod(outputs)),  # [|I|, |O|]
        (((1,), (0,)), ((), ())),
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    return product.reshape(*leading, *outputs)


def rows_dot_general(
    lhs: Array,
    rhs: Array,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    out_sharding=None,
) -> Array:
    """``jax.lax.dot_general`` for the one product ``nnx.Linear`` asks for (the inputs' last axis
    with the kernel's first), computed by ``project``."""
    (lhs_contracting, rhs_contracting), batch = dimension_numbers
    standard = (tuple(lhs_contracting), tuple(rhs_contracting)) == ((lhs.ndim - 1,), (0,))
    if not standard or batch != ((), ()) or out_sharding is not None:
        raise NotImplementedError(
            f"rows_dot_general serves nnx.Linear's product only, got {dimension_numbers}"
        )
    return project(lhs, rhs, precision=precision, preferred_element_type=preferred_element_type)


class Linear(nnx.Linear):
    """``nnx.Linear`` with its product over flattened rows (``project``): the same parameters
    (``kernel`` [in, out], ``bias`` [out]), initialisers and dtypes, and the same outputs.

    ``names``: the logical names of the input and output dimensions (``seq2seq.logical_axes``);
    the kernel is named (input, output), the bias (output,).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        names: tuple[str | None, str | None] = (None, None),
        **kwargs,
    ):
        super().__init__(
            in_features,
            out_features,
            dot_general=rows_dot_general,
            kernel_metadata=metadata(*names),
            bias_metadata=metadata(names[1]),
            **kwargs,
        )
