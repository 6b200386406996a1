"""Where arrays live: the device mesh, the rule table, and the one place that decides shardings.

A 3-D mesh with axes ``("data", "fsdp", "tensor")``. Models name the dimensions of their
parameters and activations (``seq2seq.logical_axes``); the rule table (``config.mesh.rules``)
maps each name onto mesh axes, and this module turns names into shardings. With the default
table the batch is split over ``data`` and ``fsdp`` (every device its own sentences); parameters
of at least ``fsdp_min_size`` elements are split along their width (``embed``, ``hidden``) over
``fsdp`` (ZeRO-3 / FSDP: gathered for use, stored in parts); attention heads, the feed-forward
inner dimension and the vocabulary are split over ``tensor`` (Megatron-style). ``jax.jit`` then
inserts the collectives. Models never mention devices.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from seq2seq.config import MESH_AXES, default_config
from seq2seq.data.batching import check_batch_multiple
from seq2seq.logical_axes import names_of, partition_spec


@dataclasses.dataclass(frozen=True)
class AxisRules:
    """The rule table: logical axis name -> mesh axes, and the size below which parameters are
    not split over ``fsdp`` (a split that small costs more in collectives than it saves)."""

    mesh_axes: Mapping[str, tuple[str, ...]]
    fsdp_min_size: int = 0

    def __hash__(self) -> int:  # by value, as equality is: equal tables share a traced step
        return hash((tuple(sorted(self.mesh_axes.items())), self.fsdp_min_size))

    @classmethod
    def from_config(cls, rules: ml_collections.ConfigDict) -> AxisRules:
        """From ``config.mesh.rules`` (comma-separated mesh axes per name)."""
        table = {
            name: tuple(axis.strip() for axis in value.split(",") if axis.strip())
            for name, value in rules.items()
            if name != "fsdp_min_size"
        }
        return cls(table, rules.fsdp_min_size)

    def pairs(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The table as Flax's ``logical_axis_rules`` context takes it."""
        return tuple(self.mesh_axes.items())


def default_rules() -> AxisRules:
    """The table of ``seq2seq.config.default_config()``."""
    return AxisRules.from_config(default_config().mesh.rules)


def build_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1, devices=None) -> Mesh:
    """A ("data", "fsdp", "tensor") mesh over ``devices`` (default: all of every process);
    ``data=-1`` takes what the others leave."""
    shape = mesh_shape(data, fsdp, tensor, jax.device_count() if devices is None else len(devices))
    # Auto axes: jit propagates shardings from the inputs and the models' constraints.
    auto = (jax.sharding.AxisType.Auto,) * 3
    # Tensor parallelism innermost: its collectives run every layer, so its devices should be
    # the closest ones (make_mesh orders devices so that the last axis is the best connected).
    return jax.make_mesh(shape, MESH_AXES, axis_types=auto, devices=devices)


def build_checked_mesh(config: ml_collections.ConfigDict) -> Mesh:
    """The config's mesh over the job's devices, where its sentences split over the mesh.

    Raises:
      ValueError: one line, where the devices cannot hold the mesh or the batch's sentences do
        not split over it.
    """
    mesh = build_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    check_batch_multiple(config, batch_multiple(config, mesh))
    return mesh


def batch_multiple(config: ml_collections.ConfigDict, mesh: Mesh) -> int:
    """A global batch's rows split over the data-parallel devices and accumulation steps."""
    rules = AxisRules.from_config(config.mesh.rules)
    return data_parallel_size(mesh, rules) * config.train.grad_accum_steps


