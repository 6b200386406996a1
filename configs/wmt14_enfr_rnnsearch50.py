"""RNNsearch-50 on WMT14 English→French (Bahdanau et al. 2015, Table 1).

    python train.py --config configs/wmt14_enfr_rnnsearch50.py --workdir runs/enfr_rnnsearch50
    python eval.py --workdir runs/enfr_rnnsearch50

Paper: 26.75 BLEU on newstest2014 (all sentences; 34.16 on sentences without unknown words:
eval.py's bleu_no_unk), 28.45 for RNNsearch-50* trained longer. Word-level vocabularies of 30,000
entries per language (the 29,996 most frequent words and 4 special ids), all others mapped to UNK;
"-50": training sentences of at most 50 words. Words are Moses tokens (the paper's pipeline ran
Moses' tokenizer.perl before counting them). Trained ~5 days with AdaDelta on minibatches of 80
sentences; the paper reports time, not updates.
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
    data.tokenizer = "word"  # Moses words: 29,996 most frequent + 4 special ids; the rest UNK
    data.vocab_size = 30000  # per language
    data.shared_vocab = False  # one shortlist per language
    data.max_length = 51  # at most 50 words, plus EOS
    data.sentences_per_batch = 80  # "minibatch of 80 sentences" (Appendix B), exactly
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
    train.dtype = "auto"  # bfloat16 on a GPU or TPU (float32 parameters and loss); CPU: float32
    config.checkpoint.every_steps = 5000

    # Plain beam search, no length normalisation (alpha 0): the paper describes no penalty and the
    # authors' GroundHog sample.py normalises only when asked (--normalize). The paper gives no
    # beam width; 10 is what scripts around GroundHog pass (--beam-size 10) and lies in the 5-10
    # range Britz et al. (2017) found best.
    config.decode.beam_size = 10
    config.decode.alpha = 0.0
    return config
