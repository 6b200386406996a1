"""Figures: attention as heatmaps (Bahdanau et al. 2015, Figure 3) and score statistics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np


def plot_alignment(
    ax: plt.Axes,
    weights: np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    title: str = "",
    fontsize: float | None = None,
) -> None:
    """Draws attention weights [T, S] with target tokens down and source tokens across.

    Row i is the distribution alpha_i over source positions that produced target token i; white
    is 1, black 0, as in Bahdanau et al.'s Figure 3. Tokens are drawn verbatim (a ``$`` in a
    token is not read as mathematics); ``fontsize`` sets their size (default: matplotlib's).
    """
    ax.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0, aspect="auto")
    labels = {"fontsize": fontsize, "parse_math": False}
    ax.set_xticks(range(len(source_tokens)), source_tokens, rotation=90, **labels)
    ax.set_yticks(range(len(target_tokens)), target_tokens, **labels)
    ax.xaxis.tick_top()
    ax.set_title(title, pad=40 if title else 0)


def plot_lines(
    ax: plt.Axes,
    x: Sequence[float] | Mapping[str, Sequence[float]],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    log_base: float = 2,
    legend: bool = True,
) -> None:
    """One line per named series, against a shared x or (``x`` a mapping) each its own x."""
    for label, values in series.items():
        ax.plot(x[label] if isinstance(x, Mapping) else x, values, marker="o", label=label)
    if log_x:
        ax.set_xscale("log", base=log_base)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend and series:
        ax.legend()
