"""Tables and curves from ``mc_rnn_learning_probe.py --json`` files (one file per seed).

    python scripts/analysis/mc_rnn_learning_report.py probe_seed1.json probe_seed2.json ... \
        --png docs/figures/mc_rnn_learning.png [--markdown table.md]

Prints a markdown table: per system, the held-out NLL (bits per target word) at every evaluated
update as mean ± standard deviation over the files, the gap to the first system, the channel
attention's normalised entropy and the gradient norms of W_j / W_hh at the last evaluation, and
the gradient path-length ratio ||dh_T/dx_{T-8}|| / ||dh_T/dx_T||.  The PNG has the held-out curves
(mean over seeds, shaded min-max) and the path-length profiles.
"""
import argparse
import json
import statistics
from collections import OrderedDict

from fairseq_local_repro.analysis.figures import save_png


def load(paths):
    runs = OrderedDict()  # system -> list of per-seed results
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for r in json.load(f)["systems"]:
                runs.setdefault(r["system"], []).append(r)
    return runs


def _ms(values):
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, sd


def table(runs) -> str:
    names = list(runs)
    updates = [e["update"] for e in runs[names[0]][0]["evals"]]
    head = ["system", "arch / options", "params", "seeds"] + [f"valid @{u}" for u in updates] + [
        f"gap to {names[0]} @{updates[-1]}", "alpha entropy", "|g| W_j", "|g| W_hh", "path ratio d=8"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = [r["evals"][-1]["valid_nll_bits"] for r in runs[names[0]]]
    for name in names:
        rs = runs[name]
        cells = [name, rs[0]["arch"] + "".join(f" --{k.replace('_', '-')} {v}" for k, v in rs[0]["overrides"].items()),
                 f"{rs[0]['params']:,}", str(len(rs))]
        for i in range(len(updates)):
            m, sd = _ms([r["evals"][i]["valid_nll_bits"] for r in rs])
            cells.append(f"{m:.3f} ± {sd:.3f}")
        gaps = [r["evals"][-1]["valid_nll_bits"] - b for r, b in zip(rs, base)]
        m, sd = _ms(gaps)
        cells.append(f"{m:+.3f} ± {sd:.3f}")
        ent = [r["evals"][-1]["alpha_entropy"] for r in rs if r["evals"][-1]["alpha_entropy"] is not None]
        cells.append(f"{statistics.fmean(ent):.3f}" if ent else "–")
        for group in ("W_j", "W_hh"):
            g = [r["evals"][-1]["grad_norms"].get(group) for r in rs]
            cells.append(f"{statistics.fmean(g):.3f}" if all(v is not None for v in g) else "–")
        ratio = [r["path_length_profile"][8] / r["path_length_profile"][0] for r in rs
                 if len(r["path_length_profile"]) > 8 and r["path_length_profile"][0] > 0]
        cells.append(f"{statistics.fmean(ratio):.3f}" if ratio else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rs in runs.items():
        ups = [e["update"] for e in rs[0]["evals"]]
        vals = [[r["evals"][i]["valid_nll_bits"] for r in rs] for i in range(len(ups))]
        mean = [statistics.fmean(v) for v in vals]
        line, = ax1.plot(ups, mean, marker="o", label=f"{name} ({len(rs)} seeds)")
        ax1.fill_between(ups, [min(v) for v in vals], [max(v) for v in vals], color=line.get_color(), alpha=0.15)
        prof = [statistics.fmean(col) for col in zip(*[r["path_length_profile"] for r in rs])]
        ax2.semilogy(range(len(prof)), prof, marker=".", label=name, color=line.get_color())
    ax1.set_xlabel("updates (same batches for every system)")
    ax1.set_ylabel("held-out NLL (bits / target word)")
    ax1.legend()
    ax2.set_xlabel("distance T - t")
    ax2.set_ylabel("||d h_T / d x_t|| (first encoder layer)")
    ax2.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="+")
    p.add_argument("--png")
    p.add_argument("--markdown")
    a = p.parse_args(argv)
    runs = load(a.json)
    text = table(runs)
    print(text)
    if a.markdown:
        with open(a.markdown, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if a.png:
        plot(runs, a.png)


if __name__ == "__main__":
    main()
