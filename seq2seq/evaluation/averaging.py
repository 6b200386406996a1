"""Checkpoint averaging as a run of its own: ``python -m seq2seq.evaluation.average``.

Vaswani et al. 2017 (Section 6.1) evaluate "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals" (base) and the last 20 (big): the
element-wise mean of the parameters. ``eval.py --checkpoint average:K`` scores that mean without
writing it (``seq2seq.checkpoints.rule``); ``write_averaged_run`` writes it as a run that
``eval.py`` reads like any other.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import ml_collections

from seq2seq.checkpoints.rule import CheckpointError
from seq2seq.checkpoints.store import Checkpoints
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.evaluation.restore import choose_checkpoints, load_run_tokenizer, restore_params
from seq2seq.records.run_directory import RunDirectory
from seq2seq.records.whole import written_whole


def write_averaged_run(workdir: Path, count: int, output: Path) -> dict[str, object]:
    """Writes the mean of ``workdir``'s last ``count`` checkpoints as a run in ``output``.

    ``output`` gets the config, the tokenizer and one checkpoint holding the averaged
    parameters (numbered as the newest one averaged; its optimizer state, RNG and data position
    are the newest one's, so the copy could even be trained further), so
    ``eval.py --workdir OUTPUT`` reads it like any run; ``averaged_from.json`` records where it
    came from, and the source's ``provenance.json`` (the code and environment that trained
    those parameters) is copied along, so a comparison flags an averaged run as it would its
    source.
    """
    source_run = RunDirectory(workdir).require()
    if output.exists() and any(output.iterdir()):
        raise ValueError(f"{output} exists and is not empty; choose a new --output")
    config = source_run.load_config()
    tokenizer = load_run_tokenizer(source_run)
    source = Checkpoints(source_run.checkpoints_dir, keep=config.checkpoint.keep)
    try:
        rule = f"average:{count}"
        try:  # before the model is built
            choice = choose_checkpoints(rule, source.all_steps(), source_run, keep=source.keep)
        except CheckpointError as error:  # named as this command's flag
            message = str(error).replace(f"--checkpoint={rule}", f"--last {count}")
            raise CheckpointError(message.replace("lower K", "lower --last")) from None
        template, _ = _training_state(config, tokenizer)
        mean = restore_params(source, template.params, choice)
        state, record = source.restore(template, choice.steps[-1])
    finally:
        source.close()
    with written_whole(output) as folder:  # an interrupted average leaves no half run
        written = RunDirectory(folder)
        shutil.copy(source_run.config_file, written.config_file)
        shutil.copytree(source_run.tokenizer_dir, written.tokenizer_dir)
        if source_run.provenance_file.exists():
            shutil.copy(source_run.provenance_file, written.provenance_file)
        target = Checkpoints(written.checkpoints_dir, keep=1)
        try:
            target.save(choice.steps[-1], state.replace(params=mean), record["iterator"])
            target.wait()
        finally:
            target.close()
        averaged_from = {"workdir": str(workdir.absolute()), "steps": list(choice.steps)}
        written.averaged_from_file.write_text(json.dumps(averaged_from, indent=2) + "\n")
    return {**averaged_from, "output": str(output)}


def _training_state(config: ml_collections.ConfigDict, tokenizer: Tokenizer):
    """A full train state to restore into: an averaged run is a run that could train on."""
    from seq2seq.training.trainer import create_state  # only writing a run needs the optimizer

    return create_state(config, tokenizer.source_vocab_size, tokenizer.target_vocab_size)
