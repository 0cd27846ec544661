"""Python API: ``Model.from_pretrained(dir, checkpoint_file=..., ...)`` for every model of the plugin.

fairseq's hub interface (``fairseq.hub_utils.GeneratorHubInterface``: ``translate``, ``sample``,
``score``, ``generate``, ``encode``/``decode``) loads a checkpoint with its task, dictionaries and
optional tokenizer / BPE and runs fairseq's ``SequenceGenerator`` on raw text. fairseq's
``BaseFairseqModel.from_pretrained`` already serves plain translation and ``language_modeling``
checkpoints; :func:`from_pretrained` adds what two of our tasks need:

* ``stateful_language_modeling`` (the MC-RNN and parallel-cell LMs) batches one contiguous token
  stream and has no per-sentence dataset for inference. The interface samples and scores with
  fairseq's ``language_modeling`` task over the checkpoint's dictionary: every sentence starts
  from a zero state (the state at the start of a stream), preceded by the end-of-sentence token as
  in training, where each line of the stream ends in one.
* ``lattice_translation`` reads word lattices, not word ids. :class:`LatticeHubInterface` builds
  each input sentence's lattice with the task's segmenters (``lattice_segmenters``, those of the
  training run unless overridden) or reads a line in the lattice text format of
  :mod:`fairseq_local_core.lattice`.

Raw text needs the BPE the training text was cut with. A data directory made by
``scripts/preprocess.sh`` holds it in ``bpe/`` (``spm.<joint|lang>.model`` or
``codes.<joint|lang>``): when no ``bpe=`` is given, the interface applies that one, as
``generate.sh`` finds it; a ``bpe=`` of another kind, or a model file other than the data
directory's (or, without ``bpe/``, of another kind than the dictionary's pieces), is one line
(:func:`data_bpe`).  Its ``corpus.json`` (:mod:`fairseq_local_core.corpus_manifest`) says how the
text was normalised before BPE: Moses-tokenized text is tokenized the same way and lowercased text
lowercased (:func:`data_tokenizer`; a ``tokenizer=`` other than the corpus's is a warning).

``score`` is fairseq's language-model scoring; for translation checkpoints it stops with one line
(fairseq's ``score`` has no target side for them: use ``fairseq-generate --score-reference``).
The plugin installs :func:`from_pretrained` as the classmethod ``from_pretrained`` of each of its
model classes (``fairseq_local/patches/hub_interface.py``); it also works for fairseq's own
classes (``fairseq_local.hub.from_pretrained(...)``).
"""
import filecmp
import glob
import os
import warnings
from argparse import Namespace
from typing import List

import sentencepiece as spm
import torch
from fairseq import hub_utils
from fairseq.data import encoders
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from fairseq.tasks.translation import TranslationTask
from omegaconf import OmegaConf

from fairseq_local_core import corpus_manifest
from fairseq_local.data.lattice_dataset import pack_lattices
from fairseq_local.data.text_input import lowercase_input
from fairseq_local_core.errors import CheckpointError, UserError
from fairseq_local.tasks.lattice_translation import LatticeTranslationTask
from fairseq_local.tasks.stateful_language_modeling import StatefulLanguageModelingTask

DEFAULT_CHECKPOINT = "checkpoint_best.pt"  # what fairseq-train writes (fairseq's own default: model.pt)


class WrongModelClassError(CheckpointError, TypeError):
    """``Model.from_pretrained`` of a checkpoint that holds another model class."""


class NoScoreError(UserError, NotImplementedError):
    """``score()`` of a translation model."""


class InputTypeError(UserError, TypeError):
    """``translate``/``sample``/``score`` given something other than a sentence or a list of them."""


class BPEMismatchError(UserError, ValueError):
    """A ``bpe=`` that is not the one the data directory's text was cut with."""


class InputError(UserError, ValueError):
    """An input sentence the model cannot serve: empty, or longer than ``max_tokens`` allows."""


