"""Dropout from 16-bit draws keeps the configured rate, independent elements and the expectation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.dropout import drop_threshold, dropout, keep_mask, mix

N = 1 << 20  # elements per statistical check: the standard error of a rate is about 3e-4


def test_rate_is_rounded_to_the_nearest_of_65536_levels():
    assert drop_threshold(0.1) == 6554  # 6553.6 rounds up
    assert drop_threshold(0.3) == 19661  # 19660.8
    assert drop_threshold(0.0) == 0
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        drop_threshold(1.0)


def test_kept_fraction_matches_the_rate():
    for rate in (0.1, 0.3):
        keep, keep_probability = keep_mask(jax.random.key(0), rate, (N,))
        assert keep_probability == pytest.approx(1 - rate, abs=1e-5)
        observed = float(keep.mean())
        # 5 standard errors; a mask drawn from 8 bits (rate 26/256 = 0.1016) would miss it.
        assert abs(observed - keep_probability) < 5 * np.sqrt(rate * (1 - rate) / N)


def _co_dropped(a, b) -> float:
    return float((a & b).mean())


def test_neighbouring_and_distant_elements_decide_independently():
    rate = 0.1
    keep, _ = keep_mask(jax.random.key(1), rate, (N,))
    dropped = ~np.asarray(keep)
    # Independent elements drop together with probability rate^2 = 0.01; equal ones, 0.1.
    tolerance = 5 * np.sqrt(rate * rate / N)
    # Lag 1 pairs the two halves of one hash output and the last half of one with the first of
    # the next; the others pair outputs of nearby and distant counters.
    for lag in (1, 2, 3, 7, 64, 1000, 4097):
        assert abs(_co_dropped(dropped[:-lag], dropped[lag:]) - rate * rate) < tolerance, lag


def test_two_sites_decide_independently():
    rate, parent = 0.1, jax.random.key(7)
    first, _ = keep_mask(jax.random.fold_in(parent, 0), rate, (N,))
    second, _ = keep_mask(jax.random.fold_in(parent, 1), rate, (N,))
    both = _co_dropped(~np.asarray(first), ~np.asarray(second))
    assert abs(both - rate * rate) < 5 * np.sqrt(rate * rate / N)


def test_every_bit_of_the_hash_is_balanced():
    bits = np.asarray(mix(jnp.arange(N, dtype=jnp.uint32), jnp.array([12345, 678], jnp.uint32)))
    ones = np.array([((bits >> b) & 1).mean() for b in range(32)])
    assert np.abs(ones - 0.5).max() < 5 * np.sqrt(0.25 / N)
    assert len(np.unique(bits)) == N  # a bijection of the counter: no repeated value


def test_keys_of_every_generator_are_accepted():
    for key in (jax.random.PRNGKey(5), jax.random.key(5, impl="rbg")):
        keep, _ = keep_mask(key, 0.5, (4096,))
        assert 0.45 < float(keep.mean()) < 0.55


def test_survivors_are_rescaled_so_the_expectation_is_the_input():
    x = jnp.full((64, 129), 2.0)  # an odd number of elements: the last word is half used
    y = np.asarray(dropout(x, 0.25, jax.random.key(2)))
    survivors = y[y != 0]
    keep_probability = 1 - 16384 / 65536
    np.testing.assert_allclose(survivors, 2.0 / keep_probability, rtol=1e-6)
    assert 0.2 < 1 - survivors.size / y.size < 0.3
    assert np.array_equal(dropout(x, 0.0, jax.random.key(2)), x)


def test_keys_give_different_masks_and_the_gradient_uses_the_forward_mask():
    x = jnp.arange(1.0, 1 + 8 * 300).reshape(8, 300)
    a = dropout(x, 0.1, jax.random.key(3))
    b = dropout(x, 0.1, jax.random.key(4))
    assert not np.array_equal(np.asarray(a) == 0, np.asarray(b) == 0)
    grad = jax.grad(lambda x: dropout(x, 0.1, jax.random.key(3)).sum())(x)
    expected = np.where(np.asarray(a) != 0, 1 / (1 - 6554 / 65536), 0.0)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)
