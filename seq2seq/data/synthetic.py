"""A seeded toy translation task: English-like source, German-like target, no download.

Every sentence comes from a small grammar that generates the source and the target side by side, so
each pair has exactly one correct translation, yet copying words in order is never enough:

* ``adjective_noun_reordering``: source ``DET ADJ NOUN`` becomes target ``DET NOUN ADJ``.
* ``verb_final``: in a ``that`` clause (target ``dass``) and in a relative clause (``which``) the
  target verb moves to the end, past the whole object phrase with its adjectives and PPs.
* ``agreement``: target determiners, adjectives and relative pronouns take the gender of their
  noun (a lexical fact of the target), and every target verb takes the number of its subject;
  the source marks neither ("the", "big", "which" and "saw" never change).
* ``one_to_two``: a separable verb, ``called`` -> ``rief an`` (the particle stays next to it).
* ``two_to_one``: a compound noun (``apple tree`` -> ``apfelbaum``), or a preposition fused with
  the dative article (``in the`` -> ``im`` before a masculine or neuter singular noun).

Sentences are one clause or two joined by ``and``/``but``; any noun phrase may carry a PP or a
relative clause and a verb of saying takes a ``that`` clause, nested up to ``_MAX_DEPTH`` deep.

Lengths: ``"grammar"`` keeps the lengths the grammar draws (mostly under 20 words; sentences
outside ``min_words..max_words`` are redrawn). ``"uniform"`` spreads them evenly for BLEU by
sentence length (Bahdanau et al. 2015, Figure 2, up to 60 words): each sentence first draws its
source length uniformly from ``min_words..max_words``, then joins clauses with ``and``/``but``
until it has exactly that many words, so every length, and every 10-word bucket, is as common as
any other, in every split.

Worked example (a ``that`` clause whose object carries an adjective and a PP)::

    source: the old man said that the dogs chased a red car in the garden
    target: der mann alter sagte dass die hunde ein auto rotes im garten jagten

    der     "the": nominative, masculine because target "mann" is (agreement)
    mann    "man" (lexicon)
    alter   "old" + masculine ending -er, placed after its noun (agreement, reordering)
    sagte   "said": singular because "man" is (agreement)
    dass    "that": opens a verb-final clause
    die     "the": plural because "dogs" is (agreement)
    hunde   "dogs" (lexicon)
    ein     "a": neuter because target "auto" is (agreement)
    auto    "car" (lexicon)
    rotes   "red" + neuter ending -es, placed after its noun (agreement, reordering)
    im      "in the": "in" + dative masculine "dem", fused into one word (two_to_one)
    garten  "garden" (lexicon)
    jagten  "chased": plural for "dogs", moved past "ein auto rotes im garten" (verb_final)

Splits: each distinct source sentence belongs to one split, fixed by a stable hash of the sentence
and the seed, so train, validation and test never share a source sentence, whatever their sizes.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass

SPLITS = ("train", "validation", "test")
DEFAULT_SIZES = {"train": 20000, "validation": 500, "test": 500}
PHENOMENA = frozenset(
    {"adjective_noun_reordering", "verb_final", "one_to_two", "two_to_one", "agreement"}
)
MIN_WORDS, MAX_WORDS = 3, 40  # default source length bounds, in words
LENGTH_DISTRIBUTIONS = ("grammar", "uniform")  # see the module docstring

_MAX_DEPTH = 3  # how deep clauses and noun phrases may nest
_P_PLURAL, _P_COMPOUND, _P_ADJECTIVE = 0.35, 0.1, 0.3
_P_PP, _P_RELATIVE, _P_THAT, _P_INTRANSITIVE = 0.2, 0.1, 0.2, 0.2
_P_INTRANSITIVE_PP, _P_CONJUNCTION = 0.5, 0.25
_MAX_SPARE = 32  # clauses of one length kept for later sentences (uniform lengths)
# Share of distinct source sentences held out for validation and test (each); the rest is train.
_HELD_OUT_PERCENT = 10


@dataclass(frozen=True)
class Pair:
    """One sentence pair and the phenomena its translation needed."""

    source: str
    target: str
    phenomena: frozenset[str]


@dataclass(frozen=True)
class Noun:
    """A lexicon entry; ``source`` and ``target`` are (singular, plural); gender is m, f or n."""

    source: tuple[str, str]
    target: tuple[str, str]
    gender: str


def _rows(table: str) -> list[list[str]]:
    # Entries are separated by commas or newlines; "_" joins the words of one field ("rief_an").
    entries = [e.split() for e in table.replace("\n", ",").split(",") if e.strip()]
    return [[w.replace("_", " ") for w in e] for e in entries]


# Source singular, source plural, target singular, target plural, gender of the target noun.
_NOUN_TABLE = """
    dog dogs hund hunde m, man men mann maenner m, tree trees baum baeume m
    table tables tisch tische m, apple apples apfel aepfel m, bird birds vogel voegel m
    king kings koenig koenige m, garden gardens garten gaerten m
    cat cats katze katzen f, woman women frau frauen f, door doors tuer tueren f
    school schools schule schulen f, flower flowers blume blumen f
    city cities stadt staedte f, mouse mice maus maeuse f, lamp lamps lampe lampen f
    house houses haus haeuser n, child children kind kinder n, book books buch buecher n
    horse horses pferd pferde n, car cars auto autos n, picture pictures bild bilder n
    boat boats boot boote n, bread breads brot brote n