def check_sentences(method: str, sentences, empty_ok: bool = True):
    """``sentences`` (a ``str`` or a list/tuple of ``str``) for ``method``; an empty or blank one is
    refused unless ``empty_ok`` (``score``: an empty sentence has nothing to score).  A blank source
    of ``translate``/``sample`` translates into an empty string (:meth:`HubInterface.sample`)."""
    batch = [sentences] if isinstance(sentences, str) else sentences
    if not isinstance(batch, (list, tuple)) or not all(isinstance(x, str) for x in batch):
        bad = batch if not isinstance(batch, (list, tuple)) else next(x for x in batch if not isinstance(x, str))
        raise InputTypeError(f"{method}(): expected a sentence (str) or a list of sentences, got "
                             f"{type(bad).__name__} {repr(bad)[:40]}")
    blank = [i for i, x in enumerate(batch) if not x.strip()]
    if blank and not empty_ok:
        which = "the sentence" if isinstance(sentences, str) else f"sentence {blank[0] + 1} of {len(batch)}"
        raise InputError(f"{method}(): {which} is empty: there is nothing to {method}; leave out blank lines")


class HubInterface(GeneratorHubInterface):
    """fairseq's ``GeneratorHubInterface``; batches are built without torch's pin-memory warning on
    CPU-only machines, and ``score`` refuses translation checkpoints with one line.  ``translate``,
    ``sample`` and ``score`` refuse in one line what fairseq would fail on with a bare ``TypeError``
    or an ``AssertionError`` (not a ``str`` or a list of them; longer than ``max_tokens``) or answer
    silently (an empty sentence scored as nothing): :func:`check_sentences`; a blank source
    translates into "" (fairseq would decode ``max_len_b`` tokens from nothing)."""

    corpus_lowercase = False  # the data directory's corpus.json says its text was lowercased (data_tokenizer)

    def tokenize(self, sentence: str) -> str:
        """fairseq's ``--tokenizer`` step, after lowercasing when the training text was lowercased
        (:func:`fairseq_local.data.text_input.lowercase_input`; the corpus.json of the data directory,
        when it has one, says so: :func:`data_tokenizer`)."""
        text = super().tokenize(lowercase_input(sentence, self.src_dict))
        return text.lower() if self.corpus_lowercase else text

    def _is_translation(self) -> bool:
        return isinstance(self.task, TranslationTask)

    def translate(self, sentences, beam: int = 5, verbose: bool = False, **kwargs):
        check_sentences("translate", sentences)
        return super().translate(sentences, beam, verbose, **kwargs)

    def sample(self, sentences, beam: int = 1, verbose: bool = False, **kwargs):
        """fairseq's ``sample``; a blank source of a translation model translates into "" (fairseq
        would decode ``max_len_b`` tokens from nothing), as a blank line of ``fairseq-interactive``
        gives no translation.  A language model's empty prompt samples from scratch."""
        check_sentences("sample", sentences)
        if not self._is_translation():
            return super().sample(sentences, beam, verbose, **kwargs)
        if isinstance(sentences, str):
            return super().sample(sentences, beam, verbose, **kwargs) if sentences.strip() else ""
        kept = [x for x in sentences if x.strip()]
        out = iter(super().sample(kept, beam, verbose, **kwargs) if kept else [])
        return [next(out) if x.strip() else "" for x in sentences]

    def _check_lengths(self, lengths):
        """fairseq's batching asserts on an input longer than ``max_tokens`` (from the checkpoint's
        training run unless given to ``from_pretrained``); one line instead."""
        max_tokens = self.cfg.dataset.max_tokens
        if max_tokens:
            for i, n in enumerate(int(n) for n in lengths):
                if n > max_tokens:
                    raise InputError(f"sentence {i + 1} has {n} tokens, more than max_tokens={max_tokens} (the "
                                     f"checkpoint's --max-tokens): pass max_tokens={n} or more to from_pretrained, "
                                     "or split the sentence")

    def _build_batches(self, tokens, skip_invalid_size_inputs):
        self._check_lengths([t.numel() for t in tokens])
        with warnings.catch_warnings():  # fairseq's iterators always ask for pinned memory
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            return super()._build_batches(tokens, skip_invalid_size_inputs)

    def score(self, sentences, replace_newline_with_eos: bool = False, **kwargs):
        check_sentences("score", sentences, empty_ok=False)
        if isinstance(self.task, TranslationTask):
            raise NoScoreError(
                f"score(): {type(self.models[0]).__name__} is a translation model; score() scores sentences "
                "under a language model (fairseq-generate --score-reference scores given translations)")
        return super().score(sentences, replace_newline_with_eos=replace_newline_with_eos, **kwargs)


