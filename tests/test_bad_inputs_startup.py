"""A new user's first hour, mistakes fairseq meets before it imports the plugin (the start-up hook
``fairseq_local/_cli_startup.py``): a misspelled ``--user-dir``, Hydra config keys that do not
exist, a misspelled BPE model path, ``fairseq-score`` given a directory: one line each.

Most cases run the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import runpy
import site
import subprocess
import sys
from argparse import Namespace

from fairseq.data import encoders
import pytest

from bad_inputs_lib import USER_DIR
from contract_lib import REPO
from fairseq_local import _cli_startup
from test_bad_inputs import BIN, ENV, assert_one_line, call, run


def test_startup_hook_is_installed_and_cheap_elsewhere():
    """Installing the package puts setup.py's ``.pth`` line in site-packages; in a program that is no
    fairseq CLI the line does not even load the hook module."""
    line = runpy.run_path(str(REPO / "setup.py"), run_name="setup_under_test")["PTH_LINE"]
    installed = [p / "fairseq_local.pth" for p in map(type(REPO), site.getsitepackages()) if (p / "fairseq_local.pth").exists()]
    assert installed and installed[0].read_text() == line
    probe = "import sys; print('_fairseq_local_cli_startup' in sys.modules, sys.excepthook is sys.__excepthook__)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


@pytest.mark.parametrize("argv,orig_argv,prog", [
    (["/venv/bin/fairseq-train", "data"], None, "fairseq-train"),
    (["/venv/bin/fairseq-hydra-train"], None, "fairseq-hydra-train"),
    (["/venv/bin/fairseq-eval-lm"], None, "fairseq-eval-lm"),
    (["-m", "x"], ["/venv/bin/python", "-m", "fairseq_cli.generate", "x"], "python -m fairseq_cli.generate"),
    (["-m"], ["/fairseq/.venv/bin/python", "-m", "json.tool"], None),
    (["/fairseq-local/scripts/train.sh"], None, None),
    (["/venv/bin/fairseq-trainer"], None, None),
    ([""], None, None),
])
def test_startup_hook_acts_in_fairseq_clis_only(argv, orig_argv, prog):
    assert _cli_startup.program(argv, orig_argv or argv) == prog


@pytest.mark.parametrize("cmd,needle", [
    (["fairseq-train", "DATA", "--user-dir", "fairseq_locl"], "fairseq-train: error: --user-dir fairseq_locl: no "
     "such directory ({tmp}/fairseq_locl); did you mean --user-dir {user_dir}?"),
    ([sys.executable, "-m", "fairseq_cli.generate", "DATA", "--user-dir", "./fairseq-local"],
     "python -m fairseq_cli.generate: error: --user-dir ./fairseq-local: no such directory ({tmp}/fairseq-local); "
     "did you mean --user-dir {user_dir}?"),
])
def test_misspelled_user_dir(tmp_path, cmd, needle):
    cmd = [str(BIN / c) if c.startswith("fairseq-") else c for c in cmd]
    proc = subprocess.run([c.replace("DATA", str(tmp_path)) for c in cmd], capture_output=True, text=True, env=ENV,
                          cwd=tmp_path, timeout=300)
    line = assert_one_line(proc.returncode, proc.stderr, needle.format(tmp=tmp_path, user_dir=USER_DIR))
    assert proc.returncode == 2 and ("did you mean" in line) == ("{user_dir}" in needle)


def _yaml_with(tmp_path, name, source, old, new):
    text = (REPO / "configs" / source).read_text()
    assert old in text
    (tmp_path / f"{name}.yaml").write_text(text.replace(old, new, 1))
    return name


@pytest.mark.parametrize("source,old,new,extra,needle", [
    ("_selftest/transformer_tiny.yaml", "  max_update: 2", "  max_updat: 2", [],
     "optimization.max_updat: no such config key; did you mean optimization.max_update?"),
    ("_selftest/transformer_tiny.yaml", "dataset:", "datasets:", [],
     "datasets: no such config group; did you mean dataset?"),
    ("_selftest/transformer_tiny.yaml", "", "", ["task.sourc_lang=de"],
     "task.sourc_lang: no such config key; did you mean task.source_lang?"),
    ("_selftest/transformer_tiny.yaml", "", "", ["common.user_dir=fairseq_locl"],
     "common.user_dir=fairseq_locl: no such directory"),
    ("_selftest/transformer_tiny.yaml", "", "", ["task.max_tokenz=5"],
     "task.max_tokenz: no such config key; did you mean dataset.max_tokens?"),
    ("lattice/dwl_gating.yaml", "  source_lang: zh", "  sorce_lang: zh", ["common.user_dir={user_dir}"],
     "task.sorce_lang: no such config key; did you mean task.source_lang or task.target_lang?"),
    ("lattice/dwl_gating.yaml", "  max_source_positions: 1000000", "  max_source_position: 1000000",
     ["common.user_dir={user_dir}"],
     "task.max_source_position: no such config key; did you mean task.max_source_positions or "
     "task.max_target_positions?"),
])
def test_hydra_config_key_typos_outside_the_model(tmp_path, source, old, new, extra, needle):
    """A YAML key or a ``key=value`` override that fairseq's schema does not have, in any group (the
    ``model:`` group is checked when the model is built: test_yaml_model_key_typo); a key of
    another group is named.  Ours is the only line after Hydra's warnings: a task key the plugin's
    task rejects fails inside the job, whose failure Hydra announces (``Error executing job with
    overrides``) before re-raising it; Hydra's notes on fairseq's use of it and its DEBUG lines are
    filtered by the start-up hook."""
    proc = _hydra_typo_run(tmp_path, source, old, new, extra)
    assert_one_line(proc.returncode, proc.stderr, f"fairseq-hydra-train: error: {needle}")
    assert proc.returncode == 2 and "Error executing job" not in proc.stderr
    assert not [line for line in proc.stderr.splitlines() if "Warning" in line or "DEBUG" in line], proc.stderr


def _hydra_typo_run(tmp_path, source, old, new, extra, **env):
    name = _yaml_with(tmp_path, "typo", source, old, new)
    cmd = [BIN / "fairseq-hydra-train", "--config-dir", tmp_path, "--config-name", name, f"task.data={tmp_path}",
           *[e.format(user_dir=USER_DIR) for e in extra]]
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env={**ENV, **env}, cwd=tmp_path,
                          timeout=600)


def test_hydra_full_error_keeps_the_traceback(tmp_path):
    """``HYDRA_FULL_ERROR=1`` is Hydra's switch for the whole story: Hydra's report and traceback."""
    proc = _hydra_typo_run(tmp_path, "lattice/dwl_gating.yaml", "  source_lang: zh", "  sorce_lang: zh",
                           ["common.user_dir={user_dir}"], HYDRA_FULL_ERROR="1")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and "Traceback (most recent call last):" in lines, proc.stderr[-3000:]
    assert "Error executing job with overrides" in proc.stderr and "fairseq-hydra-train: error:" not in proc.stderr
    assert lines[-1].startswith("    object_type=LatticeTranslationConfig")


@pytest.mark.parametrize("bpe,option", [("subword_nmt", "bpe_codes"), ("sentencepiece", "sentencepiece_model")])
def test_misspelled_bpe_model_path(capsys, tmp_path, bpe, option):
    """fairseq-interactive / the hub with ``--bpe-codes`` naming no file (fairseq: an OSError traceback)."""
    missing = tmp_path / "bpe" / "codess"
    args = Namespace(bpe=bpe, bpe_separator="@@", sentencepiece_enable_sampling=False, sentencepiece_alpha=None,
                     **{option: str(missing)})
    code, err = call(capsys, encoders.build_bpe, args)
    assert_one_line(code, err, f"prog: error: {missing}: no such file")


def test_score_given_a_directory(tmp_path):
    """``score.sh --ref DIR`` (the generate.sh output folder instead of its ref.txt): one line saying so."""
    (tmp_path / "hyp.txt").write_text("a b c\n")
    code, err = run("bash", REPO / "scripts" / "score.sh", "--hyp", tmp_path / "hyp.txt", "--ref", tmp_path)
    assert_one_line(code, err, f"--ref '{tmp_path}' is a directory, not a file")
