"""The comparison's report: ``report.md`` with its table and figures, and ``report.json``.

Every number comes from a run's own records, never recomputed another way: BLEU, chrF,
tokenized BLEU and decoding speed from its eval JSON; steps, training time, FLOPs, tokens/s and
validation perplexity from its ``metrics.jsonl``. Runs of one config with several seeds are
aggregated as mean ± std (max), as Britz et al. (2017) report them.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path

from seq2seq import provenance
from seq2seq.compare import tuning as tuning_lib
from seq2seq.compare import verdict as verdict_lib
from seq2seq.compare.runner import RunOutcome, Settings, describe_checkpoint_rule
from seq2seq.report import figures, tables

logger = logging.getLogger(__name__)

# Up to this many test sentences get alignment heatmaps (the first ones of a readable length).
ALIGNMENT_SENTENCES = 2
ALIGNMENT_WORDS = (6, 16)

NUMERIC_FIELDS = (
    "bleu",
    "tok_bleu",
    "chrf",
    "params",
    "train_flops",
    "target_tokens_per_second",
    "train_minutes",
    "steps",
    "best_validation_perplexity",
    "decode_sentences_per_second",
)

# How the "ended" column says why a run stopped (its metrics.jsonl's last record).
STOP_WORDS = {"converged": "converged", "cap": "at its cap"}

COLUMNS = [
    ("name", "run", ""),
    ("status", "status", ""),
    ("ended", "ended", ""),
    ("bleu", "sacreBLEU", ".2f"),
    ("tok_bleu", "tok. BLEU", ".2f"),
    ("chrf", "chrF", ".2f"),
    ("params", "params", lambda v: _each(v, lambda x: f"{x / 1e6:.2f}M")),
    ("train_flops", "train FLOPs", lambda v: _each(v, lambda x: f"{x:.2e}")),
    ("target_tokens_per_second", "tgt tok/s", ".0f"),
    ("train_minutes", "train min", ".1f"),
    ("steps", "steps", ".0f"),
    ("best_validation_perplexity", "best val ppl", ".2f"),
    ("decode_sentences_per_second", "decode sent/s", ".1f"),
]


def _columns(rows: Sequence[dict]) -> list:
    """The table's columns; suites whose runs describe themselves (table3) get a "what" column."""
    if any(row.get("description") for row in rows):
        return [COLUMNS[0], ("description", "what", ""), *COLUMNS[1:]]
    return COLUMNS


def _each(value, formatter) -> str:
    if isinstance(value, list):
        present = [v for v in value if v is not None]
        return " / ".join(formatter(v) for v in present) if present else tables.MISSING
    return formatter(value)


def run_row(outcome: RunOutcome) -> dict:
    """One run's numbers, each from the record that produced it."""
    row: dict = {
        "name": outcome.name,
        "config": str(outcome.spec.config),
        "description": outcome.spec.description,
        "seed": outcome.seed,
        "status": outcome.status
        if outcome.status == "ok"
        else f"{outcome.status}: {outcome.reason}",
        "workdir": str(outcome.run.path),
    }
    records = outcome.run.read_metrics()
    train_records = [r for r in records if r.get("kind") == "train"]
    validation = [r for r in records if r.get("kind") == "validation"]
    if train_records:
        last = records[-1]  # the final validation (when there is one) comes after the last log
        # The first interval includes compilation; later ones show the steady state.
        steady = train_records[1:] or train_records
        row.update(
            steps=max(r["step"] for r in records),
            train_minutes=last.get("elapsed_seconds", float("nan")) / 60,
            train_flops=last.get("train_flops"),
            target_tokens_per_second=statistics.mean(r["target_tokens_per_second"] for r in steady),
        )
    if records and records[-1].get("kind") == "stop":  # written once the run has ended
        row["ended"] = STOP_WORDS.get(records[-1]["reason"], records[-1]["reason"])
    if validation:
        row["best_validation_perplexity"] = min(r["perplexity"] for r in validation)
        row["last_validation_bleu"] = validation[-1].get("bleu")
    result = outcome.result
    if result:
        row.update(
            bleu=result["bleu"],
            signature=result["signature"],
            tok_bleu=result.get("tok_bleu"),
            tok_bleu_method=result.get("tok_bleu_method"),
            chrf=result.get("chrf"),
            decode_sentences_per_second=result.get("sentences_per_second"),
            test_sentences=result.get("n"),
            split=result.get("split"),
            checkpoint=result.get("checkpoint"),
        )
    if outcome.config is not None and outcome.run.tokenizer_dir.exists():
        row["params"] = _parameter_count(outcome)
    made_by = provenance.summary(outcome.run.path) if outcome.run.path.exists() else None
    if outcome.config is not None:
        row["validation_points"] = len(validation)
    if made_by:
        row["provenance"] = made_by
        commit = (made_by["commit"] or "no git")[:10] + ("+dirty" if made_by["dirty"] else "")
        row["made_by"] = f"{commit}, {made_by['device_kind']}, jax {made_by['jax']}"
    return row


