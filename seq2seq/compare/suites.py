"""Named sets of runs: ``--suite quickstart | multi30k | long_sentences | table3 | frontier |
frontier_tuned``.

A suite is a list of ``RunSpec``: a name (the run's folder), a config file and overrides of that
config. ``table3`` derives its rows from any base config, following the rows of Vaswani et al.
(2017) Table 3 scaled to the base's own sizes. ``frontier`` runs each model family at three
sizes (``FRONTIER_SIZES``), each to convergence or its cap, for the compute frontier;
``frontier_tuned`` the same sizes with the values their tuning chose (``FRONTIER_TUNED``), as the
committed tuned frontier trained them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence
from pathlib import Path

import ml_collections

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a comparison: ``config`` (a configs/*.py file) with ``overrides`` applied."""

    name: str
    config: Path
    overrides: tuple[tuple[str, object], ...] = ()
    description: str = ""


def _from_files(*stems: str) -> list[RunSpec]:
    return [RunSpec(stem, CONFIGS / f"{stem}.py") for stem in stems]


SUITES = {
    "quickstart": lambda: _from_files("quickstart_transformer", "quickstart_rnnsearch"),
    "multi30k": lambda: _from_files("multi30k_transformer", "multi30k_rnnsearch"),
    "long_sentences": lambda: _from_files(
        "long_sentences_rnnencdec",
        "long_sentences_rnnsearch",
        "long_sentences_rnnsearch_dot",
        "long_sentences_rnnsearch_general",
        "long_sentences_transformer",
    ),
}


# The frontier suite: each family at three sizes, a size being a named set of overrides of the
# family's Multi30k config (every size states its widths, so the suite does not move when the
# configs ship another size). Sizes span more than 8x in training FLOPs per step (tested). The
# Transformer's peak rate follows Eq. 3's d_model^-0.5 from the medium size's 4e-3, except at
# d_model 512, where that rule's 2.83e-3 diverged in the Table 3 replication (docs/results.md,
# row C): there the peak is lower and the warm-up longer. The first large run's 2e-3 stalled
# (validation flat from step 500, as its rate passed ~1.3e-3; docs/results.md), so its peak is
# the highest rate under which that run's validation still climbed.
RNNSEARCH_WIDTHS = (
    "embedding_size",
    "encoder_hidden_size",
    "decoder_hidden_size",
    "alignment_size",
    "maxout_size",
)


def _rnnsearch_width(width: int) -> dict[str, object]:
    """An RNNsearch size: every width (embedding, each GRU, alignment, maxout) the same."""
    return {f"model.rnnsearch.{key}": width for key in RNNSEARCH_WIDTHS}


FRONTIER_SIZES: dict[str, dict[str, dict[str, object]]] = {
    "transformer": {
        "small": {
            "model.transformer.d_model": 128,
            "model.transformer.d_ff": 512,
            "model.transformer.num_heads": 4,
            "model.transformer.d_k": 32,
            "model.transformer.d_v": 32,
            "model.transformer.encoder_layers": 2,
            "model.transformer.decoder_layers": 2,
            "train.learning_rate": 5.66e-3,
        },
        "medium": {
            "model.transformer.d_model": 256,
            "model.transformer.d_ff": 1024,
            "model.transformer.num_heads": 4,
            "model.transformer.d_k": 64,
            "model.transformer.d_v": 64,
            "model.transformer.encoder_layers": 3,
            "model.transformer.decoder_layers": 3,
            "train.learning_rate": 4e-3,
        },
        "large": {
            "model.transformer.d_model": 512,
            "model.transformer.d_ff": 2048,
            "model.transformer.num_heads": 8,
            "model.transformer.d_k": 64,
            "model.transformer.d_v": 64,
            "model.transformer.encoder_layers": 4,
            "model.transformer.decoder_layers": 4,
            "train.learning_rate": 1e-3,
            "train.warmup_steps": 800,
        },
    },
    "rnnsearch": {
        "small": _rnnsearch_width(128),
        "medium": _rnnsearch_width(256),
        "large": _rnnsearch_width(512),
    },
}
FRONTIER_CONFIGS = {"transformer": "multi30k_transformer", "rnnsearch": "multi30k_rnnsearch"}
# What every frontier run shares: validation and checkpoints by steps (so a run's points do
# not depend on the machine's speed), early stopping, and the papers' label smoothing for both
# families (the shipped configs' values were chosen for 8-minute budgets).
FRONTIER_COMMON: dict[str, dict[str, object]] = {
    family: {
        "eval.every_minutes": 0.0,
        "eval.every_steps": every,
        "checkpoint.every_minutes": 0.0,
        "checkpoint.every_steps": every,
        "checkpoint.keep": 6,
        "train.early_stopping_patience": 4,
        "train.label_smoothing": 0.1,
        "train.time_budget_minutes": 0.0,
        "train.steps": cap,
        # The frontier's runs had batches of 2,048 (Transformer) and 1,024 (RNNsearch) padded
        # tokens per side: about these numbers of real tokens, as tokens_per_batch counts now.
        "data.tokens_per_batch": tokens,
    }
    for family, every, cap, tokens in (
        ("transformer", 250, 40_000, 1_920),
        ("rnnsearch", 500, 60_000, 800),
    )
}


