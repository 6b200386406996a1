"""A recurrence's loop whose weight gradients are computed after it, in one product over all steps.

A GRU multiplies its state by the same recurrent weights ``U`` at every step: ``p_t = s_{t-1} U``.
Differentiated by ``jax.lax.scan``'s own rule, the backward loop computes two products a step:
``ds_{t-1} = dp_t U^T``, which the next backward step needs, and ``dU += s_{t-1}^T dp_t``, which
no later step needs but which the loop carries as a running sum. That second product is as large
as the forward one, so the backward loop does twice the forward's products, each a narrow one
(a batch of B rows) on the loop's critical path. Sharded over data, it is worse: each device's
part of ``dU`` differs while the weight is replicated, so XLA all-reduces each step's partial sum
inside the loop (found in the HLO of a data-parallel RNNsearch step: an all-reduce per step in
each backward loop).

Here the backward loop only hands out each step's ``dp_t``, and ``dU = sum_t s_{t-1}^T dp_t``
is taken after it as one product over all B x T rows, then all-reduced once. The equations and
the gradients are the same, to float32 rounding. Measured on a CPU (docs/benchmarks.md): as fast
on one device; on 8 simulated devices, data-parallel, the step took half the time.
Forward-mode differentiation (``jax.jvp``, ``jax.jacfwd``) has no rule through a custom VJP:
use reverse mode, or turn the switch off.

How: the step asks for its products by name (``products["u_gates"](state)``), and each product
adds a "tap", a per-step input of zeros. A tap's gradient is the product's output gradient
``dp_t``, and ``jax.lax.scan`` returns the gradients of its per-step inputs stacked, not summed.
Inside the loop the weights are constants, so no running sum of their gradient is built.
``jax.custom_vjp`` then joins the two: its backward pass runs the loop's own backward pass for
everything but the weights, and takes the weights' gradients from the stacked ``dp_t`` and the
products' inputs, saved in the forward pass.

A weight whose product's inputs are too large to keep (``v_a``: the [B, S, n'] hidden layer of
every step) is tapped instead of its product, one copy per batch row (``per_row``). The tap's
gradient is then that row's part of the weight's gradient, taken inside the loop as before, but
not summed over the batch there: a batch split over devices needs no all-reduce in the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from seq2seq.linear import project

Array = jax.Array
Product = Callable[[Array], Array]  # one product of the step, by one of the loop's weights
# step(products, carry, x_t) -> (carry, y_t); ``products[name](v)`` is ``v`` times weight ``name``.
Step = Callable[[Mapping[str, Product], Any, Any], tuple[Any, Any]]


def recurrent_scan(
    step: Step,
    weights: Mapping[str, Array],
    carry,
    xs,
    *,
    multiply: Mapping[str, Callable[[Array, Array], Array]] | None = None,
    per_row: Collection[str] = (),
    unroll: int = 1,
    reverse: bool = False,
    weight_gradients_after_loop: bool = True,
):
    """``jax.lax.scan(step, carry, xs)`` whose step multiplies by ``weights`` only through
    ``products``; with ``weight_gradients_after_loop``, their gradients are taken after the loop.

    Args:
      step: ``step(products, carry, x_t) -> (carry, y_t)``; it may read other arrays (biases,
        the attention's keys); their gradients come from the loop's own backward pass.
      weights: the loop's weights by name, in the dtype the step computes in.
      multiply: ``multiply[name](inputs, weight)`` for a weight that is not a plain right product
        (``inputs [..., I] . weight [I, O]``, ``seq2seq.linear.project``), e.g. a batched
        one. After the loop it is given every step's inputs at once, the time axis next to
        last: it must accept more axes there.
      per_row: weights whose gradient is taken inside the loop, but for each batch row apart
        (the first axis of the product's inputs; the tap is added to the weight, one copy per
        row), and summed over the rows and steps after it. No sum over rows in the loop, so a
        batch split over devices needs no collective there, and the product's inputs are not
        kept: for ``v_a``, whose inputs are the [B, S, n'] hidden layer of every step.
      unroll, reverse: as for ``jax.lax.scan``.

    Returns:
      (final carry, stacked ``y_t``), as ``jax.lax.scan``.
    """
    multiply = {name: (multiply or {}).get(name, project) for name in weights}
    rows: dict[str, int] = {}  # a per_row weight's rows, B, filled in as the loop is traced

    def loop(weights, carry, xs, taps):
        """The scan; ``taps`` (per step, added to each product, or to a per_row weight): None
        for the plain loop, zeros for the one whose weight gradients come after it (XLA drops
        adding zeros: the forward pass compiles to the same operations either way, except a
        per_row weight's product, taken row by row)."""

        def body(carry, inputs):
            x, tap = inputs
            seen = {}  # the products' inputs at this step (none for a per_row weight)
            used = set()

            def product(name: str) -> Product:
                def apply(v: Array) -> Array:
                    used.add(name)
                    if name in per_row:
                        rows[name] = v.shape[0]
                        if tap is not None:  # one copy of the weight per row, and its tap
                            return jax.vmap(multiply[name])(v, weights[name] + tap[name])
                        return multiply[name](v, weights[name])
                    seen[name] = v
                    out = multiply[name](v, weights[name])
                    return out if tap is None else out + tap[name]

                return apply

            carry, y = step({name: product(name) for name in weights}, carry, x)
            if used != weights.keys():
                raise ValueError(
                    f"a recurrent step used the weights {sorted(used)} of {sorted(weights)}: "
                    "pass only the weights the step multiplies by"
                )
            return carry, (y, seen)

        carry, (ys, seen) = jax.lax.scan(body, carry, (xs, taps), unroll=unroll, reverse=reverse)
        return (carry, ys), seen

    if not weight_gradients_after_loop:
        return loop(weights, carry, xs, None)[0]

    # The taps' shapes: each product's output at every step, [T, ...]; for a per_row weight,
    # the weight once per row, [T, B, ...].
    _, seen_shapes = jax.eval_shape(loop, weights, carry, xs, None)
    steps = jax.tree.leaves(xs)[0].shape[0]
    zero_taps = {}
    for name, seen in seen_shapes.items():  # seen: [T, ...] inputs of the product
        one_step = jax.ShapeDtypeStruct(seen.shape[1:], seen.dtype)
        output = jax.eval_shape(multiply[name], one_step, weights[name])
        zero_taps[name] = jnp.zeros((steps, *output.shape), output.dtype)
    for name, count in rows.items():
        weight = weights[name]
        zero_taps[name] = jnp.zeros((steps, count, *weight.shape), weight.dtype)
    # custom_vjp differentiates only its arguments: every array the step reads that may need a
    # gradient (a module's parameters, the encoder's annotations) becomes one, ``consts``.
    explicit_loop, consts = jax.closure_convert(loop, weights, carry, xs, zero_taps)

    @jax.custom_vjp
    def run(weights, carry, xs, consts):
        return explicit_loop(weights, carry, xs, zero_taps, *consts)[0]

    def run_forward(weights, carry, xs, consts):
        def with_constant_weights(carry, xs, taps, consts):
            return explicit_loop(weights, carry, xs, taps, *consts)

        outputs, backward, seen = jax.vjp(
            with_constant_weights, carry, xs, zero_taps, consts, has_aux=True
        )
        return outputs, (backward, seen, weights)

    def run_backward(saved, output_gradients):
        backward, seen, weights = saved
        d_carry, d_xs, d_taps, d_consts = backward(output_gradients)
        d_weights = {}
        for name, weight in weights.items():
            if name in rows:  # each step's and row's gradient, from the loop: their sum
                d_weights[name] = d_taps[name].sum(axis=(0, 1))
                continue
            # sum_t inputs_t^T dp_t: the product applied to every step's inputs at once, so its
            # weight gradient is one product over all B x T rows (see seq2seq/linear.py).
            inputs, gradients = _time_inside(seen[name]), _time_inside(d_taps[name])
            _, weight_backward = jax.vjp(
                lambda w, name=name, x=inputs: multiply[name](x, w), weight
            )
            (d_weights[name],) = weight_backward(gradients)
        return d_weights, d_carry, d_xs, d_consts

    run.defvjp(run_forward, run_backward)
    return run(dict(weights), carry, xs, consts)


def _time_inside(stacked: Array) -> Array:
    """[T, ..., F] per-step values -> [..., T, F]: rows ordered batch first, so that flattening
    them keeps a batch split over devices in contiguous blocks (no resharding)."""
    return jnp.moveaxis(stacked, 0, -2)
