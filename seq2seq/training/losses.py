"""Token-level cross-entropy with label smoothing (Szegedy et al. 2016; Vaswani et al. 5.4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from seq2seq.models.base import PAD_ID


def smoothed_cross_entropy(
    logits: jax.Array, targets: jax.Array, label_smoothing: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Summed losses over the real (non-padding) target tokens.

    The smoothed target puts ``1 - epsilon`` on the reference token and spreads ``epsilon``
    uniformly over the vocabulary. The unsmoothed negative log-likelihood is returned too: it is
    what perplexity is computed from.

    Args:
      logits: [B, T, V] float32.
      targets: [B, T] token ids, 0 at padding.
      label_smoothing: epsilon_ls.

    Returns:
      (smoothed loss sum, negative log-likelihood sum, number of real tokens).
    """
    vocab_size = logits.shape[-1]
    one_hot = jax.nn.one_hot(targets, vocab_size, dtype=jnp.float32)
    smoothed = optax.smooth_labels(one_hot, label_smoothing)
    weights = (targets != PAD_ID).astype(jnp.float32)
    loss = optax.softmax_cross_entropy(logits, smoothed) * weights
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets) * weights
    return loss.sum(), nll.sum(), weights.sum()
