"""Compute frontiers: which model family translates better at each training cost.

A frontier comparison trains each family at several sizes, each run to convergence (early
stopping) or its cap, and asks at each level of training compute: of the runs that a researcher
with that much compute could have trained to their end, which does each family's validation
choose, and how do their test scores compare? Everything here reads only a run's *record*,
the files a finished run keeps without its checkpoints (``RECORD_FILES`` and its scored
split's eval JSON and hypotheses), so the same report is built from live work directories and
from records committed to the repository.

* ``upper_envelope``: a family's frontier, the best validation BLEU any of its runs had reached
  by each amount of training FLOPs;
* ``crossings``: the compute levels where the leading family changes;
* ``choose``: a family's pick at a compute level, by validation only (never the test split);
* ``family_envelope``: the same frontier against steps or training minutes on the device (what
  each family pays to reach a validation level, with intervals over seeds, is
  ``seq2seq.compare.cost``'s).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import logging
import math
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import ml_collections

from seq2seq import config as config_lib
from seq2seq.records.run_directory import RunDirectory, show_entries
from seq2seq.records.whole import written_whole
from seq2seq.report.tables import counted
from seq2seq.training.stopping import CONVERGED

logger = logging.getLogger(__name__)

# What a run's record keeps (beside its scored split's eval JSON and hypotheses): no checkpoints.
# tuning.json is there only for a run whose values a tuned comparison chose.
RECORD_FILES = ("config.json", "metrics.jsonl", "provenance.json", "tuning.json")
# ``<family>-<size>`` or ``<family>-<size>-seed<k>`` (the frontier suite's run names).
_NAME = re.compile(r"^(?P<config>.+?)(?:-seed(?P<seed>\d+))?$")


@dataclasses.dataclass(frozen=True)
class Point:
    """One validation point of a run."""

    step: int
    minutes: float  # training minutes (validation, compiling and saving off the clock)
    flops: float  # analytic training FLOPs spent so far
    bleu: float  # validation BLEU (greedy, ``eval.num_examples`` sentences)
    validation_minutes: float = 0.0  # minutes of validation so far, this one's included

    @property
    def minutes_with_validation(self) -> float:
        return self.minutes + self.validation_minutes


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What the frontier needs of one finished run."""

    name: str  # the run's folder: ``<family>-<size>[-seed<k>]``
    config_name: str  # the name without its seed suffix: one size of one family
    family: str  # config.model.name
    seed: int
    curve: tuple[Point, ...]
    stop_reason: str  # "converged", "cap", or "" for a run that has not ended
    steps: int
    minutes: float
    flops: float  # total training FLOPs
    result: dict | None  # the eval JSON of the scored split under the frontier's rule
    hypotheses: tuple[str, ...]  # its translations, one per scored sentence
    config: ml_collections.ConfigDict
    tuning: dict | None = None  # how its values were chosen (``RunDirectory.read_tuning``)
    device: str = ""  # what trained it, as JAX names the device (``run_device``)
    compute_dtype: str = ""  # what its products computed in, at its latest start ("" unrecorded)
    jax_version: str = ""  # the JAX that trained it, at its latest start ("" unrecorded)

    @property
    def converged(self) -> bool:
        return self.stop_reason == CONVERGED

    @property
    def best(self) -> Point | None:
        """The point with the highest validation BLEU (ties: the earlier)."""
        return max(self.curve, key=lambda p: (p.bleu, -p.step), default=None)

    @property
    def test_bleu(self) -> float | None:
        return None if self.result is None else float(self.result["bleu"])


