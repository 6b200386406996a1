"""What ``python -m seq2seq.bench`` measures: matmul peak, training step, beam search, input.

Each ``*_benchmark`` function returns a flat dict of figures (the JSON line of the command).
Times are wall-clock seconds of the device work (``jax.block_until_ready``); a figure taken
over repeats is the median, so one slow repeat on a shared machine does not move it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.bench.collectives import collectives_in_loops
from seq2seq.bench.settings import MATMUL_SIZES, TARGET_DATA_MULTIPLE  # noqa: F401 (re-exported)
from seq2seq.data import sources
from seq2seq.data.encoded import encode_corpus, filter_pairs
from seq2seq.data.pipeline import build_tokenizer, make_batches
from seq2seq.decoding.beam_search import beam_search
from seq2seq.decoding.search_parts import cache_reorder, output_limits
from seq2seq.models import compute_dtype, count_params, model_family, train_flops
from seq2seq.models.base import Seq2SeqModel
from seq2seq.training import sharding
from seq2seq.training.step import configured_train_step
from seq2seq.training.trainer import create_state
from seq2seq.vocabulary import EOS_ID, PAD_ID

FIRST_WORD_ID = 4  # ids below are PAD, UNK, BOS and EOS (seq2seq.vocabulary)
# The matmul sizes and the input pipeline's target live in ``seq2seq.bench.settings``, so that
# the command line reads them without JAX.


def model_flops_utilization(flops_per_step: float, step_seconds: float, peak_flops: float) -> float:
    """MFU: achieved FLOP/s (analytic FLOPs of a step over its time) as a share of the peak.

    Args:
      flops_per_step: analytic FLOPs of one step (``seq2seq.models.train_flops``).
      step_seconds: time of one step.
      peak_flops: the machine's dense-matmul FLOP/s (``matmul_peak``).
    """
    return flops_per_step / step_seconds / peak_flops


def time_calls(call: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls, each waited for (``block_until_ready``)."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        seconds.append(time.perf_counter() - start)
    return seconds


def time_steps(step: Callable, state, batch, steps: int, warmup: int):
    """Times ``state, output = step(state, batch)`` as a training loop calls it.

    Runs ``warmup`` untimed steps, then ``steps`` timed ones, each waited for, threading the
    (donated) state through.

    Returns:
      (seconds of each timed step, the final state, the last step's output).
    """
    seconds = []
    for index in range(warmup + steps):
        start = time.perf_counter()
        state, output = step(state, batch)
        jax.block_until_ready(output)
        if index >= warmup:
            seconds.append(time.perf_counter() - start)
    return seconds, state, output


def matmul_peak(dtype: str = "float32", sizes=MATMUL_SIZES, repeats: int = 5) -> dict:
    """Achievable dense-matmul throughput under ``jax.jit``: best of ``repeats`` per size.

    Returns:
      {"dtype", "gflops_by_size": {n: GFLOP/s}, "peak_gflops": the best of them}.
    """
    by_size = {}
    key = jax.random.PRNGKey(0)
    for n in sizes:
        a = jax.random.normal(key, (n, n), jnp.float32).astype(dtype)
        b = jax.random.normal(jax.random.fold_in(key, 1), (n, n), jnp.float32).astype(dtype)
        product = jax.jit(jnp.matmul)
        jax.block_until_ready(product(a, b))  # compile
        best = min(time_calls(lambda a=a, b=b, product=product: product(a, b), repeats))
        by_size[n] = 2 * n**3 / best / 1e9
    return {"dtype": dtype, "gflops_by_size": by_size, "peak_gflops": max(by_size.values())}


def reset_peak_memory() -> None:
    """Starts a new process peak (Linux: ``/proc/self/clear_refs``), so that one process can
    measure several benchmarks in turn; elsewhere the peak stays the process's since start."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_memory_mb() -> tuple[float, str]:
    """Peak memory in MiB and where it was read: the device's allocator where it reports one
    (GPU, TPU), else the process's peak resident set size (CPU: parameters, activations and
    everything else the process holds, Python and XLA included) since ``reset_peak_memory``."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 2**20, "device peak_bytes_in_use"
    try:
        status = Path("/proc/self/status").read_text()
        kilobytes = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")
        )
        return kilobytes / 1024, "process peak RSS (VmHWM)"
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process max RSS"


def batch_shape(config: ml_collections.ConfigDict) -> tuple[int, int]:
    """(sentences, padded length) of the config's largest batch: ``data.sentences_per_batch``
    rows when set, else as many ``data.max_length`` rows as ``data.tokens_per_batch`` allows."""
    data = config.data
    length = data.max_length
    rows = data.sentences_per_batch or max(1, data.tokens_per_batch // length)
    return rows, length


def synthetic_batch(rows: int, length: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random word ids filling every position of both sides (no padding): [rows, length]."""
    rng = np.random.default_rng(seed)
    return {
        side: rng.integers(FIRST_WORD_ID, vocab, (rows, length)).astype(np.int32)
        for side in ("source", "target")
    }


def _lengths(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.count_nonzero(batch["source"] != PAD_ID, axis=1),
        np.count_nonzero(batch["target"] != PAD_ID, axis=1),
    )


class CompiledStep(NamedTuple):
    """The trainer's step compiled for one synthetic batch of a config's shape, and its inputs."""

    step: Callable  # compiled: (state, batch) -> (state, metrics)
    state: object  # placed on the config's mesh
    batch: dict  # the global batch, placed as the trainer places it
    host_batch: dict[str, np.ndarray]
    mesh: jax.sharding.Mesh
    flops: float  # analytic training FLOPs of the batch (seq2seq.models.flops)
    target_tokens: int
    compile_seconds: float  # lower().compile()


def compile_train_step(config: ml_collections.ConfigDict) -> CompiledStep:
    """The trainer's step (``configured_train_step``), placed on the config's mesh over all local
    devices and compiled for a synthetic batch of the config's largest shape (``batch_shape``),
    so ``--xla_force_host_platform_device_count`` measures data parallelism."""
    vocab = config.data.vocab_size
    rows, length = batch_shape(config)
    batch = synthetic_batch(rows, length, vocab, config.seed)
    source_lengths, target_lengths = _lengths(batch)
    mesh = sharding.build_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    rules = sharding.AxisRules.from_config(config.mesh.rules)
    state, schedule = create_state(config, vocab, vocab)
    state_shardings = sharding.state_sharding(mesh, state, rules)
    state = jax.device_put(state, state_shardings)
    batch_sharding = sharding.batch_sharding(mesh, rules)
    device_batch = sharding.global_batch(batch, batch_sharding)
    step = configured_train_step(config, schedule, mesh, rules, state_shardings, vocab)
    start = time.perf_counter()
    compiled = step.lower(state, device_batch).compile()
    return CompiledStep(
        step=compiled,
        state=state,
        batch=device_batch,
        host_batch=batch,
        mesh=mesh,
        flops=float(np.sum(train_flops(config, vocab, source_lengths, target_lengths))),
        target_tokens=int(target_lengths.sum()),
        compile_seconds=time.perf_counter() - start,
    )


def train_benchmark(
    config: ml_collections.ConfigDict,
    steps: int = 20,
    warmup: int = 3,
    peak: dict | None = None,
    yardstick: bool = True,
) -> dict:
    """Steady-state training step of ``config`` on synthetic batches of its configured shape.

    The step is ``compile_train_step``'s. Compile time is that of ``lower().compile()``; step
    time is the median of ``steps`` steps after ``warmup`` steps, each waited for.

    MFU's denominator is the better of two matmul peaks, ``peak`` (or one measured first) and
    one measured after the steps at the same sizes: a busy moment during one measurement lowers
    the peak and would raise MFU. ``yardstick=False`` leaves out the linen Transformer's step
    (a second compile, minutes long for the paper-sized models on an accelerator).
    """
    reset_peak_memory()
    peak = peak or matmul_peak(compute_dtype(config))
    compiled = compile_train_step(config)
    flops = compiled.flops
    seconds, state, metrics = time_steps(
        compiled.step, compiled.state, compiled.batch, steps, warmup
    )
    step_seconds = statistics.median(seconds)
    memory, memory_source = peak_memory_mb()
    peaks = [peak["peak_gflops"]]
    peaks.append(matmul_peak(compute_dtype(config), tuple(peak["gflops_by_size"]))["peak_gflops"])
    linen = _linen_yardstick(config, compiled, step_seconds, steps, warmup) if yardstick else {}
    return {
        "model": config.model.name,
        "device_kind": compiled.mesh.devices.flat[0].device_kind,
        "params": count_params(state.params),
        "devices": compiled.mesh.size,
        "batch": list(compiled.host_batch["target"].shape),
        "dtype": compute_dtype(config),
        "steps_timed": steps,
        "step_ms": 1e3 * step_seconds,
        "step_ms_min": 1e3 * min(seconds),
        "step_ms_max": 1e3 * max(seconds),
        "tokens_per_s": compiled.target_tokens / step_seconds,
        "flops_per_step": flops,
        "achieved_gflops": flops / step_seconds / 1e9,
        "peak_gflops": max(peaks),
        "peak_gflops_measured": [round(p, 1) for p in peaks],  # before and after the steps
        "mfu": model_flops_utilization(flops, step_seconds, max(peaks) * 1e9),
        "compile_s": compiled.compile_seconds,
        "peak_memory_mb": memory,
        "peak_memory_source": memory_source,
        "final_loss": float(metrics["loss"]),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),  # seq2seq/runtime/host_memory.py
        **linen,
    }


