"""Publishing a comparison: its runs' JSON and committed outputs into ``docs/results/reproduce/``,
its statistics (:mod:`fairseq_local_repro.compare`), its curves, then the pages
(:func:`fairseq_local_repro.page.write_page`)."""
import json
import os
import shutil
from typing import List, Optional, Sequence

from fairseq_local_core.file_io import atomic_open, read_json, write_gz, write_json
from fairseq_local_repro import compare as stats
from fairseq_local_repro.page import draw_curves, load_family, write_page
from fairseq_local_repro.processes import ReproError
from fairseq_local_repro.tables import SRC_LEN_FILE

# per-run test fields of an older results.json that the folder's statistics replace (a single-run
# bootstrap p-value that over-rejects and sees no seed variance): not published
SUPERSEDED = ("paired_bs_p_vs_baseline", "paired_bs_samples", "bootstrap_mean")


def publish_dir(docs: str, family: str, variant: Optional[str] = None) -> str:
    """The folder ``--publish`` writes a family's comparison to (a variant's below it)."""
    return os.path.join(docs, "results", "reproduce", family, *([variant] if variant else []))


def publish(comparison: dict, docs: str, variant: str = None, run_root: str = None,
            test_ref: str = None, queued: List[str] = None, test_src: str = None, sources: Sequence[str] = ()) -> str:
    """Copy the comparison's JSON to ``docs/results/reproduce/<family>/`` (a variant's to
    ``<family>/<variant>/``), draw the curves of every run in that folder, and rewrite the pages;
    returns the results page's path.  With
    ``run_root`` (the harness's ``OUT/<family>``) each run's per-sentence test outputs go beside its
    JSON (``<system>-s<seed>.hyp.gz`` with the references ``test.ref.gz``, or ``.nll.gz``), with their
    sha256 in the run's JSON, and for a family with ``length_buckets`` the words of each source line of
    ``test_src`` (``test.src_len.gz``); runs scored on another test set than the folder's are refused
    (ReproError).  The folder's statistics are then computed from the committed files
    (fairseq_local_repro.compare); ``queued`` names the runs still training, shown on the pages.  A
    run read from another published folder of ``sources`` (a sweep point's run standing in for a
    tuned one) brings its committed outputs from there."""
    dest = publish_dir(docs, comparison["family"], variant)
    os.makedirs(dest, exist_ok=True)
    kind = comparison.get("kind", "translation")
    ref_sha = None
    if run_root and test_ref and os.path.isfile(test_ref):
        with open(test_ref, encoding="utf-8") as f:
            ref_text = f.read()
        ref_sha = stats.sha256_text(ref_text)
        mine = {f"{r['system']}-s{r['seed']}.json" for r in comparison["systems"]}
        for name in sorted(os.listdir(dest)):
            if name.endswith(".json") and name != "comparison.json" and name not in mine:
                if read_json(os.path.join(dest, name)).get("test_ref_sha256") != ref_sha:
                    raise ReproError(f"{dest} holds {name}, scored on another test set than {test_ref}: "
                                     "publish these runs with another --variant")
        if kind != "lm":
            write_gz(os.path.join(dest, stats.REF_FILE), ref_text)
        from fairseq_local_repro.families import FAMILIES

        fam = FAMILIES.get(comparison["family"])
        if fam is not None and fam.length_buckets and test_src and os.path.isfile(test_src):
            with open(test_src, encoding="utf-8") as f:  # source lengths in words, for length_bucket_tables
                write_gz(os.path.join(dest, SRC_LEN_FILE), "".join(f"{len(line.split())}\n" for line in f))
    for r in comparison["systems"]:
        r = dict(r, test={k: v for k, v in r["test"].items() if k not in SUPERSEDED})
        if comparison.get("split"):
            r.setdefault("split", comparison["split"])  # every run of the comparison read the same split
        out = os.path.join(run_root, f"{r['system']}-s{r['seed']}", "test",
                           "sentence_nll.json" if kind == "lm" else "hyp.txt") if run_root else None
        if out and os.path.isfile(out):
            with open(out, encoding="utf-8") as f:
                text = f.read()
            if kind == "lm":  # one [nll, tokens] line per sentence: compact and diffable
                text = "[\n" + ",\n".join(json.dumps(x) for x in json.loads(text)) + "\n]\n"
            name = stats.output_name(r, kind)
            write_gz(os.path.join(dest, name), text)
            r.update(outputs={"file": name, "sha256": stats.sha256_text(text)}, test_ref_sha256=ref_sha)
        elif stats.published_in([dest], r) is None and (source := stats.published_in(sources, r)) is not None:
            name = r["outputs"]["file"]
            with open(os.path.join(source, name), "rb") as src, atomic_open(os.path.join(dest, name), "wb") as f:
                shutil.copyfileobj(src, f)
        write_json(os.path.join(dest, f"{r['system']}-s{r['seed']}.json"), r)
    meta = {k: v for k, v in comparison.items() if k not in ("systems", "statistics", "queued")}
    queued = [q for q in queued or [] if not os.path.isfile(os.path.join(dest, q + ".json"))]  # still to come
    if queued:
        meta["queued"] = queued
    write_json(os.path.join(dest, "comparison.json"), meta)
    # every run of the folder, also those another process published meanwhile
    draw_curves(load_family(dest), os.path.join(dest, "curves.png"))
    try:
        meta["statistics"] = stats.analyse_folder(dest)
    except ValueError as e:
        raise ReproError(str(e))
    write_json(os.path.join(dest, "comparison.json"), meta)
    try:
        return write_page(docs)
    except ValueError as e:
        raise ReproError(str(e))
