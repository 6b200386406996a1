"""One registry of model families: a made-up third family (tests/attentive_bigram.py), registered
here and nowhere else, gets a config section, validation, FLOPs, bench targets, and trains,
decodes and compares end to end; its registration is undone after each test."""

from __future__ import annotations

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq import config as config_lib
from seq2seq.compare.comparison import compare
from seq2seq.compare.settings import Settings
from seq2seq.compare.suites import RunSpec
from seq2seq.config import ConfigError, default_config, validate
from seq2seq.decoding.beam_search import beam_search
from seq2seq.models import (
    MODELS,
    BenchTargets,
    build_model,
    register,
    schedule_width,
    train_flops,
    unregister,
)
from seq2seq.models.flops import TRAIN_FORWARD_MULTIPLE
from seq2seq.models.registry import FAMILIES
from seq2seq.records.run_directory import RunDirectory
from tests import attentive_bigram
from tests.attentive_bigram import NAME, AttentiveBigram
from tests.conftest import tiny_config


@pytest.fixture
def family():
    """The made-up family, registered for one test and removed after it, whatever happened."""
    register(attentive_bigram.FAMILY)
    try:
        yield attentive_bigram.FAMILY
    finally:
        unregister(NAME)


def test_a_registered_family_has_a_config_section_a_name_and_goes_away_after(family):
    config = default_config()
    assert config.model[NAME].to_dict() == {"width": 16, "dropout_rate": 0.0}
    shipped = tuple(family.name for family in FAMILIES)  # a new family of the package's too
    assert shipped[:2] == ("transformer", "rnnsearch")
    assert (*shipped, NAME) == config_lib.MODEL_NAMES
    config.model.name = NAME
    validate(config)  # the new name is a choice, its section is checked by its own entry
    unregister(NAME)
    try:
        assert NAME not in default_config().model and NAME not in config_lib.MODEL_NAMES
        config = default_config()
        config.model.name = NAME
        with pytest.raises(ConfigError, match=f"config.model.name='{NAME}' is not one of"):
            validate(config)
    finally:
        register(family)  # for the fixture to remove


def test_a_name_is_registered_once_and_package_families_stay(family):
    with pytest.raises(ValueError, match=f"named '{NAME}' is registered already"):
        register(family)
    with pytest.raises(ValueError, match="no registered model family 'transformer'"):
        unregister("transformer")
    assert list(MODELS)[:2] == ["transformer", "rnnsearch"]


def test_a_dropout_rate_of_the_chosen_family_is_checked_even_if_its_dataclass_does_not(family):
    # The made-up dataclass checks nothing itself; before each family checked its own section,
    # the chosen model's fields were checked only by its dataclass, and a rate of 1 got through.
    config = tiny_config(NAME)
    config.model[NAME].dropout_rate = 1.0
    with pytest.raises(ConfigError, match=rf"^config\.model\.{NAME}\.dropout_rate=1\.0 must be in"):
        validate(config)
    config.model[NAME].width = 0
    config.model[NAME].dropout_rate = 0.1
    with pytest.raises(ConfigError, match=rf"^config\.model\.{NAME}\.width=0 must be positive"):
        validate(config)


def test_packing_and_shared_embeddings_follow_the_entry_and_the_section(family):
    config = tiny_config(NAME)
    config.data.pack = True
    with pytest.raises(ConfigError, match=f"needs model.name='transformer' \\(model.name='{NAME}'"):
        validate(config)
    config.data.pack = False
    config.data.shared_vocab = False  # no share_embeddings field: nothing to share, no error
    validate(config)
    config.model.name = "rnnsearch"
    config.model.rnnsearch.share_embeddings = True
    with pytest.raises(ConfigError, match="model.rnnsearch.share_embeddings needs data.shared"):
        validate(config)


def test_flops_and_the_schedule_width_come_from_the_entry(family):
    config = tiny_config(NAME)
    sources, targets = np.array([5, 9]), np.array([7, 3])
    width, vocab = config.model[NAME].width, 100
    by_hand = targets * (4 * sources * width + 2 * 2 * width * width + 2 * width * vocab)
    np.testing.assert_array_equal(
        train_flops(config, vocab, sources, targets), TRAIN_FORWARD_MULTIPLE * by_hand
    )
    config.model[NAME].width = 24
    assert schedule_width(config) == 24