def mesh_benchmark(
    config: ml_collections.ConfigDict,
    shapes: list[tuple[int, int, int]],
    steps: int = 20,
    warmup: int = 3,
) -> dict:
    """``compile_train_step``'s step time on each mesh shape (data, fsdp, tensor) over all
    devices, e.g. simulated ones (``--xla_force_host_platform_device_count``), which share one
    machine's cores: they show what each layout costs in collectives, not a speed-up.

    Returns:
      {"model", "devices", "batch", "meshes": {"DxFxT": {"step_ms", "tokens_per_s",
      "compile_s", "split_arrays", "final_loss", "loop_collectives"}}}.
    """
    meshes = {}
    for data, fsdp, tensor in shapes:
        shaped = config.copy_and_resolve_references()
        shaped.mesh.data, shaped.mesh.fsdp, shaped.mesh.tensor = data, fsdp, tensor
        compiled = compile_train_step(shaped)
        seconds, state, metrics = time_steps(
            compiled.step, compiled.state, compiled.batch, steps, warmup
        )
        step_seconds = statistics.median(seconds)
        meshes[f"{data}x{fsdp}x{tensor}"] = {
            "step_ms": 1e3 * step_seconds,
            "tokens_per_s": compiled.target_tokens / step_seconds,
            "compile_s": compiled.compile_seconds,
            "split_arrays": sum(
                not leaf.sharding.is_fully_replicated for leaf in jax.tree.leaves(state.params)
            ),
            "final_loss": float(metrics["loss"]),
            # what the step runs at every iteration of its loops (a recurrence's time steps)
            "loop_collectives": len(collectives_in_loops(compiled.step.as_text())),
        }
    return {
        "model": config.model.name,
        "devices": jax.device_count(),
        "batch": list(batch_shape(config)),
        "meshes": meshes,
    }


