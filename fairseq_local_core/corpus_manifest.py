"""What a data directory was made from, so that artifacts that do not belong together are caught.

``scripts/preprocess.sh`` writes ``DIR/corpus.json`` with the binarized data: for each split and
language the raw input file (its path, line count and SHA-256) and the transforms applied
(``--tokenize``, ``--lowercase``, ``--bpe`` and its size).  Where artifacts meet, they are checked
against it:

* ``scripts/generate.sh`` records next to its output (``OUT/gen.json``, :func:`gen_record`) the data
  directory, the split and the manifest entry of the split's target side; ``scripts/score.sh``
  given a reference for those hypotheses (:func:`check_reference`) refuses one whose SHA-256 is that
  of another split or language of the corpus (``REF is the valid split's en side, HYP translates
  test``); a reference the manifest does not know (your own detokenized references) is scored
  with a note.
* a checkpoint stores the corpus fingerprint (:func:`corpus_fingerprint`, the hash of the training
  split's entries) next to its dictionaries' (``patches/dictionary_fingerprint.py``): decoding or
  resuming with the data directory of another corpus whose dictionaries match is a warning.
* the hub and ``generate.sh`` read the transforms (:func:`transforms`): text given to the hub for
  a Moses-tokenized corpus is Moses-tokenized, as the training text was.
* a recipe's ``--save-dir`` records the row and the data directory it trains (``run.json``,
  :func:`claim_run`): another row or data directory in the same folder is one line naming both.

Standard library only; ``python -m fairseq_local_repro.text.corpus_manifest`` is its command line.
"""
import collections
import errno
import glob
import hashlib
import json
import os
from typing import Dict, List, Optional, Tuple

from fairseq_local_core.errors import UserError

NAME = "corpus.json"  # in the data directory
GEN_RECORD = "gen.json"  # next to generate.sh's hypotheses
RUN_RECORD = "run.json"  # in a recipe's --save-dir
FORMAT = 1
CHUNK = 1 << 20

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "zh": "Chinese", "es": "Spanish",
                  "it": "Italian", "nl": "Dutch", "ro": "Romanian", "ru": "Russian", "cs": "Czech",
                  "ja": "Japanese", "ar": "Arabic", "pt": "Portuguese", "vi": "Vietnamese"}


class CorpusManifestError(UserError, ValueError):
    """A corpus.json, gen.json or run.json that cannot be read, or artifacts that do not belong together."""


# ------------------------------------------------------------------------------------------------
# files and the manifest
# ------------------------------------------------------------------------------------------------
def file_entry(path: str) -> dict:
    """``{"path", "lines", "sha256"}`` of ``path`` (lines as ``wc -l`` plus a last line without newline)."""
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    if last != b"\n":
        lines += 1
    return {"path": os.path.abspath(path), "lines": lines, "sha256": digest.hexdigest()}


def sha256_of(path: str) -> str:
    return file_entry(path)["sha256"]


def build(files: Dict[str, Dict[str, str]], languages: List[str], transforms: dict) -> dict:
    """The manifest of the raw ``files`` (``{split: {language: path}}``) binarized for ``languages``
    (``[source, target]``, or ``["txt"]`` for a language-model corpus) with ``transforms``."""
    splits = {split: {lang: file_entry(path) for lang, path in sides.items()} for split, sides in files.items()}
    manifest = {"format": FORMAT, "languages": list(languages), "transforms": dict(transforms), "splits": splits}
    manifest["corpus"] = corpus_fingerprint(manifest)
    return manifest


