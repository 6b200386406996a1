"""Figures: attention as heatmaps (Bahdanau et al. 2015, Figure 3) and score statistics."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


def plot_alignment(
    ax: plt.Axes,
    weights: np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    title: str = "",
) -> None:
    """Draws attention weights [T, S] with target tokens down and source tokens across.

    Row i is the distribution alpha_i over source positions that produced target token i; white
    is 1, black 0, as in Bahdanau et al.'s Figure 3.
    """
    ax.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(source_tokens)), source_tokens, rotation=90)
    ax.set_yticks(range(len(target_tokens)), target_tokens)
    ax.xaxis.tick_top()
    ax.set_title(title, pad=40 if title else 0)


def plot_lines(
    ax: plt.Axes,
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
) -> None:
    """One line per named series, against a shared x."""
    for label, values in series.items():
        ax.plot(x, values, marker="o", label=label)
    if log_x:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
