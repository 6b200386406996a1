"""The layout of a run's work directory: the one module that knows where each file lives.

    WORKDIR/
      config.json        the config the run trained with (``save_config`` / ``load_config``)
      provenance.json    code, packages and devices behind every start and resume
      corpus.json        the training files' names, sizes and SHA-256 (text data), so that a
                         corpus moved to another folder is known as the one the run trained on
      tokenizer/         SentencePiece model(s), trained once and reused by resumes and eval
      encoded/           the training split tokenized once, memory-mapped by later starts;
                         one folder, the others (stale or half-written) deleted at start
      checkpoints/       orbax checkpoints (state, data position, elapsed training time)
      metrics.jsonl      one JSON object per logged step or validation
      tensorboard/       the same metrics as TensorBoard events
      tuning.json        a tuned comparison's final runs: how their values were chosen;
      winning_trial.txt  and, in one started as a copy of its winning trial, that trial
      averaged_from.json an averaged run (``seq2seq.evaluation.average``): its source and steps
      .training.lock     held by the process training the run, so that a second one is refused
      eval/SPLIT.json    what ``eval.py`` measured; eval/SPLIT.hyp.txt its translations
      eval/SPLIT@RULE.*  the same, scored by another checkpoint rule (``@best``, ``@average5``,
                         ``@step1500``), so scoring a run two ways keeps both

Training, evaluation, averaging and the comparison all go through ``RunDirectory``, so changing
the layout means changing this file only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import ml_collections

from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import CheckpointRule

# ``config -> {file name: {"bytes", "sha256"}}`` of its training files, or None where the config
# names its pairs itself (``seq2seq.data.sources.corpus_fingerprint``; data sits above records).
Fingerprint = Callable[[ml_collections.ConfigDict], "dict[str, dict] | None"]


# The names a run's folder may hold (the layout above, and what a tuned comparison adds: its
# record and the mark of a final run started from its winning trial).
LAYOUT = frozenset(
    {
        "config.json",
        "provenance.json",
        "corpus.json",
        "tokenizer",
        "encoded",
        "checkpoints",
        "metrics.jsonl",
        "tensorboard",
        "eval",
        "tuning.json",
        "averaged_from.json",
        "winning_trial.txt",
    }
)


def owning_run(path: str | Path) -> Path | None:
    """The run folder whose own files (``LAYOUT``: its config, checkpoints, metrics, eval/...)
    ``path`` is one of or lies in, or None: what a command writing a file of the user's (a
    translation, a figure) must not overwrite. A file of another name beside them is not one."""
    path = Path(path).resolve()
    for parent in path.parents:
        if (parent / "config.json").is_file() and path.relative_to(parent).parts[0] in LAYOUT:
            return parent
    return None


class RunDirectoryError(ValueError):
    """A path is not usable as (or does not hold) a run; the message names the fix."""


class RunDirectory:
    """A training run's work directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def at(cls, place: str | Path | RunDirectory) -> RunDirectory:
        """``place`` itself when it is a RunDirectory, else the run directory at that path."""
        return place if isinstance(place, RunDirectory) else cls(place)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    @property
    def provenance_file(self) -> Path:
        return self.path / "provenance.json"

    @property
    def corpus_file(self) -> Path:
        """The training split's files as the run's first start read them (``record_corpus``)."""
        return self.path / "corpus.json"

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / "tokenizer"

    @property
    def encoded_dir(self) -> Path:
        """The training split, tokenized once (``seq2seq.data.encoded``), for later starts."""
        return self.path / "encoded"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / "tensorboard"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def tuning_file(self) -> Path:
        """Written by a tuned comparison: how this run's values were chosen on validation."""
        return self.path / "tuning.json"

    @property
    def lock_file(self) -> Path:
        """Locked while a process trains the run (``training``); names that process."""
        return self.path / ".training.lock"

    @property
    def winning_trial_file(self) -> Path:
        """Written by a tuned comparison in a final run that started as a copy of its winning
        trial: that trial's folder."""
        return self.path / "winning_trial.txt"

    @property
    def averaged_from_file(self) -> Path:
        """Written by ``seq2seq.evaluation.average``: the run and steps an average came from."""
        return self.path / "averaged_from.json"

    def eval_result_file(self, split: str, checkpoint: str = "latest") -> Path:
        """The scores of ``split`` under the checkpoint rule ``checkpoint`` (``eval.py``'s),
        which may carry a decoding label after a dash (``latest-ensemble-B``)."""
        return self.eval_dir / f"{split}{_file_suffix(checkpoint)}.json"

    def hypotheses_file(self, split: str, checkpoint: str = "latest") -> Path:
        return self.eval_dir / f"{split}{_file_suffix(checkpoint)}.hyp.txt"

    def create(self) -> RunDirectory:
        """Makes the directory (and parents) if needed; refuses a path that is a file, or a
        folder of other things (``check_free``)."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryError(
                f"--workdir {self.path} is an existing file, not a directory; choose another path"
            )
        self.check_free()
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def check_free(self) -> None:
        """Refuses a folder that holds no run but other things (a project's or a corpus's
        files, ``--workdir .``): a run's files written among them would be mixed with them, and
        deleting the run would take them too. Hidden entries (``.DS_Store``,
        ``.ipynb_checkpoints``) do not count; nor does anything once the folder holds a run.

        Raises:
          RunDirectoryError: one line naming some of the entries; nothing is written.
        """
        if not self.path.is_dir() or self.config_file.exists():
            return
        others = self.other_entries()
        if others:
            raise RunDirectoryError(
                f"--workdir {self.path} holds no run but {count_entries(others)} of its own "
                f"({show_entries(others)}); nothing was written: pass a new or empty folder"
            )

    def other_entries(self) -> list[str]:
        """The folder's entries that are not the layout's (``NAME/`` for a folder), sorted;
        hidden ones (``.DS_Store``, ``.ipynb_checkpoints``, the lock) left out."""
        return sorted(
            path.name + "/" * path.is_dir()
            for path in self.path.iterdir()
            if path.name not in LAYOUT and not path.name.startswith(".")
        )

    def require(self) -> RunDirectory:
        """Checks that the directory holds a run (its config); returns it."""
        if not self.path.is_dir():
            raise RunDirectoryError(
                f"no work directory at {self.path}; pass the --workdir of a run"
            )
        if not self.config_file.exists():
            raise RunDirectoryError(self._not_a_run())
        return self

    def _not_a_run(self) -> str:
        """Why this existing folder is not a run, and which folder to pass instead: the runs in
        its folders where it holds some (a comparison's, a folder of runs)."""
        name = self.config_file.name
        runs = sorted(
            entry.name
            for entry in self.path.iterdir()
            if entry.is_dir() and (entry / name).is_file() and not entry.name.startswith(".")
        )
        if runs:
            count = "a run" if len(runs) == 1 else f"{len(runs)} runs"
            return (
                f"{self.path} is not a run but holds {count} in its folders ({show_entries(runs)});"
                f" pass one of them, e.g. --workdir {self.path / runs[0]}"
            )
        return (
            f"{self.path} holds no run (no {name}); pass the --workdir that train.py or "
            "compare trained a run in"
        )

    def load_config(self) -> ml_collections.ConfigDict:
        """The config the run saved, read into the current schema."""
        return config_lib.load_saved(self.require().config_file)

    def save_config(
        self,
        config: ml_collections.ConfigDict,
        write: bool = True,
        fingerprint: Fingerprint | None = None,
    ) -> None:
        """Records ``config``; refuses one that changes the identity of the run already here.

        ``write=False`` checks only: the other processes of a multi-process run, whose
        process 0 writes. ``fingerprint`` lets a moved corpus continue the run
        (``identity_differences``).

        Raises:
          RunDirectoryError: a key of the run's identity (``config.identity_keys``) differs
            from a run that made anything (``never_started``), or the folder's config file is
            not a run's (another tool's ``config.json``); nothing is written.
        """
        if self.config_file.exists():
            saved = self._saved_config()  # another tool's config.json is never replaced
            differences = self.identity_differences(config, fingerprint, saved=saved)
            if differences and not self.never_started():
                changed = "; ".join(differences)
                raise RunDirectoryError(
                    f"{self.path} holds a run trained with other values ({changed}); "
                    "nothing was overwritten: use a new --workdir (or delete this one) to "
                    "train afresh, or the run's own config to continue it"
                )
            changed = [d.split(":")[0].removeprefix("config.") for d in differences]
            if write and any(key == "seed" or key.startswith("data.") for key in changed):
                # A corrected start: the tokenizer and encoding the old data section (and seed,
                # which samples the tokenizer's sentences) derived are not this run's.
                for derived in (self.tokenizer_dir, self.encoded_dir):
                    shutil.rmtree(derived, ignore_errors=True)
        if write:
            config_lib.save(config, self.config_file)

    def _saved_config(self) -> ml_collections.ConfigDict:
        """The config this folder holds, as ``load_saved`` reads it.

        Raises:
          RunDirectoryError: the file is not a run's (another tool's ``config.json``, not JSON).
        """
        try:
            return config_lib.load_saved(self.config_file)
        except config_lib.ConfigError as error:  # unreadable, or values this version refuses
            reason = getattr(error, "reason", str(error))
            raise RunDirectoryError(
                f"{self.config_file} is not a config this version of seq2seq saved ({reason}); "
                "nothing was overwritten: use another --workdir"
            ) from None

    def identity_differences(
        self,
        config: ml_collections.ConfigDict,
        fingerprint: Fingerprint | None = None,
        saved: ml_collections.ConfigDict | None = None,
    ) -> list[str]:
        """``config.key: saved -> requested`` for each key of the saved run's identity that
        ``config`` changes (``config.identity_differences``); ``saved``: the folder's config,
        where the caller has read it already.

        Given ``fingerprint``, a corpus that moved is no change: ``data.dir`` may name another
        folder when the training files there are the bytes this run recorded in
        ``corpus.json``. Otherwise the difference says why the folder is not the same corpus.
        """
        saved = self._saved_config() if saved is None else saved
        if saved.data.dir == config.data.dir or fingerprint is None:
            return config_lib.identity_differences(saved, config)
        reason = self._corpus_change(saved, config, fingerprint)
        if reason is None:
            return config_lib.identity_differences(saved, config, same={"data.dir"})
        return config_lib.identity_differences(saved, config, notes={"data.dir": reason})

    def _corpus_change(
        self,
        saved: ml_collections.ConfigDict,
        config: ml_collections.ConfigDict,
        fingerprint: Fingerprint,
    ) -> str | None:
        """Why ``config``'s training files are not those this run recorded; None if they are."""
        if saved.data.source == config.data.source == "synthetic":
            return None  # the folder is not read
        if saved.data.source != "text" or config.data.source != "text":
            return "only a text corpus is compared file by file when its folder changes"
        if not self.corpus_file.exists():
            return f"the run has no {self.corpus_file.name}: it started before runs recorded one"
        recorded = read_json(self.corpus_file)
        try:
            found = fingerprint(config)
        except ValueError as error:  # the folder or a file is missing: the data's one line
            return str(error).split(";")[0]
        changed = [name for name in {**recorded, **found} if recorded.get(name) != found.get(name)]
        if changed:
            return f"its {' and '.join(changed)} are not the files this run trained on"
        return None

    def holds_another_corpus(
        self, config: ml_collections.ConfigDict, fingerprint: Fingerprint
    ) -> bool:
        """Whether ``config.data.dir`` is known to hold another corpus than the one this run
        trained on: the run recorded its training files (``corpus.json``) and that folder lacks
        them or holds others. A folder that holds them is the corpus moved; a run that recorded
        nothing (older runs, TFDS and synthetic data) is given the benefit of the doubt."""
        if not self.corpus_file.exists() or config.data.source != "text":
            return False
        return self._corpus_change(self._saved_config(), config, fingerprint) is not None

    def record_corpus(self, config: ml_collections.ConfigDict, fingerprint: Fingerprint) -> None:
        """Writes ``corpus.json``, ``fingerprint(config)``, at a run's first start, or over one
        that a start which made nothing left; a resume keeps the first."""
        if self.corpus_file.exists() and not self.never_started():
            return
        record = fingerprint(config)
        if record is not None:
            self.corpus_file.write_text(json.dumps(record, indent=1) + "\n")

    def training(self) -> contextlib.AbstractContextManager[None]:
        """Held while a process trains the run here (in a multi-process run, process 0): a
        second ``train.py`` or comparison on the same folder is refused, where it used to train
        beside the first, both writing checkpoints and one ``metrics.jsonl``.

        Raises:
          RunDirectoryError: another process holds it (one line naming that process).
        """
        return held(self.lock_file, f"{self.path} is being trained by")

    def never_started(self) -> bool:
        """Whether the run here stopped before it trained: its folder holds its config,
        provenance and corpus record, and at most what a start derives from them before the
        first step, its tokenizer and encoded training split (a start that failed on its data,
        a bad value or a batch size). Its config is then no run's identity: a corrected start
        may replace it (``save_config``, which drops the derived folders) and its corpus record
        (``record_corpus``)."""
        kept = (self.config_file, self.provenance_file, self.corpus_file, self.lock_file)
        derived = (self.tokenizer_dir, self.encoded_dir)
        return all(
            p in kept or any(folder in p.parents for folder in derived)
            for p in self.path.rglob("*")
            if p.is_file()
        )

    def saved_steps(self) -> list[int]:
        """The steps of the checkpoints on disk, oldest first, read from their folders' names
        without orbax (an interrupted save's temporary folder is not a number)."""
        if not self.checkpoints_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.checkpoints_dir.iterdir() if p.name.isdigit())

    def check_budget_reaches(self, steps: int) -> None:
        """Refuses a step budget below a checkpoint the run saved: the run's config would
        record fewer steps than it trained, and the steps past it would not be undone.

        Raises:
          RunDirectoryError: one line with the step reached and the choices; nothing written.
        """
        saved = self.saved_steps()
        if saved and steps < saved[-1]:
            raise RunDirectoryError(
                f"{self.path} has trained to step {saved[-1]}, past the {steps} steps asked "
                f"for (train.steps); nothing was changed: raise --config.train.steps to "
                f"{saved[-1]} or more to go on, score a step it kept with eval.py --checkpoint "
                "STEP, or pass a new --workdir for a shorter run"
            )

    def is_record(self) -> bool:
        """Whether this is a run's record (``compare --save_records``: config, metrics and
        scores), which trained elsewhere and keeps no checkpoints or tokenizer."""
        return self.metrics_file.exists() and not (
            self.checkpoints_dir.exists() or self.tokenizer_dir.exists()
        )

    def nothing_to_translate_with(self) -> str:
        """Why this run cannot translate (no tokenizer or checkpoint) and the fix. A committed
        record keeps neither, and "train first" would misread a run that trained."""
        if self.is_record():
            return (
                f"{self.path} is a run's record (config, metrics and scores, with no tokenizer or "
                f"checkpoints); read its scores in {self.eval_dir.name}/, or train the run again "
                "to translate with it"
            )
        return f"{self.path} holds no trained model yet (no tokenizer or checkpoint); train first"

    def read_metrics(self, drop_cut_end: bool = False) -> list[dict]:
        """Every record of metrics.jsonl, oldest first (empty if none was written yet).

        ``drop_cut_end``: a last line cut short (``complete_lines``) is read as never written,
        as the run's resume drops it; only for a run about to train on. A record's cut file is
        damage to name, not a line to leave out of its curve.
        """
        if not self.metrics_file.exists():
            return []
        text = self.metrics_file.read_text()
        lines = complete_lines(text) if drop_cut_end else text.splitlines()
        return [
            read_json(self.metrics_file, line, number)
            for number, line in enumerate(lines, 1)
            if line.strip()
        ]

    def read_tuning(self) -> dict | None:
        """The tuning that chose this run's values (``tuning_file``), or None if none did."""
        path = self.tuning_file
        return read_json(path) if path.exists() else None

    def read_averaged_from(self) -> dict | None:
        """The record ``seq2seq.evaluation.average`` left in an averaged run; None for another."""
        path = self.averaged_from_file
        return read_json(path) if path.exists() else None

    def read_eval_result(self, split: str, checkpoint: str = "latest") -> dict | None:
        """What ``eval.py`` wrote for ``split`` under ``checkpoint``, or None if it has not been
        evaluated that way."""
        path = self.eval_result_file(split, checkpoint)
        return read_json(path) if path.exists() else None


