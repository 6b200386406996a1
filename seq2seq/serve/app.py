"""The HTTP API and the attention page: ``POST /translate``, ``GET /models``, ``GET /``.

Every refusal is a 4xx whose JSON body is ``{"error": "one line naming the problem and the
fix"}``, and the server goes on serving after it. What is refused:

* a body over ``Limits.max_body_bytes`` (413), a compressed body or one not sent as
  ``application/json`` (415), a body that is not UTF-8 or not JSON (400), a body that stops
  arriving for ``Limits.body_seconds`` (408);
* a field of the wrong type, an unknown field, no sentences (422);
* a sentence that is empty, whitespace or invisible characters, or that holds a line break, a
  control character or a lone surrogate; more than ``Limits.max_sentences`` sentences; an
  unknown model name or one named twice; an n-best list longer than the beam (422);
* a path or method the API does not have (404, 405);
* a sentence longer than a model reads (``decode.max_input_length`` tokens, EOS included): 422.
  ``eval.py`` cuts such inputs and flags them, but a cut translation shown beside its attention
  would look like the model's answer to the whole sentence, so the server refuses it instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from starlette.exceptions import HTTPException

from seq2seq.serve.batching import Batcher, Job
from seq2seq.serve.models import ServedModel

STATIC = Path(__file__).parent / "static"
EXAMPLE_BODY = '{"sentences": ["a sentence to translate"]}'
THE_API = "the API is POST /translate and GET /models (GET /docs describes them)"


@dataclasses.dataclass(frozen=True)
class Limits:
    max_sentences: int = 32  # sentences in one request
    max_body_bytes: int = 64 * 1024  # a request's body
    body_seconds: float = 30.0  # the longest wait for the next part of a body that has begun
    max_batch: int = 64  # sentences searched together (rows of one beam search)
    wait_seconds: float = 0.005  # how long a batch waits for more requests after its first


class TranslateRequest(BaseModel):
    """What to translate, with which models, and what to return besides the translations."""

    model_config = ConfigDict(extra="forbid")
    sentences: list[StrictStr] = Field(
        description="Source sentences, one string each.", examples=[["a sentence to translate"]]
    )
    models: list[StrictStr] | None = Field(
        None, description="Names from GET /models; all of them when left out."
    )
    nbest: StrictInt | None = Field(
        None, description="Also return the K best outputs of the beam (1 <= K <= beam size)."
    )
    attention: StrictBool = Field(
        False, description="Also return the cross-attention weights with the subword tokens."
    )


class ErrorBody(BaseModel):
    """Every refusal's body."""

    error: str = Field(description="One line naming the problem and the fix.")


ERRORS = {
    status: {"model": ErrorBody, "description": description}
    for status, description in [
        (400, "The body is not UTF-8 or not JSON."),
        (408, "The body stopped arriving (GET /models: limits.body_seconds)."),
        (413, "The body is over the size limit (GET /models: limits.max_body_bytes)."),
        (415, "The body is compressed (Content-Encoding); send it plain."),
        (422, "A field's type or value, a sentence or a model name is refused."),
    ]
}


class RequestError(Exception):
    """A request the server refuses: its status and one line for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _validation_message(error: RequestValidationError) -> tuple[int, str]:
    """One line for pydantic's first complaint about a body; 400 when it is not JSON at all."""
    first = error.errors()[0]
    kind = first.get("type", "")
    if kind == "json_invalid":
        where = first.get("ctx", {}).get("error", "")
        return 400, f"the body is not valid JSON ({where}); send an object like {EXAMPLE_BODY}"
    location = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    if kind == "missing" and not location:
        return 400, f"the body is empty; send a JSON object like {EXAMPLE_BODY}"
    if not location and kind in ("model_attributes_type", "dict_type"):
        return 422, (
            f"the body is not a JSON object (sent as Content-Type: application/json?); send an "
            f"object like {EXAMPLE_BODY}"
        )
    if kind == "extra_forbidden":
        return 422, (
            f"unknown field {location!r}; the fields are sentences, models, nbest and attention"
        )
    if kind == "missing":
        return 422, f"{location} is missing; send a JSON object like {EXAMPLE_BODY}"
    return 422, f"{location or 'the body'}: {first.get('msg', 'invalid')}; see GET /docs"


def _is_json(media_type: str) -> bool:
    """``application/json`` or a JSON type of its own (``application/problem+json``)."""
    media_type = media_type.lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


