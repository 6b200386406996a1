"""The training step learns; the schedule and the loss give the numbers worked out by hand."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.models import build_model, train_flops
from seq2seq.models.base import PAD_ID, OutputLayer
from seq2seq.training.losses import projected_cross_entropy, smoothed_cross_entropy
from seq2seq.training.schedules import (
    build_optimizer,
    build_schedule,
    schedule_shape,
    transformer_schedule,
)
from seq2seq.training.step import TrainState, configured_train_step, make_train_step
from seq2seq.training.trainer import create_state
from tests.conftest import dot_operand_dtypes, tiny_config


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_training_lowers_the_loss(model_name):
    config = tiny_config(model_name)
    config.train.schedule = "constant"
    config.train.learning_rate = 1e-2
    state, schedule = create_state(config, 30, 30)
    step = make_train_step(label_smoothing=0.1, schedule=schedule)
    rng = np.random.default_rng(0)
    batch = {
        "source": rng.integers(4, 30, (8, 10)).astype(np.int32),
        "target": rng.integers(4, 30, (8, 10)).astype(np.int32),
    }
    losses = []
    for _ in range(60):  # RNNsearch starts slowly from the paper's N(0, 0.01^2) weights
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.7 * losses[0], losses
    assert int(state.step) == 60


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_empty_rows_change_no_update_and_the_step_counts_real_tokens(model_name):
    """What lets any mesh train on the same batches: rows of padding, added to reach a multiple
    of the devices, weigh nothing, not even in the token counts that normalise the loss."""
    config = tiny_config(model_name)
    rng = np.random.default_rng(1)
    source = rng.integers(4, 30, (3, 10)).astype(np.int32)
    target = rng.integers(4, 30, (3, 8)).astype(np.int32)
    source[0, 6:], target[1, 5:] = PAD_ID, PAD_ID  # 30 - 4 real source, 24 - 3 target tokens
    batch = {"source": source, "target": target}
    padded = {key: np.pad(value, ((0, 5), (0, 0))) for key, value in batch.items()}
    row_flops = functools.partial(train_flops, config, 30)
    results = []
    for inputs in (batch, padded):
        state, schedule = create_state(config, 30, 30)  # the step donates (consumes) its state
        step = make_train_step(label_smoothing=0.1, schedule=schedule, flops=row_flops)
        results.append(step(state, inputs))
    (_, metrics), (_, padded_metrics) = results
    assert float(metrics["source_tokens"]) == padded_metrics["source_tokens"] == 26
    assert float(metrics["target_tokens"]) == padded_metrics["target_tokens"] == 21
    # The rows' real lengths are (6, 8), (10, 5) and (10, 8); the empty rows cost no FLOPs.
    flops = sum(train_flops(config, 30, s, t) for s, t in [(6, 8), (10, 5), (10, 8)])
    np.testing.assert_allclose([metrics["train_flops"], padded_metrics["train_flops"]], flops)
    np.testing.assert_allclose(metrics["padding_share"], 1 - 47 / 54, rtol=1e-6)
    np.testing.assert_allclose(padded_metrics["padding_share"], 1 - 47 / 144, rtol=1e-6)
    # (Not the parameters: Adam's first update is about lr * sign(g), which float noise flips
    # where a gradient is nearly 0.)
    for key in ("loss", "nll", "grad_norm"):
        np.testing.assert_allclose(padded_metrics[key], metrics[key], rtol=1e-5, err_msg=key)


def test_a_packed_step_counts_the_tokens_and_flops_of_its_rows():
    # A packed row costs what its tokens cost together: its attention spans the row (masked).
    config = tiny_config("transformer")
    source_segments = np.array([[1, 1, 1, 2, 2, 0], [0] * 6, [1, 1, 0, 0, 0, 0]], np.int32)
    target_segments = np.array([[1, 1, 2, 2, 2, 0], [0] * 6, [1, 1, 1, 0, 0, 0]], np.int32)
    batch = {
        "source": np.where(source_segments > 0, 7, PAD_ID).astype(np.int32),
        "target": np.where(target_segments > 0, 9, PAD_ID).astype(np.int32),
        "source_segments": source_segments,
        "target_segments": target_segments,
    }
    state, schedule = create_state(config, 30, 30)
    row_flops = functools.partial(train_flops, config, 30)
    _, metrics = make_train_step(label_smoothing=0.1, schedule=schedule, flops=row_flops)(
        state, batch
    )
    assert float(metrics["source_tokens"]) == 7 and float(metrics["target_tokens"]) == 8
    expected = train_flops(config, 30, 5, 5) + train_flops(config, 30, 2, 3)
    np.testing.assert_allclose(metrics["train_flops"], expected, rtol=1e-6)
    np.testing.assert_allclose(metrics["padding_share"], 1 - 15 / 36, rtol=1e-6)
    assert int(metrics["step"]) == 1  # the update this step made


def _one_batch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "source": rng.integers(4, 30, (8, 10)).astype(np.int32),
        "target": rng.integers(4, 30, (8, 10)).astype(np.int32),
    }


def test_runs_that_differ_only_in_learning_rate_share_one_compiled_step():
    """A learning-rate sweep compiles its step once: the rate is an input of the program."""
    programs = []
    for rate in (1e-3, 3e-3):
        config = tiny_config("transformer")
        config.train.schedule = "warmup_rsqrt"
        config.train.learning_rate = rate
        state, schedule = create_state(config, 30, 30)
        step = make_train_step(label_smoothing=0.1, schedule=schedule)
        programs.append(step.lower(state, _one_batch()).as_text())
    assert programs[0] == programs[1]


def test_the_learning_rate_in_the_state_updates_as_a_peak_inside_the_schedule():
    """Three steps with the rate carried in the state equal those of an optimizer whose schedule
    holds the rate itself (optax's own form), and the logged rates agree."""
    config = tiny_config("transformer")
    config.model.transformer.dropout_rate = 0.0
    config.train.learning_rate = 2.0
    config.train.warmup_steps = 2
    carried, shape = create_state(config, 30, 30)
    assert float(carried.learning_rate) == 2.0
    full = build_schedule(config.train, config.model.transformer.d_model)
    model = build_model(config, 30, 30, seed=config.seed)  # the same draw as create_state's
    inside = TrainState.create(model, build_optimizer(config.train, full), config.seed)
    results = []
    for state, schedule in ((carried, shape), (inside, full)):
        step = make_train_step(label_smoothing=0.1, schedule=schedule)
        rates = []
        for seed in range(3):
            state, metrics = step(state, _one_batch(seed))
            rates.append(float(metrics["learning_rate"]))
        results.append((state, rates))
    (carried, carried_rates), (inside, inside_rates) = results
    np.testing.assert_allclose(carried_rates, inside_rates, rtol=1e-6)
    assert carried_rates[0] < carried_rates[1]  # warming up: the rates are not all alike
    for a, b in zip(jax.tree.leaves(carried.params), jax.tree.leaves(inside.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("optimizer", ["adam", "adadelta"])
@pytest.mark.parametrize("schedule", ["transformer", "warmup_rsqrt", "warmup_cosine", "constant"])
def test_every_optimizer_and_schedule_takes_the_learning_rate_as_a_last_factor(optimizer, schedule):
    """What the training step relies on: each optimizer's update at ``rate * shape(t)`` is its
    update at ``shape(t)`` times ``rate``, gradient clipping included."""
    config = tiny_config("transformer")
    train = config.train
    train.optimizer, train.schedule, train.warmup_steps, train.steps = optimizer, schedule, 2, 6
    train.learning_rate, train.clip_grad_norm = 0.7, 1.0
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)}
    by_shape = build_optimizer(train, schedule_shape(train, 32))
    by_rate = build_optimizer(train, build_schedule(train, 32))
    shape_state, rate_state = by_shape.init(params), by_rate.init(params)
    largest = 0.0
    for _ in range(4):
        grads = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)}
        shaped, shape_state = by_shape.update(grads, shape_state, params)
        rated, rate_state = by_rate.update(grads, rate_state, params)
        np.testing.assert_allclose(0.7 * shaped["w"], rated["w"], rtol=1e-5, atol=1e-9)
        largest = max(largest, float(np.abs(rated["w"]).max()))
    assert largest > 1e-5  # the updates were not all zero (warmup_cosine starts at 0)


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        # lrate = 512^-0.5 * min(step^-0.5, step * 4000^-1.5); 512^-0.5 = 0.04419417
        (1, 1.746928107421711e-07),  # warm-up: 0.04419417 * 1 / 252982.2
        (4000, 0.0006987712429686843),  # the peak, both terms 4000^-0.5 = 0.01581139
        (16000, 0.00034938562148434214),  # decay: 4 times the steps, half the rate
    ],
)
def test_transformer_schedule_is_equation_3_by_hand(step, expected):
    # optax counts updates from 0; the paper's step_num counts from 1.
    rate = transformer_schedule(d_model=512, warmup_steps=4000)(step - 1)
    np.testing.assert_allclose(rate, expected, rtol=1e-6)


