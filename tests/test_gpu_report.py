"""The GPU results page and the paper-scale hours table (fairseq_local_repro/gpu/report.py), rendered
from hand-made GPU JSON, and the --check / --write of scripts/docs_speed_table.py on a copy of docs/."""
import copy
import json
import re
import shutil

import pytest
import yaml

from doc_snippets import REPO, check_command, extract_blocks, simple_commands
from fairseq_local_repro.gpu import hours as gpu_hours
from fairseq_local_repro.gpu import report
from fairseq_local_repro.tools import docs_speed_table

IWSLT_10K = 3_949_114  # fairseq-preprocess's train.en count (gpu_hours.CORPORA's source)
PTB = 929_589


def _row(arch, tok_s, impl="absent", gen=None, first=None, variants=0, compile_s=0.0, params=1_000_000):
    row = {"model": "?", "arch": arch, "params": params, "train_tokens_per_s": tok_s, "peak_mem_mib": 100.0}
    if impl != "absent":  # a row written before rnn_impl existed has no such key
        row.update(rnn_impl=impl, first_step_s=first, compiled_variants=variants, compile_s=compile_s)
    if gen is not None:
        row["gen_sent_per_s"] = gen
    return row


def _entry(name, family, dtype, a, b, ratio, goal=None):
    return {"name": name, "family": family, "dtype": dtype, "goal": goal, "status": "ok",
            "command": f"python scripts/bench.py --arch {a['arch']} --baseline {b['arch']} --dtype {dtype} --json x.json",
            "device_name": "Some GPU 80GB", "train_ratio": ratio,
            "result": {"args": {"max_tokens": 4000}, "rows": [dict(a, model="A"), dict(b, model="B")], "scaling": [],
                       "train_ratio": ratio, "train_ratio_min": ratio - 0.05, "train_ratio_max": ratio + 0.05}}


def _current_run():
    """A run made with the fast path: a main comparison whose A compiled, the fast-vs-eager entry of
    MC-RNN, DPN (no recurrent loop) and one skipped entry."""
    return [
        _entry("mc_rnn3_vs_lstm", "mc_rnn", "fp32",
               _row("mc_rnn_iwslt_de_en_3", 20_000.0, "compiled", gen=300.0, first=40.0, variants=3),
               _row("lstm", 16_000.0, None, gen=250.0, first=1.25), 1.25, goal=0.7),
        _entry("mc_rnn3_vs_lstm", "mc_rnn", "bf16",
               _row("mc_rnn_iwslt_de_en_3", 21_000.0, "compiled", gen=310.0, first=41.0, variants=3),
               _row("lstm", 35_000.0, None, gen=500.0, first=1.0), 0.6, goal=0.7),
        _entry("mc_rnn3_compiled_vs_eager", "mc_rnn", "fp32",
               _row("mc_rnn_iwslt_de_en_3", 25_000.0, "compiled", gen=320.0, first=41.2, variants=4, compile_s=35.5),
               _row("mc_rnn_iwslt_de_en_3", 10_000.0, "eager", gen=128.0, first=0.9), 2.5),
        _entry("dpn_vs_transformer", "dpn_s2s", "fp32", _row("dpn_s2s_iwslt_de_en", 90_000.0, None, gen=200.0, first=2.0),
               _row("dpn_baseline_deeper_san_iwslt", 100_000.0, None, gen=250.0, first=2.0), 0.9, goal=0.9),
        {"name": "lattice_dwl_gating_vs_word", "family": "lattice", "dtype": "fp32", "goal": 0.67,
         "status": "skipped", "reason": "no gpu_kit/data/lattice"},
    ]


def _old_run():
    """A run from before --rnn-impl: no rnn_impl, first_step_s or compiled_variants in its rows."""
    return [_entry("mc_rnn3_vs_lstm", "mc_rnn", "fp32", _row("mc_rnn_iwslt_de_en_3", 13_809.0, gen=291.0),
                   _row("lstm", 55_371.0, gen=657.0), 0.23, goal=0.7),
            _entry("gencnn_vs_fconv_lm", "gencnn", "fp32", _row("gencnn_paper", 39_286.0),
                   _row("fconv_lm", 576_514.0), 0.07, goal=1.0)]


