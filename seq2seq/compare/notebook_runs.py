"""Trained models for the notebooks: reuse the runs in a directory, or train the quickstart models.

A notebook reads two environment variables, so it runs top to bottom on a fresh clone:

* ``SEQ2SEQ_NOTEBOOK_RUNS``: a directory holding ``quickstart_rnnsearch/`` and
  ``quickstart_transformer/`` runs (the quickstart suite's layout); a
  relative path is taken from the repository root. A model with no checkpoint there is trained
  into it first. The default, ``runs/quickstart``, is ``make quickstart``'s: the notebook reuses
  its runs, and ``make quickstart`` continues the notebook's.
* ``SEQ2SEQ_NOTEBOOK_SHORT=1``: the tests' mode: tiny models trained for a few dozen steps, enough
  to run every cell but not to learn the task (default ``runs/notebook_short``).

In the full mode the notebook trains the quickstart configs, RNNsearch for all its 1300 steps
(about 3.5 minutes on 2 CPU cores; fewer leave its alignment blurred) and the Transformer for 800
of its 2000 (about 1.5 minutes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_collections

from seq2seq.compare.comparison import compare
from seq2seq.compare.report import read_report
from seq2seq.compare.settings import Settings
from seq2seq.compare.suites import expand_suite
from seq2seq.compare.workdir import check_free, check_not_records
from seq2seq.config import ConfigError, load_config_file
from seq2seq.evaluation.translator import Translator
from seq2seq.evaluation.validation import make_validate_fn
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.trainer import train

REPOSITORY = Path(__file__).resolve().parents[2]
# The two families the notebooks set side by side (the papers'; the quickstart suite's runs).
NOTEBOOK_MODELS = ("rnnsearch", "transformer")
RUNS_VARIABLE = "SEQ2SEQ_NOTEBOOK_RUNS"
SHORT_VARIABLE = "SEQ2SEQ_NOTEBOOK_SHORT"

# Training steps when the notebook trains a model itself.
FULL_STEPS = {"rnnsearch": 1300, "transformer": 800}
SHORT_STEPS = {"rnnsearch": 10, "transformer": 10}
# The short mode's tiny models: the quickstart configs with these fields replaced.
SHORT_SIZES = {
    "rnnsearch": {
        "embedding_size": 16,
        "encoder_hidden_size": 16,
        "decoder_hidden_size": 16,
        "alignment_size": 16,
        "maxout_size": 8,
    },
    "transformer": {"d_model": 32, "d_ff": 64, "num_heads": 4, "d_k": 8, "d_v": 8},
}
# The synthetic task's whole shared word vocabulary (292 words and the 4 special ids): the
# quickstart's bound of 1000 makes the tokenizer log that it came out smaller, a line that in
# the tests' mode would only hide the lines they look for.
SHORT_VOCABULARY = 296


@dataclasses.dataclass(frozen=True)
class NotebookSettings:
    short: bool  # tiny models, a few steps: every cell runs, trained-model claims are not checked
    runs: Path  # one run per model, ``runs / run_name(model)``, as ``make quickstart`` lays out


def notebook_settings(environ: Mapping[str, str] = os.environ) -> NotebookSettings:
    """The mode and run directory that ``SEQ2SEQ_NOTEBOOK_SHORT`` and ``_RUNS`` ask for."""
    flag = environ.get(SHORT_VARIABLE, "").strip().lower()
    if flag not in ("", "0", "1", "false", "true"):
        raise ConfigError(f"{SHORT_VARIABLE}={flag!r} is not a switch; set it to 1 or 0")
    short = flag in ("1", "true")
    default = "runs/notebook_short" if short else "runs/quickstart"
    return NotebookSettings(short, REPOSITORY / environ.get(RUNS_VARIABLE, default))


def notebook_config(model_name: str, short: bool) -> ml_collections.ConfigDict:
    """The quickstart config of ``model_name``, for the notebook's steps (tiny models if short)."""
    config = load_config_file(REPOSITORY / "configs" / f"quickstart_{model_name}.py")
    config.train.steps = (SHORT_STEPS if short else FULL_STEPS)[model_name]
    if short:
        config.train.time_budget_minutes = 0.0
        config.model[model_name].update(SHORT_SIZES[model_name])
        config.data.tokens_per_batch = 512
        config.data.bucket_width = config.data.max_length  # one batch shape: one compilation
        config.data.vocab_size = SHORT_VOCABULARY
    return config


def run_name(model_name: str) -> str:
    """The folder of a model's run: the quickstart suite names runs after their configs."""
    return f"quickstart_{model_name}"


