"""Dropout from 16-bit draws keeps the configured rate, independent elements and the expectation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.dropout import drop_threshold, dropout, keep_mask

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


def test_the_four_draws_of_one_hash_call_decide_independently():
    rate = 0.1
    keep, _ = keep_mask(jax.random.key(1), rate, (N // 4, 4))
    dropped = ~np.asarray(keep)
    tolerance = 5 * np.sqrt(rate * rate / (N // 4))
    # Independent draws drop together with probability rate^2 = 0.01; equal ones, 0.1.
    for a, b in [(0, 1), (1, 2), (2, 3), (0, 3)]:
        assert abs(float((dropped[:, a] & dropped[:, b]).mean()) - rate * rate) < tolerance
    # Neighbouring calls (counters i and i + 1) are independent too.
    across = float((dropped[:-1, 3] & dropped[1:, 0]).mean())
    assert abs(across - rate * rate) < tolerance


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
