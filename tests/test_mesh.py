"""Logical axis names and the rule table: every parameter named, any mesh trains as one device,
shardings as the table says, and checkpoints restore onto any mesh."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from seq2seq.config import ConfigError, default_config, load_saved, validate
from seq2seq.logical_axes import names_of, partition_spec
from seq2seq.models import build_model
from seq2seq.training.sharding import (
    MESH_AXES,
    AxisRules,
    batch_sharding,
    data_parallel_size,
    default_rules,
)
from tests.conftest import REPO, subprocess_env, tiny_config
from tests.mesh_worker import SAVE_STEP, STEPS

VARIANTS = {
    "transformer": {},
    "transformer, untied, learned positions, pre-LN": {
        "model.transformer.tie_output": False,
        "model.transformer.share_embeddings": False,
        "model.transformer.positions": "learned",
        "model.transformer.norm": "pre",
    },
    "rnnsearch": {"model.name": "rnnsearch"},
    "rnnsearch, general": {"model.name": "rnnsearch", "model.rnnsearch.attention": "general"},
    "rnnencdec": {"model.name": "rnnsearch", "model.rnnsearch.attention": "none"},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_parameter_names_each_dimension_with_a_rule(variant):
    config = tiny_config()
    for key, value in VARIANTS[variant].items():
        node = config
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    rules = AxisRules.from_config(config.mesh.rules).mesh_axes
    model = build_model(config, 40, 40, seed=0)
    parameters = jax.tree_util.tree_leaves_with_path(
        nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    assert parameters
    for path, parameter in parameters:
        names = names_of(parameter)
        where = jax.tree_util.keystr(path)
        assert names is not None, f"{where} has no logical axis names"
        assert len(names) == parameter.get_value().ndim, f"{where}: {names}"
        assert all(name in rules for name in names), f"{where}: {names} not all in the table"


RULES = {"batch": ("data", "fsdp"), "embed": ("fsdp",), "mlp": ("tensor",), "kv": ()}


def test_partition_spec_follows_the_table_and_drops_what_cannot_apply():
    mesh = {"data": 2, "fsdp": 4, "tensor": 2}
    assert partition_spec(("embed", "mlp"), (8, 6), mesh, RULES) == P("fsdp", "tensor")
    # 6 is not a multiple of fsdp=4: that dimension stays whole.
    assert partition_spec(("embed", "mlp"), (6, 6), mesh, RULES) == P(None, "tensor")
    # An axis splits one dimension at most: the first takes it.
    assert partition_spec(("embed", "embed"), (8, 8), mesh, RULES) == P("fsdp", None)
    # Several axes per name, in order; the last ones go when their product does not divide.
    assert partition_spec(("batch", "kv"), (16, 3), mesh, RULES) == P(("data", "fsdp"), None)
    assert partition_spec(("batch", None), (6, 3), mesh, RULES) == P("data", None)
    # Axes of one device split nothing, and ``skip`` leaves an axis out.
    assert partition_spec(("mlp",), (8,), {"tensor": 1}, RULES) == P(None)
    assert partition_spec(("embed", "mlp"), (8, 8), mesh, RULES, frozenset({"fsdp"})) == P(
        None, "tensor"
    )
    with pytest.raises(ValueError, match="no rule; add config.mesh.rules.heads"):
        partition_spec(("heads",), (8,), mesh, RULES)


def test_the_dimensions_a_mesh_axis_does_not_divide_are_named():
    """``mesh.tensor=8`` over 4 heads trained with attention whole on every device, and the log
    said only "39 arrays split"; the trainer now names such dimensions, from this record."""
    mesh = {"data": 2, "fsdp": 4, "tensor": 2}
    undivided = {}
    partition_spec(("embed", "mlp"), (6, 6), mesh, RULES, undivided=undivided)
    partition_spec(("batch", "kv"), (6, 3), mesh, RULES, undivided=undivided)
    partition_spec(("embed", "mlp"), (8, 8), mesh, RULES, frozenset({"fsdp"}), undivided)
    assert undivided == {"embed": (6, ("fsdp",)), "batch": (6, ("fsdp",))}  # skip is no loss


def test_the_trainer_names_the_heads_tensor_leaves_whole_and_no_small_parameter():
    """What the trainer's ``mesh:`` warning lists: 4 heads over tensor 8, not the parameters
    under ``fsdp_min_size``, which fsdp leaves whole on any mesh (the first version named
    them, and told the user that other mesh sizes would split them)."""
    from seq2seq.training.sharding import undivided_dimensions

    config = tiny_config("transformer")
    config.model.transformer.num_heads = 4
    state = nnx.state(build_model(config, 40, 40, seed=0), nnx.Param)
    rules = AxisRules.from_config(config.mesh.rules)
    on = lambda *shape: jax.sharding.AbstractMesh(shape, MESH_AXES)  # noqa: E731
    assert undivided_dimensions(on(1, 3, 1), state, rules) == {}  # every parameter is small
    assert undivided_dimensions(on(1, 1, 8), state, rules)["heads"] == (4, ("tensor",))
    rules = dataclasses.replace(rules, fsdp_min_size=0)  # now fsdp splits them, where it divides
    assert undivided_dimensions(on(1, 3, 1), state, rules)["embed"][1] == ("fsdp",)


def test_the_batch_is_split_as_the_tables_batch_rule_says():
    mesh = jax.sharding.AbstractMesh((2, 4, 2), MESH_AXES)
    assert batch_sharding(mesh, default_rules()).spec == P(("data", "fsdp"))
    assert data_parallel_size(mesh, default_rules()) == 8
    config = default_config()
    config.mesh.rules.batch = "data"  # FSDP devices then share their sentences
    rules = AxisRules.from_config(config.mesh.rules)
    assert batch_sharding(mesh, rules).spec == P("data")
    assert data_parallel_size(mesh, rules) == 2


def test_a_rule_naming_an_unknown_mesh_axis_is_refused():
    config = default_config()
    config.mesh.rules.heads = "tensor,model"
    with pytest.raises(ConfigError, match="rules.heads='tensor,model' names model"):
        validate(config)


def test_a_saved_config_with_the_old_threshold_key_loads_into_the_table(tmp_path):
    saved = json.loads(default_config().to_json_best_effort())
    del saved["mesh"]["rules"]
    saved["mesh"]["fsdp_min_size"] = 512
    path = tmp_path / "config.json"
    path.write_text(json.dumps(saved))
    assert load_saved(path).mesh.rules.fsdp_min_size == 512


# -- 8 simulated devices: one subprocess (tests/mesh_worker.py), one compile per mesh -----------

# Hand-written from the default table (batch: data,fsdp; embed, hidden: fsdp; heads, mlp, vocab,
# alignment: tensor), with fsdp_min_size=256 and the worker's tiny sizes (Transformer d_model 32,
# d_ff 64, 8 heads of 4; RNNsearch m 16, n 24, n' 16, l 12; vocabulary 64).
EXPECTED = {
    "transformer": {
        "source_embedding/embedding": {  # [64, 32]
            "8,1,1": [None, None],
            "2,4,1": [None, "fsdp"],
            "2,2,2": ["tensor", "fsdp"],
            "1,1,8": ["tensor", None],
        },
        "encoder_layers/0/feed_forward/w_1/kernel": {  # [32, 64]
            "8,1,1": [None, None],
            "2,4,1": ["fsdp", None],
            "2,2,2": ["fsdp", "tensor"],
            "1,1,8": [None, "tensor"],
        },
        "encoder_layers/0/feed_forward/w_1/bias": {  # [64]: below the fsdp threshold only
            "2,4,1": [None],
            "2,2,2": ["tensor"],
            "1,1,8": ["tensor"],
        },
        "decoder_layers/0/feed_forward/w_2/kernel": {  # [64, 32], row-parallel
            "2,2,2": ["tensor", "fsdp"],
            "1,1,8": ["tensor", None],
        },
        "decoder_layers/0/cross_attention/w_query": {  # [32, 8, 4]
            "2,4,1": ["fsdp", None, None],
            "2,2,2": ["fsdp", "tensor", None],
            "1,1,8": [None, "tensor", None],
        },
        "decoder_layers/0/cross_attention/w_output": {  # [8, 4, 32]
            "2,2,2": ["tensor", None, "fsdp"],
            "1,1,8": ["tensor", None, None],
        },
        "encoder_layers/1/attention_sublayer/norm/scale": {  # [32]: small, replicated
            "2,4,1": [None],
            "2,2,2": [None],
        },
    },
    "rnnsearch": {
        "source_embedding/embedding": {  # [64, 16]
            "2,4,1": [None, "fsdp"],
            "2,2,2": ["tensor", "fsdp"],
            "1,1,8": ["tensor", None],
        },
        "forward_encoder/u_gates/kernel": {  # [24, 48]: recurrent, never over tensor
            "2,4,1": ["fsdp", None],
            "2,2,2": ["fsdp", None],
            "1,1,8": [None, None],
        },
        "attention/u_a/kernel": {  # [48, 16]
            "2,4,1": ["fsdp", None],
            "2,2,2": ["fsdp", "tensor"],
            "1,1,8": [None, "tensor"],
        },
        "attention/v_a": {"2,2,2": ["tensor"], "1,1,8": ["tensor"]},  # [16]
        "w_o/kernel": {"2,4,1": [None, None], "2,2,2": [None, "tensor"]},  # [12, 64]
    },
}


@pytest.fixture(scope="module")
def mesh_report() -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "tests.mesh_worker"],
        cwd=REPO, capture_output=True, text=True, timeout=1500, env=subprocess_env(8),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _padded(spec: list) -> list:
    return spec + [None] * 3


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_every_mesh_trains_as_one_device_with_the_tables_shardings(mesh_report, model_name):
    report = mesh_report[model_name]
    one = report["losses"]["one"]
    assert len(one) == STEPS and one[-1] < one[0]
    for mesh, losses in report["losses"].items():
        np.testing.assert_allclose(losses, one, rtol=1e-5, err_msg=f"mesh {mesh}")
    for parameter, by_mesh in EXPECTED[model_name].items():
        for mesh, expected in by_mesh.items():
            actual = report["specs"][mesh][parameter]
            assert _padded(actual)[: len(expected)] == expected, (mesh, parameter, actual)
    for mesh, specs in report["specs"].items():
        if mesh == "8,1,1":  # data parallelism alone: every parameter whole on every device
            assert all(all(axis is None for axis in spec) for spec in specs.values()), specs


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_a_checkpoint_saved_on_fsdp_4_resumes_on_any_mesh(mesh_report, model_name):
    """Saved at step 6 on data=2, fsdp=4; resumed on one device and on data=2, tensor=2."""
    report = mesh_report[model_name]
    continued = report["losses"]["2,4,1"][SAVE_STEP:]
    for mesh, losses in report["resumed"].items():
        np.testing.assert_allclose(losses, continued, rtol=1e-5, err_msg=f"resumed on {mesh}")


@pytest.mark.slow
def test_rnnsearch_loops_move_no_weight_and_no_state_between_devices(mesh_report):
    """Collectives inside the compiled step's loop bodies, run at every time step.

    Data-parallel, each device's part of a weight's gradient differs, so summed over the batch
    inside a backward loop it is all-reduced at every step. The recurrent matrices' gradients
    are taken after the loop (``model.rnnsearch.weight_gradients_after_loop``), and ``v_a``'s
    in it but sentence by sentence (``AlignmentAttention.LOOP_PER_ROW``). With FSDP the loops'
    weights are gathered before the loop (``logical_axes.gathered``) and the encoder's states
    leave theirs split by sentence, so no state or gradient is gathered or exchanged in a loop.
    Tensor parallelism splits the alignment's n' on purpose (docs/scaling.md): per step the
    scores [B, S] and, backward, the state's gradient through ``W_a`` [B, n] are all-reduced."""
    found = {mesh: sorted(map(tuple, sizes)) for mesh, sizes in
             mesh_report["rnnsearch"]["collectives_in_loops"].items()}  # fmt: skip
    n, source_length = 24, 12  # tests.conftest.tiny_config, mesh_worker.batches
    assert max(size for _, size in found["8,1,1:inloop"]) >= n * n  # it sees weight matrices
    assert found["8,1,1"] == found["2,4,1"] == found["1,8,1"] == []
    sentences = 16 // 4  # per device: the batch is split over data x fsdp = 2 x 2
    assert found["2,2,2"] == sorted(
        [
            ("all-reduce", sentences * source_length),  # the scores
            ("all-reduce", sentences * n),  # the state's gradient through W_a
        ]
    )
