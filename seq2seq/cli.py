"""What every command shares: its start, config flags with one-line errors, a clean failure exit.

Every entry point (``train.py``, ``eval.py``, ``python -m seq2seq.compare|bench|export|serve``,
``python -m seq2seq.evaluation.average``, ``python -m seq2seq.bench.summary``) has the same
two pieces, ``start`` before anything else is imported and ``run`` at the end::

    if __name__ == "__main__":  # first, before JAX loads
        from seq2seq import cli

        cli.start()
    ...
    if __name__ == "__main__":
        cli.run(main)
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from absl import app, flags
from absl import logging as absl_logging

from seq2seq.config import (
    MAX_BEAM_SIZE,
    ConfigError,
    saved_config_message,
    unknown_key_message,
)
from seq2seq.runtime.compilation_cache import compile_afresh, keep_compiled_programs
from seq2seq.runtime.host_memory import keep_host_memory
from seq2seq.runtime.simulated_devices import size_thread_pool
from seq2seq.runtime.xla_flags import use_library_gemms

CONFIG_FILE_FLAGS = ("config",)  # the entry points' ``config_flags.DEFINE_config_file`` flags
HELP_FLAGS = ("-?", "--help", "--helpshort", "--helpfull", "--helpxml")  # absl's
SHORT_HELP = "-h"  # not absl's, but what every other command-line tool answers: read as --help

flags.DEFINE_bool(
    "compilation_cache",
    True,
    "Keep compiled programs on disk for later processes and load the ones kept "
    "(seq2seq.runtime.compilation_cache); --nocompilation_cache compiles everything anew.",
)


def _offending_override(argv: list[str], error: Exception) -> str | None:
    """The ``--config.KEY`` of argv that ml_collections could not find, if that was the error."""
    text = str(error)
    for arg in argv:
        match = re.match(r"--config\.([\w.]+)=", arg)
        if match and repr(match.group(1).rsplit(".", 1)[-1]) in text.replace("\\'", "'"):
            return match.group(1)
    return None


def _config_file_arguments(argv: list[str]) -> dict[str, str]:
    """``{flag name: file}`` for each config-file flag given in argv (``--config F`` or ``=F``)."""
    names = [name for name in CONFIG_FILE_FLAGS if name in flags.FLAGS]
    files = {}
    for i, arg in enumerate(argv):
        for name in names:
            if arg in (f"--{name}", f"-{name}") and i + 1 < len(argv):
                files[name] = argv[i + 1]
            elif arg.startswith((f"--{name}=", f"-{name}=")):
                files[name] = arg.split("=", 1)[1]
    # A config file may take an argument after a colon: ``--config file.py:big``.
    return {name: value.split(":", 1)[0] for name, value in files.items()}


def _config_files_first(argv: list[str]) -> list[str]:
    """``argv`` with each config file moved before its overrides: ml_collections reads
    ``--config.train.steps=3 --config FILE`` as an override of a config not yet given."""
    end = argv.index("--", 1) if "--" in argv[1:] else len(argv)
    argv = list(argv)
    for name in CONFIG_FILE_FLAGS:  # a command without the flag has no file to move
        flag = f"--{name}"
        at = next(
            (i for i in range(1, end) if argv[i] == flag or argv[i].startswith(f"{flag}=")), None
        )
        first = next((i for i in range(1, end) if argv[i].startswith(f"{flag}.")), None)
        if at is None or first is None or first > at:
            continue
        width = 2 if argv[at] == flag and at + 1 < end else 1  # "--config FILE" or "=FILE"
        given = argv[at : at + width]
        del argv[at : at + width]
        argv[first:first] = given
    return argv


def missing_config_file_message(argv: list[str]) -> str | None:
    """The one-line error for a ``--config`` that names no readable file, else None."""
    for name, path in _config_file_arguments(argv).items():
        if Path(path).is_dir():
            return (
                f"--{name} {path} is a folder; pass a config file, e.g. "
                "configs/quickstart_transformer.py"
            )
        if not Path(path).is_file():
            return (
                f"no config file at {path} (--{name}); pass an existing one, e.g. "
                "configs/quickstart_transformer.py"
            )
        if Path(path).suffix == ".json":
            return f"--{name} {saved_config_message(path)}"
    return None


def _place_in(error: BaseException, files: set[str]) -> tuple[str, int] | None:
    """(file, line) where ``error`` arose, if that was one of ``files`` (resolved paths)."""
    if isinstance(error, SyntaxError) and error.filename:
        places = [(error.filename, error.lineno)]
    else:
        places = [(f.filename, f.lineno) for f in traceback.extract_tb(error.__traceback__)]
    places = [place for place in places if str(Path(place[0]).resolve()) in files]
    return places[-1] if places else None


def config_file_error_message(error: BaseException, config_files: list[str]) -> str | None:
    """``FILE line N: what went wrong`` when ``error`` arose inside one of ``config_files``.

    Covers syntax errors and exceptions raised while the file runs, also when ml_collections or
    absl wrapped them in an error whose own message is a multi-line traceback.
    """
    files = {str(Path(path).resolve()) for path in config_files}
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    for cause in reversed(seen):  # the original error first
        if isinstance(cause, ConfigError):  # raised on purpose, its message names the fix
            return str(cause)
        place = _place_in(cause, files)
        if place is None and isinstance(cause, SyntaxError) and not cause.filename:
            # Python refuses the bytes before it parses them (a NUL byte): no file, no line
            named = " or ".join(sorted(config_files))
            return f"{named}: SyntaxError: {cause.msg}; fix the config file"
        if place is not None:
            what = cause.msg if isinstance(cause, SyntaxError) else str(cause).split("\n")[0]
            return (
                f"{place[0]} line {place[1]}: {type(cause).__name__}: {what}; fix the config file"
            )
    return None


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing where a bad config file, key or value ends with one line, exit 2.

    Used as ``app.run(main, flags_parser=parse_flags)``.
    """
    message = missing_config_file_message(argv)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    argv = _with_long_help(argv)
    ordered = _config_files_first(argv)
    if ordered != argv:  # ml_collections reads its overrides from sys.argv itself
        sys.argv = argv = ordered
    try:
        return flags.FLAGS(argv)
    except SystemExit as stop:  # absl ends every help it prints with exit 1
        if stop.code == 1 and _asks_for_help(argv):
            sys.exit(0)
        raise
    except Exception as error:  # noqa: BLE001 (an error inside a config file: name file and line)
        files = list(_config_file_arguments(argv).values())
        message = config_file_error_message(error, files)
        if message is None and isinstance(error, AttributeError) and "get_config" in str(error):
            message = (
                f"{', '.join(files)} defines no get_config(); a config file returns its "
                "ConfigDict from get_config() (see configs/quickstart_transformer.py)"
            )
        if message is None:
            message = flag_error_message(argv, error)
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def _with_long_help(argv: list[str]) -> list[str]:
    """``argv`` with each ``-h`` before any ``--`` read as ``--help`` (absl knows only ``-?``)."""
    end = argv.index("--", 1) if "--" in argv[1:] else len(argv)
    return [
        "--help" if 0 < i < end and argument == SHORT_HELP else argument
        for i, argument in enumerate(argv)
    ]


