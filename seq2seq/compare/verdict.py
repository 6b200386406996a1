"""What a reviewer asks of a comparison, computed from the runs' own files.

* ``verdicts``: for each pair of configs, is the difference real? A bootstrap over the seeds and
  the scored sentences together, Holm-adjusted over the report's tests
  (``evaluation.significance``).
* ``horizons``: validation BLEU at equal training minutes, steps and FLOPs, from the curves.
* ``splits_read``: which split each phase read, so the report states (not assumes) that the
  scored split was never read while training or tuning.
* ``differing_hyperparameters``: every config key whose value differs between the runs.
* ``run_costs``: the time each run spent off the training clock, and its speed per slice.
"""

from __future__ import annotations

import itertools
import logging
import statistics
from collections.abc import Sequence

from seq2seq import config as config_lib
from seq2seq.compare.grid import for_model
from seq2seq.compare.runner import RunOutcome
from seq2seq.evaluation import significance

logger = logging.getLogger(__name__)

# Up to this many configs every pair is tested; beyond it (a table3 suite), each against the first.
ALL_PAIRS_UP_TO = 4
# Keys that differ between runs by design or say nothing about training.
NOT_HYPERPARAMETERS = ("seed", "data.dir", "mesh.", "eval.", "decode.")
# ... but how many validation sentences score a run's curves, its ``best`` checkpoint and its
# tuning trials: runs validated on different numbers of sentences are compared on different
# evidence (a config from a run of 50 beside the configs' own 500), so the table shows it.
VALIDATION_KEYS = ("eval.num_examples",)


def _groups(outcomes: Sequence[RunOutcome]) -> dict[str, list[RunOutcome]]:
    """The scored runs of each config (its seeds), in the comparison's order."""
    groups: dict[str, list[RunOutcome]] = {}
    for outcome in outcomes:
        if outcome.status == "ok" and outcome.result is not None:
            groups.setdefault(outcome.spec.name, []).append(outcome)
    return groups


def _hypotheses(outcome: RunOutcome, rule: str) -> list[str]:
    path = outcome.run.hypotheses_file(outcome.result["split"], rule)
    return path.read_text(encoding="utf-8").splitlines()


def _references(outcome: RunOutcome) -> list[str]:
    from seq2seq.data.pipeline import load_pairs

    pairs = load_pairs(outcome.config, outcome.result["split"])
    return [target for _, target in pairs[: outcome.result.get("max_sentences")]]


def verdicts(
    outcomes: Sequence[RunOutcome],
    checkpoint_rule: str = "latest",
    bootstrap_samples: int = significance.BOOTSTRAP_SAMPLES,
    randomisation_trials: int = significance.RANDOMISATION_TRIALS,
) -> list[dict]:
    """One entry per compared pair of configs: the sentence for report.md and the numbers.

    ``checkpoint_rule`` is the rule the runs were scored under (their hypotheses are filed by it).

    Every pair is tested when there are at most ``ALL_PAIRS_UP_TO`` configs, else each config
    against the first (a base and its variations). Configs whose scored sentences differ (another
    split or count) are not paired. Every pair's BLEU and chrF tests form one family, whose
    p-values are Holm-adjusted together.
    """
    groups = _groups(outcomes)
    references = {name: _references(members[0]) for name, members in groups.items()}
    tested = _pairs_to_test(list(groups), references)
    compared = []
    for a, b in tested:
        logger.info("== significance: %s against %s", a, b)
        results = significance.compare_seeds(
            [_hypotheses(o, checkpoint_rule) for o in groups[a]],
            [_hypotheses(o, checkpoint_rule) for o in groups[b]],
            references[a],
            bootstrap_samples,
            randomisation_trials,
            tests_in_family=2 * len(tested),  # BLEU and chrF
            target_lang=groups[a][0].config.data.tgt_lang,
        )
        compared.append((a, b, results))
    return _entries(compared)


def _pairs_to_test(names: list[str], references: dict) -> list[tuple[str, str]]:
    """Every pair of ``names`` (at most ``ALL_PAIRS_UP_TO``), else each against the first; a
    pair that scored different sentences is left out, with a warning."""
    if len(names) <= ALL_PAIRS_UP_TO:
        pairs = list(itertools.combinations(names, 2))
    else:
        pairs = [(names[0], other) for other in names[1:]]
    tested = []
    for a, b in pairs:
        if references[a] != references[b]:
            logger.warning("%s and %s scored different sentences: not tested", a, b)
        else:
            tested.append((a, b))
    return tested


