"""A trained Transformer as a CTranslate2 model, built with CTranslate2's model-spec API.

CTranslate2 converts a custom model through a ``Converter`` whose ``_load`` returns a filled
``TransformerSpec``; ``convert`` then validates, quantizes and saves it. The spec mirrors the
architecture of Vaswani et al. 2017 (post-LN as in Section 5.4, or pre-LN), so each of this
package's parameters has one place in it:

* attention: queries, keys and values ``[D, H, K]`` become one ``[3HK, D]`` product in
  self-attention (one ``[HK, D]`` and one ``[2HK, D]`` in cross-attention); ``W^O [H, E, D]``
  becomes ``[D, HE]``;
* feed-forward ``W_1``, ``W_2`` (Eq. 2) and every layer norm as they are, transposed;
* positions: the table this model adds (interleaved sinusoids, Section 3.5, or the learned one)
  written out, so CTranslate2 adds exactly the same vectors;
* embeddings scaled by sqrt(d_model) (Section 3.4) when the model scales them; the pre-softmax
  projection is the target embedding when tied.

The output directory also holds the run's tokenizer (``tokenizer/``) and its decoding settings
(``seq2seq.json``), so that the exported model translates text as ``eval.py`` does.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import ctranslate2
import ml_collections
import numpy as np
from ctranslate2.specs import common_spec, transformer_spec

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.models import MODELS, Transformer, TransformerConfig
from seq2seq.models.transformer import sinusoidal_positions

QUANTIZATIONS = ("float32", "int16", "int8")
SETTINGS_FILE = "seq2seq.json"
TOKENIZER_DIR = "tokenizer"
LAYER_NORM_EPSILON = 1e-6  # every nnx.LayerNorm of the Transformer

# Every field of ``TransformerConfig`` is one the export carries (in the spec, or in the shapes
# of the weights it copies) or one that does not change a translation. A field in neither (a
# hyperparameter added later) is refused at any value but its default: the spec would be built
# as if it had that default, and the exported model would translate otherwise, silently.
EXPORTED_FIELDS = frozenset({
    "source_vocab_size", "target_vocab_size", "d_model", "d_ff", "num_heads", "d_k", "d_v",
    "encoder_layers", "decoder_layers", "norm", "positions", "max_positions",
    "share_embeddings", "tie_output", "scale_embeddings",
})  # fmt: skip
TRAINING_ONLY_FIELDS = frozenset({
    "dropout_rate", "attention_dropout_rate", "relu_dropout_rate", "scan_layers", "dtype",
})  # fmt: skip


def _array(value) -> np.ndarray:
    return np.asarray(value, np.float32)


def _linear(spec: common_spec.LinearSpec, kernel, bias=None) -> None:
    """A ``[in, out]`` kernel (this package's layout) as CTranslate2's ``[out, in]`` weight."""
    spec.weight = np.ascontiguousarray(_array(kernel).T)
    if bias is not None:
        spec.bias = _array(bias)


def _per_head(kernel) -> np.ndarray:
    """``[D, H, K]`` -> ``[HK, D]``: every head's projection stacked, as CTranslate2 reads it."""
    kernel = _array(kernel)
    return np.ascontiguousarray(kernel.reshape(kernel.shape[0], -1).T)


def _attention(spec, attention, *, self_attention: bool) -> None:
    query, key, value = (
        _per_head(w[...]) for w in (attention.w_query, attention.w_key, attention.w_value)
    )
    if self_attention:
        spec.linear[0].weight = np.concatenate([query, key, value])
    else:
        spec.linear[0].weight = query
        spec.linear[1].weight = np.concatenate([key, value])
    output = _array(attention.w_output[...])  # [H, E, D]
    spec.linear[-1].weight = np.ascontiguousarray(output.reshape(-1, output.shape[-1]).T)


def _layer_norm(spec: common_spec.LayerNormSpec, norm) -> None:
    spec.gamma = _array(norm.scale[...])
    spec.beta = _array(norm.bias[...])


def _feed_forward(spec, sublayer_norm, feed_forward) -> None:
    _layer_norm(spec.layer_norm, sublayer_norm)
    _linear(spec.linear_0, feed_forward.w_1.kernel[...], feed_forward.w_1.bias[...])
    _linear(spec.linear_1, feed_forward.w_2.kernel[...], feed_forward.w_2.bias[...])


def position_table(model: Transformer, length: int) -> np.ndarray:
    """[length, D] the vectors the model adds at positions 0 .. length-1."""
    config = model.config
    if config.positions == "learned":
        return _array(model.position_embedding.embedding[...])[:length]
    positions = np.arange(length)[None, :]
    return _array(sinusoidal_positions(positions, config.d_model))[0]


def check_exportable(model_name: str, config) -> None:
    """Raises ValueError, one line, for a model CTranslate2's Transformer cannot express."""
    if not MODELS[model_name].ctranslate2_export:
        exportable = " or ".join(n for n, family in MODELS.items() if family.ctranslate2_export)
        raise ValueError(
            f"CTranslate2 has no {model_name} model; only a {exportable} run can be exported"
        )
    # a built model's TransformerConfig, or the config's model section (a ConfigDict)
    fields = dataclasses.fields(config if dataclasses.is_dataclass(config) else TransformerConfig)
    for field in fields:
        if field.default is dataclasses.MISSING:  # the vocabulary sizes: the tokenizer's
            continue
        value = getattr(config, field.name, field.default)
        if field.name in EXPORTED_FIELDS | TRAINING_ONLY_FIELDS or value == field.default:
            continue
        raise ValueError(
            f"model.transformer.{field.name}={value!r} is not carried by the CTranslate2 export "
            f"(it would build the model as if {field.name}={field.default!r}); teach "
            "seq2seq/export/converter.py the field first"
        )
    if not config.d_k == config.d_v == config.d_model // config.num_heads:
        raise ValueError(
            f"CTranslate2's attention needs d_k = d_v = d_model / num_heads, got d_k "
            f"{config.d_k}, d_v {config.d_v}, d_model {config.d_model}, {config.num_heads} heads"
        )


class TransformerConverter(ctranslate2.converters.Converter):
    """This package's ``Transformer`` and tokenizer, for ``ctranslate2.converters.Converter``."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, max_positions: int):
        self.model = model
        self.tokenizer = tokenizer
        self.max_positions = max_positions

    def _load(self) -> transformer_spec.TransformerSpec:
        model, config = self.model, self.model.config
        check_exportable("transformer", config)
        pre_norm = config.norm == "pre"
        spec = transformer_spec.TransformerSpec.from_config(
            (config.encoder_layers, config.decoder_layers),
            config.num_heads,
            pre_norm=pre_norm,
            activation=common_spec.Activation.RELU,
        )
        spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
        positions = position_table(model, self.max_positions)
        for side, embedding in (
            (spec.encoder, model.source_embedding),
            (spec.decoder, model.target_embedding),
        ):
            embeddings = (
                side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
            )
            embeddings.weight = _array(embedding.embedding[...])
            side.scale_embeddings = config.scale_embeddings
            side.position_encodings.encodings = positions
        for spec_layer, layer in zip(spec.encoder.layer, model.encoder_layers, strict=True):
            _attention(spec_layer.self_attention, layer.self_attention, self_attention=True)
            _layer_norm(spec_layer.self_attention.layer_norm, layer.attention_sublayer.norm)
            _feed_forward(spec_layer.ffn, layer.feed_forward_sublayer.norm, layer.feed_forward)
        for spec_layer, layer in zip(spec.decoder.layer, model.decoder_layers, strict=True):
            _attention(spec_layer.self_attention, layer.self_attention, self_attention=True)
            _layer_norm(spec_layer.self_attention.layer_norm, layer.self_sublayer.norm)
            _attention(spec_layer.attention, layer.cross_attention, self_attention=False)
            _layer_norm(spec_layer.attention.layer_norm, layer.cross_sublayer.norm)
            _feed_forward(spec_layer.ffn, layer.feed_forward_sublayer.norm, layer.feed_forward)
        if pre_norm:
            _layer_norm(spec.encoder.layer_norm, model.encoder_norm)
            _layer_norm(spec.decoder.layer_norm, model.decoder_norm)
        output = model.output_layer()
        weights = _array(output.weights)
        spec.decoder.projection.weight = weights if output.vocab_first else weights.T.copy()
        spec.register_source_vocabulary(_pieces(self.tokenizer.source))
        spec.register_target_vocabulary(_pieces(self.tokenizer.target))
        return spec


def _pieces(processor) -> list[str]:
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def export(
    model: Transformer,
    tokenizer_dir: Path,
    tokenizer: Tokenizer,
    config: ml_collections.ConfigDict,
    output: Path,
    quantization: str = "float32",
) -> Path:
    """Writes the CTranslate2 model, the tokenizer and the decoding settings to ``output``.

    Raises:
      ValueError: an unknown quantization, or ``output`` holding files already.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"unknown --quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )
    if output.exists() and any(output.iterdir()):
        raise ValueError(f"--output {output} already holds files; name a new directory")
    decode = config.decode
    # Positions for the longest input and the longest output that decoding allows.
    max_positions = decode.max_input_length + decode.max_extra_length + 1
    converter = TransformerConverter(model, tokenizer, max_positions)
    converter.convert(str(output), quantization=quantization, force=True)
    shutil.copytree(tokenizer_dir, output / TOKENIZER_DIR)
    settings = {"quantization": quantization, "config": json.loads(config.to_json_best_effort())}
    (output / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    return output
