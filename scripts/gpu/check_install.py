#!/usr/bin/env python
"""Check a fairseq + fairseq_local installation (run by scripts/gpu/bootstrap.sh).

    python scripts/gpu/check_install.py [--arch mc_rnn_iwslt_de_en_3] [--device cuda|cpu] [--json OUT]

Imports fairseq and the plugin, reports the versions and which of fairseq's compiled extensions
load (libbleu, data_utils_fast and token_block_utils_fast are required; the torch-ABI ones, libnat,
libbase and ngram_repeat_block_cuda, are optional and only reported), then builds ``--arch``
through fairseq's registry on ``--device`` (cuda when available; its paper dimensions on cuda, tiny
ones on cpu) and runs one training step (forward, backward, Adam) on a synthetic batch, requiring
a finite loss and finite gradients.  Prints one JSON object; exits non-zero with one line naming
what failed.
"""
import argparse
import importlib
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # scripts/: bench.py builds models the way fairseq does

REQUIRED_EXTENSIONS = ["fairseq.libbleu", "fairseq.data.data_utils_fast", "fairseq.data.token_block_utils_fast"]
OPTIONAL_EXTENSIONS = ["fairseq.libnat", "fairseq.libbase", "fairseq.ngram_repeat_block_cuda", "fairseq.libnat_cuda"]
TINY = ("--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 --decoder-hidden-size 16 "
        "--attention-dim 16")


def fail(msg):
    print(f"check_install.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def versions():
    """The versions of Python, torch, numpy, fairseq and fairseq_local (imported here)."""
    import fairseq
    import numpy
    import torch

    import fairseq_local

    return {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy.__version__,
            "fairseq": fairseq.__version__, "fairseq_local": fairseq_local.__version__}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="mc_rnn_iwslt_de_en_3")
    p.add_argument("--arch-args", default=None, help="extra model args (default: tiny dims on cpu, none on cuda)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    p.add_argument("--json", help="also write the report here")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=UserWarning)  # hydra/omegaconf deprecation chatter
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        import torch
        import numpy  # noqa: F401  (versions() reports it)
        import fairseq
        import fairseq_local  # noqa: F401
    except Exception as e:  # noqa: BLE001  (any import failure is the answer)
        fail(f"import failed: {type(e).__name__}: {e}")
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no CUDA device")
    report = {**versions(), "fairseq_path": os.path.dirname(fairseq.__file__), "device": device,
              "cuda_device": torch.cuda.get_device_name(0) if device == "cuda" else None,
              "extensions": {}}
    for name in REQUIRED_EXTENSIONS + OPTIONAL_EXTENSIONS:
        try:
            importlib.import_module(name)
            report["extensions"][name] = "ok"
        except Exception as e:  # noqa: BLE001  (ImportError, or OSError for an ABI mismatch)
            report["extensions"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    missing = [n for n in REQUIRED_EXTENSIONS if report["extensions"][n] != "ok"]
    if missing:
        fail(f"fairseq extension {missing[0]} does not load: {report['extensions'][missing[0]]}")

    import bench

    extra = a.arch_args if a.arch_args is not None else (TINY if device == "cpu" else "")
    args = bench.parse_args(["--arch", a.arch, "--baseline", a.arch, "--arch-args", extra, "--device", device,
                             "--vocab", "1000", "--max-tokens", "160", "--src-len", "10", "--tgt-len", "8"])
    try:
        cfg, task, model, criterion = bench.build(a.arch, extra, args, bench.synthetic_data_dir(args))
        sample = bench.to_device(bench.synthetic_batches(task, args, 1, args.src_len, args.tgt_len), device)[0]
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        model.train()
        loss, _, _ = criterion(model, sample)
        loss.backward()
        bad = [n for n, q in model.named_parameters() if q.grad is not None and not torch.isfinite(q.grad).all()]
        opt.step()
    except Exception as e:  # noqa: BLE001
        fail(f"--arch {a.arch} on {device}: {type(e).__name__}: {e}")
    if not torch.isfinite(loss) or bad:
        fail(f"--arch {a.arch} on {device}: loss {loss.item()}, non-finite gradients in {bad[:3]}")
    report["model"] = {"arch": a.arch, "params": sum(q.numel() for q in model.parameters()),
                       "param_device": str(next(model.parameters()).device), "loss": loss.item()}
    report["seconds"] = round(time.perf_counter() - t0, 2)
    text = json.dumps(report, indent=2)
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(a.json + ".tmp", a.json)
    print(text)


if __name__ == "__main__":
    main()
