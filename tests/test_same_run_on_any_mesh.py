"""The same run on any mesh: the quickstart configs, with their own token batching, log the same
losses on one device and on a (2, 2, 2) mesh of 8 simulated devices, and a run started on one
and resumed on the other continues as if it had never moved."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, subprocess_env
from tests.same_run_worker import RESUME_STEP, SETUPS, STEPS, TOKENS_PER_BATCH

pytestmark = pytest.mark.slow


def _worker(part: str, root, devices: int) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "tests.same_run_worker", part, str(root)],
        cwd=REPO, capture_output=True, text=True, timeout=1500, env=subprocess_env(devices),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict]:
    """(one device, (2, 2, 2) mesh): the second resumes the first's 5-step runs."""
    root = tmp_path_factory.mktemp("same_run")
    return _worker("first", root, 1), _worker("second", root, 8)


@pytest.mark.parametrize("setup", SETUPS)
def test_one_device_and_eight_log_the_same_losses(runs, setup):
    one, eight = (report[setup]["losses"] for report in runs)
    assert len(one) == len(eight) == STEPS and one[-1] < one[0]
    np.testing.assert_allclose(eight, one, rtol=1e-4)
    # The equality means something only if the mesh split the state, not just the batch.
    assert runs[0][setup]["split"] == 0 and runs[1][setup]["split"] > 0


@pytest.mark.parametrize("setup", SETUPS)
def test_every_step_logs_the_same_real_tokens_and_flops_within_the_budget(runs, setup):
    one, eight = (report[setup]["tokens"] for report in runs)
    assert one == eight  # the empty rows a mesh adds are not counted, nor their FLOPs
    flops_one, flops_eight = (report[setup]["flops"] for report in runs)
    assert len(flops_one) == STEPS and flops_one == sorted(flops_one)
    np.testing.assert_allclose(flops_eight, flops_one, rtol=1e-6)
    assert len(one) == STEPS and max(max(tokens) for tokens in one) <= TOKENS_PER_BATCH


@pytest.mark.parametrize("setup", SETUPS)
def test_each_batch_shape_compiles_once_whatever_the_mesh(runs, setup):
    one, eight = (report[setup]["shapes"] for report in runs)
    assert one == eight == sorted(one)  # counted as they come, the same shapes on any mesh
    _, pack = SETUPS[setup]
    assert one[-1] == 1 if pack else one[-1] > 1  # packed rows have one shape, buckets several


@pytest.mark.parametrize("setup", SETUPS)
def test_a_run_resumed_on_another_mesh_logs_the_same_losses(runs, setup):
    one, eight = runs
    assert len(one[setup]["resumed"]) == RESUME_STEP  # the first 5 steps, on one device
    resumed = eight[setup]["resumed"]  # the same 5, then 5 more on the (2, 2, 2) mesh
    assert len(resumed) == STEPS
    np.testing.assert_allclose(resumed, one[setup]["losses"], rtol=1e-4)
