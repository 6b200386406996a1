"""Where arrays live: the device mesh, and the one place that decides every sharding.

A 2-D mesh with axes ``("data", "fsdp")``. The batch is split over both axes (every device gets
its own sentences); parameters and optimizer state are replicated, except that with ``fsdp > 1``
large arrays are split along one dimension over the ``fsdp`` axis (ZeRO-3 / FSDP style) so a model
too big for one device still fits. ``jax.jit`` then inserts the collectives: ``pmap`` is not
needed. Models never mention devices.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXES = ("data", "fsdp")  # the batch is split over both mesh axes


def initialize_processes(
    coordinator_address: str = "", num_processes: int = 0, process_id: int = -1
) -> None:
    """Joins this process to a multi-process job (``jax.distributed.initialize``).

    Call before anything touches a device. Unset arguments ("", 0, -1) are detected from the
    cluster (SLURM, Cloud TPU, ...); set, they describe processes started by hand, e.g. two
    ``train.py`` on one machine.
    """
    # Devices of different processes on CPU reduce gradients over TCP with Gloo: the default
    # of the installed jax, named here so that a jax whose default is "none" still works.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address or None,
        num_processes=num_processes or None,
        process_id=process_id if process_id >= 0 else None,
    )


def build_mesh(data: int = -1, fsdp: int = 1) -> Mesh:
    """A ("data", "fsdp") mesh over all devices; ``data=-1`` takes what ``fsdp`` leaves."""
    devices = jax.device_count()
    if data == -1:
        data = devices // fsdp
    if data * fsdp != devices:
        raise ValueError(
            f"mesh data={data} x fsdp={fsdp} does not match the {devices} devices; "
            "set config.mesh.data=-1 or sizes whose product is the device count"
        )
    # Auto axes: jit propagates shardings from the inputs (the models name no devices).
    auto = (jax.sharding.AxisType.Auto,) * 2
    return jax.make_mesh((data, fsdp), ("data", "fsdp"), axis_types=auto)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over every device."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def array_sharding(mesh: Mesh, shape: tuple[int, ...], min_size: int) -> NamedSharding:
    """Replicated, or (fsdp > 1, ``min_size`` elements or more) split along its largest
    dimension that ``fsdp`` divides.

    The rule depends on the shape only, so a parameter and its Adam moments always agree.
    """
    fsdp = mesh.shape["fsdp"]
    if fsdp == 1 or int(np.prod(shape, dtype=np.int64)) < min_size:
        return replicated(mesh)
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
        if shape[dim] % fsdp == 0:
            spec = [None] * len(shape)
            spec[dim] = "fsdp"
            return NamedSharding(mesh, PartitionSpec(*spec))
    return replicated(mesh)


def state_sharding(mesh: Mesh, state, min_size: int):
    """Shardings for every array of a pytree (a train state), by ``array_sharding``."""
    return jax.tree.map(lambda leaf: array_sharding(mesh, leaf.shape, min_size), state)


def count_split(shardings) -> int:
    """How many arrays of a pytree of shardings are split rather than replicated."""
    return sum(not s.is_fully_replicated for s in jax.tree.leaves(shardings))


def data_parallel_size(mesh: Mesh) -> int:
    """How many ways the batch is split; global batch sizes must be multiples of it."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def global_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    """This host's rows of the batch, assembled into global arrays split over the mesh."""
    return {
        key: jax.make_array_from_process_local_data(sharding, value) for key, value in batch.items()
    }
