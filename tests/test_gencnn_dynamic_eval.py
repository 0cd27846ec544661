"""scripts/gencnn_dynamic_eval.py: dynamic evaluation (genCNN paper, Table 2's "Dynamic" column)."""
import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_local_repro.tools import gencnn_dynamic_eval as dyn

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENV = {"OMP_NUM_THREADS": "1", "PATH": str(BIN) + ":/usr/bin:/bin"}
LM = ["--task", "language_modeling", "--sample-break-mode", "eos", "--tokens-per-sample", "64"]


def run(*cmd):
    """A fairseq console script, or one of our scripts (a path ending in .py) by this Python."""
    argv = [sys.executable, *cmd] if cmd[0].endswith(".py") else [str(BIN / cmd[0]), *cmd[1:]]
    proc = subprocess.run(argv, env=ENV, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny genCNN trained for 2 updates on 40 sentences of 1 .. 25 words; valid = 12 others."""
    tmp = tmp_path_factory.mktemp("dyn")
    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(10)]

    def sentences(n, seed):
        g.manual_seed(seed)
        return [" ".join(words[int(i)] for i in torch.randint(0, 10, (int(torch.randint(1, 26, (1,), generator=g)),),
                                                              generator=g)) for _ in range(n)]

    (tmp / "train.txt").write_text("\n".join(sentences(40, 1)) + "\n", encoding="utf-8")
    (tmp / "valid.txt").write_text("\n".join(sentences(12, 2)) + "\n", encoding="utf-8")
    run("fairseq-preprocess", "--only-source", "--trainpref", str(tmp / "train.txt"), "--validpref",
        str(tmp / "valid.txt"), "--destdir", str(tmp / "bin"), "--workers", "1")
    run("fairseq-train", str(tmp / "bin"), "--user-dir", str(REPO / "fairseq_local"), *LM, "--arch", "gencnn",
        "--cpu", "--alpha-length", "9", "--beta-length", "6", "--decoder-embed-dim", "5",
        "--alpha-layers", "(3,4,3),(2,3,2)", "--beta-layers", "(3,4,0),(2,3,0)", "--fc-dim", "8",
        "--optimizer", "adagrad", "--lr", "0.05", "--batch-size", "4", "--max-update", "2",
        "--required-batch-size-multiple", "1", "--save-dir", str(tmp / "ckpt"), "--no-epoch-checkpoints",
        "--disable-validation", "--seed", "1")
    return tmp


def common(tmp):
    return [str(tmp / "bin"), "--user-dir", str(REPO / "fairseq_local"), *LM, "--path",
            str(tmp / "ckpt" / "checkpoint_last.pt"), "--cpu", "--gen-subset", "valid",
            "--required-batch-size-multiple", "1"]


def loss_of(out):
    return float(out.split("Loss (base 2): ")[-1].split(",")[0])


def test_lr_zero_equals_static_eval_lm(trained):
    """--dynamic-lr 0 gives fairseq-eval-lm's loss; a positive rate changes it (and lowers it on
    text the model has barely been trained for)."""
    static = loss_of(run("fairseq-eval-lm", *common(trained), "--batch-size", "1"))
    zero = loss_of(run("scripts/gencnn_dynamic_eval.py", *common(trained), "--batch-size", "1", "--dynamic-lr", "0"))
    assert abs(zero - static) < 1e-4, (zero, static)
    dynamic = loss_of(run("scripts/gencnn_dynamic_eval.py", *common(trained), "--batch-size", "1",
                          "--dynamic-lr", "0.5"))
    assert dynamic < static - 1e-3, (dynamic, static)


def _model_and_segments(trained):
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(dyn.get_parser(), common(trained) + ["--batch-size", "2"])
    cfg = convert_namespace_to_omegaconf(args)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([args.path])
    return models[0].double(), task, list(dyn.segments(task, cfg, 100000))


def _scores(model, sample):
    """Summed log-probabilities of each segment's target tokens, by the model's forward pass."""
    with torch.no_grad():
        net = model(**sample["net_input"])
        lp = model.get_normalized_probs(net, log_probs=True)
        t = sample["target"]
        keep = t.ne(model.decoder.dictionary.pad())
        return float(lp.gather(-1, t[..., None])[..., 0][keep].sum()), int(keep.sum())


def test_scores_each_segment_before_updating_on_it(trained):
    """Segment i is scored by the parameters after SGD steps on segments 0 .. i-1 only (no
    peeking): equal to an independent loop of score-then-torch.optim.SGD; the first segment gets
    the static score; a loop that steps before scoring gives different scores."""
    from fairseq.sequence_scorer import SequenceScorer

    model, task, segs = _model_and_segments(trained)
    assert len(segs) == 6 and [int(i) for s in segs for i in s["id"]] == list(range(12))  # corpus order
    lr = 0.3
    ref_model = copy.deepcopy(model)
    got = dyn.dynamic_eval(model, segs, lr, SequenceScorer(task.target_dictionary))

    def reference(m, peek):
        m = copy.deepcopy(m).eval()
        reference.model = m
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        out = []
        for s in segs:
            if not peek:
                out.append(_scores(m, s))
            opt.zero_grad()
            lp = m.get_normalized_probs(m(**s["net_input"]), log_probs=True)
            keep = s["target"].ne(m.decoder.dictionary.pad())
            (-lp.gather(-1, s["target"][..., None])[..., 0][keep].mean()).backward()
            opt.step()
            if peek:
                out.append(_scores(m, s))
        return out

    expected = reference(ref_model, peek=False)
    for p, q in zip(model.parameters(), reference.model.parameters()):  # updated in place, same steps
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)
    # (SequenceScorer returns float32 positional scores: agreement to float32 precision)
    for (a, n), (b, m) in zip(got["segments"], expected):
        assert n == m and abs(a - b) < 1e-5, (a, b)
    assert abs(got["segments"][0][0] - _scores(ref_model, segs[0])[0]) < 1e-5
    peeked = reference(ref_model, peek=True)
    assert all(abs(a - b) > 1e-3 for (a, _), (b, _) in zip(got["segments"], peeked))
    assert math.isclose(got["logprob_sum"], sum(a for a, _ in expected), rel_tol=0, abs_tol=1e-4)
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), ref_model.parameters()))


def test_bad_options_one_line(trained):
    for extra, msg in ((["--dynamic-lr", "-1"], "--dynamic-lr -1.0: must be >= 0"),
                       (["--post-process", "subword_nmt"], "--post-process: not supported")):
        proc = subprocess.run([sys.executable, "scripts/gencnn_dynamic_eval.py", *common(trained), *extra],
                              env=ENV, capture_output=True, text=True, cwd=REPO)
        assert proc.returncode != 0 and msg in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
