"""What produced a run: the code, the packages and the devices, recorded in its work directory.

``record_start`` adds one entry to ``WORKDIR/provenance.json`` each time training starts or
resumes there, and warns (one line) when a resume runs under other package versions or another
device kind than the start before it. ``for_evaluation`` is what ``eval.py`` stores beside its
scores; ``summary`` is the short form a comparison of runs shows.

The file holds one JSON object, ``{"entries": [ENTRY, ...]}``, oldest first; an entry reads::

    {"started": "2025-01-31T12:00:00+00:00", "commit": "4f3a...", "dirty": false,
     "argv": ["train.py", "--config", ...], "config_overrides": ["--config.train.steps=20"],
     "python": "3.11.7", "platform": "Linux-...-x86_64", "processor": "AMD EPYC",
     "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1,
             "simd": ["avx", "avx2", "avx512f", ...]}, "packages": {"jax": "0.10.2", ...},
     "backend": "cpu", "device_kind": "cpu", "device_count": 1, "process_count": 1,
     "glibc_tunables": "glibc.malloc.arena_max=1:...", "compute_dtype": "float32"}
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import logging
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import jax

from seq2seq.records.run_directory import RunDirectory, read_json
from seq2seq.records.whole import write_whole

logger = logging.getLogger(__name__)

# The installed distributions whose versions can change a run's numbers.
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "grain",
    "tensorflow-datasets",
    "sentencepiece",
    "sacrebleu",
)
# The instruction-set extensions XLA's CPU compiler picks its code by: machines that differ in one
# of them run other kernels, and their float32 results differ in the last bits, so a run replays
# bit for bit only on a CPU with the same ones (and the same family and model).
SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
)
# The checkout this package was imported from (a git work tree when installed editable).
PROJECT_DIR = Path(__file__).resolve().parents[1]


def git_state(directory: Path = PROJECT_DIR) -> dict[str, object]:
    """The commit checked out in ``directory`` and whether files differ from it.

    Untracked files that git does not ignore count as changes (a new config changes a run).
    Both values are None when ``directory`` is not a git checkout or git is not installed.
    """
    try:
        commit = _git(directory, "rev-parse", "HEAD")
        changes = _git(directory, "status", "--porcelain")
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(changes)}


def _git(directory: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(directory), *args], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def package_versions() -> dict[str, str | None]:
    """The installed version of each of ``PACKAGES`` (None for one that is not installed)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _read_cpuinfo() -> str:
    """The text of ``/proc/cpuinfo``, or "" where there is none (not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _first_processor(cpuinfo: str | None = None) -> dict[str, str]:
    """The first processor's block of ``cpuinfo`` (read from ``/proc/cpuinfo`` when None) as
    key -> value."""
    if cpuinfo is None:
        cpuinfo = _read_cpuinfo()
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def processor(cpuinfo: str | None = None) -> str:
    """The CPU's model name (``/proc/cpuinfo``), or ``platform.processor()`` elsewhere."""
    return _first_processor(cpuinfo).get("model name") or platform.processor() or "unknown"


def cpu(cpuinfo: str | None = None) -> dict[str, object] | None:
    """The CPU as ``/proc/cpuinfo`` tells machines apart, which a model name often does not
    ("AMD EPYC" covers several generations): vendor, family, model, stepping and which of
    ``SIMD_FLAGS`` it has. None where there is no ``/proc/cpuinfo`` (or ``cpuinfo``, its text).
    """
    fields = _first_processor(cpuinfo)
    if "flags" not in fields:
        return None
    flags = set(fields["flags"].split())

    def number(key: str) -> int | None:
        return int(fields[key]) if fields.get(key, "").isdigit() else None

    return {
        "vendor": fields.get("vendor_id"),
        "family": number("cpu family"),
        "model": number("model"),
        "stepping": number("stepping"),
        "simd": [flag for flag in SIMD_FLAGS if flag in flags],
    }


def cpu_label(facts: dict[str, object] | None) -> str | None:
    """``cpu()``'s facts in one line ("AuthenticAMD 25/17/1 avx2 avx512f ..."), or None."""
    if not facts:
        return None
    generation = "/".join(str(facts.get(key)) for key in ("family", "model", "stepping"))
    return " ".join([str(facts.get("vendor")), generation, *facts.get("simd", [])])


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, not the machine's total)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def environment() -> dict[str, object]:
    """The code, packages and devices of this process (initializes JAX's backend)."""
    devices = jax.devices()
    cpuinfo = _read_cpuinfo()
    return {
        **git_state(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": processor(cpuinfo),
        "cpu": cpu(cpuinfo),
        "cpu_cores": usable_cores(),
        "packages": package_versions(),
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "process_count": jax.process_count(),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),  # seq2seq/runtime/host_memory.py
    }


def config_overrides(argv: Sequence[str]) -> list[str]:
    """The ``--config.KEY=VALUE`` arguments of a command line, each as one string.

    ``--config.KEY VALUE`` (two arguments) is joined into ``--config.KEY=VALUE``.
    """
    overrides = []
    for i, argument in enumerate(argv):
        if not argument.startswith(("--config.", "--noconfig.")):
            continue
        following = argv[i + 1] if i + 1 < len(argv) else None
        if "=" not in argument and following is not None and not following.startswith("-"):
            argument = f"{argument}={following}"
        overrides.append(argument)
    return overrides


