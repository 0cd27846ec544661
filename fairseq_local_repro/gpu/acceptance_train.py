"""The measured fairseq-train runs of one family of the GPU acceptance run, one after the other in
this process (started by :mod:`fairseq_local_repro.gpu.acceptance`, which time-boxes the process).

    python -m fairseq_local_repro.gpu.acceptance_train PLAN.json

PLAN.json: ``{"deadline": UNIX_TIME, "margin": SECONDS, "warmup_updates": N, "runs": [{"mode": M,
"weight": W, "json": PATH, "argv": [fairseq-train's command line]}, ...]}``.  Each run is
fairseq-train's ``main`` as ``fairseq-train`` runs it, with fairseq's own data loader and its
defaults (``--num-workers 1``, pinned memory, the buffering thread), told to stop by
``--stop-time-hours`` at its weight's share of the time left before the deadline, less ``margin``
seconds for start-up and validation.  Every update is timed (the device synchronised after it, as
fairseq's own finite-gradient check of each update already does), and the run's PATH gets: the
updates and target tokens, tokens/s over the updates after the warm-up, the seconds to the end of
the first update, ``fast_path.stats()`` (variants, graphs captured, capture and capture-ahead
seconds, fallbacks, graph bytes), the graphs captured before the first update and during each
epoch, the device's peak memory (``torch.cuda.max_memory_allocated``; none on CPU) and what was
still allocated when the run began.  A run that raises writes what it measured with the error and
the next run still starts; between runs every graph and compiled step is released
(``fast_path.reset()``) and the peak memory is reset.  Exit status 1 when a run failed.
"""
import contextlib
import gc
import json
import sys
import time
import traceback

import torch
from fairseq import distributed_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer
from fairseq_cli import train as fairseq_train

from fairseq_local_core.file_io import read_json, write_json
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
        if n > warmup:  # from the end of the last warm-up update (or the first update's start) to the last's end
            start = self.ends[warmup - 1] if warmup else self.first_start
            rec["tokens_per_s"] = round(sum(self.tokens[warmup:]) / (self.ends[-1] - start), 1)
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


def stop_after(deadline: float, now: float, weights: list, margin: float) -> float:
    """Seconds of training for the next run (``weights[0]``; ``weights[1:]`` the runs after it): its
    share of the time left before ``deadline``, less ``margin``; at least half its share."""
    share = max(0.0, deadline - now) * weights[0] / sum(weights)
    return max(share - margin, share / 2, 1.0)


def train_one(train_argv: list, warmup: int, stop_s: float) -> dict:
    """One fairseq-train (``train_argv``, stopping after ``stop_s`` seconds of training), measured."""
    argv = list(train_argv) + ["--stop-time-hours", f"{stop_s / 3600:.6f}"]
    cuda = "--cpu" not in argv and torch.cuda.is_available()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    rec = {"argv": argv, "error": None, "stop_after_s": round(stop_s, 1),
           "resident_before_bytes": int(torch.cuda.memory_allocated()) if cuda else None}
    meter = Meter(cuda)
    try:
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        cfg = convert_namespace_to_omegaconf(args)
        with metered(meter):
            distributed_utils.call_main(cfg, fairseq_train.main)
        meter.sync()
    except BaseException as e:  # noqa: BLE001  (fairseq's SystemExit and any failure: recorded)
        traceback.print_exc()
        rec["error"] = (f"{type(e).__name__}: {e}".strip().splitlines() or [type(e).__name__])[0][:500]
    rec.update(meter.record(warmup))
    rec.update(device_record(cuda))
    rec["fast_path"] = _jsonable(fast_path.stats())
    rec["seconds"] = round(time.perf_counter() - meter.t0, 2)
    return rec


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m fairseq_local_repro.gpu.acceptance_train PLAN.json", file=sys.stderr)
        return 2
    plan = read_json(argv[0])
    runs, rc = plan["runs"], 0
    for i, run in enumerate(runs):
        stop_s = stop_after(plan["deadline"], time.time(), [r["weight"] for r in runs[i:]], plan["margin"])
        print(f"acceptance_train: {run['mode']} run, stopping after {stop_s:.0f} s of training", flush=True)
        rec = train_one(run["argv"], plan["warmup_updates"], stop_s)
        rec["mode"] = run["mode"]
        write_json(run["json"], rec, indent=2)
        fast_path.reset()  # the next run starts with no graph, compiled step or counter of this one
        rc = rc or int(rec["error"] is not None)
        print(f"acceptance_train: {run['mode']}: {rec['updates']} updates, {rec['tokens_per_s']} tokens/s, "
              f"{rec['fast_path'].get('graphs_captured')} graphs captured, "
              f"{rec['fast_path'].get('graph_fallbacks')} fallbacks, peak memory {rec['peak_memory_bytes']}"
              + (f"; error: {rec['error']}" if rec["error"] else ""), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
