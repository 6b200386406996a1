"""Checkpoints with orbax-checkpoint: the train state plus the data iterator's position.

Each checkpoint holds parameters, optimizer state, step and RNG key (``state``) and, as JSON
(``data``), the data iterator's position and the training time and FLOPs spent so far, so a
restored run continues exactly where it stopped and a time budget counts across interruptions.
Training saves and restores whole states; evaluation reads the parameters alone
(``restore_params``), never the optimizer state, and so never imports training.
Saving is asynchronous: training goes on while the arrays are written. Orbax writes into a
temporary folder and renames it when complete, so a crash mid-save leaves no half checkpoint;
a checkpoint damaged later is skipped, with a warning, in favour of the previous one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from orbax.checkpoint import checkpoint_managers as policies

if TYPE_CHECKING:  # only for annotations: evaluation imports this module, not training
    from seq2seq.training.step import TrainState

logger = logging.getLogger(__name__)

BEST_METRIC = "bleu"  # validation metric that picks the best checkpoint (higher is better)


class DamagedCheckpointError(RuntimeError):
    """A checkpoint's files cannot be read (a partial copy, a damaged file); the message names
    the step and the others there."""


class IncompatibleCheckpointError(ValueError):
    """A checkpoint's arrays do not fit the configured model."""


def _reason(error: Exception) -> str:
    """``Type: first line`` of an orbax error, without the page of JSON (its driver's spec)
    that tensorstore appends."""
    text = str(error).strip()
    first = text.splitlines()[0].split(" [tensorstore_spec=")[0] if text else ""
    return f"{type(error).__name__}: {first}"


def _is_late_read(unraisable) -> bool:
    """Whether an unraisable exception is a read that outlived a failed restore: orbax runs a
    restore's reads in an event loop that it closes at the first failure (a damaged file), and
    each read still in flight then reaches the closed loop from tensorstore's thread, which
    printed one traceback per array (90 for a small Transformer) after the one-line error."""
    error, frames = unraisable.exc_value, unraisable.exc_traceback
    while frames is not None and frames.tb_next is not None:
        frames = frames.tb_next
    return (
        isinstance(error, RuntimeError)
        and str(error) == "Event loop is closed"
        and frames is not None
        and frames.tb_frame.f_code.co_name == "_check_closed"
    )


def _quiet_late_reads() -> None:
    """Drops the late reads' exceptions (``_is_late_read``) and passes every other
    unraisable exception to the hook that was there; installed once."""
    previous = sys.unraisablehook
    if getattr(previous, "drops_late_reads", False):
        return

    def hook(unraisable) -> None:
        if not _is_late_read(unraisable):
            previous(unraisable)

    hook.drops_late_reads = True
    sys.unraisablehook = hook


def _saveable(state: TrainState) -> dict[str, Any]:
    """The array part of the state (graphdef, optimizer and learning rate are rebuilt from the
    config)."""
    return {
        "step": state.step,
        "params": state.params,
        "opt_state": state.opt_state,
        "rng": state.rng,
    }


def _path_name(path) -> str:
    """``decoder_layers/0/w_key/value`` for a key path, whether keys are dict keys,
    attributes or indices (saved metadata and live states spell them differently)."""
    parts = (getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in path)
    return "/".join(str(part) for part in parts)


def _progress_record(saved: dict) -> dict:
    """The saved JSON as ``{"iterator", "progress"}`` (older runs saved the position only)."""
    if "iterator" in saved:
        return saved
    return {"iterator": saved, "progress": {}}


def _without_value_level(tree: Any) -> Any:
    """``{"w": {"value": array}}`` -> ``{"w": array}``: the saved layout of nnx Variables."""
    if isinstance(tree, dict):
        if set(tree) == {"value"}:
            return tree["value"]
        return {key: _without_value_level(value) for key, value in tree.items()}
    return tree


INTERRUPTED = "interrupted"  # marks a checkpoint an interruption wrote off schedule


