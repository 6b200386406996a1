"""Trains both tiny models on one device and on meshes of 8 simulated devices; prints JSON.

Run by ``tests/test_mesh.py`` in a subprocess, with ``--xla_force_host_platform_device_count=8``
set before JAX starts. For each model: 12 steps on one device (no mesh) and on each mesh shape
from the same state and batches, saving a checkpoint at step 6 of the ``fsdp=4`` run; then that
checkpoint restored onto one device and onto a ``data=2, tensor=2`` mesh, trained to step 12.
It reports the losses of every run and the partition spec of every parameter after training,
and for RNNsearch the collectives inside the compiled step's loops on several meshes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from seq2seq.bench.collectives import collectives_in_loops as loop_collectives
from seq2seq.checkpoints.store import Checkpoints
from seq2seq.training import sharding
from seq2seq.training.step import make_train_step
from seq2seq.training.trainer import create_state
from tests.conftest import tiny_config

MESHES = {"8,1,1": (8, 1, 1), "2,4,1": (2, 4, 1), "2,2,2": (2, 2, 2), "1,1,8": (1, 1, 8)}
SAVED_ON = "2,4,1"  # fsdp=4
STEPS, SAVE_STEP = 12, 6
VOCAB, ROWS = 64, 16
FSDP_MIN_SIZE = 256  # tiny parameters: a threshold some of them fall below


def config_for(model_name: str):
    config = tiny_config(model_name)
    t = config.model.transformer
    t.num_heads, t.d_k, t.d_v = 8, 4, 4  # eight heads: tensor=8 splits them
    config.train.schedule = "constant"
    config.train.learning_rate = 3e-3
    config.mesh.rules.fsdp_min_size = FSDP_MIN_SIZE
    return config


def batches(seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random sentence pairs with unequal real lengths (padding at the ends)."""
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(STEPS):
        source = rng.integers(4, VOCAB, (ROWS, 12)).astype(np.int32)
        target = rng.integers(4, VOCAB, (ROWS, 10)).astype(np.int32)
        source[::3, 7:] = 0
        target[1::2, 6:] = 0
        result.append({"source": source, "target": target})
    return result


def mesh_step(config, state, schedule, mesh):
    """The train step on ``mesh`` with the config's rules, and the function that places a host
    batch on it."""
    rules = sharding.AxisRules.from_config(config.mesh.rules)
    batch_sharding = sharding.batch_sharding(mesh, rules)
    step = make_train_step(
        label_smoothing=0.1,
        schedule=schedule,
        state_sharding=sharding.state_sharding(mesh, state, rules),
        batch_sharding=batch_sharding,
        metrics_sharding=sharding.replicated(mesh),
        axis_rules=rules,
    )
    return step, lambda batch: sharding.global_batch(batch, batch_sharding)


def train(config, state, schedule, data, mesh=None, start=0, checkpoints=None):
    """Steps ``start`` .. STEPS - 1; the losses, the final state."""
    if mesh is None:
        step = make_train_step(label_smoothing=0.1, schedule=schedule)
        place = lambda batch: batch  # noqa: E731
    else:
        step, place = mesh_step(config, state, schedule, mesh)
    losses = []
    for index in range(start, STEPS):
        state, metrics = step(state, place(data[index]))
        losses.append(float(metrics["loss"]))
        if checkpoints is not None and index + 1 == SAVE_STEP:
            checkpoints.save(SAVE_STEP, state, {})
    return losses, state


def specs(state) -> dict[str, list]:
    """Every parameter's partition spec, by its path."""
    result = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(
        state.params, is_leaf=lambda x: isinstance(x, nnx.Variable)
    ):
        spec = leaf.get_value().sharding.spec
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        result[name] = [list(a) if isinstance(a, tuple) else a for a in spec]
    return result


def restored(config, template, mesh, directory: Path):
    checkpoints = Checkpoints(directory, keep=2)
    shardings = None
    if mesh is not None:
        shardings = sharding.state_sharding(
            mesh, template, sharding.AxisRules.from_config(config.mesh.rules)
        )
    state, _ = checkpoints.restore(template, SAVE_STEP, shardings)
    checkpoints.close()
    return state


def run_model(model_name: str, directory: Path) -> dict:
    config = config_for(model_name)
    data = batches()
    fresh = lambda: create_state(config, VOCAB, VOCAB)  # noqa: E731
    report = {"losses": {}, "specs": {}, "resumed": {}}
    state, schedule = fresh()
    report["losses"]["one"], _ = train(config, state, schedule, data)
    for label, shape in MESHES.items():
        mesh = sharding.build_mesh(*shape)
        state, schedule = fresh()
        rules = sharding.AxisRules.from_config(config.mesh.rules)
        state = jax.device_put(state, sharding.state_sharding(mesh, state, rules))
        checkpoints = Checkpoints(directory, keep=2) if label == SAVED_ON else None
        report["losses"][label], state = train(config, state, schedule, data, mesh, 0, checkpoints)
        report["specs"][label] = specs(state)
        if checkpoints is not None:
            checkpoints.close()
    template, schedule = fresh()
    state = restored(config, template, None, directory)
    report["resumed"]["one"], _ = train(config, state, schedule, data, None, SAVE_STEP)
    mesh = sharding.build_mesh(2, 1, 2, devices=jax.devices()[:4])
    state = restored(config, template, mesh, directory)
    report["resumed"]["2,1,2"], _ = train(config, state, schedule, data, mesh, SAVE_STEP)
    return report


def collectives_in_loops(model_name: str, mesh_label: str, after_loop: bool = True) -> list:
    """(kind, numbers) of each collective in a loop body of the compiled step on the mesh
    ``mesh_label`` ("data,fsdp,tensor"), with each recurrence's weight gradients taken after
    its loop or summed inside it (``model.rnnsearch.weight_gradients_after_loop``)."""
    config = config_for(model_name)
    config.model.rnnsearch.weight_gradients_after_loop = after_loop
    state, schedule = create_state(config, VOCAB, VOCAB)
    mesh = sharding.build_mesh(*(int(size) for size in mesh_label.split(",")))
    rules = sharding.AxisRules.from_config(config.mesh.rules)
    state = jax.device_put(state, sharding.state_sharding(mesh, state, rules))
    step, place = mesh_step(config, state, schedule, mesh)
    return loop_collectives(step.lower(state, place(batches()[0])).compile().as_text())


def main() -> None:
    assert jax.device_count() == 8, "run with --xla_force_host_platform_device_count=8"
    names = sys.argv[1:] or ["transformer", "rnnsearch"]
    with tempfile.TemporaryDirectory() as directory:
        report = {name: run_model(name, Path(directory) / name) for name in names}
    if "rnnsearch" in report:
        report["rnnsearch"]["collectives_in_loops"] = {
            "8,1,1": collectives_in_loops("rnnsearch", "8,1,1"),
            "8,1,1:inloop": collectives_in_loops("rnnsearch", "8,1,1", after_loop=False),
            "2,4,1": collectives_in_loops("rnnsearch", "2,4,1"),
            "1,8,1": collectives_in_loops("rnnsearch", "1,8,1"),  # FSDP alone
            "2,2,2": collectives_in_loops("rnnsearch", "2,2,2"),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