# What the tuning chose for a frontier size where it differs from the size's row above: the
# values that size's records in docs/records/multi30k_frontier_tuned trained (docs/results.md,
# "Which architecture is better?"; tests/test_frontier.py holds each record to its row). The
# other sizes' rows already hold theirs: the shipped configs' dropout and the rates of
# ``FRONTIER_SIZES``. ``--tune`` starts from the untuned rows, whose multiples its trials are.
FRONTIER_TUNED: dict[str, dict[str, object]] = {
    "transformer-medium": {"train.learning_rate": 2e-3, "model.transformer.dropout_rate": 0.3},
    "transformer-large": {"model.transformer.dropout_rate": 0.3},
    "rnnsearch-large": {"train.learning_rate": 3e-3},
}


def frontier_runs(tuned: dict[str, dict[str, object]] | None = None) -> list[RunSpec]:
    """Every family at every size of ``FRONTIER_SIZES``: runs named ``<family>-<size>``, with
    ``tuned``'s values for a run over its size's."""
    specs = []
    for family, sizes in FRONTIER_SIZES.items():
        for size, overrides in sizes.items():
            name = f"{family}-{size}"
            overrides = {**overrides, **(tuned or {}).get(name, {})}
            merged = {**FRONTIER_COMMON[family], **overrides}
            described = ", ".join(
                f"{key.rsplit('.', 1)[-1]} {value}" for key, value in overrides.items()
            )
            spec = RunSpec(
                name,
                CONFIGS / f"{FRONTIER_CONFIGS[family]}.py",
                tuple(merged.items()),
                f"{family} {size}: {described or 'the config as shipped'}",
            )
            specs.append(spec)
    return specs


SUITES["frontier"] = frontier_runs
SUITES["frontier_tuned"] = lambda: frontier_runs(FRONTIER_TUNED)
FRONTIER_SUITES = ("frontier", "frontier_tuned")  # those whose report adds the frontier


def suite_names() -> list[str]:
    return [*SUITES, "table3"]


def expand_suite(name: str, base: Path | None = None) -> list[RunSpec]:
    """The runs of suite ``name``; ``table3`` needs ``base``, a Transformer config."""
    if name == "table3":
        if base is None:
            raise ValueError("--suite table3 needs --base CONFIG (a Transformer config to vary)")
        from seq2seq.config import load_config_file

        return table3_runs(base, load_config_file(base))
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(suite_names())}")
    specs = SUITES[name]()
    missing = [spec.config for spec in specs if not spec.config.exists()]
    if missing:
        raise ValueError(f"suite {name!r} needs {missing[0]}, which is missing from configs/")
    return specs


def select_runs(specs: list[RunSpec], patterns: Sequence[str], keep_first: bool) -> list[RunSpec]:
    """The runs whose name, or its part after the base's name (``D_drop0.0``), matches one of
    ``patterns`` (shell-style, ``D_*``); with ``keep_first`` the first run (table3's base, which
    every other row is compared against) stays whatever the patterns say.

    Raises:
      ValueError: a pattern matches no run (the line lists the runs there are).
    """
    if not patterns:
        return specs

    def names(spec: RunSpec) -> tuple[str, str]:
        return spec.name, spec.name.split("-", 1)[-1]

    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for spec in specs for name in names(spec)):
            short = [names(spec)[1] for spec in specs]  # table3's rows without the base
            full = short if len(set(short)) == len(short) else [spec.name for spec in specs]
            choices = ", ".join(full)
            raise ValueError(f"--rows {pattern!r} matches no run; the runs are: {choices}")
    return [
        spec
        for index, spec in enumerate(specs)
        if (keep_first and index == 0)
        or any(fnmatch.fnmatchcase(name, p) for p in patterns for name in names(spec))
    ]


# A Table 3 row: its name, its description, and its overrides (keys without a dot are
# model.transformer's).
Row = tuple[str, str, dict[str, object]]