"""
# Two source words, one target word (two_to_one); the gender is that of the head noun.
_COMPOUND_TABLE = """
    apple_tree apple_trees apfelbaum apfelbaeume m
    flower_garden flower_gardens blumengarten blumengaerten m
    house_door house_doors haustuer haustueren f, table_lamp table_lamps tischlampe tischlampen f
    dog_house dog_houses hundehaus hundehaeuser n, bird_house bird_houses vogelhaus vogelhaeuser n
    school_book school_books schulbuch schulbuecher n
    picture_book picture_books bilderbuch bilderbuecher n
"""
# Determiner forms by agreement class m, f, n, pl: nominative (also used for objects), then dative
# (after a preposition); "-" marks a class the determiner cannot take ("a" has no plural).
_DETERMINER_TABLE = """
    the der die das die dem der dem den
    a ein eine ein - einem einer einem -
    this dieser diese dieses - diesem dieser diesem -
    these - - - diese - - - diesen
    my mein meine mein meine meinem meiner meinem meinen
"""
# Verbs are past tense, so the source never shows the subject's number: (singular, plural) forms.
_TRANSITIVE_TABLE = """
    saw sah sahen, liked mochte mochten, found fand fanden, chased jagte jagten
    helped half halfen, heard hoerte hoerten, followed folgte folgten, painted malte malten
    visited besuchte besuchten, fed fuetterte fuetterten, carried trug trugen
    called rief_an riefen_an, opened machte_auf machten_auf, collected holte_ab holten_ab
    woke weckte_auf weckten_auf, cleaned raeumte_auf raeumten_auf
"""
_SAYING_TABLE = """
    said sagte sagten, thought dachte dachten, knew wusste wussten, hoped hoffte hofften
"""
_INTRANSITIVE_TABLE = """
    slept schlief schliefen, laughed lachte lachten, waited wartete warteten
    played spielte spielten, sang sang sangen
"""
_ADJECTIVE_TABLE = """
    big gross, small klein, old alt, young jung, red rot, green gruen, blue blau, happy froh
    fast schnell, new neu, tired muede, quiet still
