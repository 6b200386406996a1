"""Projections over flattened rows compute the same map and contract one axis in their gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.linear import Linear, project, rows_dot_general
from seq2seq.models.base import Dropout
from seq2seq.training.step import _batch_loss
from tests.test_models import _rnnsearch, _transformer


def _contracted_axes(function, *args) -> set[int]:
    """How many axes each product of matrices into a matrix, without batch axes, contracts in
    ``function``'s jaxpr, nested ones included: the projections and their gradients, as opposed
    to attention's per-head products and RNNsearch's ``v_a`` (a vector)."""
    found = set()

    def walk(jaxpr):
        for equation in jaxpr.eqns:
            if equation.primitive.name == "dot_general":
                (lhs_contracting, _), (lhs_batch, _) = equation.params["dimension_numbers"]
                shapes = [v.aval.shape for v in (*equation.invars, *equation.outvars)]
                if not lhs_batch and min(map(len, shapes)) > 1:
                    found.add(len(lhs_contracting))
            for sub in jax.extend.core.jaxprs_in_params(equation.params):
                walk(sub)

    walk(jax.make_jaxpr(function)(*args).jaxpr)
    return found


def test_project_is_the_einsum_of_per_head_and_output_kernels():
    keys = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(keys[0], (2, 5, 6))  # [B, T, D]
    per_head = jax.random.normal(keys[1], (6, 3, 4))  # [D, H, K]
    np.testing.assert_allclose(
        project(x, per_head), jnp.einsum("btd,dhk->bthk", x, per_head), rtol=1e-5, atol=1e-6
    )
    heads = jax.random.normal(keys[2], (2, 5, 3, 4))  # [B, T, H, E]
    output = jax.random.normal(keys[3], (3, 4, 6))  # [H, E, D]
    np.testing.assert_allclose(
        project(heads, output, in_axes=2),
        jnp.einsum("bthe,hed->btd", heads, output),
        rtol=1e-5,
        atol=1e-6,
    )


def test_linear_has_nnx_linears_parameters_outputs_and_gradients():
    ours = Linear(6, 7, rngs=nnx.Rngs(3))
    stock = nnx.Linear(6, 7, rngs=nnx.Rngs(3))
    # The same parameter tree, so checkpoints written before this layer still restore.
    assert nnx.to_pure_dict(nnx.state(ours)).keys() == nnx.to_pure_dict(nnx.state(stock)).keys()
    x = jax.random.normal(jax.random.key(1), (2, 5, 6))

    def gradients(layer):
        def loss(layer, x):
            return jnp.sum(jnp.sin(layer(x)))

        return nnx.grad(loss, argnums=(0, 1))(layer, x)

    np.testing.assert_allclose(ours(x), stock(x), rtol=1e-5, atol=1e-6)
    ours_gradients, stock_gradients = gradients(ours), gradients(stock)
    assert len(jax.tree.leaves(ours_gradients)) == len(jax.tree.leaves(stock_gradients))
    for a, b in zip(jax.tree.leaves(ours_gradients), jax.tree.leaves(stock_gradients), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    half = Linear(6, 7, dtype=jnp.bfloat16, rngs=nnx.Rngs(3))
    assert half(x).dtype == jnp.bfloat16


def test_a_layer_over_batch_and_time_contracts_one_axis_in_its_kernels_gradient():
    x = jnp.ones((2, 5, 6))

    def contracted(layer):
        graphdef, params = nnx.split(layer)
        loss = lambda params: jnp.sum(nnx.merge(graphdef, params)(x))  # noqa: E731
        return _contracted_axes(jax.grad(loss), params)

    # nnx.Linear's kernel gradient contracts B and T as two axes: the layout XLA copies on a CPU.
    assert contracted(nnx.Linear(6, 7, rngs=nnx.Rngs(0))) == {1, 2}  # inputs' gradient: 1
    assert contracted(Linear(6, 7, rngs=nnx.Rngs(0))) == {1}


@pytest.mark.parametrize("build", [_transformer, _rnnsearch], ids=["transformer", "rnnsearch"])
def test_every_projection_in_a_training_gradient_contracts_one_axis(build):
    """RNNsearch's too: its recurrent weights' gradients, taken after each loop (over T x B)."""
    model = build()
    source = jnp.array([[5, 6, 7, 2], [8, 9, 2, 0]])
    target = jnp.array([[10, 11, 2], [12, 2, 0]])
    graphdef, params = nnx.split(model)
    key = jax.random.key(0)

    def loss(params):
        batch = {"source": source, "target": target}
        loss_sum, _, _ = _batch_loss(nnx.merge(graphdef, params), batch, 0.1, Dropout(key))
        return loss_sum

    assert _contracted_axes(jax.grad(loss), params) == {1}


def test_shapes_that_do_not_fit_are_refused_with_the_expected_axes():
    with pytest.raises(ValueError, match=r"last 1 axes must be \(6,\)"):
        project(jnp.ones((2, 5)), jnp.ones((6, 3)))
    with pytest.raises(NotImplementedError, match="nnx.Linear's product only"):
        rows_dot_general(jnp.ones((4, 3)), jnp.ones((4, 5)), (((0,), (0,)), ((), ())))
