"""The choice of how Eq. 1 is computed, and cuDNN's form of it (masks as lengths, packed rows as
examples' lengths and offsets) against the reference equations: on a CPU through XLA with the
arguments a GPU would pass cuDNN, and through cuDNN itself where an NVIDIA GPU is present."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from seq2seq.attention import cudnn, layers
from seq2seq.models import Transformer, TransformerConfig
from seq2seq.models.base import PAD_ID, shift_right
from seq2seq.training.step import TrainState, make_train_step

VOCAB = 40
ON_CUDA = layers.attention_platform() == "cuda"


def _random(key, *shape, dtype=jnp.float32):
    return jax.random.normal(jax.random.key(key), shape).astype(dtype)


def _segments(lengths, width):
    """[B, width] segment ids: one example of each length (segment 1), then padding."""
    return (jnp.arange(width)[None, :] < jnp.asarray(lengths)[:, None]).astype(jnp.int32)


def _packed_segments(rows, width):
    """[B, width] segment ids: row b holds examples 1, 2, ... of lengths ``rows[b]``, then 0."""
    return jnp.array(
        [
            sum(([m + 1] * n for m, n in enumerate(row)), []) + [0] * (width - sum(row))
            for row in rows
        ],
        jnp.int32,
    )


@pytest.fixture
def packed_cudnn(monkeypatch):
    """cuDNN's packed layout switched on, the kernel stood in for by XLA computing the same from
    the same layout. Returns the record of ``attention_by_segments``'s calls."""
    calls = []
    stock = cudnn.attention_by_segments

    def recorded(*args, causal, implementation="cudnn"):
        calls.append({"implementation": implementation, "causal": causal})
        return stock(*args, causal=causal, implementation="xla")

    monkeypatch.setattr(layers, "attention_by_segments", recorded)
    monkeypatch.setattr(layers, "packed_rows_supported", lambda: True)
    return calls