"""
_CLASSES = ("m", "f", "n", "pl")  # agreement classes: the three genders (singular) and plural


def _determiner_forms(row: list[str]) -> dict[str, dict[str, str]]:
    return {
        case: {c: w for c, w in zip(_CLASSES, row[i : i + 4], strict=True) if w != "-"}
        for case, i in (("nom", 1), ("dat", 5))
    }


NOUNS = tuple(Noun((a, b), (c, d), g) for a, b, c, d, g in _rows(_NOUN_TABLE))
COMPOUNDS = tuple(Noun((a, b), (c, d), g) for a, b, c, d, g in _rows(_COMPOUND_TABLE))
ADJECTIVES = dict(_rows(_ADJECTIVE_TABLE))  # source -> target stem; the ending agrees
_ADJECTIVE_ENDINGS = {"m": "er", "f": "e", "n": "es", "pl": "en"}
DETERMINERS = {row[0]: _determiner_forms(row) for row in _rows(_DETERMINER_TABLE)}
PREPOSITIONS = {"with": "mit", "near": "bei", "from": "von", "in": "in", "behind": "hinter"}
FUSED = {("in", "dem"): "im", ("bei", "dem"): "beim", ("von", "dem"): "vom"}
FUNCTION_WORDS = {"and": "und", "but": "aber", "that": "dass"}  # "which" agrees, see DETERMINERS
TRANSITIVE_VERBS = {s: (sg, pl) for s, sg, pl in _rows(_TRANSITIVE_TABLE)}
SAYING_VERBS = {s: (sg, pl) for s, sg, pl in _rows(_SAYING_TABLE)}
INTRANSITIVE_VERBS = {s: (sg, pl) for s, sg, pl in _rows(_INTRANSITIVE_TABLE)}
VERBS = {**TRANSITIVE_VERBS, **SAYING_VERBS, **INTRANSITIVE_VERBS}

_DETERMINERS_FOR = {c: [d for d, f in DETERMINERS.items() if c in f["nom"]] for c in _CLASSES}
_Words = tuple[list[str], list[str]]  # (source words, target words)


def adjective_form(source_adjective: str, agreement_class: str) -> str:
    """Target form of an adjective for a noun of class m, f, n (singular) or pl."""
    stem = ADJECTIVES[source_adjective]
    return stem.removesuffix("e") + _ADJECTIVE_ENDINGS[agreement_class]


def _noun_phrase(
    rng: random.Random, ph: set[str], depth: int, case: str
) -> tuple[list[str], list[str], str]:
    """DET [ADJ] NOUN [PP | relative clause]; returns source, target and the agreement class."""
    plural = rng.random() < _P_PLURAL
    is_compound = rng.random() < _P_COMPOUND
    noun = rng.choice(COMPOUNDS if is_compound else NOUNS)
    cls = "pl" if plural else noun.gender
    det = rng.choice(_DETERMINERS_FOR[cls])
    src, tgt = [det], [DETERMINERS[det][case][cls], noun.target[int(plural)]]
    ph.add("agreement")  # the determiner's form comes from the target noun's gender
    if is_compound:
        ph.add("two_to_one")
    if rng.random() < _P_ADJECTIVE:
        adjective = rng.choice(list(ADJECTIVES))
        src.append(adjective)
        tgt.append(adjective_form(adjective, cls))  # after the noun, unlike the source
        ph.add("adjective_noun_reordering")
    src += noun.source[int(plural)].split()
    # A PP *or* a relative clause, never both: "the trees from the mouse which slept" must have one
    # reading, since the relative pronoun and the verb agree with whichever noun "which" refers to.
    roll = rng.random()
    if depth < _MAX_DEPTH and roll < _P_PP:
        pp_src, pp_tgt = _prepositional_phrase(rng, ph, depth + 1)
        src, tgt = src + pp_src, tgt + pp_tgt
    elif depth < _MAX_DEPTH and roll < _P_PP + _P_RELATIVE:
        # The relative pronoun is the nominative article of the antecedent's class; verb final.
        rel_src, rel_tgt = _predicate(rng, ph, depth + 1, cls, verb_final=True)
        src, tgt = src + ["which", *rel_src], tgt + [DETERMINERS["the"]["nom"][cls], *rel_tgt]
    return src, tgt, cls


def _prepositional_phrase(rng: random.Random, ph: set[str], depth: int) -> _Words:
    """PREP NP with a dative NP; "in/near/from the" fuse into one target word when they can."""
    prep = rng.choice(list(PREPOSITIONS))
    src, tgt, _ = _noun_phrase(rng, ph, depth, "dat")
    fused = FUSED.get((PREPOSITIONS[prep], tgt[0]))
    if fused:
        ph.add("two_to_one")
        return [prep, *src], [fused, *tgt[1:]]
    return [prep, *src], [PREPOSITIONS[prep], *tgt]


def _predicate(
    rng: random.Random, ph: set[str], depth: int, subject: str, verb_final: bool
) -> _Words:
    """Verb and what follows it; ``subject`` is the subject's class, which picks the verb form."""
    number = int(subject == "pl")
    ph.add("agreement")
    if verb_final:
        ph.add("verb_final")
    roll = rng.random()
    if depth < _MAX_DEPTH and roll < _P_THAT:
        verb = rng.choice(list(SAYING_VERBS))
        sub_src, sub_tgt = _clause(rng, ph, depth + 1, verb_final=True)
        # The complement clause follows the verb in both languages (German extraposes it).
        return [verb, "that", *sub_src], [SAYING_VERBS[verb][number], "dass", *sub_tgt]
    if roll < _P_THAT + _P_INTRANSITIVE:
        verb = rng.choice(list(INTRANSITIVE_VERBS))
        rest_src, rest_tgt = [], []
        if depth < _MAX_DEPTH and rng.random() < _P_INTRANSITIVE_PP:
            rest_src, rest_tgt = _prepositional_phrase(rng, ph, depth + 1)
        verb_tgt = [INTRANSITIVE_VERBS[verb][number]]
    else:
        verb = rng.choice(list(TRANSITIVE_VERBS))
        rest_src, rest_tgt, _ = _noun_phrase(rng, ph, depth + 1, "nom")
        verb_tgt = TRANSITIVE_VERBS[verb][number].split()
        if len(verb_tgt) == 2:
            ph.add("one_to_two")  # separable verb; the particle stays next to the verb
    if verb_final:
        return [verb, *rest_src], rest_tgt + verb_tgt
    return [verb, *rest_src], verb_tgt + rest_tgt


