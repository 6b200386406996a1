"""The frontier report: from run records to ``frontier.md``, ``frontier.json`` and a figure.

    python -m seq2seq.compare --records docs/records/multi30k_frontier --workdir runs/frontier

``frontier_data`` computes everything once (a plain dict, written as frontier.json);
``render`` turns it into markdown. Live runs and committed records go through the same two
functions, so a report rebuilt from records equals the one written beside the live runs.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seq2seq.compare import cost, frontier
from seq2seq.compare.frontier import RunRecord
from seq2seq.compare.frontier_figure import device_label, plot_cost_by_level, plot_frontier
from seq2seq.compare.grid_ends import edges_paragraph, pooled_grid_edges
from seq2seq.evaluation import significance
from seq2seq.report.tables import counted, markdown_table

logger = logging.getLogger(__name__)

FIGURE = "figures/frontier.png"
LEVELS_FIGURE = "figures/cost_by_level.png"


def _per_step(run: RunRecord) -> float:
    return run.flops / run.steps if run.steps else math.nan


def _run_row(run: RunRecord) -> dict:
    best = run.best
    return {
        "run": run.name,
        "family": run.family,
        "size": run.config_name,
        "seed": run.seed,
        "end": {"converged": "converged", "cap": "hit its cap"}.get(run.stop_reason, "running"),
        "steps": run.steps,
        "minutes": run.minutes,
        "flops": run.flops,
        "flops_per_step": _per_step(run),
        "best_validation_bleu": best.bleu if best else None,
        "best_step": best.step if best else None,
        "test_bleu": run.test_bleu,
        "test_chrf": None if run.result is None else run.result.get("chrf"),
    }


# Model fields that say how large a size is (a Transformer's widths and depths, RNNsearch's
# widths): the sizes table lists them for every size, whatever the family.
SIZE_FIELDS = ("d_model", "d_ff", "num_heads", "layers", "size")


def _chosen_by(members: Sequence[RunRecord]) -> str:
    """How a size's values were chosen: its tuning on validation (trials, keys, rungs), or the
    suite's values where no run of it carries a tuning record."""
    tuning = next((run.tuning for run in members if run.tuning), None)
    if tuning is None:
        return "the suite (not tuned)"
    (model,) = tuning["models"]
    keys = " x ".join(key.rsplit(".", 1)[-1] for key in tuning["grid"])
    unit = "min" if tuning["budget_unit"] == "minutes" else "steps"
    rungs = ", ".join(f"{budget:,g}" for budget in tuning["rung_minutes"])
    chosen = f"{len(model['trials'])} trials of {keys} on {model['validation_split']} "
    chosen += f"({rungs} {unit})"
    if tuning.get("started_from_winning_trial"):
        chosen += "; the final run trained on from the winning trial"
    return chosen


def _grid_edges(runs: Sequence[RunRecord]) -> list[str]:
    """Where every size of a family, each tuned on its own, chose the same end of a grid."""
    lines = []
    for family in dict.fromkeys(run.family for run in runs):
        sizes = frontier.by_config(r for r in runs if r.family == family).items()
        tunings = [
            (name, next((r.tuning for r in members if r.tuning), None)) for name, members in sizes
        ]
        lines += pooled_grid_edges(family, tunings, f"every {family} size ({{n}})")
    return lines


def _size_rows(runs: Sequence[RunRecord]) -> list[dict]:
    """Each size once: its family, seeds, widths and depths, peak rate and warm-up, and its
    training FLOPs per step (the mean over its runs)."""
    rows = []
    for name, members in frontier.by_config(runs).items():
        config = members[0].config
        section = config.model[config.model.name]
        widths = [
            f"{key} {value}"
            for key, value in section.items()
            if isinstance(value, int)
            and not isinstance(value, bool)
            and any(field in key for field in SIZE_FIELDS)
        ]
        rows.append(
            {
                "size": name,
                "family": members[0].family,
                "seeds": len(members),
                "model": ", ".join(widths),
                "rate": f"{config.train.learning_rate:g} after {config.train.warmup_steps:,}",
                "dropout": section.get("dropout_rate"),
                "chosen_by": _chosen_by(members),
                "flops_per_step": float(np.mean([_per_step(r) for r in members])),
            }
        )
    return rows


