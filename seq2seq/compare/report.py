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

from seq2seq.checkpoints.rule import describe_checkpoint_rule
from seq2seq.compare import grid, report_sections
from seq2seq.compare import tuning as tuning_lib
from seq2seq.compare import verdict as verdict_lib
from seq2seq.compare.runner import RunOutcome
from seq2seq.compare.settings import Settings
from seq2seq.records import provenance
from seq2seq.records.whole import write_whole
from seq2seq.report import figures

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

# How the "ended" column says why a run stopped (its metrics.jsonl's last record): converged,
# or which budget ran out (records from before 2026-12-07 do not say which).
STOP_WORDS = {
    ("converged", None): "converged",
    ("cap", "steps"): "at its step cap",
    ("cap", "minutes"): report_sections.TIME_CAP,
    ("cap", None): "at its cap",
}


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
    row.update(_training_figures(records))
    if outcome.status != "ok":  # a stop record then tells of an earlier budget, not this one
        row.pop("ended", None)
    if outcome.result:
        row.update(_test_scores(outcome.result))
    if outcome.config is not None and outcome.run.tokenizer_dir.exists():
        row["params"] = _parameter_count(outcome)
    if outcome.config is not None:
        row["validation_points"] = sum(r.get("kind") == "validation" for r in records)
    made_by = provenance.summary(outcome.run.path) if outcome.run.path.exists() else None
    if made_by:
        commit = (made_by["commit"] or "no git")[:10] + ("+dirty" if made_by["dirty"] else "")
        row["provenance"] = made_by
        row["made_by"] = (
            f"{commit}, {made_by['device_kind']}, jax {made_by['jax']}, "
            f"computing in {made_by['compute_dtype'] or 'an unrecorded dtype'}"
        )
    return row


def _training_figures(records: list[dict]) -> dict:
    """Steps, minutes, FLOPs, tokens/s, how the run ended and its validation, from metrics.jsonl."""
    figures_: dict = {}
    train_records = [r for r in records if r.get("kind") == "train"]
    validation = [r for r in records if r.get("kind") == "validation"]
    stopped = bool(records) and records[-1].get("kind") == "stop"  # written once it ended
    if train_records or stopped:  # a run may stop early before its first logged interval
        last = records[-1]  # the run's last record, written after its final validation
        figures_.update(
            steps=max(r["step"] for r in records if "step" in r),
            train_minutes=last.get("elapsed_seconds", float("nan")) / 60,
            train_flops=last.get("train_flops"),
        )
    if train_records:  # the first interval includes compilation; later ones are steady
        steady = train_records[1:] or train_records
        figures_["target_tokens_per_second"] = statistics.mean(
            r["target_tokens_per_second"] for r in steady
        )
    if stopped:
        stop = records[-1]
        figures_["ended"] = STOP_WORDS.get((stop["reason"], stop.get("budget")), stop["reason"])
    if validation:
        figures_["best_validation_perplexity"] = min(r["perplexity"] for r in validation)
        figures_["last_validation_bleu"] = validation[-1].get("bleu")
    return figures_


def _test_scores(result: dict) -> dict:
    """The scores and decoding speed of the run's eval JSON."""
    return {
        "bleu": result["bleu"],
        "signature": result["signature"],
        "tok_bleu": result.get("tok_bleu"),
        "tok_bleu_method": result.get("tok_bleu_method"),
        "chrf": result.get("chrf"),
        "decode_sentences_per_second": result.get("sentences_per_second"),
        "test_sentences": result.get("n"),
        "split": result.get("split"),
        "checkpoint": result.get("checkpoint"),
    }


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
        row["status"] = _statuses(members)
        ended = [m.get("ended") or "—" for m in members]
        row["ended"] = ended[0] if len(set(ended)) == 1 else ", ".join(ended)  # seeds in order
        for field in NUMERIC_FIELDS:
            row[field] = [m.get(field) for m in members]
        row["signature"] = members[0].get("signature")
        merged.append(row)
    return merged


def _statuses(members: Sequence[dict]) -> str:
    """A config's seeds by status: ``ok``, or ``1 of 2 unfinished`` (a run a Ctrl-C or SIGTERM
    stopped, not yet trained to its end), ``1 of 3 failed, 1 preempted``..."""
    counts: dict[str, int] = {}
    for member in members:
        if member["status"] != "ok":
            counts[member["status"]] = counts.get(member["status"], 0) + 1
    if not counts:
        return "ok"
    return ", ".join(
        f"{n} of {len(members)} {status}" if i == 0 else f"{n} {status}"
        for i, (status, n) in enumerate(counts.items())
    )


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


