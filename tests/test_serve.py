"""The translation server (``python -m seq2seq.serve``): its API against eval.py, its refusals,
concurrent requests batched, and the attention page in a real browser."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import httpx
import jax
import numpy as np
import pytest

from seq2seq.data import synthetic
from seq2seq.evaluation.translator import Translator
from seq2seq.models.base import shift_right
from seq2seq.records.run_directory import RunDirectory
from seq2seq.serve.__main__ import page_url
from seq2seq.serve.app import Limits, create_app
from seq2seq.serve.models import load_models, scores_of_the_test_split
from seq2seq.serve.names import model_names
from seq2seq.training.trainer import train
from tests.conftest import REPO, subprocess_env, tiny_config

LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # JAX's event, once per new program
LIMITS = Limits(max_sentences=6, max_body_bytes=4096, max_batch=16, wait_seconds=0.2)
FAMILIES = ("transformer", "rnnsearch")
SENTENCES = [source for source, _ in synthetic.load_split("test", 6)]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    """A tiny Transformer and a tiny RNNsearch, trained long enough (80 steps) to write a few
    words."""
    paths = {}
    for family in FAMILIES:
        config = tiny_config(family)
        config.train.steps = 80
        config.train.schedule = "constant"
        config.train.learning_rate = {"transformer": 3e-3, "rnnsearch": 1e-2}[family]
        config.checkpoint.every_steps = 80
        path = tmp_path_factory.mktemp(family)
        train(config, path)
        paths[family] = str(path)
    return paths


@contextlib.contextmanager
def serving(app):
    """``app`` served by uvicorn on a free loopback port, in a thread of this process; yields
    its URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def server(runs):
    """The server of both runs, its app, and each family's model name."""
    models = load_models([runs[family] for family in FAMILIES])
    app = create_app(models, LIMITS)
    with serving(app) as url:
        yield url, app, dict(zip(FAMILIES, models, strict=True))


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server[0], timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def eval_py_translations(runs, tmp_path_factory) -> dict[str, list[str]]:
    """What ``eval.py --input FILE`` writes for SENTENCES, per family (its own process)."""
    folder = tmp_path_factory.mktemp("eval_py")
    source = folder / "source.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    found = {}
    for family in FAMILIES:
        output = folder / f"{family}.txt"
        command = [sys.executable, "eval.py", "--workdir", runs[family], "--input", str(source),
                   "--output", str(output)]  # fmt: skip
        result = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=300
        )
        assert result.returncode == 0, result.stderr[-2000:]
        found[family] = output.read_text(encoding="utf-8").split("\n")[:-1]
    return found


def _translate(client, **body) -> dict:
    response = client.post("/translate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_translations_equal_eval_py_for_the_same_checkpoint(server, client, eval_py_translations):
    names = server[2]
    answer = _translate(client, sentences=SENTENCES, nbest=2)
    assert [result["model"] for result in answer["results"]] == list(names.values())
    for family, name in names.items():
        (result,) = [r for r in answer["results"] if r["model"] == name]
        texts = [t["text"] for t in result["translations"]]
        assert texts == eval_py_translations[family]
        assert any(texts), "the tiny models wrote nothing: the comparison would be empty"
        for translation in result["translations"]:
            best, second = translation["nbest"]
            assert (best["text"], best["score"]) == (translation["text"], translation["score"])
            assert best["score"] >= second["score"]


def test_attention_rows_sum_to_one_over_the_source_and_target_tokens(server, client):
    names = server[2]
    answer = _translate(client, sentences=SENTENCES[:2], attention=True)
    expected_heads = {"transformer": (2, 4), "rnnsearch": (1, 1)}  # tiny_config's sizes
    for family, name in names.items():
        (result,) = [r for r in answer["results"] if r["model"] == name]
        for sentence, translation in zip(SENTENCES[:2], result["translations"], strict=True):
            attention = translation["attention"]
            # the word tokenizer: a piece per word (marked as a word's start), EOS last
            assert [
                p.removeprefix("▁") for p in attention["source_tokens"][:-1]
            ] == sentence.split()
            target_words = translation["text"].split()
            assert [p.removeprefix("▁") for p in attention["target_tokens"][:-1]] == target_words
            weights = np.array(attention["weights"])
            layers, heads = expected_heads[family]
            shape = (layers, heads, len(attention["target_tokens"]), len(sentence.split()) + 1)
            assert weights.shape == shape
            assert (attention["layers"], attention["heads"]) == (layers, heads)
            np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-3)
            assert weights.min() >= 0


