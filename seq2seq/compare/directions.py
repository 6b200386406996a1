"""One verdict across translation directions: does "level at convergence, the Transformer
cheaper" hold in each?

    python -m seq2seq.compare --directions docs/records/multi30k_frontier_tuned,\\
        docs/records/multi30k_ende,docs/records/multi30k_enfr --workdir runs/directions

Each folder holds one direction's run records (as ``--records`` reads them). In each, validation
chooses each family's size among its converged runs (``frontier.choose``); the two choices'
test scores are compared by the bootstrap over seeds and sentences together, in BLEU and chrF,
and every direction's tests form one family, Holm-adjusted together: a direction's difference
is significant only after accounting for all of them. Beside it, each direction's cost: the
FLOPs each family needs to reach the highest validation level both reach
(``seq2seq.compare.cost``), with the ratio's interval over seeds. Below the table, published
results for each direction's test set (``seq2seq.compare.published``), with their casing and
tokenization.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seq2seq.compare import cost, frontier
from seq2seq.compare.frontier import RunRecord
from seq2seq.compare.grid_ends import edges_paragraph, pooled_grid_edges
from seq2seq.compare.published import published_section
from seq2seq.evaluation import significance
from seq2seq.report.tables import counted, difference_cell, markdown_table

logger = logging.getLogger(__name__)


def direction_of(runs: Sequence[RunRecord]) -> str:
    """``"de->en"``: the one direction every run in ``runs`` trained.

    Raises:
      ValueError: the runs trained different directions (one line).
    """
    found = sorted({f"{r.config.data.src_lang}->{r.config.data.tgt_lang}" for r in runs})
    if len(found) != 1:
        raise ValueError(
            f"one folder holds the records of one direction; {runs[0].name}'s folder mixes "
            f"{', '.join(found)}: give each direction its own folder"
        )
    return found[0]


def _side(choice: frontier.Choice) -> dict:
    return {
        "size": choice.config_name,
        "seeds": len(choice.runs),
        "test_bleu": float(np.mean([r.test_bleu for r in choice.runs])),
        "test_chrf": float(np.mean([float(r.result["chrf"]) for r in choice.runs])),
        "flops": float(np.mean([r.flops for r in choice.runs])),
        "steps": float(np.mean([r.steps for r in choice.runs])),
    }


def directions_data(folders: Sequence[tuple[str, Sequence[RunRecord]]]) -> dict:
    """The table's rows, one per (direction, its runs), the tests Holm-adjusted over all rows.

    Raises:
      ValueError: a direction lacks a converged, scored run of two families (one line).
    """
    rows, tested = [], []
    tunings: dict[str, list[tuple[str, dict | None]]] = {}  # each family's choice, by direction
    for direction, runs in folders:
        families = sorted({r.family for r in runs})
        choices = [frontier.choose([r for r in runs if r.converged], f) for f in families]
        if len(families) != 2 or None in choices:
            ready = sorted({r.family for r in runs if r.converged and r.test_bleu is not None})
            raise ValueError(
                f"{direction}: needs converged, scored runs of two families (has runs of "
                f"{', '.join(families) or 'none'}; converged and scored: "
                f"{', '.join(ready) or 'none'}); train them to convergence and score them first"
            )
        a, b = choices
        logger.info("== %s: %s against %s", direction, a.config_name, b.config_name)
        for family, choice in zip(families, choices, strict=True):
            tuning = next((r.tuning for r in choice.runs if r.tuning), None)
            tunings.setdefault(family, []).append((direction, tuning))
        results = significance.compare_seeds(
            [r.hypotheses for r in a.runs],
            [r.hypotheses for r in b.runs],
            frontier.references_for(a.runs[0]),
            tests_in_family=2 * len(folders),
            target_lang=a.runs[0].config.data.tgt_lang,
        )
        tested.append(results)
        levels = [row for row in cost.cost_to_levels(runs, families) if row["axis"] == "flops"]
        rows.append(
            {
                "direction": direction,
                "families": families,
                "a": _side(a),
                "b": _side(b),
                "cost": levels[0] if levels else None,
            }
        )
    for row, entries in zip(rows, significance.adjusted_entries(tested), strict=True):
        row |= entries
        row["reading"] = reading(row)
    edges = [
        line
        for family, chosen in tunings.items()
        for line in pooled_grid_edges(family, chosen, f"{family}, in every direction ({{n}}),")
    ]
    return {"rows": rows, "tests": 2 * len(rows), "grid_edges": edges}


def _cost(row: dict) -> str:
    level = row["cost"]
    if level is None or "ratio" not in level:
        return "—"
    low, high = level["ratio_ci95"]
    return f"{level['ratio']:.2f} [{low:.2f}, {high:.2f}] to reach {level['level']:g}"


def reading(row: dict) -> dict:
    """What one row says of the claim "level at convergence, the second family cheaper".

    ``better``: for each metric (BLEU, chrF) whose difference is significant after Holm, the
    family ahead in it; ``level``: neither is; ``cheaper``: the family whose FLOPs to the
    common validation level are lower with an interval that excludes parity, or None where the
    interval includes 1 (or no common level exists); ``holds``: both parts of the claim, for the
    second family (the Transformer, families being sorted).
    """
    a, b = row["families"]
    better = {
        metric: a if row[metric]["difference"] > 0 else b
        for metric in ("BLEU", "chrF")
        if row[metric]["significant"]
    }
    level = row["cost"]
    cheaper = None
    if level is not None and "ratio" in level:
        low, high = level["ratio_ci95"]
        cheaper = b if low > 1 else a if high < 1 else None
    return {
        "better": better,
        "level": not better,
        "cheaper": cheaper,
        "holds": not better and cheaper == b,
    }


def _reading(said: dict) -> str:
    winners = sorted(set(said["better"].values()))
    quality = (
        "level"
        if said["level"]
        else "; ".join(
            f"{family} better ({', '.join(m for m, f in said['better'].items() if f == family)})"
            for family in winners
        )
    )
    cost = f"{said['cheaper']} cheaper" if said["cheaper"] else "FLOPs not separated"
    return f"{quality}; {cost}" + (" (holds)" if said["holds"] else "")


def _scores(side: dict) -> str:
    seeds = counted(side["seeds"], "seed")
    return f"{side['test_bleu']:.2f} / {side['test_chrf']:.2f} ({side['size']}, {seeds})"


def render(data: dict) -> str:
    """The markdown table, one row per direction, and how to read it."""
    a, b = data["rows"][0]["families"]
    table = [
        {
            "direction": row["direction"],
            "a": _scores(row["a"]),
            "b": _scores(row["b"]),
            "bleu": difference_cell(row["BLEU"]),
            "chrf": difference_cell(row["chrF"]),
            "cost": _cost(row),
            "reading": _reading(row["reading"]),
        }
        for row in data["rows"]
    ]
    columns = [
        ("direction", "direction", ""),
        ("a", f"{a}: test BLEU / chrF", ""),
        ("b", f"{b}: test BLEU / chrF", ""),
        ("bleu", f"BLEU, {a} - {b} [95% CI]", ""),
        ("chrf", f"chrF, {a} - {b} [95% CI]", ""),
        ("cost", f"FLOPs, {a} / {b} [95% CI]", ""),
        ("reading", "reading", ""),
    ]
    holding = [row["direction"] for row in data["rows"] if row["reading"]["holds"]]
    claim = (
        f'"Level at convergence, {b} cheaper" holds in {len(holding)} of '
        + counted(len(data["rows"]), "direction")
        + (f" ({', '.join(holding)})" if holding else "")
        + ": level means neither the BLEU nor the chrF difference is significant after Holm's "
        "correction, cheaper that the FLOPs ratio's interval excludes 1."
    )
    return "\n".join(
        [
            "# One verdict across directions",
            "",
            "Each family's size is chosen by validation among its converged runs; the scores "
            "are means over seeds on each direction's test set (sacreBLEU's defaults for the "
            "target language); the intervals come from a bootstrap over seeds and sentences "
            f"together, and the {data['tests']} tests (BLEU and chrF of every direction) are "
            "Holm-adjusted as one family. The last column is the ratio of the training FLOPs "
            "each family needs to first reach the highest validation BLEU both reach in every "
            "seed (a bootstrap over seeds).",
            "",
            markdown_table(table, columns).rstrip(),
            "",
            claim,
            "",
            *edges_paragraph(data.get("grid_edges", [])),
            *published_section([row["direction"] for row in data["rows"]]),
        ]
    )


def write_directions_report(
    folders: Sequence[tuple[str, Sequence[RunRecord]]], directory: Path
) -> Path:
    """``directions.md`` and ``directions.json`` in ``directory``; returns the markdown's path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = directions_data(folders)
    (directory / "directions.json").write_text(json.dumps(data, indent=1, default=float) + "\n")
    path = directory / "directions.md"
    path.write_text(render(data))
    return path
