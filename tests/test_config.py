"""Bad configs stop before any work, with one line that names the key."""

import functools
import subprocess
import sys

import ml_collections
import pytest
from flax import nnx

from seq2seq.config import ConfigError, default_config, unknown_key_message, validate
from tests.conftest import REPO


def _train(*args, tmp_path):
    return subprocess.run(
        [
            sys.executable,
            "train.py",
            "--config",
            "configs/quickstart_transformer.py",
            "--workdir",
            str(tmp_path / "run"),
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_misspelt_key_on_the_command_line_is_named_with_a_suggestion(tmp_path):
    result = _train("--config.train.stpes=3", tmp_path=tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "train.stpes" in last and "train.steps" in last
    assert not (tmp_path / "run").exists(), "no work may start on a bad config"


def test_wrong_type_is_rejected_in_one_line(tmp_path):
    result = _train("--config.train.steps=many", tmp_path=tmp_path)
    assert result.returncode != 0
    assert "train.steps" in result.stderr.strip().splitlines()[-1]


def test_impossible_combination_is_rejected(tmp_path):
    result = _train(
        "--config.data.shared_vocab=False",
        "--config.model.transformer.share_embeddings=True",
        tmp_path=tmp_path,
    )
    assert result.returncode != 0
    assert "share_embeddings" in result.stderr.strip().splitlines()[-1]


def test_schema_is_locked_against_new_keys():
    config = default_config()
    with pytest.raises(AttributeError):
        config.train.stesp = 3


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("model.name", "lstm", "model.name"),
        ("data.source", "wmt", "data.source"),
        ("model.transformer.dropout_rate", 1.5, "dropout_rate"),
        ("train.steps", 0, "train.steps"),
        ("decode.min_rows", -1, "decode.min_rows"),
        ("train.loss_chunk_tokens", -2, "train.loss_chunk_tokens"),
    ],
)
def test_validate_names_the_offending_key(key, value, named):
    config = default_config()
    section, leaf = key.rsplit(".", 1)
    node = config
    for part in section.split("."):
        node = node[part]
    node[leaf] = value
    with pytest.raises(ConfigError, match=named):
        validate(config)


def test_a_negative_seed_is_refused_before_any_work():
    # numpy's and JAX's generators take no sign: a run failed on it after its tokenizer trained
    config = default_config()
    config.seed = -1
    with pytest.raises(ConfigError, match=r"^config.seed=-1 must be >= 0$"):
        validate(config)
    config.seed = 0
    validate(config)


def test_an_abbreviated_key_is_offered_the_key_it_abbreviates():
    """``train.peak_lr`` was offered 'train.dtype', 'train.optimizer' and 'train.adam_b2'."""
    assert unknown_key_message("train.peak_lr") == (
        "unknown config key 'train.peak_lr'; did you mean 'train.learning_rate'?"
    )
    assert "did you mean 'train.label_smoothing'" in unknown_key_message("train.ls")
    assert "learning_rate" not in unknown_key_message("data.lr")  # another section's key


def test_unknown_key_message_suggests_close_matches():
    assert "model.transformer.d_model" in unknown_key_message("model.transformer.dmodel")


@pytest.mark.parametrize(
    ("address", "processes", "process", "error"),
    [
        ("localhost:12345", 0, -1, r"mesh\.num_processes and mesh\.process_id unset"),
        ("", 2, 0, r"mesh\.coordinator_address unset"),
        ("localhost:12345", 2, 2, r"mesh\.process_id=2 must be in 0 \.\. .* = 1"),
        ("localhost:12345", 2, 1, None),
        ("", 0, -1, None),
    ],
)
def test_processes_started_by_hand_are_named_together(address, processes, process, error):
    config = default_config()
    config.mesh.coordinator_address = address
    config.mesh.num_processes = processes
    config.mesh.process_id = process
    _validates_or_raises(config, error)


def _validates_or_raises(config, error: str | None) -> None:
    """``validate(config)`` passes where ``error`` is None, else raises a match for it."""
    if error is None:
        validate(config)
    else:
        with pytest.raises(ConfigError, match=error):
            validate(config)


@pytest.mark.parametrize(("steps", "error"), [(4000, "leaves warmup_cosine nothing"), (4001, None)])
def test_a_cosine_whose_warm_up_takes_every_step_is_refused(steps, error):
    """optax refused it only when the first step ran: after a comparison's tuning sweep."""
    config = default_config()
    config.train.schedule, config.train.warmup_steps, config.train.steps = (
        "warmup_cosine",
        4000,
        steps,
    )
    _validates_or_raises(config, error)


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("data.src_lang", "", r"config\.data\.src_lang='' is not a language code"),
        ("data.tgt_lang", "d/e", r"config\.data\.tgt_lang='d/e' is not a language code"),
        ("data.tgt_lang", "zh-Hant", None),
        ("data.src_lang", "de", r"src_lang and data\.tgt_lang are both 'de'; set them to the"),
        ("data.vocab_size", 4, r"vocab_size=4 must exceed the 4 special tokens \(pad, unk, bos"),
        ("data.vocab_size", 5, None),
        ("train.learning_rate", 0.0, r"config\.train\.learning_rate=0\.0 must be > 0"),
        ("train.learning_rate", -1.0, r"config\.train\.learning_rate=-1\.0 must be > 0"),
        ("train.learning_rate", float("inf"), r"learning_rate=inf must be a finite number"),
        ("train.label_smoothing", float("nan"), r"label_smoothing=nan must be a finite number"),
        ("decode.alpha", float("inf"), r"config\.decode\.alpha=inf must be a finite number"),
        ("decode.beam_size", 65, r"beam_size=65 is over 64, the widest beam searched"),  # ran
        ("decode.beam_size", 64, None),
        ("checkpoint.keep", 0, r"config\.checkpoint\.keep=0 must be >= 1"),
        ("checkpoint.keep", 1, None),
        ("data.bucket_width", 0, r"config\.data\.bucket_width=0 must be >= 1"),  # ZeroDivision
        ("data.bucket_width", -3, r"config\.data\.bucket_width=-3 must be >= 1"),  # ran
        ("data.max_train_examples", -1, r"max_train_examples=-1 must be >= 0 \(0: all pairs\)"),
        ("eval.num_examples", -1, r"num_examples=-1 must be >= 0 \(0: every validation"),
        ("eval.num_examples", 0, None),
        ("train.clip_grad_norm", -1.0, r"clip_grad_norm=-1\.0 must be >= 0 \(0: no clipping\)"),
        ("train.time_budget_minutes", -5.0, r"time_budget_minutes=-5\.0 must be >= 0"),
        ("decode.max_input_length", 0, r"max_input_length=0 must be > 0"),
        ("train.adam_eps", 0.0, r"adam_eps=0\.0 must be > 0"),
        ("train.adam_b2", 1.0, r"adam_b2=1\.0 must be in \[0, 1\)"),
        ("train.adadelta_rho", -0.5, r"adadelta_rho=-0\.5 must be in \[0, 1\)"),
        ("mesh.data", 0, r"config\.mesh\.data=0 must be >= 1, or -1"),
        ("mesh.data", -2, r"config\.mesh\.data=-2 must be >= 1, or -1"),
        ("mesh.fsdp", 0, r"config\.mesh\.fsdp=0 must be >= 1"),  # a division by zero
        ("mesh.tensor", -1, r"config\.mesh\.tensor=-1 must be >= 1"),
        ("mesh.tensor", 2, None),
        ("mesh.rules.fsdp_min_size", 0, None),  # docs/scaling.md's "split every parameter"
        ("mesh.rules.fsdp_min_size", -1, r"fsdp_min_size=-1 must be >= 0"),
    ],
)
def test_values_that_used_to_fail_late_or_run_wrongly_are_refused(key, value, error):
    """An empty language code and a vocabulary of the special tokens alone failed inside the
    tokenizer; a learning rate of 0 trained nothing, one of inf reached a NaN loss,
    checkpoint.keep=0 kept every checkpoint and a bucket width or mesh size of 0 divided by
    zero."""
    config = default_config()
    *sections, name = key.split(".")
    functools.reduce(lambda node, part: node[part], sections, config)[name] = value
    _validates_or_raises(config, error)