@pytest.fixture
def cuda_platform(monkeypatch):
    """Traces as for an NVIDIA GPU, cuDNN's kernel stood in for by XLA's computing the same
    from the same arguments. Returns the record of ``jax.nn.dot_product_attention``'s calls."""
    calls = []
    stock = jax.nn.dot_product_attention

    def recorded(*args, implementation=None, **kwargs):
        calls.append(
            {
                "implementation": implementation,
                "dense mask": kwargs.get("mask") is not None,
                "lengths": kwargs.get("key_value_seq_lengths") is not None,
                "causal": kwargs.get("is_causal", False),
            }
        )
        if implementation == "cudnn":
            implementation = "xla"
        return stock(*args, implementation=implementation, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", recorded)
    monkeypatch.setattr(layers, "attention_platform", lambda: "cuda")
    return calls


# -- the choice ----------------------------------------------------------------------------


def _choice(
    platform="cuda", dtype=jnp.bfloat16, mask="lengths", width=8, value_width=None, length=4, **kw
):
    q = jnp.zeros((2, length, 2, width), dtype)
    v = jnp.zeros((2, length, 2, value_width or width), dtype)
    segments = _segments([length, 2], length)
    masks = {
        "lengths": layers.sequence_mask(segments, segments, causal=True, packed=False),
        "packed": layers.sequence_mask(segments, segments, causal=True, packed=True),
        "dense": layers.segment_mask(segments, segments),
        "none": None,
    }
    return layers.choose_implementation(q, q, v, masks[mask], platform=platform, **kw)


@pytest.mark.parametrize(
    "case, expected",
    [
        ({"platform": "cpu"}, "cpu"),
        ({"platform": "cpu", "dtype": jnp.float32, "mask": "packed"}, "cpu"),
        ({}, "cudnn"),
        ({"dtype": jnp.float16}, "cudnn"),
        ({"mask": "none"}, "cudnn"),
        ({"width": 128}, "cudnn"),
        ({"dtype": jnp.float32}, "xla"),  # cuDNN's flash attention takes 16-bit inputs only
        ({"mask": "packed"}, "xla"),  # several examples per row: no lengths
        ({"mask": "dense"}, "xla"),
        ({"width": 12}, "xla"),  # head width not a multiple of 8
        ({"width": 256}, "xla"),  # wider than every GPU takes
        ({"length": 5}, "xla"),  # an odd length: JAX refuses cuDNN's backward pass
        ({"platform": "rocm"}, "xla"),
        ({"platform": "tpu"}, "xla"),
        ({"heads_first": True}, "explicit"),  # a decoding cache
        ({"weights_or_dropout": True}, "explicit"),
        ({"fused": False}, "explicit"),
        ({"value_width": 16}, "explicit"),  # d_v != d_k
        ({"platform": "cpu", "heads_first": True}, "explicit"),
    ],
)
def test_one_place_chooses_how_equation_1_is_computed(case, expected):
    assert _choice(**case) == expected


def test_packed_rows_go_to_cudnn_only_where_its_packed_layout_is_on(monkeypatch):
    for capability, switched_on, supported in (
        ((9, 0), True, True),  # Hopper
        ((8, 0), True, False),  # Ampere: JAX refuses the layout
        ((9, 0), False, False),
        ((0, 0), True, False),  # no GPU
    ):
        monkeypatch.setattr(cudnn, "compute_capability", lambda c=capability: c)
        monkeypatch.setattr(cudnn, "CUDNN_PACKED", switched_on)
        assert cudnn.packed_rows_supported() == supported
    monkeypatch.setattr(layers, "packed_rows_supported", lambda: True)
    assert _choice(mask="packed") == "cudnn"
    assert _choice(mask="packed", dtype=jnp.float32) == "xla"
    assert _choice(mask="dense") == "xla"  # a bare array says nothing of segments


def test_the_platform_is_read_from_the_default_backend_alone(monkeypatch):
    """A GPU is named by its runtime (only CUDA has cuDNN) without asking for a CPU backend,
    which a process started with JAX_PLATFORMS=cuda lacks."""

    class Client:
        platform_version = ""

    class Device:
        client = Client()

    def devices(backend=None):
        if backend is not None:
            raise RuntimeError(f"Unknown backend {backend}")
        return [Device()]

    monkeypatch.setattr(jax, "devices", devices)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    Client.platform_version = "cuda 12080"
    assert layers.attention_platform() == "cuda"
    Client.platform_version = "rocm 6.3"
    assert layers.attention_platform() == "rocm"
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert layers.attention_platform() == "tpu"


# -- masks as lengths ----------------------------------------------------------------------


def test_lengths_say_what_the_dense_mask_says():
    """For rows of one example then padding, (t < query length, s < key length, s <= t if
    causal) is the dense mask, in self- and cross-attention; a row without keys reads nothing."""
    targets = _segments([5, 3, 0, 2], 5)
    sources = _segments([7, 4, 6, 0], 7)
    t = jnp.arange(5)[None, :, None]
    for query, key, causal in ((targets, targets, True), (targets, sources, False)):
        mask = layers.sequence_mask(query, key, causal=causal, packed=False)
        s = jnp.arange(key.shape[1])[None, None, :]
        by_lengths = (t < mask.query_lengths[:, None, None]) & (s < mask.key_lengths[:, None, None])
        if causal:
            by_lengths = by_lengths & (s <= t)
        np.testing.assert_array_equal(mask.dense[:, 0], by_lengths)
    assert layers.sequence_mask(targets, sources).key_lengths is None  # packed by default
    np.testing.assert_array_equal(
        layers.sequence_mask(targets, sources, packed=False).query_lengths, [5, 3, 0, 0]
    )


def test_an_unpacked_target_reads_the_first_example_of_a_packed_source():
    sources = jnp.array([[1, 1, 1, 2, 2, 0]])
    targets = _segments([3], 4)
    mask = layers.sequence_mask(targets, sources, packed=False)
    np.testing.assert_array_equal(mask.key_lengths, [3])
    np.testing.assert_array_equal(mask.dense[0, 0, 0], [True, True, True, False, False, False])


@pytest.mark.parametrize(
    "segments, keys, causal, message",
    [
        (jnp.ones((2, 4), jnp.int32), jnp.ones((3, 4), jnp.int32), False, "one batch B"),
        (jnp.ones((2, 4), jnp.int32), jnp.ones((2, 5), jnp.int32), True, "as many keys"),
    ],
)
def test_a_mask_of_mismatched_segments_is_refused(segments, keys, causal, message):
    with pytest.raises(ValueError, match=message):
        layers.sequence_mask(segments, keys, causal=causal)


# -- packed rows as examples' lengths and offsets --------------------------------------------


def test_the_packed_layout_of_rows_by_hand():
    segments = jnp.array([[1, 1, 1, 2, 2, 0], [0] * 6, [1, 2, 2, 3, 0, 0]], jnp.int32)
    lengths, offsets = cudnn.segment_layout(segments, 3)
    # A row without examples is given one of length 1 (the kernel never normalises over none).
    np.testing.assert_array_equal(lengths, [[3, 2, -1], [1, -1, -1], [1, 2, 1]])
    np.testing.assert_array_equal(offsets, [[0, 3, -1, -1], [0, -1, -1, -1], [0, 1, 3, -1]])


# -- cuDNN's arguments, computed by XLA on any platform ------------------------------------

# [B] lengths: full, padded, padding only (a row added to fill a shard), and an empty source.
TARGET_LENGTHS, SOURCE_LENGTHS = [6, 4, 0, 3], [9, 5, 0, 0]


def _inputs(dtype, queries=6, keys=9):
    q = _random(0, 4, queries, 2, 8, dtype=dtype)
    k, v = _random(1, 4, keys, 2, 8, dtype=dtype), _random(2, 4, keys, 2, 8, dtype=dtype)
    return q, k, v, _random(3, 4, queries, 2, 8)


def _assert_close(actual, expected, tolerance):
    """Equal within ``tolerance`` of each array's largest magnitude (at least 1)."""
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, atol=tolerance * max(1.0, np.abs(b).max()), rtol=0)


