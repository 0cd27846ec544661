"""fairseq_local_repro/bench.py: the parts of the benchmark that a short CPU run can check (its
command line and JSON are checked in tests/test_scripts.py), and the CPU rows of the parallel cells."""
import os
import subprocess
import sys
from argparse import Namespace

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_local.modules import parallel_cell_rnn
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local_repro import bench
from fairseq_local_repro.bench_entries import ENTRIES
from fairseq_local_repro.gpu import run_all


def test_synthetic_data_dir_holds_the_dictionaries_and_is_removed_when_the_process_ends():
    code = ("from argparse import Namespace\nfrom fairseq_local_repro import bench\n"
            "print(bench.synthetic_data_dir(Namespace(vocab=40, task='translation')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    path = proc.stdout.strip().splitlines()[-1]
    assert os.path.basename(path).startswith("bench_dict_")
    assert not os.path.exists(path)  # no temporary folder left behind per benchmark or test


def test_synthetic_data_dir_dictionaries_have_the_requested_size():
    for task, names in (("translation", ["dict.src.txt", "dict.tgt.txt"]), ("language_modeling", ["dict.txt"])):
        d = bench.synthetic_data_dir(Namespace(vocab=40, task=task))
        assert sorted(os.listdir(d)) == names
        for name in names:
            assert len(Dictionary.load(os.path.join(d, name))) == 40


@pytest.mark.parametrize("name,baseline,fused_calls", [
    ("parallel_lm648_wide3_vs_lstm_lm", "lstm_lm", 2 * 3),  # 2 decoder layers of 3 cells
    ("parallel_mt510_wide3_vs_lstm", "lstm", 2 * 3),  # 2 encoder layers of 3 cells; the decoder feeds its input
])
def test_parallel_cell_cpu_rows_time_the_fused_kernel_against_fairseqs_baseline(name, baseline, fused_calls,
                                                                               monkeypatch):
    """The CPU profile (one thread, fp32) measures the 648-unit language model and the 510-unit
    seq2seq against fairseq's LSTMs, and on the benchmark's batches ours runs torch's fused kernel
    once per cell of every layer without input feeding."""
    run_args = run_all.parse_args(["out", "--part", "bench", "--cpu"])
    entry = next(e for e in ENTRIES if e["name"] == name)
    assert entry in run_all.selected_entries(run_args)
    args = bench.parse_args(run_all.bench_argv(entry, "fp32", run_args))
    assert (args.baseline, args.device, args.dtype, args.threads) == (baseline, "cpu", "fp32", 1)
    _, task, model, _ = bench.build(args.arch, args.arch_args, args, bench.synthetic_data_dir(args))
    calls = []
    kernel = parallel_cell_rnn.FUSED_KERNELS["lstm"]
    monkeypatch.setitem(parallel_cell_rnn.FUSED_KERNELS, "lstm", lambda *a: calls.append(1) or kernel(*a))
    batch = bench.synthetic_batches(task, args, 1, args.src_len, args.tgt_len)[0]
    with torch.no_grad():
        model(**batch["net_input"])
    assert all(m.wide == 3 for m in model.modules() if isinstance(m, ParallelCellRNNLayer))
    assert len(calls) == fused_calls
