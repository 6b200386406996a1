"""Tracing and compiling are counted apart from running, so that speeds can leave them out."""

import jax
import jax.numpy as jnp

from seq2seq.runtime.compile_time import compiling


def test_a_new_shape_counts_its_compile_and_a_seen_one_counts_nothing():
    # The function is new to this process, so not even the in-memory cache holds it.
    square_sum = jax.jit(lambda x: jnp.sum(jnp.tanh(x) ** 2) + 0.125)
    # The inputs are made first: each eager jnp operation is a small program of its own.
    ones, twos, narrow, other = (
        jnp.ones((7, 5)),
        2 * jnp.ones((7, 5)),
        jnp.ones((3, 5)),
        jnp.ones((4, 5)),
    )
    with compiling() as first:
        jax.block_until_ready(square_sum(ones))
    assert first.events >= 2 and first.seconds > 0  # traced, lowered and compiled (or loaded)
    with compiling() as again:
        jax.block_until_ready(square_sum(twos))
    assert (again.events, again.seconds) == (0, 0.0)
    with compiling() as other_shape:
        jax.block_until_ready(square_sum(narrow))
    assert other_shape.events >= 2
    before = (first.events, first.seconds)
    jax.block_until_ready(square_sum(other))  # after its block: no longer listened
    assert (first.events, first.seconds) == before