def start_entry(argv: Sequence[str]) -> dict[str, object]:
    """The entry that a start (or resume) of training with command line ``argv`` records."""
    facts = environment()
    return {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": facts.pop("commit"),
        "dirty": facts.pop("dirty"),
        "argv": list(argv),
        "config_overrides": config_overrides(argv),
        **facts,
    }


def read_entries(workdir: Path | RunDirectory) -> list[dict]:
    """The entries of ``WORKDIR/provenance.json``, oldest first ([] when there is none)."""
    path = RunDirectory.at(workdir).provenance_file
    if not path.exists():
        return []
    return read_json(path).get("entries") or []


def changes(previous: dict, current: dict) -> list[str]:
    """What differs between two entries' Python, package versions, device kind, compute dtype
    and CPU (an entry from before the dtype or the CPU was recorded has none to compare; a CPU
    change matters on a CPU backend, where it changes the compiled kernels' last bits).

    Returns:
      One ``"NAME OLD -> NEW"`` string per difference, e.g. ``["jax 0.9.0 -> 0.10.2"]``.
    """
    before = {"python": previous.get("python"), **previous.get("packages", {})}
    after = {"python": current.get("python"), **current.get("packages", {})}
    before["device_kind"] = previous.get("device_kind")
    after["device_kind"] = current.get("device_kind")
    if "compute_dtype" in previous:
        before["compute_dtype"] = previous["compute_dtype"]
        after["compute_dtype"] = current.get("compute_dtype")
    if previous.get("cpu") and current.get("cpu"):
        before["cpu"] = cpu_label(previous["cpu"])
        after["cpu"] = cpu_label(current["cpu"])
    return [
        f"{name} {before.get(name)} -> {after.get(name)}"
        for name in after
        if before.get(name) != after.get(name)
    ]


def record_start(
    workdir: Path, argv: Sequence[str] | None = None, compute_dtype: str | None = None
) -> dict[str, object]:
    """Appends this start of training to ``WORKDIR/provenance.json`` and returns the entry.

    Call it from process 0 only. A resume under other versions or another device kind goes on,
    after one warning line naming what changed. An unreadable file is kept aside (renamed to
    ``provenance.json.unreadable``) and a new one begun, so a damaged record never stops a run.

    Args:
      workdir: the run's work directory (it exists).
      argv: the command line to record; default ``sys.argv``.
      compute_dtype: the dtype the model computes in on these devices
        (``seq2seq.models.compute_dtype``: ``train.dtype`` with "auto" resolved), recorded when
        given.
    """
    workdir = Path(workdir)
    path = RunDirectory(workdir).provenance_file
    entry = start_entry(sys.argv if argv is None else argv)
    if compute_dtype is not None:
        entry["compute_dtype"] = compute_dtype
    try:
        entries = read_entries(workdir)
    except (ValueError, KeyError, TypeError) as error:
        kept = path.with_name(path.name + ".unreadable")
        logger.warning("%s is unreadable (%s); kept as %s, starting anew", path, error, kept)
        path.replace(kept)
        entries = []
    if entries and (changed := changes(entries[-1], entry)):
        logger.warning(
            "resuming %s under a different environment than its last start: %s; "
            "its results may differ from a run without the change",
            workdir,
            ", ".join(changed),
        )
    write_whole(path, json.dumps({"entries": [*entries, entry]}, indent=2) + "\n")
    return entry


def summary(workdir: Path) -> dict[str, object] | None:
    """The facts a comparison of runs shows, from the run's latest start; None without a record.

    ``changed_during_run`` lists what differed between successive starts (see ``changes``);
    ``commits`` every distinct commit the run was trained from, in order.
    """
    entries = read_entries(workdir)
    if not entries:
        return None
    latest = entries[-1]
    commits = list(dict.fromkeys(entry.get("commit") for entry in entries))
    return {
        "commit": latest.get("commit"),
        "dirty": any(entry.get("dirty") for entry in entries),
        "device_kind": latest.get("device_kind"),
        "device_count": latest.get("device_count"),
        "processor": latest.get("processor"),
        "cpu": cpu_label(latest.get("cpu")),
        "cpu_cores": latest.get("cpu_cores"),
        "jax": latest.get("packages", {}).get("jax"),
        "compute_dtype": latest.get("compute_dtype"),
        "starts": len(entries),
        "commits": commits,
        "changed_during_run": _changes_between_starts(entries),
    }


def _changes_between_starts(entries: Sequence[dict]) -> list[str]:
    """What changed from each start to the next (see ``changes``)."""
    pairs = zip(entries, entries[1:], strict=False)  # each start with the one before it
    return [change for before, after in pairs for change in changes(before, after)]


def for_evaluation(workdir: Path | RunDirectory) -> dict[str, object]:
    """What ``eval.py`` stores with its scores: the run's latest start and its own environment."""
    entries = read_entries(workdir)
    return {
        "run": entries[-1] if entries else None,
        "changed_during_run": _changes_between_starts(entries),
        "evaluation": environment(),
    }
