"""Where sentence pairs come from: the embedded synthetic task, text files, or TFDS.

Every source is opened as a ``ParallelCorpus``: a known number of (source, target) string pairs
that can be read in order, chunk by chunk, without holding the whole corpus as Python strings
(WMT14 EN-FR has 36M pairs), and from which a sorted set of indices can be taken (the
tokenizer's random sample).
"""

from __future__ import annotations

import abc
import difflib
import gzip
import hashlib
import itertools
import logging
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import ml_collections
import numpy as np

from seq2seq.data import synthetic

logger = logging.getLogger(__name__)
_WARNED: set[str] = set()  # resolve_split's warnings given in this process

Pair = tuple[str, str]  # (source sentence, target sentence)

# The synthetic task's own split names, for the configs' generic ones.
_SYNTHETIC_SPLITS = {"train": "train", "validation": "validation", "test": "test"}
CHUNK_SIZE = 20_000  # pairs read at a time when streaming a corpus
BOM = "\ufeff"  # the byte-order mark some editors write first: not a file's text


class DataError(ValueError):
    """Data that cannot be used; the message is one line naming the file or key and the fix."""


class ParallelCorpus(abc.ABC):
    """A sequence of sentence pairs, read in order and in chunks."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of pairs."""

    @abc.abstractmethod
    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[list[Pair]]:
        """All pairs in order, as lists of at most ``size`` pairs."""

    def take(self, indices: Sequence[int]) -> list[Pair]:
        """The pairs at ``indices`` (sorted ascending), read in one pass."""
        wanted = np.asarray(indices, np.int64)
        pairs: list[Pair] = []
        start = 0
        for chunk in self.chunks():
            low, high = np.searchsorted(wanted, [start, start + len(chunk)])
            pairs.extend(chunk[i - start] for i in wanted[low:high])
            start += len(chunk)
            if high == len(wanted):
                break
        return pairs

    def pairs(self) -> list[Pair]:
        """Every pair, in memory (for the small evaluation splits)."""
        return list(itertools.chain.from_iterable(self.chunks()))


