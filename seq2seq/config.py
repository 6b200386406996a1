"""The configuration schema: every field, its meaning and unit, in one place.

The ``model.<family>`` sections are generated from the dataclasses of the registered model
families (``seq2seq.models.registry``, ``seq2seq.models.schema``), which own those fields, their
defaults, allowed values and rules; each family checks its own options.
Experiment files in ``configs/`` start from ``default_config()`` and change what they need. The
schema is locked, so a misspelt key (in a file or on the command line) is an error rather than a
silently ignored new field. Only entry points and ``build_*`` functions read a config; library
code takes explicit arguments.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import ml_collections

# The registry and the families' dataclasses are plain Python: every command imports this module
# before JAX loads (``cli.start``), and a config is made and checked without it.
from seq2seq.models import MODELS
from seq2seq.models.schema import section_defaults
from seq2seq.vocabulary import SPECIAL_TOKENS

DATA_SOURCES = ("synthetic", "text", "tfds")
SYNTHETIC_LENGTHS = ("grammar", "uniform")
TOKENIZERS = ("unigram", "bpe", "word")
OPTIMIZERS = ("adam", "adadelta")
SCHEDULES = ("transformer", "constant", "warmup_rsqrt", "warmup_cosine")
DTYPES = ("float32", "bfloat16", "auto")  # train.dtype; "auto": by platform
MESH_AXES = ("data", "fsdp", "tensor")  # the device mesh's axes (seq2seq.training.sharding)
# The widest beam searched. Each sentence keeps this many hypotheses, each with its own decoder
# cache, so memory and time grow with it; the papers search 4 (Vaswani) and 12 (Bahdanau), and
# wider beams lower BLEU in NMT (Koehn and Knowles, 2017).
MAX_BEAM_SIZE = 64


class ConfigError(ValueError):
    """A configuration that cannot run; its message is one line naming the key and the fix."""


class SavedConfigError(ConfigError):
    """A run's ``config.json`` that this version cannot read; ``reason`` says why, without the
    file or a fix (a caller about to write beside it names its own)."""

    def __init__(self, path: Path, reason: str):
        super().__init__(
            f"{path} is not a config this version of seq2seq saved ({reason}); put back the "
            "run's own config.json, or pass another run's folder"
        )
        self.reason = reason


def __getattr__(name: str) -> object:
    """``MODEL_NAMES``: the registered model families' names, read from the registry when asked
    (a family registered later is named too)."""
    if name == "MODEL_NAMES":
        return tuple(MODELS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _model_sections() -> dict[str, dict[str, object]]:
    """Each model family's section defaults, from its dataclass (``seq2seq.models.schema``)."""
    return {name: section_defaults(family.config_class) for name, family in MODELS.items()}


def default_config() -> ml_collections.ConfigDict:
    """Every field the project reads, with its default. Locked: no new keys can be added."""
    config = ml_collections.ConfigDict()
    config.seed = 0  # seeds parameters, dropout and data order
    config.model = _model_defaults()
    config.data = _data_defaults()
    config.train = _train_defaults()
    config.mesh = _mesh_defaults()
    config.checkpoint = _checkpoint_defaults()
    config.eval = _eval_defaults()
    config.decode = _decode_defaults()
    config.lock()
    return config


def _model_defaults() -> ml_collections.ConfigDict:
    """The model family and one section of settings per registered family."""
    model = ml_collections.ConfigDict()
    # A registered family (seq2seq.models.registry): "transformer" (Vaswani et al. 2017) or
    # "rnnsearch" (Bahdanau et al. 2015)
    model.name = "transformer"

    # One section per registered family, generated from its dataclass, which holds each field's
    # meaning, default and allowed values: models/transformer_config.py (TransformerConfig,
    # defaults: the base model of Table 3) and models/rnnsearch_config.py (RNNSearchConfig,
    # Appendix A/B).
    for name, defaults in _model_sections().items():
        model[name] = ml_collections.ConfigDict(defaults)
    return model


