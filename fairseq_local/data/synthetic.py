"""A synthetic parallel corpus with real translation structure, for demos and tests.

The "source language" is SVO with post-nominal adjectives; the "target language" is SOV with
pre-nominal adjectives and a prepositional phrase moved before the object.  Both mark number:

* source: determiner ``le``/``les``, plural nouns and adjectives end in ``-s``, the verb agrees with
  its subject (``-e`` singular, ``-ent`` plural);
* target: determiner ``ta``/``tai``, plural nouns end in ``-i``, the verb agrees with its subject
  (``-u`` singular, ``-un`` plural), adjectives do not inflect.

So a model must learn a lexicon, long-distance reordering (the verb moves to the end, the PP jumps
over the object), local reordering (adjective-noun swap) and agreement that is not copied from a
single source position (the target verb's suffix depends on the source *subject*).  Words are
pseudo-words built from syllables, so BPE has real sub-word structure to find.

    >>> c = SyntheticTranslationCorpus(seed=0)
    >>> src, tgt = c.sample(1)[0]
"""
import os
import random
from typing import List, Tuple

from fairseq_local_core.file_io import write_lines

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def _pseudo_words(rng: random.Random, n: int, taken: set, min_syl=2, max_syl=3) -> List[str]:
    words = []
    while len(words) < n:
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(min_syl, max_syl)))
        if w not in taken:
            taken.add(w)
            words.append(w)
    return words


class SyntheticTranslationCorpus:
    """Deterministic (given ``seed``) generator of (source, target) sentence pairs."""

    def __init__(self, seed: int = 0, n_nouns=120, n_verbs=30, n_adjs=30, n_preps=6, max_len=14,
                 lexicon_seed: int = 1234):
        lex = random.Random(lexicon_seed)  # the languages themselves do not depend on ``seed``
        taken: set = set()
        self.src_nouns = _pseudo_words(lex, n_nouns, taken)
        self.tgt_nouns = _pseudo_words(lex, n_nouns, taken)
        self.src_verbs = _pseudo_words(lex, n_verbs, taken)
        self.tgt_verbs = _pseudo_words(lex, n_verbs, taken)
        self.src_adjs = _pseudo_words(lex, n_adjs, taken)
        self.tgt_adjs = _pseudo_words(lex, n_adjs, taken)
        self.src_preps = _pseudo_words(lex, n_preps, taken, 1, 1)
        self.tgt_preps = _pseudo_words(lex, n_preps, taken, 1, 2)
        self.rng = random.Random(seed)
        self.max_len = max_len

    def _noun_phrase(self, max_adjs: int):
        r = self.rng
        noun = r.randrange(len(self.src_nouns))
        plural = r.random() < 0.4
        adjs = [r.randrange(len(self.src_adjs)) for _ in range(r.randint(0, max_adjs))]
        src = ["les" if plural else "le", self.src_nouns[noun] + ("s" if plural else "")]
        src += [self.src_adjs[a] + ("s" if plural else "") for a in adjs]
        tgt = ["tai" if plural else "ta"] + [self.tgt_adjs[a] for a in adjs]
        tgt += [self.tgt_nouns[noun] + ("i" if plural else "")]
        return src, tgt, plural

    def pair(self) -> Tuple[str, str]:
        while True:
            r = self.rng
            subj_s, subj_t, subj_pl = self._noun_phrase(2)
            obj_s, obj_t, _ = self._noun_phrase(1)
            verb = r.randrange(len(self.src_verbs))
            src = subj_s + [self.src_verbs[verb] + ("ent" if subj_pl else "e")] + obj_s
            tgt_pp: List[str] = []
            if r.random() < 0.5:
                prep = r.randrange(len(self.src_preps))
                pp_s, pp_t, _ = self._noun_phrase(1)
                src += [self.src_preps[prep]] + pp_s
                tgt_pp = [self.tgt_preps[prep]] + pp_t
            tgt = subj_t + tgt_pp + obj_t + [self.tgt_verbs[verb] + ("un" if subj_pl else "u")]
            if len(src) <= self.max_len:
                return " ".join(src), " ".join(tgt)

    def sample(self, n: int) -> List[Tuple[str, str]]:
        return [self.pair() for _ in range(n)]


def write_corpus(out_dir: str, sizes=(("train", 4000), ("valid", 200), ("test", 200)), seed=0,
                 src="src", tgt="tgt", **language):
    """Write ``{split}.{src,tgt}`` files atomically (each file appears only when complete);
    ``language`` (``n_nouns``, ``n_verbs``, ``n_adjs``, ``max_len``) sizes the two languages."""
    os.makedirs(out_dir, exist_ok=True)
    corpus = SyntheticTranslationCorpus(seed=seed, **language)
    for split, n in sizes:
        pairs = corpus.sample(n)
        for side, idx in ((src, 0), (tgt, 1)):
            write_lines(os.path.join(out_dir, f"{split}.{side}"), (p[idx] for p in pairs))
