"""Render each model family's speed tables (markdown) from the benchmark JSON kept in the repository,
and the result tables the pages quote from docs/results/.

    python scripts/docs_speed_table.py --family mc_rnn     # print one family's speed section
    python scripts/docs_speed_table.py --results gpu_train # print one results table
    python scripts/docs_speed_table.py --write             # refresh the tables embedded in docs/*.md
    python scripts/docs_speed_table.py --check             # exit 1 if an embedded table differs

Sources: every ``docs/results/*/bench.json`` (and ``fastpath.json``: a ``--part fastpath`` run kept
on its own) written by ``scripts/gpu/run_all.py`` (a list of
``scripts/bench.py --json`` results with the command that produced each), described by the
``check.json`` next to it (device name, torch and fairseq versions; for a CPU run also the
processor, the run_all command and the load average around each comparison). A CPU table also
gives each comparison's multiply-add ceiling (``ceiling`` / ``gen_ceiling`` of bench_entries.ENTRIES,
the numbers the page's text counts) and the measured ratio as a percentage of it. A page embeds its
family's tables between ``<!-- speed-table:begin FAMILY -->`` and ``<!-- table:end -->``; the text
in between is this script's output and is rewritten by ``--write``. A family without CPU results
says so. Result tables are embedded the same way between ``<!-- results-table:begin NAME -->`` and
``<!-- table:end -->``; among them every section of the GPU results page
(docs/results/gpu/README.md) and the paper-scale hours table of docs/gpu.md, rendered by
:mod:`fairseq_local_repro.gpu.report`.  After copying a GPU run's JSON into docs/results/gpu/,
``--write`` refreshes every page that quotes it.
"""
import argparse
import difflib
import glob
import os
import re
import sys
from typing import Dict, List, Optional

from fairseq_local_repro.bench_entries import ENTRIES  # the comparisons and their multiply-add ceilings
from fairseq_local_repro.gpu import hours, report
from fairseq_local_repro.gpu.report import command as _command, fmt as _fmt, machine as _machine, wrap as _wrap

REPO = report.REPO

FAMILIES = {"mc_rnn": "docs/mc_rnn.md", "parallel_cells": "docs/parallel_cells.md", "lattice": "docs/lattice.md",
            "gencnn": "docs/gencnn.md", "dpn_s2s": "docs/dpn_s2s.md"}
BEGIN = "<!-- speed-table:begin {} -->"
RESULTS_BEGIN = "<!-- results-table:begin {} -->"
END = "<!-- table:end -->"


def _sources() -> List[dict]:
    """Each benchmark file with its machine description, GPU before CPU."""
    paths = [p for name in report.BENCH_FILES for p in glob.glob(os.path.join(REPO, "docs", "results", "*", name))]
    out = [report.read_source(p, REPO) for p in sorted(paths)]
    return sorted(out, key=lambda s: (not s["gpu"], s["path"]))


def _row(entry) -> Dict[str, object]:
    a, b = entry["result"]["rows"]
    r = entry["result"]
    gen = a.get("gen_sent_per_s") is not None and b.get("gen_sent_per_s") is not None
    return {
        "dtype": entry["dtype"],
        "params": f"{a['params'] / 1e6:.2f}M / {b['params'] / 1e6:.2f}M",
        "train": f"{_fmt(a['train_tokens_per_s'])} / {_fmt(b['train_tokens_per_s'])}",
        "ratio": f"**{r['train_ratio']:.2f}** ({r['train_ratio_min']:.2f}–{r['train_ratio_max']:.2f})",
        "gen": f"{_fmt(a['gen_sent_per_s'], 1)} / {_fmt(b['gen_sent_per_s'], 1)}" if gen else "–",
        "gen_ratio": f"{a['gen_sent_per_s'] / b['gen_sent_per_s']:.2f}" if gen else "–",
        "mem": f"{_fmt(a['peak_mem_mib'])} / {_fmt(b['peak_mem_mib'])}",
    }