def _entries(compared: list[tuple[str, str, dict]]) -> list[dict]:
    """The report's entries: each pair's sentences and numbers, every p-value Holm-adjusted
    over all the pairs' tests together (one family)."""
    family = iter(
        significance.adjust_for_family(
            [result for _, _, results in compared for result in results.values()]
        )
    )
    entries = []
    for a, b, results in compared:
        results = {metric: next(family) for metric in results}
        entries.append(
            {
                "a": a,
                "b": b,
                "sentence": significance.verdict(a, b, results["BLEU"]),
                "chrf_sentence": significance.verdict(a, b, results["chrF"], unit="chrF"),
                **{metric: _numbers(result) for metric, result in results.items()},
            }
        )
    return entries


def family_sentence(entries: Sequence[dict]) -> str:
    """What report.md says of the verdicts' p-values, from ``verdicts``' entries."""
    tests = sum(1 for entry in entries for metric in ("BLEU", "chrF") if metric in entry)
    return (
        f"All p-values are two-sided. The {tests} tests above (each pair in BLEU and in chrF) "
        "are one family: a difference counts as significant when its Holm-adjusted p is under "
        f"{significance.LEVEL} and its 95% interval excludes 0. Welch's t and the seed pairs' "
        "paired tests are unadjusted context."
    )


def _numbers(result: significance.SeedComparison) -> dict:
    return {
        "difference": result.difference,  # a - b
        "ci95": list(result.ci95) if result.ci95 else None,
        "p_value": result.p_value,  # two-sided
        "p_value_holm": result.p_adjusted,  # over the report's family of tests
        "tests_in_family": result.family_size,
        "significant": result.significant,  # by the Holm-adjusted p
        "test": "paired bootstrap over sentences"
        if len(result.pairs) == 1
        else "bootstrap over seeds and sentences",
        "bootstrap_samples": result.bootstrap_samples,
        "welch_ci95": list(result.welch_ci95) if result.welch_ci95 else None,
        "welch_p_value": result.welch_p_value,  # two-sided
        "scores_a": result.scores_a,
        "scores_b": result.scores_b,
        "seed_pairs": [
            {
                "score_a": pair.score_a,
                "score_b": pair.score_b,
                "difference": pair.difference,
                "ci95": list(pair.ci95),
                "p_value": pair.p_value,  # two-sided, sacreBLEU's
                "p_value_randomisation": pair.p_value_randomisation,  # two-sided
                "significant": pair.significant,
                "sentences": pair.sentences,
                "bootstrap_samples": pair.bootstrap_samples,
                "randomisation_trials": pair.randomisation_trials,
            }
            for pair in result.pairs
        ],
    }


MINUTES_SLACK = 0.02  # of the horizon: a validation that many minutes late is still "at" it

AXES = {
    "elapsed_seconds": ("training minutes", 1 / 60),
    "step": ("steps", 1),
    "train_flops": ("training FLOPs", 1),
}


def horizons(outcomes: Sequence[RunOutcome]) -> list[dict]:
    """Validation BLEU of every run at the same training minutes, steps and FLOPs.

    For each axis, the horizon is the largest value that every run's validation curve reached;
    each run contributes its last validation point at or before it (the point's own value is
    kept beside it, since runs validated at different steps and FLOPs).
    """
    curves = {}
    for outcome in outcomes:
        records = [r for r in outcome.run.read_metrics() if r.get("kind") == "validation"]
        if records:
            curves[outcome.name] = records
    rows = []
    for axis, (label, scale) in AXES.items():
        ends = [max(r.get(axis, 0) for r in records) for records in curves.values()]
        if not ends:
            continue
        horizon = min(ends)
        # Validations due at the same training minute land up to a step apart (the step that
        # crosses the mark): on the minutes axis those count as the same point.
        reach = horizon * (1 + MINUTES_SLACK) if axis == "elapsed_seconds" else horizon
        row = {"axis": label, "horizon": horizon * scale, "runs": {}}
        for name, records in curves.items():
            before = [r for r in records if r.get(axis, 0) <= reach]
            if before:
                point = before[-1]
                row["runs"][name] = {"bleu": point.get("bleu"), "at": point.get(axis, 0) * scale}
        rows.append(row)
    return rows


