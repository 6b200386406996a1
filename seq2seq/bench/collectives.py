"""Collectives that a compiled step runs inside its loops, read from its HLO text.

A collective makes every device wait for the others. Outside a loop a step runs each once; in a
loop's body it runs at every iteration, e.g. at every time step of RNNsearch's recurrences, and
on accelerators each adds a launch and a meeting of the devices to the loop's critical path.
``bench train --meshes`` counts them per mesh, and ``tests/test_mesh.py`` checks which remain.
"""

from __future__ import annotations

import math
import re

# A computation's first line, e.g. ``%region_3.4_spmd (param: (s32[], f32[8,24])) -> ... {``.
COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_LOOP_BODY = re.compile(r"body=%?([\w.\-]+)")
_COLLECTIVE = re.compile(
    r"=\s+(.*?)\s(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\("
)


def collectives_in_loops(hlo_text: str) -> list[tuple[str, int]]:
    """(kind, numbers) of each collective in a while loop's body of a compiled module's HLO
    text, in the text's order; ``numbers`` counts the elements of its result's arrays."""
    bodies = set(_LOOP_BODY.findall(hlo_text))
    found, inside = [], False
    for line in hlo_text.splitlines():
        header = COMPUTATION.match(line)
        if header:
            inside = header.group(1) in bodies
        elif inside and (collective := _COLLECTIVE.search(line)):
            shapes = re.findall(r"\[([\d,]*)\]", collective.group(1))  # one, or a tuple's
            numbers = sum(math.prod(int(d) for d in shape.split(",") if d) for shape in shapes)
            found.append((collective.group(2), numbers))
    return found