class LatticeHubInterface(HubInterface):
    """Hub interface of ``lattice_translation`` checkpoints: a raw Chinese sentence is segmented into
    a word lattice by the task's ``lattice_segmenters`` (the first gives the primary path); a line
    holding a tab is read as a lattice in the text format (characters, edges, optional path); what
    it cannot read is a one-line ``LatticeError`` (:func:`fairseq_local_core.lattice.read_input`)."""

    def encode(self, sentence: str) -> torch.LongTensor:
        """The packed lattice of ``sentence`` (raw text or a lattice line), read exactly as
        ``fairseq-interactive`` reads its input lines (``LatticeTranslationTask.input_lattice``)."""
        return pack_lattices([self.task.input_lattice(sentence, "input")], self.src_dict)[0]

    def _build_batches(self, tokens: List[torch.LongTensor], skip_invalid_size_inputs):
        # the task batches lattices by their number of characters (the first packed value)
        lengths = torch.LongTensor([int(t[0]) for t in tokens])
        self._check_lengths(lengths)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            return self.task.get_batch_iterator(
                dataset=self.task.build_dataset_for_inference(tokens, lengths),
                max_tokens=self.cfg.dataset.max_tokens, max_sentences=self.cfg.dataset.batch_size,
                max_positions=self.max_positions, ignore_invalid_inputs=skip_invalid_size_inputs,
                disable_iterator_cache=True,
            ).next_epoch_itr(shuffle=False)


def _language_modeling_task(stateful_task):
    """fairseq's ``language_modeling`` task over a ``stateful_language_modeling`` task's dictionary:
    one sentence per sample (``sample_break_mode eos``), for sampling and scoring sentences."""
    cfg = OmegaConf.structured(LanguageModelingConfig(
        data=stateful_task.cfg.data, sample_break_mode="eos", tokens_per_sample=1024,
        max_target_positions=1024, seed=1, batch_size=None, batch_size_valid=None,
        dataset_impl=None, data_buffer_size=10, tpu=False, use_plasma_view=False))
    return LanguageModelingTask(cfg, stateful_task.dictionary, stateful_task.dictionary)


def from_pretrained(model_name_or_path, checkpoint_file: str = DEFAULT_CHECKPOINT, data_name_or_path: str = ".",
                    model_class=None, **kwargs) -> GeneratorHubInterface:
    """Load ``model_name_or_path/checkpoint_file`` (``a.pt:b.pt`` for an ensemble) with the task and
    dictionaries of ``data_name_or_path`` (a binarized data directory; ``.`` = the model directory)
    and return a hub interface. Keyword arguments override the checkpoint's configuration, as in
    fairseq: ``bpe='subword_nmt', bpe_codes=...``, ``tokenizer='moses'``, ``beam=...``,
    ``lattice_segmenters='jieba'``... ``model_class`` (set by the classmethod) is checked against
    the loaded model."""
    directory = str(model_name_or_path)
    for name in checkpoint_file.split(os.pathsep):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"from_pretrained: {path}: no such checkpoint")
    data = _data_directory(directory, str(data_name_or_path))
    loaded = hub_utils.from_pretrained(directory, checkpoint_file, data, **kwargs)
    models, task, cfg = loaded["models"], loaded["task"], loaded["args"]
    if model_class is not None and not isinstance(models[0], model_class):
        raise WrongModelClassError(f"from_pretrained: {os.path.join(directory, checkpoint_file)} holds a "
                        f"{type(models[0]).__name__} model, not a {model_class.__name__}")
    if isinstance(task, StatefulLanguageModelingTask):
        task = _language_modeling_task(task)
    interface = LatticeHubInterface if isinstance(task, LatticeTranslationTask) else HubInterface
    hub = interface(cfg, task, models)
    bpe = data_bpe(data, kwargs, task)
    if bpe is not None:
        hub.bpe = bpe
    tokenizer = data_tokenizer(data, kwargs, task)
    if tokenizer is not None:
        hub.tokenizer = tokenizer
    hub.corpus_lowercase = bool(corpus_manifest.transforms(data).get("lowercase"))
    return hub


