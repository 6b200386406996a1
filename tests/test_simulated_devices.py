"""Simulated CPU devices get four XLA threads each, so that their collectives cannot starve."""

from pathlib import Path

import pytest

from seq2seq.runtime.simulated_devices import threads_environment
from tests.conftest import run_python, subprocess_env

EIGHT = "--xla_force_host_platform_device_count=8"


def test_eight_simulated_devices_get_thirty_two_threads():
    environment = threads_environment({"XLA_FLAGS": f"--xla_dump_to=/d {EIGHT}", "HOME": "/h"})
    assert environment == {
        "XLA_FLAGS": f"--xla_dump_to=/d {EIGHT}",
        "HOME": "/h",
        "PJRT_NPROC": "32",
    }


def test_the_last_device_count_in_xla_flags_counts():
    flags = f"--xla_force_host_platform_device_count=2 {EIGHT}"
    assert threads_environment({"XLA_FLAGS": flags})["PJRT_NPROC"] == "32"
    flags = f"{EIGHT} --xla_force_host_platform_device_count=1"
    assert "PJRT_NPROC" not in threads_environment({"XLA_FLAGS": flags})


def test_one_device_and_a_users_own_setting_are_left_alone():
    assert threads_environment({}) == {}
    assert threads_environment({"XLA_FLAGS": "--xla_dump_to=/d"}) == {
        "XLA_FLAGS": "--xla_dump_to=/d"
    }
    mine = {"XLA_FLAGS": EIGHT, "PJRT_NPROC": "12"}
    assert threads_environment(mine) == mine


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="counts threads through Linux's /proc"
)
def test_a_command_on_eight_simulated_devices_starts_thirty_two_xla_threads():
    # XLA names its CPU pool's threads tf_XLAEigen; without PJRT_NPROC it starts as many as the
    # cores or the devices (8 on these 2 cores: the pool that starved). A user's own setting wins.
    script = (
        "import os\n"
        "from seq2seq import cli\n"
        "cli.start()\n"
        "import jax\n"
        "assert jax.device_count() == 8\n"
        "names = [open(f'/proc/self/task/{t}/comm').read().strip()\n"
        "         for t in os.listdir('/proc/self/task')]\n"
        "print(names.count('tf_XLAEigen'))\n"
    )
    environment = subprocess_env()
    environment.pop("PJRT_NPROC", None)
    environment["XLA_FLAGS"] = f"{environment.get('XLA_FLAGS', '')} {EIGHT}"
    threads = int(run_python(script, env=environment).split()[-1])
    mine = int(run_python(script, env={**environment, "PJRT_NPROC": "12"}).split()[-1])
    assert (threads, mine) == (32, 12)
