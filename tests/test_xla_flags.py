"""Every command asks XLA for cuBLAS's matrix products on a GPU, unless told otherwise."""

import os

from seq2seq.runtime import xla_flags
from seq2seq.runtime.xla_flags import LIBRARY_GEMMS, flags_environment
from seq2seq.training import losses
from tests.conftest import run_python, subprocess_env


def test_the_option_is_added_beside_flags_already_set():
    environment = flags_environment({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    flags = environment["XLA_FLAGS"].split()
    assert flags == ["--xla_force_host_platform_device_count=8", LIBRARY_GEMMS]
    assert flags_environment({})["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=false"


def test_a_users_own_setting_of_the_option_wins():
    mine = {"XLA_FLAGS": "--xla_gpu_enable_triton_gemm=true", "HOME": "/h"}
    assert flags_environment(mine) == mine


def test_a_command_leaves_xla_flags_alone_without_a_cuda_plugin():
    # This machine's JAX has no CUDA plugin: its compiled programs keep the keys they had.
    script = (
        "from seq2seq import cli; cli.start(); import os, jax.numpy as jnp;"
        "print(repr(os.environ.get('XLA_FLAGS')), float(jnp.ones(3).sum()))"
    )
    environment = subprocess_env()
    environment.pop("XLA_FLAGS", None)
    printed = run_python(script, env=environment)
    assert not xla_flags.cuda_installed()
    assert printed.split()[-2:] == ["None", "3.0"]


def test_the_loss_is_chunked_on_a_cpu_and_whole_when_asked():
    assert losses.chunk_tokens(-1) == losses.CHUNK_TOKENS  # "auto", on this CPU
    assert losses.chunk_tokens(0) is None
    assert losses.chunk_tokens(4096) == 4096


def test_the_option_is_set_where_a_cuda_plugin_is_found(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/d")
    monkeypatch.setattr(xla_flags, "CUDA_PLUGINS", ("jax_plugins.xla_cuda99", "json"))
    xla_flags.use_library_gemms()
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/d {LIBRARY_GEMMS}"
