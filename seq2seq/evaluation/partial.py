"""Translations of a long file or split kept as they finish, so that Ctrl-C loses little.

A file or split is translated in pieces of ``PIECE_BATCHES`` batches, in input order, and each
finished piece is appended to a side file (``OUTPUT.partial``, one JSON line a piece) before the
next starts. A rerun of the same command reads the pieces back and translates the rest; the
caller deletes the side file once the whole output is written. The side file's first line names
what it translates: a hash of the sentences and every decoding setting (checkpoint, beam, length
penalty, batch size, sampling, engine); a side file of anything else is started afresh.

A sentence's translation does not depend on its batch, so a resumed output equals an
uninterrupted one (scores to the rounding a batch makes). An input of one piece, which is every
test split here, is translated in one call as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import jax

from seq2seq.evaluation.translator import LineTranslator, Translations
from seq2seq.progress import Progress

PIECE_BATCHES = 16  # batches a piece holds: few enough that Ctrl-C loses little, many to sort


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
    try:
        if not lines or json.loads(lines[0]).get("translates") != identity:
            return []
        pieces = []
        for line in lines[1:]:
            pieces.append(json.loads(line))
    except json.JSONDecodeError:  # the last line, half written
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
    identity = _identity(translator, sources, facts)
    pieces = _read_pieces(side, identity)
    resumed = sum(len(piece["hypotheses"]) for piece in pieces)
    progress(resumed)
    size = PIECE_BATCHES * translator.config.eval.batch_size
    keeping = jax.process_index() == 0 and len(sources) > size  # one piece: nothing to keep
    if keeping and not pieces:
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text(json.dumps({"translates": identity}) + "\n", encoding="utf-8")
    for start in range(resumed, len(sources), size):
        found = translator.translate(
            sources[start : start + size], first_index=start, progress=progress
        )
        piece = {
            "hypotheses": found.hypotheses,
            "truncated": [start + i for i in found.truncated],
            "nbest": found.nbest,
        }
        if keeping:
            with side.open("a", encoding="utf-8") as kept:
                kept.write(json.dumps(piece) + "\n")
                kept.flush()
                os.fsync(kept.fileno())
        pieces.append(piece)
    hypotheses = [text for piece in pieces for text in piece["hypotheses"]]
    truncated = [index for piece in pieces for index in piece["truncated"]]
    nbest = [[tuple(entry) for entry in entries] for piece in pieces for entries in piece["nbest"]]
    return Translations(hypotheses, truncated, nbest), resumed


def forget(side: Path) -> None:
    """Deletes the side file once the whole output is written (process 0)."""
    if jax.process_index() == 0:
        side.unlink(missing_ok=True)
