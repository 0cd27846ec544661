"""The paper-scale hours table of docs/gpu.md: hours per epoch = training target tokens per epoch /
measured training tokens per second / 3600, and hours to convergence = hours per epoch x epochs
(:func:`hours`).  The corpus sizes are inputs with their sources (:data:`CORPORA`); the epochs are
each recipe's row's (:func:`epochs`).  An unknown one leaves its row's hours unknown, and a bound
(``<=`` / ``>=``) carries into the hours.
"""
from typing import Dict, List, Optional, Tuple

from fairseq_local_repro.gpu.report import (ENTRY, NOT_MEASURED, PREDATES, REPO, device_name, fmt, gpu_entries,
                                            gpu_sources, impl, predates_fast_path)
from fairseq_local_repro.schedule import load_row, row_value

# Training target tokens per epoch (what fairseq counts as ntokens, and what bench.py's tokens/s
# count: target tokens with one EOS per sentence).  bound: "=" the count, "<=" / ">=" a bound.
CORPORA = {
    "iwslt14_bpe10k": dict(
        name="IWSLT14 De-En, joint BPE 10k", tokens=3_949_114, bound="=",
        source="fairseq-preprocess's count of `train.en` (160,239 sentences, EOS included) on the output of fairseq's "
               "`examples/translation/prepare-iwslt14.sh`, whose dictionaries (8,848 de / 6,632 en types) are those "
               "`configs/dpn_s2s/table1_dpn_s2s.yaml` cites"),
    "iwslt14_bpe25k": dict(
        name="IWSLT14 De-En, joint BPE 25k", tokens=3_949_114, bound="<=",
        source="not published; at most the 10k-BPE count of the same split (3,949,114), which "
               "prepare_iwslt14.sh makes as fairseq does (with sacremoses, Moses' tokenizer in Python): the first "
               "10k merges learnt on the same text are the 10k BPE's, and each further merge only joins tokens"),
    "ptb": dict(
        name="Penn Treebank (Mikolov), 10k vocabulary", tokens=929_589, bound="=",
        source="the corpus's published training count, 929,589 words with one `<eos>` per sentence (the genCNN "
               "paper, Section 6.1.1, rounds it to 930,000)"),
    "gigaword": dict(
        name="Gigaword headlines (Rush et al. 2015), 30k words", tokens=None, bound="=",
        source="3.8M training pairs (MC-RNN and DPN-S2S papers); the headlines' token count is not published there"),
    "nist_words_filtered": dict(
        name="NIST Zh-En LDC 1.25M pairs, English words, length-filtered", tokens=34_500_000 + 1_250_000, bound="<=",
        source="34.5M English words on 1.25M pairs plus one EOS each (Su et al. 2017, Experiments; DPN-S2S, "
               "Section 4.1), before the recipes' length filter drops pairs (89.9 % kept in Su et al.)"),
    "nist_bpe25k": dict(
        name="NIST Zh-En LDC 1.25M pairs, English BPE 25k", tokens=34_500_000 + 1_250_000, bound=">=",
        source="34.5M English words on 1.25M pairs plus one EOS each (DPN-S2S, Section 4.1); BPE only splits "
               "words, and the paper states no length filter"),
    "fbis_en": dict(
        name="FBIS English side, 40k words", tokens=8_600_000, bound=">=",
        source="8.6M English words (genCNN paper, Section 6.1.2), before one EOS per sentence is added"),
}