def _asks_for_help(argv: list[str]) -> bool:
    """Whether the command line holds one of absl's help flags (before any ``--``)."""
    arguments = argv[1 : argv.index("--")] if "--" in argv[1:] else argv[1:]
    return any(argument.split("=")[0] in HELP_FLAGS for argument in arguments)


# absl's words for a required flag left out: "flag --workdir=None: Flag --workdir must have a
# value other than None."
_MISSING_FLAG = re.compile(r"Flag --(\w+) must have a value other than None")


def flag_error_message(argv: list[str], error: Exception) -> str:
    """One line for an error in the flags themselves (unknown key, bad value, a required flag
    left out); else re-raises."""
    missing = _MISSING_FLAG.search(str(error))
    if missing and missing.group(1) in flags.FLAGS:
        name = missing.group(1)
        what = (flags.FLAGS[name].help or "").splitlines()[0].rstrip(".")
        return f"--{name} is required: {what}; pass it (--help lists every flag)"
    if isinstance(error, (AttributeError, KeyError)):
        key = _offending_override(argv, error)
        return unknown_key_message(key) if key else str(error).splitlines()[0]
    if isinstance(error, (flags.Error, TypeError, ValueError, FileNotFoundError, ImportError)):
        return str(error).splitlines()[0]
    raise error


def define_config_overrides() -> None:
    """``--config.KEY=VALUE``: overrides of the default config for every run a command starts.

    Its help names where the keys are instead of listing the whole default config (about 120
    lines of ``--help`` otherwise). Defined here, it is a key flag of the caller only once the
    caller declares it (``flags.declare_key_flag("config")``), as ``--help`` lists those.
    """
    from ml_collections import config_flags

    from seq2seq.config import default_config

    config_flags.DEFINE_config_dict(
        "config",
        default_config(),
        "--config.KEY=VALUE overrides applied to every run (the keys and their defaults: "
        "seq2seq/config.py, default_config; e.g. --config.train.steps=2000).",
    )
    flags.FLAGS["config"].default_as_str = None