def test_attention_is_the_unpadded_teacher_forced_pass_over_the_translation(server, client, runs):
    names = server[2]
    sentence = SENTENCES[3]
    answer = _translate(client, sentences=[sentence], attention=True)
    for family, name in names.items():
        (result,) = [r for r in answer["results"] if r["model"] == name]
        translation = result["translations"][0]
        translator = Translator.restore(runs[family])
        tokenizer = translator.tokenizer
        source = tokenizer.encode_source([sentence])[0]
        target = tokenizer.encode_target([translation["text"]])[0]
        # eager, one sentence, no padding: the pass the notebooks plotted before it was compiled
        _, aux = translator.model(source[None], shift_right(target[None]), return_attention=True)
        expected = np.asarray(aux["cross_attention"][0])
        np.testing.assert_allclose(translation["attention"]["weights"], expected, atol=2e-5)


def test_models_are_described(server, client):
    cards = client.get("/models").json()["models"]
    assert [card["family"] for card in cards] == list(FAMILIES)
    for card in cards:
        assert card["checkpoint"] == "step 80"  # --checkpoint latest: the last one saved
        assert card["parameters"] > 1000
        assert card["test_bleu"] is None  # these runs were never evaluated on the test split
    assert cards[0]["attention"] == "heads" and cards[1]["attention"] == "alignment"


LONG = " ".join(["the"] * 300)
BAD_INPUTS = [
    ("empty sentence", b'{"sentences": [""]}', 422, "sentence 0 is empty, whitespace or"),
    ("whitespace", b'{"sentences": ["a", " \\t "]}', 422, "sentence 1 is empty, whitespace or"),
    ("invisible", b'{"sentences": ["\\u200b\\u200b"]}', 422, "whitespace or invisible characters"),
    # a 500 after the whole search: the answer could not be encoded as UTF-8
    (
        "lone surrogate",
        b'{"sentences": ["a \\udc00"]}',
        422,
        "lone surrogate U+DC00 at character 2",
    ),
    # these were translated: NUL alone as the source "</s>", a line break as one sentence
    ("NUL", b'{"sentences": ["\\u0000"]}', 422, "control character U+0000 at character 0"),
    ("bell", b'{"sentences": ["a\\u0007b"]}', 422, "control character U+0007 at character 1"),
    ("line break", b'{"sentences": ["a b\\nc"]}', 422, "line break (U+000A at character 3)"),
    ("too long", json.dumps({"sentences": [LONG]}).encode(), 422, "reads at most 256"),
    ("too many", json.dumps({"sentences": ["a"] * 7}).encode(), 422, "over the limit of 6"),
    ("no sentences", b'{"sentences": []}', 422, "sentences is empty"),
    ("malformed JSON", b'{"sentences": ["a"', 400, "not valid JSON"),
    ("empty body", b"", 400, "the body is empty"),
    ("a string, not a list", b'{"sentences": "a b"}', 422, "sentences: Input should be"),
    ("a number, not a string", b'{"sentences": [3]}', 422, "sentences.0: Input should be"),
    ("a string, not a bool", b'{"sentences": ["a"], "attention": "yes"}', 422, "attention"),
    ("a list, not an object", b'["a"]', 422, "the body is not a JSON object"),
    ("unknown field", b'{"sentences": ["a"], "beam": 4}', 422, "unknown field 'beam'"),
    ("non-UTF-8", b'{"sentences": ["\xff\xfe"]}', 400, "not UTF-8 (byte 0xff at offset 16)"),
    ("unknown model", b'{"sentences": ["a"], "models": ["gpt"]}', 422, "unknown model 'gpt'"),
    ("n-best over the beam", b'{"sentences": ["a"], "nbest": 99}', 422, "nbest 99 must be"),
    ("body over the limit", b'{"sentences": ["' + b"a " * 3000 + b'"]}', 413, "over the limit"),
]


