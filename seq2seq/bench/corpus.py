"""The input pipeline at WMT14's scale: first start, restart and batches per second.

    python -m seq2seq.bench.corpus --pairs 4500000 --workdir /tmp/wmt_input [--json]

A text corpus shaped like WMT14 English-German is written once under ``WORKDIR/corpus`` (kept
for later invocations): ``--pairs`` sentence pairs whose source lengths follow a log-normal law
(median 19 words, mean about 23, as WMT14's English side), targets a little longer, words drawn
from a Zipf law over 60,000 made-up words per language. The paper's base config then reads it
(shared BPE vocabulary of 37,000, tokens_per_batch 25,000), in three processes, each timed from
its start and measured for peak memory (VmHWM):

1. ``start``: a first start, training the tokenizer, encoding the corpus and writing it under
   ``WORKDIR/run/encoded``, then drawing batches;
2. ``restart``: a second start, which reads the encoded corpus memory-mapped;
3. ``restart`` with ``data.pack``: the same, packed rows.

Each reports target tokens/s of the batches it draws after it is ready (bucketed or packed) with
the number of worker processes feeding it.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags

REPO = Path(__file__).resolve().parents[2]
WORDS = 60_000  # made-up words per language
MEDIAN_WORDS, LENGTH_SIGMA = 19.0, 0.6  # log-normal source lengths: mean ~23 words
CHUNK = 100_000  # pairs generated and written at a time


def _lexicon(rng: np.random.Generator, letters: str) -> np.ndarray:
    """``WORDS`` distinct made-up words, shorter ones first (Zipf's frequent words are short)."""
    alphabet = np.array(list(letters))
    words: set[str] = set()
    while len(words) < WORDS:
        length = int(rng.integers(2, 4)) + int(len(words) * 10 // WORDS)
        words.add("".join(rng.choice(alphabet, length)))
    return np.array(sorted(words, key=len))


def write_corpus(directory: Path, pairs: int, seed: int = 0) -> None:
    """``directory/train.en`` and ``train.de``: ``pairs`` lines each (see the module)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lexicons = [_lexicon(rng, "etaoinshrdlucmfwypvbgk"), _lexicon(rng, "enisratdhulcgmobwfkz")]
    partial = [directory / f"train.{lang}.partial" for lang in ("en", "de")]
    with open(partial[0], "w") as source_file, open(partial[1], "w") as target_file:
        for start in range(0, pairs, CHUNK):
            count = min(CHUNK, pairs - start)
            source = np.clip(
                np.rint(rng.lognormal(np.log(MEDIAN_WORDS), LENGTH_SIGMA, count)), 1, 200
            )
            target = np.clip(np.rint(source * np.exp(rng.normal(0.05, 0.2, count))), 1, 200)
            for lengths, lexicon, file in (
                (source, lexicons[0], source_file),
                (target, lexicons[1], target_file),
            ):
                ids = (rng.zipf(1.15, int(lengths.sum())) - 1) % WORDS
                words = lexicon[ids]
                ends = np.cumsum(lengths.astype(np.int64))[:-1]
                file.write("".join(" ".join(line) + "\n" for line in np.split(words, ends)))
    for path in partial:
        path.rename(path.with_suffix(""))


def _config(corpus: Path, pack: bool):
    from seq2seq.config import load_config_file

    config = load_config_file(REPO / "configs" / "wmt14_ende_transformer_base.py")
    config.data.source, config.data.dir = "text", str(corpus)
    config.data.pack = pack
    return config


def _peak_rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return (
        int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
        / 1024
    )


def one_start(corpus: Path, run: Path, pack: bool, batches: int) -> dict:
    """What ``start`` or ``restart`` measures, in this process (see the module)."""
    from seq2seq.data.pipeline import build_training_data

    started = time.perf_counter()
    data = build_training_data(
        _config(corpus, pack), run / "tokenizer", encoded_dir=run / "encoded"
    )
    ready = time.perf_counter() - started
    iterator = iter(data.batches)
    next(iterator)
    drawn = time.perf_counter()
    tokens = sum(int(np.count_nonzero(next(iterator)["target"])) for _ in range(batches))
    seconds = time.perf_counter() - drawn
    return {
        "pack": pack,
        "pairs": data.counts["read"],
        "kept_pairs": data.counts["kept"],
        "ready_s": ready,  # from the call to batches ready: reading, tokenizing, planning
        "target_tokens_per_s": tokens / seconds,
        "batches_drawn": batches,
        "workers": 0,  # the batches are drawn in the training process itself
        "peak_rss_mb": _peak_rss_mb(),
    }


def _phase(name: str, corpus: Path, run: Path, pack: bool, batches: int) -> dict:
    """One phase in a fresh process, timed from the process's start."""
    command = [
        sys.executable, "-m", "seq2seq.bench.corpus", "--phase", name, f"--corpus={corpus}",
        f"--run={run}", f"--pack={pack}", f"--batches={batches}",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"bench corpus {name}: {done.stderr.strip().splitlines()[-1:]}")
    return {"phase": name, **json.loads(done.stdout.strip().splitlines()[-1]),
            "process_s": time.perf_counter() - started}  # fmt: skip


def corpus_benchmark(workdir: Path, pairs: int, batches: int = 50) -> dict:
    """Writes (or reuses) the corpus, then the three phases; a fresh run directory each time."""
    corpus = workdir / "corpus"
    started = time.perf_counter()
    if not (corpus / "train.de").exists():
        write_corpus(corpus, pairs)
    written = time.perf_counter() - started
    run = workdir / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    return {
        "pairs": pairs,
        "corpus_written_s": written,
        "phases": [
            _phase("start", corpus, run, False, batches),
            _phase("restart", corpus, run, False, batches),
            _phase("restart", corpus, run, True, batches),
        ],
    }


def main() -> None:
    pairs = flags.DEFINE_integer("pairs", 4_500_000, "Sentence pairs of the made-up corpus.")
    workdir = flags.DEFINE_string("workdir", None, "Keeps the corpus and the runs.")
    batches = flags.DEFINE_integer("batches", 50, "Batches drawn by each phase, once ready.")
    phase = flags.DEFINE_string("phase", None, "Internal: run one phase in this process.")
    corpus = flags.DEFINE_string("corpus", None, "Internal: the corpus folder.")
    run = flags.DEFINE_string("run", None, "Internal: the run folder.")
    pack = flags.DEFINE_bool("pack", False, "Internal: packed rows.")

    def entry(argv: list[str]) -> None:
        del argv
        if phase.value:
            result = one_start(Path(corpus.value), Path(run.value), pack.value, batches.value)
        elif workdir.value:
            result = corpus_benchmark(Path(workdir.value), pairs.value, batches.value)
        else:
            print("error: give --workdir DIR (it keeps the corpus for later runs)", file=sys.stderr)
            sys.exit(1)
        print(json.dumps(result))

    cli.run(entry)


if __name__ == "__main__":
    main()