def _repo(tmp_path, entries, fastpath=None):
    gpu = tmp_path / "docs" / "results" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "bench.json").write_text(json.dumps({"device": "cuda", "tiny": False, "entries": entries}))
    if fastpath is not None:
        (gpu / "fastpath.json").write_text(json.dumps({"device": "cuda", "tiny": False, "entries": fastpath}))
    (gpu / "check.json").write_text(json.dumps({"device": "cuda", "cuda_device": "Some GPU 80GB", "torch": "2.99.0",
                                                "fairseq": "0.12.3.1"}))
    return str(tmp_path)


def _table_row(md, first_cell):
    """The cells of the markdown row whose first cells start with ``first_cell``."""
    for line in md.splitlines():
        if line.startswith("| " + first_cell):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no row {first_cell!r} in\n{md}")


def test_hours_are_tokens_over_tokens_per_second():
    assert gpu_hours.hours(3600, 1.0) == 1.0
    assert gpu_hours.hours(7200, 2.0, epochs=3) == 3.0
    assert gpu_hours.hours(IWSLT_10K, 96_905.0) == pytest.approx(IWSLT_10K / 96_905.0 / 3600)
    assert [gpu_hours.duration(h) for h in (10 / 3600, 0.5, 2.345, 123.4)] == ["10 s", "30.0 min", "2.35 h", "123 h"]
    # bounds: a product of an upper bound and an exact value is an upper bound; opposite bounds say nothing
    assert gpu_hours.combine("=", "=") == "=" and gpu_hours.combine("<=", "=") == "<=" and gpu_hours.combine(">=", ">=") == ">="
    assert gpu_hours.combine("<=", ">=") is None


def test_hours_table_from_the_fast_and_eager_rows(tmp_path):
    md = gpu_hours.hours_table(_repo(tmp_path, _current_run()))
    assert md.startswith("Measured on Some GPU 80GB (`docs/results/gpu/bench.json`), fp32,")
    assert "Eager path only" not in md
    cells = _table_row(md, "mc_rnn | `mc_rnn_iwslt14.sh --row table2_mc_rnn_3`")
    # eager from the compiled-vs-eager entry's B row, fast from its A row (that entry comes first)
    eager_h, fast_h = IWSLT_10K / 10_000 / 3600, IWSLT_10K / 25_000 / 3600
    assert cells[3:] == ["10,000", f"≤ {eager_h * 60:.1f} min", f"≤ {eager_h * 50:.2f} h",
                         "25,000", f"≤ {fast_h * 60:.1f} min", f"≤ {fast_h * 50:.2f} h"]
    assert cells[3:] == ["10,000", "≤ 6.6 min", "≤ 5.48 h", "25,000", "≤ 2.6 min", "≤ 2.19 h"]
    # DPN: no recurrent loop, one path; IWSLT14 BPE 10k is an exact count, 200 epochs the recipe's cap
    cells = _table_row(md, "dpn_s2s | `dpn_s2s_iwslt14.sh")
    assert cells[3:6] == ["90,000", f"{IWSLT_10K / 90_000:.0f} s", f"≤ {IWSLT_10K / 90_000 * 200 / 3600:.2f} h"]
    assert cells[6] == "no `--rnn-impl` (one path)"
    # nothing measured: the row says so in every column
    cells = _table_row(md, "parallel_cells | `parallel_cells_ptb.sh")
    assert cells[2].startswith("not measured") and cells[3] == cells[6] == "not measured"
    # the inputs table states every corpus size and epoch count with its source
    assert f"| 3,949,114 | fairseq-preprocess's count of `train.en`" in md
    assert f"| {PTB:,} |" in md
    assert "| 55 | max_epoch of configs/parallel_cells/table2_ptb_wide3.yaml; the paper, Section 3.1" in md