def test_a_models_test_bleu_is_read_where_eval_py_files_it(tmp_path):
    """eval.py files ``--split test`` by the stem the role names (Multi30k's
    test_2016_flickr), or by ``test`` where it read a folder's test.* files instead: the run's
    own folder's, or another corpus's (``--data_dir``), which is not the run's test score."""
    config = tiny_config()
    config.data.test_split = "test_2016_flickr"
    config.data.dir = str(tmp_path / "corpus")
    run = RunDirectory(tmp_path / "run")
    run.eval_dir.mkdir(parents=True)
    assert scores_of_the_test_split(run, config.data, "latest") is None
    for elsewhere in ({}, {"data_dir": str(tmp_path / "held_out")}):  # unknown, or another
        run.eval_result_file("test").write_text(json.dumps({"bleu": 12.5, **elsewhere}))
        assert scores_of_the_test_split(run, config.data, "latest") is None
    own = {"bleu": 12.5, "data_dir": str(tmp_path / "corpus")}
    run.eval_result_file("test").write_text(json.dumps(own))
    assert scores_of_the_test_split(run, config.data, "latest") == own
    run.eval_result_file("test_2016_flickr").write_text(json.dumps({"bleu": 40.7}))
    run.eval_result_file("test_2016_flickr", "best").write_text(json.dumps({"bleu": 41.0}))
    assert scores_of_the_test_split(run, config.data, "latest") == {"bleu": 40.7}
    assert scores_of_the_test_split(run, config.data, "best") == {"bleu": 41.0}


def test_the_card_shows_only_scores_of_the_step_and_decoding_it_serves():
    """The card showed a step-400 score for a run served at step 500, eval.py's beam-4 score
    for a model served with beam 2, and a comparison's score of the first 40 test sentences."""
    from seq2seq.serve.models import _scores_what_it_serves

    decode = SimpleNamespace(beam_size=4, alpha=0.6)
    served = SimpleNamespace(
        describe_checkpoint=lambda: "step 500", config=SimpleNamespace(decode=decode)
    )
    scored = {"bleu": 79.0, "checkpoint": "step 500", "beam_size": 4, "alpha": 0.6}
    assert _scores_what_it_serves(scored, served)
    for other in (
        {"checkpoint": "step 400"},
        {"beam_size": 2},
        {"alpha": 0.0},
        {"max_sentences": 40},
    ):
        assert not _scores_what_it_serves({**scored, **other}, served), other
    assert _scores_what_it_serves({"bleu": 79.0}, served)  # a result that does not say