def _data_defaults() -> ml_collections.ConfigDict:
    """Where the sentence pairs come from, how they are tokenised and batched."""
    data = ml_collections.ConfigDict()
    data.source = "synthetic"  # "synthetic" (embedded toy pair), "text" (files) or "tfds" (WMT)
    data.synthetic_lengths = "grammar"  # synthetic lengths: "grammar" (mostly short), "uniform"
    data.synthetic_min_words = 3  # shortest synthetic source sentence (words, at least 3)
    data.synthetic_max_words = 40  # longest synthetic source sentence (words); "uniform" reaches it
    data.name = ""  # TFDS dataset name, e.g. "wmt14_translate/de-en" (source "tfds")
    data.dir = ""  # folder of STEM.LANG files (source "text"); TFDS data_dir (source "tfds")
    data.src_lang = "en"  # source language code
    data.tgt_lang = "de"  # target language code
    data.train_split = "train"  # split (or file stem) to train on
    data.eval_split = "validation"  # split used for validation during training
    data.test_split = "test"  # split ``eval.py`` scores by default
    data.max_train_examples = 0  # use only the first N training pairs; 0 for all
    data.tokenizer = "unigram"  # SentencePiece model type: "unigram", "bpe" or "word"
    data.vocab_size = 8000  # SentencePiece vocabulary size (shared vocabulary: both languages)
    data.shared_vocab = True  # one vocabulary for both languages (needed for shared embeddings)
    data.tokenizer_sample_size = 1_000_000  # sentence pairs sampled (seeded) to train the tokenizer
    data.max_length = 64  # longest training sentence kept (tokens, either side, EOS included)
    data.max_length_ratio = 9.0  # drop pairs with longer/shorter side (tokens) above this; 0: never
    data.tokens_per_batch = 4096  # real (non-padding) tokens per batch side, at most; all hosts
    data.sentences_per_batch = 0  # exactly this many sentences per batch (all hosts); 0: by tokens
    data.bucket_width = 16  # padded lengths are multiples of this (fewer compiled shapes)
    data.pack = False  # pack several pairs per row of max_length tokens (families that pack)
    return data


def _train_defaults() -> ml_collections.ConfigDict:
    """Optimizer, schedule, loss, budget and early stopping."""
    train = ml_collections.ConfigDict()
    train.steps = 100_000  # optimizer updates
    train.log_every_steps = 100  # steps between metrics.jsonl lines
    # The budget counts minutes of training across resumes; validation decoding is left out.
    train.time_budget_minutes = 0.0  # stop (with a checkpoint) after this; 0: no budget
    # Compute dtype: "float32", "bfloat16", or "auto": bfloat16 on a GPU or TPU, float32 on a CPU
    # (resolved when the model is built: seq2seq.models.compute_dtype). Parameters, optimizer
    # state and the loss stay float32.
    train.dtype = "float32"
    train.optimizer = "adam"  # "adam" (Vaswani et al.) or "adadelta" (Bahdanau et al.)
    train.learning_rate = 1.0  # peak rate; a multiplier of d_model^-0.5 for schedule "transformer"
    train.schedule = (
        "transformer"  # "transformer" (Eq. 3), "constant", "warmup_rsqrt", "warmup_cosine"
    )
    train.warmup_steps = 4000  # linear warm-up steps
    train.adam_b1 = 0.9  # Adam beta1
    train.adam_b2 = 0.98  # Adam beta2 (Vaswani et al.: 0.98)
    train.adam_eps = 1e-9  # Adam epsilon (Vaswani et al.: 1e-9)
    train.adadelta_rho = 0.95  # AdaDelta decay (Bahdanau et al.: 0.95)
    train.adadelta_eps = 1e-6  # AdaDelta epsilon (Bahdanau et al.: 1e-6)
    train.label_smoothing = 0.1  # epsilon_ls (Vaswani et al.: 0.1)
    train.clip_grad_norm = 0.0  # clip gradients to this global norm; 0 for none (Bahdanau: 1)
    train.grad_accum_steps = 1  # micro-batches per update (same update as one big batch)
    # Target tokens per chunk of the projected loss (seq2seq.training.losses): the [tokens, V]
    # logits are made a chunk at a time. 0: the whole batch at once; -1 ("auto"): chunks sized
    # for a CPU's cache on a CPU, the whole batch on an accelerator. The update is the same.
    train.loss_chunk_tokens = -1
    # Early stopping: the run has converged, and ends, after this many validation points in a
    # row without a new best validation BLEU; the budget (steps, minutes) stays its cap. 0: off.
    train.early_stopping_patience = 0
    train.early_stopping_min_delta = 0.0  # BLEU a point must gain over the best to be a new best
    return train


