"""Markdown tables for the comparison report: one row per run, seeds shown as mean ± std."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

# How a column shows its values: a format spec (".2f", ",d") or a function of the raw value.
Format = str | Callable[[object], str]

MISSING = "—"


def mean_std_max(values: Sequence[float | None], spec: str = ".2f", *, best: str = "max") -> str:
    """Several seeds' values as "mean ± std (max M)", as Britz et al. (2017) report them.

    The std is the sample standard deviation (``ddof=1``, Bessel's correction): for [1, 3]
    the cell reads "2.00 ± 1.41 (max 3.00)". ``best="min"`` shows the minimum instead (for
    perplexity), ``best=""`` neither. ``None`` values (seeds without a result) are left out and
    the cell says how many seeds it holds; a single value is shown alone.
    """
    if best not in ("max", "min", ""):
        raise ValueError(f"best={best!r}; use 'max', 'min' or '' (none)")
    present = [float(value) for value in values if value is not None]
    if not present:
        return MISSING
    if len(present) == 1:
        cell = format(present[0], spec)
    else:
        cell = f"{statistics.mean(present):{spec}} ± {statistics.stdev(present):{spec}}"
        if best:
            extreme = max(present) if best == "max" else min(present)
            cell += f" ({best} {extreme:{spec}})"
    if len(present) < len(values):
        cell += f" [{len(present)} of {len(values)} seeds]"
    return cell


def lowest_is_best(spec: str = ".2f") -> Callable[[object], str]:
    """A column format for a figure where lower is better (perplexity): several seeds' cell
    names the lowest, the best seed's, where ``mean_std_max`` would name the worst."""

    def cell(value: object) -> str:
        if isinstance(value, list | tuple):
            return mean_std_max(value, spec, best="min")
        return format(value, spec)

    return cell


def counted(n: int, noun: str) -> str:
    """``"1 seed"``, ``"4 seeds"``: a count with its noun, plural when it is not one."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def difference_cell(entry: Mapping[str, object]) -> str:
    """``+0.62 [-0.55, +1.84], Holm p 0.977``, marked **significant** where it is: one tested
    difference (``significance.adjusted_entries``) in a table cell."""
    interval = "[{:+.2f}, {:+.2f}]".format(*entry["ci95"]) if entry["ci95"] else "—"
    mark = " **significant**" if entry["significant"] else ""
    return f"{entry['difference']:+.2f} {interval}, Holm p {entry['p_value_holm']:.3g}{mark}"


def _escape(text: str) -> str:
    """Text safe inside one markdown table cell: no column breaks, no line breaks."""
    return " ".join(text.splitlines()).replace("|", "\\|")


def format_cell(value: object, spec: Format = "") -> str:
    """One cell: a missing value as "—", a list as mean ± std (max), text as itself.

    Args:
      value: a number, a string (shown as is, e.g. "failed: NaN loss at step 40"), a list of
        numbers (one per seed, see ``mean_std_max``) or ``None``.
      spec: a format spec applied to numbers, or a function that formats the raw value.
    """
    if value is None:
        return MISSING
    if callable(spec):
        return _escape(spec(value))
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, list | tuple):
        return mean_std_max(value, spec or ".2f")
    return format(value, spec)


def markdown_table(
    rows: Sequence[Mapping[str, object]], columns: Sequence[tuple[str, str, Format]]
) -> str:
    """A GitHub-flavoured markdown table, one line per row, ending with a newline.

    Args:
      rows: one mapping per table row; a key it lacks shows as "—".
      columns: (key in the row, column header, format) in display order; see ``format_cell``.
    """
    lines = [
        "| " + " | ".join(_escape(header) for _, header, _ in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in rows:
        cells = [format_cell(row.get(key), spec) for key, _, spec in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