def test_the_bench_tables_come_from_the_entries(family):
    from seq2seq.bench.__main__ import _decode_targets, _train_targets, bench_families, summary

    assert [f.name for f in bench_families()] == ["transformer", "rnnsearch"]  # no targets: out
    targets = BenchTargets("made_up_bench", beam_size=3, decode_sentences_per_s=10.0,
                           split_decode_sentences_per_s=20.0, train_mfu=0.5)  # fmt: skip
    unregister(NAME)
    register(dataclasses.replace(family, bench=targets))
    decode = {"model": NAME, "beam_size": 3, "sentences_per_s": 15.0, "trained": False,
              "sentences": 32, "source_length": 30, "max_output_length": 30}  # fmt: skip
    assert _decode_targets(decode) == {"sentences_per_s": ">= 10: met (beam 3)"}
    assert _decode_targets({**decode, "split": "test"}) == {
        "sentences_per_s": ">= 20: NOT met (beam 3)"
    }
    assert _decode_targets({**decode, "beam_size": 4}) == {}  # the targets are stated at beam 3
    train = {"model": NAME, "mfu": 0.4, "step_ms": 2.0, "tokens_per_s": 9.0, "compile_s": 1.0}
    assert _train_targets(train) == {"mfu": ">= 0.5: NOT met"}
    results = {
        "matmul_float32": {"peak_gflops": 1.0},
        "matmul_bfloat16": {"peak_gflops": 1.0},
        f"train_{NAME}": train,
        f"decode_{NAME}": decode,
        f"data_{NAME}": {"tokens_per_s": 180.0},
    }
    table = summary(results)
    assert "| made_up_bench MFU | 0.4 | >= 0.5: NOT met |" in table
    assert "| Attentive bigram beam 3 sentences/s | 15 | >= 10: met |" in table
    assert "| input pipeline / training consumption | 20 | >= 10: met |" in table


def test_decoding_the_made_up_family_with_its_cache_equals_decoding_without(family):
    config = tiny_config(NAME)
    model = build_model(config, 30, 30, seed=0)
    assert isinstance(model, AttentiveBigram)
    source = jnp.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    cached = beam_search(model, source, 6, beam_size=3, alpha=0.6)
    uncached = beam_search(model, source, 6, beam_size=3, alpha=0.6, use_cache=False)
    np.testing.assert_array_equal(cached[0], uncached[0])  # tokens
    np.testing.assert_allclose(cached[1], uncached[1], rtol=1e-5)  # scores
    assert nnx.state(model, nnx.Param)  # a model with parameters, not a stub


TINY_CONFIG = """
from tests.conftest import tiny_config


def get_config():
    config = tiny_config("{name}")
    config.train.steps = 12
    config.train.log_every_steps = 4
    config.checkpoint.every_steps = 12
    return config
"""


@pytest.mark.slow
def test_the_made_up_family_trains_decodes_and_compares_end_to_end(family, tmp_path):
    (tmp_path / f"tiny_{NAME}.py").write_text(TINY_CONFIG.format(name=NAME))
    specs = [RunSpec(f"tiny_{NAME}", tmp_path / f"tiny_{NAME}.py")]
    settings = Settings(seeds=1, beam_size=2, alpha=0.6, max_test_sentences=12)
    outcomes, report_md = compare(specs, tmp_path / "work", settings, "made-up family")

    assert [(o.name, o.status) for o in outcomes] == [(f"tiny_{NAME}", "ok")], outcomes
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    (row,) = report["runs"]
    run = RunDirectory(row["workdir"])
    assert run.load_config().model.name == NAME  # its saved config loads back, section and all
    losses = [r["loss"] for r in run.read_metrics() if r["kind"] == "train"]
    assert losses[-1] < losses[0], losses  # it learns
    result = run.read_eval_result("test")
    assert row["status"] == "ok" and row["test_sentences"] == result["n"] == 12
    assert row["bleu"] == result["bleu"] >= 0
    assert row["steps"] == 12 and row["train_flops"] > 0
    alignments = [path for path in report["figures"].get("alignments", []) if NAME in path]
    assert alignments and all((tmp_path / "work" / p).exists() for p in alignments)
    assert f"tiny_{NAME}" in report_md.read_text()