def test_a_config_not_built_from_the_schema_is_one_line():
    """A config file written from scratch used to end in a KeyError traceback."""
    scratch = ml_collections.ConfigDict({"model": {"name": "transformer"}, "foo": 1})
    with pytest.raises(ConfigError) as error:
        validate(scratch)
    message = str(error.value)
    assert message.startswith("the config lacks ") and "default_config()" in message
    assert "model.name" not in message.split("(")[1]  # the keys it lacks, not the one it has
    with pytest.raises(ConfigError, match="of type int, not a ConfigDict"):
        validate(5)
    extra = default_config()
    with extra.unlocked():
        extra.train.stepz = 3
    with pytest.raises(ConfigError, match="unknown config key 'train.stepz'; did you mean"):
        validate(extra)


def _parse(*arguments: str):
    """The config that ``--config FILE ARGUMENTS`` gives an entry point."""
    from absl import flags
    from ml_collections import config_flags

    argv = ["train.py", "--config", str(REPO / "configs/quickstart_transformer.py"), *arguments]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
    values(argv)
    return values.config


def test_a_model_field_is_set_from_the_command_line_and_reaches_the_model():
    from seq2seq.models import build_model, count_params

    config = _parse("--config.model.transformer.d_k=4", "--config.model.transformer.d_v=4")
    assert config.model.transformer.d_k == 4

    def parameters(config) -> int:
        model = nnx.eval_shape(lambda: build_model(validate(config), 50, 50, seed=0))
        return count_params(nnx.state(model, nnx.Param))

    narrow, wide = parameters(config), parameters(_parse())
    assert narrow < wide  # the per-head projections shrank with d_k and d_v
    with pytest.raises(Exception, match="d_k"):
        _parse("--config.model.transformer.d_k=wide")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("init", "xavier", "init='xavier' is not one of paper, modern"),
        ("maxout_size", 0, "maxout_size=0 must be positive"),
        ("attention", "dot", r"attention='dot' needs decoder_hidden_size == 2 \*"),
    ],
)
def test_a_model_rule_is_the_same_for_a_config_and_for_the_model_built_directly(
    field, value, message
):
    from seq2seq.models import RNNSearchConfig

    config = default_config()
    config.model.name = "rnnsearch"
    config.model.rnnsearch[field] = value
    with pytest.raises(ConfigError, match=rf"^config\.model\.rnnsearch\.{message}"):
        validate(config)
    with pytest.raises(ValueError, match=rf"^{message}"):
        RNNSearchConfig(30, 30, **{field: value})


def test_the_config_has_one_section_per_model_family():
    from seq2seq.config import MODEL_NAMES
    from seq2seq.models import MODELS

    assert set(MODEL_NAMES) == set(MODELS) == set(default_config().model) - {"name"}


def test_a_count_whose_default_is_zero_may_be_zero_and_a_size_may_not():
    """A new field ``extra_layers: int = 0`` failed its own default ("must be positive") and so
    every config, since each family's section is checked."""
    import dataclasses

    from seq2seq.models.schema import FieldError, check_fields

    section = dataclasses.make_dataclass("Section", [("width", int, 8), ("extra_layers", int, 0)])
    check_fields(section, {"width": 8, "extra_layers": 0})
    with pytest.raises(FieldError, match="extra_layers=-1 must be >= 0"):
        check_fields(section, {"width": 8, "extra_layers": -1})
    with pytest.raises(FieldError, match="width=0 must be positive"):
        check_fields(section, {"width": 0, "extra_layers": 0})
