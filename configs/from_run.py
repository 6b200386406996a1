"""The config a run trained with, read back from its folder: train it on, or train it again.

    python train.py --config configs/from_run.py:runs/m30k/multi30k_transformer \\
        --workdir runs/m30k/multi30k_transformer --config.train.steps=20000   # on, further
    python train.py \\
        --config configs/from_run.py:docs/records/multi30k_ende/transformer-small-seed0 \\
        --workdir runs/again --config.seed=7 --config.data.dir=../shared/data/multi30k
    python -m seq2seq.compare --configs configs/from_run.py:runs/a \
        --configs configs/from_run.py:runs/b --workdir runs/ab_again --seeds 3

The part after the colon is a run's folder (or its ``config.json``): ``train.py`` saves every
value there, ``compare``'s overrides and tuned values included, so a run of a comparison or a
committed record trains again without its command line (``compare`` names it by its folder).
``--config.KEY=VALUE`` changes any value on top. A config saved by an older version reads into
today's schema (renamed keys follow; a key that is gone is refused, by name).
"""

from pathlib import Path

from seq2seq.config import ConfigError, load_saved


def get_config(run: str | None = None):
    if not run:
        raise ConfigError(
            "configs/from_run.py needs a run after a colon, e.g. "
            "--config configs/from_run.py:runs/quickstart/quickstart_transformer"
        )
    path = Path(run)
    return load_saved(path / "config.json" if path.is_dir() else path)