def _linen_yardstick(
    config, compiled: CompiledStep, step_seconds: float, steps: int, warmup: int
) -> dict:
    """The linen Transformer's step time and our speed-up over it, for the families whose
    bench entry names one ({} for the others)."""
    bench = model_family(config).bench
    if bench is None or bench.speedup_over_linen is None:
        return {}
    vocab = config.data.vocab_size
    linen_seconds = _linen_step_seconds(config, vocab, compiled.host_batch, steps, warmup)
    return {
        "linen_step_ms": 1e3 * linen_seconds,
        "speedup_over_linen": linen_seconds / step_seconds,
    }


def _linen_step_seconds(config, vocab: int, batch: dict, steps: int, warmup: int) -> float:
    """Median step time of the plain Flax linen Transformer (``linen_baseline``) on ``batch``,
    on one device, timed as ``train_benchmark`` times the project's step."""
    from seq2seq.bench import linen_baseline

    step, state = linen_baseline.make_step(config, vocab, batch, config.seed)
    device_batch = {side: jnp.asarray(batch[side]) for side in ("source", "target")}
    seconds, _, _ = time_steps(step, state, device_batch, steps, warmup)
    return statistics.median(seconds)


class _NeverEnds:
    """A model whose decoder can never emit EOS, so every hypothesis runs to its length limit.

    An untrained model's first EOS comes at random and can stop a sentence early (its finished
    one-token hypothesis may outscore every long live one), so its decoding time would measure
    chance. With EOS removed, every sentence of the batch costs exactly ``max_length`` steps.
    """

    def __init__(self, model: Seq2SeqModel):
        self.model = model

    def encode(self, source, **kwargs):
        return self.model.encode(source, **kwargs)

    def start_decoding(self, encoded, max_length):
        return self.model.start_decoding(encoded, max_length)

    def reorder_cache(self, cache, rows):
        return cache_reorder(self.model)(cache, rows)

    def decode(self, encoded, target_inputs, **kwargs):
        logits, aux, cache = self.model.decode(encoded, target_inputs, **kwargs)
        return logits.at[..., EOS_ID].set(-jnp.inf), aux, cache