def read_run(run: RunDirectory, split: str, rule: str) -> RunRecord:
    """The record of ``run``, scored on ``split`` under checkpoint rule ``rule``.

    Raises:
      RunDirectoryError, ConfigError: the folder holds no run (one line).
    """
    config = run.load_config()
    records = run.read_metrics()
    curve = tuple(
        Point(
            int(r["step"]),
            r["elapsed_seconds"] / 60,
            float(r["train_flops"]),
            float(r["bleu"]),
            r.get("validation_seconds", 0.0) / 60,
        )
        for r in records
        if r.get("kind") == "validation" and "bleu" in r
    )
    trained = [r for r in records if r.get("kind") in ("train", "stop")]
    last = trained[-1] if trained else {}
    stop = records[-1] if records and records[-1].get("kind") == "stop" else {}
    result = run.read_eval_result(split, rule)
    hypotheses_file = run.hypotheses_file(split, rule)
    hypotheses = (
        tuple(hypotheses_file.read_text(encoding="utf-8").splitlines())
        if result is not None and hypotheses_file.exists()
        else ()
    )
    match = _NAME.match(run.path.name)
    return RunRecord(
        name=run.path.name,
        config_name=match["config"],
        family=config.model.name,
        seed=int(config.seed),
        curve=curve,
        stop_reason=stop.get("reason", ""),
        steps=int(last.get("step", 0)),
        minutes=float(last.get("elapsed_seconds", 0.0)) / 60,
        flops=float(last.get("train_flops", 0.0)),
        result=result,
        hypotheses=hypotheses,
        config=config,
        tuning=run.read_tuning(),
        device=run_device(run),
        **latest_start(run),
    )


def run_device(run: RunDirectory) -> str:
    """The device that trained ``run``, from its provenance: JAX's device kind (``NVIDIA H100
    80GB HBM3``; ``cpu`` with its usable cores, ``cpu, 1 core``), several joined by " + " where
    its starts differ; "" without provenance."""
    from seq2seq.records import provenance  # here: it loads JAX, which a refusal never waits for

    names = []
    for entry in provenance.read_entries(run):
        name = entry.get("device_kind") or ""
        if name == "cpu" and entry.get("cpu_cores"):
            cores = entry["cpu_cores"]
            name = f"cpu, {counted(cores, 'core')}"
        names.append(name)
    return " + ".join(dict.fromkeys(names))


def latest_start(run: RunDirectory) -> dict[str, str]:
    """``compute_dtype`` and ``jax_version`` of ``run``'s latest start, from its provenance
    ("" where it recorded none)."""
    from seq2seq.records import provenance

    if not (entries := provenance.read_entries(run)):
        return {}
    return {
        "compute_dtype": entries[-1].get("compute_dtype") or "",
        "jax_version": entries[-1].get("packages", {}).get("jax") or "",
    }


def check_replaceable(folder: Path) -> None:
    """Refuses to replace ``folder`` unless it holds a record and nothing more (its files,
    ``eval/``, hidden ones): a folder with checkpoints or a tokenizer is a run, hours of work,
    never a copy to refresh.

    Raises:
      ValueError: one line naming the folder, what else it holds and the fix.
    """
    if not folder.is_dir():
        raise ValueError(f"--save_records: {folder} is a file, not a run's record; move it away")
    kept = {*RECORD_FILES, "eval"}
    other = sorted(
        path.name + "/" * path.is_dir()
        for path in folder.iterdir()
        if path.name not in kept and not path.name.startswith(".")
    )
    if other:
        raise ValueError(
            f"--save_records: {folder} holds more than a run's record ({show_entries(other)}): "
            "a run, not a copy of one; nothing was replaced: pass another --save_records folder"
        )


def save_record(run: RunDirectory, destination: Path, split: str, rule: str) -> Path:
    """Copies the record of ``run`` (no checkpoints, tokenizer or TensorBoard events) into
    ``destination/<run name>``, replacing an older copy there; returns that folder.

    Raises:
      ValueError: the run has not been scored on ``split`` under ``rule`` (say how to score it),
        or the folder to replace is more than a record (``check_replaceable``).
    """
    if run.read_eval_result(split, rule) is None:
        raise ValueError(
            f"{run.path} has no scores of {split} under {rule!r}; score it first (compare "
            f"--checkpoint {rule}, or eval.py --split {split} --checkpoint {rule})"
        )
    target = destination / run.path.name
    if target.exists():
        check_replaceable(target)
    # Built beside it under a hidden name, then swapped in: a copy cut short (a worker killed
    # at its deadline) left half a record that was read, and packed, as a whole one.
    with written_whole(target) as folder:
        building = RunDirectory(folder)
        building.eval_dir.mkdir()
        for name in RECORD_FILES:
            if (run.path / name).exists():
                shutil.copy2(run.path / name, building.path / name)
        for path in (run.eval_result_file(split, rule), run.hypotheses_file(split, rule)):
            shutil.copy2(path, building.eval_dir / path.name)
    return target