def provenance_warnings(rows: Sequence[dict]) -> list[str]:
    """Lines flagging runs made under different jax versions, devices or commits, or changed
    between their own starts: numbers from such runs may not be comparable."""
    made = [r for r in rows if r.get("provenance")]
    warnings = []
    for field, what in (("jax", "jax versions"), ("device_kind", "devices"), ("commit", "commits")):
        values = sorted({str(r["provenance"][field]) for r in made})
        if len(values) > 1:
            warnings.append(f"runs were produced under different {what}: {', '.join(values)}")
    for row in made:
        for change in row["provenance"]["changed_during_run"]:
            warnings.append(f"`{row['name']}` changed between its starts: {change}")
    return warnings


def _parameter_count(outcome: RunOutcome) -> int:
    from seq2seq.evaluation.restore import abstract_model, load_run_tokenizer
    from seq2seq.models import count_params

    _, params = abstract_model(outcome.config, load_run_tokenizer(outcome.run))
    return count_params(params)


def read_report(root: Path) -> dict:
    """``root/report.json``, each run's ``workdir`` a path that exists from the caller's folder.

    The report records absolute paths; a relative one is taken relative to the report itself.
    Reports written before paths were absolute hold them relative to wherever the comparison
    ran (``runs/quickstart/quickstart_rnnsearch`` for ``make quickstart``): a run is then found
    by its folder's name beside the report, where the comparison put it.
    """
    report = json.loads((root / "report.json").read_text())
    for run in report["runs"]:
        run["workdir"] = str(_resolve_recorded(Path(run["workdir"]), root))
    return report


def _resolve_recorded(recorded: Path, root: Path) -> Path:
    if recorded.is_absolute():
        return recorded
    beside = root / recorded.name  # a run's folder is WORKDIR/<name>
    return beside if not (root / recorded).exists() and beside.exists() else root / recorded


def aggregate(rows: Sequence[dict]) -> list[dict]:
    """One row per config: several seeds' numbers become lists (shown as mean ± std (max))."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["config_name"], []).append(row)
    merged = []
    for name, members in groups.items():
        if len(members) == 1:
            merged.append({**members[0], "name": name})
            continue
        row = {
            "name": name,
            "description": members[0].get("description"),
            "seeds": [m["seed"] for m in members],
        }
        failed = [m["status"] for m in members if m["status"] != "ok"]
        row["status"] = "ok" if not failed else f"{len(failed)} of {len(members)} failed"
        row["ended"] = ", ".join(m.get("ended") or "—" for m in members)
        for field in NUMERIC_FIELDS:
            row[field] = [m.get(field) for m in members]
        row["signature"] = members[0].get("signature")
        merged.append(row)
    return merged


def summary_statistics(values: Sequence[float | None]) -> dict | None:
    """mean, sample std (ddof 1), max and n of the present values, for report.json."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return None
    return {
        "mean": statistics.mean(present),
        "std": statistics.stdev(present) if len(present) > 1 else 0.0,
        "max": max(present),
        "n": len(present),
    }


