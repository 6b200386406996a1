"""report.md, section by section, rendered from the data ``report.build_report`` gathered once
(the same dict that is written as report.json): nothing here reads a run or recomputes a figure.

The sections, in the order a reviewer reads them: the verdict, the scores, the curves compared
at equal horizons, the fairness checks, provenance, failed runs, tuning, and the figures.
"""

from __future__ import annotations

from pathlib import Path

from seq2seq.compare import verdict as verdict_lib
from seq2seq.compare.grid_ends import as_typed, edges_paragraph, grid_edges
from seq2seq.report import tables

HORIZONS_HEADING = "## Equal horizons (validation curves)"
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
    ("best_validation_perplexity", "best val ppl", tables.lowest_is_best(".2f")),
    ("decode_sentences_per_second", "decode sent/s", ".1f"),
]


def render(report: dict) -> str:
    """The whole of report.md."""
    lines = [f"# {report['title']}", ""]
    for section in (verdict, scores, horizons, fairness, provenance, failed_runs, tuning, figures):
        lines += section(report)
    return "\n".join(lines) + "\n"


def _each(value, formatter) -> str:
    if isinstance(value, list):
        present = [v for v in value if v is not None]
        return " / ".join(formatter(v) for v in present) if present else tables.MISSING
    return formatter(value)


def _columns(rows: list[dict]) -> list:
    """The table's columns; suites whose runs describe themselves (table3) get a "what" column."""
    if any(row.get("description") for row in rows):
        return [COLUMNS[0], ("description", "what", ""), *COLUMNS[1:]]
    return COLUMNS


def budget(settings: dict) -> str:
    """The training budget every run had, in words."""
    if settings["budget_steps"]:
        return f"{settings['budget_steps']:,} training steps each (equal steps)"
    if settings["budget_minutes"]:
        return f"{settings['budget_minutes']:g} training minutes each (equal time)"
    return "each config's own steps or minutes"


# The "ended" column's words for a run that its time budget stopped (``report.STOP_WORDS``).
TIME_CAP = "at its time cap"


def verdict(report: dict) -> list[str]:
    """The paired tests' sentences, the family's sentence, and the budget they hold for."""
    settings = report["settings"]
    lines = ["## Verdict", ""]
    if report["verdicts"]:
        for entry in report["verdicts"]:
            lines += [f"- {entry['sentence']}", f"  {entry['chrf_sentence']}"]
        lines += ["", verdict_lib.family_sentence(report["verdicts"])]
    else:
        lines.append("- Fewer than two configs were scored on the same sentences: no test.")
    machines = "; ".join(report["hardware"]) or "no provenance record"
    lines += [
        "",
        f"Budget: {budget(settings)}, on {machines}. A verdict under equal minutes is a "
        "statement about that machine: the models' steps per minute differ from machine to "
        "machine, so the curves are compared at equal steps and FLOPs too (below).",
        "",
    ]
    if settings["slice_minutes"]:
        lines += [_turns(report["runs"], settings["slice_minutes"]), ""]
    capped = [row for row in report["runs"] if row.get("ended") == TIME_CAP]
    if capped and not settings["budget_minutes"]:  # each config's own budget, in steps
        shown = ", ".join(f"`{row['name']}` at step {row['steps']:,}" for row in capped)
        lines += [
            f"Stopped by the clock before their configs' steps: {shown} reached the time cap "
            "(`train.time_budget_minutes`) first, so this verdict is about that many minutes on "
            "this machine; a faster machine trains them further, and their scores change with "
            "it.",
            "",
        ]
    return lines


def _turns(runs: list[dict], minutes: float) -> str:
    """Whether the runs took turns (``--slice_minutes``) or each fit in its first turn."""
    turns = [
        len((row.get("off_the_clock") or {}).get("tokens_per_second_per_slice") or [])
        for row in runs
    ]
    if max(turns, default=0) > 1:
        return (
            f"The runs trained side by side, taking turns of {minutes:g} training minutes, so "
            "a slow spell of the machine touched each of them."
        )
    return (
        f"Each run fit in one turn of {minutes:g} training minutes, so they trained one after "
        "another: a slow spell of the machine may have touched one run only (the "
        "tokens/s per slice below show each run's pace)."
    )


def _decoding(report: dict) -> str:
    settings = report["settings"]
    first = settings["max_test_sentences"]
    split = settings["split"] or "each config's test split"
    return (
        f"Decoding: beam {settings['beam_size']}, alpha {settings['alpha']}; split: {split}"
        + (f" (first {first} sentences)" if first else "")
        + f"; checkpoint: {report['checkpoint_rule']['meaning']}"
        + f"; training: {budget(settings)}; seeds per config: {settings['seeds']}."
    )


