"""Attention: the equations, the layers both models are built from, and Eq. 1's fast paths.

* ``equations``: scores four ways (additive, dot, general, scaled dot-product), the masked
  softmax and the weighted values, as functions on plain arrays;
* ``layers``: masks, ``MultiHeadAttention``, ``AlignmentAttention`` and the choice, per
  platform, of how Eq. 1 of Vaswani et al. 2017 is computed;
* ``cpu``: Eq. 1 on CPUs (a written-out backward, sentences grouped over the cores);
* ``cudnn``: Eq. 1 through cuDNN's fused kernel on NVIDIA GPUs.

The dependency points one way: ``layers -> cpu -> equations`` and ``layers -> cudnn``.
"""