def _untrained_sources(config, sentences: int, source_length: int):
    """Freshly initialised parameters and random source ids: [sentences, source_length]."""
    vocab = config.data.vocab_size
    state, _ = create_state(config, vocab, vocab)
    source = synthetic_batch(sentences, source_length, vocab, config.seed)["source"]
    return state.graphdef, state.params, source


def _trained_sources(config, workdir: Path, sentences: int):
    """A trained run's parameters and the first ``sentences`` of its validation split, padded
    to the bucket width: [sentences, S]."""
    from seq2seq.data.batching import inference_batches
    from seq2seq.evaluation.restore import restore_model

    tokenizer, graphdef, params, _ = restore_model(workdir, config)
    pairs = sources.load_pairs(config.data, config.data.eval_split, seed=config.seed)[:sentences]
    ids = tokenizer.encode_source([source for source, _ in pairs])
    limit = config.decode.max_input_length
    (_, source), *_ = inference_batches(ids, sentences, config.data.bucket_width, limit)
    return graphdef, params, np.asarray(source)


def decode_benchmark(
    config: ml_collections.ConfigDict,
    *,
    beam_size: int | None = None,
    sentences: int = 32,
    source_length: int = 30,
    output_length: int = 30,
    repeats: int = 3,
    workdir: Path | None = None,
) -> dict:
    """Beam search over one batch of ``sentences`` under ``jax.jit`` (one while-loop).

    Without ``workdir`` the model is untrained, its sources are random ids of
    ``source_length`` and EOS is removed (``_NeverEnds``): every sentence decodes exactly
    ``output_length`` tokens, a fixed amount of work per sentence. With ``workdir`` the run's
    latest parameters decode the first sentences of its validation split as ``eval.py`` does
    (limit: input length + ``decode.max_extra_length``), stopping where the search stops.
    """
    beam_size = beam_size or config.decode.beam_size
    alpha = config.decode.alpha
    if workdir is None:
        graphdef, params, source = _untrained_sources(config, sentences, source_length)
        max_length, wrap = output_length, _NeverEnds
    else:
        graphdef, params, source = _trained_sources(config, workdir, sentences)
        max_length = source.shape[1] + config.decode.max_extra_length
        wrap = None

    def search(params, source):
        model = nnx.merge(graphdef, params)
        model = wrap(model) if wrap else model
        limits = output_limits(source, config.decode.max_extra_length)
        limits = jnp.full_like(limits, max_length) if wrap else limits
        tokens, _ = beam_search(
            model, source, max_length, beam_size=beam_size, alpha=alpha, limits=limits,
            min_rows=config.decode.min_rows,
        )  # fmt: skip
        return tokens

    compile_seconds, seconds, tokens = _compile_and_time(search, (params, source), repeats)
    generated = int(np.count_nonzero(tokens != PAD_ID))  # EOS counted, padding not
    return {
        "model": config.model.name,
        "trained": workdir is not None,
        "beam_size": beam_size,
        "sentences": int(source.shape[0]),
        "source_length": int(source.shape[1]),
        "max_output_length": max_length,
        "generated_tokens": generated,
        "batch_s": seconds,
        "sentences_per_s": source.shape[0] / seconds,
        "tokens_per_s": generated / seconds,
        "compile_s": compile_seconds,
    }


