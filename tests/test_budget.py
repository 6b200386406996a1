"""A time budget counts training time across interruptions, so equal budgets stay equal."""

import time

import pytest

from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.trainer import train
from tests.conftest import tiny_config


@pytest.mark.slow
def test_the_time_budget_carries_across_resumes(tmp_path):
    config = tiny_config("transformer")
    config.train.steps = 100_000  # the budget ends every session
    config.train.time_budget_minutes = 0.06
    config.checkpoint.every_steps = 1_000
    first = train(config, tmp_path)
    assert first.elapsed_seconds > 3.6 and first.step < config.train.steps

    spent = train(config, tmp_path)  # the budget is already used up: nothing more is trained
    assert spent.step == first.step and spent.elapsed_seconds == first.elapsed_seconds

    budget = first.elapsed_seconds + 5  # five more seconds of training, counted from the first
    config.train.time_budget_minutes = budget / 60
    second = train(config, tmp_path)
    assert second.step > first.step
    assert second.elapsed_seconds == pytest.approx(first.elapsed_seconds + second.seconds, abs=1.0)
    assert second.elapsed_seconds > budget  # it stopped on the budget, counted across sessions
    stop = RunDirectory(tmp_path).read_metrics()[-1]
    assert (stop["kind"], stop["reason"], stop["budget"]) == ("stop", "cap", "minutes")

    records = [r for r in RunDirectory(tmp_path).read_metrics() if r["kind"] == "train"]
    elapsed = [r["elapsed_seconds"] for r in records]
    flops = [r["train_flops"] for r in records]
    assert elapsed == sorted(elapsed) and flops == sorted(flops)  # continued, not restarted


@pytest.mark.slow
def test_the_clock_counts_finished_steps_not_dispatched_ones(tmp_path):
    # JAX dispatches steps asynchronously. A clock read as each step is dispatched runs ahead of
    # the training it measures (by ~40 s on Multi30k), so a budget overshoots and the logged
    # elapsed time falls short, unless the loop waits for earlier steps to finish.
    config = tiny_config("transformer")
    config.train.steps = 90
    config.train.log_every_steps = 30
    config.checkpoint.every_steps = 1_000
    train(config, tmp_path)
    first, *later = [r for r in RunDirectory(tmp_path).read_metrics() if r["kind"] == "train"]
    interval = first["step_seconds"] * 30  # from the loop's start to the end of step 30
    step = min(r["step_seconds"] for r in later)  # one step, compiled
    assert interval - first["elapsed_seconds"] <= 3 * step + 0.05


@pytest.mark.slow
def test_validation_time_is_not_training_time(tmp_path):
    # A model that takes more, cheaper steps validates more often under eval.every_steps; were
    # decoding counted, it would lose training time to it and equal budgets would not be equal.
    config = tiny_config("transformer")
    config.train.steps = 40
    config.train.log_every_steps = 10
    config.eval.every_steps = 10
    config.checkpoint.every_steps = 1_000
    # Packed batches have one shape. Bucketed, a new bucket's compile (training time, rightly on
    # the clock) could land in an interval and pass for a leaked pause: 0.14-0.31 s a step.
    config.data.pack = True
    # A pause leaked into the clock would add pause / 10 to the next interval's step time. At
    # 1.5 s that was 0.15 s, and steps on doubly busy cores took 0.17 s: the pause is longer.
    pause = 3.0

    def slow_validation(state):
        time.sleep(pause)
        return {"bleu": 0.0}

    start = time.monotonic()
    summary = train(config, tmp_path, lambda *args: slow_validation)
    wall = time.monotonic() - start
    records = RunDirectory(tmp_path).read_metrics()
    validations = [r for r in records if r["kind"] == "validation"]
    assert [r["step"] for r in validations] == [10, 20, 30, 40]
    trained = [r for r in records if r["kind"] == "train"]
    # Four pauses of 3 s happened inside the loop's clock; none of them is in its count.
    assert summary.elapsed_seconds < wall - 4 * pause
    assert trained[-1]["elapsed_seconds"] < wall - 3 * pause  # the 4th comes after step 40
    assert max(r["step_seconds"] for r in trained[1:]) < pause / 10  # nor in steps' timing


@pytest.mark.slow
def test_the_loop_keeps_two_steps_in_flight_and_fetches_metrics_at_log_steps(tmp_path, monkeypatch):
    import jax

    from seq2seq.training import trainer

    config = tiny_config("transformer")
    config.train.steps = 12
    config.train.log_every_steps = 4
    config.checkpoint.every_steps = 1_000
    config.data.pack = True
    dispatched: list[int] = []
    make_step = trainer.configured_train_step

    def tagged_step(*args):
        step = make_step(*args)

        def run(state, batch):  # tags each step's metrics with its number
            state, metrics = step(state, batch)
            dispatched.append(len(dispatched) + 1)
            return state, {**metrics, "dispatched": len(dispatched)}

        return run

    waits, fetches = [], []
    block, get = jax.block_until_ready, jax.device_get

    def wait(metrics):
        waits.append((len(dispatched), metrics["dispatched"]))
        return block(metrics)

    def fetch(tree):
        fetches.append(len(dispatched))
        return get(tree)

    monkeypatch.setattr(trainer, "configured_train_step", tagged_step)
    monkeypatch.setattr(jax, "block_until_ready", wait)
    monkeypatch.setattr(jax, "device_get", fetch)
    train(config, tmp_path)
    assert len(dispatched) == 12 and waits
    # Before step n is dispatched (n - 1 already are), the loop waits for step n - 2 only.
    assert all(before - waited == 1 for before, waited in waits)
    assert set(fetches) == {4, 8, 12}  # metrics come back to the host at log steps only


