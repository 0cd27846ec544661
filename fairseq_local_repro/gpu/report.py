"""The GPU results page (docs/results/gpu/README.md), rendered from the GPU kit's JSON; with the
reading and formatting helpers that :mod:`.hours` (docs/gpu.md's hours table) and
``scripts/docs_speed_table.py`` (which embeds every generated section between its markers,
``--write`` / ``--check``) share.

Inputs, all in ``docs/results/gpu/``: ``bench.json`` (``run_all.sh --part bench``; a
``--part fastpath`` call made on its own is kept next to it as ``fastpath.json``), ``check.json``
(the box: device, torch and fairseq versions), ``train.json`` and ``precision.json``.  An entry of
:data:`fairseq_local_repro.bench_entries.ENTRIES` with ``fastpath=True`` compares ``--rnn-impl
compiled`` (A) with ``eager`` (B) on the same arch; every other entry compares one of our models
(A) with its fairseq baseline (B).  A bench row without ``rnn_impl`` was written before the fast
path existed: its recurrent layers ran the eager loop.
"""
import json
import os
import re
import shlex
from typing import Dict, List, Optional

from fairseq_local_repro.bench_entries import ENTRIES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_DIR = "docs/results/gpu"
BENCH_FILES = ("bench.json", "fastpath.json")  # --part bench, and --part fastpath when it ran on its own
NOT_MEASURED = "not measured"
PREDATES = ("Eager path only; the fast path has not been measured on a GPU yet: these figures predate "
            "`--rnn-impl`, so every recurrent model ran its eager Python loop over time")


# ------------------------------------------------------------------------------------------------
# formatting and reading, shared with scripts/docs_speed_table.py
# ------------------------------------------------------------------------------------------------
def fmt(x: Optional[float], digits: int = 0) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def load(rel: str, repo: str = REPO) -> dict:
    with open(os.path.join(repo, rel), encoding="utf-8") as f:
        return json.load(f)


def read_source(path: str, repo: str = REPO) -> dict:
    """One benchmark file with the ``check.json`` next to it: ``{"path", "bench", "check", "gpu"}``."""
    with open(path, encoding="utf-8") as f:
        bench = json.load(f)
    check_path = os.path.join(os.path.dirname(path), "check.json")
    check = {}
    if os.path.exists(check_path):
        with open(check_path, encoding="utf-8") as f:
            check = json.load(f)
    return {"path": os.path.relpath(path, repo), "bench": bench, "check": check, "gpu": bench.get("device") == "cuda"}


def device_name(source) -> str:
    """The device a source ran on: the GPU name its entries recorded, else check.json's."""
    check, device = source["check"], source["bench"].get("device", "?")
    names = sorted({e["device_name"] for e in source["bench"].get("entries", []) if e.get("device_name")})
    return (" / ".join(names) if names and device == "cuda" else None) or check.get("cuda_device") \
        or check.get("cpu_model") or ("CPU" if device == "cpu" else device)


def machine(source) -> str:
    """The machine of a source in one line: device name, threads, torch and fairseq versions."""
    check = source["check"]
    name = device_name(source)
    if check.get("cpu_capability"):
        name += f" ({check['cpu_capability']} kernels)"
    parts = [name]
    threads = sorted({e["torch_threads"] for e in check.get("entries", []) if e.get("torch_threads")})
    if threads:
        parts.append(f"{'/'.join(map(str, threads))} torch thread{'s' if threads != [1] else ''}")
    if check.get("torch"):
        parts.append(f"torch {check['torch']}")
    if check.get("fairseq"):
        parts.append(f"fairseq {check['fairseq']}")
    return ", ".join(parts)


def command(cmd: str) -> str:
    """The bench.py command as a user runs it: without the run's own ``--json`` output path."""
    argv = shlex.split(cmd)
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--json":
            skip = True
            continue
        out.append(a)
    return shlex.join(out)


def wrap(cmd: str, width: int = 100) -> str:
    """A long command as backslash-continued lines (at option boundaries)."""
    words = shlex.split(cmd)
    lines, line = [], ""
    for w in words:
        w = w if re.fullmatch(r"[\w@%+=:,./$-]+", w) else shlex.quote(w)
        piece = w if not line else " " + w
        if line and w.startswith("--") and len(line) + len(piece) > width - 2:
            lines.append(line + " \\")
            line = "    " + w
        else:
            line += piece
    lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# the GPU run: its entries, whether the fast path ran
