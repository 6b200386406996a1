"""The compute frontier: envelopes, crossings and choices on made-up runs; the frontier suite's
sizes; and a report rebuilt from committed records equal to the one from the live runs."""

import dataclasses
import json

import numpy as np
import pytest

from seq2seq.compare.comparison import compare
from seq2seq.compare.frontier import (
    Point,
    RunRecord,
    choose,
    compute_levels,
    crossings,
    envelope_at,
    read_records,
    read_run,
    run_device,
    save_record,
    upper_envelope,
)
from seq2seq.compare.frontier_report import write_frontier_report
from seq2seq.compare.settings import Settings, run_config
from seq2seq.compare.suites import RunSpec, expand_suite, select_runs
from seq2seq.compare.workdir import foreign_entries
from seq2seq.models import train_flops
from seq2seq.records.run_directory import RunDirectory
from tests.conftest import REPO, config_differences, tiny_config


def test_many_crossings_are_summarised_as_the_range_where_the_lead_is_traded():
    from seq2seq.compare.frontier_report import _findings

    # A leads, then B passes it at 10 and they trade the lead until 40, where B passes for good.
    a = [(1, 2.0), (20, 5.0), (35, 7.0)]
    b = [(1, 1.0), (10, 3.0), (30, 6.0), (40, 8.0)]
    found = crossings(a, b)
    assert [cost for cost, _ in found] == [10, 20, 30, 35, 40]
    data = {
        "families": ["rnnsearch", "transformer"],
        "crossings": [
            {"flops": cost, "leader": "rnnsearch" if who == "a" else "transformer"}
            for cost, who in found
        ],
        "best": [],
    }
    assert _findings(data) == [
        "- The validation frontiers cross 5 times between 10 and 40 training FLOPs, trading the "
        "lead (before it, `rnnsearch` leads); from 40 on, `transformer` leads."
    ]
    data["crossings"] = data["crossings"][:2]  # two crossings: each its own line
    assert [line.split(":")[0] for line in _findings(data)] == [
        "- The validation frontiers cross at 10 training FLOPs",
        "- The validation frontiers cross at 20 training FLOPs",
    ]


def test_the_envelope_holds_the_best_score_reached_at_each_cost():
    points = [(1, 5.0), (2, 4.0), (3, 7.0), (3, 6.0), (5, 6.5), (8, 9.0), (8, 8.0)]
    assert upper_envelope(points) == [(1, 5.0), (3, 7.0), (8, 9.0)]
    envelope = upper_envelope(points)
    assert envelope_at(envelope, 0.5) is None
    assert [envelope_at(envelope, c) for c in (1, 2.9, 3, 7.99, 100)] == [5.0, 5.0, 7.0, 7.0, 9.0]


def test_crossings_are_where_the_other_frontier_takes_the_lead():
    # A is ahead early (cheap and quick), B overtakes at 30 and stays ahead; a tie at 50 keeps B.
    a = [(1, 10.0), (10, 20.0), (50, 30.0)]
    b = [(2, 5.0), (30, 25.0), (40, 30.0), (60, 40.0)]
    assert crossings(a, b) == [(30, "b")]
    assert crossings(b, a) == [(30, "a")]
    # B leads, A passes it at 10, B takes it back at 60: two crossings.
    assert crossings([(1, 1.0), (10, 30.0)], [(1, 2.0), (60, 31.0)]) == [(10, "a"), (60, "b")]
    assert crossings([(1, 1.0)], [(1, 2.0), (5, 3.0)]) == []  # B ahead throughout


def _record(name, family, curve, stop="converged", test=None, seed=0):
    points = tuple(Point(step, step / 10, flops, bleu) for step, flops, bleu in curve)
    return RunRecord(
        name=name,
        config_name=name.split("-seed")[0],
        family=family,
        seed=seed,
        curve=points,
        stop_reason=stop,
        steps=points[-1].step,
        minutes=points[-1].minutes,
        flops=points[-1].flops,
        result=None if test is None else {"bleu": test, "split": "test"},
        hypotheses=(),
        config=tiny_config(family),
    )