def describe(description: str, overrides: Sequence[tuple[str, object]]) -> str:
    """A suite row's description with the comparison's ``--config`` overrides after it: they
    were applied last, so where both name a value (a learning rate, a dropout) the override is
    the one the run used."""
    if not description or not overrides:
        return description
    return f"{description}; --config: {', '.join(f'{k}={v}' for k, v in overrides)}"


def _rows(outcomes: Sequence[RunOutcome], settings: Settings) -> list[dict]:
    """Every run's row, with its config's name and its time off the training clock."""
    rows = []
    for outcome in outcomes:
        row = run_row(outcome)
        row["description"] = describe(outcome.spec.description, settings.overrides)
        row["config_name"] = outcome.spec.name
        row["off_the_clock"] = verdict_lib.run_costs(outcome, settings.slice_minutes)
        rows.append(row)
    return rows


def _settings(settings: Settings) -> dict:
    fields = ("budget_minutes", "budget_steps", "slice_minutes", "seeds", "beam_size", "alpha")
    return {
        "overrides": dict(settings.overrides),
        **{field: getattr(settings, field) for field in fields},
        "split": settings.split,
        "max_test_sentences": settings.max_test_sentences,
    }


def _configs(rows: Sequence[dict]) -> list[dict]:
    """One row per config (``aggregate``), with mean, std, max and n of each seeded field."""
    return [
        {
            **row,
            **{
                f"{field}_stats": summary_statistics(row[field])
                for field in NUMERIC_FIELDS
                if isinstance(row.get(field), list)
            },
        }
        for row in aggregate(rows)
    ]


def _review(
    outcomes: Sequence[RunOutcome],
    rows: Sequence[dict],
    settings: Settings,
    tuning: grid.Tuning | None,
    tuned: Sequence[tuning_lib.ModelTuning] | None,
) -> dict:
    """The paired tests, the machines, the equal horizons and the fairness checks."""
    return {
        "verdicts": verdict_lib.verdicts(outcomes, settings.checkpoint),
        "hardware": hardware(rows),
        "horizons": verdict_lib.horizons(outcomes),
        "splits": verdict_lib.splits_read(outcomes, tuned),
        "hyperparameters": verdict_lib.differing_hyperparameters(
            outcomes, tuning.keys if tuning is not None else []
        ),
        "tuning_minutes": {result.spec.name: result.train_minutes for result in tuned or ()},
    }


def build_report(
    root: Path,
    outcomes: Sequence[RunOutcome],
    settings: Settings,
    title: str,
    tuning: grid.Tuning | None = None,
    tuned: Sequence[tuning_lib.ModelTuning] | None = None,
    winners: Sequence[str] = (),
) -> dict:
    """Everything the report states, gathered once (report.json); draws the figures under
    ``root/figures``. With ``tuning`` and its results ``tuned``, their section and figure;
    ``winners`` are the final runs copied from their winning trial (``tuning.reuse_winners``)."""
    figure_dir = root / "figures"
    figure_dir.mkdir(parents=True, exist_ok=True)
    rows = _rows(outcomes, settings)
    figure_paths = _figures(root, figure_dir, outcomes)
    tuned_here = tuning is not None and bool(tuned)
    if tuned_here:
        figure_paths["tuning"] = [tuning_lib.plot(tuning, tuned, figure_dir / "tuning_bleu.png")]
    return {
        "title": title,
        "settings": _settings(settings),
        "checkpoint_rule": {
            "rule": settings.checkpoint,
            "meaning": describe_checkpoint_rule(settings.checkpoint),
        },
        **_review(outcomes, rows, settings, tuning, tuned),
        "tuning": tuning_lib.report_json(tuning, tuned) if tuned_here else None,
        "copied_from_winning_trial": list(winners),
        "runs": rows,
        "configs": _configs(rows),
        "figures": {
            key: [str(p.relative_to(root)) for p in paths] for key, paths in figure_paths.items()
        },
    }


def write_report(root: Path, report: dict) -> Path:
    """Writes ``report`` (``build_report``'s) as ``root/report.json``, then ``root/report.md``
    rendered from it; returns the .md."""
    write_whole(root / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    path = root / "report.md"
    write_whole(path, report_sections.render(report))
    return path


def hardware(rows: Sequence[dict]) -> list[str]:
    """The machines the runs trained on (processor, its generation and SIMD extensions where
    recorded, usable cores, JAX device kind)."""
    machines = set()
    for row in rows:
        made = row.get("provenance")
        if made:
            cores = made.get("cpu_cores")
            machines.add(
                f"{made.get('processor') or 'unknown processor'}"
                + (f" [{made['cpu']}]" if made.get("cpu") else "")
                + (f", {cores} cores" if cores else "")
                + f" (JAX device {made.get('device_kind')} x{made.get('device_count')})"
            )
    return sorted(machines)


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