def _mesh_defaults() -> ml_collections.ConfigDict:
    """Devices, the logical-axis rule table and the processes of a multi-host job."""
    mesh = ml_collections.ConfigDict()
    mesh.data = -1  # devices along the "data" axis; -1: all that fsdp and tensor leave
    mesh.fsdp = 1  # devices along the "fsdp" axis: the batch and parameters are split over them
    mesh.tensor = 1  # devices along the "tensor" axis: heads, d_ff, vocabulary split over them
    # The rule table: each logical axis name (seq2seq/logical_axes.py) -> the mesh axes its
    # dimension is split over, comma-separated, in order; "" keeps it whole (replicated). The
    # defaults give data parallelism, FSDP (ZeRO-3) and Megatron tensor parallelism at once,
    # each active when its mesh axis has more than one device; docs/scaling.md explains them.
    mesh.rules = rules = ml_collections.ConfigDict()
    rules.batch = "data,fsdp"  # sentences: every device its own
    rules.length = ""  # positions in a sentence
    rules.vocab = "tensor"  # vocabulary: embeddings and output layer vocabulary-parallel
    rules.embed = "fsdp"  # model / word-embedding width of parameters: FSDP's split
    rules.activation_embed = ""  # model width of activations between layers
    rules.heads = "tensor"  # attention heads: Megatron's column- then row-parallel attention
    rules.kv = ""  # width of one head's query, key or value
    rules.mlp = "tensor"  # feed-forward inner width d_ff: column- then row-parallel
    rules.positions = ""  # rows of a learned position table
    rules.hidden = "fsdp"  # recurrent state width (RNNsearch): FSDP only, see docs/scaling.md
    rules.gates = ""  # a GRU's stacked gate pre-activations
    rules.alignment = "tensor"  # hidden width of the alignment model (RNNsearch)
    rules.maxout = ""  # deep-output units (RNNsearch)
    rules.fsdp_min_size = 2**16  # parameters with fewer elements are not split over fsdp
    mesh.distributed = False  # call jax.distributed.initialize(), detecting the cluster
    # Processes started by hand (e.g. two on one machine); setting all three implies distributed.
    mesh.coordinator_address = ""  # host:port of process 0's coordinator, e.g. "localhost:12345"
    mesh.num_processes = 0  # processes in the job; 0: unset (detected)
    mesh.process_id = -1  # this process, 0 .. num_processes - 1; -1: unset (detected)
    return mesh


def _checkpoint_defaults() -> ml_collections.ConfigDict:
    """When checkpoints are written and how many are kept."""
    ckpt = ml_collections.ConfigDict()
    ckpt.every_steps = 1000  # steps between checkpoints (one is always written at the end); 0: off
    ckpt.every_minutes = 0.0  # training minutes between checkpoints, beside every_steps; 0: off
    ckpt.keep = 5  # most recent checkpoints kept (plus the best by validation BLEU)
    return ckpt


def _eval_defaults() -> ml_collections.ConfigDict:
    """Validation during training and evaluation batches."""
    ev = ml_collections.ConfigDict()
    ev.batch_size = 64  # sentences decoded together by eval.py
    ev.every_steps = 0  # validation (loss, perplexity, BLEU) every this many steps; 0: at the end
    # Training minutes between validations, beside every_steps; 0: off. Minutes give models of
    # different step speeds validation points (and so `best` and curves) at the same times.
    # Several processes agree on the minutes at log steps (as for checkpoint.every_minutes).
    ev.every_minutes = 0.0
    ev.num_examples = 500  # validation sentences scored during training (the first N); 0: all
    ev.num_samples = 3  # sample translations written to the log at each validation
    ev.length_bucket_size = 10  # source words per bucket of BLEU by length (Bahdanau, Fig. 2)
    return ev


def _decode_defaults() -> ml_collections.ConfigDict:
    """Beam search and its length penalty."""
    dec = ml_collections.ConfigDict()
    dec.max_extra_length = 50  # output may be this many tokens longer than the input (Vaswani)
    dec.max_input_length = 256  # longer inputs are truncated to this many tokens (and flagged)
    dec.beam_size = 4  # hypotheses kept per sentence (Vaswani et al.: 4); 1 is greedy search
    dec.alpha = 0.6  # length-penalty exponent, ((5 + |Y|) / 6)^alpha (Wu et al. 2016); 0: none
    # Beam search: once half of a batch's sentences are done, the rest go on in a batch half the
    # size, down to this many rows (a compiled loop per size). eval.batch_size or more keeps one
    # loop: fewer compilations, for evaluations of a few sentences (the tests'). 0: by platform,
    # down to 8 rows on a CPU, one loop on a GPU or TPU (seq2seq.decoding.beam_search.stage_sizes).
    dec.min_rows = 0
    return dec