@dataclasses.dataclass
class _Retention(policies.PreservationPolicy):
    """Keeps the newest ``keep`` scheduled checkpoints, the best by validation BLEU, and the
    newest of all, which a run resumes from.

    A checkpoint written off schedule by an interruption (SIGTERM, a comparison's pause) exists
    to resume from: it neither takes a scheduled checkpoint's place among the newest ``keep``
    nor survives a later save, so ``average:K`` reads the same checkpoints in an interrupted
    run as in an uninterrupted one.
    """

    keep: int

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        del context  # orbax's extra properties; none matter here
        metrics = [info.metrics or {} for info in checkpoints]
        scheduled = [i for i, values in enumerate(metrics) if INTERRUPTED not in values]
        kept = set(scheduled[-self.keep :]) | {len(checkpoints) - 1}
        scored = [i for i, values in enumerate(metrics) if BEST_METRIC in values]
        if scored:  # the best, ties to the later step
            kept.add(max(scored, key=lambda i: (metrics[i][BEST_METRIC], checkpoints[i].step)))
        return [i in kept for i in range(len(checkpoints))]


class Checkpoints:
    """Keeps the newest ``keep`` checkpoints plus the best by validation BLEU (``_Retention``)."""

    def __init__(self, directory: Path, *, keep: int, training: bool = False):
        """``directory``: a run's ``RunDirectory.checkpoints_dir``. ``training``: opened by
        the run's one trainer (its lock held), which deletes the folders of saves a stopped
        start left unfinished (``*.orbax-checkpoint-tmp*``, from a second Ctrl-C during a save;
        orbax does it in the background, done before the first save): never read, they were
        kept for good. A reader (eval.py while the run trains) must not, as the trainer may be
        writing one."""
        _quiet_late_reads()
        self.keep = keep
        self.manager = ocp.CheckpointManager(
            directory.absolute(),
            options=ocp.CheckpointManagerOptions(
                create=True,
                cleanup_tmp_directories=training,
                preservation_policy=_Retention(keep),
                # Set only so that orbax writes each step's metrics and reads them back when a
                # run resumes; without it the marks and scores would be lost at a restart.
                best_fn=lambda metrics: metrics.get(BEST_METRIC, -math.inf),
            ),
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "data": ocp.JsonCheckpointHandler(),
            },
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(
        self,
        step: int,
        state: TrainState,
        data_state: dict,
        metrics: dict | None = None,
        progress: dict | None = None,
        interrupted: bool = False,
    ) -> None:
        """Saves ``state`` (asynchronously) as checkpoint ``step`` unless it already exists.

        ``data_state`` is the iterator's position; ``progress`` what the run has spent so far
        (``elapsed_seconds`` of training, ``train_flops``), carried across resumes;
        ``interrupted``: written off schedule, to resume from (see ``_Retention``).
        """
        if step in self.manager.all_steps():
            return
        best = {}
        if metrics is not None and BEST_METRIC in metrics:
            best[BEST_METRIC] = float(metrics[BEST_METRIC])
        if interrupted:
            best[INTERRUPTED] = 1.0
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_saveable(state)),
                data=ocp.args.JsonSave({"iterator": data_state, "progress": progress or {}}),
            ),
            metrics=best,  # possibly empty: orbax then writes an empty record
            force=True,
        )

    def restore(
        self, template: TrainState, step: int | None = None, shardings: TrainState | None = None
    ) -> tuple[TrainState, dict]:
        """The state at ``step`` (default: latest) with ``template``'s structure, and the JSON
        record ``{"iterator": data position, "progress": what was spent so far}``.

        ``shardings`` (a tree of shardings like ``template``) reads every array straight onto
        the mesh, each process its own shards: a multi-process run cannot move a restored
        single-device array onto devices of other processes.

        Raises:
          IncompatibleCheckpointError: its arrays do not have the template's shapes.
        """
        step = self.manager.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.manager.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _saveable(template))
        if shardings is not None:
            abstract = jax.tree.map(
                lambda leaf, sharding: jax.ShapeDtypeStruct(
                    leaf.shape, leaf.dtype, sharding=sharding
                ),
                abstract,
                _saveable(shardings),
            )
        self._check_shapes(step, abstract)
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            ),
        )
        values = restored["state"]
        # Not saved: the template's (the config's), copied, since a step donates its state.
        learning_rate = jax.device_put(
            np.asarray(template.learning_rate),
            None if shardings is None else shardings.learning_rate,
        )
        state = template.replace(
            step=values["step"],
            params=values["params"],
            opt_state=values["opt_state"],
            rng=values["rng"],
            learning_rate=learning_rate,
        )
        return state, _progress_record(restored["data"])

    def restore_params(self, abstract_params: Any, step: int) -> Any:
        """The parameters alone of checkpoint ``step`` (no optimizer state, step or RNG).

        Args:
          abstract_params: the model's parameter tree of ``jax.ShapeDtypeStruct`` (e.g. from
            ``nnx.eval_shape``), so nothing is allocated before the read.

        Raises:
          IncompatibleCheckpointError: the saved shapes do not fit ``abstract_params``.
        """
        try:
            self._check_shapes(step, {"params": abstract_params})
            # The saved tree as written (each parameter under its Variable's "value"), params
            # only: a partial restore leaves the optimizer state on disk.
            saved = self.manager.item_metadata(step)["state"]["params"]
            item = {"params": jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), saved)}
            restored = ocp.PyTreeCheckpointer().restore(
                Path(self.manager.directory) / str(step) / "state",
                args=ocp.args.PyTreeRestore(
                    item,
                    restore_args=jax.tree.map(
                        lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item
                    ),
                    partial_restore=True,
                ),
            )
        except IncompatibleCheckpointError:
            raise
        except Exception as error:  # orbax raises many types for a damaged or partial folder
            others = [other for other in self.all_steps() if other != step]
            raise DamagedCheckpointError(
                f"checkpoint {step} in {self.manager.directory} cannot be read "
                f"({_reason(error)}); pass --checkpoint with another of its "
                f"steps ({', '.join(map(str, others)) or 'none'}) or restore the folder"
            ) from None
        params = jax.tree.map(lambda leaf: leaf, abstract_params)  # a copy to fill in
        nnx.replace_by_pure_dict(params, _without_value_level(restored["params"]))
        return params

    def _check_shapes(self, step: int, abstract: dict) -> None:
        metadata = self.manager.item_metadata(step)["state"]
        saved = {
            _path_name(path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(metadata["params"])
        }
        for path, leaf in jax.tree_util.tree_leaves_with_path(abstract["params"]):
            name = _path_name(path)
            if saved.get(name) != tuple(leaf.shape):
                raise IncompatibleCheckpointError(
                    f"checkpoint {step} in {self.manager.directory} has {name} of shape "
                    f"{saved.get(name)}, the config builds {tuple(leaf.shape)}; use the run's "
                    "own config or a new --workdir"
                )

    def restore_latest_readable(
        self, template: TrainState, shardings: TrainState | None = None
    ) -> tuple[TrainState, dict] | None:
        """The newest checkpoint that restores (onto ``shardings``, see ``restore``); damaged
        ones are skipped with a warning.

        Returns None when there is no checkpoint at all.

        Raises:
          IncompatibleCheckpointError: a readable checkpoint does not fit the config.
          RuntimeError: checkpoints exist but none of them can be read.
        """
        steps = self.all_steps()
        for step in reversed(steps):
            try:
                return self.restore(template, step, shardings)
            except IncompatibleCheckpointError:
                raise
            except Exception as error:  # orbax raises many types for damaged files
                logger.warning(
                    "checkpoint %d is unreadable (%s); trying the previous one",
                    step,
                    _reason(error),
                )
        if steps:
            raise RuntimeError(
                f"none of the checkpoints {steps} in {self.manager.directory} can be read"
            )
        return None

    def wait(self) -> None:
        with _quiet_about_interrupts():
            self.manager.wait_until_finished()

    def close(self) -> None:
        with _quiet_about_interrupts():
            self.manager.close()


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """False for a record that carries a KeyboardInterrupt (or SIGTERM's ``cli.Terminated``)."""
    kind = record.exc_info[0] if record.exc_info else None
    return not (kind is not None and issubclass(kind, KeyboardInterrupt))


@contextlib.contextmanager
def _quiet_about_interrupts():
    """Orbax logs the traceback of a wait for a write that a second Ctrl-C cuts short ("Save
    Finalize thread failed", 15 lines); the command then says it in one line of its own."""
    orbax_log = logging.getLogger("absl")
    orbax_log.addFilter(_not_an_interrupt)
    try:
        yield
    finally:
        orbax_log.removeFilter(_not_an_interrupt)
