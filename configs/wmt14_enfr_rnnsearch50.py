"""RNNsearch-50 on WMT14 English→French (Bahdanau et al. 2015, Table 1).

    python train.py --config configs/wmt14_enfr_rnnsearch50.py --workdir runs/enfr_rnnsearch50
    python eval.py --workdir runs/enfr_rnnsearch50

Paper: 26.75 BLEU on newstest2014 (all sentences; 34.16 on sentences without unknown words),
28.45 for RNNsearch-50* trained longer. Word-level vocabularies of the 30,000 most frequent words
per language, all others mapped to UNK; "-50": training sentences of at most 50 words.
Trained ~5 days with AdaDelta; the paper reports time, not a number of updates.
"""

from seq2seq.config import default_config


def get_config():
    config = default_config()
    config.model.name = "rnnsearch"  # paper sizes are the schema's defaults: m=620, n=1000,
    # n'=1000, l=500, additive alignment model, no dropout, Appendix B.1's initialisation

    data = config.data
    data.source = "tfds"
    data.name = "wmt14_translate/fr-en"
    data.src_lang = "en"
    data.tgt_lang = "fr"
    data.tokenizer = "word"  # the 30,000 most frequent words, the rest UNK
    data.vocab_size = 30000  # per language
    data.shared_vocab = False  # one shortlist per language
    data.max_length = 51  # at most 50 words, plus EOS
    data.tokens_per_batch = 80 * 51  # minibatches of about 80 sentence pairs
    data.bucket_width = 17

    train = config.train
    train.steps = 400_000  # the paper trains ~5 days; choose by time budget
    train.optimizer = "adadelta"  # "Adadelta (Zeiler, 2012) (eps = 1e-6 and rho = 0.95)"
    train.schedule = "constant"
    train.learning_rate = 1.0  # AdaDelta has no learning rate of its own; 1.0 leaves it unscaled
    train.adadelta_rho = 0.95
    train.adadelta_eps = 1e-6
    train.clip_grad_norm = (
        1.0  # "normalized ... to have a norm of at most a predefined threshold of 1"
    )
    train.label_smoothing = 0.0
    config.checkpoint.every_steps = 5000
    return config