def test_label_smoothed_cross_entropy_of_a_three_class_case_by_hand():
    # Three classes, epsilon 0.3: the smoothed target is 0.3 / 3 = 0.1 on every class plus
    # 0.7 on the reference, e.g. [0.1, 0.8, 0.1] for class 1.
    #   token 1: p = [1/4, 1/2, 1/4] (logits log 1, log 2, log 1), reference 1:
    #     loss = -(0.1 ln 1/4 + 0.8 ln 1/2 + 0.1 ln 1/4) = 0.4 ln 2 + 0.8 ln 2 = 1.2 ln 2
    #     nll = ln 2
    #   token 2: p = [1/2, 1/4, 1/4], reference 2, target [0.1, 0.1, 0.8]:
    #     loss = 0.1 ln 2 + 0.1 ln 4 + 0.8 ln 4 = 1.9 ln 2;  nll = ln 4 = 2 ln 2
    #   token 3: padding (id 0), left out whatever its logits.
    logits = np.log(np.array([[[1.0, 2.0, 1.0], [2.0, 1.0, 1.0], [9.0, 1.0, 1.0]]], np.float32))
    targets = np.array([[1, 2, PAD_ID]])
    loss, nll, tokens = smoothed_cross_entropy(logits, targets, label_smoothing=0.3)
    np.testing.assert_allclose(loss, 3.1 * np.log(2), rtol=1e-6)  # 2.1487562597358303
    np.testing.assert_allclose(nll, 3.0 * np.log(2), rtol=1e-6)
    assert float(tokens) == 2.0


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_bfloat16_computes_in_bfloat16_but_keeps_float32_parameters_and_loss(model_name):
    config = tiny_config(model_name)
    config.train.dtype = "bfloat16"
    config.train.schedule = "constant"
    config.train.learning_rate = 1e-2
    state, schedule = create_state(config, 30, 30)
    rng = np.random.default_rng(0)
    batch = {
        "source": rng.integers(4, 30, (8, 10)).astype(np.int32),
        "target": rng.integers(4, 30, (8, 10)).astype(np.int32),
    }
    lowered = make_train_step(label_smoothing=0.1, schedule=schedule).lower(state, batch)
    assert "bf16" in lowered.as_text(), "no bfloat16 arithmetic in the compiled step"
    step = lowered.compile()
    losses = []
    for _ in range(60):
        state, metrics = step(state, batch)
        losses.append(metrics["loss"])
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(state.params))
    assert losses[-1].dtype == np.float32
    assert float(losses[-1]) < 0.8 * float(losses[0])