# ------------------------------------------------------------------------------------------------
ENTRY = {e["name"]: e for e in ENTRIES}
ORDER = {e["name"]: i for i, e in enumerate(ENTRIES)}


# the families with recurrent loops, i.e. a fast path (--rnn-impl): those with compiled-vs-eager entries
RECURRENT = list(dict.fromkeys(e["family"] for e in ENTRIES if e.get("fastpath")))


def is_fastpath(name: str) -> bool:
    return bool(ENTRY.get(name, {}).get("fastpath"))


def gpu_sources(repo: str = REPO) -> List[dict]:
    """The GPU benchmark files kept in docs/results/gpu/ (bench.json, fastpath.json), as read_source."""
    return [read_source(p, repo) for p in (os.path.join(repo, GPU_DIR, f) for f in BENCH_FILES) if os.path.isfile(p)]


def gpu_entries(sources: List[dict]) -> List[dict]:
    """Every measured entry of the GPU sources, in ENTRIES order (then dtype order of the run)."""
    out = [e for s in sources for e in s["bench"].get("entries", []) if e.get("status") == "ok"]
    return sorted(out, key=lambda e: ORDER.get(e["name"], len(ORDER)))


def impl(row: dict, family: Optional[str] = None) -> str:
    """What a bench row's recurrent layers ran: compiled (a fast path: the compiled step and/or CUDA
    graphs, ``rnn_impl`` compiled, graphs or compiled+graphs), eager, none (a model without them, or
    A of a family that has none) or eager-predates (a row written before ``rnn_impl`` was
    recorded: the eager loop)."""
    if family is not None and family not in RECURRENT:
        return "none"
    if "rnn_impl" not in row:
        return "eager-predates"
    r = row["rnn_impl"]
    return "none" if r is None else "compiled" if ("compiled" in r or "graphs" in r) else "eager"


def fast_path_measured(entries: List[dict]) -> bool:
    return any(impl(r) == "compiled" for e in entries for r in e["result"]["rows"])


def predates_fast_path(entries: List[dict]) -> bool:
    return bool(entries) and all(impl(r) == "eager-predates" for e in entries for r in e["result"]["rows"])


def status_line(entries: List[dict]) -> str:
    """One sentence on whether these GPU figures include the fast path."""
    if not entries:
        return "No GPU benchmark is kept yet."
    if predates_fast_path(entries):
        return f"**{PREDATES}.**"
    if not fast_path_measured(entries):
        return ("**Eager path only**: the fast path has not been measured on a GPU yet (no row ran "
                "`--rnn-impl cuda-graphs` or `compiled`).")
    fast = sorted({e["name"] for e in entries if is_fastpath(e["name"])})
    return (f"The fast path was measured: {len(fast)} compiled-vs-eager comparison{'s' if len(fast) != 1 else ''}, "
            "and the recurrent models of the comparisons against fairseq's baselines ran the `--rnn-impl` their "
            "row names (`auto`, the eager loop, where it names none).")


# ------------------------------------------------------------------------------------------------
# the sections of docs/results/gpu/README.md
# ------------------------------------------------------------------------------------------------
def _ratio(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.2f}"


def _gen_ratio(entry) -> Optional[float]:
    a, b = entry["result"]["rows"]
    if a.get("gen_sent_per_s") and b.get("gen_sent_per_s"):
        return a["gen_sent_per_s"] / b["gen_sent_per_s"]
    return None


def _first(row) -> str:
    return "–" if row.get("first_step_s") is None else f"{row['first_step_s']:.1f}"


_IMPL_SHOWN = {"compiled": "compiled", "eager": "eager", "none": "–", "eager-predates": "eager (before `--rnn-impl`)"}


def _dtypes(entries) -> List[str]:
    return sorted({e["dtype"] for e in entries}, key=lambda d: ("fp32", "bf16", "fp16").index(d))


def _by_name(entries) -> Dict[str, Dict[str, dict]]:
    out: Dict[str, Dict[str, dict]] = {}
    for e in entries:
        out.setdefault(e["name"], {})[e["dtype"]] = e
    return out


