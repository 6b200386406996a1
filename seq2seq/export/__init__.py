"""Export to CTranslate2 (``python -m seq2seq.export``), and decoding through it.

``converter`` builds a CTranslate2 ``TransformerSpec`` from a trained Transformer through
CTranslate2's model-spec API; ``engine`` translates with the exported model behind the same
``translate`` as ``seq2seq.evaluation.translator.Translator``.
"""