def test_projected_loss_of_the_three_class_case_by_hand():
    # The case above through an identity output layer, one time step per chunk: the same
    # hand-computed sums.
    features = np.log(np.array([[[1.0, 2.0, 1.0], [2.0, 1.0, 1.0], [9.0, 1.0, 1.0]]], np.float32))
    targets = np.array([[1, 2, PAD_ID]])
    output = OutputLayer(np.eye(3, dtype=np.float32))
    loss, nll, tokens = projected_cross_entropy(features, output, targets, 0.3, chunk_tokens=1)
    np.testing.assert_allclose(loss, 3.1 * np.log(2), rtol=1e-6)
    np.testing.assert_allclose(nll, 3 * np.log(2), rtol=1e-6)
    assert tokens == 2


@pytest.mark.parametrize("chunk_tokens", [4, 9, None])  # 1 or 2 time steps a chunk, or all
@pytest.mark.parametrize("vocab_first", [True, False])  # a tied embedding [V, D], a kernel [D, V]
def test_projected_loss_and_gradients_equal_the_loss_on_full_logits(vocab_first, chunk_tokens):
    keys = jax.random.split(jax.random.key(0), 4)
    batch, length, width, vocab = 4, 7, 6, 11  # 7 steps: the last chunk is padded
    features = jax.random.normal(keys[0], (batch, length, width))
    weights = jax.random.normal(keys[1], (vocab, width) if vocab_first else (width, vocab))
    bias = None if vocab_first else jax.random.normal(keys[2], (vocab,))
    targets = jax.random.randint(keys[3], (batch, length), 1, vocab).at[:, 5:].set(PAD_ID)

    def full(features, weights, bias):  # the logits whole, then optax's cross-entropy
        output = OutputLayer(weights, bias, vocab_first)
        return smoothed_cross_entropy(output(features), targets, 0.1)

    def chunked(features, weights, bias):
        output = OutputLayer(weights, bias, vocab_first)
        return projected_cross_entropy(features, output, targets, 0.1, chunk_tokens)

    sums = zip(full(features, weights, bias), chunked(features, weights, bias), strict=True)
    for expected, actual in sums:
        np.testing.assert_allclose(actual, expected, rtol=1e-5)
    arguments = (0, 1) if bias is None else (0, 1, 2)
    expected = jax.grad(lambda *a: full(*a)[0], argnums=arguments)(features, weights, bias)
    actual = jax.jit(jax.grad(lambda *a: chunked(*a)[0], argnums=arguments))(
        features, weights, bias
    )
    for e, a in zip(expected, actual, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)
    assert float(np.abs(actual[0][:, 5:]).max()) == 0.0  # padding positions get no gradient