def scores(report: dict) -> list[str]:
    """Every config's test scores and costs (mean ± std (max) over seeds), and what was scored."""
    runs, configs = report["runs"], report["configs"]
    signatures = sorted({r["signature"] for r in runs if r.get("signature")})
    lines = [
        "## Scores",
        "",
        _decoding(report),
        "",
        tables.markdown_table(configs, _columns(configs)),
        "sacreBLEU signature: " + ("; ".join(signatures) if signatures else "(no run was scored)"),
        "",
        "Columns: test sacreBLEU (detokenized), the papers' tokenized BLEU, chrF, parameters, "
        "analytic training FLOPs, mean target tokens/s after the first log interval, training "
        "time (validation, compiling and checkpointing left out, counted across resumes), "
        "optimizer steps, best validation perplexity, "
        "test-set decoding speed (compile included). With several seeds: mean ± std (max).",
        "",
    ]
    overrides = report["settings"]["overrides"]
    if overrides:
        applied = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        lines += [f"Overrides applied to every run: {applied}.", ""]
    if report["checkpoint_rule"]["rule"] != "latest":
        scored = ", ".join(f"`{r['name']}` {r['checkpoint']}" for r in runs if r.get("checkpoint"))
        lines += [f"Checkpoints scored: {scored or 'none'}.", ""]
    return lines


def horizons(report: dict) -> list[str]:
    """Validation BLEU of every run at the largest time, step and FLOP count all reached."""
    names = [row["name"] for row in report["runs"]]
    table = []
    for horizon in report["horizons"]:
        entry = {"axis": horizon["axis"], "horizon": f"{horizon['horizon']:.3g}"}
        for name in names:
            point = horizon["runs"].get(name)
            entry[name] = (
                f"{point['bleu']:.2f} (at {point['at']:.3g})"
                if point and point["bleu"] is not None
                else tables.MISSING
            )
        table.append(entry)
    if not table:
        return [HORIZONS_HEADING, ""]
    columns = [("axis", "at equal", ""), ("horizon", "horizon", "")]
    columns += [(name, name, "") for name in names]
    return [
        HORIZONS_HEADING,
        "",
        "Validation BLEU (greedy, the configs' validation sentences) of each run at the "
        "largest training time, step count and FLOP count that every run reached; each run's "
        "last validation point at or before it (in minutes, up to 2% past it: validations "
        "due at one minute land a step apart), with where that point lay.",
        "",
        tables.markdown_table(table, columns),
    ]


def fairness(report: dict) -> list[str]:
    """Splits read, hyperparameters that differ, tuning minutes, and time off the clock."""
    lines = ["## Fairness checks", "", verdict_lib.splits_sentence(report["splits"]), ""]
    if report["hyperparameters"]:
        lines += [
            "Hyperparameters that differ between the runs, and every one chosen by tuning "
            "(`*`, shown even where all runs chose alike; —: not a key of that run's model):",
            "",
            hyperparameter_table(report["hyperparameters"]),
        ]
    if report["tuning_minutes"]:
        spent = ", ".join(f"`{k}` {v:.1f}" for k, v in report["tuning_minutes"].items())
        winners = report.get("copied_from_winning_trial")
        counted = (
            " They include each winning trial, which the copied final runs continue, so those"
            " minutes are counted in the final runs' too."
            if winners
            else ""
        )
        lines += [f"Training minutes spent on tuning, per config: {spent}.{counted}", ""]
    return lines + _off_the_clock(report["runs"])


def hyperparameter_table(hyper: dict[str, dict[str, object]]) -> str:
    """``{run: {key: value}}`` as a table the narrower way: a row per key and a column per run
    when there are more keys than runs (two families differ in every model key: 23 columns for
    the quickstart's two runs), else a row per run."""
    keys = sorted({key for values in hyper.values() for key in values})
    if len(keys) > len(hyper):
        key_column = "\0key"  # a row's own field, which no run's name can be
        table = []
        for key in keys:
            row = {name: values.get(key, tables.MISSING) for name, values in hyper.items()}
            table.append({**row, key_column: key})
        columns = [(key_column, "key", ""), *[(name, name, "") for name in hyper]]
        return tables.markdown_table(table, columns)
    table = [{"run": name, **values} for name, values in hyper.items()]
    return tables.markdown_table(table, [("run", "run", ""), *[(k, k, "") for k in keys]])


