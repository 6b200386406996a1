"""Where sentence pairs come from: the embedded synthetic task, text files, or TFDS."""

from __future__ import annotations

import ml_collections

from seq2seq.data import synthetic

# The synthetic task's own split names, for the configs' generic ones.
_SYNTHETIC_SPLITS = {"train": "train", "validation": "validation", "test": "test"}


def load_pairs(
    data: ml_collections.ConfigDict, split: str, *, seed: int = 0
) -> list[tuple[str, str]]:
    """All (source, target) pairs of ``split`` from the source named by ``data.source``."""
    if data.source == "synthetic":
        if split not in _SYNTHETIC_SPLITS:
            raise ValueError(
                f"unknown split {split!r} for data.source='synthetic'; "
                f"use one of {', '.join(_SYNTHETIC_SPLITS)}"
            )
        return synthetic.load_split(_SYNTHETIC_SPLITS[split], seed=seed)
    raise NotImplementedError(f"data.source={data.source!r} is not implemented yet")
