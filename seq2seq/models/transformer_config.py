"""The Transformer's schema (``config.model.transformer``): its sizes and switches, apart from
the model (``seq2seq.models.transformer``) so that a config is made and checked without JAX."""

from __future__ import annotations

import dataclasses
from typing import Literal

from seq2seq.models.schema import check, check_shared_vocabulary


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The Transformer's schema: every size and switch; the defaults are the base model of Table 3.

    ``config.model.transformer`` is generated from these fields (``seq2seq.models.schema``).
    """

    source_vocab_size: int  # from the run's tokenizer
    target_vocab_size: int
    d_model: int = 512  # width of embeddings and residual stream
    d_ff: int = 2048  # inner width of the feed-forward blocks
    num_heads: int = 8  # attention heads h
    d_k: int = 64  # query/key width per head
    d_v: int = 64  # value width per head
    encoder_layers: int = 6  # N, encoder
    decoder_layers: int = 6  # N, decoder
    dropout_rate: float = 0.1  # P_drop: sub-layer outputs and embeddings + positions
    attention_dropout_rate: float = 0.0  # dropout on attention weights (the paper: none)
    relu_dropout_rate: float = 0.0  # dropout inside feed-forward blocks (the paper: none)
    # "post": LayerNorm(x + Sublayer(x)) as in the paper; "pre": x + Sublayer(LayerNorm(x))
    norm: Literal["post", "pre"] = "post"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"  # "learned": Table 3, row E
    max_positions: int = 1024  # longest sequence with learned positions (tokens)
    share_embeddings: bool = True  # one embedding for source and target (needs shared vocab)
    tie_output: bool = True  # pre-softmax projection = target embedding^T (three-way tying)
    scale_embeddings: bool = True  # multiply embeddings by sqrt(d_model)
    scan_layers: bool = False  # one jax.lax.scan per stack (run_layers): compile time flat in N
    dtype: str = "float32"  # compute dtype (train.dtype); parameters stay float32

    def __post_init__(self):
        check(self)
        check_shared_vocabulary(self)
