"""Every run records what produced it; the lock file keeps up with pyproject.toml."""

import importlib.metadata
import json
import logging
import re
import shutil
import subprocess
import tomllib

import jax
import pytest

from seq2seq.records import provenance
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.trainer import train
from tests import lockfile
from tests.conftest import REPO, tiny_config

STEPS = 4


def _config(steps: int = STEPS):
    config = tiny_config("transformer")
    config.train.steps = steps
    config.train.log_every_steps = 2
    config.checkpoint.every_steps = 2
    return config


def _git(*args: str) -> str:
    try:
        result = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    except OSError:
        pytest.skip("git is not installed")
    if result.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout")
    return result.stdout.strip()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run of a few steps, trained once; tests that resume it work on copies."""
    workdir = tmp_path_factory.mktemp("run")
    train(_config(), workdir)
    return workdir


def _resumed_copy(trained, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(trained, workdir)
    return workdir


def test_a_run_names_the_commit_and_the_installed_versions(trained):
    (entry,) = provenance.read_entries(trained)
    assert entry["commit"] == _git("rev-parse", "HEAD")
    assert entry["dirty"] == bool(_git("status", "--porcelain"))
    assert entry["packages"]["jax"] == importlib.metadata.version("jax")
    assert entry["packages"]["orbax-checkpoint"] == importlib.metadata.version("orbax-checkpoint")
    assert entry["device_kind"] == jax.devices()[0].device_kind
    assert entry["device_count"] == jax.device_count()
    assert entry["started"].endswith("+00:00")


def test_a_resume_adds_an_entry_and_warns_once_about_a_changed_version(trained, tmp_path, caplog):
    workdir = _resumed_copy(trained, tmp_path)
    record = json.loads(RunDirectory(workdir).provenance_file.read_text())
    record["entries"][0]["packages"]["jax"] = "0.0.1"  # as if started under an old jax
    RunDirectory(workdir).provenance_file.write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING, logger="seq2seq.records.provenance"):
        train(_config(STEPS + 2), workdir)
    first, second = provenance.read_entries(workdir)
    assert first["packages"]["jax"] == "0.0.1"
    assert second["packages"]["jax"] == importlib.metadata.version("jax")
    assert second["started"] >= first["started"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "seq2seq.records.provenance"]
    assert len(warnings) == 1, warnings
    assert f"jax 0.0.1 -> {importlib.metadata.version('jax')}" in warnings[0]
    assert "jaxlib" not in warnings[0] and "device_kind" not in warnings[0]
    summary = provenance.summary(workdir)
    assert summary["starts"] == 2
    assert summary["jax"] == importlib.metadata.version("jax")
    assert summary["changed_during_run"] == [f"jax 0.0.1 -> {summary['jax']}"]


def test_a_restart_in_the_same_environment_does_not_warn(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="seq2seq.records.provenance"):
        provenance.record_start(tmp_path, ["train.py", "--config.train.steps=5"])
        provenance.record_start(tmp_path, ["train.py", "--config.train.steps", "9"])
    assert not caplog.records
    first, second = provenance.read_entries(tmp_path)
    assert first["config_overrides"] == ["--config.train.steps=5"]
    assert second["config_overrides"] == ["--config.train.steps=9"]
    assert provenance.summary(tmp_path)["changed_during_run"] == []


# Two processors of one machine as /proc/cpuinfo lists them (trimmed); only the first is read.
CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480C
stepping\t: 8
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile

processor\t: 1
vendor_id\t: AuthenticAMD
flags\t\t: fpu avx
"""


def test_the_cpu_is_named_by_generation_and_simd_extensions_not_only_its_model_name():
    facts = provenance.cpu(CPUINFO)
    assert facts == {
        "vendor": "GenuineIntel",
        "family": 6,
        "model": 143,
        "stepping": 8,
        "simd": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                 "avx512_bf16", "amx_tile", "amx_bf16"],
    }  # fmt: skip
    assert provenance.cpu_label(facts).startswith("GenuineIntel 6/143/8 sse4_2 avx avx2")
    assert provenance.cpu("processor\t: 0\nvendor_id\t: ARM\n") is None  # no flags line
    assert provenance.processor(CPUINFO) == "Intel(R) Xeon(R) Platinum 8480C"  # the first block's


def test_a_resume_on_another_cpu_is_named_among_the_changes():
    zen4 = CPUINFO.replace("GenuineIntel", "AuthenticAMD").replace(": 143", ": 17")
    first = {"python": "3.11.7", "packages": {}, "cpu": provenance.cpu(CPUINFO)}
    second = {**first, "cpu": provenance.cpu(zen4)}
    (change,) = provenance.changes(first, second)
    assert change.startswith("cpu GenuineIntel 6/143/8") and "-> AuthenticAMD 6/17/8" in change
    assert provenance.changes(first, {**first, "cpu": None}) == []  # not recorded: no claim


def test_an_unreadable_record_is_kept_aside_and_a_new_one_begun(tmp_path, caplog):
    RunDirectory(tmp_path).provenance_file.write_text("{not json")
    provenance.record_start(tmp_path, ["train.py"])
    assert len(provenance.read_entries(tmp_path)) == 1
    assert (tmp_path / "provenance.json.unreadable").read_text() == "{not json"
    assert "unreadable" in caplog.text


def test_config_overrides_are_taken_from_the_command_line():
    argv = [
        "train.py", "--config", "configs/x.py", "--workdir", "runs/x",
        "--config.train.steps=20", "--config.model.name", "rnnsearch", "--noconfig.data.pack",
    ]  # fmt: skip
    assert provenance.config_overrides(argv) == [
        "--config.train.steps=20",
        "--config.model.name=rnnsearch",
        "--noconfig.data.pack",
    ]


def test_outside_a_git_checkout_commit_and_dirty_are_unknown(tmp_path):
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}


def test_the_lock_file_satisfies_pyproject():
    assert lockfile.lock_problems(REPO / "pyproject.toml", REPO / "requirements.lock") == []


def test_make_lock_locks_every_extra_of_pyproject():
    """pip installs the whole lock, so an extra left out of ``make lock`` would never install."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    target = re.search(r"^LOCK_TARGET := (.*)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert set(re.findall(r"--extra (\S+)", target)) == set(extras) == {"test", "view"}


def test_the_lock_check_fails_on_a_dependency_missing_from_the_lock(tmp_path):
    text = (REPO / "pyproject.toml").read_text()
    changed = text.replace('"tqdm>=4.66",', '"tqdm>=4.66",\n  "einops-not-locked>=1.0",')
    changed = changed.replace('"sacrebleu>=2.5.0",', '"sacrebleu>=99",')
    assert changed.count("einops-not-locked") == 1 and changed.count("sacrebleu>=99") == 1
    (tmp_path / "pyproject.toml").write_text(changed)
    problems = lockfile.lock_problems(tmp_path / "pyproject.toml", REPO / "requirements.lock")
    sacrebleu = lockfile.locked_versions(REPO / "requirements.lock")["sacrebleu"]
    assert sorted(problems) == [
        f"einops-not-locked>=1.0 is not in {REPO / 'requirements.lock'}",
        f"sacrebleu>=99 does not allow the locked sacrebleu=={sacrebleu}",
    ]
