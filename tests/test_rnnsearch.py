"""RNNsearch's two initialisations give their documented statistics; RNNencdec reads the source
only through its context vector c."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.config import (
    ConfigError,
    default_config,
    flatten,
    load_config_file,
    load_saved,
    validate,
)
from seq2seq.models import RNNSearch, RNNSearchConfig
from seq2seq.models.base import shift_right

REPO = Path(__file__).resolve().parents[1]

# Wide enough that a sample standard deviation is within a few percent of the true one.
M, N, N_DEC, A, L, VOCAB = 96, 128, 160, 112, 64, 300


def _wide(init: str) -> RNNSearch:
    config = RNNSearchConfig(
        VOCAB, VOCAB, embedding_size=M, encoder_hidden_size=N, decoder_hidden_size=N_DEC,
        alignment_size=A, maxout_size=L, init=init,
    )  # fmt: skip
    return RNNSearch(config, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module", params=["paper", "modern"])
def initialised(request):
    return _wide(request.param)


def _std(parameter) -> float:
    return float(np.std(np.asarray(parameter[...])))


def test_paper_initialisation_is_appendix_b():
    model = _wide("paper")
    # "Any other weight matrix": N(0, 0.01^2); the kernel has 96 x 384 entries.
    assert _std(model.forward_encoder.input_projection.kernel) == pytest.approx(0.01, rel=0.03)
    assert _std(model.w_o.kernel) == pytest.approx(0.01, rel=0.03)
    assert _std(model.source_embedding.embedding) == pytest.approx(0.01, rel=0.03)
    # W_a and U_a: N(0, 0.001^2); v_a: exactly zero.
    assert _std(model.attention.w_a.kernel) == pytest.approx(0.001, rel=0.05)
    assert _std(model.attention.u_a.kernel) == pytest.approx(0.001, rel=0.05)
    assert not np.any(np.asarray(model.attention.v_a[...]))


def test_modern_initialisation_scales_by_fan_in():
    model = _wide("modern")
    kernels = [  # (kernel, its fan-in)
        (model.forward_encoder.input_projection.kernel, M),
        (model.context_to_gates.kernel, 2 * N),
        (model.w_o.kernel, L),
        (model.attention.w_a.kernel, N_DEC),
        (model.attention.u_a.kernel, 2 * N),
    ]
    for kernel, fan_in in kernels:
        assert _std(kernel) == pytest.approx(fan_in**-0.5, rel=0.05)
    assert _std(model.source_embedding.embedding) == pytest.approx(1.0, rel=0.03)
    # v_a is a kernel with one output: N(0, 1/A), so the first alignments are not uniform.
    assert _std(model.attention.v_a) == pytest.approx(A**-0.5, rel=0.15)


def test_each_recurrent_matrix_is_orthogonal(initialised):
    model = initialised
    for gru, n in (
        (model.forward_encoder, N),
        (model.backward_encoder, N),
        (model.decoder, N_DEC),
    ):
        u_gates = np.asarray(gru.u_gates.kernel[...], np.float64)  # [n, 2n] = [U_z U_r]
        for u in (u_gates[:, :n], u_gates[:, n:], np.asarray(gru.u_candidate.kernel[...])):
            np.testing.assert_allclose(u.T @ u, np.eye(n), atol=1e-4)
        # Drawn apart, not as one matrix: the two gates' matrices are unrelated.
        assert np.abs(u_gates[:, :n].T @ u_gates[:, n:]).max() > 0.1


def test_biases_start_at_zero(initialised):
    model = initialised
    for bias in (model.forward_encoder.input_projection.bias, model.u_o.bias, model.w_o.bias):
        assert not np.any(np.asarray(bias[...]))


# -- RNNencdec --------------------------------------------------------------------------------

SMALL_N = 3  # encoder units per direction: c has 2 * 3 = 6 dimensions


def _small(attention: str) -> RNNSearch:
    config = RNNSearchConfig(
        40, 40, embedding_size=8, encoder_hidden_size=SMALL_N, decoder_hidden_size=8,
        alignment_size=8, maxout_size=8, attention=attention, init="modern",
    )  # fmt: skip
    return RNNSearch(config, rngs=nnx.Rngs(1))


def _source_jacobian_singular_values(model: RNNSearch) -> np.ndarray:
    """Singular values of d(logits) / d(source embedding table) for one sentence pair.

    Whatever the decoder reads of the source passes through what ``encode`` hands it; if that
    is one vector c of 2n numbers, this Jacobian has rank at most 2n.
    """
    source = jnp.array([[5, 9, 14, 21, 30, 33, 3]])  # seven distinct words: 56 input dimensions
    target_inputs = shift_right(jnp.array([[7, 8, 11, 12, 20, 3]]))
    graphdef, table, rest = nnx.split(model, nnx.PathContains("source_embedding"), ...)

    def logits_of(table):
        logits, _ = nnx.merge(graphdef, table, rest)(source, target_inputs)
        return logits.reshape(-1)  # T * V = 240 outputs

    # Reverse mode: the recurrences' custom VJP (seq2seq.models.recurrence) has no forward mode.
    (jacobian,) = jax.tree.leaves(jax.jit(jax.jacrev(logits_of))(table))  # [240, 40, 8]
    jacobian = jacobian.reshape(240, -1)
    return np.linalg.svd(np.asarray(jacobian, np.float64), compute_uv=False)


def test_rnnencdec_sees_the_source_only_through_its_context_vector():
    singular = _source_jacobian_singular_values(_small("none"))
    assert singular[2 * SMALL_N - 1] > 1e-3 * singular[0]  # c is used, all of it
    assert singular[2 * SMALL_N] < 1e-5 * singular[0]  # and nothing else of the source
    # The same measurement on RNNsearch, which reads every annotation: it can fail.
    singular = _source_jacobian_singular_values(_small("additive"))
    assert singular[2 * SMALL_N] > 1e-3 * singular[0]


def test_rnnencdec_output_changes_with_an_early_source_word():
    model = _small("none")
    source = jnp.array([[5, 9, 14, 21, 30, 33, 3]])
    changed = source.at[0, 0].set(6)
    target_inputs = shift_right(jnp.array([[7, 8, 11, 12, 20, 3]]))
    encoded, encoded_changed = model.encode(source), model.encode(changed)
    assert float(jnp.abs(encoded["context"] - encoded_changed["context"]).max()) > 1e-4
    logits, _, _ = model.decode(encoded, target_inputs)
    changed_logits, _, _ = model.decode(encoded_changed, target_inputs)
    assert float(jnp.abs(logits - changed_logits).max()) > 1e-4
    # Given the first sentence's c, the second sentence decodes exactly as the first.
    swapped = {**encoded_changed, "context": encoded["context"]}
    swapped["initial_state"] = encoded["initial_state"]  # s_0 = tanh(V' c), a function of c
    swapped_logits, _, _ = model.decode(swapped, target_inputs)
    np.testing.assert_array_equal(swapped_logits, logits)


# -- configuration ----------------------------------------------------------------------------


def test_unknown_attention_or_init_is_one_line():
    config = default_config()
    config.model.rnnsearch.attention = "luong"
    with pytest.raises(ConfigError, match=r"model\.rnnsearch\.attention='luong' is not one of"):
        validate(config)
    config = default_config()
    config.model.rnnsearch.init = "xavier"
    with pytest.raises(ConfigError, match=r"model\.rnnsearch\.init='xavier' is not one of"):
        validate(config)


def test_a_run_saved_with_the_old_scoring_key_still_loads(tmp_path):
    saved = json.loads(default_config().to_json())
    saved["model"]["rnnsearch"].pop("attention")
    saved["model"]["rnnsearch"]["scoring"] = "general"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert load_saved(tmp_path / "config.json").model.rnnsearch.attention == "general"


def _config(name: str):
    return load_config_file(REPO / "configs" / f"{name}.py")


def _differences(config, base) -> set[str]:
    base_values = dict(flatten(base))
    return {key for key, value in flatten(config) if base_values[key] != value}


@pytest.mark.parametrize("name", ["quickstart", "multi30k", "long_sentences"])
def test_rnnencdec_configs_differ_from_rnnsearch_only_in_attention(name):
    config = _config(f"{name}_rnnencdec")
    assert _differences(config, _config(f"{name}_rnnsearch")) == {"model.rnnsearch.attention"}
    assert config.model.rnnsearch.attention == "none"


def test_long_sentences_rows_share_data_and_budget_and_keep_quickstart_sizes():
    rows = ["rnnsearch", "rnnencdec", "rnnsearch_dot", "rnnsearch_general", "transformer"]
    configs = {row: _config(f"long_sentences_{row}") for row in rows}
    reference = configs["rnnsearch"]
    for row, config in configs.items():
        for section in ("data", "eval", "decode"):
            assert config[section] == reference[section], (row, section)
        assert config.train.time_budget_minutes == reference.train.time_budget_minutes
    changed_sizes = {  # model keys that differ from the quickstart config of the same model
        "rnnsearch": set(),
        "rnnencdec": {"attention"},
        "rnnsearch_dot": {"attention", "encoder_hidden_size"},  # dot needs 2n == n_dec
        "rnnsearch_general": {"attention"},
        "transformer": set(),
    }
    for row, config in configs.items():
        model = config.model.name
        quickstart = _config(f"quickstart_{model}")
        changed = _differences(config.model[model], quickstart.model[model])
        assert changed == changed_sizes[row], row