def _sides(kind, targets, sources):
    """(query, key) segment ids of one kind of attention between target and source rows."""
    return {"encoder self": (sources, sources), "decoder self": (targets, targets)}.get(
        kind, (targets, sources)
    )


# Rows of one to three examples, a full row and a row of padding only; example m of a target
# row and of its source row are one pair's two sides.
PACKED_TARGETS, PACKED_SOURCES = [[3, 2], [5], [1, 2, 3], []], [[4, 3], [10], [2, 2, 3], []]


@pytest.mark.parametrize("packed", [False, True], ids=["lengths", "examples"])
@pytest.mark.parametrize("kind", ["encoder self", "decoder self", "cross"])
@pytest.mark.parametrize("dtype, tolerance", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_the_kernels_arguments_give_the_reference_with_gradients(packed, kind, dtype, tolerance):
    """What a GPU passes cuDNN, computed by XLA from the same arguments: each row's lengths
    (rows of one example), or each example's length and offset (packed rows)."""
    if packed:
        targets = _packed_segments(PACKED_TARGETS, 6)
        sources = _packed_segments(PACKED_SOURCES, 10)
    else:
        targets, sources = _segments(TARGET_LENGTHS, 6), _segments(SOURCE_LENGTHS, 9)
    query, key = _sides(kind, targets, sources)
    mask = layers.sequence_mask(query, key, causal=kind == "decoder self", packed=packed)
    q, k, v, cotangent = _inputs(dtype, query.shape[1], key.shape[1])

    def by_arguments(q, k, v):
        if packed:
            return cudnn.attention_by_segments(
                q, k, v, query, key, causal=mask.causal, implementation="xla"
            )
        return cudnn.attention_by_lengths(
            q, k, v, mask.query_lengths, mask.key_lengths, causal=mask.causal, implementation="xla"
        )

    def reference(q, k, v):
        return layers.scaled_dot_product_attention(q, k, v, mask.dense, fused=False)[0]

    outputs, backward = jax.vjp(by_arguments, q, k, v)
    expected, expected_backward = jax.vjp(reference, q, k, v)
    padding_row = 3 if packed else 2
    assert float(jnp.abs(outputs[padding_row].astype(jnp.float32)).max()) == 0.0
    _assert_close(
        (outputs, *backward(cotangent.astype(dtype))),
        (expected, *expected_backward(cotangent.astype(dtype))),
        tolerance,
    )


# -- the Transformer as a GPU traces it ----------------------------------------------------


def _transformer(dtype):
    config = TransformerConfig(
        VOCAB,
        VOCAB,
        d_model=32,
        d_ff=64,
        num_heads=4,
        d_k=8,
        d_v=8,
        encoder_layers=2,
        decoder_layers=2,
        dropout_rate=0.0,
        dtype=dtype,
    )
    return Transformer(config, rngs=nnx.Rngs(0))


def _padded_batch(source_width=10, target_width=6):
    # Even widths: cuDNN takes no odd ones (``cudnn_takes``).
    tokens = jax.random.randint(jax.random.key(1), (4, source_width), 4, VOCAB)
    source = jnp.where(_segments(SOURCE_LENGTHS, source_width) > 0, tokens, PAD_ID)
    target_tokens = tokens[:, :target_width]
    target = jnp.where(_segments(TARGET_LENGTHS, target_width) > 0, target_tokens, PAD_ID)
    return {"source": source, "target": target}


def _packed_batch():
    """Rows of one to three examples, and a row of padding only (even widths: cuDNN takes no
    odd ones)."""
    tokens = jax.random.randint(jax.random.key(1), (4, 10), 4, VOCAB)
    source_segments = _packed_segments(PACKED_SOURCES, 10)
    target_segments = _packed_segments(PACKED_TARGETS, 6)
    return {
        "source": jnp.where(source_segments > 0, tokens, PAD_ID),
        "target": jnp.where(target_segments > 0, tokens[:, :6], PAD_ID),
        "source_segments": source_segments,
        "target_segments": target_segments,
    }


def _loss_and_gradients(model, batch):
    graphdef, params = nnx.split(model)

    def loss(params):
        logits, _ = nnx.merge(graphdef, params)(
            batch["source"],
            shift_right(batch["target"], batch.get("target_segments")),
            source_segments=batch.get("source_segments"),
            target_segments=batch.get("target_segments"),
        )
        real = (batch["target"] != PAD_ID)[..., None]
        return jnp.sum(jnp.where(real, logits.astype(jnp.float32), 0.0) ** 2) * 1e-3

    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 3e-2)])