class ListCorpus(ParallelCorpus):
    """Pairs already in memory (the synthetic task)."""

    def __init__(self, pairs: Sequence[Pair]):
        self._pairs = list(pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[list[Pair]]:
        for start in range(0, len(self._pairs), size):
            yield self._pairs[start : start + size]


def _open_text(path: Path):
    """A binary file handle, decompressing ``.gz`` files."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def _count_lines(path: Path) -> int:
    """The file's lines, a last one without its newline included (about 1 s a gigabyte)."""
    count, last = 0, b"\n"
    with _open_text(path) as file:
        while block := file.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _existing(folder: Path, stem: str, language: str) -> Path | None:
    """``STEM.LANG`` or else ``STEM.LANG.gz`` in ``folder``; None if neither is a file there."""
    for name in (f"{stem}.{language}", f"{stem}.{language}.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _find_file(folder: Path, stem: str, language: str) -> Path:
    """``STEM.LANG`` or ``STEM.LANG.gz`` in ``folder``; a one-line error naming what is there."""
    if found := _existing(folder, stem, language):
        return found
    present = sorted(p.name for p in folder.iterdir() if p.is_file())
    shown = ", ".join(present[:12]) + (", ..." if len(present) > 12 else "")
    raise DataError(
        f"no {stem}.{language} (or {stem}.{language}.gz) in {folder} (found: {shown or 'nothing'});"
        " check config.data.dir, the split stem and the language codes"
    )


def _split_files(folder: Path, stem: str, source_lang: str, target_lang: str) -> tuple[Path, Path]:
    """The source and target files of split ``stem`` in ``folder``; a one-line error if missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(
            f"data folder {folder} does not exist; point config.data.dir (eval.py: "
            f"--data_dir) to the folder holding {stem}.{source_lang} and {stem}.{target_lang}"
        )
    return _find_file(folder, stem, source_lang), _find_file(folder, stem, target_lang)


def corpus_fingerprint(config: ml_collections.ConfigDict) -> dict[str, dict] | None:
    """The training split's files as bytes, apart from where they lie: for ``text`` data, each
    file's name, size and SHA-256 (about a second a gigabyte); None for the other sources,
    whose config alone names their pairs (a TFDS dataset by ``data.name``).

    A run records it when it starts (``RunDirectory.record_corpus``), so a run whose corpus
    moved to another folder can be known as the same run and continued from there.
    """
    data = config.data
    if data.source != "text":
        return None
    files = _split_files(Path(data.dir), data.train_split, data.src_lang, data.tgt_lang)
    fingerprint = {}
    for path in files:
        with path.open("rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
        fingerprint[path.name] = {"bytes": path.stat().st_size, "sha256": digest}
    return fingerprint


class TextCorpus(ParallelCorpus):
    """Line-aligned UTF-8 files ``FOLDER/STEM.SRC`` and ``FOLDER/STEM.TGT`` (optionally ``.gz``).

    The constructor counts both files' lines, so misaligned or empty corpora stop before any
    work is done.
    """

    def __init__(self, folder: Path, stem: str, source_lang: str, target_lang: str, limit: int = 0):
        self.source_path, self.target_path = _split_files(folder, stem, source_lang, target_lang)
        source_lines = _count_lines(self.source_path)
        target_lines = _count_lines(self.target_path)
        if source_lines != target_lines:
            raise DataError(
                f"{self.source_path} has {source_lines} lines but {self.target_path} has "
                f"{target_lines}; the two sides of a split must be line-aligned"
            )
        if source_lines == 0:
            raise DataError(
                f"{self.source_path} and {self.target_path} are empty; split {stem!r} needs "
                "sentence pairs"
            )
        self._length = min(source_lines, limit) if limit else source_lines

    def __len__(self) -> int:
        return self._length

    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[list[Pair]]:
        with _open_text(self.source_path) as sources, _open_text(self.target_path) as targets:
            lines = itertools.islice(zip(sources, targets, strict=True), self._length)
            for start in itertools.count(0, size):
                chunk = list(itertools.islice(lines, size))
                if not chunk:
                    return
                yield [self._decode(pair, start + i) for i, pair in enumerate(chunk)]

    def _decode(self, pair: tuple[bytes, bytes], index: int) -> Pair:
        texts = []
        for raw, path in zip(pair, (self.source_path, self.target_path), strict=True):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
                texts.append(text.removeprefix(BOM) if index == 0 else text)
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{path} line {index + 1} is not UTF-8 ({error.reason}); convert the file to "
                    "UTF-8"
                ) from None
        return texts[0], texts[1]


def _unknown_tfds_name(name: str, error: ValueError) -> str:
    """One line for a ``data.name`` TFDS cannot build: a dataset it does not know (with the
    nearest names it does) or a config the dataset lacks (with the ones it has). TFDS's own
    message is a page: every dataset it knows, one per line."""
    import tensorflow_datasets as tfds

    dataset, _, config = name.partition("/")
    known = tfds.list_builders(with_community_datasets=False)
    if dataset not in known:
        near = difflib.get_close_matches(dataset, known, n=3)
        hint = f"did you mean {' or '.join(near)}?" if near else "check the name"
        return f"config.data.name={name!r}: TFDS has no dataset {dataset!r}; {hint}"
    configs = [c.name for c in getattr(tfds.builder_cls(dataset), "BUILDER_CONFIGS", [])]
    if config and configs and config not in configs:
        return (
            f"config.data.name={name!r}: {dataset} has no config {config!r}; its configs are "
            f"{', '.join(configs)}"
        )
    return f"config.data.name={name!r} is not a TFDS dataset here: {str(error).splitlines()[0]}"


def _tfds_command() -> str:
    """How to call TFDS's command line: the ``tfds`` script beside this Python (a venv's
    ``.venv/bin/tfds``, which a shell without the venv on its PATH does not find), or ``tfds``."""
    beside = Path(sys.executable).parent / "tfds"
    return str(beside) if beside.is_file() else (shutil.which("tfds") or "tfds")


class TfdsCorpus(ParallelCorpus):
    """A TFDS translation dataset (e.g. ``wmt14_translate/de-en``), read with random access.

    The data must be prepared as array_record files, which TFDS's data source reads without
    TensorFlow (tfrecord files need ``tf.data``). Each record is a dict keyed by language code
    (``{"de": b"...", "en": b"..."}``), so either translation direction reads the same data.
    """

    def __init__(
        self,
        name: str,
        split: str,
        source_lang: str,
        target_lang: str,
        data_dir: str = "",
        limit: int = 0,
    ):
        import tensorflow_datasets as tfds

        # Registers the WMT builders; the package does so only when TensorFlow is installed.
        import tensorflow_datasets.translate  # noqa: F401

        try:
            builder = tfds.builder(name, data_dir=data_dir or None, file_format="array_record")
        except ValueError as error:  # includes tfds' DatasetNotFoundError
            raise DataError(_unknown_tfds_name(name, error)) from None
        languages = list(builder.info.features.keys())
        for key, language in (("src_lang", source_lang), ("tgt_lang", target_lang)):
            if language not in languages:
                raise DataError(
                    f"config.data.{key}={language!r} is not a language of {name} "
                    f"(it has {', '.join(languages)})"
                )
        build = (
            f"`{_tfds_command()} build {name} --data_dir={builder.data_dir_root} "
            "--file_format=array_record` where the internet is reachable"
        )
        try:
            self._records = builder.as_data_source(split=split)
        except KeyError:
            raise DataError(
                f"{name} is not prepared in {builder.data_dir_root}; prepare it with {build}, or "
                "point config.data.dir at a folder that holds it"
            ) from None
        except NotImplementedError:
            raise DataError(
                f"{name} in {builder.data_dir_root} is stored without random access "
                f"(tfrecord); prepare it again with {build}"
            ) from None
        except ValueError as error:
            raise DataError(
                f"{name} has no split {split!r} ({str(error).splitlines()[0]}); "
                "check config.data.train_split/eval_split/test_split"
            ) from None
        self.source_lang, self.target_lang = source_lang, target_lang
        self._length = min(len(self._records), limit) if limit else len(self._records)

    def __len__(self) -> int:
        return self._length

    def _read(self, indices: Sequence[int]) -> list[Pair]:
        read_many = getattr(self._records, "__getitems__", None)
        records = read_many(list(indices)) if read_many else [self._records[i] for i in indices]
        return [(_text(r[self.source_lang]), _text(r[self.target_lang])) for r in records]

    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[list[Pair]]:
        for start in range(0, self._length, size):
            yield self._read(range(start, min(start + size, self._length)))

    def take(self, indices: Sequence[int]) -> list[Pair]:
        return self._read([int(i) for i in indices])


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def available_splits(data: ml_collections.ConfigDict) -> list[str] | None:
    """The split names (or file stems) ``data`` can open; None where that is not known cheaply.

    For ``text`` data: every stem with both a source and a target file in ``data.dir``.
    """
    if data.source == "synthetic":
        return list(_SYNTHETIC_SPLITS)
    folder = Path(data.dir)
    if data.source != "text" or not folder.is_dir():
        return None
    names = {path.name.removesuffix(".gz") for path in folder.iterdir() if path.is_file()}
    source_suffix, target_suffix = f".{data.src_lang}", f".{data.tgt_lang}"
    stems = {name.removesuffix(source_suffix) for name in names if name.endswith(source_suffix)}
    return sorted(stem for stem in stems if stem + target_suffix in names)


# The roles a command may name a split by, and data's keys that say which split each means
ROLES = {"train": "train_split", "validation": "eval_split", "test": "test_split"}
SPLIT_KEYS = tuple(ROLES.values())


def check_split_keys(
    data: ml_collections.ConfigDict,
    keys: Sequence[str],
    by_name: bool = False,
    overrides: bool = True,
    require_folder: bool = False,
) -> None:
    """Each of ``data``'s split keys in ``keys`` (e.g. ``"train_split"``, ``"eval_split"``)
    names a stem with both files in ``data.dir``: checked before a run writes or reads
    anything, so that a validation stem named otherwise (``valid``, ``dev``) stops it at once
    rather than after its tokenizer has trained. ``text`` data is checked where its folder
    exists (a missing folder is left to the reader's own error, which says so, unless
    ``require_folder``, a run about to start, asks for that error here, and for the line
    counts that find a split's sides misaligned or empty); ``tfds`` data is opened for each
    key's split, so that a dataset not prepared where ``data.dir`` points stops the run as
    early, with the reader's own line.

    The fix offered: ``--config.data.KEY=STEM``; with ``by_name`` (a command that names the
    split it reads, as ``eval.py`` and ``compare`` do) ``--split=STEM`` unless STEM is itself a
    role's name; there, without ``overrides`` (``eval.py`` takes no config keys), the files
    themselves as ``--input`` and ``--reference`` (with the ``--output`` those need).

    Raises:
      DataError: one line naming the key, the stems the folder has and the override to pass;
        or, where no stem has both languages' files, the languages the folder's files have.
    """
    if data.source == "tfds":
        for key in keys:  # opening is cheap (no record is read) and raises the reader's line
            TfdsCorpus(data.name, data[key], data.src_lang, data.tgt_lang, data.dir)
        return
    available = available_splits(data) if data.source == "text" else None
    if available is None:
        if require_folder and data.source == "text" and keys:  # the reader's line: no folder
            _split_files(Path(data.dir), data[keys[0]], data.src_lang, data.tgt_lang)
        return
    if not available:
        names = [path.name.removesuffix(".gz") for path in Path(data.dir).iterdir()]
        languages = sorted({name.rsplit(".", 1)[1] for name in names if "." in name})
        raise DataError(
            f"no split of {data.dir} has both a .{data.src_lang} and a .{data.tgt_lang} file "
            f"(its files' languages: {', '.join(languages) or 'none'}); check "
            "config.data.src_lang and config.data.tgt_lang"
        )
    for key in keys:
        stem = data[key]
        if stem in available:
            continue
        # the fix offered: a stem no other split key names, by its spelling or as the only one
        others = {data.get(other) for other in SPLIT_KEYS if other != key}
        candidates = [name for name in available if name not in others]
        close = difflib.get_close_matches(stem, candidates, n=1, cutoff=0.4)
        fix = (close or candidates)[0] if close or len(candidates) == 1 else "STEM"
        if by_name and fix not in ROLES:
            advice = f"--split={fix}"
        elif overrides:
            advice = f"--config.data.{key}={fix}"
        else:
            folder = Path(data.dir)
            advice = (
                f"--input {folder / f'{fix}.{data.src_lang}'} --output FILE "
                f"--reference {folder / f'{fix}.{data.tgt_lang}'}"
            )
        raise DataError(
            f"data.{key}={stem!r}: {_missing_files(Path(data.dir), stem, data)} in {data.dir} "
            f"(its {data.src_lang}-{data.tgt_lang} splits: {', '.join(available)}); "
            f"pass {advice}"
        )
    if require_folder:  # counting lines: a misaligned or empty split stops the run here too
        for key in keys:
            TextCorpus(Path(data.dir), data[key], data.src_lang, data.tgt_lang)


def _missing_files(folder: Path, stem: str, data: ml_collections.ConfigDict) -> str:
    """``no STEM.SRC and STEM.TGT``, or, where one side is there, the one that is not."""
    there = [lang for lang in (data.src_lang, data.tgt_lang) if _existing(folder, stem, lang)]
    if len(there) == 1:
        (missing,) = {data.src_lang, data.tgt_lang} - set(there)
        return f"no {stem}.{missing} beside {stem}.{there[0]}"
    return f"no {stem}.{data.src_lang} and {stem}.{data.tgt_lang}"


def resolve_split(data: ml_collections.ConfigDict, name: str, overrides: bool = True) -> str:
    """The split (or file stem) that ``name`` means: a role or a split's own name.

    The roles ``train``, ``validation`` and ``test`` stand for ``data.train_split``,
    ``data.eval_split`` and ``data.test_split`` (e.g. ``test`` is ``test_2016_flickr`` for
    Multi30k); any other name is taken as a split name or file stem. A role whose stem a text
    folder lacks, where the folder has files of the role's own name (``test.de``, ``test.en``:
    a held-out corpus read with ``eval.py --data_dir``), means those files, with a warning.

    Raises:
      DataError: ``name`` is neither a role nor a split the data has (the message lists both),
        or is a role whose stem the folder lacks (the message names its key).
    """
    roles = {role: data[key] for role, key in ROLES.items()}
    if name in roles and data.source == "text" and roles[name] != name:
        available = available_splits(data) or []
        if roles[name] not in available and name in available:
            message = (
                f"data.{ROLES[name]}={roles[name]!r}: no such files in {data.dir}; reading its "
                f"{name}.{data.src_lang} and {name}.{data.tgt_lang}, the role's own name"
            )
            if message not in _WARNED:  # once, however often the split is resolved
                _WARNED.add(message)
                logger.warning(message)
            return name
    if name in roles:
        # the stem it stands for is there (``overrides``: whether the caller takes config keys)
        check_split_keys(data, (ROLES[name],), by_name=True, overrides=overrides)
        return roles[name]
    available = available_splits(data)
    if available is None or name in available:
        return name
    described = ", ".join(f"{role} ({split})" for role, split in roles.items())
    raise DataError(
        f"unknown split {name!r}; use a role: {described}, or one of the splits in "
        f"{data.dir or data.source}: {', '.join(available) or 'none'}"
    )


def open_corpus(
    data: ml_collections.ConfigDict, split: str, *, seed: int = 0, limit: int = 0
) -> ParallelCorpus:
    """The pairs of ``split`` from the source named by ``data.source``.

    Args:
      data: the ``config.data`` section.
      split: a split name (``tfds``, ``synthetic``) or file stem (``text``).
      seed: the synthetic task's seed.
      limit: read only the first ``limit`` pairs; 0 for all.

    Raises:
      DataError: the data is missing, misaligned, empty or unreadable (one line).
    """
    if data.source == "text":
        return TextCorpus(Path(data.dir), split, data.src_lang, data.tgt_lang, limit=limit)
    if data.source == "tfds":
        return TfdsCorpus(data.name, split, data.src_lang, data.tgt_lang, data.dir, limit=limit)
    if data.source == "synthetic":
        if split not in _SYNTHETIC_SPLITS:
            raise DataError(
                f"unknown split {split!r} for data.source='synthetic'; "
                f"use one of {', '.join(_SYNTHETIC_SPLITS)}"
            )
        pairs = synthetic.load_split(
            _SYNTHETIC_SPLITS[split],
            seed=seed,
            lengths=data.synthetic_lengths,
            min_words=data.synthetic_min_words,
            max_words=data.synthetic_max_words,
        )
        return ListCorpus(pairs[:limit] if limit else pairs)
    raise DataError(f"config.data.source={data.source!r} is not one of synthetic, text, tfds")


def load_pairs(data: ml_collections.ConfigDict, split: str, *, seed: int = 0) -> list[Pair]:
    """All (source, target) pairs of ``split``, in memory (for evaluation splits)."""
    return open_corpus(data, split, seed=seed).pairs()