def test_projected_loss_refuses_to_differentiate_its_nll():
    features = np.ones((1, 2, 3), np.float32)
    output = OutputLayer(np.eye(3, dtype=np.float32))
    targets = np.array([[1, 2]])
    with pytest.raises(NotImplementedError, match="loss sum only"):
        jax.grad(lambda f: projected_cross_entropy(f, output, targets, 0.1)[1])(features)


@pytest.mark.parametrize("vocab_first", [True, False])
def test_a_bfloat16_output_layer_multiplies_in_bfloat16_and_accumulates_in_float32(vocab_first):
    keys = jax.random.split(jax.random.key(1), 3)
    batch, length, width, vocab = 2, 6, 8, 13
    features = jax.random.normal(keys[0], (batch, length, width), jnp.bfloat16)
    weights = jax.random.normal(keys[1], (vocab, width) if vocab_first else (width, vocab))
    targets = jax.random.randint(keys[2], (batch, length), 1, vocab)
    output = OutputLayer(weights, None, vocab_first, jnp.bfloat16)

    logits = output(features)
    assert logits.dtype == jnp.float32
    exact = OutputLayer(weights.astype(jnp.bfloat16).astype(jnp.float32), None, vocab_first)
    np.testing.assert_allclose(logits, exact(features.astype(jnp.float32)), rtol=1e-5, atol=1e-5)

    def loss(features, weights):
        layer = OutputLayer(weights, None, vocab_first, jnp.bfloat16)
        return projected_cross_entropy(features, layer, targets, 0.1, chunk_tokens=4)[0]

    value, (features_gradient, weights_gradient) = jax.value_and_grad(loss, argnums=(0, 1))(
        features, weights
    )
    assert (features_gradient.dtype, weights_gradient.dtype) == (jnp.bfloat16, jnp.float32)
    full = smoothed_cross_entropy(exact(features.astype(jnp.float32)), targets, 0.1)[0]
    np.testing.assert_allclose(value, full, rtol=1e-5)
    products = dot_operand_dtypes(jax.grad(loss, argnums=(0, 1)), features, weights)
    assert products == {("bfloat16", "bfloat16")}  # forward and both gradient products