def mesh_shape(data: int, fsdp: int, tensor: int, count: int) -> tuple[int, int, int]:
    """The mesh's (data, fsdp, tensor) sizes over ``count`` devices, ``data=-1`` resolved.

    Raises:
      ValueError: one line naming the sizes as configured, where ``count`` devices cannot
        hold them.
    """
    if data == -1 and count % (fsdp * tensor):
        raise ValueError(
            f"config.mesh.fsdp={fsdp} x mesh.tensor={tensor} does not divide the job's "
            f"device count, {count}; pick sizes whose product divides it"
        )
    if data == -1:
        data = count // (fsdp * tensor)
    if data * fsdp * tensor != count:
        raise ValueError(
            f"config.mesh.data={data} x mesh.fsdp={fsdp} x mesh.tensor={tensor} makes "
            f"{data * fsdp * tensor} devices, but the job has {count}; set mesh.data=-1 (all "
            "the devices fsdp and tensor leave) or sizes whose product is the device count"
        )
    return data, fsdp, tensor


def batch_axes(rules: AxisRules) -> tuple[str, ...]:
    """The mesh axes the table's ``batch`` rule splits sentences over."""
    if "batch" not in rules.mesh_axes:
        raise ValueError("logical axis 'batch' has no rule; add config.mesh.rules.batch")
    return rules.mesh_axes["batch"]


def batch_sharding(mesh: Mesh, rules: AxisRules) -> NamedSharding:
    """A batch's leading (sentence) axis split over the mesh axes of the ``batch`` rule."""
    axes = batch_axes(rules)
    return NamedSharding(mesh, PartitionSpec(axes or None))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def parameter_spec(
    mesh: Mesh, variable: nnx.Variable, rules: AxisRules, undivided: dict | None = None
) -> PartitionSpec:
    """Where a parameter (or its optimizer moment, which carries its names) lives;
    ``undivided``: as ``partition_spec`` records it (a small parameter's fsdp is no loss)."""
    names = names_of(variable)
    if names is None:
        return PartitionSpec()
    shape = variable.get_value().shape
    small = int(np.prod(shape, dtype=np.int64)) < rules.fsdp_min_size
    skip = frozenset({"fsdp"}) if small else frozenset()
    return partition_spec(names, shape, dict(mesh.shape), rules.mesh_axes, skip, undivided)


def undivided_dimensions(mesh: Mesh, state, rules: AxisRules) -> dict[str, tuple[int, tuple]]:
    """The parameters' named dimensions that a mesh axis of their rule does not divide, and so
    leaves whole: ``name: (size, axes left out)`` (``heads: (4, ("tensor",))`` with 4 heads on
    ``tensor=8``)."""
    found: dict[str, tuple[int, tuple]] = {}
    for leaf in jax.tree.leaves(state, is_leaf=lambda leaf: isinstance(leaf, nnx.Variable)):
        if isinstance(leaf, nnx.Variable):
            parameter_spec(mesh, leaf, rules, found)
    return found


def state_sharding(mesh: Mesh, state, rules: AxisRules):
    """Shardings for every array of a pytree (a train state): parameters and the optimizer's
    moments by their logical names, everything else (step, RNG, counters) replicated."""

    def sharding(leaf):
        if isinstance(leaf, nnx.Variable):
            return leaf.replace(NamedSharding(mesh, parameter_spec(mesh, leaf, rules)))
        return replicated(mesh)

    return jax.tree.map(sharding, state, is_leaf=lambda leaf: isinstance(leaf, nnx.Variable))


@contextlib.contextmanager
def on_mesh(mesh: Mesh, rules: AxisRules) -> Iterator[None]:
    """Inside a traced function: activations are laid out by the rules
    (``logical_axes.constrain``); outside this context they are left to the compiler."""
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nnx.logical_axis_rules(rules.pairs()):
        yield


def count_split(shardings) -> int:
    """How many arrays of a pytree of shardings are split rather than replicated."""
    return sum(not s.is_fully_replicated for s in jax.tree.leaves(shardings))


def data_parallel_size(mesh: Mesh, rules: AxisRules) -> int:
    """How many ways the batch is split; global batch sizes must be multiples of it."""
    return int(np.prod([mesh.shape[axis] for axis in batch_axes(rules)], dtype=np.int64))


def global_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    """This host's rows of the batch, assembled into global arrays split over the mesh."""
    return {
        key: jax.make_array_from_process_local_data(sharding, value) for key, value in batch.items()
    }
