"""Perplexity by position within running-text blocks (fairseq_local_repro.analysis.lm_loss_by_position),
read from fairseq-eval-lm --output-word-probs logs, against sums written by hand."""
import math

import pytest

from fairseq_local_repro.analysis import lm_loss_by_position as pos
from fairseq_local_repro.evaluate import word_logprobs


def _log(path, samples, prefix="INFO:fairseq_cli.eval_lm:"):
    lines = ["INFO:fairseq_cli.eval_lm:data-bin test 2 examples"]
    for i, lps in samples.items():
        lines.append(prefix + f"{i} " + "\t".join(f"w{k} [{lp:.6f}]" for k, lp in enumerate(lps)))
    lines.append("INFO:fairseq_cli.eval_lm:Evaluated 7 tokens in 0.1s (70.00 tokens/s)")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_word_logprobs_reads_both_logger_formats():
    assert word_logprobs("INFO:fairseq_cli.eval_lm:3 the [-1.500000]\t</s> [-0.250000]\n") == (3, [-1.5, -0.25])
    assert word_logprobs("2026-01-01 00:00:00 | INFO | fairseq_cli.eval_lm | 0 a [-2.000000]") == (0, [-2.0])
    assert word_logprobs("INFO:fairseq_cli.eval_lm:Evaluated 7 tokens in 0.1s") is None


def test_perplexity_by_position_against_hand_sums(tmp_path):
    a = {0: [-1.0, -2.0, -3.0, -4.0], 1: [-0.5, -1.5, -2.5]}
    b = {0: [-2.0, -2.0, -2.0, -2.0], 1: [-1.0, -1.0, -1.0]}
    models = {"A": pos.read_word_logprobs(_log(tmp_path / "a.log", a)),
              "B": pos.read_word_logprobs(_log(tmp_path / "b.log", b, prefix="2026-01-01 | INFO | fairseq_cli.eval_lm | "))}
    rows = pos.perplexity_by_position(models, [1, 2], reference="B")
    assert [(r["positions"], r["words"]) for r in rows] == [("1-1", 2), ("2-2", 2), (">2", 3)]
    # position 1: A's words -1.0 and -0.5; positions > 2: -3.0, -4.0 and -2.5
    assert rows[0]["ppl"]["A"] == pytest.approx(math.exp(0.75))
    assert rows[2]["ppl"]["A"] == pytest.approx(math.exp((3.0 + 4.0 + 2.5) / 3))
    assert rows[2]["ppl"]["B"] == pytest.approx(math.exp(5.0 / 3))
    # position 2: A -2.0 and -1.5 (mean 1.75 nats), B -2.0 and -1.0 (1.5)
    assert rows[1]["ratio"]["A"] == pytest.approx(math.exp(1.75) / math.exp(1.5))
    assert all(r["ratio"]["B"] == pytest.approx(1.0) for r in rows)
    # all buckets together give the whole test set's perplexity
    total = sum(math.log(r["ppl"]["A"]) * r["words"] for r in rows) / 7
    assert total == pytest.approx(sum(-x for v in a.values() for x in v) / 7)


def test_models_on_other_blocks_are_refused(tmp_path):
    models = {"A": {0: [-1.0, -2.0]}, "B": {0: [-1.0]}}
    with pytest.raises(SystemExit, match="B and A were not scored on the same blocks"):
        pos.perplexity_by_position(models, [1], reference="A")


def test_command_line_errors_name_the_option(tmp_path, capsys):
    log = _log(tmp_path / "a.log", {0: [-1.0, -1.0]})
    with pytest.raises(SystemExit, match="expected NAME=PATH"):
        pos.main(["--log", log])
    with pytest.raises(SystemExit, match="--reference 'C' is not one of the --log names"):
        pos.main(["--log", f"A={log}", "--reference", "C"])
    with pytest.raises(SystemExit, match="increasing positive integers"):
        pos.main(["--log", f"A={log}", "--buckets", "5,2"])
    empty = tmp_path / "empty.log"
    empty.write_text("INFO:fairseq_cli.eval_lm:nothing here\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no word probabilities"):
        pos.main(["--log", f"A={empty}"])
    pos.main(["--log", f"A={log}", "--log", f"B={log}", "--buckets", "1", "--json", str(tmp_path / "o.json")])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "positions\twords\tA\tB\tB/A"
    assert out[1] == f"1-1\t1\t{math.e:.2f}\t{math.e:.2f}\t1.000"
