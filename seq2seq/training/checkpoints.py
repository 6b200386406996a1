"""Checkpoints with orbax-checkpoint: the train state plus the data iterator's position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from seq2seq.training.step import TrainState

CHECKPOINT_DIR = "checkpoints"


def _saveable(state: TrainState) -> dict[str, Any]:
    """The array part of the state (graphdef and optimizer are rebuilt from the config)."""
    return {
        "step": state.step,
        "params": state.params,
        "opt_state": state.opt_state,
        "rng": state.rng,
    }


class Checkpoints:
    """Keeps the newest ``keep`` checkpoints; restores the latest (or a chosen step)."""

    def __init__(self, workdir: Path, *, keep: int):
        self.manager = ocp.CheckpointManager(
            (workdir / CHECKPOINT_DIR).absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: TrainState, data_state: dict) -> None:
        """Saves ``state`` (asynchronously) as checkpoint ``step`` unless it already exists."""
        if step in self.manager.all_steps():
            return
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_saveable(state)),
                data=ocp.args.JsonSave(data_state),
            ),
            force=True,
        )

    def restore(self, template: TrainState, step: int | None = None) -> tuple[TrainState, dict]:
        """The state at ``step`` (default: latest) with ``template``'s structure, and data state."""
        step = self.manager.latest_step() if step is None else step
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _saveable(template))
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            ),
        )
        values = restored["state"]
        state = template.replace(
            step=values["step"],
            params=values["params"],
            opt_state=values["opt_state"],
            rng=values["rng"],
        )
        return state, restored["data"]

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()
