"""Bad configs stop before any work, with one line that names the key."""

import subprocess
import sys

import pytest

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
    if error is None:
        validate(config)
    else:
        with pytest.raises(ConfigError, match=error):
            validate(config)