def splits_read(outcomes: Sequence[RunOutcome], tuned: Sequence | None) -> dict:
    """The splits each phase read, from the runs' configs, records and results."""
    training, validation, scored = set(), set(), set()
    for outcome in outcomes:
        if outcome.config is None:
            continue
        if outcome.run.read_metrics():
            training.add(outcome.config.data.train_split)
        if any(r.get("kind") == "validation" for r in outcome.run.read_metrics()):
            validation.add(outcome.config.data.eval_split)
        if outcome.result:
            scored.add(outcome.result["split"])
    tuning = {result.split for result in tuned or ()} - {"?"}
    leaked = sorted(scored & (training | validation | tuning))
    return {
        "training": sorted(training),
        "validation": sorted(validation),
        "tuning": sorted(tuning),
        "scored": sorted(scored),
        "scored_split_read_before_scoring": leaked,
    }


def splits_sentence(splits: dict) -> str:
    """What the report says of the splits, from ``splits_read``."""
    names = {key: ", ".join(f"`{s}`" for s in splits[key]) or "none" for key in splits}
    read = (
        f"Training read {names['training']}; validation (curves, `best`) read "
        f"{names['validation']}; tuning read {names['tuning']}; the scores are on "
        f"{names['scored']}."
    )
    if splits["scored_split_read_before_scoring"]:
        return (
            f"{read} **Warning**: {names['scored_split_read_before_scoring']} was also read "
            "before scoring, so its scores are not test scores."
        )
    if not splits["scored"]:
        return read
    return f"{read} The scored split was never read while training, validating or tuning."


def differing_hyperparameters(outcomes: Sequence[RunOutcome], tuned_keys: Sequence[str]) -> dict:
    """``{run name: {key: value}}`` for every config key whose value differs between the runs
    (seeds, paths and decoding left out), and every tuned key, marked with a trailing ``*``
    (``model.FIELD`` as each model family's ``model.<family>.FIELD``)."""
    flat = {o.name: dict(config_lib.flatten(o.config)) for o in outcomes if o.config is not None}
    if len(flat) < 2:
        return {}
    tuned = {for_model(key, name) for key in tuned_keys for name in config_lib.MODEL_NAMES}
    keys = sorted({key for values in flat.values() for key in values})
    differing = []
    for key in keys:
        if key.startswith(NOT_HYPERPARAMETERS) and key not in VALIDATION_KEYS:
            continue
        values = [values.get(key) for values in flat.values()]
        if key in tuned or any(value != values[0] for value in values):
            differing.append(key)
    marked = {key: f"{key}*" if key in tuned else key for key in differing}
    return {
        name: {
            marked[key]: values.get(key)
            for key in differing
            if not _other_model(key, values.get("model.name"))
        }
        for name, values in flat.items()
    }


def _other_model(key: str, model_name: str | None) -> bool:
    return key.startswith("model.") and key.count(".") > 1 and key.split(".")[1] != model_name


def run_costs(outcome: RunOutcome, slice_minutes: float) -> dict:
    """Time off the training clock (compiling, checkpointing, validating) and tokens/s per slice
    of ``slice_minutes`` training minutes (a slow spell shows as a slow slice)."""
    records = outcome.run.read_metrics()
    trained = [r for r in records if r.get("kind") == "train"]
    if not trained:
        return {}
    last = records[-1]
    costs = {key: last.get(f"{key}_seconds") for key in ("compile", "checkpoint", "validation")}
    costs["validation_points"] = sum(r.get("kind") == "validation" for r in records)
    if slice_minutes > 0:
        per_slice: dict[int, list[float]] = {}
        for record in trained[1:] or trained:  # the first interval includes compilation
            index = int(record.get("elapsed_seconds", 0.0) // (slice_minutes * 60))
            per_slice.setdefault(index, []).append(record["target_tokens_per_second"])
        costs["tokens_per_second_per_slice"] = [
            statistics.mean(values) for _, values in sorted(per_slice.items())
        ]
    return costs
