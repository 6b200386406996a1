"""Logical axis names: what each dimension of a parameter or an activation means.

Models name the dimensions of every parameter and of the activations at layer boundaries; they
never name devices. One rule table (``config.mesh.rules``, read by ``seq2seq.training.sharding``)
maps each name onto mesh axes, the way t5x, MaxText and Flax's sharding guide do it: changing
the table changes the parallelism (data, FSDP, Megatron-style tensor) without touching a model.

Names (the shape letters of the package docstring in brackets):

* ``batch`` sentences [B] and ``length`` positions [T or S] (activations only);
* ``vocab`` vocabulary entries [V];
* ``embed`` the model width [D] (Transformer) or the word-embedding width m (RNNsearch), and
  ``activation_embed`` the same width on activations;
* ``heads`` attention heads [H], ``kv`` the width of one head's query, key or value [K, E];
* ``mlp`` the inner width d_ff of the feed-forward block;
* ``positions`` rows of a learned position table;
* ``hidden`` a recurrent state's width (n, n_dec, and 2n for annotations), ``gates`` the stacked
  gate and candidate pre-activations of a GRU (3n, 2n, n), ``alignment`` the hidden width n' of
  the alignment model, ``maxout`` the deep output's units (2l before the maxout, l after).

A parameter carries its names as Flax NNX sharding metadata (``out_sharding``), with eager
sharding off: a model builds on one device as before, and the trainer places it by the table.
Inside the compiled step ``constrain`` lays out an activation by its names, and ``gathered`` a
weight that a loop multiplies by at every step.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
from flax import nnx
from flax.core import spmd
from jax.sharding import PartitionSpec

Array = jax.Array
Names = tuple[str | None, ...]
Rules = Mapping[str, tuple[str, ...]]  # logical name -> mesh axes, in order


def metadata(*names: str | None) -> dict:
    """Variable metadata naming a parameter's dimensions, e.g. for ``kernel_metadata=``."""
    return {"out_sharding": tuple(names), "eager_sharding": False}


def param(value: Array, *names: str | None) -> nnx.Param:
    """A parameter whose dimensions are called ``names`` (one per dimension)."""
    if len(names) != value.ndim:
        raise ValueError(f"{len(names)} names {names} for a parameter of shape {value.shape}")
    return nnx.Param(value, **metadata(*names))


def names_of(variable: nnx.Variable) -> Names | None:
    """The logical names of a parameter's dimensions, or None if it has none."""
    return variable.get_metadata().get("out_sharding")


def partition_spec(
    names: Names,
    shape: tuple[int, ...],
    mesh_shape: Mapping[str, int],
    rules: Rules,
    skip: frozenset[str] = frozenset(),
    undivided: dict[str, tuple[int, tuple[str, ...]]] | None = None,
) -> PartitionSpec:
    """Where an array of ``shape`` whose dimensions are ``names`` lives on a mesh.

    Each dimension goes over the mesh axes its name maps to, except axes of size 1, axes in
    ``skip``, axes an earlier dimension took (an axis splits one dimension at most) and, from
    the last, axes whose product does not divide the dimension: those stay replicated, and
    ``undivided`` (where given) records them, ``name: (size, axes left out)``.

    Raises:
      ValueError: a name has no rule.
    """
    used: set[str] = set()
    spec = []
    for name, size in zip(names, shape, strict=True):
        if name is not None and name not in rules:
            raise ValueError(f"logical axis {name!r} has no rule; add config.mesh.rules.{name}")
        axes = [
            axis
            for axis in (rules[name] if name is not None else ())
            if mesh_shape.get(axis, 1) > 1 and axis not in used and axis not in skip
        ]
        left_out = []
        while axes and size % _product(mesh_shape, axes):
            left_out.insert(0, axes.pop())
        if left_out and undivided is not None:
            undivided.setdefault(name, (size, tuple(left_out)))
        used.update(axes)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    return PartitionSpec(*spec)


def _product(mesh_shape: Mapping[str, int], axes: list[str]) -> int:
    size = 1
    for axis in axes:
        size *= mesh_shape[axis]
    return size


def constrain(x: Array, *names: str | None) -> Array:
    """``x`` laid out on the current mesh as the current rules say (the identity outside a
    ``seq2seq.training.sharding.on_mesh`` context, e.g. in decoding on one device)."""
    return _laid_out(x, names)


def gathered(parameter: nnx.Variable, dtype=None) -> Array:
    """A parameter's value (in ``dtype``, if given) laid out for use: by its names as the
    rules say, but whole along ``fsdp``, where FSDP stores it in parts (tensor-parallel splits
    stay). The identity outside ``on_mesh``.

    A loop that multiplies by a weight at every step (a recurrence) takes it gathered, once,
    before the loop. Left to choose, XLA kept an FSDP weight in parts and moved the loop's
    activations between devices instead, at every step: the RNNsearch step on a (2, 4, 1) mesh
    all-gathered its [B, n] state and exchanged it all-to-all 16 times in its loop bodies.
    The weight's gradient comes back in parts after the loop, as every FSDP gradient does.
    """
    value = parameter[...] if dtype is None else parameter[...].astype(dtype)
    return _laid_out(value, names_of(parameter), skip=frozenset({"fsdp"}))


def _laid_out(x: Array, names: Names, skip: frozenset[str] = frozenset()) -> Array:
    rules = spmd.get_logical_axis_rules()
    mesh = jax.sharding.get_abstract_mesh()
    if not rules or mesh.empty:
        return x
    spec = partition_spec(names, x.shape, dict(mesh.shape), dict(rules), skip)
    return jax.lax.with_sharding_constraint(x, spec)


def lookup(embedding: nnx.Embed, tokens: Array) -> Array:
    """``embedding(tokens)``, with the table first laid out whole along its width.

    Under FSDP the table is stored split along ``embed``; gathered for use (as every FSDP weight
    is), its rows come out whole and the activations take the batch's layout. Looked up from the
    split table, they came out split along their width and had to be copied to every device
    before moving to the batch's layout (XLA: "involuntary full rematerialization"), and back
    again in the gradient.
    """
    table = constrain(embedding.embedding[...], "vocab", None)  # [V, D]
    return jnp.take(table, tokens, axis=0)