def test_epochs_are_read_from_each_recipes_row(tmp_path, monkeypatch):
    for r in gpu_hours.RECIPES:
        cfg = yaml.safe_load((REPO / r["row"]).read_text(encoding="utf-8"))
        opt, ckpt = cfg.get("optimization") or {}, cfg.get("checkpoint") or {}
        early = ckpt.get("patience", -1) > 0 or opt.get("stop_min_lr", -1) > 0
        assert gpu_hours.epochs(r)[:2] == (opt.get("max_epoch") or None, "<=" if early else "="), r["row"]
    # a cap changed in the row's YAML is the table's
    row = tmp_path / "table1_dpn_s2s.yaml"
    yaml_text = (REPO / "configs/dpn_s2s/table1_dpn_s2s.yaml").read_text(encoding="utf-8")
    assert "max_epoch: 200\n" in yaml_text
    row.write_text(yaml_text.replace("max_epoch: 200\n", "max_epoch: 7\n"), encoding="utf-8")
    dpn = next(r for r in gpu_hours.RECIPES if r["recipe"].startswith("`dpn_s2s_iwslt14.sh"))
    monkeypatch.setitem(dpn, "row", str(row))
    cells = _table_row(gpu_hours.hours_table(_repo(tmp_path, _current_run())), "dpn_s2s | `dpn_s2s_iwslt14.sh")
    assert cells[5] == "≤ " + gpu_hours.duration(IWSLT_10K / 90_000 / 3600 * 7)


def test_unknown_inputs_leave_the_hours_unknown(tmp_path):
    entries = _current_run()
    lattice = _entry("lattice_dwl_gating_vs_word", "lattice", "fp32", _row("lattice_dwl_gating", 50_000.0, "compiled"),
                     _row("rnnsearch_zh_word", 90_000.0, "eager"), 0.55, goal=0.67)
    md = gpu_hours.hours_table(_repo(tmp_path, entries[:-1] + [lattice]))
    cells = _table_row(md, "lattice | `lattice_nist_zhen.sh")
    # tokens are a bound (<= 35.75M), epochs unknown: per epoch bounded, to convergence unknown;
    # no eager row of this model was measured
    assert cells[3:6] == ["not measured", "–", "–"]
    assert cells[6:] == ["50,000", f"≤ {35_750_000 / 50_000 / 60:.1f} min", "unknown"]


def test_old_json_says_eager_path_only(tmp_path):
    repo = _repo(tmp_path, _old_run())
    status = report.page_status(repo)
    assert status.startswith("**Eager path only; the fast path has not been measured on a GPU yet")
    assert "* `docs/results/gpu/bench.json`: Some GPU 80GB, torch 2.99.0, fairseq 0.12.3.1; 2 comparisons in fp32." in status
    assert report.page_fastpath(repo).startswith("No compiled-vs-eager measurement is kept: eager path only; the fast "
                                                 "path has not been measured on a GPU yet.")
    comparisons = report.page_comparisons(repo)
    assert _table_row(comparisons, "`mc_rnn3_vs_lstm`")[-2:] == ["eager (before `--rnn-impl`)", "– / –"]
    # genCNN has a fast path too (CUDA graphs of its forward): its old rows ran eagerly as well
    assert _table_row(comparisons, "`gencnn_vs_fconv_lm`")[-2] == "eager (before `--rnn-impl`)"
    hours = gpu_hours.hours_table(repo)
    assert "**Eager path only" in hours
    cells = _table_row(hours, "mc_rnn | `mc_rnn_iwslt14.sh --row table2_mc_rnn_3`")
    assert cells[3] == "13,809" and cells[6] == "not measured"


def test_page_tables_carry_the_json_values(tmp_path):
    repo = _repo(tmp_path, _current_run())
    status = report.page_status(repo)
    assert status.startswith("The fast path was measured: 1 compiled-vs-eager comparison,")
    assert "not measured: `lattice_dwl_gating_vs_word`" in status
    md = report.page_comparisons(repo)
    cells = _table_row(md, "`mc_rnn3_vs_lstm`")
    assert cells == ["`mc_rnn3_vs_lstm`: `mc_rnn_iwslt_de_en_3` vs `lstm`", "1.00M", "1.00M", "20,000", "16,000",
                     "**1.25**", "0.60", "0.70", f"{300 / 250:.2f}", f"{310 / 500:.2f}", "compiled", "40.0 / 1.2"]
    assert "Goals met: **2 of 3**" in md  # 1.25 >= 0.7, 0.60 < 0.7 (bf16), DPN 0.90 >= 0.9
    assert "`mc_rnn3_compiled_vs_eager`" not in md
    fast = report.page_fastpath(repo)
    cells = _table_row(fast, "mc_rnn | `mc_rnn3_compiled_vs_eager`")
    assert cells[2:] == ["fp32", "25,000 / 10,000", "2.50", "320.0 / 128.0", "2.50", "41.2 / 0.9", "4", "35.5"]
    assert "Not measured: parallel_cells, lattice" in fast