def table3_runs(base_path: Path, base: ml_collections.ConfigDict) -> list[RunSpec]:
    """The rows of Vaswani et al. Table 3, as overrides of ``base`` (a Transformer config).

    Sizes are scaled to the base: where the paper's base has d_model 512 and h 8, the rows here
    multiply or divide the base's own d_model, h, d_k, d_ff and N by the paper's factors.
    (A) heads with d_k = d_v = d_model / h; (B) a smaller d_k alone; (C) fewer and more layers,
    narrower and wider d_model and d_ff; (D) dropout and label smoothing off and raised;
    (E) learned positional embeddings instead of sinusoids.

    The paper's rate is ``d_model^-0.5`` times one schedule for every row (Eq. 3), so a row that
    changes d_model changes the rate with it; where the base states its peak rate directly
    instead, the d_model rows scale that peak the same way (``_rate_for_width``).
    """
    if base.model.name != "transformer":
        raise ValueError(f"--base {base_path} is a {base.model.name}; table3 varies a Transformer")
    rows: list[Row] = [
        ("base", "the base config itself", {}),
        *_rows_a_heads(base.model.transformer),
        _row_b_key_size(base.model.transformer),
        *_rows_c_sizes(base),
        *_rows_d_regularisation(base),
        ("E_learned", "(E) learned positional embedding", {"positions": "learned"}),
    ]

    def qualified(overrides: dict) -> tuple[tuple[str, object], ...]:
        return tuple(
            (key if "." in key else f"model.transformer.{key}", value)
            for key, value in overrides.items()
        )

    return [
        RunSpec(f"{base_path.stem}-{name}", base_path, qualified(overrides), description)
        for name, description, overrides in rows
    ]


def _rows_a_heads(t: ml_collections.ConfigDict) -> list[Row]:
    """(A): other head counts, d_k = d_v = d_model / h (the paper: 1, 4, 16, 32 around 8)."""
    rows = []
    for count in sorted({1, t.num_heads // 2, t.num_heads * 2, t.num_heads * 4} - {0, t.num_heads}):
        if t.d_model % count == 0:
            size = t.d_model // count
            overrides = {"num_heads": count, "d_k": size, "d_v": size}
            rows.append((f"A_h{count}", f"(A) h={count}, d_k=d_v={size}", overrides))
    return rows


def _row_b_key_size(t: ml_collections.ConfigDict) -> Row:
    """(B): half the attention key size d_k alone."""
    return ("B_dk_half", f"(B) d_k={t.d_k // 2}", {"d_k": max(t.d_k // 2, 1)})


def _rows_c_sizes(base: ml_collections.ConfigDict) -> list[Row]:
    """(C): fewer and more layers (the paper: N = 2, 4, 8 around 6), half and double d_model
    (with its peak rate where the base states one), half and double d_ff."""
    t = base.model.transformer
    rows: list[Row] = []
    for count in sorted({max(t.encoder_layers // 3, 1), t.encoder_layers * 2} - {t.encoder_layers}):
        layers = {"encoder_layers": count, "decoder_layers": count}
        rows.append((f"C_N{count}", f"(C) N={count}", layers))
    for name, width in (("C_dmodel_half", t.d_model // 2), ("C_dmodel_double", t.d_model * 2)):
        scale = width / t.d_model
        overrides = {"d_model": width, "d_k": int(t.d_k * scale), "d_v": int(t.d_v * scale)}
        description = f"(C) d_model={width}, d_k=d_v={overrides['d_k']}"
        rate = _rate_for_width(base.train, t.d_model, width)
        if rate is not None:
            overrides["train.learning_rate"] = rate
            description += f", peak rate {rate:.3g}"
        rows.append((name, description, overrides))
    for name, width in (("C_dff_half", t.d_ff // 2), ("C_dff_double", t.d_ff * 2)):
        rows.append((name, f"(C) d_ff={width}", {"d_ff": width}))
    return rows


def _rows_d_regularisation(base: ml_collections.ConfigDict) -> list[Row]:
    """(D): dropout and label smoothing off and raised to 0.2 (those the base does not use)."""
    rows: list[Row] = []
    for rate in (0.0, 0.2):
        if rate != base.model.transformer.dropout_rate:
            rows.append((f"D_drop{rate}", f"(D) P_drop={rate}", {"dropout_rate": rate}))
    for smoothing in (0.0, 0.2):
        if smoothing != base.train.label_smoothing:
            overrides = {"train.label_smoothing": smoothing}
            rows.append((f"D_ls{smoothing}", f"(D) eps_ls={smoothing}", overrides))
    return rows


def _rate_for_width(train: ml_collections.ConfigDict, d_model: int, width: int) -> float | None:
    """The peak learning rate for a row of width ``width``, where the base (``d_model``) states
    its peak directly: Eq. 3's ``d_model^-0.5``, relative to the base. None where the schedule
    already scales by d_model ("transformer") or the optimizer has no rate of its own (AdaDelta).
    """
    if train.schedule == "transformer" or train.optimizer != "adam":
        return None
    return train.learning_rate * (d_model / width) ** 0.5