class BodyGuard:
    """ASGI middleware: a request body over ``limit`` bytes is refused (413) before anything
    reads it, and one that is not UTF-8 (400): JSON is UTF-8 (RFC 8259), and a decoding error
    deep inside the framework would be a 500, not a line naming the offending byte."""

    def __init__(self, app, limit: int, seconds: float):
        self.app = app
        self.limit = limit
        self.seconds = seconds  # a client that stops sending mid-body is refused after this

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        encoding = headers.get(b"content-encoding", b"identity").decode("latin-1").strip()
        if encoding.lower() not in ("", "identity"):
            message = (
                f"the body is compressed (Content-Encoding: {encoding}), which this server does "
                "not read; send it as plain UTF-8 JSON"
            )
            await self._refuse(scope, send, 415, message)
            return
        media = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip()
        if scope["path"] == "/translate" and not _is_json(media):  # it was read as not JSON
            message = (
                f"the body is sent as Content-Type: {media or '(none)'}; send it as "
                "application/json (curl: -H 'Content-Type: application/json')"
            )
            await self._refuse(scope, send, 415, message)
            return
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, send, 413, self._too_large(int(declared)))
            return
        body = b""
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.seconds)
            except TimeoutError:
                message = (
                    f"the body stopped arriving after {len(body)} bytes (nothing more for "
                    f"{self.seconds:g} s); send the whole body at once"
                )
                await self._refuse(scope, send, 408, message)
                return
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(scope, send, 413, self._too_large(len(body)))
                return
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as error:
            message = (
                f"the body is not UTF-8 (byte 0x{body[error.start]:02x} at offset "
                f"{error.start}); send UTF-8 JSON"
            )
            await self._refuse(scope, send, 400, message)
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self, size: int) -> str:
        return (
            f"the body has {size} bytes, over the limit of {self.limit}; send fewer or shorter "
            "sentences per request"
        )

    @staticmethod
    async def _refuse(scope, send, status: int, message: str) -> None:
        await error_response(status, message)(scope, None, send)


def _check(request: TranslateRequest, models: dict[str, ServedModel], limits: Limits) -> list[str]:
    """The names of the models to run; raises RequestError for anything they cannot do."""
    if not request.sentences:
        raise RequestError(422, f"sentences is empty; send at least one, e.g. {EXAMPLE_BODY}")
    if len(request.sentences) > limits.max_sentences:
        raise RequestError(
            422,
            f"{len(request.sentences)} sentences in one request, over the limit of "
            f"{limits.max_sentences}; send the rest in further requests",
        )
    for index, sentence in enumerate(request.sentences):
        _check_text(index, sentence)
    names = list(models) if request.models is None else request.models
    if not names:
        raise RequestError(422, f"models is empty; leave it out for all of {', '.join(models)}")
    for i, name in enumerate(names):
        if name not in models:
            raise RequestError(
                422, f"unknown model {name!r}; the models loaded are {', '.join(models)}"
            )
        if name in names[:i]:
            raise RequestError(422, f"model {name!r} is named twice in models; name each once")
    for name in names:
        model = models[name]
        if request.nbest is not None and not 1 <= request.nbest <= model.beam_size:
            raise RequestError(
                422, f"nbest {request.nbest} must be between 1 and {name}'s beam size "
                f"{model.beam_size}",
            )  # fmt: skip
        for index, length in enumerate(model.source_lengths(request.sentences)):
            if length <= 1:  # EOS alone: nothing the tokenizer could read
                raise RequestError(
                    422, f"sentence {index} has no token for {name} to read; send text"
                )
            if length > model.max_input_length:
                raise RequestError(
                    422,
                    f"sentence {index} is {length} tokens long for {name}, which reads at most "
                    f"{model.max_input_length}; split it into shorter sentences",
                )
    return names


def _check_text(index: int, sentence: str) -> None:
    """Refuses a sentence with nothing to translate, or with what no line of text holds: a
    line break (``eval.py`` reads a line per sentence), a control character, or a lone UTF-16
    surrogate (JSON's ``\\udc00``, which no UTF-8 answer could carry back)."""
    seen = "".join(c for c in sentence if unicodedata.category(c) not in ("Cf", "Zs"))
    if not seen.strip():
        raise RequestError(
            422, f"sentence {index} is empty, whitespace or invisible characters; send text"
        )
    for position, character in enumerate(sentence):
        code = f"U+{ord(character):04X}"
        if character in "\n\r\u2028\u2029\x85":
            raise RequestError(
                422, f"sentence {index} holds a line break ({code} at character {position}); "
                "send each line as a sentence of its own",
            )  # fmt: skip
        category = unicodedata.category(character)
        if (category == "Cc" and character != "\t") or category == "Cs":
            what = "a lone surrogate" if category == "Cs" else "the control character"
            raise RequestError(
                422, f"sentence {index} holds {what} {code} at character {position}; remove it",
            )  # fmt: skip


def _result_of(
    model: ServedModel, sentences: Sequence[str], found, capped, nbest, attention
) -> list:
    """Each sentence's translation, score, whether it was cut off at the output cap, n-best
    list and attention, as JSON."""
    translations = []
    for sentence, entries, cut in zip(sentences, found, capped, strict=True):
        score, text = entries[0] if entries else (None, "")
        entry: dict[str, object] = {"text": text, "score": score, "capped": cut}
        if nbest is not None:
            entry["nbest"] = [{"text": t, "score": s} for s, t in entries[:nbest]]
        if attention:  # an empty translation too: its one row, EOS's, shows what it read
            entry["attention"] = model.attention(sentence, text, ended=not cut)
        translations.append(entry)
    return translations


