"""scripts/startup_cost.py (fairseq_local_repro/startup.py): one training step per batch shape,
with what each step spent compiling and capturing."""
import json

import pytest

from fairseq_local_repro import startup

TINY = ("--encoder-embed-dim 6 --encoder-hidden-size 6 --decoder-embed-dim 6 --decoder-hidden-size 6 "
        "--attention-dim 6 --encoder-layers 1 --decoder-layers 1")


def test_one_step_per_shape_with_its_startup_costs(tmp_path, capsys):
    out = tmp_path / "startup.json"
    startup.main(["--arch", "mc_rnn_iwslt_de_en_2", "--arch-args", TINY, "--impls", "eager", "--shapes",
                  "4x5x6,3x7x2", "--vocab", "30", "--device", "cpu", "--json", str(out)])
    report = json.loads(out.read_text())
    steps = report["steps"]
    assert [(s["B"], s["S"], s["T"], s["time_bucket"]) for s in steps] == [(4, 5, 6, 8), (3, 7, 2, 8)]
    assert all(isinstance(s["seconds"], float) and s["seconds"] >= 0 and s["compiles"] == 0 and s["graphs_captured"] == 0
               for s in steps)
    assert report["totals"]["eager"]["seconds"] == pytest.approx(sum(s["seconds"] for s in steps), abs=1e-6)
    assert report["totals"]["eager"]["kernels"] == 0 and report["device"] == "cpu"
    assert "eager: " in capsys.readouterr().out


@pytest.mark.parametrize("shapes,lm", [("4x5", False), ("4x0x3", False), ("4xax3", False), ("4x5x6", True)])
def test_bad_shapes_are_one_line(shapes, lm, capsys):
    argv = ["--arch", "mc_rnn_iwslt_de_en_2", "--shapes", shapes]
    if lm:
        argv += ["--task", "language_modeling"]
    with pytest.raises(SystemExit) as e:
        startup.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--shapes" in err and ("BxT" if lm else "BxSxT") in err
