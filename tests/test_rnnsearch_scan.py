"""RNNsearch's recurrences in fewer loop iterations: unrolled (``model.rnnsearch.scan_unroll``)
and with both encoder directions in one loop (``model.rnnsearch.joint_encoder_loop``); and their
weight gradients taken after each loop (``model.rnnsearch.weight_gradients_after_loop``). The
same equations, so the same logits and gradients, whatever the loop and the length."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.extend.core import jaxprs_in_params

from seq2seq.config import ConfigError, default_config, identity_keys, validate
from seq2seq.models import RNNSearch, RNNSearchConfig
from seq2seq.models.base import shift_right
from seq2seq.vocabulary import EOS_ID

VOCAB = 40
# Seven source and five target positions (neither a multiple of 4), the second row padded:
# the unrolled loop's remainder and the state kept over padding are both exercised.
SOURCE = jnp.array([[5, 9, 14, 21, 30, 33, EOS_ID], [6, 11, 17, EOS_ID, 0, 0, 0]])
TARGET = jnp.array([[7, 8, 11, 20, EOS_ID], [12, 13, EOS_ID, 0, 0]])


def _model(attention: str, unroll: int, joint: bool = False, after_loop: bool = True) -> RNNSearch:
    config = RNNSearchConfig(
        VOCAB, VOCAB, embedding_size=8, encoder_hidden_size=6, decoder_hidden_size=12,
        alignment_size=8, maxout_size=8, attention=attention, init="modern", scan_unroll=unroll,
        joint_encoder_loop=joint, weight_gradients_after_loop=after_loop,
    )  # fmt: skip
    return RNNSearch(config, rngs=nnx.Rngs(3))  # the same parameters for every loop


def _logits_and_gradients(model: RNNSearch):
    graphdef, params = nnx.split(model, nnx.Param)
    target_inputs = shift_right(TARGET)

    def loss(params):
        logits, _ = nnx.merge(graphdef, params)(SOURCE, target_inputs)
        log_probabilities = jax.nn.log_softmax(logits)
        picked = jnp.take_along_axis(log_probabilities, TARGET[..., None], axis=-1)[..., 0]
        return -jnp.sum(jnp.where(TARGET != 0, picked, 0.0)), logits

    (_, logits), gradients = jax.value_and_grad(loss, has_aux=True)(params)
    return logits, gradients


@pytest.mark.parametrize("attention", ["additive", "none"])
@pytest.mark.parametrize("unroll", [2, 4, 8])
def test_unrolled_recurrences_give_the_same_logits_and_gradients(attention, unroll):
    logits, gradients = _logits_and_gradients(_model(attention, 1))
    unrolled_logits, unrolled_gradients = _logits_and_gradients(_model(attention, unroll))
    assert float(jnp.abs(logits).max()) > 1e-3  # a model that outputs something to compare
    np.testing.assert_allclose(unrolled_logits, logits, rtol=1e-5, atol=1e-6)
    flat = jax.tree_util.tree_leaves_with_path(gradients)
    unrolled = dict(jax.tree_util.tree_leaves_with_path(unrolled_gradients))
    assert len(flat) == len(unrolled)
    for path, gradient in flat:
        np.testing.assert_allclose(unrolled[path], gradient, rtol=1e-4, atol=1e-6)
    encoder = [g for p, g in flat if "backward_encoder" in jax.tree_util.keystr(p)]
    assert max(float(jnp.abs(g).max()) for g in encoder) > 1e-6  # gradients reach the encoder


@pytest.mark.parametrize("attention, unroll", [("additive", 4), ("none", 1)])
def test_one_loop_for_both_encoder_directions_gives_the_same_logits_and_gradients(
    attention, unroll
):
    logits, gradients = _logits_and_gradients(_model(attention, unroll, joint=False))
    joint_logits, joint_gradients = _logits_and_gradients(_model(attention, unroll, joint=True))
    np.testing.assert_allclose(joint_logits, logits, rtol=1e-5, atol=1e-6)
    # Both directions' weights learn.
    _assert_same_gradients(joint_gradients, gradients, 1e-4, 1e-6, learning=("_encoder",))


def _assert_same_gradients(gradients, expected, rtol: float, atol: float, learning=()):
    """Every parameter's gradient as ``expected``'s; those whose path names one of ``learning``
    (kernels only) are not all zero, so that the comparison compares something."""
    flat = jax.tree_util.tree_leaves_with_path(expected)
    by_path = dict(jax.tree_util.tree_leaves_with_path(gradients))
    assert len(flat) == len(by_path)
    for path, gradient in flat:
        where = jax.tree_util.keystr(path)
        np.testing.assert_allclose(by_path[path], gradient, rtol=rtol, atol=atol, err_msg=where)
        if "kernel" in where and any(name in where for name in learning):
            assert float(jnp.abs(gradient).max()) > 1e-6, where


@pytest.mark.parametrize(
    "attention, unroll, joint",
    [("additive", 1, False), ("additive", 4, True), ("general", 1, True), ("none", 2, False)],
)
def test_weight_gradients_after_the_loop_equal_those_summed_inside_it(attention, unroll, joint):
    logits, gradients = _logits_and_gradients(_model(attention, unroll, joint, after_loop=False))
    late_logits, late_gradients = _logits_and_gradients(_model(attention, unroll, joint))
    # The same program but for v_a's product, taken sentence by sentence (recurrent_scan's
    # per_row), which rounds differently.
    np.testing.assert_allclose(late_logits, logits, rtol=1e-5, atol=1e-6)
    if attention != "additive":
        np.testing.assert_array_equal(late_logits, logits)
    recurrent = ("u_gates", "u_candidate", "w_a", "context_to_gates")
    _assert_same_gradients(late_gradients, gradients, 1e-5, 1e-7, learning=recurrent)


@pytest.mark.parametrize("after_loop", [True, False])
def test_no_backward_loop_carries_a_recurrent_weights_gradient(after_loop):
    """Summed inside a loop, a weight's gradient is carried from step to step: a loop-carried
    array of the weight's shape. After the loop, no loop carries one."""
    model = _model("additive", 1, after_loop=after_loop)
    graphdef, params = nnx.split(model, nnx.Param)
    weights = {
        path: leaf.shape
        for path, leaf in jax.tree_util.tree_leaves_with_path(params)
        if any(n in jax.tree_util.keystr(path) for n in ("u_gates", "u_candidate", "w_a", "v_a"))
    }
    assert len(weights) == 8  # [U_z U_r] and U of three GRUs, W_a and v_a

    def loss(params):
        logits, _ = nnx.merge(graphdef, params)(SOURCE, shift_right(TARGET))
        return jnp.sum(logits**2)

    jaxpr = jax.make_jaxpr(jax.grad(loss))(params)
    carried = set()
    for scan in _scans(jaxpr.jaxpr):
        start = scan.params["num_consts"]
        carries = scan.invars[start : start + scan.params["num_carry"]]
        carried |= {tuple(v.aval.shape) for v in carries}
    assert bool(carried & set(weights.values())) == (not after_loop), carried