def read_records(
    directory: Path, split: str | None, rule: str, flag: str = "--records"
) -> list[RunRecord]:
    """Every run record in ``directory``'s subfolders (sorted by name), scored on ``split`` (a
    role such as ``test`` is resolved per config; None: each config's test split).

    Raises:
      ValueError: ``directory`` (given by ``flag``) holds no run records, or none of them is
        scored under ``rule`` while some are under another (one line naming it).
    """
    from seq2seq.compare.checks import scored_split

    folders = sorted(
        p
        for p in Path(directory).iterdir()
        if (p / "config.json").exists() and not p.name.startswith(".")  # hidden: a copy under way
    )
    if not folders:
        raise ValueError(f"{flag} {directory} holds no run folders (each with a config.json)")
    runs, tasks = [], collections.defaultdict(list)
    for folder in folders:
        run = RunDirectory(folder)
        try:
            config = run.load_config()
        except config_lib.SavedConfigError as error:  # another tool's (an export's)
            raise ValueError(
                f"{flag} {directory}: {folder.name} is not a run record (its config.json is not "
                f"seq2seq's: {error.reason}); move it out, or pass a folder of run records only"
            ) from None
        scored = scored_split(config, split)
        runs.append(read_run(run, scored, rule))
        tasks[f"{config.data.src_lang}->{config.data.tgt_lang} on {scored}"].append(folder.name)
    check_one_task(tasks, f"{flag} {directory}")
    if all(run.result is None for run in runs) and (held := scored_rules(folders)):
        raise ValueError(
            f"{flag} {directory}: no run is scored under --checkpoint {rule}; these records "
            f"hold scores under {', '.join(held)}: pass --checkpoint {held[0]}"
        )
    return runs


def check_one_task(tasks: dict[str, list[str]], where: str) -> None:
    """Refuses records of more than one task (``tasks``: the runs of each direction and scored
    split): their differences would set a German->English run's BLEU against an
    English->French one's, and pass for a verdict.

    Raises:
      ValueError: one line naming each task with its runs, and the fix.
    """
    if len(tasks) > 1:
        shown = "; ".join(f"{task}: {show_entries(names)}" for task, names in sorted(tasks.items()))
        raise ValueError(
            f"{where} mixes translation tasks ({shown}): a comparison scores one direction on "
            "one test set; give each its own folder (compare --directions reads one per "
            "direction)"
        )


def scored_rules(folders: Iterable[Path]) -> list[str]:
    """The checkpoint rules (``average:5``, ``best``, ``latest``, a step) that the runs in
    ``folders`` were scored under, from their eval files' names; most used first."""
    counts: dict[str, int] = {}
    for folder in folders:
        for path in (Path(folder) / "eval").glob("*.json"):
            stem = path.name.removesuffix(".json")
            suffix = stem.partition("@")[2].partition("-")[0]
            rule = re.sub(r"^average(\d+)$", r"average:\1", re.sub(r"^step", "", suffix))
            rule = rule or "latest"
            counts[rule] = counts.get(rule, 0) + 1
    return sorted(counts, key=lambda rule: -counts[rule])


