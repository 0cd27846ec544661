"""Average the parameters of several fairseq checkpoints into one (fairseq's
``scripts/average_checkpoints.py``, which the installed fairseq package does not ship).

    python scripts/average_checkpoints.py --inputs ckpt/checkpoint3.pt ckpt/checkpoint4.pt --output avg.pt
    python scripts/average_checkpoints.py --inputs ckpt/ --num-epoch-checkpoints 5 --output avg.pt
    python scripts/average_checkpoints.py --inputs ckpt/ --num-update-checkpoints 5 \
        --checkpoint-upper-bound 30000 --output avg.pt

Options and result are fairseq's: the output is the first input checkpoint (the newest one with
``--num-*-checkpoints``) with every model parameter replaced by its mean over the inputs (integer
buffers: the floor of the mean).  Unlike fairseq's script, every input is loaded with
``torch.load(weights_only=True)`` and the plugin's allow-list, sums are kept in float64 and cast
back to each parameter's dtype, inputs whose parameter names or shapes differ are refused with one
line, and so are inputs trained with other dictionaries (the fingerprints every checkpoint of the
plugin stores: unrelated runs, whose parameters may have the same shapes); the output file appears
only once completely written.
"""
import argparse
import collections
import os
import re
import sys

PROG = "average_checkpoints.py"


def _plugin():
    import fairseq_local  # noqa: F401  (allow-list, one-line error hook)
    from fairseq_local_core.errors import CheckpointError, ConfigError

    return CheckpointError, ConfigError


def last_n_checkpoints(paths, n, update_based, upper_bound=None):
    """The ``n`` newest ``checkpointE.pt`` (or ``checkpoint_E_U.pt`` when ``update_based``) files of
    the single directory in ``paths``, newest first, ignoring those past ``upper_bound``."""
    _, ConfigError = _plugin()
    if len(paths) != 1 or not os.path.isdir(paths[0]):
        raise ConfigError("--num-epoch-checkpoints/--num-update-checkpoints need --inputs to be one directory")
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt$" if update_based else r"checkpoint(\d+)\.pt$")
    found = []
    for name in os.listdir(paths[0]):
        m = pattern.fullmatch(name)
        if m and (upper_bound is None or int(m.group(1)) <= upper_bound):
            found.append((int(m.group(1)), os.path.join(paths[0], name)))
    if len(found) < n:
        kind = "update" if update_based else "epoch"
        raise ConfigError(f"found {len(found)} {kind} checkpoints in {paths[0]}, fewer than the {n} requested")
    return [path for _, path in sorted(found, reverse=True)[:n]]


def check_same_dictionaries(path, state, first_path, first):
    """Checkpoints whose dictionaries (the fingerprints the plugin stores in every checkpoint) differ
    are of runs on other data: their parameters have the same shapes when the dictionaries have the
    same size, but averaging them mixes unrelated models."""
    from fairseq_local.data.checkpoint_dictionaries import stored

    CheckpointError, _ = _plugin()
    mine, theirs = stored(first), stored(state)
    for side in sorted(set(mine) & set(theirs)):
        a, b = mine[side], theirs[side]
        if isinstance(a, dict) and isinstance(b, dict) and a.get("sha256") != b.get("sha256"):
            raise CheckpointError(
                f"{path} was trained with another {side} dictionary than {first_path} ({b.get('size')} and "
                f"{a.get('size')} entries, other words): the checkpoints are of unrelated runs; average "
                "checkpoints of one run")


def average_checkpoints(inputs):
    """The state of ``inputs[0]`` with each ``model`` entry averaged over all ``inputs``."""
    import torch
    from fairseq_local.safe_loading import safe_load

    CheckpointError, _ = _plugin()
    first, sums = None, collections.OrderedDict()
    for path in inputs:
        state = safe_load(path)
        if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
            raise CheckpointError(f"{path} is not a fairseq checkpoint (no 'model' entry)")
        model = state["model"]
        if first is None:
            first = state
            sums = collections.OrderedDict(
                (k, v.to(torch.float64 if v.is_floating_point() else torch.int64).clone()) for k, v in model.items())
            continue
        check_same_dictionaries(path, state, inputs[0], first)
        if model.keys() != sums.keys():
            diff = sorted(set(model) ^ set(sums))
            raise CheckpointError(f"{path} has other parameters than {inputs[0]} (e.g. '{diff[0]}')")
        for k, v in model.items():
            if v.shape != sums[k].shape:
                raise CheckpointError(f"{path}: '{k}' has shape {tuple(v.shape)}, {inputs[0]} has {tuple(sums[k].shape)}")
            sums[k] += v.to(sums[k].dtype)
    n = len(inputs)
    for k, v in first["model"].items():
        mean = sums[k] / n if v.is_floating_point() else torch.div(sums[k], n, rounding_mode="floor")
        first["model"][k] = mean.to(v.dtype)
    return first


def save_atomic(state, path):
    import torch
    from fairseq_local_core.file_io import atomic_open

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_open(path, "wb", fsync=True) as f:
        torch.save(state, f)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", required=True, nargs="+", help="checkpoint files, or one directory with "
                   "--num-epoch-checkpoints / --num-update-checkpoints")
    p.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    n = p.add_mutually_exclusive_group()
    n.add_argument("--num-epoch-checkpoints", type=int, help="average the last N checkpointE.pt of --inputs")
    n.add_argument("--num-update-checkpoints", type=int, help="average the last N checkpoint_E_U.pt of --inputs")
    p.add_argument("--checkpoint-upper-bound", type=int,
                   help="with --num-*-checkpoints: ignore checkpoints past this epoch / update number")
    a = p.parse_args(argv)
    count = a.num_epoch_checkpoints or a.num_update_checkpoints
    if count is not None and count < 1:
        p.error("--num-epoch-checkpoints/--num-update-checkpoints must be at least 1")
    if a.checkpoint_upper_bound is not None and count is None:
        p.error("--checkpoint-upper-bound needs --num-epoch-checkpoints or --num-update-checkpoints")
    return a


def main(argv=None):
    a = parse_args(argv)
    inputs = a.inputs
    if a.num_epoch_checkpoints or a.num_update_checkpoints:
        inputs = last_n_checkpoints(inputs, a.num_epoch_checkpoints or a.num_update_checkpoints,
                                    a.num_update_checkpoints is not None, a.checkpoint_upper_bound)
    for path in inputs:
        if not os.path.isfile(path):
            sys.exit(f"{PROG}: error: checkpoint '{path}' does not exist")
    print(f"averaging {len(inputs)} checkpoints: {' '.join(inputs)}", file=sys.stderr)
    from fairseq_local_core.file_io import sigterm_as_interrupt

    try:  # Ctrl-C or kill: no temporary file left, --output as it was
        with sigterm_as_interrupt():
            save_atomic(average_checkpoints(inputs), a.output)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; {a.output} was left as it was", file=sys.stderr)
        return 130
    print(f"wrote {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
