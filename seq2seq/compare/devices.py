"""The same configs trained on two devices: do they train alike?

    python -m seq2seq.compare --devices docs/records/multi30k_frontier_gpu,\\
        docs/records/multi30k_frontier_tuned --workdir runs/devices --checkpoint average:5

Each folder holds run records (as ``--records`` reads them), one device's each. Every config (a
run's name without its seed) scored in both folders is one row: its seeds' test scores from the
first folder against the second's, by the bootstrap over seeds and sentences together, in BLEU
and chrF, with every row's tests Holm-adjusted as one family. A row with no significant
difference trains alike within the noise of its seeds and sentences. Each row also lists what
differs between its two sides and could explain a difference: the device, the compute dtype,
the JAX version, and every config key other than the seed and where the data lie (packed rows,
step caps, dropout...). Beside the test scores are each side's steps, its converged runs and its
training minutes. The figure draws each config's validation curves against steps, one colour
per folder: runs that train alike have curves that overlap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from seq2seq import config as config_lib
from seq2seq.compare import frontier
from seq2seq.compare.frontier import RunRecord
from seq2seq.evaluation import significance
from seq2seq.report.tables import counted, difference_cell, markdown_table

logger = logging.getLogger(__name__)

FIGURE = "devices.png"
# Keys that never explain a difference between devices: they differ between two seeds of one
# config on one device too, say where a machine keeps its copy of the data, how far a run may go
# (a deadline or a cap that ended a run shows in its converged count instead; the cosine
# schedule, which decays over train.steps, keeps that key) or what it logs.
NOT_AN_EXPLANATION = frozenset(
    {"seed", "data.dir", "train.steps", "train.time_budget_minutes", "train.log_every_steps"}
)
COLOURS = ("tab:green", "tab:gray")
METRICS = ("BLEU", "chrF")


def _joined(values) -> str:
    """The distinct non-empty values, in order, joined by " + " ("?" where none was recorded)."""
    return " + ".join(dict.fromkeys(v for v in values if v)) or "?"


def _scored(runs: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """Each config's scored runs (those with test scores and translations), by config name."""
    groups = frontier.by_config(r for r in runs if r.result is not None and r.hypotheses)
    return {name: sorted(members, key=lambda r: r.seed) for name, members in groups.items()}


def pair_configs(
    first: tuple[str, Sequence[RunRecord]], second: tuple[str, Sequence[RunRecord]]
) -> list[tuple[str, list[RunRecord], list[RunRecord]]]:
    """Each config scored in both folders, with its runs in each, in the first folder's order.

    Raises:
      ValueError: no config is scored in both, or a config's two sides were scored on other
        sentences (one line each).
    """
    (label_a, runs_a), (label_b, runs_b) = first, second
    a, b = _scored(runs_a), _scored(runs_b)
    common = [name for name in a if name in b]
    if not common:
        raise ValueError(
            f"--devices: no config is scored in both folders ({label_a}: "
            f"{', '.join(a) or 'none'}; {label_b}: {', '.join(b) or 'none'}); give two folders "
            "of the same configs"
        )
    for name in common:
        scored = {
            (r.result["split"], len(r.hypotheses), r.config.data.src_lang, r.config.data.tgt_lang)
            for r in a[name] + b[name]
        }
        if len(scored) > 1:
            shown = "; ".join(f"{n} sentences of {s}, {x}->{y}" for s, n, x, y in sorted(scored))
            raise ValueError(
                f"--devices: {name}'s runs were scored on different sentences ({shown}); "
                "score every run on the same split (compare --checkpoint RULE --split SPLIT)"
            )
    return [(name, a[name], b[name]) for name in common]


def _side(label: str, runs: Sequence[RunRecord]) -> dict:
    return {
        "folder": label,
        "runs": [r.name for r in runs],
        "seeds": len(runs),
        "device": _joined(r.device for r in runs),
        "compute_dtype": _joined(r.compute_dtype for r in runs),
        "jax": _joined(r.jax_version for r in runs),
        "test_bleu": float(np.mean([r.test_bleu for r in runs])),
        "test_bleu_by_seed": [r.test_bleu for r in runs],
        "test_chrf": float(np.mean([float(r.result["chrf"]) for r in runs])),
        "steps": float(np.mean([r.steps for r in runs])),
        "converged": sum(r.converged for r in runs),
        "training_minutes": float(np.mean([r.minutes for r in runs])),
        "best_validation_bleu": float(
            np.mean([r.best.bleu if r.best else float("nan") for r in runs])
        ),
    }


