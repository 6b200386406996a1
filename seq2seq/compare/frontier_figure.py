"""The frontier figure: every run's validation BLEU against its training cost, and each model
family's frontier (its upper envelope) drawn over them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from seq2seq.compare.frontier import RunRecord, family_envelope

DPI = 150
# panel: (Point attribute, axis label, logarithmic)
AXES = (
    ("flops", "training FLOPs", True),
    ("step", "steps", True),
    ("minutes", "training minutes", True),
)
COLOURS = {"transformer": "tab:blue", "rnnsearch": "tab:orange"}
SIZE_STYLES = ("dotted", "dashed", "dashdot", (0, (5, 1)), (0, (1, 3)))


def _steps(envelope: Sequence[tuple[float, float]], end: float) -> tuple[list, list]:
    """The envelope as a step line held to ``end``."""
    xs, ys = [c for c, _ in envelope], [s for _, s in envelope]
    return [*xs, end], [*ys, ys[-1]]


def _log_axis(ax) -> None:
    """A log x axis labelled at its decades; where the data lie within one decade (no decade
    inside the limits, so a log axis would carry no number at all), a linear one with a few
    labelled ticks."""
    ax.set_xscale("log")
    low, high = ax.get_xlim()
    if math.floor(math.log10(low)) == math.floor(math.log10(high)):
        ax.set_xscale("linear")
        ax.xaxis.set_major_locator(MaxNLocator(4))
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels overlap


def device_label(runs: Sequence[RunRecord]) -> str:
    """The time axis's label: training minutes on the one device every run trained on."""
    devices = sorted({run.device for run in runs})
    if len(devices) == 1 and devices[0]:
        return f"training minutes on {devices[0]}"
    return "training minutes (on different devices)"


def _curves_panel(ax, runs: Sequence[RunRecord], axis: str, label: str, log: bool) -> None:
    """Each run's validation curve against one cost (thin, one style per size), and each
    family's frontier over them (thick); against time, also each family's frontier with
    validation's minutes added (dashed), the cost of watching the curve apart from training."""
    sizes = list(dict.fromkeys(run.config_name for run in runs))
    for run in runs:
        style = SIZE_STYLES[sizes.index(run.config_name) % len(SIZE_STYLES)]
        ax.plot(
            [getattr(p, axis) for p in run.curve],
            [p.bleu for p in run.curve],
            color=COLOURS.get(run.family),
            linestyle=style,
            lw=1,
            alpha=0.7,
            label=run.name,
        )
    for family in dict.fromkeys(run.family for run in runs):
        members = [r for r in runs if r.family == family]
        envelope = family_envelope(members, axis)
        if envelope:
            end = max(getattr(p, axis) for r in members for p in r.curve)
            ax.plot(
                *_steps(envelope, end),
                drawstyle="steps-post",
                color=COLOURS.get(family),
                lw=2.5,
                label=f"{family} frontier",
            )
        with_validation = family_envelope(members, "minutes_with_validation")
        if axis == "minutes" and with_validation and with_validation != envelope:
            end = max(p.minutes_with_validation for r in members for p in r.curve)
            ax.plot(
                *_steps(with_validation, end),
                drawstyle="steps-post",
                color=COLOURS.get(family),
                lw=1.5,
                linestyle="dashed",
                label=f"{family} frontier, validation's minutes added",
            )
    if log:
        _log_axis(ax)
    ax.set_xlabel(label)
    ax.set_ylabel("validation BLEU")
    ax.grid(alpha=0.3)


def _test_panel(ax, runs: Sequence[RunRecord]) -> None:
    """Each finished run's test BLEU against its total training FLOPs; runs that hit their cap
    say so."""
    for family in dict.fromkeys(run.family for run in runs):
        finished = [r for r in runs if r.family == family and r.test_bleu is not None]
        ax.scatter(
            [r.flops for r in finished],
            [r.test_bleu for r in finished],
            color=COLOURS.get(family),
            marker="o",
            label=family,
        )
        for run in finished:
            marker = "" if run.converged else " (cap)"
            ax.annotate(
                run.config_name.split("-", 1)[-1] + marker,
                (run.flops, run.test_bleu),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    if any(r.test_bleu is not None for r in runs):  # a log axis needs a point
        _log_axis(ax)
    ax.set_xlabel("training FLOPs at the run's end")
    ax.set_ylabel("test BLEU (scored checkpoint)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_frontier(runs: Sequence[RunRecord], path: Path, title: str = "") -> Figure:
    """Three panels (validation BLEU against training FLOPs, steps and minutes) and a fourth:
    each finished run's test BLEU against its total training FLOPs, beside the validation
    frontiers. Thin lines are runs (one style per size), thick lines each family's frontier."""
    figure = Figure(figsize=(16, 4.6), layout="constrained")
    panels = figure.subplots(1, 4)
    for ax, (axis, label, log) in zip(panels, AXES, strict=False):
        label = device_label(runs) if axis == "minutes" else label
        _curves_panel(ax, runs, axis, label, log)
    _test_panel(panels[3], runs)
    panels[0].legend(fontsize=7, loc="lower right")
    if title:
        figure.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    return figure


RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 30, 50, 100)
LEVEL_AXES = {"flops": ("training FLOPs", "tab:green"), "step": ("steps", "tab:purple")}


def plot_cost_by_level(
    every_level: dict[str, list[dict]], families: Sequence[str], path: Path, time_label: str
) -> Figure:
    """The first family's cost over the second's to reach each whole validation level, one
    line per axis (FLOPs, steps, training time) with its bootstrap 95% band; above 1 the first
    family pays more. Filled markers: levels decided above or below 1 whatever the seeds'
    crossings between two validations (``cost.every_level``'s ``side``); hollow: undecided."""
    first, second = families
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = figure.subplots()
    names = {**LEVEL_AXES, "minutes": (time_label, "tab:red")}
    for axis, rows in every_level.items():
        if not rows:
            continue
        label, colour = names[axis]
        levels = [row["level"] for row in rows]
        ax.fill_between(
            levels,
            [row["ratio_ci95"][0] for row in rows],
            [row["ratio_ci95"][1] for row in rows],
            color=colour,
            alpha=0.15,
            linewidth=0,
        )
        ax.plot(levels, [row["ratio"] for row in rows], color=colour, label=label)
        for row in rows:
            ax.plot(
                row["level"],
                row["ratio"],
                "o",
                markersize=3.5,
                color=colour,
                markerfacecolor=colour if row.get("side") else "white",
            )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    low, high = ax.get_ylim()  # plain numbers at a few ratios, not powers of ten
    ticks = [t for t in RATIO_TICKS if low <= t <= high]
    if len(ticks) >= 2:  # else (a narrow or far range) the log axis's own ticks
        ax.set_yticks(ticks)
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_xlabel("validation BLEU reached")
    ax.set_ylabel(f"{first} / {second}: cost to get there")
    ax.set_title(
        f"above 1: {first} pays more (95% bootstrap band over seeds; hollow: undecided)",
        fontsize=9,
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    return figure