def _step_for(config):
    from seq2seq.training import sharding

    state, schedule = create_state(config, 30, 30)
    mesh = sharding.build_mesh(1, 1, 1)
    rules = sharding.AxisRules.from_config(config.mesh.rules)
    shardings = sharding.state_sharding(mesh, state, rules)
    return configured_train_step(config, schedule, mesh, rules, shardings, 30)


@pytest.mark.parametrize(
    ("key", "value", "shared"),
    [
        ("train.learning_rate", 3.0, True),
        ("seed", 7, True),
        ("train.steps", 999, True),  # the "transformer" schedule does not read it
        ("train.time_budget_minutes", 5.0, True),
        ("train.warmup_steps", 11, False),
        ("train.label_smoothing", 0.2, False),
        ("train.grad_accum_steps", 2, False),
        ("train.clip_grad_norm", 1.0, False),
        ("model.transformer.dropout_rate", 0.3, False),
        ("model.transformer.d_ff", 48, False),
    ],
)
def test_runs_of_one_process_share_a_step_where_their_settings_allow(key, value, shared):
    """The trainer's step is one function for runs whose step would be the same program (JAX
    then traces it once per batch shape), and another wherever a setting changes the program."""
    first = _step_for(tiny_config("transformer"))
    config = tiny_config("transformer")
    *sections, leaf = key.split(".")
    node = config
    for section in sections:
        node = node[section]
    node[leaf] = value
    second = _step_for(config)
    assert (second is first) == shared


def test_a_cosine_schedule_over_more_steps_is_another_step():
    config = tiny_config("transformer")
    config.train.schedule = "warmup_cosine"
    first = _step_for(config)
    config.train.steps = 999
    assert _step_for(config) is not first


def test_a_second_run_in_the_process_traces_no_step_loss_or_search_again(tmp_path, caplog):
    """Two runs that differ in learning rate, one after the other in one process, as a sweep
    trains them: the second compiles neither its training step, nor its validation loss, nor its
    search, and trains as it does alone. (Another seed would draw other batches, of other
    shapes, from the synthetic corpus.)"""
    from seq2seq.evaluation.validation import make_validate_fn
    from seq2seq.training.trainer import train

    def run(name, rate):
        config = tiny_config("transformer")
        config.train.steps, config.checkpoint.every_steps = 4, 4
        config.train.learning_rate = rate
        return train(config, tmp_path / name, make_validate_fn)

    run("first", 1.0)
    with jax.log_compiles(), caplog.at_level("WARNING", logger="jax"):
        shared = run("second", 2.0)
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert not [
        m for m in compiled if m.split()[1] in ("jit(on_mesh)", "jit(_loss)", "jit(_search)")
    ]
    from seq2seq.training import step as step_module

    step_module._STEPS.clear()  # the same run again, with nothing to share
    alone = run("alone", 2.0)
    assert shared.final_loss == alone.final_loss


def test_a_sentence_count_the_devices_cannot_share_is_refused_before_the_run_is_written(tmp_path):
    """It was refused only once the tokenizer was trained and config.json written, so the
    corrected command was refused in turn, as a change to a run's settings."""
    from seq2seq.training.trainer import train

    config = tiny_config("transformer")
    config.data.sentences_per_batch = 8
    config.train.grad_accum_steps = 3  # a batch's rows split in 3, as over 3 devices
    with pytest.raises(ValueError, match=r"sentences_per_batch=8 is not a multiple of 3 \("):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()
