"""One measured fairseq-train of the GPU acceptance run (each in its own process, started by
:mod:`fairseq_local_repro.gpu.acceptance`).

    python -m fairseq_local_repro.gpu.acceptance_train --json RUN.json [--warmup-updates 5] -- DATA --arch ...

Everything after ``--`` is fairseq-train's command line; its ``main`` runs in this process as
``fairseq-train`` runs it, with fairseq's own data loader and its defaults (``--num-workers 1``,
pinned memory, the buffering thread).  Every update is timed (the device synchronised after it, as
fairseq's own finite-gradient check of each update already does), and afterwards RUN.json gets:
the updates and target tokens, tokens/s over the updates after ``--warmup-updates``, the seconds
to the end of the first update, ``fast_path.stats()`` (variants, graphs captured, capture and
capture-ahead seconds, fallbacks, graph bytes), the graphs captured before the first update and
during each epoch, and the device's peak memory (``torch.cuda.max_memory_allocated``; none on CPU).
A run that raises writes what it measured with the error and exits 1.
"""
import argparse
import contextlib
import json
import os
import sys
import time
import traceback

import torch
from fairseq import distributed_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer
from fairseq_cli import train as fairseq_train

from fairseq_local.file_io import write_json
from fairseq_local.modules import fast_path


class Meter:
    """The updates of one training run: each one's end time and target tokens, the graphs captured
    when each epoch begins and before the first update."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.t0 = time.perf_counter()
        self.first_start = None
        self.ends, self.tokens = [], []
        self.epochs = []  # [epoch, updates so far, graphs captured so far] at each begin_epoch
        self.captured_before = None

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def begin_epoch(self, epoch):
        self.epochs.append([int(epoch), len(self.ends), captured()])

    def before_update(self):
        if self.first_start is None:
            self.captured_before = captured()
            self.first_start = self.sync()

    def after_update(self, samples):
        self.ends.append(self.sync())
        self.tokens.append(int(sum(s.get("ntokens", 0) for s in samples if s)))

    def record(self, warmup: int) -> dict:
        n = len(self.ends)
        rec = {"updates": n, "target_tokens": sum(self.tokens), "warmup_updates": warmup,
               "seconds_to_first_update": round(self.ends[0] - self.t0, 3) if n else None,
               "train_seconds": round(self.ends[-1] - self.first_start, 3) if n else None,
               "tokens_per_s": None, "captures_before_first_update": self.captured_before}
        if n > warmup:
            rec["tokens_per_s"] = round(sum(self.tokens[warmup:]) / (self.ends[-1] - self.ends[warmup - 1]
                                                                     if warmup else self.ends[-1] - self.first_start), 1)
        final = captured()
        marks = self.epochs + [[None, n, final]]
        rec["epochs"] = [{"epoch": a[0], "updates": b[1] - a[1], "graphs_captured": b[2] - a[2]}
                         for a, b in zip(marks, marks[1:])]
        return rec


def captured() -> int:
    return int(fast_path.stats().get("graphs_captured", 0))


@contextlib.contextmanager
def metered(meter: Meter):
    """Trainer.train_step and Trainer.begin_epoch report to ``meter`` (this process only)."""
    step, begin = Trainer.train_step, Trainer.begin_epoch

    def train_step(self, samples, *args, **kwargs):
        meter.before_update()
        out = step(self, samples, *args, **kwargs)
        meter.after_update(samples)
        return out

    def begin_epoch(self, epoch):
        meter.begin_epoch(epoch)
        return begin(self, epoch)

    Trainer.train_step, Trainer.begin_epoch = train_step, begin_epoch
    try:
        yield meter
    finally:
        Trainer.train_step, Trainer.begin_epoch = step, begin


def device_record(cuda: bool) -> dict:
    if not cuda:
        return {"device": "cpu", "device_name": None, "peak_memory_bytes": None, "peak_reserved_bytes": None}
    return {"device": "cuda", "device_name": torch.cuda.get_device_name(),
            "peak_memory_bytes": int(torch.cuda.max_memory_allocated()),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved())}


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=str))


def parse_args(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        sys.exit("acceptance_train: error: give fairseq-train's command line after --")
    k = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="where the measurements go")
    p.add_argument("--warmup-updates", type=int, default=5, help="updates left out of tokens/s (default 5)")
    a = p.parse_args(argv[:k])
    if a.warmup_updates < 0:
        p.error(f"--warmup-updates must be >= 0 (got {a.warmup_updates})")
    a.train_argv = argv[k + 1:]
    return a


def main(argv=None):
    a = parse_args(argv)
    cuda = "--cpu" not in a.train_argv and torch.cuda.is_available()
    meter = Meter(cuda)
    rec = {"argv": a.train_argv, "error": None}
    rc = 0
    try:
        args = options.parse_args_and_arch(options.get_training_parser(), a.train_argv)
        cfg = convert_namespace_to_omegaconf(args)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        with metered(meter):
            distributed_utils.call_main(cfg, fairseq_train.main)
        meter.sync()
    except BaseException as e:  # noqa: BLE001  (fairseq's SystemExit and any failure: recorded, exit 1)
        traceback.print_exc()
        rec["error"] = f"{type(e).__name__}: {e}".strip().splitlines()[0][:500] if str(e) else type(e).__name__
        rc = 1
    rec.update(meter.record(a.warmup_updates))
    rec.update(device_record(cuda))
    rec["fast_path"] = _jsonable(fast_path.stats())
    write_json(a.json, rec, indent=2)
    print(f"acceptance_train: {rec['updates']} updates, {rec['tokens_per_s']} tokens/s, "
          f"{rec['fast_path'].get('graphs_captured')} graphs captured, "
          f"{rec['fast_path'].get('graph_fallbacks')} fallbacks, peak memory {rec['peak_memory_bytes']}"
          + (f"; error: {rec['error']}" if rec["error"] else ""), flush=True)
    return rc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
