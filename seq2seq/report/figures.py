"""The comparison report's figures, drawn from what runs left on disk, saved as PNG files.

Every function draws on its own ``matplotlib.figure.Figure`` (no pyplot state, no display: the
PNG is rendered by Agg), saves it to ``path`` and returns it, so a caller or a test can read the
drawn data back (``figure.axes[i].get_lines()``, tick labels).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation

from seq2seq.evaluation.translator import Translator
from seq2seq.progress import Progress, ignored
from seq2seq.report import alignment as alignment_lib
from seq2seq.report.plots import plot_alignment, plot_lines

DPI = 150

# x: (axis label, scale applied to the logged value, logarithmic axis)
TRAINING_AXES = {
    "elapsed_seconds": ("training time (minutes)", 1 / 60, False),
    "train_flops": ("training FLOPs", 1.0, True),
}


class _SparseLogLabels(LogFormatterSciNotation):
    """Matplotlib's labels of a logarithmic axis's minor ticks, but where it labels a subset (an
    axis across about one decade) only 2 and 5 times a power of ten: its own subset, 2, 3, 4
    and 6 times, drew "3×10^12" over "4×10^12" on a half-width panel."""

    def set_locs(self, locs=None):
        super().set_locs(locs)
        # _sublabels: the multiples of each power of ten that are labelled (matplotlib's own,
        # private; its set_locs picks all, a subset, or the powers alone)
        # (read with getattr: should a later matplotlib drop it, its own labels stay)
        if getattr(self, "_sublabels", None) not in (None, {1}, set(range(1, 11))):
            self._sublabels = {1, 2, 5}


def _save(figure: Figure, path: Path) -> Figure:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    return figure


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def validation_curve(
    records: Sequence[Mapping[str, object]], x: str, metric: str, *, positive_x: bool = False
) -> tuple[list[float], list[float]]:
    """(x values, metric values) of a run's validation records, in order of x.

    Records of another kind, or lacking a finite ``x`` or ``metric`` (or, with ``positive_x``,
    a positive ``x``), are skipped.
    """
    points = sorted(
        (float(record[x]), float(record[metric]))
        for record in records
        if record.get("kind") == "validation"
        and _finite(record.get(x))
        and _finite(record.get(metric))
        and (record[x] > 0 or not positive_x)
    )
    return [point[0] for point in points], [point[1] for point in points]


def plot_training_curves(
    runs: Mapping[str, Sequence[Mapping[str, object]]], path: Path, *, x: str
) -> Figure:
    """Validation BLEU and validation loss of every run against training time or FLOPs.

    Args:
      runs: run label -> its ``metrics.jsonl`` records (dicts, as logged).
      path: the PNG to write.
      x: ``"elapsed_seconds"`` (drawn in minutes) or ``"train_flops"`` (logarithmic axis).

    Returns:
      The figure: panel 0 BLEU, panel 1 loss, one line per run that has validation records
      carrying ``x`` (records without it are skipped; a run with none has no line).
    """
    if x not in TRAINING_AXES:
        raise ValueError(f"x={x!r} is not a training axis; use one of {sorted(TRAINING_AXES)}")
    xlabel, scale, log_x = TRAINING_AXES[x]
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    bleu_axes, loss_axes = figure.subplots(1, 2)
    for ax, metric, ylabel in (
        (bleu_axes, "bleu", "validation BLEU"),
        (loss_axes, "loss", "validation loss"),
    ):
        xs, ys = {}, {}
        for label, records in runs.items():
            # A logarithmic axis cannot show FLOPs = 0.
            run_x, run_y = validation_curve(records, x, metric, positive_x=log_x)
            if run_x:
                xs[label] = [value * scale for value in run_x]
                ys[label] = run_y
        plot_lines(ax, xs, ys, xlabel=xlabel, ylabel=ylabel, log_x=log_x, log_base=10, legend=False)
        if log_x:
            ax.xaxis.set_minor_formatter(_SparseLogLabels(labelOnlyBase=False))
        ax.grid(alpha=0.3)
    if bleu_axes.get_lines():
        bleu_axes.legend(fontsize=8)
    return _save(figure, path)


def _bucket_label(row: Mapping[str, object]) -> str:
    return f"{row['min_words']}–{row['max_words']}"


def plot_bleu_by_length(
    results: Mapping[str, Mapping[str, object]],
    path: Path,
    *,
    errors: Mapping[str, Sequence[float]] | None = None,
) -> Figure:
    """sacreBLEU against source-sentence length, one line per run (Bahdanau et al. 2015, Fig. 2).

    Args:
      results: run label -> its eval JSON (``eval/SPLIT.json``); its ``bleu_by_source_length``
        rows ({"min_words", "max_words", "n", "bleu"}) are drawn at each bucket's middle length
        (x ticks name the buckets). A result without rows (a failed run) has no line.
      path: the PNG to write.
      errors: optional run label -> one value per bucket of that run (e.g. the standard deviation
        over seeds), drawn as vertical bars of +-value around the line.

    Returns:
      The figure; its one axes holds one ``Line2D`` per run, labelled with the run's label.
    """
    errors = errors or {}
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    ax = figure.subplots()
    ticks: dict[float, str] = {}
    for label, result in results.items():
        rows = result.get("bleu_by_source_length") or []
        if not rows:
            continue
        middles = [(row["min_words"] + row["max_words"]) / 2 for row in rows]
        bleu = [row["bleu"] for row in rows]
        ticks.update(
            {middle: _bucket_label(row) for middle, row in zip(middles, rows, strict=True)}
        )
        (line,) = ax.plot(middles, bleu, marker="o", label=label)
        if label in errors:
            spread = list(errors[label])
            if len(spread) != len(rows):
                raise ValueError(
                    f"errors[{label!r}] has {len(spread)} values but the run has {len(rows)} "
                    "length buckets; give one value per bucket"
                )
            ax.errorbar(middles, bleu, yerr=spread, fmt="none", ecolor=line.get_color())
    ax.set_xticks(sorted(ticks), [ticks[middle] for middle in sorted(ticks)], fontsize=8)
    ax.set_xlabel("source sentence length (words)")
    ax.set_ylabel("sacreBLEU")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    return _save(figure, path)


def _cell_inches(length: int, *, target: float, smallest: float, largest: float) -> float:
    """Side of one heatmap cell: ``target`` inches for the whole axis, within bounds."""
    return min(max(target / max(length, 1), smallest), largest)


def _label_inches(tokens: Sequence[str], fontsize: float) -> float:
    """Room for the longest token label (about 0.6 em per character)."""
    return 0.2 + 0.6 * fontsize / 72 * max((len(token) for token in tokens), default=1)


def plot_rnn_alignment(alignment: alignment_lib.Alignment, path: Path, title: str = "") -> Figure:
    """One heatmap [T, S] of a single attention (Bahdanau et al. 2015, Fig. 3).

    Source pieces run across the top, the model's own target pieces down the left; white is
    weight 1. The figure grows with the sentence (readable up to about 30 pieces).

    Raises:
      ValueError: if ``alignment`` has more than one layer or head (use
        ``plot_transformer_attention``).
    """
    layers, heads, target_length, source_length = alignment.weights.shape
    if (layers, heads) != (1, 1):
        raise ValueError(
            f"alignment has {layers} layers x {heads} heads; plot_rnn_alignment draws a single "
            "attention, use plot_transformer_attention for several"
        )
    cell = _cell_inches(max(target_length, source_length), target=6, smallest=0.2, largest=0.4)
    fontsize = min(9.0, 40 * cell)
    figure = Figure(
        figsize=(
            cell * source_length + _label_inches(alignment.target_pieces, fontsize) + 0.4,
            cell * target_length + _label_inches(alignment.source_pieces, fontsize) + 0.6,
        ),
        layout="constrained",
    )
    ax = figure.subplots()
    plot_alignment(
        ax,
        alignment.weights[0, 0],
        alignment.source_pieces,
        alignment.target_pieces,
        fontsize=fontsize,
    )
    ax.set_title(title, fontsize=10)
    return _save(figure, path)


def plot_transformer_attention(
    alignment: alignment_lib.Alignment, path: Path, title: str = ""
) -> Figure:
    """Every layer and head of the cross-attention, plus each layer's average over heads.

    Row ``l`` of the grid is decoder layer ``l + 1``: its heads left to right, then their mean.
    Source pieces label the top row's columns and target pieces the left column's rows; the
    inner panels, aligned with them, show tick marks only (room for 8 heads of 30 pieces).

    Returns:
      The figure, whose axes are the L x (H + 1) panels in row order.
    """
    layers, heads, target_length, source_length = alignment.weights.shape
    cell = _cell_inches(max(target_length, source_length), target=2.6, smallest=0.1, largest=0.22)
    fontsize = min(7.0, 45 * cell)
    panel_width, panel_height = cell * source_length + 0.1, cell * target_length + 0.3
    figure = Figure(
        figsize=(
            (heads + 1) * panel_width + _label_inches(alignment.target_pieces, fontsize) + 0.3,
            layers * panel_height + _label_inches(alignment.source_pieces, fontsize) + 0.6,
        ),
        layout="constrained",
    )
    grid = figure.subplots(layers, heads + 1, squeeze=False)
    for layer in range(layers):
        panels = [*alignment.weights[layer], alignment.averaged(layer)]  # H + 1 of [T, S]
        names = [f"head {head + 1}" for head in range(heads)] + ["mean of heads"]
        for column, (weights, name) in enumerate(zip(panels, names, strict=True)):
            ax = grid[layer, column]
            plot_alignment(
                ax,
                weights,
                alignment.source_pieces,
                alignment.target_pieces,
                fontsize=fontsize,
            )
            ax.tick_params(labeltop=layer == 0, labelleft=column == 0, length=1.5)
            ax.set_title(f"layer {layer + 1}, {name}", fontsize=fontsize + 1, pad=3)
    if title:
        figure.suptitle(title, fontsize=10)
    return _save(figure, path)


def _file_stem(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"


def alignment_figures(
    translator: Translator, sentences: Sequence[str], out_dir: Path, label: str
) -> list[Path]:
    """Translates each sentence and draws the attention that produced its translation.

    A single attention (one layer, one head: RNNsearch) becomes one heatmap; several become the
    layer x head grid. The choice follows the weights' shape, never the model's name.

    Args:
      translator: a ``seq2seq.evaluation.translator.Translator`` (its beam settings decide the
        translation whose attention is drawn).
      sentences: source sentences.
      out_dir: where ``LABEL_alignment_I.png`` (I from 1) are written.
      label: the run's name, for titles and file names.

    Returns:
      The written PNG paths, one per sentence, in order.
    """
    stem = _file_stem(label)
    drawings = [
        (
            Path(out_dir) / f"{stem}_alignment_{index}.png",
            f"{label}: sentence {index}",
            sentence,
            None,
            True,
        )
        for index, sentence in enumerate(sentences, start=1)
    ]
    return _draw_each(translator, drawings)


def draw_attention(alignment: alignment_lib.Alignment, path: Path, title: str = "") -> Figure:
    """A single attention (one layer, one head: RNNsearch) as one heatmap, several as the layer
    x head grid; the choice follows the weights' shape, never the model's name."""
    layers, heads = alignment.weights.shape[:2]
    draw = plot_rnn_alignment if (layers, heads) == (1, 1) else plot_transformer_attention
    return draw(alignment, path, title=title)


def attention_of_lines(
    translator: Translator,
    lines: Sequence[tuple[int, str, str]],
    out_dir: Path,
    label: str,
    progress: Progress = ignored,
    capped: Collection[int] = (),
) -> list[Path]:
    """Draws the attention with which ``translator`` produced each translation: ``lines`` are
    (line number from 1, source, its translation), drawn to ``out_dir/lineN.png`` (``eval.py
    --attention``). The translation is given, not searched again: its weights come from one
    teacher-forced pass (``alignment.cross_attention``). ``capped``: the numbers of the lines
    whose translation stopped at the output cap, drawn without the EOS the model never wrote.

    Returns:
      The written PNG paths, in the order of ``lines``; none for a model without attention.
    """
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    drawings = [
        (
            Path(out_dir) / f"line{number}.png",
            f"{label}, line {number}" + (" (cut off at the output cap)" * (number in capped)),
            source,
            translation,
            number not in capped,
        )
        for number, source, translation in lines
    ]
    return _draw_each(translator, drawings, progress)


def _draw_each(
    translator: Translator,
    drawings: Sequence[tuple[Path, str, str, str | None, bool]],
    progress: Progress = ignored,
) -> list[Path]:
    """Draws each (path, title, source, translation, ended) to its path: the attention with
    which ``translator`` produces that translation, or its own (None: searched now); ``ended``
    False leaves out the EOS row of a translation cut off at the output cap. A model without
    attention (RNNencdec) has nothing to draw. Returns the paths drawn, in order."""
    paths = []
    for path, title, source, translation, ended in drawings:
        alignment = alignment_lib.cross_attention(
            translator, source, target=translation, ended=ended
        )
        progress(1)
        if alignment is not None:
            draw_attention(alignment, path, title=title)
            paths.append(path)
    return paths


def plot_tuning(
    trials: Mapping[str, Sequence[tuple[Mapping[str, object], float | None]]],
    path: Path,
    *,
    keys: Sequence[str],
) -> Figure:
    """Validation BLEU of each tuning trial against the swept value, one line per model.

    Args:
      trials: model label -> its trials as (point: key -> value, validation BLEU or None for a
        trial without a score, which is left out).
      path: the PNG to write.
      keys: the swept keys in the grid's order; the x axis is the first. With several keys a
        model's line shows, at each value of the first, its best BLEU over the other keys (the
        title says so). A learning rate is drawn on a logarithmic axis.

    Returns:
      The figure; its one axes holds one ``Line2D`` per model with a scored trial, in order of x.
    """
    key = keys[0]
    numeric = all(
        isinstance(point[key], int | float) and not isinstance(point[key], bool)
        for model in trials.values()
        for point, _ in model
    )
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    ax = figure.subplots()
    for label, model in trials.items():
        best: dict[object, float] = {}
        for point, bleu in model:
            if _finite(bleu):
                value = point[key] if numeric else str(point[key])
                best[value] = max(bleu, best.get(value, -math.inf))
        if best:
            xs = sorted(best) if numeric else list(best)
            ax.plot(xs, [best[x] for x in xs], marker="o", label=label)
    if numeric and key.endswith("learning_rate"):
        ax.set_xscale("log")
    ax.set_xlabel(key)
    ax.set_ylabel("validation BLEU")
    if len(keys) > 1:
        ax.set_title(f"best over {', '.join(keys[1:])} at each {key}", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    return _save(figure, path)