def translate_batch(
    models: dict[str, ServedModel], jobs: Sequence[Job], max_batch: int
) -> list[dict[str, object]]:
    """One search per model over every job's sentences, split back per job in its order.

    Each job's ``options`` is ``(model names, nbest, attention)``. Attention is a teacher-forced
    pass per sentence, run only for the jobs that ask for it.
    """
    results: list[dict[str, object]] = [{"results": []} for _ in jobs]
    for name, model in models.items():
        wanted = [i for i, job in enumerate(jobs) if name in job.options[0]]
        if not wanted:
            continue
        sentences = [s for i in wanted for s in jobs[i].sentences]
        start = time.perf_counter()
        translated = model.translate(sentences, max_batch)
        search_seconds = time.perf_counter() - start
        found, capped = translated.nbest, set(translated.capped)
        offset = 0
        for i in wanted:
            job = jobs[i]
            _, nbest, attention = job.options
            mine = slice(offset, offset + len(job.sentences))
            offset += len(job.sentences)
            start = time.perf_counter()
            cut = [index in capped for index in range(len(sentences))[mine]]
            translations = _result_of(model, job.sentences, found[mine], cut, nbest, attention)
            results[i]["results"].append({
                "model": name,
                "translations": translations,
                "search_seconds": search_seconds,
                "batch_sentences": len(sentences),
                "attention_seconds": time.perf_counter() - start if attention else 0.0,
            })  # fmt: skip
    for job, result in zip(jobs, results, strict=True):  # in the order the request names them
        result["results"].sort(key=lambda entry: job.options[0].index(entry["model"]))
    return results


async def _client_gone(request: Request) -> None:
    """Returns once the client of ``request`` has disconnected (its body already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(models: dict[str, ServedModel], limits: Limits = Limits()) -> FastAPI:
    """The server of ``models`` (by name, in the order the page shows them)."""
    batcher = Batcher(
        lambda jobs: translate_batch(models, jobs, limits.max_batch),
        max_sentences=limits.max_batch,
        wait_seconds=limits.wait_seconds,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(
        title="seq2seq translation server",
        description="RNNsearch and the Transformer side by side, with their attention.",
        lifespan=lifespan,
        redirect_slashes=False,  # POST /translate/ was a 307 to /translate, not one line
    )
    app.state.batcher = batcher
    app.state.models = models
    app.add_middleware(BodyGuard, limit=limits.max_body_bytes, seconds=limits.body_seconds)

    @app.exception_handler(RequestValidationError)
    async def refuse_invalid(request: Request, error: RequestValidationError):
        return error_response(*_validation_message(error))

    @app.exception_handler(RequestError)
    async def refuse(request: Request, error: RequestError):
        return error_response(error.status, error.message)

    @app.exception_handler(HTTPException)
    async def refuse_route(request: Request, error: HTTPException):
        """The framework's own refusals (no such path or method, a body it cannot parse) in the
        API's one-line form, with the fix."""
        where = f"{request.method} {request.url.path}"
        if error.status_code == 404:
            message = f"nothing at {request.url.path}; {THE_API}"
        elif error.status_code == 405:
            message = f"{where} is not a call this server answers; {THE_API}"
        else:
            message = f"{where}: {error.detail}; send a JSON object like {EXAMPLE_BODY}"
        return error_response(error.status_code, message)

    @app.exception_handler(Exception)
    async def report(request: Request, error: Exception):
        """A fault of the server's own (a bug): one line for the client, the next request is
        served as usual (the batcher hands the error to the requests of its batch alone)."""
        return error_response(500, f"internal error ({type(error).__name__}: {error})")

    @app.get("/models")
    @app.head("/models", include_in_schema=False)  # what health checks send
    async def list_models() -> dict[str, object]:
        """Each loaded model: family, size, parameters, checkpoint rule, test BLEU, examples."""
        return {
            "models": [model.card for model in models.values()],
            "limits": dataclasses.asdict(limits),
        }

    @app.post("/translate", responses=ERRORS)
    async def translate(request: TranslateRequest, http: Request) -> dict[str, object]:
        """Translations by each model (``models``: all when left out), with scores; the n-best
        lists and the cross-attention weights when asked for."""
        names = _check(request, models, limits)
        start = time.perf_counter()
        options = (names, request.nbest, request.attention)
        # A client that leaves before its batch starts takes its sentences out of the queue
        # (the batcher skips a cancelled job); a search already under way finishes.
        answer = asyncio.ensure_future(batcher.submit(list(request.sentences), options))
        gone = asyncio.ensure_future(_client_gone(http))
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if not answer.done():
            answer.cancel()
            raise RequestError(499, "the client disconnected before its batch began")
        return {
            "sentences": request.sentences,
            **answer.result(),
            "seconds": time.perf_counter() - start,
        }

    @app.get("/", include_in_schema=False)
    @app.head("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
