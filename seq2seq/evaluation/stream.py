"""Translating a stream (``eval.py --input -``): lines in, translations out, a batch at a time.

Lines are gathered into batches of up to ``eval.batch_size``: as many as have arrived when the
decoder is free, so a pipe of a whole file decodes in full batches while a person typing gets each
line back as soon as it is entered (as ``fairseq-interactive`` does). Translations are written in
input order and flushed after every batch; a blank line comes back blank, never decoded
(``LineTranslator``).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterator
from typing import BinaryIO, TextIO

from seq2seq.data.sources import BOM
from seq2seq.evaluation.evaluate import nbest_lines
from seq2seq.evaluation.translator import LineTranslator, one_line


def _ready(fd: int) -> bool:
    """Whether reading ``fd`` would return at once (more input, or its end)."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):  # not selectable (e.g. a regular file on some systems)
        return True


def _decode(line: bytes, number: int) -> str:
    try:
        text = line.decode("utf-8").removesuffix("\r")
        return text.removeprefix(BOM) if number == 1 else text
    except UnicodeDecodeError as error:
        raise ValueError(
            f"standard input line {number} is not UTF-8 ({error.reason}); the lines before it "
            "were translated; convert the input to UTF-8"
        ) from None


def line_batches(stream: BinaryIO, batch_size: int) -> Iterator[list[str]]:
    """Lines of ``stream`` (UTF-8, ``\\n``-separated, a final line without one included) in
    batches of at most ``batch_size``: a batch is handed over as soon as it is full or no more
    input is waiting.

    Raises:
      ValueError: a line is not UTF-8 (after the batches before it were handed over).
    """
    fd = stream.fileno()
    lines: list[str] = []
    partial = b""
    read = 0  # lines decoded so far
    while True:
        if len(lines) >= batch_size or (lines and not _ready(fd)):
            batch, lines = lines[:batch_size], lines[batch_size:]
            yield batch
            continue
        data = os.read(fd, 1 << 16)
        if data:
            *complete, partial = (partial + data).split(b"\n")
        else:  # the end of input: a last line without a newline
            complete, partial = [partial] if partial else [], b""
        failure = None
        try:
            for line in complete:
                read += 1
                lines.append(_decode(line, read))
        except ValueError as error:
            failure = error
        if data and failure is None:
            continue
        while lines:  # the end of input, or a line that is not UTF-8: the lines before it first
            batch, lines = lines[:batch_size], lines[batch_size:]
            yield batch
        if failure is not None:
            raise failure
        return


class Written:
    """How far a stream's output has gone, for what a Ctrl-C may say: the translations of the
    first ``lines`` input lines are written and flushed, and those up to line ``upto`` were
    being written (a write that a Ctrl-C cuts short can end mid-line, and a Ctrl-C right after
    a flush cannot tell it from one during it)."""

    lines = 0
    upto = 0


def translate_stream(
    translator: LineTranslator, source: BinaryIO, output: TextIO, written: Written | None = None
) -> dict:
    """Translates ``source`` line by line into ``output`` (``nbest_lines`` with ``nbest``),
    counting in ``written`` the input lines whose translations are out.

    Returns:
      facts of the run: sentences, batches, decoding seconds.
    """
    written = written or Written()
    sentences = batches = 0
    seconds = 0.0
    for batch in line_batches(source, translator.config.eval.batch_size):
        start = time.monotonic()
        translations = translator.translate(batch, first_index=sentences)
        seconds += time.monotonic() - start
        if translator.nbest:
            lines = nbest_lines(translations, first_index=sentences)
        else:
            lines = [one_line(hypothesis) for hypothesis in translations.hypotheses]
        written.upto = sentences + len(batch)  # one assignment each: a Ctrl-C between
        output.write("".join(line + "\n" for line in lines))  # them leaves both true
        output.flush()
        written.lines = sentences + len(batch)
        sentences += len(batch)
        batches += 1
    return {"n": sentences, "batches": batches, "decode_seconds": seconds}