def corpus_fingerprint(manifest: dict) -> Optional[str]:
    """SHA-256 over the training split's files (language and content hash, in language order): two
    data directories binarized from the same training text share it whatever their paths."""
    train = (manifest.get("splits") or {}).get("train")
    if not isinstance(train, dict) or not train:
        return None
    text = "\n".join(f"{lang} {train[lang].get('sha256')}" for lang in sorted(train))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_record(path: str, obj: dict):
    """``obj`` into ``path`` through a temporary name (a full disk: one line naming ``path``)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "disk quota exceeded" if err.errno == errno.EDQUOT else "no space left on device"
            raise CorpusManifestError(f"{path}: {what}") from None
        raise CorpusManifestError(f"{path}: cannot write ({err.strerror})") from None


def _read_json(path: str, what: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as err:
        raise CorpusManifestError(f"{path}: not a readable {what} ({err}); remove it, or rerun what wrote it") from None
    if not isinstance(obj, dict):
        raise CorpusManifestError(f"{path}: not a {what} (a JSON object); remove it, or rerun what wrote it")
    return obj


def write(directory: str, manifest: dict):
    write_record(os.path.join(directory, NAME), manifest)


def first_data_dir(data: str) -> str:
    """The first directory of a fairseq data path (``a:b`` shards)."""
    return str(data).split(os.pathsep)[0]


_CACHE: Dict[Tuple[str, float], Optional[dict]] = {}


def read(data: str) -> Optional[dict]:
    """The manifest of the data directory ``data`` (``a:b``: the first), or None when it has none."""
    path = os.path.join(first_data_dir(data), NAME)
    try:
        key = (os.path.abspath(path), os.path.getmtime(path))
    except OSError:
        return None
    if key not in _CACHE:
        _CACHE[key] = _read_json(path, "corpus manifest (scripts/preprocess.sh's corpus.json)")
    return _CACHE[key]


def transforms(data: str) -> dict:
    """The transforms the data directory's text went through (``{}`` without a manifest)."""
    manifest = read(data)
    return dict(manifest.get("transforms") or {}) if manifest else {}


def side_name(split: str, lang: str) -> str:
    """``the valid split's English side``."""
    name = LANGUAGE_NAMES.get(lang, lang)
    return f"the {split} split's {name} side" if lang != "txt" else f"the {split} split"


def matches(manifest: dict, sha256: str) -> List[Tuple[str, str]]:
    """``(split, language)`` of every file of the manifest with that content."""
    out = []
    for split, sides in (manifest.get("splits") or {}).items():
        for lang, entry in (sides or {}).items():
            if isinstance(entry, dict) and entry.get("sha256") == sha256:
                out.append((split, lang))
    return out


# ------------------------------------------------------------------------------------------------
# generate.sh's record and score's reference check
# ------------------------------------------------------------------------------------------------
def _languages(data: str, manifest: Optional[dict]) -> Tuple[Optional[str], Optional[str]]:
    if manifest and len(manifest.get("languages") or []) == 2:
        return tuple(manifest["languages"])
    found = glob.glob(os.path.join(glob.escape(first_data_dir(data)), "train.*-*.*.idx"))
    for path in sorted(found):
        pair, lang = os.path.basename(path).split(".")[1:3]
        src, tgt = pair.split("-", 1)
        if lang == src:
            return src, tgt
    return None, None


def gen_record(data: str, subset: str, outputs: Dict[str, str], source_lang: Optional[str] = None,
               target_lang: Optional[str] = None) -> dict:
    """What generate.sh records next to its hypotheses: the data directory, the split, its
    languages, the manifest entries of the split (the target side's first) and the SHA-256 of each
    output file it wrote (``{name: path}``), so that a hypothesis file is known by its content."""
    manifest = read(data)
    src, tgt = _languages(data, manifest)
    src, tgt = source_lang or src, target_lang or tgt
    record = {"format": FORMAT, "data": os.path.abspath(first_data_dir(data)), "subset": subset,
              "source_lang": src, "target_lang": tgt, "target": None, "splits": None, "transforms": None,
              "outputs": {name: sha256_of(path) for name, path in outputs.items()}}
    if manifest:
        side = (manifest.get("splits") or {}).get(subset) or {}
        record.update(target=side.get(tgt), splits=manifest.get("splits"), transforms=manifest.get("transforms"))
    return record


def find_record(hyp: str) -> Optional[dict]:
    """generate.sh's record of the hypothesis file ``hyp``: the ``gen.json`` beside it, when it lists
    a file with ``hyp``'s content."""
    if not os.path.isfile(hyp):
        return None
    record = _read_json(os.path.join(os.path.dirname(os.path.abspath(hyp)), GEN_RECORD), "generate.sh record")
    if not record:
        return None
    outputs = record.get("outputs") or {}
    return record if outputs.get(os.path.basename(hyp)) == sha256_of(hyp) else None


SAME_TEXT = 0.5  # text_overlap of a split's raw targets with its binarized ones is above; another text's below