BPE_KINDS = {"sentencepiece": ("spm.", ".model", "sentencepiece_model"),
             "subword_nmt": ("codes.", "", "bpe_codes")}


def _bpe_files(data: str) -> dict:
    """``{kind: [model files]}`` of ``data/bpe/``, where ``scripts/preprocess.sh`` writes them."""
    found = {}
    for kind, (prefix, suffix, _) in BPE_KINDS.items():
        files = sorted(glob.glob(os.path.join(glob.escape(os.path.join(data, "bpe")), f"{prefix}*{suffix}")))
        if files:
            found[kind] = files
    return found


def _dictionary_kind(dictionary):
    """The BPE a dictionary's entries come from: sentencepiece (entries starting with U+2581),
    subword-nmt (entries ending in ``@@``), or None when it cannot tell."""
    words = dictionary.symbols[dictionary.nspecial:]
    if not words:
        return None
    if sum(w.startswith("\u2581") for w in words) >= 0.1 * len(words):
        return "sentencepiece"
    if sum(w.endswith("@@") for w in words) >= 0.01 * len(words):
        return "subword_nmt"
    return None


def _same_file(a: str, b: str) -> bool:
    return os.path.isfile(a) and filecmp.cmp(a, b, shallow=False)


def data_tokenizer(data: str, kwargs: dict, task):
    """The tokenizer the interface applies to raw text, or None to keep what fairseq built from
    ``kwargs``.  A data directory made by ``scripts/preprocess.sh`` says in its ``corpus.json`` whether
    the training text was Moses-tokenized (``--tokenize moses``): without ``tokenizer=``, raw text is
    Moses-tokenized the same way (sacremoses, XML-escaped, no aggressive dash splits) and the output
    detokenized; a ``tokenizer=`` other than the corpus's is a warning naming both."""
    corpus = corpus_manifest.transforms(data).get("tokenize")
    if corpus is None or ("tokenizer" in kwargs and kwargs["tokenizer"] is None):
        return None  # no corpus.json, or tokenizer=None: the caller gives text tokenized as the corpus
    given = kwargs.get("tokenizer")
    if given is not None:
        if str(given) != corpus:
            warnings.warn(f"from_pretrained: tokenizer={given!r}, but the training text of {data} was tokenized with "
                          f"--tokenize {corpus} (its corpus.json): input is cut otherwise than the text the model "
                          f"learnt from; leave out tokenizer= to tokenize as the corpus was", stacklevel=3)
        return None
    if corpus != "moses":
        return None
    cfg = getattr(task, "cfg", None)
    src, tgt = getattr(cfg, "source_lang", None) or "en", getattr(cfg, "target_lang", None) or "en"
    try:
        return encoders.build_tokenizer(Namespace(tokenizer="moses", moses_source_lang=src, moses_target_lang=tgt,
                                                  moses_no_dash_splits=True, moses_no_escape=False))
    except ImportError:
        warnings.warn(f"from_pretrained: the training text of {data} was Moses-tokenized (--tokenize moses), but "
                      "sacremoses is not installed: pip install sacremoses, or give Moses-tokenized text",
                      stacklevel=3)
        return None