RUNS = [
    _record("rnnsearch-small", "rnnsearch", [(1, 1e12, 20.0), (2, 2e12, 25.0)], test=24.0),
    # Better on validation, worse on test: validation must choose it all the same.
    _record("rnnsearch-medium", "rnnsearch", [(1, 3e12, 22.0), (2, 6e12, 27.0)], test=23.0),
    _record("rnnsearch-large", "rnnsearch", [(1, 2e13, 30.0)], stop="", test=None),  # running
    _record("transformer-small", "transformer", [(1, 4e12, 18.0), (2, 8e12, 26.0)], test=25.0),
    _record("transformer-medium", "transformer", [(1, 1e13, 25.0), (3, 3e13, 31.0)], "cap", 30.0),
]


def test_validation_chooses_among_finished_runs_within_the_budget():
    assert choose(RUNS, "rnnsearch").config_name == "rnnsearch-medium"  # 27 > 25 on validation
    assert choose(RUNS, "rnnsearch", budget=5e12).config_name == "rnnsearch-small"
    assert choose(RUNS, "rnnsearch", budget=1e11) is None
    assert choose(RUNS, "transformer").config_name == "transformer-medium"  # capped: finished
    assert choose(RUNS, "transformer", budget=1e13).config_name == "transformer-small"


def test_a_size_with_an_unfinished_seed_is_not_chosen():
    seeds = [
        _record("rnnsearch-big-seed0", "rnnsearch", [(1, 1e12, 30.0)], test=30.0),
        _record("rnnsearch-big-seed1", "rnnsearch", [(1, 1e12, 31.0)], stop="", seed=1),
        _record("rnnsearch-tiny", "rnnsearch", [(1, 1e12, 10.0)], test=9.0),
    ]
    assert choose(seeds, "rnnsearch").config_name == "rnnsearch-tiny"


def test_compute_levels_start_where_every_family_has_a_finished_run():
    # RNNsearch finishes first at 2e12, the Transformer at 8e12; the largest run is 3e13.
    assert compute_levels(RUNS, ["rnnsearch", "transformer"]) == [1e13, 2e13, 5e13]


def test_the_frontier_suite_spans_eightfold_flops_per_step_in_every_family():
    specs = expand_suite("frontier")
    lengths = np.full(64, 20)
    per_step: dict[str, list[float]] = {}
    for spec in specs:
        config = run_config(spec, Settings(), 0)
        flops = float(np.sum(train_flops(config, 8000, lengths, lengths)))
        per_step.setdefault(config.model.name, []).append(flops)
        assert config.train.early_stopping_patience > 0 and config.eval.every_steps > 0
    assert sorted(per_step) == ["rnnsearch", "transformer"]
    for family, flops in per_step.items():
        assert len(flops) >= 3, family
        assert max(flops) / min(flops) >= 8, (family, flops)


TUNED_RECORDS = sorted((REPO / "docs" / "records" / "multi30k_frontier_tuned").glob("*-seed*"))
# Where the data lies, and the caps of a run that early stopping ended before them.
MAY_DIFFER = {"data.dir", "train.steps", "train.time_budget_minutes"}


@pytest.mark.parametrize("record", TUNED_RECORDS, ids=lambda path: path.name)
def test_the_frontier_tuned_suite_trains_what_each_tuned_record_trained(record):
    """``--suite frontier_tuned --rows ROW --config.seed=K`` trains the committed run ROW-seedK
    again: its config differs from the record's only in the data's folder and the caps, and
    those only where the run converged."""
    row, seed = record.name.rsplit("-seed", 1)
    (spec,) = select_runs(expand_suite("frontier_tuned"), [row], keep_first=False)
    config = run_config(spec, Settings(overrides=(("seed", int(seed)),)), 0)
    differ = config_differences(config, record)
    assert differ.keys() <= MAY_DIFFER, differ
    if differ.keys() & {"train.steps", "train.time_budget_minutes"}:
        stop = json.loads((record / "metrics.jsonl").read_text().splitlines()[-1])
        assert stop["kind"] == "stop" and stop["reason"] == "converged", (record.name, stop)


