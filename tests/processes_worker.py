"""One of two processes that split texts and sums (``seq2seq.evaluation.processes``); prints JSON.

    python -m tests.processes_worker COORDINATOR_ADDRESS PROCESS_ID

Run by ``tests/test_multiprocess.py``: each process holds only its share of seven texts of
different lengths and scripts, and every process must print all seven in order, and the larger
of the two processes' seconds.
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np

from seq2seq.evaluation import processes
from seq2seq.training.processes import initialize_processes

TEXTS = ["ein Hund", "", "zwei Männer spielen Fußball", "x", "日本語の文", "a b c d e f g", "Ende"]


def main() -> None:
    address, process_id = sys.argv[1], int(sys.argv[2])
    initialize_processes(address, 2, process_id)
    mine = processes.share(len(TEXTS))
    gathered = processes.gather_texts([TEXTS[i] for i in mine], len(TEXTS))
    total = processes.sum_over_processes(np.array([len(mine), 10.0 * (jax.process_index() + 1)]))
    slowest = processes.slowest(1.0 + 2.0 * jax.process_index())
    print(json.dumps({"mine": mine, "gathered": gathered, "total": total.tolist(),
                      "slowest": slowest}))  # fmt: skip


if __name__ == "__main__":
    main()
