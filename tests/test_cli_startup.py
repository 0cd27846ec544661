"""fairseq_local/_cli_startup.py's rewrite of fairseq-hydra-train's model overrides (its one-line
errors: tests/test_bad_inputs_startup.py).  A paper row's YAML lists only what its arch does not
set, so ``model.KEY=VALUE`` must still override any option of the model."""
import subprocess

from contract_lib import REPO, console_script

from fairseq_local import _cli_startup


def test_model_overrides_become_add_or_override():
    args = ["--config-dir", "configs/mc_rnn", "model.encoder_hidden_size=8", "+model.x=1", "++model.y=2",
            "model._name=lstm", "model.a.b=3", "task.data=/d", "optimization.max_update=3", "model"]
    assert _cli_startup.model_overrides(args) == [
        "--config-dir", "configs/mc_rnn", "++model.encoder_hidden_size=8", "+model.x=1", "++model.y=2",
        "model._name=lstm", "model.a.b=3", "task.data=/d", "optimization.max_update=3", "model"]


def test_an_option_the_yaml_does_not_list_is_overridden_and_a_misspelled_one_refused(tmp_path):
    """Through the real console script: the Table 5 row's YAML does not list the hidden size (its
    arch sets it), yet ``model.encoder_hidden_size=0`` reaches the model's own check; a misspelled
    key is one line naming the closest option."""
    for lang in ("de", "en"):
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"w{i} {10 - i}\n" for i in range(10)), encoding="utf-8")
    base = [console_script("fairseq-hydra-train"), "--config-dir", str(REPO / "configs" / "mc_rnn"), "--config-name",
            "table5_baseline_rnn_large", f"task.data={tmp_path}", f"common.user_dir={REPO / 'fairseq_local'}",
            f"checkpoint.save_dir={tmp_path / 'ck'}"]
    for override, needle in (("model.encoder_hidden_size=0", "--encoder-hidden-size must be an integer >= 1 (got 0)"),
                             ("model.encoder_hiden_size=8", "encoder_hidden_size")):
        proc = subprocess.run(base + [override], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        assert proc.returncode == 2 and needle in lines[-1], proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