def _compile_and_time(function, arguments: tuple, repeats: int):
    """(seconds to compile ``function`` under jit, median seconds of a call after a warm-up
    call, its output on the host)."""
    start = time.perf_counter()
    compiled = jax.jit(function).lower(*arguments).compile()
    compile_seconds = time.perf_counter() - start
    jax.block_until_ready(compiled(*arguments))  # warm-up
    seconds = statistics.median(time_calls(lambda: compiled(*arguments), repeats))
    return compile_seconds, seconds, np.asarray(compiled(*arguments))


def _two_passes(translator, sentences: list[str]) -> tuple[float, float, list[str]]:
    """(seconds of the first pass, of the second, the second's translations)."""
    start = time.perf_counter()
    translator.translate(sentences)
    first_pass = time.perf_counter() - start
    start = time.perf_counter()
    hypotheses = translator.translate(sentences).hypotheses
    return first_pass, time.perf_counter() - start, hypotheses


def split_decode_benchmark(
    workdir: Path,
    split: str = "test",
    *,
    beam_size: int | None = None,
    engine: str = "jax",
    quantizations: tuple[str, ...] = ("float32", "int8"),
    batch_size: int | None = None,
) -> dict:
    """A trained run decodes a whole split as ``eval.py`` does (``Translator``), twice.

    The first pass compiles one search per padded source length and decodes; the second,
    timed, only decodes: ``sentences_per_s`` is the model's pace with everything compiled, and
    ``compile_s`` the first pass's extra time. The outputs' sacreBLEU shows that a faster search
    still finds the same translations. With ``engine="ctranslate2"`` the same weights are also
    exported to CTranslate2 at each of ``quantizations`` and decode the same sentences with the
    same settings: their figures sit beside JAX's, with the ratio of JAX's pace to theirs.
    ``batch_size`` replaces the run's ``eval.batch_size`` (sentences searched together) for
    every engine.
    """
    from seq2seq.data.pipeline import load_pairs
    from seq2seq.evaluation.bleu import sacrebleu_score
    from seq2seq.evaluation.translator import Translator
    from seq2seq.records.run_directory import RunDirectory

    config = RunDirectory(workdir).load_config()
    split_name = sources.resolve_split(config.data, split)
    pairs = load_pairs(config, split_name)
    sentences = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    translator = Translator.restore(workdir, beam_size=beam_size)
    if batch_size is not None:
        translator.config.eval.batch_size = batch_size
    first_pass, seconds, hypotheses = _two_passes(translator, sentences)
    result = {
        "model": config.model.name,
        "trained": True,
        "engine": engine,
        "split": split_name,
        "beam_size": translator.config.decode.beam_size,
        "sentences": len(sentences),
        "batch_size": translator.config.eval.batch_size,
        "decode_s": seconds,
        "sentences_per_s": len(sentences) / seconds,
        "compile_s": max(first_pass - seconds, 0.0),
        "bleu": sacrebleu_score(hypotheses, references)["bleu"],
    }
    if engine == "ctranslate2":
        for quantization in quantizations:
            exported = _ctranslate2_figures(
                workdir, quantization, beam_size, batch_size, pairs, hypotheses
            )
            exported[f"jax_over_ctranslate2_{quantization}"] = (
                result["sentences_per_s"] / exported[f"ctranslate2_{quantization}_sentences_per_s"]
            )
            result.update(exported)
    return result