def page_status(repo: str = REPO) -> str:
    """The page's head: machine, versions, files, and whether the fast path is in these figures."""
    sources = gpu_sources(repo)
    if not sources:
        return f"No GPU benchmark is kept in `{GPU_DIR}/` yet.\n"
    entries = gpu_entries(sources)
    lines = []
    for s in sources:
        n = len({e["name"] for e in s["bench"].get("entries", []) if e.get("status") == "ok"})
        dtypes = _dtypes(e for e in s["bench"].get("entries", []) if e.get("status") == "ok")
        skipped = sorted({e["name"] for e in s["bench"].get("entries", []) if e.get("status") != "ok"})
        line = f"* `{s['path']}`: {machine(s)}; {n} comparisons in {', '.join(dtypes) or 'no dtype'}"
        if skipped:
            line += f"; not measured: {', '.join(f'`{x}`' for x in skipped)}"
        lines.append(line + ".")
    return ("\n".join([status_line(entries), "", *lines]) + "\n")


def page_comparisons(repo: str = REPO) -> str:
    """Each comparison against its fairseq baseline: params, tokens/s, A/B in every dtype, goal,
    beam-5 generation, what A's recurrent layers ran and the time to the first update."""
    entries = [e for e in gpu_entries(gpu_sources(repo)) if not is_fastpath(e["name"])]
    if not entries:
        return "No comparison against a fairseq baseline is kept for the GPU yet.\n"
    by_name = _by_name(entries)
    dtypes = _dtypes(entries)
    ref = dtypes[0]
    head = (["comparison (A vs B)", "A params", "B params", f"A tok/s {ref}", f"B tok/s {ref}"]
            + [f"train A/B {d}" for d in dtypes] + ["goal"] + [f"beam-5 gen A/B {d}" for d in dtypes]
            + ["A ran", f"first update s A / B {ref}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    met, goals = 0, 0
    for name, by_dtype in by_name.items():
        e = by_dtype.get(ref) or next(iter(by_dtype.values()))
        a, b = e["result"]["rows"]
        goal = ENTRY.get(name, {}).get("goal", e.get("goal"))
        ratios = []
        for d in dtypes:
            x = by_dtype.get(d)
            r = None if x is None else x["result"]["train_ratio"]
            if r is not None and goal is not None:
                goals += 1
                met += r >= goal
            ratios.append("–" if r is None else (f"**{r:.2f}**" if goal is not None and r >= goal else f"{r:.2f}"))
        gens = [_ratio(_gen_ratio(by_dtype[d])) if d in by_dtype else "–" for d in dtypes]
        cells = ([f"`{name}`: `{a['arch']}` vs `{b['arch']}`", f"{a['params'] / 1e6:.2f}M", f"{b['params'] / 1e6:.2f}M",
                  fmt(a["train_tokens_per_s"]) if ref in by_dtype else "–",
                  fmt(b["train_tokens_per_s"]) if ref in by_dtype else "–"]
                 + ratios + ["–" if goal is None else f"{goal:.2f}"] + gens
                 + [_IMPL_SHOWN[impl(a, e["family"])], f"{_first(a)} / {_first(b)}"])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Goals met: **{met} of {goals}** (comparison, dtype) pairs with a goal (bold: A/B at or above the "
              "goal). Train A/B is the median over the rounds of the per-round ratio (`train_ratio` in the JSON); "
              "the tokens/s columns are each model's own median, so the two can differ slightly. Every command, the "
              "peak memory and the `--lengths` scaling rows are on the family pages' speed sections and in the JSON."]
    return "\n".join(lines) + "\n"


def page_fastpath(repo: str = REPO) -> str:
    """Compiled (A) against eager (B) for every recurrent family: training tokens/s, beam-5
    sentences/s, the time to the first update and the compiled variants with their seconds."""
    entries = [e for e in gpu_entries(gpu_sources(repo)) if is_fastpath(e["name"])]
    families = list(dict.fromkeys(e["family"] for e in ENTRIES if e.get("fastpath")))
    if not entries:
        names = ", ".join(f"`{e['name']}`" for e in ENTRIES if e.get("fastpath"))
        return (f"No compiled-vs-eager measurement is kept: eager path only; the fast path has not been measured on a "
                f"GPU yet. `run_all.sh --part fastpath` measures {names} (families: {', '.join(families)}).\n")
    head = ["family", "comparison", "dtype", "train tok/s compiled / eager", "train compiled/eager",
            "beam-5 sent/s compiled / eager", "gen compiled/eager", "first update s compiled / eager",
            "compiled variants (train + gen)", "compile s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in entries:
        a, b = e["result"]["rows"]
        gen = (f"{fmt(a['gen_sent_per_s'], 1)} / {fmt(b['gen_sent_per_s'], 1)}"
               if a.get("gen_sent_per_s") and b.get("gen_sent_per_s") else "–")
        lines.append(f"| {e['family']} | `{e['name']}` (`{a['arch']}`) | {e['dtype']} | "
                     f"{fmt(a['train_tokens_per_s'])} / {fmt(b['train_tokens_per_s'])} | "
                     f"{e['result']['train_ratio']:.2f} | {gen} | {_ratio(_gen_ratio(e))} | "
                     f"{_first(a)} / {_first(b)} | {a.get('compiled_variants', '–')} | "
                     f"{fmt(a.get('compile_s'), 1)} |")
    missing = [f for f in families if f not in {e["family"] for e in entries}]
    if missing:
        lines += ["", f"Not measured: {', '.join(missing)} (no compiled-vs-eager entry of theirs ran)."]
    lines += ["", "The first update includes the compilation (and, on CUDA, the CUDA-graph capture) of the shapes of "
              "the first batch; the tokens/s are measured after every batch shape has compiled."]
    return "\n".join(lines) + "\n"


def _run_machine(d: dict, repo: str) -> str:
    """The GPU of a training run: its own ``device_name`` when it records one; otherwise check.json's,
    said to be check.json's (a later bench call may have replaced check.json)."""
    if d.get("device_name"):
        return d["device_name"]
    check = load(f"{GPU_DIR}/check.json", repo) if os.path.isfile(os.path.join(repo, GPU_DIR, "check.json")) else {}
    return f"the file names no device; `check.json`: {machine({'check': check, 'bench': {'device': 'cuda'}})}"


def gpu_train(repo: str = REPO) -> str:
    """The time-boxed Multi30k training of ``run_all.sh --part train`` (train.json)."""
    rel = f"{GPU_DIR}/train.json"
    d = load(rel, repo)
    lines = [f"From `{rel}` ({_run_machine(d, repo)}; {d['dtype']}, {d['minutes_each']} minutes of training each, "
             "valid BLEU with beam 5, tokenized):", "",
             "| arch | updates | epochs | words/s | valid loss per epoch | valid BLEU |", "|---|---|---|---|---|---|"]
    for arch, r in d["archs"].items():
        losses = ", ".join(f"{x:.3f}" for x in r["valid_loss_per_epoch"])
        lines.append(f"| `{arch}` | {r['num_updates']:,} | {r['epochs']} | {fmt(r['train_wps'])} | {losses} | "
                     f"{r['valid_bleu']['bleu']:.1f} |")
    lines += ["", "Command of the first row (the second: the same with its arch):", "",
              "<!-- doc-test: parse (a GPU training run on the full Multi30k) -->", "```bash",
              wrap(command(next(iter(d["archs"].values()))["command"])), "```"]
    return "\n".join(lines) + "\n"


def gpu_precision(repo: str = REPO) -> str:
    """fp32 against fairseq's --bf16 training (precision.json)."""
    rel = f"{GPU_DIR}/precision.json"
    d = load(rel, repo)
    lines = [f"From `{rel}` ({_run_machine(d, repo)}; `{d['arch']}`, {d['updates']} updates, same seed and batches):",
             "",
             "| run | updates | words/s | final valid loss |", "|---|---|---|---|"]
    for name, r in d["runs"].items():
        lines.append(f"| {name} | {r['num_updates']:,} | {fmt(r['train_wps'])} | "
                     f"{r['valid_loss_per_epoch'][-1]:.3f} |")
    lines += ["", f"bf16 changes the final valid loss by {100 * d['valid_loss_rel_diff']:+.2f} % of fp32's."]
    return "\n".join(lines) + "\n"


# generated sections: name -> (renderer, pages), embedded by scripts/docs_speed_table.py
SECTIONS = {
    "gpu_status": (page_status, (f"{GPU_DIR}/README.md",)),
    "gpu_comparisons": (page_comparisons, (f"{GPU_DIR}/README.md",)),
    "gpu_fastpath": (page_fastpath, (f"{GPU_DIR}/README.md",)),
    "gpu_train": (gpu_train, (f"{GPU_DIR}/README.md", "docs/mc_rnn.md")),
    "gpu_precision": (gpu_precision, (f"{GPU_DIR}/README.md", "docs/mc_rnn.md")),
}