def _ceilings(name: str):
    entry = next((e for e in ENTRIES if e["name"] == name), {})
    return entry.get("ceiling"), entry.get("gen_ceiling")


def _of_ceiling(r, ceiling: Optional[float]) -> str:
    if ceiling is None:
        return "–"
    return (f"**{100 * r['train_ratio'] / ceiling:.0f} %** ({100 * r['train_ratio_min'] / ceiling:.0f}–"
            f"{100 * r['train_ratio_max'] / ceiling:.0f} %)")


def _conditions(source) -> List[str]:
    """The CPU run's command and what the machine was doing (check.json)."""
    check = source["check"]
    folder = os.path.dirname(source["path"])
    lines = []
    if check.get("command"):
        lines += [f"Measured with one command, in fp32 on one thread (`{folder}/check.json` describes the machine "
                  "and the run):", "", "<!-- doc-test: parse (a benchmark: twenty minutes of CPU) -->", "```bash",
                  _wrap(check["command"]), "```", ""]
    done = [e for e in check.get("entries", []) if e.get("status") == "ok"]
    if done:
        shares = [e["cpu_seconds"] / e["wall_seconds"] for e in done if e.get("wall_seconds")]
        text = (f"Each benchmark process got {min(shares):.2f}–{max(shares):.2f} of a core (its CPU seconds over "
                "its wall seconds).")
        if check.get("note"):
            text += f" {check['note'].rstrip('.')}."
        lines += [text, ""]
    lines += ["The ceiling is the baseline's forward multiply-adds per token over ours, as the text below counts "
              'them: the ratio A/B of two compute-bound models that run their arithmetic equally fast. "% of '
              'ceiling" is the measured ratio over it (median, with the range of the rounds); above 100 % ours '
              "runs its arithmetic faster than the baseline.", ""]
    return lines