def _train_slow_steps(tmp_path, monkeypatch, budget_in_steps: float):
    """Trains on a budget of about ``budget_in_steps`` slow steps; returns the summary, the
    budget in seconds, and when each step was dispatched and when it finished.

    With two steps in flight the clock reads the end of the step before the last two. Stopping
    on that reading ran two to three steps past the budget, and the record left the last two
    steps' time out. Each step here is made slow on the devices (a chain of products), and a
    thread notes when each one finishes: the training the run really did.
    """
    import threading
    from queue import Queue

    import jax
    import jax.numpy as jnp

    from seq2seq.training import trainer

    def products(x):
        for _ in range(24):  # about 0.25 s on two idle cores
            x = jnp.tanh(x @ x)
        return x

    # On busy cores the products took ten times longer (2.4 s) than on idle ones, so the budget
    # is set in steps at the pace the products run now.
    timed = jax.jit(products)
    x = jnp.full((1024, 1024), 1e-3)
    jax.block_until_ready(timed(x))
    start = time.monotonic()
    jax.block_until_ready(timed(x))
    config = tiny_config("transformer")
    config.train.steps = 100_000
    config.train.time_budget_minutes = budget_in_steps * (time.monotonic() - start) / 60
    config.train.log_every_steps = 4
    config.checkpoint.every_steps = 1_000
    config.data.pack = True  # one batch shape, one compile
    make_step = trainer.configured_train_step
    dispatched, finished, in_flight = [], [], Queue()

    def slow_step(*args):
        step = make_step(*args)

        @jax.jit
        def run(state, batch):
            state, metrics = step(state, batch)
            x = products(jnp.full((1024, 1024), metrics["loss"] / 1024))
            # the next step reads the state, so it starts once these products are done
            return state.replace(step=state.step + jnp.isnan(x[0, 0]).astype(jnp.int32)), metrics

        def dispatch(state, batch):
            state, metrics = run(state, batch)  # returns at once, after the first compile
            dispatched.append(time.monotonic())
            in_flight.put(metrics)
            return state, metrics

        return dispatch

    def watch():
        while (metrics := in_flight.get()) is not None:
            finished.append(jax.block_until_ready(metrics) and time.monotonic())

    watcher = threading.Thread(target=watch)
    watcher.start()
    monkeypatch.setattr(trainer, "configured_train_step", slow_step)
    try:
        summary = train(config, tmp_path)
    finally:
        in_flight.put(None)
        watcher.join()
    return summary, config.train.time_budget_minutes * 60, dispatched, finished


@pytest.mark.slow
def test_the_budget_ends_the_run_within_a_step_and_counts_every_step(tmp_path, monkeypatch):
    import numpy as np

    # The loop foresees the budget's end from the pace of the steps already finished: 16 steps.
    summary, budget, dispatched, finished = _train_slow_steps(tmp_path, monkeypatch, 16)
    trained = finished[-1] - dispatched[0]  # the first step's compile is off the clock
    steps = np.diff(finished)
    one_step = float(np.median(steps[-5:]))  # as long as a step took when the run ended
    assert len(finished) == summary.step and one_step > 0.2
    assert summary.elapsed_seconds == pytest.approx(trained, abs=one_step / 3)  # every step
    assert summary.elapsed_seconds > budget  # never short of it
    assert trained - budget <= 1.5 * one_step, (trained, budget, steps)  # a step, give or take


@pytest.mark.slow
def test_a_budget_shorter_than_a_step_trains_one_step(tmp_path, monkeypatch):
    # Before any step has finished there is no pace to foresee the budget's end by: the loop
    # had dispatched a third step before it could see that the first had passed the budget.
    summary, budget, dispatched, finished = _train_slow_steps(tmp_path, monkeypatch, 0.4)
    assert summary.step == len(finished) == 1, (budget, dispatched, finished)
    assert summary.elapsed_seconds > budget