# Each family's paper-scale recipe: its corpus, its row (whose YAML caps the epochs: :func:`epochs`),
# what the row does not say about convergence (epochs_note) and the bench entries that measured its
# model at the recipe's size (eager and compiled rows are picked from them, fastpath entries first;
# None: not benchmarked at this size).
RECIPES = [
    dict(family="mc_rnn", recipe="`mc_rnn_iwslt14.sh --row table2_mc_rnn_3`", corpus="iwslt14_bpe25k",
         row="configs/mc_rnn/table2_mc_rnn_3.yaml",
         epochs_note="the paper stops when the dev score stops improving and gives no count",
         measured=["mc_rnn3_compiled_vs_eager", "mc_rnn3_vs_lstm"],
         note="IWSLT dims; 8k synthetic vocabulary, the recipe's is 25k"),
    dict(family="mc_rnn", recipe="`mc_rnn_gigaword.sh --row table3_mc_rnn_3`", corpus="gigaword",
         row="configs/mc_rnn/table3_mc_rnn_3.yaml", measured=None, note="4 + 4 layers: no benchmark entry"),
    dict(family="mc_rnn", recipe="`mc_rnn_ptb.sh`", corpus="ptb", row="configs/mc_rnn/table4_mc_rnn_ptb.yaml",
         epochs_note="AWD-LSTM's 500 epochs", measured=None, note="3 x 1150 MC-RNN LM: no benchmark entry"),
    dict(family="parallel_cells", recipe="`parallel_cells_ptb.sh --wide 3`", corpus="ptb",
         row="configs/parallel_cells/table2_ptb_wide3.yaml",
         epochs_note="the paper, Section 3.1: 14 epochs at lr 1, then 41 decayed",
         measured=["parallel_lm1950_wide3_vs_lstm_lm"],
         note="2 x 1950; 4000-token batches, the recipe's are 20 x 35 tokens"),
    dict(family="parallel_cells", recipe="`parallel_cells_zh_en.sh --row wide3`", corpus="nist_words_filtered",
         row="configs/parallel_cells/table3_zh_en_wide3.yaml",
         epochs_note="the paper trains 800k batches of 32 sentences; the filtered corpus's pair count, which "
                     "turns them into epochs, is not published",
         measured=None, note="4 + 3 layers x 1024: no benchmark entry"),
    dict(family="lattice", recipe="`lattice_nist_zhen.sh --rows dwl_gating`", corpus="nist_words_filtered",
         row="configs/lattice/dwl_gating.yaml",
         epochs_note="the paper trains until BLEU has not improved for 5 epochs and gives no count",
         measured=["lattice_dwl_compiled_vs_eager", "lattice_dwl_gating_vs_word"],
         note="Tatoeba batches, whose vocabulary is smaller than the recipe's 50k"),
    dict(family="gencnn", recipe="`gencnn_ptb.sh`", corpus="ptb", row="configs/gencnn/table2_ptb_gencnn.yaml",
         epochs_note="the paper gives no count", measured=["gencnn_vs_fconv_lm"],
         note="8k synthetic vocabulary, PTB's is 10k"),
    dict(family="gencnn", recipe="`gencnn_fbis.sh`", corpus="fbis_en", row="configs/gencnn/table3_fbis_gencnn.yaml",
         measured=None, note="40k vocabulary with adaptive softmax: no benchmark entry"),
    dict(family="dpn_s2s", recipe="`dpn_s2s_iwslt14.sh --rows table1_dpn_s2s`", corpus="iwslt14_bpe10k",
         row="configs/dpn_s2s/table1_dpn_s2s.yaml", epochs_note="the paper gives no count",
         measured=["dpn_vs_transformer"], note="8k synthetic vocabulary, the recipe's are 8,848 / 6,632"),
    dict(family="dpn_s2s", recipe="`dpn_s2s_nist_zhen.sh --rows table2_dpn_s2s`", corpus="nist_bpe25k",
         row="configs/dpn_s2s/table2_dpn_s2s.yaml",
         measured=None, note="NIST sizes, which the paper trained on 4 GPUs: no benchmark entry"),
    dict(family="dpn_s2s", recipe="`dpn_s2s_gigaword.sh`", corpus="gigaword", row="configs/dpn_s2s/table3_dpn_s2s.yaml",
         measured=None, note="no benchmark entry at Gigaword's 30k vocabularies"),
]
_SYMBOL = {"=": "", "<=": "≤ ", ">=": "≥ "}


def epochs(recipe: dict) -> Tuple[Optional[int], str, str]:
    """``(epochs, bound, source)`` of a recipe, read from its row: the row's ``max_epoch`` (None: no
    cap), ``<=`` when an early stop (``checkpoint.patience``, ``optimization.stop_min_lr``) may end
    the run sooner, else ``=``."""
    row = recipe["row"]
    cfg = load_row(row)
    cap = row_value(cfg, "optimization.max_epoch") or None
    early = row_value(cfg, "checkpoint.patience") > 0 or (cfg.get("optimization") or {}).get("stop_min_lr", -1) > 0
    if cap is None:
        source = f"{row} sets no epoch cap"
    else:
        source = f"max_epoch of {row}" + (" (an early stop may end the run sooner)" if early else "")
    note = recipe.get("epochs_note")
    return cap, "<=" if early else "=", source + (f"; {note}" if note else "")


def combine(*bounds: str) -> Optional[str]:
    """The bound of a product of positive quantities with these bounds (None: bounds in opposite
    directions, so the product is unknown)."""
    kinds = {b for b in bounds if b != "="}
    if len(kinds) > 1:
        return None
    return kinds.pop() if kinds else "="


def hours(tokens: float, tokens_per_s: float, epochs: Optional[float] = None) -> float:
    """tokens / (tokens/s) / 3600 hours per epoch, times ``epochs`` when given."""
    h = tokens / tokens_per_s / 3600.0
    return h if epochs is None else h * epochs