def _comparisons(runs: Sequence[RunRecord], families: Sequence[str], levels: Sequence[float]):
    """The verdict at each compute level, each distinct pair of chosen sizes tested once, then
    Holm's adjustment over every test of the report (BLEU and chrF of every pair)."""
    a, b = families
    picks = []
    for level in [*levels, math.inf]:
        choice_a, choice_b = frontier.choose(runs, a, level), frontier.choose(runs, b, level)
        if choice_a and choice_b:
            picks.append((level, choice_a, choice_b))
    tested, count = _tested_pairs(picks)
    verdicts = []
    for level, choice_a, choice_b in picks:
        results = tested[(choice_a.config_name, choice_b.config_name)]
        verdicts.append(_verdict_at(level, choice_a, choice_b, results))
    return verdicts, count


def _tested_pairs(picks) -> tuple[dict[tuple[str, str], dict], int]:
    """Each distinct pair of chosen sizes tested once (BLEU and chrF), with Holm's adjusted p
    over all of them; and the number of tests."""
    distinct = {
        (choice_a.config_name, choice_b.config_name): (choice_a, choice_b)
        for _, choice_a, choice_b in picks
    }
    tested: dict[tuple[str, str], dict] = {}
    for key, (choice_a, choice_b) in distinct.items():
        logger.info("== significance: %s against %s", *key)
        tested[key] = significance.compare_seeds(
            [r.hypotheses for r in choice_a.runs],
            [r.hypotheses for r in choice_b.runs],
            frontier.references_for(choice_a.runs[0]),
            tests_in_family=2 * len(distinct),  # BLEU and chrF of each pair
            target_lang=choice_a.runs[0].config.data.tgt_lang,
        )
    flat = [(key, metric) for key, results in tested.items() for metric in results]
    adjusted = significance.adjust_for_family([tested[key][metric] for key, metric in flat])
    for (key, metric), result in zip(flat, adjusted, strict=True):
        tested[key][metric] = result
    return tested, len(flat)


def _verdict_at(
    level: float, choice_a: frontier.Choice, choice_b: frontier.Choice, results: dict
) -> dict:
    """One compute level's verdict: the sizes chosen there and their BLEU test (chrF's
    sentence beside it); level infinity is "at any compute"."""
    bleu, chrf = results["BLEU"], results["chrF"]
    a, b = choice_a.config_name, choice_b.config_name
    return {
        "flops": None if math.isinf(level) else level,
        "a": a,
        "b": b,
        "a_flops": choice_a.flops,
        "b_flops": choice_b.flops,
        "difference": bleu.difference,
        "ci95": list(bleu.ci95) if bleu.ci95 else None,
        "p_value": bleu.p_value,
        "p_adjusted": bleu.p_adjusted,
        "significant": bleu.significant,
        "sentence": significance.verdict(a, b, bleu),
        "chrf_sentence": significance.verdict(a, b, chrf, unit="chrF"),
    }


def _best(runs: Sequence[RunRecord], family: str) -> dict | None:
    """The family's best size by validation among its converged runs, with its test BLEU and
    its cost."""
    choice = frontier.choose([r for r in runs if r.converged], family)
    if choice is None:
        return None
    tests = choice.test_bleus
    return {
        "family": family,
        "size": choice.config_name,
        "seeds": len(tests),
        "test_bleu": float(np.mean(tests)),
        "test_bleu_seeds": tests,
        "flops": float(np.mean([r.flops for r in choice.runs])),
        "steps": float(np.mean([r.steps for r in choice.runs])),
        "minutes": float(np.mean([r.minutes for r in choice.runs])),
        "validation_bleu": choice.validation_bleu,
    }


