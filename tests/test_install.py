"""The install: what the package metadata declares, how setup.py picks the fairseq distribution,
scripts/setup_env.sh refusing what cannot work (one line, nothing created), and the installed
environment holding no torchaudio that breaks on import."""
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from contract_lib import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
META = PYPROJECT["tool"]["fairseq-local"]


def names(reqs):
    return {Requirement(r).name.lower() for r in reqs}


def load_setup_py():
    spec = importlib.util.spec_from_file_location("fairseq_local_setup", REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() runs only under __main__
    return module


def test_supported_python_range():
    spec = SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert [v for v in ("3.8", "3.10.14", "3.11.0", "3.11.7", "3.12.5", "3.13.0") if v in spec] == \
        ["3.11.0", "3.11.7", "3.12.5"]
    classifiers = {c.rsplit(":: ", 1)[-1] for c in PYPROJECT["project"]["classifiers"] if "Python :: 3." in c}
    assert classifiers == {"3.11", "3.12"}


def test_declared_dependencies_extras_and_build_requirements():
    assert set(PYPROJECT["project"]["dynamic"]) == {"version", "dependencies"}
    assert {"torch", "numpy", "sacrebleu", "sacremoses", "sentencepiece", "subword-nmt", "rouge-score",
            "tensorboardx", "jieba", "thulac", "snownlp"} <= names(META["dependencies"])
    numpy = [Requirement(r) for r in META["dependencies"] if Requirement(r).name == "numpy"][0]
    assert not numpy.specifier.contains("2.0") and numpy.marker.evaluate({"python_version": "3.11"})
    assert not numpy.marker.evaluate({"python_version": "3.12"})  # 3.12's fairseq wheel takes numpy 2
    assert Requirement(META["fairseq"]).name == "fairseq-fixed"
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert names(extras["tensorboard"]) == {"tensorboard"} and names(extras["wandb"]) == {"wandb"}
    assert {"pytest", "pytest-xdist", "pytest-timeout", "mutmut"} <= names(extras["test"])
    setuptools = [Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")][0]
    assert setuptools.specifier.contains("80.9") and not setuptools.specifier.contains("81.0")


def test_fairseq_runtime_is_fairseq_fixed_without_torchaudio():
    """What setup.py requires next to a --no-deps fairseq-fixed: all it imports, never torchaudio."""
    runtime = names(META["fairseq-runtime"])
    assert "torchaudio" not in runtime
    try:
        declared = importlib.metadata.requires("fairseq-fixed")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("fairseq-fixed is not installed here")
    fixed = {Requirement(r).name.lower() for r in declared if "extra ==" not in r}
    # torch/numpy/sacrebleu/tqdm come from fairseq-local's own list; cffi and cython only build it
    assert fixed - {"torchaudio", "cffi", "cython"} == runtime | ({"torch", "numpy", "sacrebleu", "tqdm"} & fixed)


@pytest.mark.parametrize("environ,installed,want_fixed,want_runtime", [
    ({}, {}, True, True),                                             # fresh: fairseq-fixed + its runtime
    ({}, {"fairseq-fixed": "0.12.3.1"}, False, True),                 # setup_env.sh's --no-deps install
    ({}, {"fairseq": "0.12.2"}, False, False),                        # an upstream checkout is kept
    ({"FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP": "1"}, {}, False, False),
])
def test_setup_py_fairseq_dependency(environ, installed, want_fixed, want_runtime):
    deps = load_setup_py().dependencies(META, environ=environ, installed=installed.get)
    assert deps[:len(META["dependencies"])] == META["dependencies"]
    assert (META["fairseq"] in deps) == want_fixed
    assert set(META["fairseq-runtime"]) <= set(deps) if want_runtime else not set(META["fairseq-runtime"]) & set(deps)
    assert not any(Requirement(d).name == "torchaudio" for d in deps)


def run_setup_env(tmp_path, **env):
    full = dict(os.environ, **env)
    full.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(REPO / "scripts" / "setup_env.sh")], capture_output=True, text=True,
                          env=full, timeout=120, cwd=tmp_path)


def stub_python(tmp_path, version):
    stub = tmp_path / f"python{version}"
    stub.write_text(f"#!/bin/sh\necho {version}\n")
    stub.chmod(0o755)
    return stub


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_setup_env_refuses_unsupported_python(tmp_path, version):
    venv = tmp_path / "venv"
    proc = run_setup_env(tmp_path, PYTHON=str(stub_python(tmp_path, version)), FAIRSEQ_LOCAL_VENV=str(venv))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.search(rf"Python {re.escape(version)} \(.*python{re.escape(version)}\) is not supported: "
                     r"fairseq-local needs Python 3\.11 or 3\.12; run with PYTHON=python3\.12", lines[0]), lines[0]
    assert not venv.exists() and proc.stdout == ""


def test_setup_env_refuses_bad_torch_mode_and_a_venv_without_system_packages(tmp_path):
    proc = run_setup_env(tmp_path, FAIRSEQ_LOCAL_TORCH="cuda", FAIRSEQ_LOCAL_VENV=str(tmp_path / "v"))
    assert proc.returncode != 0 and proc.stderr.strip().splitlines() == [
        "setup_env.sh: error: FAIRSEQ_LOCAL_TORCH must be 'system' or 'cpu' (or unset), not 'cuda'"]
    # an existing venv that cannot see the system's torch: one line, nothing installed into it
    venv = tmp_path / "isolated"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    proc = run_setup_env(tmp_path, FAIRSEQ_LOCAL_TORCH="system", FAIRSEQ_LOCAL_VENV=str(venv))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{venv} does not see the system's packages" in lines[0], proc.stderr
    assert sorted(p.name for p in venv.iterdir()) == ["bin", "pyvenv.cfg"]


def test_no_broken_torchaudio_installed():
    """fairseq-fixed declares torchaudio, which has no build for our torch; setup_env.sh installs
    fairseq without it (and removes one an earlier install left), so importing it cannot explode."""
    code = ("import importlib.util, sys\n"
            "if importlib.util.find_spec('torchaudio') is None: sys.exit(0)\n"
            "import torchaudio\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"torchaudio is installed but cannot be imported:\n{proc.stderr[-1500:]}"


def test_setup_env_stops_at_a_failed_step_even_when_sourced_in_a_list(tmp_path):
    """`source scripts/setup_env.sh && ...` runs the script with errexit off: a failed pip step must
    still end the install, without marking the environment as installed."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\ncase "$*" in *version_info*) echo 3.11 ;; *) exit 1 ;; esac\n')
    python.chmod(0o755)
    (venv / "bin" / "activate").write_text(f'PATH="{venv / "bin"}:$PATH"\n')
    env = dict(os.environ, FAIRSEQ_LOCAL_VENV=str(venv))
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(["bash", "-c", f"source {REPO / 'scripts' / 'setup_env.sh'} && echo reached"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0 and "reached" not in proc.stdout
    assert "[setup] error: 'pip install --upgrade pip' failed" in proc.stderr
    assert "pip install torch" not in proc.stderr  # nothing after the failed step
    assert proc.stderr.strip().splitlines()[-1] == \
        f"setup_env.sh: error: installing into {venv} failed (see above); nothing is marked as installed"
    assert not (venv / ".fairseq_local_stamp").exists()
