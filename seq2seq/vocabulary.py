"""The special token ids every tokenizer, model and decoder in the package agrees on."""

PAD_ID = 0  # padding; carries no loss and is never attended to
UNK_ID = 1  # a piece outside the vocabulary
BOS_ID = 2  # beginning of sentence: the decoder's first input
EOS_ID = 3  # end of sentence: the last target token
SPECIAL_TOKENS = ("pad", "unk", "bos", "eos")  # by id: every vocabulary holds them first