def test_a_fastpath_call_kept_on_its_own_is_read(tmp_path):
    entries = _current_run()
    fast = [e for e in entries if e["name"] == "mc_rnn3_compiled_vs_eager"]
    repo = _repo(tmp_path, [e for e in entries if e not in fast], fastpath=fast)
    assert "| mc_rnn | `mc_rnn3_compiled_vs_eager`" in report.page_fastpath(repo)
    assert report.page_status(repo).count("\n* `docs/results/gpu/") == 2


def test_check_passes_on_the_committed_docs_and_fails_on_an_edited_table(tmp_path, monkeypatch, capsys):
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    monkeypatch.setattr(docs_speed_table, "REPO", str(tmp_path))
    assert docs_speed_table.main(["--check"]) == 0
    gpu_md = tmp_path / "docs" / "gpu.md"
    text = gpu_md.read_text(encoding="utf-8")
    body = docs_speed_table.embedded(text, docs_speed_table.RESULTS_BEGIN.format("gpu_hours"))
    assert body == gpu_hours.hours_table(str(tmp_path)) and "| mc_rnn |" in body
    edited = re.sub(r"\| 13,809 \|", "| 23,809 |", text, count=1)
    assert edited != text
    gpu_md.write_text(edited, encoding="utf-8")
    capsys.readouterr()
    assert docs_speed_table.main(["--check"]) == 1
    assert "docs/gpu.md: the section after <!-- results-table:begin gpu_hours --> differs" in capsys.readouterr().err
    # the GPU page too: a changed figure in the JSON changes its table
    bench = tmp_path / "docs" / "results" / "gpu" / "bench.json"
    data = json.loads(bench.read_text(encoding="utf-8"))
    changed = copy.deepcopy(data)
    changed["entries"][0]["result"]["rows"][0]["train_tokens_per_s"] = 12_345.0
    bench.write_text(json.dumps(changed), encoding="utf-8")
    assert docs_speed_table.main(["--write"]) == 0  # rewrites the edited table too
    page = (tmp_path / "docs" / "results" / "gpu" / "README.md").read_text(encoding="utf-8")
    assert "| 12,345 |" in docs_speed_table.embedded(page, docs_speed_table.RESULTS_BEGIN.format("gpu_comparisons"))
    hours = docs_speed_table.embedded(gpu_md.read_text(encoding="utf-8"),
                                      docs_speed_table.RESULTS_BEGIN.format("gpu_hours"))
    assert hours == gpu_hours.hours_table(str(tmp_path)) and "| 12,345 |" in hours and "| 23,809 |" not in hours


def test_gpu_page_commands_are_accepted():
    page = REPO / "docs" / "results" / "gpu" / "README.md"
    blocks = extract_blocks(page)
    assert blocks and all(b.mode in ("parse", "text") for b in blocks), [b.where for b in blocks if b.mode is None]
    for block in blocks:
        if block.mode != "parse":
            continue
        for line, argv in simple_commands(block.code):
            assert check_command(argv) is None, (block.where, line, argv)


def test_training_tables_name_the_device_their_file_records(tmp_path):
    repo = _repo(tmp_path, _current_run())
    run = {"command": "fairseq-train d --arch mc_rnn_iwslt_de_en_3 --max-tokens 4096", "num_updates": 700, "epochs": 6,
           "train_wps": 14780.2, "valid_loss_per_epoch": [6.552, 3.494], "valid_bleu": {"bleu": 28.12}, "status": "ok"}
    train = {"dtype": "fp32", "minutes_each": 3.05, "archs": {"mc_rnn_iwslt_de_en_3": run}}
    (tmp_path / "docs" / "results" / "gpu" / "train.json").write_text(json.dumps(train))
    md = report.gpu_train(repo)
    # no device in the file: said so, with check.json's (which a later bench call may have replaced)
    assert md.startswith("From `docs/results/gpu/train.json` (the file names no device; `check.json`: Some GPU 80GB, "
                         "torch 2.99.0, fairseq 0.12.3.1; fp32, 3.05 minutes")
    assert "| `mc_rnn_iwslt_de_en_3` | 700 | 6 | 14,780 | 6.552, 3.494 | 28.1 |" in md
    (tmp_path / "docs" / "results" / "gpu" / "train.json").write_text(json.dumps(dict(train, device_name="Other GPU")))
    assert report.gpu_train(repo).startswith("From `docs/results/gpu/train.json` (Other GPU; fp32,")