def duration(h: float) -> str:
    """Hours as a reader takes them in: seconds under a minute, minutes under an hour."""
    if h * 60 < 1:
        return f"{h * 3600:.0f} s"
    if h < 1:
        return f"{h * 60:.1f} min"
    return f"{h:.2f} h" if h < 10 else f"{h:,.0f} h"


def _hours_text(h: Optional[float], bound: Optional[str]) -> str:
    if h is None or bound is None:
        return "unknown"
    return _SYMBOL[bound] + duration(h)


def measurement(recipe: dict, entries: List[dict], dtype: str = "fp32") -> Dict[str, Optional[Tuple[float, str]]]:
    """``{"eager": (tokens/s, entry name) or None, "fast": ... or None, "one_path": bool}``: the
    first row of the recipe's entries (in its order) that ran each implementation in ``dtype``."""
    found: Dict[str, Optional[Tuple[float, str]]] = {"eager": None, "fast": None}
    one_path = False
    by_name = {e["name"]: e for e in entries if e["dtype"] == dtype}
    for name in recipe["measured"] or []:
        e = by_name.get(name)
        if e is None:
            continue
        arch = ENTRY[name]["args"].split("--arch ")[1].split()[0]
        for row in e["result"]["rows"]:
            if row["arch"] != arch:
                continue  # the fairseq baseline of a comparison
            kind = impl(row, e["family"])
            one_path |= kind == "none"
            key = "fast" if kind == "compiled" else "eager"
            if found[key] is None:
                found[key] = (row["train_tokens_per_s"], name)
    return {**found, "one_path": one_path}


def hours_table(repo: str = REPO, dtype: str = "fp32") -> str:
    """The hours of each family's paper-scale recipe on the measured GPU (docs/gpu.md)."""
    sources = gpu_sources(repo)
    entries = gpu_entries(sources)
    device = ", ".join(sorted({device_name(s) for s in sources})) or "no GPU"
    files = ", ".join("`" + s["path"] + "`" for s in sources) or "no file"
    lines = [f"Measured on {device} ({files}), {dtype}, "
             "the benchmarks' batches of 4000 target tokens (not each recipe's own batch size). Hours per epoch = "
             "training target tokens per epoch / tokens/s / 3600; to convergence = that x epochs. ≤ and ≥ carry "
             "the bounds of the inputs below. genCNN and DPN-S2S have no recurrent loop and one path: their "
             "eager column is it.", ""]
    if predates_fast_path(entries):
        lines += [f"**{PREDATES}.**", ""]
    head = ["family", "recipe", "measured as", "eager tok/s", "eager per epoch", "eager to convergence",
            "fast tok/s", "fast per epoch", "fast to convergence"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in RECIPES:
        corpus = CORPORA[r["corpus"]]
        m = measurement(r, entries, dtype)
        cells = [r["family"], r["recipe"]]
        if m["eager"] is None and m["fast"] is None:
            cells.append(f"{NOT_MEASURED} ({r['note']})")
        else:
            names = sorted({x[1] for x in (m["eager"], m["fast"]) if x})
            cells.append(", ".join(f"`{n}`" for n in names) + f" ({r['note']})")
        for key in ("eager", "fast"):
            got = m[key]
            if got is None:
                what = "no `--rnn-impl` (one path)" if key == "fast" and m["one_path"] else NOT_MEASURED
                cells += [what, "–", "–"]
                continue
            tok_s = got[0]
            per_epoch = None if corpus["tokens"] is None else hours(corpus["tokens"], tok_s)
            n, bound, _ = epochs(r)
            total = None if per_epoch is None or n is None else per_epoch * n
            cells += [fmt(tok_s), _hours_text(per_epoch, corpus["bound"]),
                      _hours_text(total, combine(corpus["bound"], bound))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "The inputs (target tokens per epoch, as fairseq counts them: one EOS per sentence; epochs to "
              "convergence), each with its source:", "",
              "| recipe | corpus | tokens per epoch | source | epochs | source |", "|---|---|---|---|---|---|"]
    for r in RECIPES:
        corpus = CORPORA[r["corpus"]]
        tokens = "unknown" if corpus["tokens"] is None else f"{_SYMBOL[corpus['bound']]}{corpus['tokens']:,}"
        n, bound, source = epochs(r)
        shown = "unknown" if n is None else f"{_SYMBOL[bound]}{n}"
        lines.append(f"| {r['recipe']} | {corpus['name']} | {tokens} | {corpus['source']} | {shown} | {source} |")
    return "\n".join(lines) + "\n"


# generated sections: name -> (renderer, pages), embedded by scripts/docs_speed_table.py
SECTIONS = {"gpu_hours": (hours_table, ("docs/gpu.md",))}