def _time_per_step(runs: Sequence[RunRecord], rows: Sequence[dict], verdict: dict) -> dict:
    """The time a step of ``verdict``'s other family took over one of its leader's, on the
    sizes chosen in seconds at its level: their seconds ratio over their own steps ratio. Each
    axis picks each family's cheapest size on it, so the steps row may pair other sizes
    (``steps_row_sizes``), and its ratio would divide one pair's seconds by another's steps."""
    level, other, leader = verdict["level"], verdict["other"], verdict["leader"]
    picks = {r["axis"]: r["families"] for r in rows if r["level"] == level}
    sizes = {family: picks["minutes"][family]["size"] for family in (other, leader)}
    steps = {}
    for family, size in sizes.items():
        (size_row,) = cost.size_costs([r for r in runs if r.config_name == size], level, "step")
        steps[family] = size_row["mean"]
    steps_ratio = steps[other] / steps[leader]
    return {
        "sizes": sizes,
        "steps_row_sizes": {family: picks["step"][family]["size"] for family in sizes},
        "steps_ratio": steps_ratio,
        "ratio": verdict["ratios"]["minutes"]["ratio"] / steps_ratio,
    }


def frontier_data(runs: Sequence[RunRecord], title: str, rule: str) -> dict:
    """Everything the report states, computed once from ``runs`` (scored under checkpoint rule
    ``rule``)."""
    # One order whatever the runs were read in (live: the suite's; records: their folders').
    runs = sorted(runs, key=lambda run: (run.family, _per_step(run), run.name))
    families = list(dict.fromkeys(run.family for run in runs))
    data: dict = {
        "title": title,
        "families": families,
        "scored": _scored(runs, rule),
        "runs": [_run_row(run) for run in runs],
        "sizes": _size_rows(runs),
        "grid_edges": _grid_edges(runs),
        "envelopes": {
            f: frontier.family_envelope(r for r in runs if r.family == f) for f in families
        },
        "best": [b for f in families if (b := _best(runs, f))],
        "verdicts": [],
        "tests": 0,
        "crossings": [],
        "cost_to_level": cost.cost_to_levels(runs, families),
        "budget_rule": cost.budget_rule(runs),
        "every_level": {axis: cost.every_level(runs, families, axis) for axis in cost.AXES},
        "devices": sorted({run.device for run in runs}),
    }
    data["first_in_time"] = [
        {**verdict, "per_step": _time_per_step(runs, data["cost_to_level"], verdict)}
        for verdict in cost.first_in_time(data["cost_to_level"])
    ]
    if len(families) == 2:
        levels = frontier.compute_levels(runs, families)
        data["verdicts"], data["tests"] = _comparisons(runs, families, levels)
        envelopes = data["envelopes"]
        data["crossings"] = [
            {"flops": cost, "leader": families[0] if who == "a" else families[1]}
            for cost, who in frontier.crossings(envelopes[families[0]], envelopes[families[1]])
        ]
    return data


def _scored(runs: Sequence[RunRecord], rule: str) -> dict:
    """How the test split was decoded and which checkpoint scored (the same for every run)."""
    results = [run.result for run in runs if run.result]
    if not results:
        return {}
    return {key: results[0].get(key) for key in ("split", "beam_size", "alpha")} | {"rule": rule}


def _leader_before(data: dict, crossing: dict) -> str:
    other = [f for f in data["families"] if f != crossing["leader"]]
    return other[0] if other else ""


def _level(verdict: dict) -> str:
    if verdict["flops"] is None:
        return "with every run"
    return f"at {verdict['flops']:.0e} training FLOPs"


def _verdict_table(data: dict) -> str:
    """Each compute level's picks (by validation) and the test difference between them."""
    a, b = data["families"]
    rows = [
        {
            "level": "any" if v["flops"] is None else f"{v['flops']:.0e}",
            "a": f"{v['a']} ({v['a_flops']:.2g})",
            "b": f"{v['b']} ({v['b_flops']:.2g})",
            "difference": v["difference"],
            "ci": "[{:.2f}, {:.2f}]".format(*v["ci95"]) if v["ci95"] else "—",
            "p": v["p_value"],
            "p_adjusted": v["p_adjusted"],
            "significant": "yes" if v["significant"] else "no",
        }
        for v in data["verdicts"]
    ]
    return markdown_table(
        rows,
        [
            ("level", "training FLOPs at most", ""),
            ("a", f"{a} chosen (its FLOPs)", ""),
            ("b", f"{b} chosen (its FLOPs)", ""),
            ("difference", f"test BLEU, {a} - {b}", "+.2f"),
            ("ci", "95% CI (seeds and sentences)", ""),
            ("p", "p (two-sided)", ".3g"),
            ("p_adjusted", "p, Holm", ".3g"),
            ("significant", "significant (Holm)", ""),
        ],
    ).rstrip()