# Next to the repository, as the developers' machines and CI have it (see shared/data/multi30k).
MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def use_multi30k(data: ml_collections.ConfigDict, directory: str | Path = MULTI30K) -> None:
    """German -> English Multi30k (29k image captions), read from its STEM.LANG text files.

    Sets what every Multi30k config shares: the files and splits, one subword vocabulary of 8000
    for both languages (unigram) and a 64-token limit that no caption exceeds. Batching (size,
    packing) stays the config's own choice: it differs between the model families.
    """
    data.source = "text"
    data.dir = str(directory)  # absolute, so any working directory works
    data.src_lang = "de"
    data.tgt_lang = "en"
    data.train_split = "train"  # file stems of the Multi30k release
    data.eval_split = "val"
    data.test_split = "test_2016_flickr"
    data.tokenizer = "unigram"
    data.vocab_size = 8000  # shared by both languages
    data.max_length = 64  # tokens; no Multi30k caption is longer


def split_config_argument(path: str | Path) -> tuple[Path, tuple[str, ...]]:
    """``FILE.py:ARG`` as (FILE.py, (ARG,)), the way ``--config`` reads it (ml_collections passes
    ARG to ``get_config``; ``configs/from_run.py:RUN``); a plain file as (FILE, ())."""
    text = str(path)
    file, colon, argument = text.partition(":")
    if colon and not Path(text).exists():
        return Path(file), (argument,)
    return Path(text), ()


def config_name(path: str | Path) -> str:
    """A config's short name, as a comparison names its run folders: the file's stem, or for
    ``configs/from_run.py:RUN`` the run folder's name."""
    file, argument = split_config_argument(path)
    if not argument:
        return file.stem
    run = Path(argument[0])
    return run.parent.name if run.suffix == ".json" else run.name


def saved_config_message(path: str | Path) -> str:
    """The one line for a run's saved ``config.json`` given where a config file goes."""
    return (
        f"{path} is a run's saved config, not a config file; pass configs/from_run.py:{path} "
        "in its place (it reads a run's config.json)"
    )