def what_differs(runs_a: Sequence[RunRecord], runs_b: Sequence[RunRecord]) -> list[str]:
    """``"NAME: first / second"`` for what the two sides ran differently that could change what
    they learn or score: device, compute dtype, JAX, config keys (``NOT_AN_EXPLANATION`` aside)
    and the beam that scored them. A side whose runs disagree shows their values joined by
    " + "."""
    facts = {
        "device": lambda r: r.device,
        "compute dtype": lambda r: r.compute_dtype,
        "jax": lambda r: r.jax_version,
        "beam size": lambda r: str(r.result.get("beam_size", "")),
        "length penalty alpha": lambda r: str(r.result.get("alpha", "")),
    }
    differs = []
    for name, fact in facts.items():
        a, b = _joined(map(fact, runs_a)), _joined(map(fact, runs_b))
        if a != b:
            differs.append(f"{name}: {a} / {b}")
    flat_a = [dict(config_lib.flatten(r.config)) for r in runs_a]
    flat_b = [dict(config_lib.flatten(r.config)) for r in runs_b]
    cosine = any(r.config.train.schedule == "warmup_cosine" for r in [*runs_a, *runs_b])
    skip = NOT_AN_EXPLANATION - ({"train.steps"} if cosine else set())
    keys = dict.fromkeys(k for flat in flat_a + flat_b for k in flat if k not in skip)
    for key in keys:
        a = _joined(repr(flat.get(key)) for flat in flat_a)
        b = _joined(repr(flat.get(key)) for flat in flat_b)
        if a != b:
            differs.append(f"config.{key}: {a} / {b}")
    return differs


def devices_data(
    first: tuple[str, Sequence[RunRecord]], second: tuple[str, Sequence[RunRecord]]
) -> dict:
    """One row per config scored in both folders, its tests Holm-adjusted over every row.

    Raises:
      ValueError: as ``pair_configs``.
    """
    pairs = pair_configs(first, second)
    rows, tested = [], []
    for name, runs_a, runs_b in pairs:
        logger.info("== %s: %s against %s", name, first[0], second[0])
        tested.append(
            significance.compare_seeds(
                [r.hypotheses for r in runs_a],
                [r.hypotheses for r in runs_b],
                frontier.references_for(runs_a[0]),
                tests_in_family=len(METRICS) * len(pairs),
                target_lang=runs_a[0].config.data.tgt_lang,
            )
        )
        rows.append(
            {
                "config": name,
                "family": runs_a[0].family,
                "a": _side(first[0], runs_a),
                "b": _side(second[0], runs_b),
                "differs": what_differs(runs_a, runs_b),
            }
        )
    for row, entries in zip(rows, significance.adjusted_entries(tested), strict=True):
        row |= entries
        row["reading"] = reading(row)
    sides = [
        {
            "folder": label,
            "device": _joined(row[key]["device"] for row in rows),
            "compute_dtype": _joined(row[key]["compute_dtype"] for row in rows),
            "jax": _joined(row[key]["jax"] for row in rows),
        }
        for label, key in ((first[0], "a"), (second[0], "b"))
    ]
    return {
        "folders": [first[0], second[0]],
        "sides": sides,
        "rows": rows,
        "tests": len(METRICS) * len(rows),
    }


def reading(row: dict) -> dict:
    """``alike``: neither BLEU nor chrF differs significantly after Holm; ``higher``: for each
    metric that does, the folder whose runs score higher in it."""
    higher = {
        metric: row["a"]["folder"] if row[metric]["difference"] > 0 else row["b"]["folder"]
        for metric in METRICS
        if row[metric]["significant"]
    }
    return {"alike": not higher, "higher": higher}


def _scores(side: dict) -> str:
    return (
        f"{side['test_bleu']:.2f} / {side['test_chrf']:.2f} "
        f"({counted(side['seeds'], 'seed')}, {side['compute_dtype']})"
    )


def _training(side: dict) -> str:
    return (
        f"{side['steps']:,.0f} steps, {side['converged']} of {side['seeds']} converged, "
        f"{side['training_minutes']:.1f} min"
    )