def upper_envelope(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The frontier of (cost, score) points: the best score reached at or below each cost.

    Returns the points where that best rises, in order of cost: a step function that holds
    each score until the next point. Points of equal cost keep the best.
    """
    envelope: list[tuple[float, float]] = []
    for cost, score in sorted(points, key=lambda p: (p[0], -p[1])):
        if not envelope or score > envelope[-1][1]:
            if envelope and envelope[-1][0] == cost:
                continue
            envelope.append((cost, score))
    return envelope


def envelope_at(envelope: Sequence[tuple[float, float]], cost: float) -> float | None:
    """The envelope's score at ``cost``; None below its first point."""
    index = bisect.bisect_right([c for c, _ in envelope], cost) - 1
    return envelope[index][1] if index >= 0 else None


def crossings(
    envelope_a: Sequence[tuple[float, float]], envelope_b: Sequence[tuple[float, float]]
) -> list[tuple[float, str]]:
    """Where the lead changes between two frontiers: (cost, "a" or "b", the new leader), at
    each cost from which on the other frontier leads, over the costs both cover. A tie is no
    lead: the lead changes when the other side is strictly ahead."""
    costs = sorted({c for c, _ in (*envelope_a, *envelope_b)})
    start = max(envelope_a[0][0], envelope_b[0][0]) if envelope_a and envelope_b else math.inf
    changes: list[tuple[float, str]] = []
    leader = None
    for cost in costs:
        if cost < start:
            continue
        a, b = envelope_at(envelope_a, cost), envelope_at(envelope_b, cost)
        now = "a" if a > b else "b" if b > a else leader
        if leader is not None and now != leader:
            changes.append((cost, now))
        leader = now
    return changes


def family_envelope(runs: Iterable[RunRecord], axis: str = "flops") -> list[tuple[float, float]]:
    """A family's frontier of validation BLEU against ``axis`` ("flops", "step", "minutes"),
    over every validation point of every run."""
    return upper_envelope((getattr(point, axis), point.bleu) for run in runs for point in run.curve)


@dataclasses.dataclass(frozen=True)
class Choice:
    """A family's pick at a compute level: one size (all its seeds)."""

    config_name: str
    runs: tuple[RunRecord, ...]  # its seeds
    validation_bleu: float  # mean over seeds of each run's best validation BLEU
    flops: float  # the most training FLOPs any of its seeds spent

    @property
    def test_bleus(self) -> list[float]:
        return [run.test_bleu for run in self.runs]


def by_config(runs: Iterable[RunRecord]) -> dict[str, list[RunRecord]]:
    """Runs grouped by size (their seeds together), in order of first appearance."""
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(run.config_name, []).append(run)
    return groups


def choose(runs: Iterable[RunRecord], family: str, budget: float = math.inf) -> Choice | None:
    """The size of ``family`` whose seeds, each finished (converged or capped) and scored within
    ``budget`` training FLOPs, reached the highest mean best validation BLEU; None if none did.

    Validation alone chooses: the test scores of the chosen size are then what the report
    compares, so no test score picks the run it is reported for.
    """
    candidates = []
    for name, members in by_config(r for r in runs if r.family == family).items():
        usable = [r for r in members if r.stop_reason and r.test_bleu is not None and r.curve]
        if not usable or len(usable) != len(members) or max(r.flops for r in usable) > budget:
            continue
        bleu = sum(r.best.bleu for r in usable) / len(usable)
        candidates.append(Choice(name, tuple(usable), bleu, max(r.flops for r in usable)))
    return max(candidates, key=lambda c: (c.validation_bleu, -c.flops), default=None)


def compute_levels(runs: Sequence[RunRecord], families: Sequence[str]) -> list[float]:
    """Levels of training FLOPs (1, 2 and 5 times powers of ten) at which every family has a
    finished, scored run: from the cheapest level where all do, up to the largest run's cost."""
    firsts = []
    for family in families:
        finished = [r.flops for r in runs if r.family == family and r.stop_reason and r.result]
        if not finished:
            return []
        firsts.append(min(finished))
    low, high = max(firsts), max(r.flops for r in runs)
    levels = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            level = mantissa * 10.0**exponent
            if low <= level < high * 2:
                levels.append(level)
    return levels


def references_for(record: RunRecord) -> list[str]:
    """The reference translations of the record's scored sentences, read from its data.

    Raises:
      ConfigError: the data the run was scored on is not where its config says (one line).
    """
    from seq2seq.data.pipeline import load_pairs

    config = record.config
    if config.data.source == "text" and not Path(config.data.dir).exists():
        moved = config_lib.MULTI30K
        if Path(config.data.dir).name != moved.name or not moved.exists():
            raise config_lib.ConfigError(
                f"{record.name} was scored on {config.data.dir}, which is missing here; "
                "put the data there (or Multi30k next to the repository)"
            )
        config = config.copy_and_resolve_references()
        config.data.dir = str(moved)
    pairs = load_pairs(config, record.result["split"])
    return [target for _, target in pairs[: record.result.get("max_sentences")]]