def load_config_file(path: str | Path) -> ml_collections.ConfigDict:
    """Runs a config file's ``get_config()`` (as ``--config FILE`` does) and validates it;
    ``FILE.py:ARG`` passes ARG to ``get_config``, as ``--config FILE.py:ARG`` does."""
    path, argument = split_config_argument(path)
    if not path.exists():
        raise ConfigError(f"no config file at {path}")
    if path.suffix == ".json":
        raise ConfigError(saved_config_message(path))
    spec = importlib.util.spec_from_file_location(f"seq2seq_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return validate(module.get_config(*argument))


def has_cross_attention(config: ml_collections.ConfigDict) -> bool:
    """Whether the model looks back at the source while it translates: every model but
    RNNencdec (``model.rnnsearch.attention="none"``), whose one fixed vector has nothing to show."""
    return not (config.model.name == "rnnsearch" and config.model.rnnsearch.attention == "none")


def flatten(config: ml_collections.ConfigDict, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) for every leaf of the config."""
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def unknown_key_message(key: str, config: ml_collections.ConfigDict | None = None) -> str:
    """``unknown config key 'train.stesp'; did you mean 'train.steps'?``

    It offers the keys of the same section whose initials are a word of the typed key
    (``train.peak_lr`` -> ``train.learning_rate``, ``train.ls`` -> ``train.label_smoothing``),
    else the keys spelt alike.
    """
    known = [name for name, _ in flatten(config or default_config())]
    section, _, leaf = key.rpartition(".")
    typed_words = {word for word in leaf.split("_") if len(word) >= 2}
    abbreviated = [
        name
        for name in known
        if name.rpartition(".")[0] == section and _initials(name.rpartition(".")[2]) in typed_words
    ]
    close = abbreviated or difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown config key {key!r}{hint}"


def _initials(leaf: str) -> str:
    """``learning_rate`` -> ``lr``; a one-word key has none."""
    words = leaf.split("_")
    return "".join(word[0] for word in words) if len(words) > 1 else ""


# A run's identity: what changes the parameters it trains: their shapes, the stream of training
# batches and the optimisation. A work directory refuses a config that differs in any of these
# (see ``RunDirectory.save_config``), so a changed learning rate never continues, or is reported
# as, a run trained with another. Every key of these sections counts, so a key added to the schema
# is covered without a list to keep up to date; only the chosen model's section counts.
IDENTITY_SECTIONS = ("seed", "model.name", "data", "train")
# Keys of those sections that only say what is scored or logged, how far training goes (a run
# extended to more steps or minutes is the same run, continued) or how the same update is computed.
NOT_IDENTITY = frozenset(
    {
        "data.eval_split",
        "data.test_split",
        "train.steps",
        "train.time_budget_minutes",
        "train.loss_chunk_tokens",
        "model.rnnsearch.scan_unroll",
        "model.rnnsearch.joint_encoder_loop",
        "model.rnnsearch.weight_gradients_after_loop",
        "train.log_every_steps",
        "train.early_stopping_patience",
        "train.early_stopping_min_delta",
    }
)


def identity_keys(config: ml_collections.ConfigDict) -> list[str]:
    """The dotted keys that identify a run of ``config`` (see ``IDENTITY_SECTIONS``)."""
    sections = (*IDENTITY_SECTIONS, f"model.{config.model.name}")
    # The cosine schedule decays over train.steps: there, more steps is another schedule.
    extendable = NOT_IDENTITY - (
        {"train.steps"} if config.train.schedule == "warmup_cosine" else set()
    )
    return [
        key
        for key, _ in flatten(config)
        if key not in extendable and any(key == s or key.startswith(f"{s}.") for s in sections)
    ]


def identity_differences(
    saved: ml_collections.ConfigDict,
    requested: ml_collections.ConfigDict,
    *,
    same: Collection[str] = (),
    notes: Mapping[str, str] | None = None,
) -> list[str]:
    """``config.key: saved -> requested`` for each identity key whose values differ, but the
    keys in ``same`` (known by other means to name the same thing); each followed by
    ``(note)`` where ``notes`` has one for its key."""
    notes = notes or {}
    keys = dict.fromkeys([*identity_keys(saved), *identity_keys(requested)])
    return [
        f"config.{key}: {lookup(saved, key)!r} -> {lookup(requested, key)!r}"
        + (f" ({notes[key]})" if key in notes else "")
        for key in keys
        if key not in same and lookup(saved, key) != lookup(requested, key)
    ]


def for_model(key: str, model_name: str) -> str:
    """A tuned key as one model family reads it: ``model.FIELD`` (a field every family has, such
    as ``model.dropout_rate``) is ``model.<model_name>.FIELD``; any other key is itself. So one
    grid tunes the same idea in a Transformer and an RNNsearch, with the same trials."""
    parts = key.split(".")
    if len(parts) == 2 and parts[0] == "model" and parts[1] != "name":
        return f"model.{model_name}.{parts[1]}"
    return key


def lookup(config: ml_collections.ConfigDict, key: str) -> object:
    """The value at a dotted key (a plain dict for a section)."""
    node = config
    for part in key.split("."):
        node = node[part]
    return node.to_dict() if isinstance(node, ml_collections.ConfigDict) else node


def _check_cosine(train: ml_collections.ConfigDict) -> None:
    """The cosine decays over the steps after the warm-up: a warm-up of all the steps or more
    left it none, and optax refused the schedule when the first step ran (after a comparison's
    whole tuning sweep)."""
    _require(
        train.schedule != "warmup_cosine" or train.warmup_steps < train.steps,
        f"config.train.warmup_steps={train.warmup_steps} leaves warmup_cosine nothing to decay "
        f"over in train.steps={train.steps}; lower the warm-up or raise the steps",
    )


def _check_early_stopping(config: ml_collections.ConfigDict) -> None:
    train, evaluation = config.train, config.eval
    _require(
        train.early_stopping_patience >= 0,
        f"config.train.early_stopping_patience={train.early_stopping_patience} must be >= 0 "
        "(validation points without a new best; 0: off)",
    )
    _require(
        train.early_stopping_min_delta >= 0,
        f"config.train.early_stopping_min_delta={train.early_stopping_min_delta} must be >= 0",
    )
    _require(
        train.early_stopping_patience == 0 or evaluation.every_steps or evaluation.every_minutes,
        "config.train.early_stopping_patience counts validation points, but eval.every_steps and "
        "eval.every_minutes are both 0 (validation only at the end); set one of them",
    )


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _choice(config: ml_collections.ConfigDict, key: str, choices: tuple[str, ...]) -> None:
    value = dict(flatten(config))[key]
    _require(value in choices, f"config.{key}={value!r} is not one of {', '.join(choices)}")


def validate(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks choices, ranges and combinations before any work starts; returns the config.

    Raises:
      ConfigError: one line naming the offending key and what would fix it.
    """
    _check_schema(config)
    _check_choices(config)
    _check_ranges(config)
    _check_decode(config.decode)
    _check_early_stopping(config)
    _check_cosine(config.train)
    _check_batches(config.data)
    _check_source(config.data)
    _check_families(config)
    _validate_processes(config.mesh)
    _validate_sizes(config.mesh)
    _validate_rules(config.mesh)
    _require(
        config.train.grad_accum_steps >= 1,
        f"config.train.grad_accum_steps={config.train.grad_accum_steps} must be >= 1",
    )
    _require(
        config.train.loss_chunk_tokens >= -1,
        f"config.train.loss_chunk_tokens={config.train.loss_chunk_tokens} must be a number of"
        " tokens, 0 (whole batch) or -1 (auto)",
    )
    return config


def _check_schema(config: ml_collections.ConfigDict) -> None:
    """The config has the schema's keys and no others: a config file starts from
    ``default_config()`` and changes what its experiment needs."""
    start = "start get_config() from seq2seq.config.default_config() (see configs/quickstart_*.py)"
    _require(
        isinstance(config, ml_collections.ConfigDict),
        f"the config is of type {type(config).__name__}, not a ConfigDict; {start}",
    )
    schema, keys = dict(flatten(default_config())), dict(flatten(config))
    missing = [key for key in schema if key not in keys]
    _require(
        not missing,
        f"the config lacks {len(missing)} of the schema's keys ({', '.join(missing[:3])}"
        f"{', ...' if len(missing) > 3 else ''}); {start}",
    )
    unknown = [key for key in keys if key not in schema]
    _require(not unknown, unknown_key_message(unknown[0]) if unknown else "")


def _check_choices(config: ml_collections.ConfigDict) -> None:
    _choice(config, "model.name", tuple(MODELS))
    _choice(config, "data.source", DATA_SOURCES)
    _choice(config, "data.tokenizer", TOKENIZERS)
    _choice(config, "data.synthetic_lengths", SYNTHETIC_LENGTHS)
    _choice(config, "train.optimizer", OPTIMIZERS)
    _choice(config, "train.schedule", SCHEDULES)
    _choice(config, "train.dtype", DTYPES)


# Values whose sign the schema's other rules leave open: those where 0 means "off" or "all"
# (what it means, for the message), those that must be positive, and the optimizers' decays.
_AT_LEAST_ZERO = {
    "train.time_budget_minutes": "0: no budget",
    "train.clip_grad_norm": "0: no clipping",
    "eval.num_examples": "0: every validation sentence",
    "eval.num_samples": "0: none",
    "decode.max_extra_length": "output tokens beyond the input's length",
}
_ABOVE_ZERO = frozenset(
    {
        "decode.max_input_length",
        "train.adam_eps",
        "train.adadelta_eps",
        "train.learning_rate",  # 0 trains nothing; below 0 climbs the loss
    }
)
_DECAYS = frozenset({"train.adam_b1", "train.adam_b2", "train.adadelta_rho"})


def _check_ranges(config: ml_collections.ConfigDict) -> None:
    """Sizes and step counts positive (counts that may be 0 for "off": non-negative), minutes
    non-negative, and the signs and ranges of the tables above; each family checks its own
    section (_check_families)."""
    may_be_zero = (
        "train.warmup_steps",
        "eval.every_steps",
        "checkpoint.every_steps",
        "mesh.rules.fsdp_min_size",  # 0: every parameter that divides is split
    )
    for key, value in flatten(config):
        if isinstance(value, float):  # nan passes no comparison's refusal; inf passes most
            _require(math.isfinite(value), f"config.{key}={value} must be a finite number")
        if key.startswith("model."):
            continue
        if key.endswith(("_size", "steps")):
            if key in may_be_zero:
                _require(value >= 0, f"config.{key}={value} must be >= 0")
            else:
                _require(value > 0, f"config.{key}={value} must be positive")
        if key.endswith("every_minutes"):
            _require(value >= 0, f"config.{key}={value} must be >= 0 (0: off)")
        if key == "train.label_smoothing":
            _require(0.0 <= value < 1.0, f"config.{key}={value} must be in [0, 1)")
        if key == "seed":  # it seeds numpy's and JAX's generators, which take no sign
            _require(value >= 0, f"config.seed={value} must be >= 0")
        if key in _AT_LEAST_ZERO:
            _require(value >= 0, f"config.{key}={value} must be >= 0 ({_AT_LEAST_ZERO[key]})")
        if key in _ABOVE_ZERO:
            _require(value > 0, f"config.{key}={value} must be > 0")
        if key in _DECAYS:
            _require(0 <= value < 1, f"config.{key}={value} must be in [0, 1)")
        if key == "checkpoint.keep":  # the newest K; 0 used to keep every checkpoint
            _require(value >= 1, f"config.{key}={value} must be >= 1 (the newest checkpoints kept)")


def _check_decode(decode: ml_collections.ConfigDict) -> None:
    _require(
        decode.beam_size <= MAX_BEAM_SIZE,
        f"config.decode.beam_size={decode.beam_size} is over {MAX_BEAM_SIZE}, the widest beam "
        "searched; the papers use 4 and 12",
    )
    _require(
        decode.min_rows >= 0,
        f"config.decode.min_rows={decode.min_rows} must be >= 0 (rows of the last stage; "
        "0: by platform)",
    )
    _require(
        decode.alpha >= 0,
        f"config.decode.alpha={decode.alpha} must be >= 0 (0 turns the length penalty off)",
    )


def _check_batches(data: ml_collections.ConfigDict) -> None:
    _require(data.max_length >= 2, f"config.data.max_length={data.max_length} must be >= 2")
    _require(
        data.bucket_width >= 1,
        f"config.data.bucket_width={data.bucket_width} must be >= 1 (padded lengths are its "
        "multiples; 1: a bucket for every length)",
    )
    _require(
        data.max_train_examples >= 0,
        f"config.data.max_train_examples={data.max_train_examples} must be >= 0 (0: all pairs)",
    )
    _require(
        data.sentences_per_batch >= 0,
        f"config.data.sentences_per_batch={data.sentences_per_batch} must be >= 0 (0: by tokens)",
    )
    _require(
        data.sentences_per_batch > 0 or data.tokens_per_batch >= data.max_length,
        f"config.data.tokens_per_batch={data.tokens_per_batch} cannot hold one sentence of "
        f"data.max_length={data.max_length} tokens; raise it",
    )
    _require(
        not (data.pack and data.sentences_per_batch),
        "config.data.pack=True fills rows by tokens, so batches cannot hold exactly "
        "data.sentences_per_batch sentences; set data.pack=False or data.sentences_per_batch=0",
    )
    _require(
        data.max_length_ratio == 0 or data.max_length_ratio >= 1,
        f"config.data.max_length_ratio={data.max_length_ratio} must be 0 (no limit) or >= 1",
    )


def _check_source(data: ml_collections.ConfigDict) -> None:
    _require(
        3 <= data.synthetic_min_words <= data.synthetic_max_words,
        f"config.data.synthetic_min_words={data.synthetic_min_words} and synthetic_max_words="
        f"{data.synthetic_max_words} need 3 <= min <= max",
    )
    if data.source == "synthetic" and data.synthetic_lengths == "uniform":
        _require(
            data.max_length > data.synthetic_max_words,
            f"config.data.max_length={data.max_length} would drop the synthetic sentences of up to "
            f"data.synthetic_max_words={data.synthetic_max_words} words (a word is at least one "
            "token, plus EOS; targets run a few words longer); raise data.max_length",
        )
    if data.source == "tfds":
        _require(bool(data.name), "config.data.name is empty; data.source='tfds' needs a dataset")
    if data.source == "text":
        _require(bool(data.dir), "config.data.dir is empty; data.source='text' needs a folder")
    for key in ("src_lang", "tgt_lang"):  # a file suffix and a key of TFDS's records
        _require(
            re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", data[key]) is not None,
            f"config.data.{key}={data[key]!r} is not a language code such as 'de' or 'en'",
        )
    _require(
        data.src_lang != data.tgt_lang,
        f"config.data.src_lang and data.tgt_lang are both {data.src_lang!r}; set them to the "
        "pair's two languages (the files' suffixes: train.de and train.en are 'de' and 'en')",
    )
    _require(
        data.vocab_size > len(SPECIAL_TOKENS),
        f"config.data.vocab_size={data.vocab_size} must exceed the {len(SPECIAL_TOKENS)} special "
        f"tokens ({', '.join(SPECIAL_TOKENS)})",
    )


def _check_families(config: ml_collections.ConfigDict) -> None:
    """Each registered family checks its section, its rules, packing and shared embeddings."""
    for family in MODELS.values():
        try:
            family.check(config)
        except ValueError as error:  # one line, naming the key inside the config
            raise ConfigError(f"config.{error}") from None


def _validate_sizes(mesh: ml_collections.ConfigDict) -> None:
    _require(
        mesh.data == -1 or mesh.data >= 1,
        f"config.mesh.data={mesh.data} must be >= 1, or -1 (all the devices fsdp and tensor leave)",
    )
    for axis in ("fsdp", "tensor"):
        _require(mesh[axis] >= 1, f"config.mesh.{axis}={mesh[axis]} must be >= 1 (1: unsplit)")


def _validate_rules(mesh: ml_collections.ConfigDict) -> None:
    for name, value in mesh.rules.items():
        if name == "fsdp_min_size":
            continue
        axes = [axis.strip() for axis in value.split(",") if axis.strip()]
        unknown = [axis for axis in axes if axis not in MESH_AXES]
        _require(
            not unknown,
            f"config.mesh.rules.{name}={value!r} names {', '.join(unknown)}, not a mesh axis; "
            f'use a comma-separated list of {", ".join(MESH_AXES)}, or ""',
        )
        _require(
            len(set(axes)) == len(axes),
            f"config.mesh.rules.{name}={value!r} names a mesh axis twice",
        )


def _validate_processes(mesh: ml_collections.ConfigDict) -> None:
    given = {
        "coordinator_address": mesh.coordinator_address != "",
        "num_processes": mesh.num_processes != 0,
        "process_id": mesh.process_id != -1,
    }
    _require(
        all(given.values()) or not any(given.values()),
        f"config.mesh.{' and mesh.'.join(k for k, v in given.items() if not v)} unset: set "
        "mesh.coordinator_address, mesh.num_processes and mesh.process_id together, or none",
    )
    if all(given.values()):
        _require(
            mesh.num_processes >= 1,
            f"config.mesh.num_processes={mesh.num_processes} must be >= 1",
        )
        _require(
            0 <= mesh.process_id < mesh.num_processes,
            f"config.mesh.process_id={mesh.process_id} must be in 0 .. mesh.num_processes - 1 "
            f"= {mesh.num_processes - 1}",
        )


# Keys renamed since runs were saved with them: old name -> new name.
_RENAMED = {
    "model.rnnsearch.scoring": "model.rnnsearch.attention",
    "mesh.fsdp_min_size": "mesh.rules.fsdp_min_size",
}


def save(config: ml_collections.ConfigDict, path: Path) -> None:
    """Writes the config as JSON (the record of what a run ran with).

    Through a temporary file and a rename, so a process reading it never sees half a file. The
    temporary file is hidden: another process of the job, checking meanwhile that the folder
    holds nothing but a run (``RunDirectory.check_free``), took it for a stranger's file.
    """
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    temporary.write_text(config.to_json_best_effort(indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


def load_saved(path: Path) -> ml_collections.ConfigDict:
    """Reads a config saved by ``save`` back into the current schema (types checked).

    Raises:
      ConfigError: the file is missing, is not a JSON object, or holds a key the current
        schema does not know.
    """
    if not path.exists():
        raise ConfigError(f"no config at {path}; pass the folder of a run (train.py saves one)")
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SavedConfigError(path, f"not JSON: {error}") from None
    if not isinstance(saved, dict):
        raise SavedConfigError(path, "not a JSON object")
    config = default_config()
    for key, value in flatten(ml_collections.ConfigDict(saved)):
        key = _RENAMED.get(key, key)
        try:
            _set(config, key, value)
        except (AttributeError, KeyError):
            raise SavedConfigError(path, unknown_key_message(key, config)) from None
    return validate(config)


def set_value(config: ml_collections.ConfigDict, key: str, value: object) -> None:
    """Sets a dotted key of a locked config; an unknown key is a one-line ``ConfigError``."""
    try:
        _set(config, key, value)
    except (AttributeError, KeyError) as error:
        raise ConfigError(unknown_key_message(key, config)) from error


def _set(config: ml_collections.ConfigDict, key: str, value: object) -> None:
    *parents, leaf = key.split(".")
    node = config
    for parent in parents:
        node = node[parent]
    if leaf not in node:
        raise KeyError(key)
    node[leaf] = value