def render(data: dict) -> str:
    """The markdown of ``frontier_data``'s result: what was scored, the verdict, the frontiers'
    findings, the sizes and the runs."""
    lines = [f"# {data['title']}", "", *_what_was_scored(data), "## Verdict", ""]
    lines += [*_verdict(data), "", *_findings(data), ""]
    lines += [
        f"Holm-Bonferroni over the report's {data['tests']} tests (BLEU and chrF of each pair); "
        "every p is two-sided; 'significant' uses the adjusted p.",
        "",
        f"![Validation BLEU of every run against training FLOPs, steps and minutes]({FIGURE})",
        "",
        *_cost_section(data),
        "## Sizes",
        "",
        markdown_table(data["sizes"], SIZE_COLUMNS),
        "",
        *edges_paragraph(data.get("grid_edges", [])),  # older report.json: none
        "## Runs",
        "",
        markdown_table(data["runs"], RUN_COLUMNS),
    ]
    for chrf in dict.fromkeys(verdict["chrf_sentence"] for verdict in data["verdicts"]):
        lines.append(f"- {chrf}")
    return "\n".join(lines).rstrip() + "\n"


SIZE_COLUMNS = [
    ("size", "size", ""),
    ("family", "family", ""),
    ("seeds", "seeds", ""),
    ("model", "widths and depths", ""),
    ("rate", "peak rate after warm-up steps", ""),
    ("dropout", "dropout", "g"),
    ("chosen_by", "values chosen by", ""),
    ("flops_per_step", "training FLOPs / step", ".3g"),
]
RUN_COLUMNS = [
    ("run", "run", ""),
    ("end", "ended", ""),
    ("steps", "steps", ","),
    ("minutes", "train min", ".1f"),
    ("flops", "train FLOPs", ".3g"),
    ("best_validation_bleu", "best val BLEU", ".2f"),
    ("best_step", "at step", ","),
    ("test_bleu", "test BLEU", ".2f"),
    ("test_chrf", "test chrF", ".2f"),
]


AXIS_NAMES = {"flops": "FLOPs", "step": "steps", "minutes": "training s"}
LEVEL_AXIS_NAMES = {"flops": "In FLOPs", "step": "In steps", "minutes": "In training seconds"}


def _cost_cell(pick: dict | None, axis: str) -> str:
    if pick is None:
        return "not reached by every seed of any size"
    if axis == "minutes":  # shown in seconds, with validation's seconds by then beside them
        values = [60 * pick["mean"], *(60 * v for v in pick["ci95"] or ())]
        shown = [f"{v:,.0f}" for v in values]
        extra = f"; +{60 * pick['validation_minutes']:,.0f} s validation"
    else:
        form = "{:.2g}" if axis == "flops" else "{:,.0f}"
        shown = [form.format(v) for v in (pick["mean"], *(pick["ci95"] or ()))]
        extra = ""
    interval = f" [{shown[1]}, {shown[2]}]" if len(shown) == 3 else ""
    seeds = counted(pick["seeds"], "seed")
    return f"{shown[0]}{interval} ({pick['size']}, {seeds}{extra})"


