"""Translations of a long file or split kept as they finish, so that Ctrl-C loses little.

A file or split longer than ``PIECE_BATCHES`` batches is translated in pieces, in input order,
and each finished piece is appended to a side file (``OUTPUT.partial``, one JSON line a piece)
before the next starts. The first piece is one batch; each next one is twice the last while the
last took under half of ``PIECE_SECONDS``, half of it when it took more than that, and never more
than ``PIECE_BATCHES`` batches. So a fast model sorts its sentences by length in large pieces,
and a slow one (a big model on a CPU) loses about a minute to Ctrl-C, not 16 batches' worth.
A rerun of the same command reads the pieces back (a last one cut off mid-line is dropped, and
the side file rewritten without it) and translates the rest; the caller deletes the side file
once the whole output is written. The side file's first line names what it
translates: a hash of the sentences and every decoding setting (checkpoint, beam, length penalty,
batch size, sampling, engine); a side file of anything else is started afresh.

A sentence's translation does not depend on its batch, so a resumed output equals an
uninterrupted one (scores to the rounding a batch makes). An input of one piece, which is every
test split here, is translated in one call as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import jax

from seq2seq.evaluation import processes
from seq2seq.evaluation.translator import LineTranslator, Translations
from seq2seq.progress import Progress
from seq2seq.records.whole import write_whole

PIECE_BATCHES = 16  # the most batches a piece holds (and the most an input of one piece holds)
PIECE_SECONDS = 60.0  # about the most a piece should take: what Ctrl-C may lose
clock = time.perf_counter  # the pieces' timer (the tests' own clock replaces it)
logger = logging.getLogger(__name__)


def side_file(output: Path) -> Path:
    """Where the pieces of ``output`` are kept until it is written."""
    return output.with_name(output.name + ".partial")


def _identity(translator: LineTranslator, sources: Sequence[str], facts: dict) -> str:
    """What the pieces translate: the sentences and every setting that changes a translation."""
    digest = hashlib.sha256("\n".join(sources).encode())
    settings = {**facts, "decode": translator.config.decode.to_dict()}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _read_pieces(path: Path, identity: str) -> list[dict]:
    """The pieces a side file holds for ``identity``, in order; none for another's, or where a
    piece was cut off by the interruption (the pieces before it are kept)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    pieces: list[dict] = []
    try:
        if not lines or json.loads(lines[0]).get("translates") != identity:
            if len(lines) > 1:  # a Ctrl-C'd translation of another input or other settings
                logger.warning(
                    "%s holds %d finished piece(s) of another translation (other sentences, or "
                    "another checkpoint, beam, length penalty, batch size, sampling or engine): "
                    "starting afresh, over them",
                    path,
                    len(lines) - 1,
                )
            return []
        for line in lines[1:]:
            pieces.append(json.loads(line))
    except json.JSONDecodeError:  # the last line (or the name line), half written
        pass
    return pieces


def translate_keeping(
    translator: LineTranslator,
    sources: Sequence[str],
    side: Path,
    facts: dict,
    progress: Progress,
) -> tuple[Translations, int]:
    """``translator.translate(sources)``, piece by piece, each finished piece appended to
    ``side`` (by process 0), the pieces it holds for the same work read back first.

    Returns:
      the translations of all ``sources``, and how many were read back rather than translated.
    """
    batch = translator.config.eval.batch_size
    largest = PIECE_BATCHES * batch
    if len(sources) <= largest:  # one piece: one call, nothing to keep or read back
        return translator.translate(sources, progress=progress), 0
    identity = _identity(translator, sources, facts)
    pieces = _read_pieces(side, identity)
    resumed = sum(len(piece["hypotheses"]) for piece in pieces)
    progress(resumed)
    keeping = jax.process_index() == 0
    if keeping:  # afresh, or the pieces read back without a line cut short after them: the
        # next pieces would follow that line, and a later rerun would read none of them back
        _rewrite(side, identity, pieces)
    start, size = resumed, batch
    while start < len(sources):
        began = clock()
        found = translator.translate(
            sources[start : start + size], first_index=start, progress=progress
        )
        seconds = processes.slowest(clock() - began)  # every process sizes the next alike
        piece = {
            "hypotheses": found.hypotheses,
            "truncated": [start + i for i in found.truncated],
            "nbest": found.nbest,
            "capped": [start + i for i in found.capped],
        }
        if keeping:
            with side.open("a", encoding="utf-8") as kept:
                kept.write(json.dumps(piece) + "\n")
                kept.flush()
                os.fsync(kept.fileno())
        pieces.append(piece)
        start += size
        size = _next_size(size, seconds, batch, largest)
    hypotheses = [text for piece in pieces for text in piece["hypotheses"]]
    truncated = [index for piece in pieces for index in piece["truncated"]]
    nbest = [[tuple(entry) for entry in entries] for piece in pieces for entries in piece["nbest"]]
    # a piece kept before outputs were marked capped has none marked
    capped = [index for piece in pieces for index in piece.get("capped", [])]
    return Translations(hypotheses, truncated, nbest, capped), resumed


def _rewrite(side: Path, identity: str, pieces: list[dict]) -> None:
    """``side`` as its name line and ``pieces``, replaced whole (a crash leaves the old one)."""
    side.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"translates": identity}), *map(json.dumps, pieces)]
    write_whole(side, "".join(line + "\n" for line in lines))


def _next_size(size: int, seconds: float, batch: int, largest: int) -> int:
    """The next piece's sentences: twice ``size`` after a piece that took under half of
    ``PIECE_SECONDS``, half of it after one that took more, in whole batches within one batch
    and ``largest``."""
    if seconds < PIECE_SECONDS / 2:
        size *= 2
    elif seconds > PIECE_SECONDS:
        size //= 2
    return min(max(batch, size // batch * batch), largest)


def forget(side: Path) -> None:
    """Deletes the side file once the whole output is written (process 0)."""
    if jax.process_index() == 0:
        side.unlink(missing_ok=True)