def render(family: str) -> str:
    """The markdown of one family's speed section body (between the markers)."""
    lines: List[str] = []
    cpu_seen = False
    for source in _sources():
        entries = [e for e in source["bench"].get("entries", [])
                   if e.get("family") == family and e.get("status") == "ok"]
        if not entries:
            continue
        cpu_seen |= not source["gpu"]
        names = list(dict.fromkeys(e["name"] for e in entries))
        lines += [f"**{'GPU' if source['gpu'] else 'CPU'}: {_machine(source)}** (`{source['path']}`, "
                  f"{len(names)} comparison{'s' if len(names) > 1 else ''}; A = ours, B = the baseline; "
                  "training tokens/s is forward + backward + Adam step on the same batches; the ratio is the "
                  "median of the per-round A/B ratios with their range; generation is beam 5)", ""]
        if source["gpu"]:
            lines += ["The commands ran on the GPU box as `bash scripts/gpu/run_all.sh OUT --part bench` runs them "
                      "([gpu.md](gpu.md)); `gpu_kit/data/` is made by `bash scripts/gpu/prepare_data.sh`.", ""]
            if family in report.RECURRENT and report.predates_fast_path(entries):
                lines += [f"**{report.PREDATES}.**", ""]
        else:
            lines += _conditions(source)
        for name in names:
            group = [e for e in entries if e["name"] == name]
            first = group[0]
            a, b = (row["arch"] for row in first["result"]["rows"])
            lines += [f"`{name}`: `{a}` (A) vs `{b}` (B)", ""]
            if source["gpu"]:
                lines += ["| dtype | params A / B | train tok/s A / B | train A/B | beam-5 sent/s A / B | gen A/B "
                          "| peak MiB A / B |", "|---|---|---|---|---|---|---|"]
            else:
                lines += ["| dtype | params A / B | train tok/s A / B | train A/B | ceiling | % of ceiling "
                          "| beam-5 sent/s A / B | gen A/B | peak MiB A / B |", "|---|---|---|---|---|---|---|---|---|"]
            ceiling, gen_ceiling = _ceilings(name)
            for e in group:
                r = _row(e)
                if source["gpu"]:
                    lines.append(f"| {r['dtype']} | {r['params']} | {r['train']} | {r['ratio']} | {r['gen']} | "
                                 f"{r['gen_ratio']} | {r['mem']} |")
                    continue
                gen_ratio = r["gen_ratio"]
                if gen_ceiling is not None and e.get("gen_ratio") is not None:
                    gen_ratio += f" ({100 * e['gen_ratio'] / gen_ceiling:.0f} % of its ceiling {gen_ceiling:.2f})"
                lines.append(f"| {r['dtype']} | {r['params']} | {r['train']} | {r['ratio']} | "
                             f"{'–' if ceiling is None else f'{ceiling:.2f}'} | {_of_ceiling(e['result'], ceiling)} | "
                             f"{r['gen']} | {gen_ratio} | {r['mem']} |")
            commands = [_command(e["command"]) for e in group]
            dtypes = [e["dtype"] for e in group]
            generic = [c.replace(f"--dtype {d}", "--dtype D") for c, d in zip(commands, dtypes)]
            same = all(g == generic[0] for g in generic)
            lines.append("")
            if same and len(group) > 1:
                lines += [f"Command ({', '.join(dtypes[1:])}: the same with `--dtype` {', '.join(dtypes[1:])}):", ""]
                shown = commands[:1]
            else:
                lines += ["Command" + ("s:" if len(commands) > 1 else ":"), ""]
                shown = commands
            reason = "a GPU benchmark" if source["gpu"] else "a benchmark: minutes of CPU"
            for c in shown:
                lines += [f"<!-- doc-test: parse ({reason}) -->", "```bash", _wrap(c), "```", ""]
            scaling = [e for e in group if e["result"].get("scaling")]
            for e in scaling[:1]:
                lines += [f"Time per batch by sentence length ({e['dtype']}, batches of "
                          f"{e['result']['args']['max_tokens']} target tokens, so constant time per batch "
                          "means time linear in length):", "",
                          "| length | A ms/batch | B ms/batch |", "|---|---|---|"]
                for s in e["result"]["scaling"]:
                    lines.append(f"| {s['length']} | {s['A_ms_per_batch']:.1f} | {s['B_ms_per_batch']:.1f} |")
                lines.append("")
    if not lines:
        lines = ["No benchmark results are kept for this family yet.", ""]
    if not cpu_seen:
        lines += ["No CPU benchmark results are kept for this family: only the GPU tables are generated. The "
                  "page's multiply-add counts give the CPU ceiling of each ratio.", ""]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# result tables quoted from the JSON of docs/results/ (embedded between results-table markers)
# ----------------------------------------------------------------------------------------------
def _mc_rnn_multi30k_updates() -> str:
    rel = "docs/results/mc_rnn_learning/multi30k_1000_updates.json"
    d = report.load(rel, REPO)
    lines = [f"From `{rel}`. {d['setup']}.", "",
             "| arch | options | seed | train ppl @1000 | valid ppl @750 | valid ppl @1000 | valid BLEU |",
             "|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| `{r['arch']}` | {('`' + r['options'] + '`') if r['options'] else '(arch defaults)'} | "
                     f"{r['seed']} | {_fmt(r['train_interval_ppl'].get('1000'), 1)} | "
                     f"{_fmt(r['valid_ppl_fresh_at_750'], 1)} | **{_fmt(r['valid_ppl_fresh_at_1000'], 1)}** | "
                     f"{_fmt(r['valid_bleu_beam5_tokenized'], 1)} |")
    return "\n".join(lines) + "\n"


def primary_folders(family: str) -> list:
    """The folders of a family's claims in their primary settings (its verdict's ``**Tested:**``
    items), relative to the repository, in their order."""
    from fairseq_local_repro import verdicts

    base = f"docs/results/reproduce/{family}"
    path = os.path.join(REPO, base, "verdict.md")
    items = verdicts.tested_items(verdicts.read_verdict(path), path)
    return [f"{base}/{v}" if v else base for v in dict.fromkeys(i.variant or "" for i in items)] or [base]