def check_decoding_flags(beam_size: int | None, alpha: float | None) -> None:
    """Refuses a ``--beam_size`` below 1 or over ``MAX_BEAM_SIZE``, or an ``--alpha`` below 0
    (None: the config's), by the flags' names, before any model or JAX loads: a command that
    decodes after training or loading would otherwise fail only then.

    Raises:
      ConfigError: one line naming the flag and what it takes.
    """
    if beam_size is not None and beam_size < 1:
        raise ConfigError(f"--beam_size {beam_size} must be at least 1 (1: greedy)")
    if beam_size is not None and beam_size > MAX_BEAM_SIZE:
        raise ConfigError(
            f"--beam_size {beam_size} is over {MAX_BEAM_SIZE}, the widest beam "
            "searched (memory and time grow with it; the papers use 4 and 12)"
        )
    if alpha is not None and not (math.isfinite(alpha) and alpha >= 0):
        raise ConfigError(
            f"--alpha {alpha} must be a finite number >= 0 (0 turns the length penalty off)"
        )


def check_work_directory(
    path: Path,
    flag: str = "--workdir",
    fix: str = "pass a new folder or an existing run's folder",
    *,
    file: bool = False,
) -> Path:
    """Refuses a folder (``--workdir``, or ``flag``) that is, or lies under, an existing file,
    or whose nearest existing folder this user may not write in; returns ``path``.
    ``file=True``: ``path`` names a file to write (``eval.py --output``), and only its folders
    are checked.

    Called by ``train.py``, ``compare``, ``eval.py`` and ``export`` before any work, so nothing
    is created or overwritten.

    Raises:
      ValueError: one line naming the file and the fix.
    """
    start = path.parent if file else path
    for existing in (start, *start.parents):
        if existing.exists():
            break
    if existing.is_dir():
        check_writable(existing, f"{flag} {path}")
        return path
    where = "is a file" if existing == path else f"lies under {existing}, which is a file"
    raise ValueError(f"{flag} {path} {where}, not a directory; {fix} (the file was left as it is)")


def check_writable(folder: Path, what: str) -> None:
    """Refuses a command whose output would go under ``folder`` (an existing folder; ``what``
    names the flag and path) where this user may not write, before any work: found by writing
    a file there that no one sees (permissions, a read-only disk), which ``os.access`` would
    not find for root or on a read-only mount.

    Raises:
      ValueError: one line naming the folder and why.
    """
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ValueError(
            f"{what}: cannot write in {folder} ({error.strerror}); pass a folder you may write"
        ) from None


# What Ctrl-C outside training leaves: true of every command that keeps each finished piece
# (runs, trials, reports); a command that writes its output whole at the end says its own.
RESUMES = "interrupted: what had finished is kept; rerun the same command to continue"


class Terminated(KeyboardInterrupt):
    """SIGTERM outside training (a scheduler's stop, ``kill``): it stops the command as Ctrl-C
    does, so every handler of Ctrl-C (a translation's finished pieces, a comparison's report so
    far) keeps what it keeps, and the command ends with a line and status 143."""


def _terminate(signum, frame) -> None:
    del signum, frame
    raise Terminated


def stop_on_sigterm() -> None:
    """SIGTERM raises ``Terminated`` in the main thread. Training puts its own handler in its
    place while it trains (a checkpoint first); a job of several processes gives SIGTERM back to
    the default before JAX's preemption service takes it (``training.processes``)."""
    signal.signal(signal.SIGTERM, _terminate)