def own_targets(hyp: str, record: dict) -> Optional[str]:
    """generate.sh's ``ref.tok.txt`` beside ``hyp`` (the split's binarized targets, as its record lists
    them), or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(hyp)), "ref.tok.txt")
    listed = (record.get("outputs") or {}).get("ref.tok.txt")
    return path if listed and os.path.isfile(path) and sha256_of(path) == listed else None


def _lines(path: str) -> List[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def _bigrams(line: str) -> collections.Counter:
    text = "".join(line.lower().replace("<<unk>>", " ").replace("<unk>", " ").split())
    return collections.Counter(text[i:i + 2] for i in range(len(text) - 1))


def text_overlap(a: List[str], b: List[str]) -> float:
    """Mean Dice coefficient of the character pairs of the line pairs of ``a`` and ``b`` (0 to 1): a
    split's raw targets against the same sentences tokenized, lowercased or with words replaced by
    ``<unk>`` come near 1, unrelated sentences near 0."""
    scores = []
    for x, y in zip(a, b):
        bx, by = _bigrams(x), _bigrams(y)
        total = sum(bx.values()) + sum(by.values())
        scores.append(1.0 if total == 0 else 2 * sum((bx & by).values()) / total)
    return sum(scores) / len(scores) if scores else 1.0


def check_reference(hyp: str, ref: str, lowercase: bool = False) -> List[str]:
    """Notes for scoring ``hyp`` against ``ref``; raises :class:`CorpusManifestError` when ``ref`` is
    a raw file of the corpus ``hyp`` was generated from, but not the generated split's target side
    (another split, or the source side)."""
    record = find_record(hyp)
    if record is None:
        return []
    subset, tgt, data = record.get("subset"), record.get("target_lang"), record.get("data")
    notes = []
    splits = record.get("splits")
    if isinstance(splits, dict) and os.path.isfile(ref):
        digest = sha256_of(ref)
        found = matches({"splits": splits}, digest)
        if found and (subset, tgt) not in found:
            split, lang = found[0]
            want = (record.get("target") or {}).get("path")
            fix = f"give {want}" if want else f"give {side_name(subset, tgt)}"
            raise CorpusManifestError(
                f"--ref {ref} is {side_name(split, lang)} of {data}, but --hyp {hyp} translates {subset} into "
                f"{LANGUAGE_NAMES.get(tgt, tgt)} (generate.sh --subset {subset}): {fix}")
        if not found:
            notes.append(f"--ref {ref} is none of the raw files {data} was made from (corpus.json): scored as given "
                         f"(the reference of {subset} is {(record.get('target') or {}).get('path', 'unknown')})")
    elif os.path.isfile(ref):  # no corpus.json (fairseq-preprocess's own folder): the split's binarized targets
        own = own_targets(hyp, record)
        if own is not None:
            overlap = text_overlap(_lines(own), _lines(ref))
            if overlap < SAME_TEXT:  # a note, not a refusal: a lattice split's targets can read otherwise
                notes.append(
                    f"--ref {ref} may not be the target text of {subset} in {data}: it shares {overlap:.0%} of its "
                    f"character pairs with that split's binarized targets ({own}); give the raw target file of "
                    f"{subset} (another split's or the source side's text scores without meaning)")
    if (record.get("transforms") or {}).get("lowercase") and not lowercase:
        notes.append(f"{hyp} was generated from lowercased text (preprocess.sh --lowercase): BLEU against a cased "
                     "reference is low; add --lowercase for case-insensitive BLEU")
    return notes


# ------------------------------------------------------------------------------------------------
# a recipe's --save-dir
# ------------------------------------------------------------------------------------------------
def claim_run(save_dir: str, row: str, data: str) -> bool:
    """Record in ``save_dir/run.json`` that it trains ``row`` on ``data``; raise
    :class:`CorpusManifestError` naming both when it holds another row's or another data directory's
    run.  True when the record is new."""
    path = os.path.join(save_dir, RUN_RECORD)
    data = os.path.realpath(first_data_dir(data))  # the same folder by any path
    held = _read_json(path, "run record")
    if held:
        was_row, was_data = held.get("row"), held.get("data")
        if was_row != row or was_data != data:
            what = []
            if was_row != row:
                what.append(f"row {was_row}, not {row}")
            if was_data != data:
                what.append(f"--data {was_data}, not {data}")
            raise CorpusManifestError(
                f"--save-dir {save_dir} holds a run of {' and '.join(what)} (its run.json): resuming there would mix "
                "them; give another --save-dir, or the row and --data it was started with")
        return False
    os.makedirs(save_dir, exist_ok=True)
    write_record(path, {"format": FORMAT, "row": row, "data": data, "corpus": (read(data) or {}).get("corpus")})
    return True
