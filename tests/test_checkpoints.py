"""Checkpoint retention: the newest ``keep`` plus the best by validation BLEU."""

from seq2seq.checkpoints import Checkpoints
from seq2seq.training.trainer import create_state
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
