"""Where a tuning's choices sit at an end of its grid.

A value chosen at the largest (or smallest) of the values tried may be beaten by one beyond them,
which nobody tried: the reports say so wherever every model (or every size of a family) chose the
same end, and wherever a model passed over values inside a grid of three or more for an end.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from seq2seq.config import for_model

FACTOR = re.compile(r"x[0-9.eE+-]+")  # a grid value relative to the config's own: ``x0.5``


def as_typed(value: object) -> str:
    """A grid value as it was typed: ``0.001``, ``'warmup_rsqrt'``, or a factor ``x0.5``."""
    relative = isinstance(value, str) and FACTOR.fullmatch(value)
    return value if relative else repr(value)


def _ordered(value: object) -> float | None:
    """A grid value as a number to order by (a factor ``x0.5`` as 0.5); None for a name."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and FACTOR.fullmatch(value):
        return float(value[1:])
    return None


def grid_edges(
    grid: dict[str, list], models: list[dict], everyone: str = "every model"
) -> list[str]:
    """Choices at an end of a numeric axis of ``grid``, where the best value may lie beyond what
    was tried: an end that all ``models`` chose (two or more; said as ``everyone``), and any
    model's end of an axis of three values or more (which it preferred to a value inside). One
    line each."""
    lines = []
    chosen = {model["name"]: model["chosen"] for model in models if model["chosen"] is not None}
    for key, values in grid.items():
        numbers = [_ordered(value) for value in values]
        if len(set(numbers)) < 2 or None in numbers:
            continue
        ends = {
            name: ("largest" if _ordered(point[key]) == max(numbers) else "smallest")
            for name, point in chosen.items()
            if key in point and _ordered(point[key]) in (min(numbers), max(numbers))
        }
        if len(chosen) > 1 and len(ends) == len(chosen) and len(set(ends.values())) == 1:
            value = as_typed(next(iter(chosen.values()))[key])
            lines.append(
                f"{everyone} chose the {next(iter(ends.values()))} `{key}` of the grid ({value})"
            )
        elif len(set(numbers)) > 2:
            lines += [
                f"`{name}` chose the {end} `{key}` of the grid ({as_typed(chosen[name][key])})"
                for name, end in ends.items()
            ]
    return lines


def pooled_grid_edges(
    family: str, tunings: Sequence[tuple[str, dict | None]], everyone: str
) -> list[str]:
    """``grid_edges`` over several tunings of one family, each run on its own (a frontier's
    sizes, or one size in several directions), named by the first of each pair; their tuning
    records are pooled by axis: the same key, as the family reads it, and the same values.
    ``everyone`` says who chose, with ``{n}`` for how many, e.g. ``"every rnnsearch size ({n})"``.
    """
    by_axis: dict[tuple, list[dict]] = {}
    for name, tuning in tunings:
        chosen = tuning["models"][0]["chosen"] if tuning else None
        if chosen is None:
            continue
        for key, values in tuning["grid"].items():
            axis = (for_model(key, family), tuple(values))
            by_axis.setdefault(axis, []).append({"name": name, "chosen": {axis[0]: chosen[key]}})
    lines = []
    for (key, values), models in by_axis.items():
        lines += grid_edges({key: list(values)}, models, everyone.format(n=len(models)))
    return lines


def edges_paragraph(lines: Sequence[str]) -> list[str]:
    """The report's paragraph for ``grid_edges``' lines (none for none)."""
    if not lines:
        return []
    return [
        f"**At the end of the grid**: {'; '.join(lines)}. Nothing beyond it was tried, so the "
        "best value may lie there; a grid that goes past it would tell.",
        "",
    ]
