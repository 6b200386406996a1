"""What the entry points share: config flags with one-line errors, and a clean failure exit."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable

from absl import flags
from absl import logging as absl_logging

from seq2seq.config import ConfigError, unknown_key_message


def _offending_override(argv: list[str], error: Exception) -> str | None:
    """The ``--config.KEY`` of argv that ml_collections could not find, if that was the error."""
    text = str(error)
    for arg in argv:
        match = re.match(r"--config\.([\w.]+)=", arg)
        if match and repr(match.group(1).rsplit(".", 1)[-1]) in text.replace("\\'", "'"):
            return match.group(1)
    return None


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing where a bad config file, key or value ends with one line, exit 2.

    Used as ``app.run(main, flags_parser=parse_flags)``.
    """
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        message = str(error).splitlines()[0]
    except (AttributeError, KeyError) as error:
        key = _offending_override(argv, error)
        message = unknown_key_message(key) if key else str(error).splitlines()[0]
    except (TypeError, ValueError, FileNotFoundError, ImportError) as error:
        message = str(error).splitlines()[0]
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def exit_on_error(main: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
    """Turns expected failures (bad config, missing files, NaN loss) into one line and exit 1."""

    def wrapped(argv: list[str]) -> None:
        absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
        logging.basicConfig(level=logging.WARNING, format="%(message)s", force=True)
        logging.getLogger("seq2seq").setLevel(logging.INFO)
        absl_logging.get_absl_handler().setLevel(logging.WARNING)
        try:
            main(argv)
        except (ConfigError, FileNotFoundError, ValueError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(1)

    return wrapped
