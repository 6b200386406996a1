"""seq2seq.bench: the FLOP formulas against hand counts, MFU, and the command's JSON line."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from seq2seq.bench import measure
from seq2seq.config import default_config
from seq2seq.models import train_flops
from tests.conftest import REPO, SHRINK, subprocess_env


def _tiny_transformer():
    config = default_config()
    t = config.model.transformer
    t.d_model, t.num_heads, t.d_k, t.d_v, t.d_ff = 4, 1, 4, 4, 8
    t.encoder_layers = t.decoder_layers = 1
    return config


def test_transformer_flops_match_a_hand_count():
    # d_model 4, 1 head of d_k = d_v = 4, d_ff 8, one layer each side, vocabulary 10; a pair of
    # 2 source and 3 target tokens. Multiply-adds of every matrix product, one by one (masked
    # attention is computed densely, so the decoder's self-attention counts all 3 x 3 scores):
    encoder = (
        2 * 4 * 4 * 3  # Q, K, V projections of 2 tokens
        + 2 * 2 * 4  # Q K^T: 2 x 2 scores of width 4
        + 2 * 2 * 4  # weights x V
        + 2 * 4 * 4  # W^O
        + 2 * 4 * 8  # FFN W_1
        + 2 * 8 * 4  # FFN W_2
    )  # 288
    decoder = (
        3 * 4 * 4 * 3  # self-attention Q, K, V of 3 tokens
        + 3 * 3 * 4  # Q K^T
        + 3 * 3 * 4  # weights x V
        + 3 * 4 * 4  # W^O
        + 3 * 4 * 4  # cross-attention Q of 3 target tokens
        + 2 * 4 * 4 * 2  # cross-attention K and V of the 2 source tokens
        + 3 * 2 * 4  # Q K^T: 3 x 2
        + 3 * 2 * 4  # weights x V
        + 3 * 4 * 4  # W^O
        + 3 * 4 * 8  # FFN W_1
        + 3 * 8 * 4  # FFN W_2
        + 3 * 4 * 10  # pre-softmax projection onto the vocabulary
    )  # 784
    assert encoder + decoder == 1072
    forward = 2 * (encoder + decoder)  # two FLOPs per multiply-add
    assert train_flops(_tiny_transformer(), 10, 2, 3) == 3 * forward  # forward + 2x backward


def test_rnnsearch_flops_match_a_hand_count():
    config = default_config()
    config.model.name = "rnnsearch"
    r = config.model.rnnsearch
    # m = 2 (embedding), n = 3 per encoder direction, decoder state 4, alignment 5, maxout 2,
    # vocabulary 7; a pair of 2 source and 3 target tokens.
    r.embedding_size, r.encoder_hidden_size, r.decoder_hidden_size = 2, 3, 4
    r.alignment_size, r.maxout_size = 5, 2
    encoder_direction = 2 * (2 * 9) + 2 * (3 * 3 + 3 * 6)  # W [z r h] x_j, then [U_z U_r] h, U h
    once_per_sentence = 2 * encoder_direction + 3 * 4 + 2 * 6 * 5  # both directions, W_s, U_a h_j
    per_target_token = (
        4 * 5  # W_a s_{i-1}
        + 2 * 5  # v_a^T tanh(.) at the 2 source positions
        + 2 * 6  # c_i = sum_j alpha_ij h_j, annotations of width 2n = 6
        + 2 * 12  # decoder GRU: [W W_z W_r] E y_{i-1}
        + 6 * 12  # [C C_z C_r] c_i
        + 4 * 8
        + 4 * 4  # [U_z U_r] s_{i-1}, U (r * s_{i-1})
        + 4 * 4
        + 2 * 4
        + 6 * 4  # deep output U_o s, V_o E y, C_o c: 2l = 4 maxout inputs
        + 2 * 7  # W_o t_i onto the vocabulary
    )  # 248
    assert once_per_sentence + 3 * per_target_token == 996
    forward = 2 * (once_per_sentence + 3 * per_target_token)
    assert train_flops(config, 7, 2, 3) == 3 * forward

    # Luong's scorings, same sizes: "general" projects the annotations to the decoder's width
    # (W h_j, 6 -> 4, once per source word) and scores s . W h_j; "dot" (needs 2n = n_dec: here
    # n = 2) scores s . h_j with no projection at all.
    r.attention = "general"
    general = (
        once_per_sentence - 2 * 6 * 5 + 2 * 6 * 4 + 3 * (per_target_token - 4 * 5 - 2 * 5 + 2 * 4)
    )
    assert train_flops(config, 7, 2, 3) == 3 * 2 * general
    r.attention = "dot"
    r.encoder_hidden_size = 2
    dot_encoder_direction = 2 * (2 * 6) + 2 * (2 * 2 + 2 * 4)
    dot_sentence = 2 * dot_encoder_direction + 2 * 4
    dot_per_token = (
        2 * 4  # s . h_j at the 2 source positions
        + 2 * 4  # c_i, annotations of width 4
        + 2 * 12 + 4 * 12 + 4 * 8 + 4 * 4  # GRU: E y, C c_i, [U_z U_r] s, U (r * s)
        + 4 * 4 + 2 * 4 + 4 * 4  # deep output U_o s, V_o E y, C_o c
        + 2 * 7  # W_o
    )  # fmt: skip
    assert train_flops(config, 7, 2, 3) == 3 * 2 * (dot_sentence + 3 * dot_per_token)

    # RNNencdec (n = 2, 2n = 4): no attention; once per sentence c = tanh(V h_N) (4 x 4),
    # s_0 = tanh(V' c) (4 x 4), and the context's share of the GRU (C: 4 x 12) and of the deep
    # output (C_o: 4 x 4), which stay fixed over the target.
    r.attention = "none"
    encdec_sentence = 2 * dot_encoder_direction + 4 * 4 + 4 * 4 + 4 * 12 + 4 * 4
    encdec_per_token = 2 * 12 + 4 * 8 + 4 * 4 + 4 * 4 + 2 * 4 + 2 * 7  # no C c, C_o c per token
    assert train_flops(config, 7, 2, 3) == 3 * 2 * (encdec_sentence + 3 * encdec_per_token)

    # A scoring added to the model but not here was counted as dot's, silently.
    r.attention = "scaled_dot"
    with pytest.raises(ValueError, match="no FLOP count for RNNsearch attention 'scaled_dot'"):
        train_flops(config, 7, 2, 3)


def test_flops_of_a_batch_are_the_sum_over_its_pairs():
    config = _tiny_transformer()
    each = [train_flops(config, 10, s, t) for s, t in [(2, 3), (5, 1), (7, 7)]]
    batch = train_flops(config, 10, np.array([2, 5, 7]), np.array([3, 1, 7]))
    assert np.sum(batch) == sum(each)


def test_mfu_is_achieved_flops_per_second_over_the_peak():
    # 6 GFLOP in 0.5 s is 12 GFLOP/s: half of a 24 GFLOP/s peak.
    assert measure.model_flops_utilization(6e9, 0.5, 24e9) == pytest.approx(0.5)


def test_untrained_decode_runs_every_sentence_to_the_output_length():
    from tests.conftest import tiny_config

    config = tiny_config("transformer")
    config.model.transformer.encoder_layers = config.model.transformer.decoder_layers = 1
    config.data.vocab_size = 50
    result = measure.decode_benchmark(
        config, beam_size=2, sentences=3, source_length=5, output_length=6, repeats=1
    )
    assert result["generated_tokens"] == 3 * 6  # EOS removed: no sentence stops early
    assert result["sentences_per_s"] == pytest.approx(3 / result["batch_s"])


TINY_TRAIN = [
    "--config=configs/bench_small.py",
    *SHRINK["transformer"],
    "--config.data.vocab_size=100",
    "--config.data.sentences_per_batch=4",
    "--config.data.max_length=8",
    "--config.data.synthetic_lengths=grammar",
]


def test_bench_train_json_is_one_line_with_positive_figures():
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench", "train", *TINY_TRAIN]
        + ["--steps=2", "--warmup=1", "--json", "--persistent_cache", "--matmul_sizes=256"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    figures = json.loads(lines[0])
    for key in ("step_ms", "tokens_per_s", "mfu", "peak_gflops", "compile_s", "peak_memory_mb"):
        assert figures[key] > 0, key
    assert figures["batch"] == [4, 8]
    assert figures["tokens_per_s"] == pytest.approx(4 * 8 / (figures["step_ms"] / 1e3))
    achieved = figures["flops_per_step"] / (figures["step_ms"] / 1e3)
    assert figures["mfu"] == pytest.approx(achieved / (figures["peak_gflops"] * 1e9))
    before, after = figures["peak_gflops_measured"]  # the better of the two is the denominator
    assert figures["peak_gflops"] == pytest.approx(max(before, after), abs=0.05)
    assert min(before, after) > 0
    assert figures["speedup_over_linen"] == pytest.approx(
        figures["linen_step_ms"] / figures["step_ms"]
    )


def test_the_linen_yardstick_is_the_same_transformer():
    # Same sizes and layers as the project's model: the parameter counts differ by exactly the
    # biases linen's attention adds (query, key, value and output: 4 x d_model per attention;
    # one per encoder layer, two per decoder layer); and its step learns a repeated batch.
    from seq2seq.bench import linen_baseline
    from seq2seq.training.trainer import count_params, create_state
    from tests.conftest import tiny_config

    config = tiny_config("transformer")
    config.model.transformer.norm = "pre"
    t = config.model.transformer
    batch = measure.synthetic_batch(4, 8, 50)
    step, state = linen_baseline.make_step(config, 50, batch)
    ours, _ = create_state(config, 50, 50)
    attentions = t.encoder_layers + 2 * t.decoder_layers
    linen_params = sum(x.size for x in jax.tree.leaves(state["params"]))
    assert linen_params == count_params(ours.params) + 4 * t.d_model * attentions
    losses = []
    for _ in range(30):
        state, loss = step(state, batch)
        losses.append(float(loss))
    assert losses[-1] < 0.8 * losses[0]


def test_bench_without_a_command_is_one_error_line():
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench", "--json"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: name one command of matmul, train, decode, data, profile, all, e.g. `bench train`"
    ]


def test_bench_train_on_each_mesh_shape_of_two_simulated_devices():
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench", "train", *TINY_TRAIN]
        + ["--steps=2", "--warmup=1", "--json", "--persistent_cache", "--meshes=2x1x1,1x1x2"],
        cwd=REPO,
        env=subprocess_env(2),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["devices"] == 2 and list(figures["meshes"]) == ["2x1x1", "1x1x2"]
    data, tensor = figures["meshes"]["2x1x1"], figures["meshes"]["1x1x2"]
    for mesh in (data, tensor):
        assert mesh["tokens_per_s"] == pytest.approx(4 * 8 / (mesh["step_ms"] / 1e3))
    assert data["split_arrays"] == 0 < tensor["split_arrays"]  # data parallelism splits none
    assert tensor["final_loss"] == pytest.approx(data["final_loss"], rel=1e-5)
    # The Transformer has no recurrence: its step runs no collective per loop iteration (the
    # RNNsearch counts: tests/test_mesh.py).
    assert data["loop_collectives"] == tensor["loop_collectives"] == 0


@pytest.mark.parametrize(
    ("meshes", "said"),
    [
        ("2x2", "--meshes '2x2': give DATAxFSDPxTENSOR, three positive integers, e.g. 2x2x2"),
        (  # it answered "set mesh.data=-1", a config key that --meshes does not take
            "1x1x1,3x1x1",
            "--meshes 3x1x1 makes 3 devices, but the job has 1; give DATAxFSDPxTENSOR whose "
            "product is 1, e.g. 1x1x1 (XLA_FLAGS=--xla_force_host_platform_device_count=N "
            "simulates N)",
        ),
    ],
)
def test_bench_meshes_that_do_not_parse_or_fit_are_one_error_line(meshes, said):
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench", "train", *TINY_TRAIN, f"--meshes={meshes}"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"error: {said}"


def test_targets_are_graded_only_on_the_settings_they_are_stated_for():
    """A 4-sentence decode of 8 tokens on any config was graded "met" against the 32 x 30
    target of the bench config, and a shrunk run "NOT met" against its MFU target."""
    from seq2seq.bench.__main__ import (
        _decode_targets,
        _is_bench_config,
        _standard_decode,
        _train_targets,
    )
    from seq2seq.config import load_config_file

    shipped = load_config_file(REPO / "configs" / "bench_small.py")
    assert _is_bench_config(shipped)
    shipped.model.transformer.d_ff = 512
    assert not _is_bench_config(shipped)
    assert not _is_bench_config(load_config_file(REPO / "configs" / "quickstart_transformer.py"))
    standard = {"model": "transformer", "trained": False, "beam_size": 4, "sentences": 32,
                "source_length": 30, "max_output_length": 30, "sentences_per_s": 39.0}  # fmt: skip
    assert _standard_decode(standard)
    assert _decode_targets(standard)["sentences_per_s"] == ">= 40: NOT met (beam 4)"
    for change in ({"sentences": 4}, {"source_length": 8}, {"trained": True}):
        assert not _standard_decode({**standard, **change}), change
    other = _decode_targets(standard, standard=False)["sentences_per_s"]
    assert other.startswith("(no target") and "met" not in other
    trained = {"model": "transformer", "mfu": 0.7, "speedup_over_linen": 2.0}
    assert _train_targets(trained) == {"mfu": ">= 0.6: met", "speedup_over_linen": ">= 1.3: met"}
    assert "met" not in str(_train_targets(trained, standard=False))
