"""seq2seq: RNNsearch and the Transformer for neural machine translation, in JAX/Flax NNX.

Two papers, one codebase:

* Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly Learning to Align and
  Translate": a bidirectional GRU encoder, a GRU decoder and *additive* attention.
* Vaswani et al. (2017), "Attention Is All You Need": multi-head *scaled dot-product* self- and
  cross-attention, with no recurrence at all.

Both models live behind one contract (``seq2seq.models.Seq2SeqModel``), so the loss, the trainer,
the beam search and the reports never branch on the model's name.

Dimension glossary, used in every shape comment and einsum of the package:

    B  batch (sentences)              S  source length (tokens)
    T  target length (tokens)         H  attention heads
    D  model width (d_model)          K  key/query width per head (d_k)
    E  value width per head (d_v)     F  feed-forward width (d_ff)
    V  vocabulary size                N  beam width
"""

__version__ = "0.1.0"