def _off_the_clock(runs: list[dict]) -> list[str]:
    costs = []
    for row in runs:
        cost = row.get("off_the_clock") or {}
        speeds = cost.get("tokens_per_second_per_slice") or []
        slices = f"{min(speeds):.0f}-{max(speeds):.0f} ({len(speeds)})" if speeds else None
        costs.append(
            {
                "run": row["name"],
                "compile": cost.get("compile"),
                "checkpoint": cost.get("checkpoint"),
                "validation": cost.get("validation"),
                "points": cost.get("validation_points"),
                "slices": slices or tables.MISSING,
            }
        )
    columns = [
        ("run", "run", ""),
        ("compile", "compile s", ".0f"),
        ("checkpoint", "checkpoint s", ".0f"),
        ("validation", "validation s", ".0f"),
        ("points", "val points", "d"),
        ("slices", "tgt tok/s per slice", ""),
    ]
    return [
        "Seconds spent off the training clock (compiling batch shapes, writing checkpoints, "
        "validating), validation points (the candidates of `--checkpoint best`) and target "
        "tokens/s per slice (slowest-fastest, slices):",
        "",
        tables.markdown_table(costs, columns),
    ]


def provenance_warnings(runs: list[dict]) -> list[str]:
    """Lines flagging runs made under different jax versions, devices, compute dtypes or
    commits (among the runs that recorded one), or changed between their own starts: numbers
    from such runs may not be comparable."""
    made = [r for r in runs if r.get("provenance")]
    warnings = []
    fields = (
        ("jax", "jax versions"),
        ("device_kind", "devices"),
        ("compute_dtype", "compute dtypes"),
        ("commit", "commits"),
    )
    for field, what in fields:
        values = sorted({str(r["provenance"][field]) for r in made if r["provenance"].get(field)})
        if len(values) > 1:
            warnings.append(f"runs were produced under different {what}: {', '.join(values)}")
    for row in made:
        for change in row["provenance"]["changed_during_run"]:
            warnings.append(f"`{row['name']}` changed between its starts: {change}")
    return warnings


def provenance(report: dict) -> list[str]:
    """What made each run (commit, device, jax, compute dtype), and warnings where they
    differ."""
    runs = report["runs"]
    lines = ["", "## Provenance", ""]
    lines += [f"- `{r['name']}`: {r.get('made_by', 'no provenance record')}" for r in runs]
    lines += [f"- **warning**: {warning}" for warning in provenance_warnings(runs)]
    return lines + [""]


def failed_runs(report: dict) -> list[str]:
    failed = [r for r in report["runs"] if r["status"] != "ok"]
    if not failed:
        return []
    return ["## Failed runs", "", *[f"- `{r['name']}`: {r['status']}" for r in failed], ""]


def _tuning_method(data: dict) -> str:
    """How the configs were tuned: the grid, the trials' budgets, the halving."""
    counts = sorted(set(data["trials_per_model"].values()))
    unit = data.get("budget_unit", "minutes")
    if len(counts) == 1 and data["rungs"] == 1 and data.get("last_rung") == "convergence":
        method = f"every model got the same {counts[0]} trials"  # one rung: no trial budget
    elif len(counts) == 1 and unit == "steps":
        method = (
            f"every model got the same {counts[0]} trials, each with a budget of "
            f"{data['minutes_per_trial']:g} training steps"
        )
    elif len(counts) == 1:
        method = (
            f"every model got the same {counts[0]} trials, each with a budget of "
            f"{data['minutes_per_trial']:g} training minutes (or its config's train.steps, if "
            "reached first)"
        )
    else:
        so_far = ", ".join(f"{name} {n}" for name, n in data["trials_per_model"].items())
        method = f"the sweep was interrupted: models have {so_far} trials so far (rerun to finish)"
    converged = data.get("last_rung") == "convergence"
    if data["rungs"] > 1:
        ends = [f"{m:g}" for m in data["rung_minutes"]]
        if converged:
            ends[-1] = "convergence"
        minutes = ", ".join(ends)
        method += (
            f"; then successive halving over {data['rungs']} rungs ending at {minutes} "
            f"(training {unit}): after each rung "
            + (
                f"the best trial of each `{data['keep_each']}` value and then the better half "
                "of the rest trained on (`--tune_keep_each`: no value dropped before the last rung)"
                if data.get("keep_each")
                else "the better half of every model's trials trained on"
            )
        )
    if converged:
        method += (
            "; the last rung's trials trained on to convergence (their early stopping, within "
            "the final runs' budget) and were scored by the mean validation BLEU of their last "
            "5 points (`--tune_to_convergence`)"
        )
    return method