@pytest.mark.slow
def test_a_slice_ends_with_a_checkpoint_and_no_final_validation_then_resumes(tmp_path):
    from seq2seq.compare.runner import PauseAt  # the comparison's own reason to stop a run

    config = tiny_config("transformer")
    config.train.steps = 100_000
    config.train.time_budget_minutes = 0.1
    config.checkpoint.every_steps = 1_000
    pause = PauseAt(0.03)
    sliced = train(config, tmp_path, preemption=pause)
    assert pause.paused and sliced.preempted and not sliced.stop_reason
    assert 1.8 <= sliced.elapsed_seconds < 6  # stopped at its 1.8 s mark, not the 6 s budget
    run = RunDirectory(tmp_path)
    assert [r["kind"] for r in run.read_metrics()].count("stop") == 0  # not ended: resumable

    finished = train(config, tmp_path)  # the next slice, to the budget
    assert finished.step > sliced.step and finished.stop_reason
    assert finished.elapsed_seconds > config.train.time_budget_minutes * 60
    assert run.read_metrics()[-1]["kind"] == "stop"


def _two_processes(monkeypatch) -> list[float]:
    """Makes the clock believe it runs in one of two processes; returns the list of values it
    broadcasts (each broadcast returns the value it was given, as process 0's)."""
    import jax
    from jax.experimental import multihost_utils

    broadcasts: list[float] = []

    def broadcast(value):
        broadcasts.append(float(value))
        return value

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(multihost_utils, "broadcast_one_to_all", broadcast)
    return broadcasts


@pytest.mark.parametrize("every_step", [True, False])
def test_a_shared_clock_without_a_budget_agrees_at_log_steps_only(monkeypatch, every_step):
    from seq2seq.training.clock import TrainingClock

    broadcasts = _two_processes(monkeypatch)
    clock = TrainingClock(shared=True, every_step=every_step)
    clock.start()
    readings = []
    for step in range(1, 13):
        time.sleep(0.002)
        readings.append(clock.tick(agree=step % 4 == 0))
    assert len(broadcasts) == (12 if every_step else 3)
    for step, (before, now) in enumerate(readings, start=1):
        moved = every_step or step % 4 == 0
        assert (now > before) == moved, (step, before, now)  # between agreements it stands still
    assert clock.elapsed == pytest.approx(broadcasts[-1], rel=1e-6)


@pytest.mark.parametrize(
    "overrides, shared, every_step",
    [
        ({}, False, False),  # nothing depends on time: no collective at all
        ({"eval.every_minutes": 5.0}, True, False),  # minute intervals: at log steps
        ({"checkpoint.every_minutes": 10.0}, True, False),
        ({"train.time_budget_minutes": 60.0, "eval.every_minutes": 5.0}, True, True),  # a budget
    ],
)
def test_the_loop_shares_its_clock_only_as_often_as_its_schedule_needs(
    monkeypatch, overrides, shared, every_step
):
    from seq2seq.training import trainer

    _two_processes(monkeypatch)
    config = tiny_config("transformer")
    for key, value in overrides.items():
        section, name = key.split(".")
        config[section][name] = value
    fields = {field: None for field in trainer._Loop.__dataclass_fields__ if field != "config"}
    loop = trainer._Loop(config=config, **fields)
    assert (loop.clock.shared, loop.clock.every_step) == (shared, every_step)


@pytest.mark.slow
def test_each_log_line_says_where_the_hosts_time_went_a_step(tmp_path, monkeypatch):
    # Each part of the host's work made slow by a known amount: the line must put each delay
    # in its own part, and leave the compiling step's dispatch out of the dispatch figure.
    import dataclasses

    from seq2seq.training import trainer

    config = tiny_config("transformer")
    config.train.steps = 12
    config.train.log_every_steps = 4
    config.checkpoint.every_steps = 1_000
    config.data.pack = True  # one batch shape: only the first step compiles
    build, place, make_step = (
        trainer.build_training_data,
        trainer.sharding.global_batch,
        trainer.configured_train_step,
    )
    # Far enough apart that a delay counted in the wrong part would break the bounds below.
    delays = {"input": 0.06, "placing": 0.03, "dispatch": 0.09}

    def slow(seconds, function):
        def wrapped(*args, **kwargs):
            time.sleep(seconds)
            return function(*args, **kwargs)

        return wrapped

    def slow_input(*args, **kwargs):
        data = build(*args, **kwargs)
        return dataclasses.replace(
            data, batches=data.batches.map(slow(delays["input"], lambda b: b))
        )

    monkeypatch.setattr(trainer, "build_training_data", slow_input)
    monkeypatch.setattr(trainer.sharding, "global_batch", slow(delays["placing"], place))
    monkeypatch.setattr(
        trainer,
        "configured_train_step",
        lambda *args: slow(delays["dispatch"], make_step(*args)),
    )
    train(config, tmp_path)
    trained = [r for r in RunDirectory(tmp_path).read_metrics() if r["kind"] == "train"]
    assert [r["step"] for r in trained] == [4, 8, 12]
    for record in trained:
        for part, seconds in delays.items():
            # At least its own delay and less than another's more: nothing leaked in. The first
            # line holds the step that compiled for seconds: its dispatch is not in the mean.
            assert 1e3 * seconds <= record[f"host_{part}_ms"] < 1e3 * seconds + 25, (part, record)
        assert record["host_waiting_ms"] >= 0