def test_the_untuned_frontier_suite_does_not_train_the_tuned_medium_transformer():
    """What ``frontier_tuned`` is for: the ``frontier`` row (the start of ``--tune``'s trials)
    trains transformer-medium at dropout 0.1 and rate 4e-3, its record at 0.3 and 2e-3."""
    record = REPO / "docs" / "records" / "multi30k_frontier_tuned" / "transformer-medium-seed0"
    (spec,) = select_runs(expand_suite("frontier"), ["transformer-medium"], keep_first=False)
    differ = config_differences(run_config(spec, Settings(), 0), record)
    assert differ["model.transformer.dropout_rate"] == (0.1, 0.3)
    assert differ["train.learning_rate"] == (4e-3, 2e-3)


TINY = """
from tests.conftest import tiny_config


def get_config():
    config = tiny_config("{family}")
    config.train.steps = {steps}
    config.train.log_every_steps = 4
    config.checkpoint.every_steps = 4
    config.eval.every_steps = 4
    config.eval.num_examples = 8
    config.train.early_stopping_patience = 2
    return config
"""


@pytest.mark.slow
def test_a_report_rebuilt_from_records_equals_the_live_one(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    specs = []
    for family, size, steps in (
        ("transformer", "small", 8),
        ("transformer", "large", 16),
        ("rnnsearch", "small", 12),
    ):
        path = configs / f"{family}_{size}.py"
        path.write_text(TINY.format(family=family, steps=steps))
        specs.append(RunSpec(f"{family}-{size}", path))
    settings = Settings(beam_size=1, max_test_sentences=12, slice_minutes=0)
    outcomes, _ = compare(specs, tmp_path / "work", settings, "tiny frontier")
    assert all(o.status == "ok" for o in outcomes)
    live = [read_run(o.run, o.result["split"], "latest") for o in outcomes]
    assert all(run.stop_reason in ("converged", "cap") for run in live)
    write_frontier_report(live, tmp_path / "live", "tiny frontier", "latest")
    for outcome in outcomes:
        save_record(outcome.run, tmp_path / "records", outcome.result["split"], "latest")
    kept = sorted(p.name for p in (tmp_path / "records" / "rnnsearch-small").rglob("*"))
    assert "checkpoints" not in kept and "tokenizer" not in kept and "metrics.jsonl" in kept
    # a record is refreshed in place; a run where a record would go is never replaced
    again = save_record(
        outcomes[0].run, tmp_path / "records", outcomes[0].result["split"], "latest"
    )
    assert sorted(p.name for p in again.iterdir()) == ["config.json", "eval", "metrics.jsonl",
                                                        "provenance.json"]  # fmt: skip
    with pytest.raises(ValueError, match="holds more than a run's record .checkpoints/, encoded/"):
        save_record(outcomes[0].run, tmp_path / "work", outcomes[0].result["split"], "latest")
    assert (outcomes[0].run.checkpoints_dir).is_dir()
    rebuilt = read_records(tmp_path / "records", None, "latest")
    write_frontier_report(rebuilt, tmp_path / "again", "tiny frontier", "latest")
    for name in ("frontier.md", "frontier.json"):
        assert (tmp_path / "again" / name).read_text() == (tmp_path / "live" / name).read_text()
    data = json.loads((tmp_path / "again" / "frontier.json").read_text())
    assert {row["run"] for row in data["runs"]} == {spec.name for spec in specs}
    assert data["verdicts"] and data["tests"] >= 2  # BLEU and chrF of at least one pair
    assert (tmp_path / "again" / "figures" / "frontier.png").stat().st_size > 10_000
    # every file the comparison and the reports wrote is one a comparison may continue beside
    assert foreign_entries(tmp_path / "work") == foreign_entries(tmp_path / "again") == []


# The frontier in time: made-up runs of two families on one GPU. The Transformer is slower per
# FLOP here on purpose (more FLOPs to each level) but faster per second, so a verdict read off
# the wrong axis would name the wrong family.
GPU = "NVIDIA H100 80GB HBM3"


def _timed(name, family, curve, device=GPU):
    """A run whose points are (step, training minutes, FLOPs, BLEU, validation minutes)."""
    points = tuple(Point(*point) for point in curve)
    return RunRecord(
        name=name,
        config_name=name.split("-seed")[0],
        family=family,
        seed=0,
        curve=points,
        stop_reason="converged",
        steps=points[-1].step,
        minutes=points[-1].minutes,
        flops=points[-1].flops,
        result=None,
        hypotheses=(),
        config=tiny_config(family),
        device=device,
    )


TIMED = [
    _timed("transformer-small-seed0", "transformer", [(100, 1.0, 4e12, 20.0, 0.1),
                                                      (200, 2.0, 8e12, 32.0, 0.2),
                                                      (300, 3.0, 12e12, 36.0, 0.3)]),
    _timed("transformer-small-seed1", "transformer", [(100, 1.0, 4e12, 22.0, 0.1),
                                                      (200, 2.0, 8e12, 30.0, 0.2),
                                                      (300, 3.0, 12e12, 35.5, 0.3),
                                                      (400, 4.0, 16e12, 36.5, 0.4)]),
    _timed("rnnsearch-medium-seed0", "rnnsearch", [(300, 4.0, 3e12, 22.0, 0.2),
                                                   (600, 6.0, 6e12, 35.0, 0.4),
                                                   (900, 9.0, 9e12, 34.0, 0.6)]),
    _timed("rnnsearch-medium-seed1", "rnnsearch", [(300, 4.0, 3e12, 20.0, 0.2),
                                                   (600, 6.0, 6e12, 33.0, 0.4),
                                                   (900, 9.0, 9e12, 35.2, 0.6)]),
]  # fmt: skip


def test_the_report_states_the_verdict_at_equal_time_on_the_device():
    from seq2seq.compare.frontier_report import _cost_section, frontier_data

    data = frontier_data(TIMED, "made up", "latest")
    assert data["devices"] == [GPU]
    # Both families reach 35 in every seed (their worst seeds peak at 36 and 35): the
    # Transformer's seeds at 3 minutes each, RNNsearch's at 6 and 9 (with 12e12 FLOPs against
    # 6e12 and 9e12, 300 steps against 600 and 900). RNNsearch's mean is 7.5 minutes, 2.5 times
    # the Transformer's; resampling its two seeds gives 6, 7.5 or 9 (a quarter, a half, a quarter).
    lines = _cost_section(data)
    verdict = [line for line in lines if line.startswith("- At equal training time")]
    assert verdict == [
        f"- At equal training time on {GPU}, `transformer` gets there first at every stated "
        "level: to validation BLEU 35, `rnnsearch` needs 2.50 [2.00, 3.00] times its training "
        "seconds (means 450 s against 180 s; validation by then, off the clock: 30 s and 18 s), "
        # Between validations a seed of each may have crossed 35 at FLOPs or steps that make
        # the two ratios 1 (0.38-0.94 and 1.50-3.75 over the means, with seeds resampled):
        # not decided. RNNsearch's seconds (4 to 6, 6 to 9) are more than 3 in any case.
        "0.62 [0.50, 0.75]* times its training FLOPs and 2.50 [2.00, 3.00]* times its steps. "
        # 7.5 minutes over 3 is 2.5 in time, 750 steps over 300 is 2.5 in steps: the same step.
        "Seconds over steps: a step of `rnnsearch` took 1.00 times one of `transformer` (for "
        "runs that shared a device, `python -m seq2seq.compare.sharing` says how much of that "
        "the sharing made). A ratio marked * is not decided: each seed crossed the level after "
        'its validation before, and placed there the ratio could be 1 (see "At every whole '
        'level").'
    ]
    table = "\n".join(lines).splitlines()
    seconds = next(line for line in table if line.startswith("| 35 | training s |"))
    assert seconds.endswith(
        "| 180 [180, 180] (transformer-small, 2 seeds; +18 s validation) | 2.50 [2.00, 3.00] |"
    )


def test_times_of_runs_on_different_devices_carry_a_warning():
    from seq2seq.compare.frontier_report import _cost_section, frontier_data

    mixed = [*TIMED[:3], dataclasses.replace(TIMED[3], device="cpu, 1 core")]
    lines = _cost_section(frontier_data(mixed, "made up", "latest"))
    assert any(line.startswith("- The runs trained on different devices") for line in lines)
    assert not any(line.startswith(f"- At equal training time on {GPU}") for line in lines)
    assert any(line.startswith("- At equal training time on their devices") for line in lines)


def test_a_record_names_its_device_and_its_validation_time(tmp_path):
    run = RunDirectory(tmp_path / "transformer-small-seed0").create()
    run.save_config(tiny_config("transformer"))
    lines = [
        {"step": 5, "kind": "validation", "bleu": 3.0, "elapsed_seconds": 30.0,
         "validation_seconds": 6.0, "train_flops": 1e9},
        {"step": 10, "kind": "validation", "bleu": 4.0, "elapsed_seconds": 60.0,
         "validation_seconds": 9.0, "train_flops": 2e9},
    ]  # fmt: skip
    run.metrics_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    entries = [{"device_kind": "cpu", "cpu_cores": 2}, {"device_kind": GPU, "cpu_cores": 16}]
    run.provenance_file.write_text(json.dumps({"entries": entries[:1]}))
    record = read_run(run, "test", "latest")
    assert record.device == "cpu, 2 cores"
    assert [(p.minutes, p.validation_minutes) for p in record.curve] == [(0.5, 0.1), (1.0, 0.15)]
    assert record.curve[1].minutes_with_validation == 1.15
    run.provenance_file.write_text(json.dumps({"entries": entries}))  # resumed on a GPU
    assert run_device(run) == f"cpu, 2 cores + {GPU}"


def _tuned(run, grid, chosen):
    """``run`` with a tuning record (as ``tuning.json`` holds one) that chose ``chosen``."""
    model = {"chosen": chosen, "trials": [{}] * 4, "validation_split": "val"}
    tuning = {"grid": grid, "models": [model], "budget_unit": "steps", "rung_minutes": [100]}
    return dataclasses.replace(run, tuning=tuning)


def test_the_frontier_says_where_every_size_of_a_family_chose_the_same_end_of_its_grid():
    from seq2seq.compare.frontier_report import _grid_edges
    from seq2seq.compare.grid_ends import edges_paragraph

    factors, dropout = ["x0.5", "x1"], [0.1, 0.3]
    rnn = {"train.learning_rate": factors, "model.dropout_rate": dropout}
    runs = [
        _tuned(RUNS[0], rnn, {"train.learning_rate": "x1", "model.dropout_rate": 0.3}),
        _tuned(RUNS[1], rnn, {"train.learning_rate": "x0.5", "model.dropout_rate": 0.3}),
        # The same axis named as the family reads it, with the same values: pooled with the rest.
        _tuned(RUNS[2], {"model.rnnsearch.dropout_rate": dropout},
               {"model.rnnsearch.dropout_rate": 0.3}),
        # The Transformer's sizes chose both ends, so nothing is said of them.
        _tuned(RUNS[3], rnn, {"train.learning_rate": "x1", "model.dropout_rate": 0.1}),
        _tuned(RUNS[4], rnn, {"train.learning_rate": "x1", "model.dropout_rate": 0.3}),
    ]  # fmt: skip
    edges = _grid_edges(runs)
    assert edges == [
        "every rnnsearch size (3) chose the largest `model.rnnsearch.dropout_rate` of the grid "
        "(0.3)",
        "every transformer size (2) chose the largest `train.learning_rate` of the grid (x1)",
    ]
    (paragraph, _) = edges_paragraph(edges)
    assert paragraph.startswith("**At the end of the grid**: every rnnsearch size (3) chose")
    assert _grid_edges(RUNS) == [] and edges_paragraph([]) == []  # none was tuned


@pytest.mark.skipif(not TUNED_RECORDS, reason="docs/records/multi30k_frontier_tuned absent")
def test_every_committed_rnnsearch_size_chose_the_largest_dropout_tried():
    """What docs/comparison.md says of the tuned frontier, from its records: each RNNsearch
    size's tuning chose dropout 0.3, the top of {0.1, 0.3}; the Transformer's sizes did not
    agree (d_model 128 chose 0.1)."""
    from seq2seq.compare.frontier_report import _grid_edges

    runs = read_records(TUNED_RECORDS[0].parent, None, "average:5")
    assert _grid_edges(runs) == [
        "every rnnsearch size (3) chose the largest `model.rnnsearch.dropout_rate` of the grid "
        "(0.3)"
    ]


def test_another_tool_s_folder_among_the_records_is_named_and_refused(tmp_path):
    """A CTranslate2 export (its own config.json) in a folder of records was called a run whose
    config to "put back"."""
    alien = tmp_path / "records" / "exported"
    alien.mkdir(parents=True)
    (alien / "config.json").write_text('{"add_source_bos": false, "decoder_start_token": "<s>"}')
    with pytest.raises(ValueError) as refused:
        read_records(tmp_path / "records", None, "latest")
    assert str(refused.value) == (
        f"--records {tmp_path / 'records'}: exported is not a run record (its config.json is not "
        "seq2seq's: unknown config key 'add_source_bos'); move it out, or pass a folder of run "
        "records only"
    )


def test_records_of_two_directions_in_one_folder_are_refused(tmp_path):
    """English->German and English->French runs in one folder gave a report (exit 0) whose BLEU
    difference spanned [-58.6, 57.1]: one task's scores set against the other's."""
    import shutil

    records = REPO / "docs" / "records"
    mixed = tmp_path / "mixed"
    for corpus, run in [
        ("multi30k_ende", "transformer-small-seed0"),
        ("multi30k_enfr", "rnnsearch-medium-seed1"),
    ]:
        shutil.copytree(records / corpus / run, mixed / run)
    with pytest.raises(ValueError) as refused:
        read_records(mixed, None, "average:5")
    assert str(refused.value) == (
        f"--records {mixed} mixes translation tasks (en->de on test_2016_flickr: "
        "transformer-small-seed0; en->fr on test_2016_flickr: rnnsearch-medium-seed1): a "
        "comparison scores one direction on one test set; give each its own folder (compare "
        "--directions reads one per direction)"
    )


@pytest.mark.parametrize(
    "damaged", ["eval/test_2016_flickr@average5.json", "provenance.json", "metrics.jsonl"]
)
def test_a_damaged_file_among_the_records_is_named(tmp_path, damaged):
    """A record's file cut short gave json's bare "Expecting value: line 2 column 1 (char 14)",
    naming neither the file nor the run."""
    import shutil

    run = tmp_path / "records" / "transformer-small-seed0"
    shutil.copytree(REPO / "docs" / "records" / "multi30k_ende" / run.name, run)
    text = (run / damaged).read_text()
    (run / damaged).write_text(text[: len(text) // 2].rstrip("\n"))
    with pytest.raises(ValueError) as refused:
        read_records(tmp_path / "records", None, "average:5")
    message = str(refused.value)
    assert message.startswith(str(run / damaged)) and "is not valid JSON" in message, message
    assert ("line " in message) == (damaged == "metrics.jsonl")


def test_a_record_copy_cut_short_leaves_the_old_record_and_nothing_read_as_one(
    tmp_path, monkeypatch
):
    """``save_record`` deleted the old record, then copied file by file: a worker killed at its
    deadline left half a record, which ``compare --records`` read and the device frontier
    packed as a whole one."""
    import shutil

    run = RunDirectory(tmp_path / "work" / "transformer-small")
    run.eval_dir.mkdir(parents=True)
    run.config_file.write_text("{}\n")
    run.metrics_file.write_text('{"step": 10}\n')
    run.eval_result_file("test", "latest").write_text('{"bleu": 30.0}\n')
    run.hypotheses_file("test", "latest").write_text("a\n")
    records = tmp_path / "records"
    save_record(run, records, "test", "latest")
    run.metrics_file.write_text('{"step": 10}\n{"step": 20}\n')  # trained on
    copy2, copies = shutil.copy2, []

    def cut_short(source, target, **kwargs):
        if copies:
            raise KeyboardInterrupt  # the worker stopped after the first file
        copies.append(source)
        return copy2(source, target, **kwargs)

    monkeypatch.setattr(shutil, "copy2", cut_short)
    with pytest.raises(KeyboardInterrupt):
        save_record(run, records, "test", "latest")
    monkeypatch.undo()
    record = RunDirectory(records / run.path.name)
    assert record.metrics_file.read_text() == '{"step": 10}\n'  # the old record, whole
    assert [p.name for p in records.iterdir() if not p.name.startswith(".")] == [run.path.name]
    save_record(run, records, "test", "latest")  # the rerun
    assert record.metrics_file.read_text() == run.metrics_file.read_text()
    assert [p.name for p in records.iterdir()] == [run.path.name]  # nothing hidden left
