"""RNNsearch's schema (``config.model.rnnsearch``): its sizes and switches, apart from the model
(``seq2seq.models.rnnsearch``) so that a config is made and checked without JAX."""

from __future__ import annotations

import dataclasses
from typing import Literal

from seq2seq.models.schema import FieldError, check, check_shared_vocabulary


@dataclasses.dataclass(frozen=True)
class RNNSearchConfig:
    """RNNsearch's schema: every size and switch; the defaults are Bahdanau et al.'s (Appendix B).

    ``config.model.rnnsearch`` is generated from these fields (``seq2seq.models.schema``).
    """

    source_vocab_size: int  # from the run's tokenizer
    target_vocab_size: int
    embedding_size: int = 620  # word embedding width m
    encoder_hidden_size: int = 1000  # GRU units per encoder direction n
    decoder_hidden_size: int = 1000  # decoder GRU units n
    alignment_size: int = 1000  # hidden width n' of the additive alignment model
    maxout_size: int = 500  # maxout units l in the deep output
    # "additive" (Bahdanau), "dot" / "general" (Luong et al.), "none" (RNNencdec: one fixed c)
    attention: Literal["additive", "dot", "general", "none"] = "additive"
    # "paper": Appendix B.1 (N(0, 0.01^2), ...); "modern": fan-in scaled (see initializers)
    init: Literal["paper", "modern"] = "paper"
    dropout_rate: float = 0.0  # on embeddings and the maxout output t_i (the paper: none)
    share_embeddings: bool = False  # one embedding table for both languages (needs shared vocab)
    # Recurrence steps per iteration of each jax.lax.scan's loop (its ``unroll``): the same
    # equations, fewer loop iterations (an accelerator launches each iteration's kernels).
    scan_unroll: int = 1
    # Both encoder directions in one jax.lax.scan, their recurrent products batched: S loop
    # iterations instead of two loops of S (the same equations; see ``run_both_directions``).
    # Off by default: no faster on a CPU (docs/benchmarks.md); the accelerator bench measures it.
    joint_encoder_loop: bool = False
    # Each recurrence's weight gradients in one product after its backward loop, not summed
    # step by step inside it (the same gradients, and no all-reduce of a weight inside a loop
    # when the batch is split; see ``seq2seq.models.recurrence``). Off for forward-mode autodiff.
    weight_gradients_after_loop: bool = True
    dtype: str = "float32"  # compute dtype (train.dtype); parameters stay float32

    def __post_init__(self):
        check(self)
        check_shared_vocabulary(self)
        if self.attention == "dot" and self.decoder_hidden_size != 2 * self.encoder_hidden_size:
            raise FieldError(  # Luong's dot score compares s_{i-1} with h_j directly
                "attention",
                self.attention,
                "needs decoder_hidden_size == 2 * encoder_hidden_size; use 'general' or 'additive'",
            )