@pytest.mark.parametrize(
    "body, status, message", [case[1:] for case in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_is_a_one_line_4xx_and_the_server_goes_on(client, body, status, message):
    response = client.post("/translate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error and "\n" not in error, error
    answer = _translate(client, sentences=[SENTENCES[0]])
    assert all(result["translations"][0]["text"] for result in answer["results"])


def test_the_frameworks_own_refusals_are_one_line_naming_the_api(client):
    """A wrong path or method answered {"detail": "Not Found"}, naming no fix; a compressed
    body was read as bytes that are not UTF-8; HEAD, which health checks send, was a 405."""
    cases = [
        (client.get("/translate"), 405, "GET /translate is not a call this server answers; the "
         "API is POST /translate and GET /models"),
        (client.post("/models"), 405, "POST /models is not a call"),
        (client.get("/nope"), 404, "nothing at /nope; the API is POST /translate"),
        (client.post("/translate/", json={"sentences": ["a"]}), 404, "nothing at /translate/"),
        (client.post("/translate", content=gzip.compress(b'{"sentences": ["a"]}'),
                     headers={"content-type": "application/json", "content-encoding": "gzip"}),
         415, "the body is compressed (Content-Encoding: gzip)"),
        # JSON sent as text, or as curl -d sends it, was "not a JSON object"
        (client.post("/translate", content=b'{"sentences": ["a"]}',
                     headers={"content-type": "text/plain; charset=utf-8"}),
         415, "the body is sent as Content-Type: text/plain; send it as application/json"),
        (client.post("/translate", content=b'{"sentences": ["a"]}',
                     headers={"content-type": "application/x-www-form-urlencoded"}),
         415, "Content-Type: application/x-www-form-urlencoded; send it as application/json "
         "(curl: -H 'Content-Type: application/json')"),
    ]  # fmt: skip
    for response, status, message in cases:
        assert response.status_code == status, response.text
        assert message in response.json()["error"]
    assert client.head("/models").status_code == client.head("/").status_code == 200


def test_the_api_schema_names_the_error_body_it_sends(client):
    """/docs showed FastAPI's {"detail": [...]} for a 422, which this server never sends."""
    schema = client.get("/openapi.json").json()
    responses = schema["paths"]["/translate"]["post"]["responses"]
    for status in ("400", "408", "413", "415", "422"):
        body = responses[status]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/ErrorBody"}
    assert list(schema["components"]["schemas"]["ErrorBody"]["properties"]) == ["error"]


def test_results_follow_the_order_of_the_models_asked_for(server, client):
    """They came in the server's order, and a model named twice was run once."""
    names = list(server[2].values())
    answer = _translate(client, sentences=[SENTENCES[0]], models=names[::-1])
    assert [result["model"] for result in answer["results"]] == names[::-1]
    twice = client.post("/translate", json={"sentences": ["a"], "models": names[:1] * 2})
    assert twice.status_code == 422
    assert twice.json()["error"] == f"model {names[0]!r} is named twice in models; name each once"


def test_an_empty_translation_has_attention_to_show(server):
    """The API answered null for it, and the page said the model had no attention, where
    eval.py --attention draws the one row the model wrote (EOS's)."""
    _, app, names = server
    for name in names.values():
        attention = app.state.models[name].attention(SENTENCES[0], "")
        assert attention["target_tokens"] == ["</s>"]
        weights = np.array(attention["weights"])
        assert weights.shape[2:] == (1, len(SENTENCES[0].split()) + 1)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-4)


class _SlowModel:
    """Stands in for a served model: each search takes ``seconds`` and is recorded."""

    beam_size, max_input_length = 4, 256

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.searched: list[list[str]] = []

    def source_lengths(self, sentences):
        return [len(sentence.split()) + 1 for sentence in sentences]

    def translate(self, sentences, max_rows):
        self.searched.append(list(sentences))
        time.sleep(self.seconds)
        return SimpleNamespace(nbest=[[(-1.0, s.upper())] for s in sentences], capped=[])


def test_a_request_whose_client_left_before_its_batch_is_never_searched():
    """Its sentences were searched in full while later requests waited (Starlette does not
    cancel a request whose client has gone)."""
    model = _SlowModel(seconds=1.0)
    app = create_app({"slow": model}, Limits(max_batch=16, wait_seconds=0.01))
    with serving(app) as url:

        async def three_clients():
            async with httpx.AsyncClient(base_url=url, timeout=30) as each:
                first = asyncio.ensure_future(each.post("/translate", json={"sentences": ["a"]}))
                await asyncio.sleep(0.3)  # the first one's search is under way
                with contextlib.suppress(httpx.TimeoutException):
                    await each.post("/translate", json={"sentences": ["b"]}, timeout=0.3)
                third = await each.post("/translate", json={"sentences": ["c"]})
                return await first, third

        first, third = asyncio.run(three_clients())
    assert first.json()["results"][0]["translations"][0]["text"] == "A"
    assert third.json()["results"][0]["translations"][0]["text"] == "C"
    assert model.searched == [["a"], ["c"]]


def test_a_body_that_stops_arriving_is_refused_and_the_server_goes_on():
    """A client that declared 100 bytes and sent 10 held its connection open for good."""
    model = _SlowModel(seconds=0.0)
    app = create_app({"slow": model}, Limits(body_seconds=0.5))
    with serving(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as stalled:
            stalled.sendall(
                b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"sentence'
            )
            answer = stalled.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 408 "), answer
        assert (
            '{"error":"the body stopped arriving after 10 bytes (nothing more for 0.5 s); send '
            'the whole body at once"}'
        ) in answer
        response = httpx.post(url + "/translate", json={"sentences": ["a"]}, timeout=10)
        assert response.json()["results"][0]["translations"][0]["text"] == "A"


def test_two_paths_to_one_run_are_refused_and_runs_of_one_name_are_told_apart(tmp_path):
    """The second of two runs named x/t replaced the first; one run passed twice was served
    once, and through a link twice."""
    for folder in ("a/x/t", "b/x/t", "c/u"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "c/u")
    assert model_names([tmp_path / "a/x/t", tmp_path / "b/x/t", tmp_path / "c/u"]) == [
        "a/x/t", "b/x/t", "u",
    ]  # fmt: skip
    for twice in ([tmp_path / "c/u", f"{tmp_path}/c/u/"], [tmp_path / "c/u", tmp_path / "link"]):
        with pytest.raises(ValueError, match="is the run of --workdir .*; pass each run once"):
            model_names(twice)


def test_an_ipv6_host_is_printed_as_an_address_a_browser_takes():
    assert page_url("::1", 8000) == "http://[::1]:8000/"
    assert page_url("127.0.0.1", 8000) == "http://127.0.0.1:8000/"


def test_concurrent_requests_are_searched_together_and_each_gets_its_own(server, client):
    url, app, _ = server
    alone = {
        s: [r["translations"][0]["text"] for r in _translate(client, sentences=[s])["results"]]
        for s in SENTENCES
    }
    requests = [SENTENCES[i : i + 1 + i % 3] for i in range(len(SENTENCES))]  # 1 to 3 each

    async def all_at_once():
        async with httpx.AsyncClient(base_url=url, timeout=120) as each:
            posts = [each.post("/translate", json={"sentences": r}) for r in requests]
            return await asyncio.gather(*posts)

    batches_before = app.state.batcher.batches
    responses = asyncio.run(all_at_once())
    assert app.state.batcher.batches - batches_before < len(requests)  # some were grouped
    for sentences, response in zip(requests, responses, strict=True):
        answer = response.json()
        assert answer["sentences"] == sentences
        for m, result in enumerate(answer["results"]):
            got = [t["text"] for t in result["translations"]]
            assert got == [alone[s][m] for s in sentences]


def _browser():
    """Headless Chromium through Playwright, or a skip naming what is missing."""
    playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)")
    return playwright_api.sync_playwright()


def test_the_page_translates_and_shows_the_hovered_tokens_attention(server, client):
    url, _, names = server
    sentence = SENTENCES[1]
    answer = _translate(client, sentences=[sentence], attention=True)
    with _browser() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url + "/")
            page.wait_for_selector("body[data-ready=true]", timeout=10_000)
            page.fill("#source", sentence)
            page.press("#source", "Enter")
            for result in answer["results"]:
                panel = f'.model-panel[data-model="{result["model"]}"]'
                page.wait_for_selector(f"{panel} .source-cell", timeout=30_000)
                translation = result["translations"][0]
                shown = page.inner_text(f"{panel} .translation-text")
                assert shown == translation["text"]
                weights = np.array(translation["attention"]["weights"])  # [L, H, T, S]
                rows = weights[-1].mean(axis=0)  # the page's first view: last layer, mean of heads
                # the row that differs most from the first, so that hovering it must change cells
                t = int(np.abs(rows - rows[0]).sum(-1).argmax())
                assert t > 0, "every row is the same: the hover could not show a change"
                seen = []
                for row in (0, t):
                    page.hover(f'{panel} .target-token[data-index="{row}"]')
                    cells = page.eval_on_selector_all(
                        f"{panel} .source-cell", "cells => cells.map(c => c.dataset.weight)"
                    )
                    seen.append([float(c) for c in cells])
                    np.testing.assert_allclose(seen[-1], rows[row], atol=2e-4)
                assert seen[0] != seen[1]
                assert names  # both families were on the page
        finally:
            browser.close()


def test_an_ensemble_is_one_more_model_translating_as_eval_py_ensembles(runs):
    models = load_models([runs[family] for family in FAMILIES], ensemble=True)
    assert list(models)[-1] == "ensemble"
    # eval.py --workdir A --workdir B builds this translator (tests/test_translation_options.py
    # runs that command); here it is built in-process, on the same checkpoints
    reference = Translator.restore(runs["transformer"], ensemble_with=[runs["rnnsearch"]])
    expected = reference.translate(SENTENCES[:3]).hypotheses
    with (
        serving(create_app(models, LIMITS)) as url,
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        answer = _translate(client, sentences=SENTENCES[:3], models=["ensemble"], attention=True)
        card = client.get("/models").json()["models"][-1]
    (result,) = answer["results"]
    assert [t["text"] for t in result["translations"]] == expected
    assert all(t["attention"] is None for t in result["translations"])  # members attend, not it
    assert card["family"] == "ensemble" and card["attention"] == "none"
    assert card["parameters"] == sum(models[n].card["parameters"] for n in list(models)[:2])


def test_after_the_warm_up_an_examples_first_request_compiles_nothing(runs):
    from jax import monitoring

    from seq2seq.serve.app import translate_batch
    from seq2seq.serve.batching import Job

    models = load_models([runs["transformer"]])
    model = next(iter(models.values()))
    example = SENTENCES[0]
    model.warm_up([example])
    lowered = []

    def count(event: str, seconds: float, **kwargs) -> None:
        if event == LOWERED:
            lowered.append(seconds)

    monitoring.register_event_duration_secs_listener(count)
    try:
        one = Job([example], ([model.name], None, True), None)
        translations = translate_batch(models, [one], 16)
        assert translations[0]["results"][0]["translations"][0]["attention"] is not None
        assert lowered == [], "the request compiled a program the warm-up should have"
        # Translators share their searches' programs in a process (another test may have
        # compiled any batch shape), so the proof that the listener hears a compile forgets them.
        jax.clear_caches()
        translate_batch(models, [one], 16)
        assert lowered, "a forgotten program compiles again (else this test could not fail)"
    finally:
        monitoring.unregister_event_duration_listener(count)


def test_a_translation_cut_off_at_the_output_cap_says_so_and_shows_no_eos_it_never_wrote(runs):
    """At a cap of one token beyond the input, some outputs stop unfinished: each says
    ``capped``, and its attention's rows are the tokens the model wrote, without EOS's."""
    import dataclasses

    from seq2seq.serve.app import translate_batch
    from seq2seq.serve.batching import Job

    tight = Translator.restore(runs["transformer"], max_extra_length=1)
    sentences = [source for source, _ in synthetic.load_split("validation", 12)]
    expected = set(tight.translate(sentences).capped)
    assert 0 < len(expected) < len(sentences), "all or none capped proves little"
    model = dataclasses.replace(
        next(iter(load_models([runs["transformer"]]).values())), translator=tight
    )
    jobs = [Job(sentences[:5], ([model.name], None, True), None),
            Job(sentences[5:], ([model.name], None, True), None)]  # fmt: skip
    answers = translate_batch({model.name: model}, jobs, 16)
    translations = [t for a in answers for t in a["results"][0]["translations"]]
    assert [i for i, t in enumerate(translations) if t["capped"]] == sorted(expected)
    for i, translation in enumerate(translations):
        tokens = translation["attention"]["target_tokens"]
        assert (tokens[-1] == "</s>") == (i not in expected), (i, tokens)
        assert len(translation["attention"]["weights"][0][0]) == len(tokens)


@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_stops_the_command_without_a_traceback(runs, interrupts):
    """Once: uvicorn's graceful stop. Twice, while a request is still arriving: its force quit,
    which skipped the app's shutdown; the cancelled lifespan then printed a traceback."""
    import signal
    import socket

    command = [sys.executable, "-m", "seq2seq.serve", "--workdir", runs["transformer"],
               "--port", "0", "--nowarm_up"]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=REPO, env=subprocess_env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        line = server.stdout.readline()  # "serving NAME at URL", once the model has loaded
        assert line.startswith("serving "), line + server.stderr.read()[-2000:]
        url = httpx.URL(line.split()[-1])
        assert httpx.get(url.join("models"), timeout=30).status_code == 200
        with socket.create_connection((url.host, url.port)) as arriving:
            if interrupts == 2:  # a body that never ends: the graceful stop waits for it
                arriving.sendall(
                    b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b'Content-Length: 99\r\n\r\n{"sentences": '
                )
            server.send_signal(signal.SIGINT)
            if interrupts == 2:
                with pytest.raises(subprocess.TimeoutExpired):  # still waiting
                    server.wait(timeout=1)
                server.send_signal(signal.SIGINT)
            said, errors = server.communicate(timeout=60)
    finally:
        server.kill()
    assert server.returncode == 0 and errors == "", errors[-3000:]
    if interrupts == 2:
        assert said == "stopped at once: 1 unfinished request(s) dropped\n"