@pytest.mark.parametrize("rows", ["padded", "packed", "packed, cuDNN's packed layout on"])
def test_a_gpu_trained_transformer_equals_the_cpu_one(
    cuda_platform, monkeypatch, request, dtype, tolerance, rows
):
    """Loss and gradients as a GPU traces them (cuDNN's arguments computed by XLA) equal the CPU
    path's. Padded rows go by lengths (float32 admitted here to check them tightly); packed rows
    by the dense mask, or by examples' lengths and offsets where cuDNN's packed layout is on."""
    if dtype == "float32":
        monkeypatch.setattr(cudnn, "CUDNN_DTYPES", (jnp.dtype(jnp.float32),))
    by_examples = request.getfixturevalue("packed_cudnn") if "layout" in rows else None
    batch = _padded_batch() if rows == "padded" else _packed_batch()
    model = _transformer(dtype)
    # Float32 products in full float32 on a GPU too: there they round to TensorFloat-32 by
    # default (2^-11 relative, beyond 1e-5), which two paths summing in different orders show.
    with jax.default_matmul_precision("highest" if dtype == "float32" else "default"):
        with monkeypatch.context() as cpu:
            cpu.setattr(layers, "attention_platform", lambda: "cpu")
            expected = _loss_and_gradients(model, batch)
        gpu = _loss_and_gradients(model, batch)
    _assert_close(gpu, expected, tolerance)
    implementations = {call["implementation"] for call in cuda_platform}
    if rows == "padded":
        assert implementations == {"cudnn"}
        assert not any(call["dense mask"] for call in cuda_platform)
        assert all(call["lengths"] for call in cuda_platform)
        assert {call["causal"] for call in cuda_platform} == {True, False}  # self, cross
    elif by_examples is None:
        assert implementations == {"xla"} and all(call["dense mask"] for call in cuda_platform)
    else:  # every attention by examples: two encoder layers, two decoder layers' self and cross
        assert len(by_examples) == 6 and {call["causal"] for call in by_examples} == {True, False}
        assert all(call["implementation"] == "cudnn" for call in by_examples)
        assert implementations == {"xla"}  # only the stand-in's own calls


