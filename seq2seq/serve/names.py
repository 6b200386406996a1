"""The names a server gives its runs: read before any model loads, so that two paths to one run
are refused at once (this module imports neither JAX nor the web framework)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def model_names(paths: Sequence[str | Path]) -> list[str]:
    """Each run's folder name, with as many of its parents' names before it as tell it from
    the others (``a/x/t`` and ``b/x/t``), spelled as given (a link keeps its own name).

    Raises:
      ValueError: two paths are one run (the same folder written twice, with a trailing slash,
        or through a link): it would be served once under one name, the other dropped.
    """
    folders = [Path(path).resolve() for path in paths]
    for i, folder in enumerate(folders):
        if folder in folders[:i]:
            first = paths[folders.index(folder)]
            raise ValueError(
                f"--workdir {paths[i]} is the run of --workdir {first}; pass each run once"
            )
    parts = [Path(os.path.abspath(path)).parts for path in paths]
    depth = [1] * len(paths)
    while True:
        names = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        clashes = [i for i, name in enumerate(names) if names.count(name) > 1]
        if not clashes:
            return names
        for i in clashes:
            depth[i] += 1