def _cost_section(data: dict) -> list[str]:
    """Each family's cost to reach the stated validation levels in FLOPs, steps and training
    seconds, the verdict at equal training time, and the budget rule's cost."""
    if not data["cost_to_level"]:
        return []
    families = data["families"]
    device = _one_device(data)
    rows = []
    for row in data["cost_to_level"]:
        entry = {"level": f"{row['level']:g}", "axis": AXIS_NAMES[row["axis"]]}
        for index, family in enumerate(families):
            entry[f"f{index}"] = _cost_cell(row["families"][family], row["axis"])
        if "ratio" in row:
            entry["ratio"] = _ratio({"ratio": row["ratio"], "ci95": row["ratio_ci95"]})
            entry["ratio"] += _undecided(row)
        rows.append(entry)
    columns = [("level", "validation BLEU", ""), ("axis", "cost in", "")]
    columns += [
        (f"f{i}", f"{family}: mean [95% CI over seeds]", "") for i, family in enumerate(families)
    ]
    if len(families) == 2:
        columns.append(("ratio", f"{families[0]} / {families[1]} [bootstrap 95% CI]", ""))
    where = f"on {device}" if device else "on the device that trained each run"
    lines = [
        "## Cost to reach a validation level",
        "",
        "Each seed's cost is its training FLOPs, steps or seconds at its first validation point "
        "at or above the level; a family's is its cheapest size whose every seed got there, "
        "of its sizes with two seeds or more where one did "
        "(Student-t interval over those seeds; the ratio's interval resamples each side's "
        f"seeds). Seconds are training seconds {where}, with validation, compiling and "
        "checkpoints off the clock; the validation seconds those seeds had spent by then are "
        "given beside them. A ratio marked * lies off 1 at these first validation points but "
        'is not decided: each seed crossed the level after its validation before (see "At '
        'every whole level" below).',
        "",
        markdown_table(rows, columns).rstrip(),
        "",
        *_time_verdict(data, device),
    ]
    if data["budget_rule"]:
        budget = [{**row, "ratio": row["max_over_mean"]} for row in data["budget_rule"]]
        lines += [
            "The budget rule counts a size at its most expensive seed's cost to converge; "
            "against its seeds' mean:",
            "",
            markdown_table(
                budget,
                [
                    ("size", "size", ""),
                    ("seeds", "seeds", ""),
                    ("mean_flops", "mean training FLOPs", ".3g"),
                    ("max_flops", "most expensive seed", ".3g"),
                    ("ratio", "most expensive / mean", ".2f"),
                ],
            ).rstrip(),
            "",
        ]
    return [*lines, *_every_level_section(data, device)]


def _undecided(row: dict) -> str:
    """ "*" and the range of the means after a ratio whose interval lies off 1 at the first
    validation points but is not decided (``cost.decided``); nothing after any other (or after
    one from an older report.json, which does not say)."""
    low, high = row["ratio_ci95"]
    if "side" not in row or row["side"] is not None or low <= 1 <= high:
        return ""
    low, high = row["bounds"]
    return f"* ({low:.2f} and up)" if high is None else f"* ({low:.2f} to {high:.2f})"


def level_ranges(levels: Sequence[float]) -> str:
    """Whole levels as runs of consecutive ones: [20, 29, 30, 31] -> "20 and 29-31"."""
    runs: list[list[int]] = []
    for level in sorted(int(level) for level in levels):
        if runs and level == runs[-1][-1] + 1:
            runs[-1].append(level)
        else:
            runs.append([level])
    parts = [f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)


def _every_level_section(data: dict, device: str | None) -> list[str]:
    """The first family's cost over the second's at every whole level both reach, on each
    axis: where it is decided above 1 and where below (``cost.every_level``'s ``side``), in a
    figure and a table."""
    by_axis = {axis: rows for axis, rows in data.get("every_level", {}).items() if rows}
    if "flops" not in by_axis:
        return []
    a, b = data["families"]
    said = []
    for axis, rows in by_axis.items():
        sides: dict[str | None, list[float]] = {"more": [], "fewer": [], None: []}
        for row in rows:
            sides[row.get("side")].append(row["level"])
        parts = [
            f"{word} at {level_ranges(sides[side])}"
            for side, word in (("more", "more"), ("fewer", "fewer"), (None, "undecided"))
            if sides[side]
        ]
        said.append(f"- {LEVEL_AXIS_NAMES[axis]}: {'; '.join(parts)}.")
    levels: dict[float, dict] = {}
    for axis, rows in by_axis.items():
        for row in rows:
            entry = levels.setdefault(row["level"], {"level": row["level"]})
            entry[axis] = _ratio({"ratio": row["ratio"], "ci95": row["ratio_ci95"]})
            entry[axis] += _undecided(row)
            if axis == "flops":
                entry["sizes"] = ", ".join(f"`{size}`" for size in row["sizes"].values())
    columns = [("level", "validation BLEU", "g"), ("sizes", "sizes (FLOPs)", "")]
    columns += [(axis, f"{AXIS_NAMES[axis]}: ratio [95% CI]", "") for axis in by_axis]
    where = f"on {device}" if device else "on the device that trained each run"
    return [
        "### At every whole level",
        "",
        f"`{a}`'s cost over `{b}`'s at each whole validation level both reach, each family at "
        f"its cheapest size there on each axis (the sizes column gives the FLOPs row's; seconds "
        f"are training seconds {where}). A seed's cost is read at its first validation at or "
        "above the level, but it crossed the level somewhere after the validation before. A "
        f"level is decided only where the interval stays off 1 with every seed's crossing put "
        f"at the end of those bounds least favourable to the verdict. `{a}` needs:",
        "",
        *said,
        "",
        "A ratio marked * has an interval off 1 at the first validation points but is not "
        "decided: placed within their bounds, the seeds' crossings give ratios of the means "
        "in the range in brackets after it, and at one end of that range the interval reaches 1.",
        "",
        f"![{a}'s cost over {b}'s to reach each validation level]({LEVELS_FIGURE})",
        "",
        markdown_table(sorted(levels.values(), key=lambda e: -e["level"]), columns).rstrip(),
        "",
    ]


