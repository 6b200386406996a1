"""A comparison's work directory: what it holds, so that a folder of other things is refused.

    WORKDIR/
      report.md, report.json            the comparison's report (``seq2seq.compare.report``)
      frontier.md, frontier.json        the frontier rebuilt from records (``--records``)
      directions.md, directions.json    the verdict across directions (``--directions``)
      devices.md, devices.json, devices.png   two devices' runs side by side (``--devices``)
      figures/                          the reports' figures
      tuning/CONFIG/POINT/              a tuned comparison's trials, each a run
      NAME/, NAME-seedK/                each run (``seq2seq.records.run_directory``)
      .comparison.lock                  held by the process comparing, so a second is refused

Kept free of JAX, so that ``python -m seq2seq.compare`` refuses such a folder at once.
"""

from __future__ import annotations

from pathlib import Path

from seq2seq.records.run_directory import (
    RunDirectory,
    RunDirectoryError,
    count_entries,
    show_entries,
)

TUNING_DIR = "tuning"
LOCK_FILE = ".comparison.lock"
FIGURES_DIR = "figures"
REPORTS = frozenset(
    f"{stem}.{kind}"
    for stem in ("report", "frontier", "directions", "devices")
    for kind in ("md", "json")
) | {"devices.png"}


def foreign_entries(path: Path) -> list[str]:
    """The entries of ``path`` that no comparison writes (``NAME/`` for a folder), sorted.

    A run's folder is one holding a config, or only what a run writes (empty, or a start that
    failed); hidden entries (``.DS_Store``, ``.ipynb_checkpoints``) do not count.
    """
    if not path.is_dir():
        return []
    foreign = []
    for entry in path.iterdir():
        if entry.name.startswith(".") or entry.name in REPORTS and entry.is_file():
            continue
        if entry.is_dir() and (entry.name in (TUNING_DIR, FIGURES_DIR) or _holds_a_run(entry)):
            continue
        foreign.append(entry.name + "/" * entry.is_dir())
    return sorted(foreign)


def _holds_a_run(folder: Path) -> bool:
    run = RunDirectory(folder)
    return run.config_file.exists() or not run.other_entries()


def check_free(path: Path, named: str = "--workdir") -> None:
    """Refuses a ``--workdir`` that holds things a comparison did not write (``--workdir .``,
    a folder of comparisons, a corpus, a ``train.py`` run): its reports and runs would be mixed
    with them. ``named``: how the folder was given (a notebook's environment variable).

    Raises:
      RunDirectoryError: one line naming some of the entries; nothing is written.
    """
    others = foreign_entries(path)
    if others:
        raise RunDirectoryError(
            f"{named} {path} holds {count_entries(others)} that no comparison wrote "
            f"({show_entries(others)}); nothing was written: pass a new folder or a comparison's"
        )


def check_not_records(path: Path, named: str = "--workdir") -> None:
    """Refuses to train in a folder of run records (``--save_records``' copies, such as
    ``docs/records/...``): their runs would count as finished and then fail to score, having
    no checkpoints.

    Raises:
      RunDirectoryError: one line naming some of the records and the two fixes.
    """
    if not path.is_dir():
        return
    records = sorted(
        entry.name + "/"
        for entry in path.iterdir()
        if entry.is_dir() and RunDirectory(entry).is_record()
    )
    if records:
        raise RunDirectoryError(
            f"{named} {path} holds run records, not runs ({show_entries(records)}: no "
            f"checkpoints); pass --records {path} to rebuild their report, or a new folder "
            "to train"
        )
