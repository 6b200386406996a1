"""Trains the quickstart configs for a few steps with the real trainer; prints the losses as JSON.

Run by ``tests/test_same_run_on_any_mesh.py`` in subprocesses, once with one device and once with
``--xla_force_host_platform_device_count=8`` (a (2, 2, 2) mesh), with the same ``ROOT``:

    python -m tests.same_run_worker first ROOT   # one device: 10 steps; 5 steps in ROOT/*/resumed
    python -m tests.same_run_worker second ROOT  # (2, 2, 2): 10 steps; ROOT/*/resumed to step 10

Each quickstart keeps its own data and token batching (bucketed, and packed for the Transformer),
with buckets 16 tokens wide instead of its 8 (half the shapes to compile on each mesh, and still
several) and batches of 512 tokens instead of 1,024 (half the work a step). The models are
shrunk to a few thousand parameters, so each shape compiles fast.
It prints {setup: {"losses": [...], "tokens": [...], "flops": [...], "shapes": [...],
"resumed": [...], "split": N}}: every logged step's loss, real (source, target) tokens, training
FLOPs and batch shapes compiled so far, the losses of the resumed run, and how many of the
state's arrays the trainer reported split over the mesh.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import jax

from seq2seq.config import load_config_file, validate
from seq2seq.training.trainer import train
from tests.conftest import REPO, tiny_config

STEPS, RESUME_STEP = 10, 5
TOKENS_PER_BATCH = 512
SETUPS = {  # name: (model family, data.pack)
    "transformer, bucketed": ("transformer", False),
    "transformer, packed": ("transformer", True),
    "rnnsearch, bucketed": ("rnnsearch", False),
}
MESHES = {"first": (1, 1, 1), "second": (2, 2, 2)}


def config_for(model: str, pack: bool, mesh: tuple[int, int, int], steps: int):
    """The quickstart config of ``model`` with tiny layers, on ``mesh``, for ``steps`` steps."""
    config = load_config_file(REPO / f"configs/quickstart_{model}.py")
    config.model[model] = tiny_config(model).model[model]
    config.data.pack = pack
    config.data.bucket_width = 16
    config.data.tokens_per_batch = TOKENS_PER_BATCH
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh
    config.train.steps = steps
    config.train.log_every_steps = 1
    config.train.time_budget_minutes = 0.0
    config.eval.every_minutes = 0.0
    config.checkpoint.every_steps = RESUME_STEP
    return validate(config)


def logged(workdir: Path, key: str) -> list:
    """``key`` of every training record of the run in ``workdir``."""
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [record[key] for record in map(json.loads, lines) if record["kind"] == "train"]


class SplitArrays(logging.Handler):
    """Keeps the last "N arrays split over the mesh" that the trainer logged."""

    def __init__(self) -> None:
        super().__init__()
        self.count: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if found := re.search(r"(\d+) arrays split over the mesh", record.getMessage()):
            self.count = int(found.group(1))


def main() -> None:
    part, root = sys.argv[1], Path(sys.argv[2])
    mesh = MESHES[part]
    assert jax.device_count() == mesh[0] * mesh[1] * mesh[2], jax.devices()
    split = SplitArrays()
    trainer_log = logging.getLogger("seq2seq.training.trainer")
    trainer_log.setLevel(logging.INFO)
    trainer_log.addHandler(split)
    report = {}
    for name, (model, pack) in SETUPS.items():
        folder = root / name.replace(", ", "_")
        full = folder / f"{part}_full"
        split.count = None
        train(config_for(model, pack, mesh, STEPS), full)
        split_arrays = split.count
        resumed = folder / "resumed"
        train(config_for(model, pack, mesh, RESUME_STEP if part == "first" else STEPS), resumed)
        report[name] = {
            "losses": logged(full, "loss"),
            "tokens": [
                [source, target]
                for source, target in zip(
                    logged(full, "source_tokens"), logged(full, "target_tokens"), strict=True
                )
            ],
            "flops": logged(full, "train_flops"),
            "shapes": logged(full, "compiled_shapes"),
            "resumed": logged(resumed, "loss"),
            "split": split_arrays,
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