def check_runs_folder(runs: Path) -> None:
    """Refuses, before anything trains there, a runs folder that is not a comparison's: a
    ``train.py`` run, a folder of other things, or of run records (as ``compare --workdir``).

    Raises:
      RunDirectoryError: one line naming the folder, the variable and some of its entries.
    """
    check_free(runs, named=RUNS_VARIABLE)
    check_not_records(runs, named=RUNS_VARIABLE)


def has_checkpoint(workdir: Path) -> bool:
    """Whether ``workdir`` holds a saved training run to restore."""
    return bool(RunDirectory(workdir).saved_steps())


@contextlib.contextmanager
def progress_lines() -> Iterator[None]:
    """The command line's progress lines while the block runs: the ``seq2seq`` loggers' records
    at INFO and above, message only, as ``cli.exit_on_error`` sets them up; information on
    standard output, warnings and errors on standard error (which Jupyter paints red).

    A notebook has no logging set up, so training showed nothing for minutes but a warning in
    the raw ``WARNING:name:message`` format of the root handler that ``logging.warning`` adds.
    The handlers are removed and the logger restored at the end, so a cell run again prints
    each line once, and callers outside a notebook keep their own logging. Progress bars stay
    off here (``progress.shown``: a notebook's standard error is no terminal): the trainer logs
    a ``step N/M`` line in their place.
    """
    logger = logging.getLogger("seq2seq")
    formatter = logging.Formatter("%(message)s")
    information = logging.StreamHandler(sys.stdout)
    information.addFilter(lambda record: record.levelno < logging.WARNING)
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    handlers = (information, warnings)
    level, propagate = logger.level, logger.propagate
    for handler in handlers:
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # a root handler would print each line again, in its own format
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def ensure_trained(settings: NotebookSettings, model_name: str) -> Path:
    """The run of ``model_name`` under ``settings.runs``, trained first if it has no checkpoint.

    It validates as ``train.py`` does: ``make quickstart`` later continues the run (or finds it
    at its steps already), and its report's curves and best validation perplexity read these
    validation records.
    """
    workdir = settings.runs / run_name(model_name)
    if not has_checkpoint(workdir):
        check_runs_folder(settings.runs)
        config = notebook_config(model_name, settings.short)
        print(f"training {model_name} for {config.train.steps} steps into {workdir}", flush=True)
        start = time.monotonic()
        with progress_lines():
            summary = train(config, workdir, make_validate_fn)
        print(f"  {summary.step} steps in {time.monotonic() - start:.0f} s", flush=True)
    return workdir


def load_translators(settings: NotebookSettings) -> dict[str, Translator]:
    """A greedy translator per model, trained first where ``settings.runs`` has none."""
    return {
        name: Translator.restore(ensure_trained(settings, name), beam_size=1)
        for name in NOTEBOOK_MODELS
    }


def comparison_settings(settings: NotebookSettings) -> Settings:
    """The quickstart suite's comparison as the notebook runs it: as ``make quickstart`` does,
    or, in the short mode, with tiny models, a few steps and a few test sentences."""
    if not settings.short:
        return Settings()
    overrides = {
        **{
            f"model.{name}.{key}": value
            for name in NOTEBOOK_MODELS
            for key, value in (SHORT_SIZES[name].items())
        },
        "train.steps": SHORT_STEPS["transformer"],
        "train.time_budget_minutes": 0.0,
        "data.tokens_per_batch": 512,
        "data.vocab_size": SHORT_VOCABULARY,
        "data.bucket_width": 48,  # the quickstart's max_length: one batch shape, one compile
        "eval.num_examples": 8,
        "decode.min_rows": 64,  # eval.batch_size: a few sentences searched in one loop, one compile
    }
    return Settings(overrides=tuple(sorted(overrides.items())), max_test_sentences=16)


def ensure_comparison(settings: NotebookSettings) -> Path:
    """The quickstart suite's comparison under ``settings.runs``, run first if it has no report.

    Reuses finished runs there (those of ``make quickstart`` in the full mode).
    """
    if not (settings.runs / "report.json").exists():
        check_runs_folder(settings.runs)
        print(f"running the quickstart comparison into {settings.runs}", flush=True)
        with progress_lines():
            compare(expand_suite("quickstart"), settings.runs, comparison_settings(settings))
    return settings.runs


def load_comparison(workdir: Path) -> dict:
    """A comparison's ``report.json`` (``read_report``: its paths resolved from wherever the
    notebook runs), each run's metrics records added as ``records``."""
    report = read_report(workdir)
    for run in report["runs"]:
        run["records"] = RunDirectory(run["workdir"]).read_metrics()
    return report