def _one_device(data: dict) -> str | None:
    """The device every run trained on, or None where they differ (or one is unknown)."""
    devices = data["devices"]
    return devices[0] if len(devices) == 1 and devices[0] else None


def _ratio(entry: dict) -> str:
    """A ratio and its interval; "*" after one whose interval lies off 1 but that is not
    decided (``entry["decided"]`` False: ``cost.first_in_time``)."""
    low, high = entry["ci95"]
    star = "*" if entry.get("decided") is False and not low <= 1 <= high else ""
    return f"{entry['ratio']:.2f} [{low:.2f}, {high:.2f}]{star}"


def _time_verdict(data: dict, device: str | None) -> list[str]:
    """Vaswani et al.'s claim, read off the seconds rows: which family reaches the highest
    stated level first in training time, and what the other needs against it on every axis."""
    verdicts = data["first_in_time"]
    if not verdicts:
        return []
    lines = []
    if device is None:
        device = "their devices"
        lines.append(
            "- The runs trained on different devices "
            f"({'; '.join(d or 'unknown' for d in data['devices'])}): their seconds compare the "
            "machines as much as the models."
        )
    top = verdicts[0]
    leader, other = top["leader"], top["other"]
    same = all(v["leader"] == leader for v in verdicts)
    where = "at every stated level" if same else f"at {top['level']:g}"
    seconds = {family: 60 * minutes for family, minutes in top["minutes"].items()}
    validation = {f: 60 * (m or 0.0) for f, m in top["validation_minutes"].items()}
    ratios = top["ratios"]
    per_step = top["per_step"]
    sizes, steps_sizes = per_step["sizes"], per_step["steps_row_sizes"]
    if steps_sizes == sizes:
        steps_pair, per_step_on = "", "Seconds over steps"
    else:  # say which pair each ratio is against, and divide only one pair's
        steps_pair = (
            f" (`{steps_sizes[other]}` against `{steps_sizes[leader]}`, the sizes cheapest in "
            "steps)"
        )
        per_step_on = (
            f"Seconds over steps, on the sizes cheapest in seconds (`{sizes[other]}` took "
            f"{per_step['steps_ratio']:.2f} times the steps of `{sizes[leader]}`)"
        )
    first = "gets there first"
    if ratios["minutes"].get("decided") is False:
        first = "gets there first at the validation points, not decidedly,"
    lines.append(
        f"- At equal training time on {device}, `{leader}` {first} {where}: to "
        f"validation BLEU {top['level']:g}, `{other}` needs {_ratio(ratios['minutes'])} times "
        f"its training seconds (means {seconds[other]:,.0f} s against {seconds[leader]:,.0f} s; "
        f"validation by then, off the clock: {validation[other]:,.0f} s and "
        f"{validation[leader]:,.0f} s), {_ratio(ratios['flops'])} times its training FLOPs and "
        f"{_ratio(ratios['step'])} times its steps{steps_pair}. {per_step_on}: a step of "
        f"`{other}` took {per_step['ratio']:.2f} times one of `{leader}` "
        "(for runs that shared a device, `python -m seq2seq.compare.sharing` says how much of "
        "that the sharing made)."
        + (
            " A ratio marked * is not decided: each seed crossed the level after its validation "
            'before, and placed there the ratio could be 1 (see "At every whole level").'
            if any("*" in _ratio(entry) for entry in ratios.values())
            else ""
        )
    )
    if not same:
        firsts = [f"{v['level']:g}: `{v['leader']}`" for v in verdicts]
        lines.append("- First in training time at each stated level: " + "; ".join(firsts) + ".")
    return [*lines, ""]