def exit_on_error(
    main: Callable[[list[str]], None], interrupted: str | Callable[[], str] = RESUMES
) -> Callable[[list[str]], None]:
    """Turns expected failures (bad config, missing files, NaN loss) into one line and exit 1,
    and Ctrl-C outside training into the line ``interrupted`` (or the one it returns, for a
    command whose modes keep different things) and exit 130; SIGTERM there into the same line
    after ``terminated (SIGTERM):`` and exit 143."""

    def wrapped(argv: list[str]) -> None:
        _redeliver_swallowed_interrupts()
        stop_on_sigterm()
        absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
        logging.basicConfig(level=logging.WARNING, format="%(message)s", force=True)
        logging.getLogger("seq2seq").setLevel(logging.INFO)
        absl_logging.get_absl_handler().setLevel(logging.WARNING)
        if not flags.FLAGS.compilation_cache:
            compile_afresh()
        try:
            main(argv)
            _raise_swallowed_interrupt()  # one not handed back before the work ended
        except (ConfigError, FileNotFoundError, ValueError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(1)
        except OSError as error:  # a file the work reads or writes, or a full disk: one line
            if error.filename is None and error.errno not in _DISK_FULL:
                raise
            print(f"error: {file_error_message(error)}", file=sys.stderr)
            sys.exit(1)
        except KeyboardInterrupt as stop:  # training saves on the first; this is elsewhere
            line = interrupted() if callable(interrupted) else interrupted
            terminated = isinstance(stop, Terminated)
            if terminated:
                line = "terminated (SIGTERM): " + line.removeprefix("interrupted: ")
            print(line, file=sys.stderr, flush=True)
            sys.stdout.flush()
            # At once, as a second Ctrl-C asks: a checkpoint orbax is still writing in another
            # thread would print a traceback as the interpreter shut down around it. Its folder
            # stays unfinished, and a resume starts from the checkpoint before it.
            os._exit(143 if terminated else 130)

    return wrapped


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


# Signals swallowed in a collector's callback and not yet handed back to the main thread.
_swallowed: list[int] = []
_swallowed_lock = threading.Lock()


def _redeliver_swallowed_interrupts() -> None:
    """A Ctrl-C that lands while a garbage collector's callback runs (JAX frees XLA's buffers
    in one) raises KeyboardInterrupt inside it, which Python reports as unraisable ("Exception
    ignored in: <function _xla_gc_callback>" and a traceback) and forgets: the command ran on to
    its end. This hook hands the interrupt back to the main thread, where it stops the command
    as any Ctrl-C does (during training: saves and stops); SIGTERM's stays SIGTERM. Other
    unraisable errors pass on."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            terminated = issubclass(unraisable.exc_type, Terminated)
            with _swallowed_lock:
                _swallowed.append(signal.SIGTERM if terminated else signal.SIGINT)
            # Later, from another thread: raised in this hook, it would be swallowed again. The
            # main thread runs the signal's handler once the collection is over (if it is not,
            # the hook comes back and tries again).
            timer = threading.Timer(0.05, _hand_back_swallowed_interrupt)
            timer.daemon = True
            timer.start()
            return
        previous(unraisable)

    sys.unraisablehook = hook


def _hand_back_swallowed_interrupt() -> None:
    """The swallowed signal sent again, to the main thread itself: a real signal also wakes a
    read or wait it is blocked in (``_thread.interrupt_main`` only runs the handler when the
    thread next runs Python, so ``eval.py --input -`` waited for another line)."""
    with _swallowed_lock:
        if not _swallowed:  # the command ended first, and raised it itself
            return
        signum = _swallowed[-1]
        _swallowed.clear()
    signal.pthread_kill(threading.main_thread().ident, signum)


def _raise_swallowed_interrupt() -> None:
    """An interrupt swallowed within the last moments of the work, not yet handed back, stops
    the command now: it ended 0 as if never interrupted, with the interrupted line printed
    after its output, or not at all."""
    with _swallowed_lock:
        signum = _swallowed[-1] if _swallowed else None
        _swallowed.clear()
    if signum == signal.SIGTERM:
        raise Terminated
    if signum is not None:
        raise KeyboardInterrupt


def file_error_message(error: OSError) -> str:
    """One line for an ``OSError`` on a path (or a full disk, whose write errors name none):
    the path, the system's reason and what to do."""
    if error.errno in _DISK_FULL:
        fix = "free some space and rerun the command"
    elif error.errno in (errno.EACCES, errno.EPERM):
        fix = "check its permissions, or pass a path you may use"
    elif error.errno == errno.EROFS:
        fix = "pass a path on a writable disk"
    else:
        fix = "check the path"
    where = f"{error.filename}: " if error.filename is not None else ""
    return f"{where}{error.strerror}; {fix}"


def start() -> None:
    """The preamble of every command, run before JAX loads: compiled programs kept on disk for
    later processes (``seq2seq.runtime.compilation_cache``; ``--nocompilation_cache`` turns that
    off), GPU matrix products from cuBLAS (``seq2seq.runtime.xla_flags``), enough XLA threads
    for simulated CPU devices (``seq2seq.runtime.simulated_devices``) and XLA's host memory
    kept between steps.

    On Linux with glibc this restarts the process once (``seq2seq.runtime.host_memory``).
    """
    keep_compiled_programs()
    use_library_gemms()
    size_thread_pool()
    keep_host_memory()


def run(main: Callable[[list[str]], None], interrupted: str | Callable[[], str] = RESUMES) -> None:
    """Runs ``main`` as a command: flags read by ``parse_flags``, failures by ``exit_on_error``
    (``interrupted``: the line Ctrl-C prints)."""
    app.run(exit_on_error(main, interrupted), flags_parser=parse_flags)