def write_report(
    root: Path,
    outcomes: Sequence[RunOutcome],
    settings: Settings,
    title: str,
    tuning: tuning_lib.Tuning | None = None,
    tuned: Sequence[tuning_lib.ModelTuning] | None = None,
    winners: Sequence[str] = (),
) -> Path:
    """Writes ``report.md``, ``report.json`` and the figures under ``root``; returns the .md.

    With ``tuning`` and its results ``tuned``, both get a tuning section and its figure;
    ``winners`` are the final runs copied from their winning trial (``tuning.reuse_winners``).
    """
    figure_dir = root / "figures"
    figure_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for outcome in outcomes:
        row = run_row(outcome)
        row["config_name"] = outcome.spec.name
        rows.append(row)
    for row, outcome in zip(rows, outcomes, strict=True):
        row["off_the_clock"] = verdict_lib.run_costs(outcome, settings.slice_minutes)
    table_rows = aggregate(rows)
    figure_paths = _figures(root, figure_dir, outcomes)
    tuned_keys = tuning.keys if tuning is not None else []
    review = {
        "verdicts": verdict_lib.verdicts(outcomes, settings.checkpoint),
        "hardware": hardware(rows),
        "horizons": verdict_lib.horizons(outcomes),
        "splits": verdict_lib.splits_read(outcomes, tuned),
        "hyperparameters": verdict_lib.differing_hyperparameters(outcomes, tuned_keys),
        "tuning_minutes": {result.spec.name: result.train_minutes for result in tuned or ()},
    }
    if tuning is not None and tuned:
        figure_paths["tuning"] = [tuning_lib.plot(tuning, tuned, figure_dir / "tuning_bleu.png")]
    report_json = {
        "title": title,
        "settings": {
            "overrides": dict(settings.overrides),
            "budget_minutes": settings.budget_minutes,
            "budget_steps": settings.budget_steps,
            "slice_minutes": settings.slice_minutes,
            "seeds": settings.seeds,
            "beam_size": settings.beam_size,
            "alpha": settings.alpha,
            "split": settings.split,
            "max_test_sentences": settings.max_test_sentences,
        },
        "checkpoint_rule": {
            "rule": settings.checkpoint,
            "meaning": describe_checkpoint_rule(settings.checkpoint),
        },
        **review,
        "tuning": tuning_lib.report_json(tuning, tuned) if tuning is not None and tuned else None,
        "copied_from_winning_trial": list(winners),
        "runs": rows,
        "configs": [
            {
                **row,
                **{
                    f"{field}_stats": summary_statistics(row[field])
                    for field in NUMERIC_FIELDS
                    if isinstance(row.get(field), list)
                },
            }
            for row in table_rows
        ],
        "figures": {
            key: [str(p.relative_to(root)) for p in paths] for key, paths in figure_paths.items()
        },
    }
    (root / "report.json").write_text(json.dumps(report_json, indent=2, default=str) + "\n")
    path = root / "report.md"
    tuning_lines = []
    if tuning is not None and tuned:
        figure = str(figure_paths["tuning"][0].relative_to(root))
        tuning_lines = tuning_lib.report_lines(tuning, tuned, figure)
        if winners:
            tuning_lines += [
                "",
                f"The final runs {', '.join(f'`{name}`' for name in winners)} are their "
                "config's winning trial, whose last rung trained to the final budget: copied, "
                "not trained again. Chosen for its validation BLEU, such a run may score a "
                "little higher on the test set than a fresh seed would; every config's seed "
                "shares this.",
            ]
    review_lines = _review_lines(review, rows, settings)
    path.write_text(
        _markdown(title, table_rows, rows, settings, figure_paths, root, tuning_lines, review_lines)
    )
    return path


def hardware(rows: Sequence[dict]) -> list[str]:
    """The machines the runs trained on (processor, usable cores, JAX device kind)."""
    machines = set()
    for row in rows:
        made = row.get("provenance")
        if made:
            cores = made.get("cpu_cores")
            machines.add(
                f"{made.get('processor') or 'unknown processor'}"
                + (f", {cores} cores" if cores else "")
                + f" (JAX device {made.get('device_kind')} x{made.get('device_count')})"
            )
    return sorted(machines)


def _budget(settings: Settings) -> str:
    if settings.budget_steps:
        return f"{settings.budget_steps:,} training steps each (equal steps)"
    if settings.budget_minutes:
        return f"{settings.budget_minutes:g} training minutes each (equal time)"
    return "each config's own steps or minutes"


HORIZONS_HEADING = "## Equal horizons (validation curves)"