def _what_was_scored(data: dict) -> list[str]:
    scored = data["scored"]
    if not scored:
        return []
    return [
        f"Test scores: `{scored['split']}`, beam {scored['beam_size']}, alpha "
        f"{scored['alpha']}, checkpoint rule `{scored['rule']}`. Every choice below is made on "
        "validation BLEU; the test split only scores what validation chose.",
        "",
    ]


def _verdict(data: dict) -> list[str]:
    """The table of compute levels, then one sentence per pair of runs compared."""
    if not data["verdicts"]:
        return ["- No compute level has a finished, scored run of both families yet."]
    lines = [_verdict_table(data), ""]
    sentences = dict.fromkeys(
        (verdict["a"], verdict["b"], verdict["sentence"]) for verdict in data["verdicts"]
    )
    for a, b, sentence in sentences:
        levels = [_level(v) for v in data["verdicts"] if (v["a"], v["b"]) == (a, b)]
        joined = ", ".join(levels)
        lines.append(f"- {joined[0].upper()}{joined[1:]}: {sentence}")
    return lines


# More crossings than this are summarised in one line: the range where the frontiers trade the
# lead (validation noise, usually), and who leads after it.
MAX_CROSSINGS_LISTED = 2


def _findings(data: dict) -> list[str]:
    """Where the validation frontiers cross, and each family's best converged run."""
    crossings = data["crossings"]
    if len(crossings) > MAX_CROSSINGS_LISTED:  # noisy curves trading the lead: one line
        first, last = crossings[0], crossings[-1]
        lines = [
            f"- The validation frontiers cross {len(crossings)} times between "
            f"{first['flops']:.2g} and {last['flops']:.2g} training FLOPs, trading the lead "
            f"(before it, `{_leader_before(data, first)}` leads); from {last['flops']:.2g} on, "
            f"`{last['leader']}` leads."
        ]
    else:
        lines = [
            f"- The validation frontiers cross at {crossing['flops']:.2g} training FLOPs: "
            f"from there `{crossing['leader']}` leads (before it, "
            f"`{_leader_before(data, crossing)}`)."
            for crossing in crossings
        ]
    if not crossings and len(data["families"]) == 2:
        lines.append("- The validation frontiers do not cross over the FLOPs both cover.")
    for best in data["best"]:
        lines.append(
            f"- Best converged `{best['family']}` by validation: `{best['size']}` "
            f"({best['seeds']} seed(s), validation BLEU {best['validation_bleu']:.2f}), "
            f"test BLEU {best['test_bleu']:.2f}, after {best['flops']:.2g} training FLOPs, "
            f"{best['steps']:,.0f} steps and {best['minutes']:.0f} training minutes "
            f"({best['minutes'] / 60:.1f} h) on the machine that trained it."
        )
    return lines


def write_frontier_report(
    runs: Sequence[RunRecord], directory: Path, title: str, rule: str
) -> Path:
    """Writes ``frontier.md``, ``frontier.json`` and the figures into ``directory``; returns the
    markdown's path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = frontier_data(runs, title, rule)
    plot_frontier(runs, directory / FIGURE, title)
    if any(data["every_level"].values()):
        plot_cost_by_level(
            data["every_level"], data["families"], directory / LEVELS_FIGURE,
            device_label(runs).replace("training minutes", "training time"),
        )  # fmt: skip
    (directory / "frontier.json").write_text(json.dumps(data, indent=1, default=float) + "\n")
    path = directory / "frontier.md"
    path.write_text(render(data))
    return path