def _ctranslate2_figures(
    workdir: Path,
    quantization: str,
    beam_size: int | None,
    batch_size: int | None,
    pairs: list[tuple[str, str]],
    jax_hypotheses: list[str],
) -> dict[str, float]:
    """The run exported to CTranslate2 at ``quantization`` decodes the sources of ``pairs``
    with the same settings: its pace, sacreBLEU and share of outputs equal to JAX's."""
    from seq2seq.evaluation.bleu import sacrebleu_score
    from seq2seq.export.run import exported_translator

    sentences = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    exported = exported_translator(workdir, quantization, beam_size=beam_size)
    if batch_size is not None:
        exported.config.eval.batch_size = batch_size
    _, seconds, hypotheses = _two_passes(exported, sentences)
    same = sum(a == b for a, b in zip(hypotheses, jax_hypotheses, strict=True))
    name = f"ctranslate2_{quantization}"
    return {
        f"{name}_sentences_per_s": len(sentences) / seconds,
        f"{name}_bleu": sacrebleu_score(hypotheses, references)["bleu"],
        f"{name}_same_outputs": same / len(sentences),
    }


def _draw(batches, count: int) -> dict[str, float]:
    """Draws ``count`` batches after one warm-up batch; real tokens (both sides, target)."""
    iterator = iter(batches)
    next(iterator)
    target = source = 0
    start = time.perf_counter()
    for _ in range(count):
        batch = next(iterator)
        for side in ("source", "target"):
            segments = batch.get(f"{side}_segments")
            real = np.count_nonzero(batch[side] if segments is None else segments)
            source, target = (
                (source + real, target) if side == "source" else (source, target + real)
            )
    return {"seconds": time.perf_counter() - start, "source": source, "target": target}


def data_benchmark(config: ml_collections.ConfigDict, batches: int = 300) -> dict:
    """Input pipeline throughput of the config's training data, in real target tokens/s.

    ``tokens_per_s`` is the rate of tokenizing the training corpus and then batching it (and
    packing, when ``data.pack``), one after the other: the cost of a first epoch per real
    target token, what the trainer's data costs before a step can run. Training the tokenizer
    happens once per run and is reported apart (``tokenizer_training_s``).
    """
    data = config.data
    start = time.perf_counter()
    corpus = sources.open_corpus(
        data, data.train_split, seed=config.seed, limit=data.max_train_examples
    )
    with tempfile.TemporaryDirectory() as directory:
        read = time.perf_counter()
        tokenizer = build_tokenizer(config, Path(directory), corpus)
        trained = time.perf_counter()
        encoded = encode_corpus(corpus, tokenizer)
        encode_seconds = time.perf_counter() - trained
    indices, _ = filter_pairs(
        encoded.source_lengths, encoded.target_lengths, data.max_length, data.max_length_ratio
    )
    corpus_target_tokens = int(encoded.target_lengths.sum())
    tokenize_rate = corpus_target_tokens / encode_seconds
    drawn = _draw(make_batches(config, encoded, indices), batches)
    batch_rate = drawn["target"] / drawn["seconds"]
    return {
        "data_source": data.source,
        "pack": bool(data.pack),
        "pairs": len(encoded),
        "kept_pairs": len(indices),
        "read_s": read - start,
        "tokenizer_training_s": trained - read,
        "tokenize_tokens_per_s": tokenize_rate,
        "batch_tokens_per_s": batch_rate,
        "batch_both_sides_tokens_per_s": (drawn["source"] + drawn["target"]) / drawn["seconds"],
        "batches_per_s": batches / drawn["seconds"],
        "tokens_per_s": 1.0 / (1.0 / tokenize_rate + 1.0 / batch_rate),
    }