def _reproduce(family: str) -> str:
    """A family's headline runs: the published folders of its claims' primary settings."""
    from fairseq_local_repro import page as repro_page

    parts = []
    for rel in primary_folders(family):
        comparison = repro_page.load_family(os.path.join(REPO, rel))
        runs = repro_page.summary_table(comparison)
        parts.append(f"From `{rel}/`, trained by `{comparison['command']}`:\n\n" + runs + "\n"
                     + "\n".join(["", *repro_page.dagger_note(runs)]).rstrip() + "\n")
    anchor = f"{family}-{comparison['scale']}-scale"
    return (f"The runs of the claims' primary settings; the tests and the verdicts are in "
            f"[results.md](results.md#{anchor}), the other settings, older splits, curves, sweeps and analysis in "
            f"[results/{family}.md](results/{family}.md).\n\n" + "\n".join(parts))


# name -> (renderer, page or pages); the GPU page's sections and docs/gpu.md's hours table come from
# fairseq_local_repro.gpu.report and .hours
RESULTS = {"mc_rnn_multi30k_updates": (_mc_rnn_multi30k_updates, "docs/mc_rnn.md"),
           **{name: ((lambda fn=fn: fn(REPO)), pages) for name, (fn, pages) in {**report.SECTIONS, **hours.SECTIONS}.items()}}
# every published reproduction is quoted on its family's page
for _path in sorted(glob.glob(os.path.join(REPO, "docs", "results", "reproduce", "*", "comparison.json"))):
    _family = os.path.basename(os.path.dirname(_path))
    if _family in FAMILIES:
        RESULTS[f"reproduce_{_family}"] = ((lambda f=_family: _reproduce(f)), FAMILIES[_family])


def sections():
    """(page, begin marker, body) of every generated section."""
    for family, page in FAMILIES.items():
        yield page, BEGIN.format(family), render(family)
    for name, (fn, pages) in RESULTS.items():
        body = fn()
        for page in ((pages,) if isinstance(pages, str) else pages):
            yield page, RESULTS_BEGIN.format(name), body


def embedded(text: str, begin: str) -> Optional[str]:
    m = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(END), text, re.S)
    return None if m is None else m.group(1)


def replace(text: str, begin: str, body: str) -> str:
    pattern = re.escape(begin) + r"\n.*?" + re.escape(END)
    return re.sub(pattern, lambda _: begin + "\n" + body + END, text, flags=re.S)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="docs_speed_table.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--family", choices=sorted(FAMILIES), help="print this family's speed tables")
    mode.add_argument("--results", choices=sorted(RESULTS), help="print this results table")
    mode.add_argument("--write", action="store_true", help="rewrite the tables embedded in the family pages")
    mode.add_argument("--check", action="store_true", help="exit 1 when an embedded table differs from the output")
    args = p.parse_args(argv)
    if args.family:
        sys.stdout.write(render(args.family))
        return 0
    if args.results:
        sys.stdout.write(RESULTS[args.results][0]())
        return 0
    if not (args.write or args.check):
        p.error("one of --family, --results, --write or --check is required")
    status = 0
    for page, begin, body in sections():
        path = os.path.join(REPO, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        current = embedded(text, begin)
        if current is None:
            if args.check:
                print(f"{page}: no '{begin}' ... '{END}' section", file=sys.stderr)
                status = 1
            continue
        if current == body:
            continue
        if args.write:
            from fairseq_local_core.file_io import write_text

            write_text(path, replace(text, begin, body))
            print(f"{page}: {begin} rewritten")
        else:
            diff = difflib.unified_diff(current.splitlines(), body.splitlines(), f"{page} (embedded)",
                                        "scripts/docs_speed_table.py", lineterm="", n=1)
            print(f"{page}: the section after {begin} differs from the generator (run "
                  f"python scripts/docs_speed_table.py --write):\n" + "\n".join(list(diff)[:40]), file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