def test_cached_decoding_on_a_gpu_equals_its_full_pass(cuda_platform, monkeypatch):
    """The full pass goes by lengths; each cached step reads head-major keys by the explicit
    equations. They agree, and the steps call no fused kernel."""
    monkeypatch.setattr(cudnn, "CUDNN_DTYPES", (jnp.dtype(jnp.float32),))
    model = _transformer("float32")
    batch = _padded_batch()
    source, target_inputs = batch["source"], shift_right(batch["target"])
    full, _ = jax.jit(lambda s, t: model(s, t))(source, target_inputs)
    assert {call["implementation"] for call in cuda_platform} == {"cudnn"}
    calls = len(cuda_platform)
    encoded, cache = model.start_decoding(model.encode(source), target_inputs.shape[1])
    step = jax.jit(lambda encoded, tokens, cache: model.decode(encoded, tokens, cache=cache))
    logits = []
    for t in range(target_inputs.shape[1]):
        step_logits, _, cache = step(encoded, target_inputs[:, t : t + 1], cache)
        logits.append(step_logits)
    assert len(cuda_platform) == calls + 2  # the encoder's two layers, by lengths; no steps
    real = np.asarray(batch["target"] != PAD_ID)
    np.testing.assert_allclose(
        np.asarray(jnp.concatenate(logits, axis=1))[real], np.asarray(full)[real], atol=1e-4
    )


def test_the_training_step_traces_without_a_cpu_backend(cuda_platform, monkeypatch):
    """As a process started with JAX_PLATFORMS=cuda traces it: asking for the CPU devices
    fails (the CPU path asks, so the test would catch it taken)."""
    real_devices = jax.devices

    def devices(backend=None):
        if backend == "cpu":
            raise RuntimeError("Unknown backend cpu. Available backends are ['cuda']")
        return real_devices(backend)

    monkeypatch.setattr(jax, "devices", devices)
    schedule = optax.constant_schedule(1e-3)
    state = TrainState.create(_transformer("bfloat16"), optax.adam(1e-3), seed=0)
    batch = _padded_batch()
    traced = make_train_step(label_smoothing=0.1, schedule=schedule).trace(state, batch)
    assert traced.out_info[1]["loss"].shape == ()
    assert {call["implementation"] for call in cuda_platform} == {"cudnn"}
    with monkeypatch.context() as cpu:
        cpu.setattr(layers, "attention_platform", lambda: "cpu")
        # Another schedule object: another step, traced anew (equal settings share one step).
        other = optax.constant_schedule(1e-3)
        with pytest.raises(RuntimeError, match="Unknown backend cpu"):
            make_train_step(label_smoothing=0.1, schedule=other).trace(state, batch)


# -- cuDNN itself --------------------------------------------------------------------------