def _review_lines(review: dict, rows: Sequence[dict], settings: Settings) -> list[str]:
    """The verdict that opens report.md and the sections a reviewer reads next."""
    lines = ["## Verdict", ""]
    if review["verdicts"]:
        for entry in review["verdicts"]:
            lines += [f"- {entry['sentence']}", f"  In chrF: {entry['chrf_sentence']}"]
        lines += ["", verdict_lib.family_sentence(review["verdicts"])]
    else:
        lines.append("- Fewer than two configs were scored on the same sentences: no test.")
    machines = "; ".join(review["hardware"]) or "no provenance record"
    lines += [
        "",
        f"Budget: {_budget(settings)}, on {machines}. A verdict under equal minutes is a "
        "statement about that machine: the models' steps per minute differ from machine to "
        "machine, so the curves are compared at equal steps and FLOPs too (below).",
        "",
    ]
    if settings.slice_minutes:
        lines += [
            f"The runs trained side by side, taking turns of {settings.slice_minutes:g} "
            "training minutes, so a slow spell of the machine touched each of them.",
            "",
        ]
    lines += [HORIZONS_HEADING, ""]
    names = [row["name"] for row in rows]
    table = []
    for horizon in review["horizons"]:
        entry = {"axis": horizon["axis"], "horizon": f"{horizon['horizon']:.3g}"}
        for name in names:
            point = horizon["runs"].get(name)
            entry[name] = (
                f"{point['bleu']:.2f} (at {point['at']:.3g})"
                if point and point["bleu"] is not None
                else tables.MISSING
            )
        table.append(entry)
    if table:
        columns = [("axis", "at equal", ""), ("horizon", "horizon", "")]
        columns += [(name, name, "") for name in names]
        lines += [
            "Validation BLEU (greedy, the configs' validation sentences) of each run at the "
            "largest training time, step count and FLOP count that every run reached; each run's "
            "last validation point at or before it, with where that point lay.",
            "",
            tables.markdown_table(table, columns),
        ]
    lines += ["## Fairness checks", "", verdict_lib.splits_sentence(review["splits"]), ""]
    hyper = review["hyperparameters"]
    if hyper:
        keys = sorted({key for values in hyper.values() for key in values})
        table = [{"run": name, **values} for name, values in hyper.items()]
        lines += [
            "Hyperparameters that differ between the runs (`*`: chosen by tuning):",
            "",
            tables.markdown_table(table, [("run", "run", ""), *[(k, k, "") for k in keys]]),
        ]
    if review["tuning_minutes"]:
        spent = ", ".join(f"`{k}` {v:.1f}" for k, v in review["tuning_minutes"].items())
        lines += [f"Training minutes spent on tuning, per config: {spent}.", ""]
    costs = []
    for row in rows:
        cost = row.get("off_the_clock") or {}
        speeds = cost.get("tokens_per_second_per_slice") or []
        costs.append(
            {
                "run": row["name"],
                "compile": cost.get("compile"),
                "checkpoint": cost.get("checkpoint"),
                "validation": cost.get("validation"),
                "points": cost.get("validation_points"),
                "slices": f"{min(speeds):.0f}-{max(speeds):.0f} ({len(speeds)})"
                if speeds
                else tables.MISSING,
            }
        )
    lines += [
        "Seconds spent off the training clock (compiling batch shapes, writing checkpoints, "
        "validating), validation points (the candidates of `--checkpoint best`) and target "
        "tokens/s per slice (slowest-fastest, slices):",
        "",
        tables.markdown_table(
            costs,
            [
                ("run", "run", ""),
                ("compile", "compile s", ".0f"),
                ("checkpoint", "checkpoint s", ".0f"),
                ("validation", "validation s", ".0f"),
                ("points", "val points", "d"),
                ("slices", "tgt tok/s per slice", ""),
            ],
        ),
    ]
    return lines


def _figures(root: Path, figure_dir: Path, outcomes: Sequence[RunOutcome]) -> dict[str, list[Path]]:
    paths: dict[str, list[Path]] = {}
    curves = {o.name: o.run.read_metrics() for o in outcomes}
    for x, stem in (("elapsed_seconds", "curves_time"), ("train_flops", "curves_flops")):
        target = figure_dir / f"{stem}.png"
        figures.plot_training_curves(curves, target, x=x)
        paths.setdefault("curves", []).append(target)
    results = {o.name: o.result for o in outcomes if o.result}
    if results:
        target = figure_dir / "bleu_by_length.png"
        figures.plot_bleu_by_length(results, target)
        paths["bleu_by_length"] = [target]
    for outcome in outcomes:
        if outcome.status != "ok" or outcome.result is None:
            continue
        try:
            paths.setdefault("alignments", []).extend(_alignments(outcome, figure_dir))
        except Exception as error:  # a figure must not cost the report
            logger.warning("no alignment figure for %s: %s", outcome.name, error)
    return paths


