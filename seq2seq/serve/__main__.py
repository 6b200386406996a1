"""Serve trained models over HTTP, with a page that shows their attention.

    python -m seq2seq.serve --workdir runs/quickstart/quickstart_transformer \\
        --workdir runs/quickstart/quickstart_rnnsearch [--checkpoint latest|best|STEP|average:K]
        [--ensemble] [--host 127.0.0.1] [--port 8000]

Then open http://127.0.0.1:8000/ (the page), http://127.0.0.1:8000/docs (the API). ``make serve``
serves the quickstart's two runs. The server listens on the loopback address only unless
``--host`` says otherwise.
"""

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import asyncio
import contextlib
import errno
import logging
import math
import socket
from types import SimpleNamespace

from absl import flags

from seq2seq import cli
from seq2seq.checkpoints.rule import rules_help
from seq2seq.records.run_directory import RunDirectory
from seq2seq.serve.names import model_names


def _define_flags() -> SimpleNamespace:
    """The command's flags, defined when it runs (importing a module defines none)."""
    return SimpleNamespace(
        workdir=flags.DEFINE_multi_string(
            "workdir", None, "A training run to serve; repeat it to serve several side by side."
        ),
        checkpoint=flags.DEFINE_string("checkpoint", "latest", rules_help()),
        ensemble=flags.DEFINE_bool(
            "ensemble", False,
            "Also serve the runs as one ensemble (they must share a target vocabulary).",
        ),
        beam_size=flags.DEFINE_integer("beam_size", None, "Beam width (default: each run's)."),
        alpha=flags.DEFINE_float("alpha", None, "Length-penalty exponent (default: each run's)."),
        host=flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (0.0.0.0: all)."),
        port=flags.DEFINE_integer(
            "port", 8000, "Port to listen on (0: any free one).", lower_bound=0, upper_bound=65535
        ),
        max_batch=flags.DEFINE_integer("max_batch", 64, "Sentences searched together, at most."),
        wait_ms=flags.DEFINE_float(
            "wait_ms", 5.0, "How long a batch waits for more requests after its first (ms)."
        ),
        max_sentences=flags.DEFINE_integer("max_sentences", 32, "Sentences a request, at most."),
        max_body_kb=flags.DEFINE_integer("max_body_kb", 64, "A request body's limit, in KiB."),
        warm_up=flags.DEFINE_bool(
            "warm_up", True,
            "Before serving, translate the page's examples one at a time, so that a visitor's "
            "first request does not wait for the search and attention to compile.",
        ),
    )  # fmt: skip


def serve(f: SimpleNamespace) -> None:
    """Loads the runs, then serves them until interrupted."""
    if not f.workdir.value:
        raise ValueError(
            "pass --workdir RUN (repeat it for several runs), e.g. after make quickstart"
        )
    for flag in (f.max_batch, f.max_sentences, f.max_body_kb):
        if flag.value < 1:
            raise ValueError(f"--{flag.name} {flag.value} must be at least 1")
    if f.max_sentences.value > f.max_batch.value:
        raise ValueError(
            f"--max_sentences {f.max_sentences.value} must not exceed --max_batch "
            f"{f.max_batch.value}: a request is searched in one batch"
        )
    if not (math.isfinite(f.wait_ms.value) and f.wait_ms.value >= 0):
        raise ValueError(f"--wait_ms {f.wait_ms.value} must be a finite number >= 0 (0: no wait)")
    cli.check_decoding_flags(f.beam_size.value, f.alpha.value)
    for path in f.workdir.value:  # each a run, checked before JAX and the models load
        RunDirectory(path).require()
    model_names(f.workdir.value)  # each run once
    listener = listen(f.host.value, f.port.value)  # a busy port, before the models compile
    import uvicorn

    from seq2seq.serve.app import Limits, create_app
    from seq2seq.serve.models import load_models

    models = load_models(
        f.workdir.value, f.checkpoint.value, ensemble=f.ensemble.value,
        beam_size=f.beam_size.value, alpha=f.alpha.value,
    )  # fmt: skip
    limits = Limits(
        max_sentences=f.max_sentences.value, max_body_bytes=f.max_body_kb.value * 1024,
        max_batch=f.max_batch.value, wait_seconds=f.wait_ms.value / 1000,
    )  # fmt: skip
    if f.warm_up.value:
        for name, model in models.items():
            examples = model.card["examples"] or ["a warm-up sentence"]
            seconds = model.warm_up(examples)
            print(f"{name}: compiled for one-sentence requests in {seconds:.1f} s", flush=True)
    port = listener.getsockname()[1]  # --port 0's choice
    print(f"serving {', '.join(models)} at {page_url(f.host.value, port)}", flush=True)
    config = uvicorn.Config(create_app(models, limits), log_level="warning")
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C, after uvicorn closed its connections
        _server_class(uvicorn)(config).run(sockets=[listener])


def page_url(host: str, port: int) -> str:
    """The page's address, as a browser takes it (an IPv6 host in brackets: ``[::1]``)."""
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _server_class(uvicorn):
    """uvicorn's server, whose second Ctrl-C (its "force quit", which stops waiting for open
    requests) ends the command as quietly as the first. uvicorn skips the app's shutdown then,
    and the tasks left (the app's lifespan, each unfinished request) are cancelled as the event
    loop closes, each printing a traceback of CancelledError: now the app shuts down (a search
    under way finishes first), and the dropped requests are counted in one line."""

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            await super().shutdown(sockets=sockets)
            if self.force_exit:
                dropped = len(self.server_state.tasks)
                logging.getLogger("uvicorn.error").addFilter(_not_a_cancellation)
                await self.lifespan.shutdown()
                if dropped:
                    print(f"stopped at once: {dropped} unfinished request(s) dropped", flush=True)

    return Server


def _not_a_cancellation(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` for the server to accept on.

    Raises:
      ValueError: one line, where the address is not this machine's or the port is taken.
    """
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise ValueError(
            f"--host {host}: {error.strerror}; pass an address such as 127.0.0.1"
        ) from None
    listener = socket.socket(family, kind, protocol)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not over a live listener
    try:
        listener.bind(address)
    except OSError as error:
        listener.close()
        fix = (
            "pass an address of this machine as --host (0.0.0.0: all of them)"
            if error.errno == errno.EADDRNOTAVAIL
            else "pass another --port (0: any free one)"
        )
        raise ValueError(f"cannot listen on {host}:{port} ({error.strerror}); {fix}") from None
    listener.listen()  # from here a request waits in the queue for the server, never refused
    return listener


if __name__ == "__main__":
    holders = _define_flags()

    def main(argv: list[str]) -> None:
        del argv
        serve(holders)

    cli.run(main)