def test_the_joint_loop_keeps_each_directions_state_over_padding():
    """Row 2 ends in padding: its backward state starts at its own last word (zero before it),
    and its forward state stays at that word's over the padding, as in two loops."""
    model = _model("additive", 1, joint=True)
    annotations = model.encode(SOURCE)["annotations"]  # [B, S, 2n]: [forward ; backward]
    forward, backward = annotations[1, :, :6], annotations[1, :, 6:]
    real = int((SOURCE[1] != 0).sum())
    np.testing.assert_array_equal(forward[real:], jnp.broadcast_to(forward[real - 1], (3, 6)))
    np.testing.assert_array_equal(backward[real:], 0.0)
    assert float(jnp.abs(backward[0]).min()) > 0.0
    separate = _model("additive", 1, joint=False).encode(SOURCE)["annotations"]
    np.testing.assert_allclose(annotations, separate, rtol=1e-6, atol=1e-7)


def test_an_unrolled_decoder_steps_one_token_from_a_cache_as_the_plain_one():
    """Beam search decodes one position at a time: an unroll longer than the loop."""
    outputs = []
    for unroll in (1, 4):
        model = _model("additive", unroll)
        encoded, cache = model.start_decoding(model.encode(SOURCE), max_length=5)
        inputs = shift_right(TARGET)
        for position in range(3):
            logits, _, cache = model.decode(
                encoded, inputs[:, position : position + 1], cache=cache
            )
        outputs.append((logits, cache["state"]))
    np.testing.assert_allclose(outputs[1][0], outputs[0][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs[1][1], outputs[0][1], rtol=1e-5, atol=1e-6)


def test_scan_unroll_below_one_is_refused_in_one_line():
    config = default_config()
    config.model.name = "rnnsearch"
    config.model.rnnsearch.scan_unroll = 0
    with pytest.raises(ConfigError, match=r"model\.rnnsearch\.scan_unroll=0 must be positive"):
        validate(config)
    with pytest.raises(ValueError, match="scan_unroll=-2 must be positive"):
        dataclasses.replace(_model("none", 1).config, scan_unroll=-2)


def test_the_loops_do_not_change_a_run_identity():
    """A run may resume with another unroll or encoder loop: the update is the same."""
    config = default_config()
    config.model.name = "rnnsearch"
    keys = identity_keys(config)
    assert "model.rnnsearch.encoder_hidden_size" in keys
    assert "model.rnnsearch.scan_unroll" not in keys
    assert "model.rnnsearch.joint_encoder_loop" not in keys


@pytest.mark.parametrize("attention", ["additive", "none"])
@pytest.mark.parametrize("joint, loops", [(True, 2), (False, 3)])
def test_every_recurrence_is_unrolled(attention, joint, loops):
    """The encoder's directions (one loop, or one each) and the decoder: each loop with the
    configured unroll."""
    model = _model(attention, 4, joint)
    jaxpr = jax.make_jaxpr(lambda s, t: model(s, t)[0])(SOURCE, shift_right(TARGET))
    assert [scan.params["unroll"] for scan in _scans(jaxpr.jaxpr)] == [4] * loops


def _scans(jaxpr) -> list:
    """Every scan in ``jaxpr``, also those inside other primitives (a custom_vjp, a scan)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            found.append(eqn)
        for sub in jaxprs_in_params(eqn.params):
            found.extend(_scans(sub))
    return found
