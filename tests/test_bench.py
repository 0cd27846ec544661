"""fairseq_local_repro/bench.py: the parts of the benchmark that a short CPU run can check (its
command line and JSON are checked in tests/test_scripts.py)."""
import os
import subprocess
import sys
from argparse import Namespace

from fairseq.data import Dictionary

from fairseq_local_repro import bench


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
