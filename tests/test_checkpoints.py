"""Checkpoint retention: the newest ``keep`` plus the best by validation BLEU; a checkpoint an
interruption wrote off schedule is deleted once the resumed run saves a later one."""

import pytest

from seq2seq.checkpoints import Checkpoints
from seq2seq.evaluation.restore import checkpoint_choice
from seq2seq.run_directory import RunDirectory
from seq2seq.training.trainer import Preemption, create_state, train
from tests.conftest import tiny_config


def test_keeps_the_newest_and_the_best_by_bleu(tmp_path):
    state, _ = create_state(tiny_config("transformer"), 20, 20)
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=2)
    bleus = {10: 5.0, 20: 30.0, 30: 12.0, 40: 8.0, 50: 9.0}
    for step, bleu in bleus.items():
        progress = {"elapsed_seconds": step / 10}
        checkpoints.save(
            step, state, {"epoch": 0, "position": step}, metrics={"bleu": bleu}, progress=progress
        )
        checkpoints.wait()
    assert checkpoints.all_steps() == [20, 40, 50]  # best (20), then the newest two
    _, record = checkpoints.restore(state, 20)
    assert record == {"iterator": {"epoch": 0, "position": 20}, "progress": {"elapsed_seconds": 2}}
    checkpoints.close()


class _StopAt(Preemption):
    """Stops the run after one given step, as SIGTERM or a comparison's pause would."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def reached(self, step: int, elapsed_seconds: float = 0.0) -> bool:
        self.requested = self.requested or step == self.step
        return self.requested


@pytest.mark.slow
def test_an_interrupted_run_averages_the_checkpoints_of_an_uninterrupted_one(tmp_path):
    # Saved every 10 steps, the newest 3 kept. Stopped at step 27 (off schedule), the run writes
    # checkpoint 27, and retention drops step 10 for it. Resumed, it saves step 30 and deletes 27:
    # what remains, and what average:3 reads, is the uninterrupted run's 20, 30, 40.
    config = tiny_config("transformer")
    config.train.steps = 40
    config.checkpoint.keep = 3
    whole = tmp_path / "whole"
    train(config, whole)
    stopped = tmp_path / "stopped"
    assert train(config, stopped, preemption=_StopAt(27)).step == 27
    assert Checkpoints(RunDirectory(stopped).checkpoints_dir, keep=3).all_steps() == [10, 20, 27]
    train(config, stopped)

    for workdir in (whole, stopped):
        checkpoints = Checkpoints(RunDirectory(workdir).checkpoints_dir, keep=3)
        assert checkpoints.all_steps() == [20, 30, 40]
        checkpoints.close()
    choice = checkpoint_choice(RunDirectory(stopped), config, "average:3")
    assert choice.steps == (20, 30, 40)


@pytest.mark.slow
def test_a_second_interruption_replaces_the_first(tmp_path):
    config = tiny_config("transformer")
    config.train.steps = 40
    train(config, tmp_path, preemption=_StopAt(23))
    train(config, tmp_path, preemption=_StopAt(25))  # resumed at 23, stopped again before 30
    checkpoints = Checkpoints(RunDirectory(tmp_path).checkpoints_dir, keep=3)
    assert checkpoints.all_steps() == [10, 20, 25]
    checkpoints.close()