def _clause(rng: random.Random, ph: set[str], depth: int, verb_final: bool) -> _Words:
    subj_src, subj_tgt, cls = _noun_phrase(rng, ph, depth, "nom")
    pred_src, pred_tgt = _predicate(rng, ph, depth, cls, verb_final)
    return subj_src + pred_src, subj_tgt + pred_tgt


def generate_pair(
    rng: random.Random, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS
) -> Pair:
    """Draws one sentence pair of ``min_words``..``max_words`` source words, as the grammar does.

    Args:
        rng: The only source of randomness, so a seeded ``random.Random`` gives a fixed pair.
        min_words: Shorter draws are redrawn.
        max_words: Longer draws are redrawn (under 1% of draws exceed the default 40).

    Returns:
        The pair, with the phenomena its translation needed.
    """
    while True:  # rejection keeps the grammar simple
        ph: set[str] = set()
        src, tgt = _clause(rng, ph, 0, verb_final=False)
        if rng.random() < _P_CONJUNCTION:
            conj = rng.choice(["and", "but"])
            more_src, more_tgt = _clause(rng, ph, 0, verb_final=False)
            src, tgt = [*src, conj, *more_src], [*tgt, FUNCTION_WORDS[conj], *more_tgt]
        if min_words <= len(src) <= max_words:
            return Pair(" ".join(src), " ".join(tgt), frozenset(ph))


_Clause = tuple[list[str], list[str], frozenset[str]]  # source, target, phenomena


def generate_pair_of_length(
    rng: random.Random, words: int, spare: dict[int, list[_Clause]] | None = None
) -> Pair:
    """Draws a pair whose source has exactly ``words`` words (at least 3).

    Clauses are joined by ``and``/``but``; each new clause must fill the rest exactly or leave room
    for another (a conjunction and a clause of at least 3 words). Clauses that do not fit wait in
    ``spare`` (by length) for a later sentence that needs exactly their length, which saves about
    four in five clause draws; pass the same dict for every sentence of a split.
    """
    spare = {} if spare is None else spare
    ph: set[str] = set()
    src: list[str] = []
    tgt: list[str] = []
    while len(src) < words:
        remaining = words - len(src) - (1 if src else 0)  # a conjunction precedes later clauses
        if spare.get(remaining):
            clause_src, clause_tgt, clause_ph = spare[remaining].pop(0)
        else:
            drawn: set[str] = set()
            clause_src, clause_tgt = _clause(rng, drawn, 0, verb_final=False)
            clause_ph = frozenset(drawn)
            if len(clause_src) != remaining and len(clause_src) > remaining - 4:
                waiting = spare.setdefault(len(clause_src), [])
                if len(waiting) < _MAX_SPARE:
                    waiting.append((clause_src, clause_tgt, clause_ph))
                continue
        if src:
            conj = rng.choice(["and", "but"])
            src, tgt = [*src, conj], [*tgt, FUNCTION_WORDS[conj]]
        src, tgt = src + clause_src, tgt + clause_tgt
        ph |= clause_ph
    return Pair(" ".join(src), " ".join(tgt), frozenset(ph))


