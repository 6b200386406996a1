"""Checkpoint averaging, and choosing which checkpoints to evaluate.

Vaswani et al. 2017 (Section 6.1) evaluate "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals" (base) and the last 20 (big): the
element-wise mean of the parameters. ``eval.py --checkpoint`` takes ``latest``, a step number,
or ``average:K``; ``python -m seq2seq.average`` writes the average as a run of its own.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from seq2seq import config as config_lib
from seq2seq.data.pipeline import TOKENIZER_DIR
from seq2seq.data.tokenizer import load_tokenizer
from seq2seq.training.checkpoints import CHECKPOINT_DIR, Checkpoints
from seq2seq.training.step import TrainState
from seq2seq.training.trainer import CONFIG_FILE, create_state

AVERAGE_RECORD = "averaged_from.json"

_SPEC_HELP = "use 'latest', a step number such as 1000, or 'average:K' for the last K checkpoints"


class CheckpointError(ValueError):
    """The checkpoints asked for are missing or do not fit the model; one line says which."""


@dataclasses.dataclass(frozen=True)
class CheckpointChoice:
    """``steps``: the checkpoints whose parameters are averaged (one step: no averaging)."""

    steps: tuple[int, ...]
    averaged_from: dict | None = None  # the record of a run written by ``seq2seq.average``

    def describe(self) -> str:
        if len(self.steps) > 1:
            return f"average of the last {len(self.steps)}: steps {', '.join(map(str, self.steps))}"
        if self.averaged_from:
            steps = ", ".join(map(str, self.averaged_from["steps"]))
            source = self.averaged_from["workdir"]
            return f"step {self.steps[0]}, the average of steps {steps} of {source}"
        return f"step {self.steps[0]}"


def choose_checkpoints(spec: str, available: Sequence[int], workdir: Path) -> CheckpointChoice:
    """Resolves ``latest`` | ``STEP`` | ``average:K`` against the steps saved in ``workdir``."""
    available = sorted(available)
    record = workdir / AVERAGE_RECORD
    averaged_from = json.loads(record.read_text()) if record.exists() else None
    if not available:
        raise CheckpointError(f"no checkpoint in {workdir / CHECKPOINT_DIR}; train first")
    spec = spec.strip()
    if spec == "latest":
        return CheckpointChoice((available[-1],), averaged_from)
    if spec.isdigit():
        if int(spec) not in available:
            raise CheckpointError(
                f"no checkpoint at step {spec} in {workdir}; saved steps: "
                f"{', '.join(map(str, available))}"
            )
        return CheckpointChoice((int(spec),), averaged_from)
    match = re.fullmatch(r"average:(\d+)", spec)
    if not match or int(match.group(1)) < 1:
        raise CheckpointError(f"--checkpoint={spec!r} is not understood; {_SPEC_HELP}")
    count = int(match.group(1))
    if count > len(available):
        raise CheckpointError(
            f"--checkpoint=average:{count} needs {count} checkpoints but {workdir} holds "
            f"{len(available)} (steps {', '.join(map(str, available))}); lower K or raise "
            "config.checkpoint.keep when training"
        )
    return CheckpointChoice(tuple(available[-count:]))


def restore_params(
    checkpoints: Checkpoints, template: TrainState, choice: CheckpointChoice
) -> tuple[TrainState, dict]:
    """The state of the newest chosen checkpoint, its parameters replaced by the chosen mean.

    Checkpoints are read one at a time and summed, so memory holds two copies of the
    parameters whatever K is. Each is restored into ``template``, so all share its structure,
    and one that does not fit it raises ``IncompatibleCheckpointError`` (one line naming the
    parameter). Returns the state and the newest checkpoint's data state.
    """
    total = None
    for step in choice.steps:
        state, data_state = checkpoints.restore(template, step)
        params = jax.tree.map(lambda x: np.asarray(x, np.float32), state.params)
        total = params if total is None else jax.tree.map(np.add, total, params)
    mean = jax.tree.map(lambda x: x / len(choice.steps), total)
    mean = jax.tree.map(lambda x, like: np.asarray(x, like.dtype), mean, state.params)
    return state.replace(params=mean), data_state


def write_averaged_run(workdir: Path, count: int, output: Path) -> dict[str, object]:
    """Writes the mean of ``workdir``'s last ``count`` checkpoints as a run in ``output``.

    ``output`` gets the config, the tokenizer and one checkpoint (numbered as the newest one
    averaged), so ``eval.py --workdir OUTPUT`` reads it like any run; ``averaged_from.json``
    records where it came from.
    """
    if not workdir.is_dir():
        raise FileNotFoundError(f"no work directory at {workdir}; pass the --workdir of a run")
    if output.exists() and any(output.iterdir()):
        raise ValueError(f"{output} exists and is not empty; choose a new --output")
    config = config_lib.load_saved(workdir / CONFIG_FILE)
    tokenizer = load_tokenizer(workdir / TOKENIZER_DIR)
    if tokenizer is None:
        raise FileNotFoundError(f"no tokenizer in {workdir / TOKENIZER_DIR}; train first")
    template, _ = create_state(config, tokenizer.source_vocab_size, tokenizer.target_vocab_size)
    source = Checkpoints(workdir, keep=config.checkpoint.keep)
    try:
        choice = choose_checkpoints(f"average:{count}", source.all_steps(), workdir)
        state, data_state = restore_params(source, template, choice)
    finally:
        source.close()
    output.mkdir(parents=True, exist_ok=True)
    shutil.copy(workdir / CONFIG_FILE, output / CONFIG_FILE)
    shutil.copytree(workdir / TOKENIZER_DIR, output / TOKENIZER_DIR)
    target = Checkpoints(output, keep=1)
    try:
        target.save(choice.steps[-1], state, data_state)
        target.wait()
    finally:
        target.close()
    record = {"workdir": str(workdir.absolute()), "steps": list(choice.steps)}
    (output / AVERAGE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return {**record, "output": str(output)}