def complete_lines(text: str) -> list[str]:
    """The lines of a JSON-lines file's ``text`` (one only appended to), less a last one cut
    short (no newline, not JSON: a crash or a full disk in the middle of its write), which was
    never written as far as its readers go."""
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            lines.pop()
    return lines


def read_json(path: Path, text: str | None = None, line: int = 0):
    """``path``'s JSON (``text``: its ``line``-th line, of a JSON-lines file).

    Raises:
      RunDirectoryError: one line naming the damaged file (and line), where ``json`` named only
        a column.
    """
    try:
        return json.loads(path.read_text() if text is None else text)
    except json.JSONDecodeError as error:
        where = f"{path} line {line}" if line else str(path)
        raise RunDirectoryError(
            f"{where} is not valid JSON ({error.msg} at column {error.colno}): damaged or cut "
            "short; restore it from where it came (git checkout, a backup) or move the run away"
        ) from None


def count_entries(names: list[str]) -> str:
    """ "an entry" or "N entries": how a refusal counts a folder's entries."""
    return "an entry" if len(names) == 1 else f"{len(names)} entries"


def show_entries(names: list[str]) -> str:
    """The first four of ``names``, and "..." if there are more."""
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


@contextlib.contextmanager
def held(lock_file: Path, busy: str) -> Iterator[None]:
    """An exclusive lock on ``lock_file`` while the block runs, naming this process in the file.
    The kernel's (``flock``): a process killed with SIGKILL holds it no longer. Where the file
    system has no locks, the block runs unguarded.

    Raises:
      RunDirectoryError: ``busy`` and the holder ("... by process 123 on host"), and the fix.
    """
    import fcntl  # POSIX; imported here so that reading runs needs it nowhere else

    with open(lock_file, "a+") as handle:
        locked = True
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunDirectoryError(
                f"{busy} {holder}; wait for it to finish (or stop it), then rerun to continue"
            ) from None
        except OSError:  # a file system without locks
            locked = False
        if locked:
            handle.truncate(0)
            handle.write(f"process {os.getpid()} on {socket.gethostname()}\n")
            handle.flush()
        try:
            yield
        finally:
            if locked:
                handle.truncate(0)  # the lock itself goes when the file closes


def _file_suffix(label: str) -> str:
    """The file-name suffix of a checkpoint rule, followed by what ``evaluation.evaluate``'s
    decoding label adds after a dash (an ensemble's other runs, sampling settings)."""
    rule, dash, decoding = label.partition("-")
    return CheckpointRule.parse(rule).file_suffix + (dash + decoding if decoding else "")
