"""A bounded load test of a running server: C clients, each sending one sentence at a time.

    python -m seq2seq.serve.loadgen --url http://127.0.0.1:8000 --input sentences.txt \\
        --model quickstart_transformer --clients 32 --seconds 60

Each client posts ``{"sentences": [one line], "models": [--model]}`` and waits for the answer
before sending the next, for ``--seconds`` (after ``--warmup_seconds`` whose requests are not
counted, so that compiling the search for each batch size is not measured). Prints one JSON
object: requests and sentences per second, p50/p99 latency of a one-sentence request, errors.
Only loopback addresses are accepted: this is a measurement, not a way to load someone's server.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, as every command starts (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import asyncio
import json
import logging
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
from absl import flags

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _define_flags() -> SimpleNamespace:
    """The command's flags, defined when it runs (importing a module defines none)."""
    return SimpleNamespace(
        url=flags.DEFINE_string("url", "http://127.0.0.1:8000", "The server (loopback only)."),
        input=flags.DEFINE_string("input", None, "Sentences to send, one a line, in turn."),
        model=flags.DEFINE_string("model", None, "The model to ask (a name from GET /models)."),
        clients=flags.DEFINE_integer("clients", 32, "Concurrent clients."),
        seconds=flags.DEFINE_float("seconds", 60.0, "How long to measure."),
        warmup=flags.DEFINE_float("warmup_seconds", 10.0, "Load sent first, not measured."),
    )


async def _client(http, url, model, sentences, start, deadline, latencies, errors, counter):
    """Sends sentences in turn until ``deadline``; records the latency of those sent after
    ``start``."""
    while True:
        sent = time.perf_counter()
        if sent >= deadline:
            return
        index = counter[0] = counter[0] + 1
        body = {"sentences": [sentences[index % len(sentences)]], "models": [model]}
        try:
            response = await http.post(url + "/translate", json=body)
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        done = time.perf_counter()
        if sent >= start and done <= deadline:
            (latencies if ok else errors).append(done - sent)


async def measure(url, model, sentences, clients, seconds, warmup) -> dict[str, object]:
    latencies: list[float] = []
    errors: list[float] = []
    counter = [0]
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        start = time.perf_counter() + warmup
        deadline = start + seconds
        await asyncio.gather(*(
            _client(http, url, model, sentences, start, deadline, latencies, errors, counter)
            for _ in range(clients)
        ))  # fmt: skip
    done = len(latencies)
    milliseconds = np.array(latencies) * 1000
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": done,
        "errors": len(errors),
        "requests_per_second": done / seconds,
        "sentences_per_second": done / seconds,  # one sentence a request
        "p50_ms": float(np.percentile(milliseconds, 50)) if done else None,
        "p99_ms": float(np.percentile(milliseconds, 99)) if done else None,
    }


def run(f: SimpleNamespace) -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    host = urllib.parse.urlparse(f.url.value).hostname
    if host not in LOOPBACK:
        raise SystemExit(f"error: --url {f.url.value} is not a loopback address; measure locally")
    if not f.input.value or not Path(f.input.value).is_file():
        raise SystemExit(f"error: no --input file at {f.input.value}; pass one sentence a line")
    if not f.model.value:
        raise SystemExit("error: pass --model NAME (GET /models lists them)")
    sentences = [s for s in Path(f.input.value).read_text("utf-8").splitlines() if s.strip()]
    url = f.url.value.rstrip("/")
    result = asyncio.run(
        measure(url, f.model.value, sentences, f.clients.value, f.seconds.value, f.warmup.value)
    )
    print(json.dumps(result))


if __name__ == "__main__":
    holders = _define_flags()
    cli.run(lambda argv: run(holders))
