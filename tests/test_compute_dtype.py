"""``train.dtype = "auto"``: bfloat16 on a GPU or TPU, float32 on a CPU; paper configs use it."""

import jax
import numpy as np
import pytest
from flax import nnx

from seq2seq.config import ConfigError, load_config_file, validate
from seq2seq.models import BOS_ID, EOS_ID, PAD_ID, build_model, compute_dtype
from seq2seq.records import provenance
from tests.conftest import REPO, dot_operand_dtypes, tiny_config

PAPER_CONFIGS = (
    "wmt14_ende_transformer_base",
    "wmt14_ende_transformer_big",
    "wmt14_enfr_rnnsearch50",
    "wmt14_ende_rnnsearch",
)


def _backend(monkeypatch, name: str) -> None:
    """JAX's default backend reported as ``name`` (the computation itself stays on the CPU)."""
    monkeypatch.setattr(jax, "default_backend", lambda: name)


def _config(dtype: str, model: str = "transformer"):
    config = tiny_config(model)
    config.train.dtype = dtype
    return validate(config)


def test_auto_computes_in_float32_on_the_cpu():
    assert jax.default_backend() == "cpu"
    assert compute_dtype(_config("auto")) == "float32"


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_auto_computes_in_bfloat16_on_an_accelerator(monkeypatch, backend):
    _backend(monkeypatch, backend)
    assert compute_dtype(_config("auto")) == "bfloat16"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_named_dtype_is_kept_on_every_backend(monkeypatch, dtype):
    assert compute_dtype(_config(dtype)) == dtype
    _backend(monkeypatch, "gpu")
    assert compute_dtype(_config(dtype)) == dtype


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_an_auto_model_built_for_a_gpu_multiplies_in_bfloat16_and_keeps_float32_parameters(
    monkeypatch, model_name
):
    _backend(monkeypatch, "gpu")
    model = build_model(_config("auto", model_name), 40, 40, seed=0)
    source = np.array([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID]], np.int32)
    target_inputs = np.array([[BOS_ID, 10, 11], [BOS_ID, 12, EOS_ID]], np.int32)

    def logits(source, target_inputs):
        return model(source, target_inputs)[0]

    assert dot_operand_dtypes(logits, source, target_inputs) == {("bfloat16", "bfloat16")}
    assert logits(source, target_inputs).dtype == np.float32
    parameters = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert {leaf.dtype for leaf in parameters} == {np.dtype("float32")}


def test_checking_a_config_does_not_ask_for_the_backend(monkeypatch):
    # A multi-process run joins its job after validating its config, and before JAX's backend
    # starts: validation must not start it.
    def started():
        raise AssertionError("validate asked for JAX's backend")

    monkeypatch.setattr(jax, "default_backend", started)
    assert _config("auto").train.dtype == "auto"


def test_an_unknown_dtype_is_named_in_one_line():
    with pytest.raises(ConfigError, match=r"config.train.dtype='float16' is not one of .*auto"):
        _config("float16")


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_the_papers_configs_compute_in_bfloat16_on_accelerators_only(monkeypatch, name):
    config = load_config_file(REPO / "configs" / f"{name}.py")
    assert config.train.dtype == "auto"
    assert compute_dtype(config) == "float32"
    _backend(monkeypatch, "gpu")
    assert compute_dtype(config) == "bfloat16"


def test_the_resolved_dtype_is_recorded_with_each_start(tmp_path):
    provenance.record_start(tmp_path, ["train.py"], compute_dtype="bfloat16")
    provenance.record_start(tmp_path, ["train.py"])
    first, second = provenance.read_entries(tmp_path)
    assert first["compute_dtype"] == "bfloat16"
    assert "compute_dtype" not in second


def test_the_report_shows_each_runs_dtype_and_a_run_resumed_in_another(tmp_path):
    from seq2seq.compare.report_sections import provenance_warnings

    provenance.record_start(tmp_path, ["train.py"], compute_dtype="bfloat16")  # on a GPU
    provenance.record_start(tmp_path, ["train.py"], compute_dtype="float32")  # resumed on a CPU
    made_by = provenance.summary(tmp_path)
    assert made_by["compute_dtype"] == "float32"
    assert made_by["changed_during_run"] == ["compute_dtype bfloat16 -> float32"]
    other = {**made_by, "compute_dtype": "bfloat16", "changed_during_run": []}
    rows = [{"name": "a", "provenance": made_by}, {"name": "b", "provenance": other}]
    assert provenance_warnings(rows) == [
        "runs were produced under different compute dtypes: bfloat16, float32",
        "`a` changed between its starts: compute_dtype bfloat16 -> float32",
    ]
