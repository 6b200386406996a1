"""The report's figures: saved PNGs that show exactly the data they were given."""

import numpy as np
import pytest
from matplotlib.image import imread

from seq2seq.report import figures
from seq2seq.report.alignment import Alignment


def _check_png(path, figure):
    """A real, decodable image of the figure's size, not an empty file."""
    assert path.stat().st_size > 10_000
    height, width, channels = imread(path).shape
    expected_width, expected_height = figure.get_size_inches() * figures.DPI
    assert abs(width - expected_width) <= 1 and abs(height - expected_height) <= 1
    assert channels in (3, 4)


def _alignment(layers, heads, source_length, target_length, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.random((layers, heads, target_length, source_length))
    weights /= weights.sum(-1, keepdims=True)  # each row a distribution over the source
    return Alignment(
        source_pieces=[f"▁src{i}" for i in range(source_length - 1)] + ["</s>"],
        target_pieces=[f"▁tgt{i}" for i in range(target_length - 1)] + ["</s>"],
        weights=weights,
    )


def _labels(tick_labels):
    return [label.get_text() for label in tick_labels]


def _validation(step, bleu, loss, **extra):
    return {"kind": "validation", "step": step, "bleu": bleu, "loss": loss, "perplexity": 9.0,
            **extra}  # fmt: skip


RUNS = {
    "with x": [
        {"kind": "train", "step": 50, "loss": 6.0, "elapsed_seconds": 30.0, "train_flops": 1e12},
        _validation(200, 20.0, 3.0, elapsed_seconds=240.0, train_flops=4e12),
        _validation(100, 10.0, 4.0, elapsed_seconds=120.0, train_flops=2e12),
        _validation(300, 99.0, 0.1),  # logged before the field existed: skipped
    ],
    "flops from zero": [
        _validation(0, 1.0, 9.0, elapsed_seconds=0.0, train_flops=0.0),
        _validation(10, 5.0, 5.0, elapsed_seconds=60.0, train_flops=1e13),
    ],
    "train records only": [
        {"kind": "train", "step": 10, "loss": 5.0, "elapsed_seconds": 9.0, "train_flops": 1e11},
    ],
    "validation without x": [_validation(10, 30.0, 2.0)],
}


def test_training_curves_against_time_have_one_line_per_run_with_validation(tmp_path):
    path = tmp_path / "time.png"
    figure = figures.plot_training_curves(RUNS, path, x="elapsed_seconds")
    _check_png(path, figure)
    bleu_axes, loss_axes = figure.axes
    expected_values = {bleu_axes: ([10.0, 20.0], [1.0, 5.0]), loss_axes: ([4.0, 3.0], [9.0, 5.0])}
    for ax, expected in expected_values.items():
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == ["with x", "flops from zero"]
        np.testing.assert_allclose(lines["with x"].get_xdata(), [2.0, 4.0])  # minutes, in order
        np.testing.assert_allclose(lines["with x"].get_ydata(), expected[0])
        np.testing.assert_allclose(lines["flops from zero"].get_xdata(), [0.0, 1.0])
        np.testing.assert_allclose(lines["flops from zero"].get_ydata(), expected[1])
    assert "minutes" in bleu_axes.get_xlabel()
    assert [text.get_text() for text in bleu_axes.get_legend().get_texts()] == [
        "with x",
        "flops from zero",
    ]


def test_training_curves_against_flops_use_a_log_axis_without_zero(tmp_path):
    figure = figures.plot_training_curves(RUNS, tmp_path / "flops.png", x="train_flops")
    bleu_axes = figure.axes[0]
    assert bleu_axes.get_xscale() == "log"
    lines = {line.get_label(): line for line in bleu_axes.get_lines()}
    np.testing.assert_allclose(lines["with x"].get_xdata(), [2e12, 4e12])
    np.testing.assert_allclose(lines["flops from zero"].get_xdata(), [1e13])  # 0 has no place
    np.testing.assert_allclose(lines["flops from zero"].get_ydata(), [5.0])


def test_training_curves_name_a_wrong_axis(tmp_path):
    with pytest.raises(ValueError, match="train_flops"):
        figures.plot_training_curves(RUNS, tmp_path / "x.png", x="step")
    assert not (tmp_path / "x.png").exists()


def _buckets(*rows):
    return {
        "bleu": 30.0,
        "bleu_by_source_length": [
            {"min_words": low, "max_words": high, "n": n, "bleu": bleu}
            for low, high, n, bleu in rows
        ],
    }


RESULTS = {
    "rnnsearch": _buckets((1, 10, 40, 31.5), (11, 20, 25, 27.25), (31, 40, 3, 12.0)),
    "transformer": _buckets((1, 10, 40, 35.0), (11, 20, 25, 33.5)),
    "failed": {"error": "NaN loss at step 40"},
}


def test_bleu_by_length_draws_each_runs_buckets(tmp_path):
    path = tmp_path / "length.png"
    errors = {"rnnsearch": [0.5, 1.0, 2.0]}
    figure = figures.plot_bleu_by_length(RESULTS, path, errors=errors)
    _check_png(path, figure)
    (ax,) = figure.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["rnnsearch", "transformer"]  # the failed run has no buckets
    np.testing.assert_allclose(lines["rnnsearch"].get_xdata(), [5.5, 15.5, 35.5])
    np.testing.assert_allclose(lines["rnnsearch"].get_ydata(), [31.5, 27.25, 12.0])
    np.testing.assert_allclose(lines["transformer"].get_ydata(), [35.0, 33.5])
    assert _labels(ax.get_xticklabels()) == ["1–10", "11–20", "31–40"]
    (bars,) = ax.collections  # the rnnsearch error bars: 31.5 +- 0.5, ...
    segments = [segment[:, 1].tolist() for segment in bars.get_segments()]
    assert segments == [[31.0, 32.0], [26.25, 28.25], [10.0, 14.0]]


def test_bleu_by_length_refuses_errors_of_another_length(tmp_path):
    with pytest.raises(ValueError, match="one value per bucket"):
        figures.plot_bleu_by_length(RESULTS, tmp_path / "x.png", errors={"transformer": [1.0]})


def test_rnn_heatmap_carries_the_tokens_and_the_weights(tmp_path):
    alignment = _alignment(1, 1, source_length=7, target_length=5)
    alignment.source_pieces[2] = "$\\notacommand$"  # drawn verbatim, not read as mathematics
    path = tmp_path / "rnn.png"
    figure = figures.plot_rnn_alignment(alignment, path, "rnnsearch")
    _check_png(path, figure)
    (ax,) = figure.axes
    assert _labels(ax.get_xticklabels()) == alignment.source_pieces
    assert _labels(ax.get_yticklabels()) == alignment.target_pieces
    np.testing.assert_array_equal(ax.images[0].get_array(), alignment.weights[0, 0])
    assert ax.get_title() == "rnnsearch"


def test_rnn_heatmap_refuses_several_heads(tmp_path):
    with pytest.raises(ValueError, match="plot_transformer_attention"):
        figures.plot_rnn_alignment(_alignment(1, 2, 4, 4), tmp_path / "x.png")


def test_heatmaps_grow_with_the_sentence(tmp_path):
    short = figures.plot_rnn_alignment(_alignment(1, 1, 6, 5), tmp_path / "short.png")
    long = figures.plot_rnn_alignment(_alignment(1, 1, 30, 28), tmp_path / "long.png")
    assert all(long.get_size_inches() > short.get_size_inches() * 1.5)
    (ax,) = long.axes
    assert len(ax.get_xticklabels()) == 30  # every piece named, even at 30


def test_transformer_grid_has_every_head_and_the_head_mean_per_layer(tmp_path):
    alignment = _alignment(2, 3, source_length=6, target_length=4)
    path = tmp_path / "grid.png"
    figure = figures.plot_transformer_attention(alignment, path, "transformer")
    _check_png(path, figure)
    assert len(figure.axes) == 2 * (3 + 1)
    for index, ax in enumerate(figure.axes):
        layer, column = divmod(index, 4)
        drawn = ax.images[0].get_array()
        if column < 3:
            expected = alignment.weights[layer, column]
            assert ax.get_title() == f"layer {layer + 1}, head {column + 1}"
        else:
            heads = alignment.weights[layer]
            expected = (heads[0] + heads[1] + heads[2]) / 3
            assert ax.get_title() == f"layer {layer + 1}, mean of heads"
        np.testing.assert_allclose(drawn, expected, rtol=1e-6)
        # Tokens name the top row's columns and the left column's rows; inner panels align.
        assert _labels(ax.get_xticklabels()) == (alignment.source_pieces if layer == 0 else [])
        assert _labels(ax.get_yticklabels()) == (alignment.target_pieces if column == 0 else [])
        assert len(ax.get_xticks()) == 6 and len(ax.get_yticks()) == 4
    assert figure.get_suptitle() == "transformer"


def test_alignment_figures_pick_the_form_by_the_weights_shape(tmp_path, monkeypatch):
    """One heatmap for one layer and head, the grid otherwise, whatever the model is called."""
    given = {"ein Hund": _alignment(1, 1, 3, 3), "zwei Katzen": _alignment(2, 2, 3, 4)}
    monkeypatch.setattr(
        figures.alignment_lib, "cross_attention", lambda _, sentence, **__: given[sentence]
    )
    drawn = []
    for name in ("plot_rnn_alignment", "plot_transformer_attention"):
        original = getattr(figures, name)

        def spy(alignment, path, title, name=name, original=original):
            drawn.append((name, path.name, title))
            return original(alignment, path, title)

        monkeypatch.setattr(figures, name, spy)
    paths = figures.alignment_figures("translator", list(given), tmp_path / "out", "transformer")
    assert drawn == [
        ("plot_rnn_alignment", "transformer_alignment_1.png", "transformer: sentence 1"),
        ("plot_transformer_attention", "transformer_alignment_2.png", "transformer: sentence 2"),
    ]
    assert paths == [tmp_path / "out" / name for _, name, _ in drawn]
    assert all(path.stat().st_size > 10_000 for path in paths)


def test_alignment_file_names_are_safe_for_any_label(tmp_path, monkeypatch):
    monkeypatch.setattr(
        figures.alignment_lib, "cross_attention", lambda *_, **__: _alignment(1, 1, 3, 3)
    )
    (path,) = figures.alignment_figures(None, ["a"], tmp_path, "rnn search/dot (seed 1)")
    assert path.parent == tmp_path
    assert path.name == "rnn_search_dot_seed_1_alignment_1.png"


def test_a_log_axis_within_one_decade_is_still_labelled():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from seq2seq.compare.frontier_figure import _log_axis

    def labelled(xs):
        figure = Figure()
        ax = figure.add_subplot()
        ax.scatter(xs, [1.0] * len(xs))
        _log_axis(ax)
        FigureCanvasAgg(figure).draw()  # labels are made when drawn
        low, high = ax.get_xlim()
        ticks = ax.get_xticklabels() + ax.get_xticklabels(minor=True)
        shown = [t for t in ticks if low <= t.get_position()[0] <= high and t.get_text()]
        return ax.get_xscale(), len(shown)

    # The en->de records end between 1.56e14 and 2.14e14 FLOPs: no decade inside, so a log
    # axis would show no number at all; a linear one shows a few.
    scale, shown = labelled([1.56e14, 1.73e14, 2.14e14])
    assert scale == "linear" and 2 <= shown <= 5
    assert labelled([3e12, 4e13, 5e14]) == ("log", 2)  # 1e13 and 1e14, the decades alone