def _alignments(outcome: RunOutcome, figure_dir: Path) -> list[Path]:
    from seq2seq.data.pipeline import load_pairs
    from seq2seq.evaluation.translator import Translator

    config = outcome.config
    pairs = load_pairs(config, outcome.result["split"])
    low, high = ALIGNMENT_WORDS
    sentences = [s for s, _ in pairs if low <= len(s.split()) <= high][:ALIGNMENT_SENTENCES]
    translator = Translator.restore(
        outcome.run.path, beam_size=outcome.result["beam_size"], alpha=outcome.result["alpha"]
    )
    return figures.alignment_figures(translator, sentences, figure_dir, outcome.name)


def _markdown(
    title: str,
    table_rows: Sequence[dict],
    rows: Sequence[dict],
    settings: Settings,
    figure_paths: dict[str, list[Path]],
    root: Path,
    tuning_lines: Sequence[str] = (),
    review_lines: Sequence[str] = (),
) -> str:
    def image(path: Path) -> str:
        return f"![{path.stem}]({path.relative_to(root)})"

    signatures = sorted({r["signature"] for r in rows if r.get("signature")})
    details = list(review_lines)
    split_at = details.index(HORIZONS_HEADING) if HORIZONS_HEADING in details else len(details)
    verdict, details = details[:split_at], details[split_at:]
    lines = [
        f"# {title}",
        "",
        *verdict,
        "## Scores",
        "",
        f"Decoding: beam {settings.beam_size}, alpha {settings.alpha}; split "
        f"{settings.split or 'each config test split'}"
        + (
            f" (first {settings.max_test_sentences} sentences)"
            if settings.max_test_sentences
            else ""
        )
        + f"; checkpoint: {describe_checkpoint_rule(settings.checkpoint)}"
        + f"; training: {_budget(settings)}; seeds per config: {settings.seeds}.",
        "",
        tables.markdown_table(table_rows, _columns(table_rows)),
        "sacreBLEU signature: " + ("; ".join(signatures) if signatures else "(no run was scored)"),
        "",
        "Columns: test sacreBLEU (detokenized), the papers' tokenized BLEU, chrF, parameters, "
        "analytic training FLOPs, mean target tokens/s after the first log interval, training "
        "time (validation, compiling and checkpointing left out, counted across resumes), "
        "optimizer steps, best validation perplexity, "
        "test-set decoding speed (compile included). With several seeds: mean ± std (max).",
        "",
    ]
    if settings.overrides:
        overrides = ", ".join(f"{k}={v!r}" for k, v in settings.overrides)
        lines += [f"Overrides applied to every run: {overrides}.", ""]
    if settings.checkpoint != "latest":
        scored = ", ".join(f"`{r['name']}` {r['checkpoint']}" for r in rows if r.get("checkpoint"))
        lines += [f"Checkpoints scored: {scored or 'none'}.", ""]
    lines += [*details, "", "## Provenance", ""]
    lines += [f"- `{r['name']}`: {r.get('made_by', 'no provenance record')}" for r in rows]
    lines += [f"- **warning**: {warning}" for warning in provenance_warnings(rows)]
    lines.append("")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["## Failed runs", ""]
        lines += [f"- `{r['name']}`: {r['status']}" for r in failed]
        lines.append("")
    lines += [*tuning_lines, "## Training curves", ""]
    lines += [image(p) for p in figure_paths.get("curves", [])]
    if "bleu_by_length" in figure_paths:
        lines += ["", "## BLEU by source length (Bahdanau et al. 2015, Figure 2)", ""]
        lines.append(image(figure_paths["bleu_by_length"][0]))
    if figure_paths.get("alignments"):
        lines += [
            "",
            "## Attention over the source (Bahdanau et al. 2015, Figure 3)",
            "",
            "Rows are the output tokens, columns the source tokens; white is weight 1. "
            "RNNsearch has one additive attention; the Transformer one cross-attention per "
            "layer and head, plus each layer's head average.",
            "",
        ]
        lines += [image(p) for p in figure_paths["alignments"]]
    return "\n".join(lines) + "\n"
