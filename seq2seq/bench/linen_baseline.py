"""The yardstick of ``bench train``: the same Transformer written plainly with Flax linen.

Issue 11 asks the project's training step to beat what a researcher gets by assembling the model
from Flax's stock layers (``nn.MultiHeadDotProductAttention``, ``nn.Dense``, ``nn.LayerNorm``,
``nn.Dropout``, ``nn.Embed``) with an optax Adam step and nothing tuned. This module is that
straightforward version, at the shapes of a Transformer config (pre-LN, sinusoidal positions, one
embedding shared by source, target and the output projection, residual and embedding dropout,
label smoothing), so ``bench train`` can time both on the same batch in the same process. It is
a benchmark only: nothing else imports it.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from seq2seq.training.schedules import build_optimizer, build_schedule
from seq2seq.vocabulary import BOS_ID, PAD_ID


def _positions(length: int, width: int) -> np.ndarray:
    """Sinusoidal position encodings [length, width] (Vaswani et al. 2017, Section 3.5)."""
    position = np.arange(length)[:, None]
    rate = np.exp(-math.log(10_000.0) * np.arange(0, width, 2) / width)
    table = np.zeros((length, width), np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(position * rate), np.cos(position * rate)
    return table


class _FeedForward(nn.Module):
    d_model: int
    d_ff: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.d_model)(nn.relu(nn.Dense(self.d_ff)(x)))


class _EncoderLayer(nn.Module):
    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, x, mask, train: bool):
        c = self.config
        drop = nn.Dropout(c.dropout_rate, deterministic=not train)
        attention = nn.MultiHeadDotProductAttention(c.num_heads, qkv_features=c.d_model)
        h = nn.LayerNorm()(x)
        x = x + drop(attention(h, h, mask=mask))
        return x + drop(_FeedForward(c.d_model, c.d_ff)(nn.LayerNorm()(x)))


class _DecoderLayer(nn.Module):
    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, y, memory, self_mask, cross_mask, train: bool):
        c = self.config
        drop = nn.Dropout(c.dropout_rate, deterministic=not train)
        h = nn.LayerNorm()(y)
        y = y + drop(
            nn.MultiHeadDotProductAttention(c.num_heads, qkv_features=c.d_model)(
                h, h, mask=self_mask
            )
        )
        h = nn.LayerNorm()(y)
        y = y + drop(
            nn.MultiHeadDotProductAttention(c.num_heads, qkv_features=c.d_model)(
                h, memory, mask=cross_mask
            )
        )
        return y + drop(_FeedForward(c.d_model, c.d_ff)(nn.LayerNorm()(y)))


class LinenTransformer(nn.Module):
    """Pre-LN encoder-decoder; ``config`` is a ``model.transformer`` section."""

    config: ml_collections.ConfigDict
    vocab_size: int

    @nn.compact
    def __call__(self, source, target_inputs, train: bool = True):
        c = self.config
        embed = nn.Embed(self.vocab_size, c.d_model)
        drop = nn.Dropout(c.dropout_rate, deterministic=not train)

        def embedded(tokens):
            table = jnp.asarray(_positions(tokens.shape[1], c.d_model))
            return drop(embed(tokens) * math.sqrt(c.d_model) + table)

        source_valid, target_valid = source != PAD_ID, target_inputs != PAD_ID
        x = embedded(source)
        encoder_mask = nn.make_attention_mask(source_valid, source_valid)
        for _ in range(c.encoder_layers):
            x = _EncoderLayer(c)(x, encoder_mask, train)
        memory = nn.LayerNorm()(x)
        self_mask = nn.combine_masks(
            nn.make_attention_mask(target_valid, target_valid),
            nn.make_causal_mask(target_inputs),
        )
        cross_mask = nn.make_attention_mask(target_valid, source_valid)
        y = embedded(target_inputs)
        for _ in range(c.decoder_layers):
            y = _DecoderLayer(c)(y, memory, self_mask, cross_mask, train)
        return embed.attend(nn.LayerNorm()(y))


def make_step(config: ml_collections.ConfigDict, vocab_size: int, batch: dict, seed: int = 0):
    """(a jitted training step, its initial state) for the config's Transformer on ``batch``.

    The step is the textbook one: shifted targets, label-smoothed cross-entropy averaged over
    real tokens, ``jax.value_and_grad``, the config's optimizer and schedule, dropout keys
    folded from the step number, the state donated.
    """
    model = LinenTransformer(config.model.transformer, vocab_size)
    train = config.train
    schedule = build_schedule(train, config.model.transformer.d_model)
    optimizer = build_optimizer(train, schedule)  # the project's: the same update to time
    source, target = jnp.asarray(batch["source"]), jnp.asarray(batch["target"])
    inputs = jnp.concatenate([jnp.full_like(target[:, :1], BOS_ID), target[:, :-1]], axis=1)
    params = model.init(jax.random.key(seed), source, inputs, train=False)["params"]
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt": optimizer.init(params)}

    def loss_fn(params, step, source, target):
        inputs = jnp.concatenate([jnp.full_like(target[:, :1], BOS_ID), target[:, :-1]], axis=1)
        dropout = jax.random.fold_in(jax.random.key(seed), step)
        logits = model.apply({"params": params}, source, inputs, rngs={"dropout": dropout})
        labels = optax.smooth_labels(jax.nn.one_hot(target, vocab_size), train.label_smoothing)
        weights = (target != PAD_ID).astype(jnp.float32)
        loss = optax.softmax_cross_entropy(logits, labels) * weights
        return loss.sum() / jnp.maximum(weights.sum(), 1.0)

    def step_fn(state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(
            state["params"], state["step"], batch["source"], batch["target"]
        )
        updates, opt = optimizer.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"step": state["step"] + 1, "params": params, "opt": opt}, loss

    return jax.jit(step_fn, donate_argnums=0), state
