"""The same configs on two devices (``compare --devices``): one row per config scored in both
record folders, the difference tested over seeds and sentences, and what the sides ran
differently listed beside it."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq import config as config_lib
from seq2seq.compare import devices, frontier
from seq2seq.compare.workdir import foreign_entries
from seq2seq.evaluation.bleu import chrf_score, sacrebleu_score
from tests.conftest import REPO, subprocess_env

SENTENCES = [
    f"the {w} dog runs across the green field number {i}"
    for i, w in enumerate(
        ["black", "white", "brown", "small", "big", "old", "young", "wet", "happy", "lazy"] * 3
    )
]
GARBLED = [s.replace("dog", "cat").replace("field", "road") for s in SENTENCES]


def _test_split(folder: Path) -> Path:
    for lang in ("de", "en"):
        (folder / f"test.{lang}").write_text("\n".join(SENTENCES) + "\n")
    return folder


def _run(data: Path, family: str, seed: int, hypotheses, device="cpu", dtype="float32"):
    config = config_lib.default_config()
    config_lib.use_multi30k(config.data, data)
    config.data.test_split = "test"
    config.model.name = family
    config.seed = seed
    scores = {**sacrebleu_score(list(hypotheses), SENTENCES), **chrf_score(hypotheses, SENTENCES)}
    curve = (frontier.Point(100, 1.0, 1e12, 20.0), frontier.Point(200, 2.0, 2e12, 30.0))
    return frontier.RunRecord(
        name=f"{family}-small-seed{seed}",
        config_name=f"{family}-small",
        family=family,
        seed=seed,
        curve=curve,
        stop_reason="converged",
        steps=200,
        minutes=2.0,
        flops=2e12,
        result={"split": "test", "bleu": scores["bleu"], "chrf": scores["chrf"], "beam_size": 4},
        hypotheses=tuple(hypotheses),
        config=config,
        device=device,
        compute_dtype=dtype,
        jax_version="0.10.2",
    )


def test_a_worse_side_is_found_and_an_equal_one_is_alike(tmp_path):
    data = _test_split(tmp_path)
    gpu = "NVIDIA H100 80GB HBM3"
    first = [_run(data, "transformer", s, GARBLED, gpu, "bfloat16") for s in (0, 1)]
    first += [_run(data, "rnnsearch", s, SENTENCES, gpu, "bfloat16") for s in (0, 1)]
    second = [_run(data, f, s, SENTENCES) for f in ("rnnsearch", "transformer") for s in (0, 1)]

    result = devices.devices_data(("gpu", first), ("cpu", second))

    assert result["tests"] == 4
    transformer, rnnsearch = result["rows"]  # in the first folder's order
    assert transformer["config"] == "transformer-small" and rnnsearch["config"] == "rnnsearch-small"
    garbled = sacrebleu_score(GARBLED, SENTENCES)["bleu"]
    assert transformer["a"]["test_bleu"] == pytest.approx(garbled)
    assert transformer["b"]["test_bleu"] == pytest.approx(100.0)
    assert transformer["BLEU"]["difference"] == pytest.approx(garbled - 100.0)
    assert transformer["BLEU"]["significant"]
    assert transformer["reading"] == {"alike": False, "higher": {"BLEU": "cpu", "chrF": "cpu"}}
    assert rnnsearch["BLEU"]["difference"] == 0 and not rnnsearch["BLEU"]["significant"]
    assert rnnsearch["reading"] == {"alike": True, "higher": {}}
    for row in result["rows"]:  # adjusted over the four tests: never below the raw p
        for metric in devices.METRICS:
            assert row[metric]["p_value_holm"] >= row[metric]["p_value"]
    assert result["sides"][0] == {
        "folder": "gpu", "device": gpu, "compute_dtype": "bfloat16", "jax": "0.10.2",
    }  # fmt: skip
    assert rnnsearch["differs"] == [f"device: {gpu} / cpu", "compute dtype: bfloat16 / float32"]

    text = devices.render(result)
    assert f"- **gpu**: {gpu} (bfloat16 products, jax 0.10.2)" in text
    assert "| cpu higher (BLEU, chrF) |" in text and "| alike within noise |" in text
    assert "1 of 2 configs train alike on both sides within noise" in text
    assert "- rnnsearch-small: device: NVIDIA H100 80GB HBM3 / cpu;" in text


def test_what_differs_lists_what_could_change_learning_not_the_seed_data_path_or_caps(tmp_path):
    data = _test_split(tmp_path)
    a = _run(data, "transformer", 0, SENTENCES)
    b = dataclasses.replace(
        _run(data, "transformer", 1, SENTENCES), config=a.config.copy_and_resolve_references()
    )
    b.config.seed = 1
    b.config.data.dir = "/elsewhere/multi30k"
    b.config.train.steps = 7
    b.config.train.time_budget_minutes = 3.0
    assert devices.what_differs([a], [b]) == []

    b.config.data.pack = not a.config.data.pack
    b.config.model.transformer.dropout_rate = 0.3
    b = dataclasses.replace(b, jax_version="0.11.2", result={**b.result, "beam_size": 5})
    assert devices.what_differs([a], [b]) == [
        "jax: 0.10.2 / 0.11.2",
        "beam size: 4 / 5",
        f"config.data.pack: {a.config.data.pack!r} / {b.config.data.pack!r}",
        f"config.model.transformer.dropout_rate: {a.config.model.transformer.dropout_rate!r} / 0.3",
    ]
    # The cosine schedule decays over train.steps: there the cap is part of the training.
    a.config.train.schedule = b.config.train.schedule = "warmup_cosine"
    assert f"config.train.steps: {a.config.train.steps!r} / 7" in devices.what_differs([a], [b])
    # A side whose seeds disagree shows both values.
    c = dataclasses.replace(a, device="cpu, 2 cores")
    assert devices.what_differs([a, c], [a])[0] == "device: cpu + cpu, 2 cores / cpu"


def test_folders_without_a_common_config_or_scored_on_other_sentences_are_refused(tmp_path):
    data = _test_split(tmp_path)
    transformer = _run(data, "transformer", 0, SENTENCES)
    rnnsearch = _run(data, "rnnsearch", 0, SENTENCES)
    with pytest.raises(ValueError, match=r"no config is scored in both folders \(a: transformer"):
        devices.pair_configs(("a", [transformer]), ("b", [rnnsearch]))
    unscored = dataclasses.replace(rnnsearch, result=None, hypotheses=())
    with pytest.raises(ValueError, match="b: none"):
        devices.pair_configs(("a", [rnnsearch]), ("b", [unscored]))
    fewer = dataclasses.replace(transformer, hypotheses=tuple(SENTENCES[:16]))
    with pytest.raises(ValueError, match="scored on different sentences .16 sentences of test"):
        devices.pair_configs(("a", [transformer]), ("b", [fewer]))


def test_the_figure_draws_every_run_in_its_folder_s_colour(tmp_path):
    data = _test_split(tmp_path)
    first = [_run(data, "transformer", s, SENTENCES) for s in (0, 1)]
    second = [_run(data, "transformer", 0, SENTENCES)]
    figure = devices.plot_devices(
        devices.pair_configs(("gpu", first), ("cpu", second)), ["gpu", "cpu"], tmp_path / "d.png"
    )
    (ax,) = figure.axes
    assert [line.get_color() for line in ax.get_lines()] == [*devices.COLOURS[:1] * 2, "tab:gray"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["gpu", "cpu"]
    assert (tmp_path / "d.png").stat().st_size > 0


def _compare(*arguments, workdir):
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.compare", *arguments, f"--workdir={workdir}"],
        cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=300,
    )  # fmt: skip


def test_the_command_compares_committed_records_and_names_each_side_s_device(tmp_path, multi30k):
    del multi30k  # the references
    tuned = REPO / "docs" / "records" / "multi30k_frontier_tuned"
    gpu, cpu = tmp_path / "frontier_gpu", tmp_path / "frontier_cpu"
    shutil.copytree(tuned / "transformer-small-seed0", gpu / "transformer-small-seed0")
    shutil.copytree(tuned / "transformer-small-seed1", cpu / "transformer-small-seed1")
    shutil.copytree(tuned / "rnnsearch-small-seed0", cpu / "rnnsearch-small-seed0")  # not paired
    provenance = gpu / "transformer-small-seed0" / "provenance.json"
    entries = json.loads(provenance.read_text())
    entries["entries"][-1].update(device_kind="NVIDIA H100 80GB HBM3", compute_dtype="bfloat16")
    entries["entries"][-1]["packages"]["jax"] = "0.11.2"
    provenance.write_text(json.dumps(entries))

    done = _compare(f"--devices={gpu},{cpu}", "--checkpoint=average:5", workdir=tmp_path / "r")

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "devices.json").read_text())
    (row,) = report["rows"]
    recorded = [
        json.loads(next((tuned / name / "eval").glob("test_2016_flickr*.json")).read_text())
        for name in ("transformer-small-seed0", "transformer-small-seed1")
    ]
    assert row["a"]["test_bleu"] == pytest.approx(recorded[0]["bleu"])
    assert row["b"]["test_bleu"] == pytest.approx(recorded[1]["bleu"])
    assert row["BLEU"]["difference"] == pytest.approx(recorded[0]["bleu"] - recorded[1]["bleu"])
    assert row["differs"][:3] == [
        "device: NVIDIA H100 80GB HBM3 / cpu, 1 core",
        "compute dtype: bfloat16 / float32",
        "jax: 0.11.2 / 0.10.2",
    ]
    text = (tmp_path / "r" / "devices.md").read_text()
    assert "- **frontier_gpu**: NVIDIA H100 80GB HBM3 (bfloat16 products, jax 0.11.2)" in text
    assert foreign_entries(tmp_path / "r") == []  # every file it wrote is a comparison's
    assert (tmp_path / "r" / devices.FIGURE).exists()


@pytest.mark.parametrize(
    ("folders", "message"),
    [
        (["{a}"], "--devices takes two record folders"),
        (["{a}", "{missing}"], "is not a folder of run records"),
        (["{a}", "{twin}"], "both folders are named a"),
    ],
)
def test_bad_folders_are_refused_in_one_line(tmp_path, folders, message):
    for folder in ("a", "twin/a"):
        (tmp_path / folder / "run").mkdir(parents=True)
        (tmp_path / folder / "run" / "config.json").write_text(
            config_lib.default_config().to_json()
        )
    paths = {"a": tmp_path / "a", "missing": tmp_path / "missing", "twin": tmp_path / "twin/a"}
    given = ",".join(folder.format(**paths) for folder in folders)
    done = _compare(f"--devices={given}", workdir=tmp_path / "report")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, done.stderr[-1500:]
    assert not (tmp_path / "report").exists()
