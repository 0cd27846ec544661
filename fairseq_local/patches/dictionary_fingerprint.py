"""Every checkpoint records which dictionaries it was trained with, and is refused with other ones.

What it changes: ``Trainer.save_checkpoint`` (adds the dictionaries' fingerprints to a checkpoint's
extra state).  For whom: every run, fairseq's own models included: a safety change that keeps the
weights and every number of the run as fairseq's (the log says once what it adds); the checks apply
to every load (:mod:`checkpoint_fit`), and a checkpoint without a fingerprint is loaded as fairseq
loads it.  Why:

A model's embedding and output rows are indexed by its dictionaries' entries.  fairseq notices
other dictionaries only when their size differs (``size mismatch`` in ``load_state_dict``): a
checkpoint decoded with the dictionary of another corpus of the same size (two ``--nwords 8000``
corpora, two sentencepiece models of one ``--bpe-size``) maps every word to another row and
"translates" with exit status 0.  :func:`install` layers ``Trainer.save_checkpoint`` (:mod:`fairseq_local.hook_points`) to store, in
every checkpoint's extra state (``dictionaries``), the size and a SHA-256 of the entries in order
of each dictionary of the task (``source`` and ``target``; a language model's input and output
dictionaries).  Wherever a checkpoint meets a data directory (``fairseq-generate``,
``-interactive``, ``-eval-lm``, ``-validate``, the hub, resuming or fine-tuning in fairseq-train:
see ``checkpoint_fit.py``), :func:`fairseq_local.data.checkpoint_dictionaries.check` compares them with the task's dictionaries and stops
with one line naming the checkpoint and the data directory.  A checkpoint written before this
patch has no fingerprint and is used as before (its size is still checked by fairseq).

Next to them (``corpus``) a checkpoint trained on a data directory made by ``scripts/preprocess.sh``
stores that directory and its corpus fingerprint (the training text's hash, from ``corpus.json``:
:mod:`fairseq_local_core.corpus_manifest`).  Dictionaries can match across corpora (the same
sentencepiece model, a shared vocabulary): decoding or resuming with the data directory of another
corpus is then a warning naming both (not an error: the model can decode it).
"""
import logging

from fairseq_local import hook_points, ownership
from fairseq_local.data.checkpoint_dictionaries import CORPUS_KEY, KEY, task_corpus, task_fingerprints

logger = logging.getLogger(__name__)

_STATE = {}


def install():
    if _STATE:
        return

    def save_checkpoint(save, self, filename, extra_state):
        if extra_state is not None:
            prints = task_fingerprints(self.task)
            if prints:
                extra_state[KEY] = prints
                if "said" not in _STATE and not ownership.trainer_is_ours(self):
                    _STATE["said"] = True
                    logger.info(f"checkpoints record the fingerprints of their dictionaries (extra_state['{KEY}']), "
                                "so that other dictionaries of the same size are refused when they are loaded")
            corpus = task_corpus(self.task)
            if corpus:
                extra_state[CORPUS_KEY] = corpus
        return save(self, filename, extra_state)

    _STATE["installed"] = True
    hook_points.add(hook_points.TRAINER_SAVE_CHECKPOINT, save_checkpoint)