def data_bpe(data: str, kwargs: dict, task):
    """The BPE the interface applies to raw text, or None to keep what fairseq built from ``kwargs``.
    Without ``bpe=``: the data directory's (``bpe/spm.*.model`` or ``bpe/codes.*``; the joint model,
    else the source language's).  With ``bpe=``: refused in one line (:class:`BPEMismatchError`) when
    the data directory (or its dictionary's pieces) shows another kind, or when the given model file is
    not one of the data directory's."""
    found = _bpe_files(data)
    dictionary = getattr(task, "source_dictionary", None)
    given = kwargs.get("bpe")
    if "bpe" in kwargs and given is None:
        return None  # bpe=None: the caller feeds text already cut into pieces
    if given is None:
        if not found:
            have = _dictionary_kind(dictionary) if dictionary is not None else None
            if have is not None:
                warnings.warn(f"from_pretrained: the dictionary of {data} holds {have} pieces, but no BPE is applied "
                              f"to raw text (no {data}/bpe/): pass bpe={have!r} and {BPE_KINDS[have][2]}=<the model "
                              "the training text was cut with>, or most words become <unk>", stacklevel=3)
            return None
        kind, files = next(iter(found.items()))
        prefix, suffix, option = BPE_KINDS[kind]
        lang = getattr(getattr(task, "cfg", None), "source_lang", None)
        names = (f"{prefix}joint{suffix}", f"{prefix}{lang}{suffix}")
        chosen = next((f for f in files if os.path.basename(f) in names), files[0])
        return encoders.build_bpe(Namespace(bpe=kind, **{option: chosen}))
    kind = str(given).replace("-", "_")
    have = next(iter(found), None) or (_dictionary_kind(dictionary) if dictionary is not None else None)
    where = f"{data} was made with {have}" + (f" ({found[have][0]})" if found else " (its dictionary's pieces)")
    if have is not None and kind != have:
        fix = ("leave out bpe= to use the data directory's" if found else
               f"give bpe={have!r} with the model the training text was cut with")
        raise BPEMismatchError(f"from_pretrained: bpe={given!r}, but {where}: {fix}, or give the data directory the "
                               "model was trained with")
    option = BPE_KINDS.get(kind, (None, None, None))[2]
    model = kwargs.get(option) if option else None
    if found and model and not any(_same_file(model, f) for f in found[kind]):
        raise BPEMismatchError(f"from_pretrained: {option}={model} is not the BPE model {data} was made with "
                               f"({', '.join(found[kind])}): another corpus's? leave out bpe= to use the data "
                               "directory's")
    if not found and model and kind == "sentencepiece" and dictionary is not None and os.path.isfile(model):
        _check_pieces(model, dictionary, data)
    return None


def _check_pieces(model: str, dictionary, data: str):
    """A dictionary built from text cut by a sentencepiece model holds only that model's pieces
    (and fairseq's padding entries ``madeupword*``): most entries outside it mean another model."""
    sp = spm.SentencePieceProcessor(model_file=model)
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    words = [w for w in dictionary.symbols[dictionary.nspecial:] if not w.startswith("madeupword")]
    outside = [w for w in words if w not in pieces]
    if words and len(outside) > 0.1 * len(words):
        raise BPEMismatchError(f"from_pretrained: sentencepiece_model={model} does not fit the dictionary of {data}: "
                               f"{len(outside)} of its {len(words)} entries are not pieces of the model (e.g. "
                               f"{outside[0]!r}); give the sentencepiece model the training text was cut with")


def _data_directory(model_dir: str, data: str) -> str:
    """The binarized data directory ``data_name_or_path`` names.  fairseq reads a path that starts
    with ``.`` relative to the model directory (``.``: the model directory itself); a ``./x`` or
    ``../x`` that is not there but is a directory relative to the working directory is that one.
    A directory that does not exist, or holds no ``dict*.txt``, is one line naming it."""
    where = os.path.normpath(os.path.join(model_dir, data)) if data.startswith(".") else data
    if not os.path.isdir(where) and data.startswith(".") and data != "." and os.path.isdir(data):
        where = data
    tried = f" (relative to the model directory: {where})" if data.startswith(".") and where != data else ""
    if not os.path.isdir(where):
        raise FileNotFoundError(f"from_pretrained: data_name_or_path {data}: no such directory{tried}; give the "
                                "binarized data directory the model was trained with (it holds the dictionaries)")
    if not glob.glob(os.path.join(glob.escape(where), "dict*.txt")):
        raise FileNotFoundError(f"from_pretrained: data_name_or_path {data}{tried} holds no dictionary (dict*.txt); "
                                "give the binarized data directory the model was trained with")
    return os.path.abspath(where)


def from_pretrained_classmethod(cls, model_name_or_path, checkpoint_file: str = DEFAULT_CHECKPOINT,
                                data_name_or_path: str = ".", **kwargs):
    return from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, model_class=cls, **kwargs)


from_pretrained_classmethod.__doc__ = from_pretrained.__doc__