def _trial_scoring(data: dict) -> str:
    """What a trial's score was read from: its last validation record, or with
    ``--tune_to_convergence`` the mean of the last rung's last 5."""
    if data.get("last_rung") != "convergence":
        return "its own last validation record"
    if data["rungs"] == 1:
        return "the mean of its last 5 validation records"
    return "its last validation record at each rung (at the last, the mean of its last 5)"


def _tuning_intro(data: dict) -> list[str]:
    grid = "; ".join(
        f"`{key}` ∈ {{{', '.join(map(repr, values))}}}" for key, values in data["grid"].items()
    )
    drawn = (
        f"{data['samples']} points drawn (seed {data['sample_seed']}, the same for every model) "
        "from "
        if data["samples"]
        else "every point of "
    )
    splits = sorted({model["validation_split"] for model in data["models"]})
    return [
        "## Tuning (chosen on the validation split)",
        "",
        f"Before the final runs each config trained on {drawn}the grid {grid}: "
        f"{_tuning_method(data)}. Each trial was scored by {_trial_scoring(data)} "
        f"(greedy decoding, split {', '.join(f'`{s}`' for s in splits)}); the test split was "
        "never read while tuning. The trial with the highest validation BLEU (ties: lower "
        "validation perplexity) gave its values to the config's final runs, applied after the "
        "config file and the suite's overrides.",
        "",
    ]


def _trials_table(data: dict) -> str:
    keys = list(data["grid"])
    columns = [
        ("model", "model", ""),
        *[(key, key, "") for key in keys],
        ("status", "status", ""),
        ("validation_bleu", "val BLEU", ".2f"),
        ("validation_perplexity", "val ppl", ".2f"),
        ("validation_sentences", "val sentences", "d"),
        ("step", "steps", "d"),
        ("train_minutes", "train min", ".1f"),
        ("rungs", "val BLEU per rung", ""),
        ("peak_learning_rate", "peak lr (logged)", ".2e"),
        ("chosen", "chosen", ""),
    ]
    rows = []
    for trial in (trial for model in data["models"] for trial in model["trials"]):
        rungs = (f"{b:.2f}" if b is not None else tables.MISSING for b in trial["rung_bleu"])
        # values as typed on the command line, not as formatted numbers
        rows.append({**trial, **{k: as_typed(trial[k]) for k in keys}, "rungs": " → ".join(rungs)})
    return tables.markdown_table(rows, columns)


def tuning(report: dict) -> list[str]:
    """How each config's values were chosen on validation, every trial, the choices, and those
    at an end of the grid (``grid_edges``)."""
    data = report["tuning"]
    if not data:
        return []
    lines = [*_tuning_intro(data), _trials_table(data)]
    for model in data["models"]:
        chosen = model["chosen"]
        described = (
            ", ".join(f"{key}={as_typed(value)}" for key, value in chosen.items())
            if chosen is not None
            else "none (no trial was scored): the config's own values"
        )
        lines.append(f"- `{model['name']}`: {described}")
    lines.append("")
    lines += edges_paragraph(grid_edges(data["grid"], data["models"]))
    keys = list(data["grid"])
    for figure in report["figures"].get("tuning", []):
        against = (
            f" against `{keys[0]}` (best over {', '.join(keys[1:])} at each value)"
            if len(keys) > 1
            else ""
        )
        lines += [f"Validation BLEU of every trial{against}:", "", f"![tuning]({figure})", ""]
    winners = report["copied_from_winning_trial"]
    if winners:
        lines += [
            "",
            f"The final runs {', '.join(f'`{name}`' for name in winners)} start from their "
            "config's winning trial (the same config and seed): copied, then trained on to "
            "the final budget or convergence, not trained again from scratch. Chosen for its "
            "validation BLEU, such a run may score a little higher on the test set than a "
            "fresh seed would; every config's seed shares this.",
        ]
    return lines


def _image(path: str) -> str:
    return f"![{Path(path).stem}]({path})"


def figures(report: dict) -> list[str]:
    """Training curves, BLEU by source length and attention heatmaps, as images."""
    paths = report["figures"]
    lines = ["## Training curves", "", *[_image(p) for p in paths.get("curves", [])]]
    if "bleu_by_length" in paths:
        lines += ["", "## BLEU by source length (Bahdanau et al. 2015, Figure 2)", ""]
        lines.append(_image(paths["bleu_by_length"][0]))
    if paths.get("alignments"):
        lines += [
            "",
            "## Attention over the source (Bahdanau et al. 2015, Figure 3)",
            "",
            "Rows are the output tokens, columns the source tokens; white is weight 1. "
            "RNNsearch has one additive attention; the Transformer one cross-attention per "
            "layer and head, plus each layer's head average.",
            "",
            *[_image(p) for p in paths["alignments"]],
        ]
    return lines
