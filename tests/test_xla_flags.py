"""Every command asks XLA for cuBLAS's matrix products on a GPU, unless told otherwise."""

import subprocess
import sys

from seq2seq.training import losses
from seq2seq.xla_flags import LIBRARY_GEMMS, flags_environment
from tests.conftest import REPO, subprocess_env


def test_the_option_is_added_beside_flags_already_set():
    environment = flags_environment({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    flags = environment["XLA_FLAGS"].split()
    assert flags == ["--xla_force_host_platform_device_count=8", LIBRARY_GEMMS]
    assert flags_environment({})["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=false"


def test_a_users_own_setting_of_the_option_wins():
    mine = {"XLA_FLAGS": "--xla_gpu_enable_triton_gemm=true", "HOME": "/h"}
    assert flags_environment(mine) == mine


def test_a_command_runs_with_the_option_on_a_cpu():
    # XLA refuses the whole process on a flag it does not know: the CPU build must know it.
    script = (
        "from seq2seq import cli; cli.start(); import os, jax.numpy as jnp;"
        "print(os.environ['XLA_FLAGS'], float(jnp.ones(3).sum()))"
    )
    environment = subprocess_env()
    environment.pop("XLA_FLAGS", None)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == [LIBRARY_GEMMS, "3.0"]


def test_the_loss_is_chunked_on_a_cpu_and_whole_when_asked():
    assert losses.chunk_tokens(-1) == losses.CHUNK_TOKENS  # "auto", on this CPU
    assert losses.chunk_tokens(0) is None
    assert losses.chunk_tokens(4096) == 4096