@pytest.mark.skipif(not ON_CUDA, reason="cuDNN's kernel needs an NVIDIA GPU; this has none")
@pytest.mark.parametrize("kind", ["encoder self", "decoder self", "cross"])
def test_cudnn_equals_the_reference_within_bfloat16_rounding(kind):
    targets = _segments(TARGET_LENGTHS, 64)
    sources = _segments(SOURCE_LENGTHS, 72)
    _assert_cudnn_equals_the_reference(kind, targets, sources, packed=False)


def _assert_cudnn_equals_the_reference(kind, targets, sources, packed):
    """cuDNN's kernel (it must be the one chosen) against the explicit equations, with
    gradients, within bfloat16 rounding."""
    query, key = _sides(kind, targets, sources)
    mask = layers.sequence_mask(query, key, causal=kind == "decoder self", packed=packed)
    q, k, v, cotangent = _inputs(jnp.bfloat16, query.shape[1], key.shape[1])
    assert layers.choose_implementation(q, k, v, mask, platform="cuda") == "cudnn"

    def attend(fused):
        return jax.jit(
            lambda q, k, v: layers.scaled_dot_product_attention(q, k, v, mask, fused=fused)[0]
        )

    assert "cudnn" in attend(True).lower(q, k, v).as_text().lower()  # the kernel's custom call
    cotangent = cotangent.astype(jnp.bfloat16)
    outputs, backward = jax.vjp(attend(True), q, k, v)
    expected, expected_backward = jax.vjp(attend(False), q, k, v)
    _assert_close((outputs, *backward(cotangent)), (expected, *expected_backward(cotangent)), 2e-2)


@pytest.mark.skipif(not ON_CUDA, reason="cuDNN's kernel needs an NVIDIA GPU; this has none")
@pytest.mark.parametrize("widths", [(10, 6), (72, 64)])
def test_a_bfloat16_transformer_on_cudnn_equals_the_explicit_equations(widths):
    _assert_the_fused_model_equals_the_explicit_equations(_padded_batch(*widths))


def _assert_the_fused_model_equals_the_explicit_equations(batch):
    """A bfloat16 Transformer's loss and gradients with its fused attention (on a GPU, cuDNN's
    kernel) against the same model computing the explicit equations."""
    model = _transformer("bfloat16")
    fused = _loss_and_gradients(model, batch)
    for _, module in nnx.iter_graph(model):
        if isinstance(module, layers.MultiHeadAttention):
            module.fused = False
    _assert_close(fused, _loss_and_gradients(model, batch), 3e-2)


HOPPER = ON_CUDA and cudnn.compute_capability() >= cudnn.PACKED_MIN_CAPABILITY


@pytest.mark.skipif(not HOPPER, reason="cuDNN's packed layout needs an NVIDIA GPU from Hopper on")
@pytest.mark.parametrize("kind", ["encoder self", "decoder self", "cross"])
def test_cudnn_reads_packed_rows_as_the_reference_does(monkeypatch, kind):
    """The test that turns ``cudnn.CUDNN_PACKED`` on: cuDNN's packed layout against
    the reference equations on rows of several examples, within bfloat16 rounding."""
    monkeypatch.setattr(cudnn, "CUDNN_PACKED", True)
    target_rows = [[20, 30, 10], [64], [5, 5, 5, 5], []]
    source_rows = [[25, 25, 15], [70], [8, 9, 10, 11], []]
    targets, sources = _packed_segments(target_rows, 64), _packed_segments(source_rows, 72)
    _assert_cudnn_equals_the_reference(kind, targets, sources, packed=True)


@pytest.mark.skipif(not HOPPER, reason="cuDNN's packed layout needs an NVIDIA GPU from Hopper on")
def test_a_bfloat16_transformer_on_packed_rows_on_cudnn_equals_the_explicit_equations():
    """A whole model's loss and gradients on rows of several examples (and one of padding
    only), cuDNN's packed layout in every attention, against the explicit equations."""
    assert cudnn.packed_rows_supported()
    _assert_the_fused_model_equals_the_explicit_equations(_packed_batch())