def _reading(row: dict) -> str:
    said = row["reading"]
    if said["alike"]:
        return "alike within noise"
    folders = dict.fromkeys(said["higher"].values())
    return "; ".join(
        f"{folder} higher ({', '.join(m for m, f in said['higher'].items() if f == folder)})"
        for folder in folders
    )


def render(data: dict) -> str:
    """The markdown: which folder is which device, one table row per config, what differs."""
    a, b = data["folders"]
    table = [
        {
            "config": row["config"],
            "a": _scores(row["a"]),
            "b": _scores(row["b"]),
            "bleu": difference_cell(row["BLEU"]),
            "chrf": difference_cell(row["chrF"]),
            "a_training": _training(row["a"]),
            "b_training": _training(row["b"]),
            "reading": _reading(row),
        }
        for row in data["rows"]
    ]
    columns = [
        ("config", "config", ""),
        ("a", f"{a}: test BLEU / chrF", ""),
        ("b", f"{b}: test BLEU / chrF", ""),
        ("bleu", f"BLEU, {a} - {b} [95% CI]", ""),
        ("chrf", f"chrF, {a} - {b} [95% CI]", ""),
        ("a_training", f"{a}: training", ""),
        ("b_training", f"{b}: training", ""),
        ("reading", "reading", ""),
    ]
    alike = [row["config"] for row in data["rows"] if row["reading"]["alike"]]
    lines = [
        "# The same configs on two devices",
        "",
        *(
            f"- **{side['folder']}**: {side['device']} ({side['compute_dtype']} products, "
            f"jax {side['jax']})"
            for side in data["sides"]
        ),
        "",
        "Each config's test scores are means over its seeds (sacreBLEU's defaults for the target "
        "language). The intervals come from a bootstrap over seeds and sentences together, and "
        f"the {data['tests']} tests (BLEU and chrF of every config) are Holm-adjusted as one "
        "family. The training columns are means over seeds, with the training minutes measured "
        "on each side's own device.",
        "",
        markdown_table(table, columns).rstrip(),
        "",
        f"{len(alike)} of {counted(len(data['rows']), 'config')} train alike on both sides "
        "within noise (neither BLEU nor chrF differs significantly after Holm's correction)"
        + (f": {', '.join(alike)}." if alike else "."),
        "",
        f"What differs between {a} and {b} (besides the seed and where the data lie), which may "
        "explain a difference:",
        "",
        *(
            f"- {row['config']}: " + ("; ".join(row["differs"]) or "nothing recorded")
            for row in data["rows"]
        ),
        "",
        f"![Validation BLEU against steps, {a} and {b}]({FIGURE})",
        "",
    ]
    return "\n".join(lines)


def plot_devices(
    pairs: Sequence[tuple[str, Sequence[RunRecord], Sequence[RunRecord]]],
    folders: Sequence[str],
    path: Path,
) -> Figure:
    """One panel per config: each run's validation BLEU against steps, one colour per folder."""
    figure = Figure(figsize=(5 * len(pairs), 4), layout="constrained")
    panels = np.atleast_1d(figure.subplots(1, len(pairs), squeeze=False)[0])
    for ax, (name, *sides) in zip(panels, pairs, strict=True):
        for colour, folder, runs in zip(COLOURS, folders, sides, strict=True):
            for index, run in enumerate(runs):
                ax.plot(
                    [p.step for p in run.curve],
                    [p.bleu for p in run.curve],
                    color=colour,
                    lw=1.2,
                    alpha=0.8,
                    label=folder if index == 0 else None,
                )
        ax.set_title(name)
        ax.set_xlabel("steps")
        ax.set_ylabel("validation BLEU")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=150)
    return figure


def write_devices_report(
    first: tuple[str, Sequence[RunRecord]], second: tuple[str, Sequence[RunRecord]], directory: Path
) -> Path:
    """``devices.md``, ``devices.json`` and the figure in ``directory``; returns the markdown's
    path."""
    directory = Path(directory)
    data = devices_data(first, second)
    directory.mkdir(parents=True, exist_ok=True)
    plot_devices(pair_configs(first, second), data["folders"], directory / FIGURE)
    (directory / "devices.json").write_text(json.dumps(data, indent=1, default=float) + "\n")
    path = directory / "devices.md"
    path.write_text(render(data))
    return path
