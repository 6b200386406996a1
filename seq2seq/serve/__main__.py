"""Serve trained models over HTTP, with a page that shows their attention.

    python -m seq2seq.serve --workdir runs/quickstart/quickstart_transformer \
        --workdir runs/quickstart/quickstart_rnnsearch [--checkpoint latest|best|STEP|average:K]
        [--ensemble] [--host 127.0.0.1] [--port 8000]

Then open http://127.0.0.1:8000/ (the page), http://127.0.0.1:8000/docs (the API). ``make serve``
serves the quickstart's two runs. The server listens on the loopback address only unless
``--host`` says otherwise.
"""

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

from absl import flags

from seq2seq import cli
from seq2seq.checkpoint_rule import rules_help

_WORKDIR = flags.DEFINE_multi_string(
    "workdir", None, "A training run to serve; repeat it to serve several side by side."
)
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", rules_help())
_ENSEMBLE = flags.DEFINE_bool(
    "ensemble", False, "Also serve the runs as one ensemble (they must share a target vocabulary)."
)
_BEAM_SIZE = flags.DEFINE_integer("beam_size", None, "Beam width (default: each run's config).")
_ALPHA = flags.DEFINE_float("alpha", None, "Length-penalty exponent (default: each run's).")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (0.0.0.0: every one).")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 64, "Sentences searched together, at most.")
_WAIT_MS = flags.DEFINE_float(
    "wait_ms", 5.0, "How long a batch waits for more requests after its first, in milliseconds."
)
_MAX_SENTENCES = flags.DEFINE_integer("max_sentences", 32, "Sentences in one request, at most.")
_MAX_BODY_KB = flags.DEFINE_integer("max_body_kb", 64, "A request body's size limit, in KiB.")


def main(argv: list[str]) -> None:
    del argv
    import uvicorn

    from seq2seq.serve.app import Limits, create_app
    from seq2seq.serve.models import load_models

    if not _WORKDIR.value:
        raise ValueError(
            "pass --workdir RUN (repeat it for several runs), e.g. after make quickstart"
        )
    for flag in (_MAX_BATCH, _MAX_SENTENCES, _MAX_BODY_KB):
        if flag.value < 1:
            raise ValueError(f"--{flag.name} {flag.value} must be at least 1")
    if _MAX_SENTENCES.value > _MAX_BATCH.value:
        raise ValueError(
            f"--max_sentences {_MAX_SENTENCES.value} must not exceed --max_batch "
            f"{_MAX_BATCH.value}: a request is searched in one batch"
        )
    models = load_models(
        _WORKDIR.value, _CHECKPOINT.value, ensemble=_ENSEMBLE.value, beam_size=_BEAM_SIZE.value,
        alpha=_ALPHA.value,
    )  # fmt: skip
    limits = Limits(
        max_sentences=_MAX_SENTENCES.value, max_body_bytes=_MAX_BODY_KB.value * 1024,
        max_batch=_MAX_BATCH.value, wait_seconds=_WAIT_MS.value / 1000,
    )  # fmt: skip
    print(f"serving {', '.join(models)} at http://{_HOST.value}:{_PORT.value}/", flush=True)
    uvicorn.run(create_app(models, limits), host=_HOST.value, port=_PORT.value, log_level="warning")


if __name__ == "__main__":
    cli.run(main)