def _split_of(source: str, seed: int) -> str:
    # A stable hash (Python's hash() is salted per process) assigns each sentence to one split.
    digest = hashlib.blake2b(f"{seed}\t{source}".encode(), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % 100
    if bucket < _HELD_OUT_PERCENT:
        return "test"
    return "validation" if bucket < 2 * _HELD_OUT_PERCENT else "train"


def load_split_pairs(
    split: str,
    num_examples: int | None = None,
    seed: int = 0,
    lengths: str = "grammar",
    min_words: int = MIN_WORDS,
    max_words: int = MAX_WORDS,
) -> list[Pair]:
    """Like ``load_split`` but returns ``Pair`` objects, with their phenomena."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits are {', '.join(SPLITS)}")
    if lengths not in LENGTH_DISTRIBUTIONS:
        raise ValueError(
            f"unknown lengths {lengths!r}; use one of {', '.join(LENGTH_DISTRIBUTIONS)}"
        )
    if not 3 <= min_words <= max_words:
        raise ValueError(f"need 3 <= min_words <= max_words, not {min_words} and {max_words}")
    n = DEFAULT_SIZES[split] if num_examples is None else num_examples
    return list(_generated(split, n, seed, lengths, min_words, max_words))


@functools.lru_cache(maxsize=8)
def _generated(
    split: str, n: int, seed: int, lengths: str, min_words: int, max_words: int
) -> tuple[Pair, ...]:
    # Kept per process: trials, seeds and evaluations of one comparison read the same splits, and
    # drawing 20,000 training pairs from the grammar takes seconds of pure Python.
    rng = random.Random(f"seq2seq.synthetic/{split}/{seed}")  # str seeds are stable across runs
    pairs: list[Pair] = []
    seen: set[str] = set()
    spare: dict[int, list[_Clause]] = {}
    while len(pairs) < n:
        if lengths == "uniform":
            pair = generate_pair_of_length(rng, rng.randint(min_words, max_words), spare)
        else:
            pair = generate_pair(rng, min_words, max_words)
        if pair.source not in seen and _split_of(pair.source, seed) == split:
            seen.add(pair.source)
            pairs.append(pair)
    return tuple(pairs)


def load_split(
    split: str,
    num_examples: int | None = None,
    seed: int = 0,
    lengths: str = "grammar",
    min_words: int = MIN_WORDS,
    max_words: int = MAX_WORDS,
) -> list[tuple[str, str]]:
    """Loads one split of the synthetic task.

    Args:
        split: One of ``SPLITS``.
        num_examples: How many pairs; ``None`` means ``DEFAULT_SIZES[split]``. A smaller request is
            a prefix of a larger one.
        seed: Fixes the sentences and the split assignment; splits are disjoint for one seed.
        lengths: ``"grammar"`` or ``"uniform"`` source lengths (see the module docstring).
        min_words: Shortest source sentence, in words (at least 3).
        max_words: Longest source sentence, in words.

    Returns:
        ``(source, target)`` pairs of lower-case, space-separated words, distinct source sentences.

    Raises:
        ValueError: If ``split`` or ``lengths`` is unknown, or the word bounds are impossible.
    """
    pairs = load_split_pairs(split, num_examples, seed, lengths, min_words, max_words)
    return [(p.source, p.target) for p in pairs]
