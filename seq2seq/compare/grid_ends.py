"""Where a tuning's choices sit at an end of its grid.

A value chosen at the largest (or smallest) of the values tried may be beaten by one beyond them,
which nobody tried: the reports say so wherever every model (or every size of a family) chose the
same end, and wherever a model passed over values inside a grid of three or more for an end.
"""

from __future__ import annotations

import re


def as_typed(value: object) -> str:
    """A grid value as it was typed: ``0.001``, ``'warmup_rsqrt'``, or a factor ``x0.5``."""
    relative = isinstance(value, str) and re.fullmatch(r"x[0-9.eE+-]+", value)
    return value if relative else repr(value)


def _ordered(value: object) -> float | None:
    """A grid value as a number to order by (a factor ``x0.5`` as 0.5); None for a name."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"x[0-9.eE+-]+", value):
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
