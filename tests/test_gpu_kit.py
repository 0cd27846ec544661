"""The GPU kit (scripts/gpu/, docs/gpu.md).

CI runs the CPU checks: run_all's dry run (every benchmark command valid), a tiny run of the whole
pipeline on CPU, and the scripts' one-line errors.  The offline install itself
(``test_offline_install_*``, marker ``gpu_kit``) needs a Python 3.12 interpreter and downloads a
foreign torch and the wheelhouse, so it runs only with ``FAIRSEQ_LOCAL_TEST_GPU_KIT=1``:

    FAIRSEQ_LOCAL_TEST_GPU_KIT=1 python -m pytest tests/test_gpu_kit.py -m gpu_kit -n 0

It builds (once, cached in $FAIRSEQ_LOCAL_GPU_KIT_CACHE, default ~/.cache/fairseq_local_gpu_kit) a
Python 3.12 venv holding what the GPU image holds (torch $FAIRSEQ_LOCAL_GPU_KIT_TORCH, default
2.11.0, numpy 2, scipy, scikit-learn), builds the wheelhouse, runs bootstrap.sh with the network
blocked, and trains and decodes with the result.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fairseq.data import data_utils

from contract_lib import REPO, make_translation_data
from doc_snippets import check_command, extract_blocks, simple_commands

from fairseq_local_repro.gpu import acceptance, acceptance_corpus, acceptance_train, run_all

GPU = REPO / "scripts" / "gpu"

TINY_TRAIN = ("--optimizer adam --lr 0.001 --max-tokens 200 --encoder-embed-dim 8 --encoder-hidden-size 8 "
              "--decoder-embed-dim 8 --decoder-hidden-size 8 --attention-dim 8 --max-update 2")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def sh(*cmd, ok=True, env=None, timeout=600):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env or _env(),
                          timeout=timeout, cwd=REPO)
    if ok:
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


# ------------------------------------------------------------------------------------------------
# run_all (CI)
# ------------------------------------------------------------------------------------------------
def test_dry_run_checks_every_benchmark_command(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        run_all.main([str(tmp_path), "--dry-run", "--data", str(tmp_path / "no_data")])
    assert e.value.code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [p["name"] for p in plan] == [e["name"] for e in run_all.ENTRIES if not e.get("fastpath")]
    assert {e["family"] for e in run_all.ENTRIES} == {"mc_rnn", "parallel_cells", "lattice", "gencnn", "dpn_s2s"}
    for p in plan:
        assert p["problems"] == [], (p["name"], p["problems"])
        fp32, bf16 = p["commands"]  # every comparison in both precisions, on cuda
        assert "--device cuda --dtype fp32" in fp32 and "--device cuda --dtype bf16" in bf16
    assert [p["name"] for p in plan if p["missing_data"]] == ["lattice_dwl_gating_vs_word"]
    assert "needs" in capsys.readouterr().err


def test_fastpath_plan_compares_compiled_with_eager_for_every_recurrent_family(tmp_path):
    """--part fastpath: the same arch with --rnn-impl compiled (A) and eager (B), every family with
    the option (genCNN and DPN-S2S: CUDA graphs of the forward), fp32 and bf16 on cuda, fewer timed
    steps than the main comparisons."""
    with pytest.raises(SystemExit) as e:
        run_all.main([str(tmp_path), "--dry-run", "--part", "fastpath", "--data", str(tmp_path / "no_data")])
    assert e.value.code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    fast = [e for e in run_all.ENTRIES if e.get("fastpath")]
    assert [p["name"] for p in plan] == [e["name"] for e in fast]
    assert {e["family"] for e in fast} == {"mc_rnn", "parallel_cells", "lattice", "gencnn", "dpn_s2s"}
    for p in plan:
        assert p["problems"] == [], (p["name"], p["problems"])
        fp32, bf16 = p["commands"]
        assert "--device cuda --dtype fp32" in fp32 and "--device cuda --dtype bf16" in bf16
        assert "--rnn-impl compiled" in fp32 and "--rnn-impl eager" in fp32 and "--steps 10" in fp32
        arch = re.search(r"--arch (\S+)", fp32).group(1)
        assert re.search(r"--baseline (\S+)", fp32).group(1) == arch
    assert run_all.parse_args([str(tmp_path), "--part", "check"]).bench_share == 0.0


def test_cpu_profile_plan_covers_every_family(tmp_path):
    """--cpu: each family's main comparisons, fp32 only, on one thread with CPU-sized batches, no
    --lengths scaling, the entry's own sizes kept; every one has the page's multiply-add ceiling."""
    with pytest.raises(SystemExit) as e:
        run_all.main([str(tmp_path), "--dry-run", "--cpu", "--data", str(tmp_path / "no_data")])
    assert e.value.code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    cpu = [e for e in run_all.ENTRIES if e.get("cpu")]
    assert [p["name"] for p in plan] == [e["name"] for e in cpu]
    assert {e["family"] for e in cpu} == {"mc_rnn", "parallel_cells", "lattice", "gencnn", "dpn_s2s"}
    assert {"mc_rnn3_vs_lstm", "parallel_lm648_wide3_vs_lstm_lm", "parallel_mt510_wide3_vs_lstm",
            "lattice_dwl_gating_vs_word", "gencnn_vs_fconv_lm", "gencnn_vs_lstm_lm",
            "dpn_vs_transformer"} == {p["name"] for p in plan}
    for p, entry in zip(plan, cpu):
        assert p["problems"] == [], (p["name"], p["problems"])
        (cmd,) = p["commands"]
        assert cmd.endswith("--device cpu --dtype fp32") or "--device cpu --dtype fp32 --data" in cmd, cmd
        for opt in ("--max-tokens 1000", "--steps 72", "--warmup 2", "--rounds 6", "--threads 1"):
            assert opt in cmd, (p["name"], opt)
        assert "--lengths" not in cmd and "--max-tokens 4000" not in cmd
        assert 0 < entry["ceiling"] < 2
    lm = next(p["commands"][0] for p in plan if p["name"] == "parallel_lm648_wide3_vs_lstm_lm")
    assert "--vocab 10000 --tgt-len 35" in lm
    lattice = next(p for p in plan if p["name"] == "lattice_dwl_gating_vs_word")
    assert lattice["commands"][0].endswith(f"--data {tmp_path / 'no_data' / 'lattice'}")
    assert run_all.parse_args([str(tmp_path), "--cpu"]).budget_minutes == 60  # GPU default: 8.5
    assert run_all.parse_args([str(tmp_path), "--cpu", "--tiny"]).dtypes == ["fp32", "bf16"]


def test_dry_run_names_a_bad_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_all, "ENTRIES", [
        dict(name="typo_arch", family="x", goal=None, args="--arch mc_rnn_iwslt_de_en_33 --baseline lstm"),
        dict(name="bad_model_option", family="x", goal=None,
             args="--arch mc_rnn_iwslt_de_en_3 --arch-args '--mc-channelz 3' --baseline lstm"),
        dict(name="bad_bench_option", family="x", goal=None, args="--arch lstm --baseline lstm --stepz 3"),
    ])
    with pytest.raises(SystemExit) as e:
        run_all.main([str(tmp_path), "--dry-run"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "typo_arch: --arch mc_rnn_iwslt_de_en_33: not a registered architecture" in err
    assert re.search(r"bad_model_option: fairseq rejects --arch mc_rnn_iwslt_de_en_3 --mc-channelz 3: .*"
                     r"unrecognized arguments: --mc-channelz", err), err
    assert re.search(r"bad_bench_option: bench.py rejects the command: .*--stepz", err), err


def test_run_all_without_cuda_says_so(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = sh(sys.executable, GPU / "run_all.py", tmp_path / "out", ok=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["run_all: error: no CUDA device (use --cpu --tiny to check the "
                                                "script on CPU)"]
    assert not (tmp_path / "out").exists()


def test_run_all_cpu_tiny_end_to_end(tmp_path):
    """The whole pipeline on CPU: one benchmark in fp32 (training, generation, --lengths; fairseq's
    own ``lstm`` baseline has no bf16 LSTM kernel on AVX2-only CPUs, and the plugin leaves torch's
    RNNs as they are for fairseq's models), the
    time-boxed training, beam-5 decoding and BLEU; OUT holds four flat files (the device tool
    returns at most eight)."""
    from fairseq_local_repro.bench import cpu_model

    data, _ = make_translation_data(tmp_path / "data")
    out = tmp_path / "out"
    proc = sh("bash", GPU / "run_all.sh", out, "--cpu", "--tiny", "--only", "^mc_rnn3_vs_lstm$", "--dtypes", "fp32",
              "--budget-minutes", "6", "--train-data", data, "--train-archs", "mc_rnn_iwslt_de_en_3",
              "--train-args", TINY_TRAIN)
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "check.json", "run_all.log", "summary.txt",
                                                     "train.json"]
    bench = json.loads((out / "bench.json").read_text())
    assert bench["device"] == "cpu" and bench["tiny"] is True
    (entry,) = bench["entries"]
    check = json.loads((out / "check.json").read_text())
    assert check["device"] == "cpu" and check["cpu_model"] == cpu_model() and check["profile"] == "tiny"
    assert check["command"].startswith("python scripts/gpu/run_all.py ") and "--only '^mc_rnn3_vs_lstm$'" in check["command"]
    assert check["env_threads"]["OMP_NUM_THREADS"] == "1" and check["torch"] and check["fairseq"]
    (cond,) = check["entries"]
    assert (cond["name"], cond["dtype"], cond["status"], cond["torch_threads"]) == ("mc_rnn3_vs_lstm", "fp32", "ok", 1)
    assert cond["load_1min_before"] >= 0 and cond["load_1min_after"] >= 0
    assert cond["cpu_seconds"] >= 0 and cond["wall_seconds"] == entry["seconds"] >= 0
    assert "--json" not in entry["command"] and entry["result"]["torch_threads"] == 1
    assert entry["name"] == "mc_rnn3_vs_lstm" and entry["status"] == "ok", entry
    res = entry["result"]
    assert res["args"]["dtype"] == "fp32" and res["args"]["device"] == "cpu"
    assert entry["train_ratio"] == res["train_ratio"] > 0
    assert [s["length"] for s in res["scaling"]] == [6, 8]
    a, b = res["rows"]
    assert (a["arch"], b["arch"]) == ("mc_rnn_iwslt_de_en_3", "lstm")
    assert entry["gen_ratio"] == pytest.approx(a["gen_sent_per_s"] / b["gen_sent_per_s"])
    assert entry["meets_goal"] == (entry["train_ratio"] >= 0.7)
    assert "--dtype fp32" in entry["command"]
    train = json.loads((out / "train.json").read_text())
    assert train["status"] == "ok", train
    run = train["archs"]["mc_rnn_iwslt_de_en_3"]
    assert run["num_updates"] == 2 and run["train_wps"] > 0 and len(run["valid_loss_per_epoch"]) == 1
    assert 0 <= run["valid_bleu"]["bleu"] <= 100
    summary = (out / "summary.txt").read_text()
    assert re.search(r"mc_rnn3_vs_lstm +fp32 +\d+\.\d\d +0\.70 +\d+\.\d\d +ok", summary), summary
    assert "mc_rnn_iwslt_de_en_3" in summary and "updates 2" in summary
    log = (out / "run_all.log").read_text()
    assert "$ python -m fairseq_local_repro.bench " in log and "fairseq-train" in log and "fairseq_local_repro.tools.generate" in log
    assert "out of time" not in proc.stdout

    # fp32 vs fairseq's --bf16, same number of updates
    sh("bash", GPU / "run_all.sh", out, "--cpu", "--tiny", "--part", "precision", "--budget-minutes", "4",
       "--train-data", data, "--train-args", TINY_TRAIN, "--precision-updates", "2")
    prec = json.loads((out / "precision.json").read_text())
    assert prec["status"] == "ok" and prec["arch"] == "mc_rnn_iwslt_de_en_3", prec
    assert [r["num_updates"] for r in prec["runs"].values()] == [2, 2] and prec["same_updates"]
    assert "--bf16" in prec["runs"]["bf16"]["command"] and "--bf16" not in prec["runs"]["fp32"]["command"]
    assert abs(prec["valid_loss_rel_diff"]) < 0.05  # a tiny model after 2 updates: bf16 rounding only
    assert prec["meets_goal"] == (abs(prec["valid_loss_rel_diff"]) <= 0.01)
    assert "bf16 vs fp32 valid loss" in (out / "summary.txt").read_text()


# ------------------------------------------------------------------------------------------------
# one-line errors (CI)
# ------------------------------------------------------------------------------------------------
def _one_error(proc, text):
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], proc.stderr


def test_bootstrap_errors(tmp_path):
    _one_error(sh("bash", GPU / "bootstrap.sh", ok=False), "usage: bootstrap.sh TARGET")
    _one_error(sh("bash", GPU / "bootstrap.sh", tmp_path / "t", "--wheels", tmp_path / "none", ok=False),
               f"--wheels '{tmp_path / 'none'}' does not exist")
    wheels = tmp_path / "w"
    wheels.mkdir()
    (wheels / "MANIFEST.txt").write_text("fairseq_fixed-0.12.3.1-cp312-cp312-manylinux_2_28_x86_64.whl\n")
    no_torch = shutil.which("false")
    _one_error(sh("bash", GPU / "bootstrap.sh", tmp_path / "t", "--wheels", wheels, "--python", no_torch, ok=False),
               "cannot import torch")
    _one_error(sh("bash", GPU / "bootstrap.sh", tmp_path / "t", "--wheels", wheels, "--python", sys.executable,
                  ok=False), "fairseq_fixed-0.12.3.1-cp312-cp312-manylinux_2_28_x86_64.whl' does not exist")
    assert not (tmp_path / "t" / "site").exists()


def test_wheelhouse_and_run_all_option_errors(tmp_path):
    _one_error(sh("bash", GPU / "wheelhouse.sh", "--max-mib", "lots", ok=False), "--max-mib must be a positive")
    _one_error(sh("bash", GPU / "wheelhouse.sh", "--python-version", "312", ok=False), "must look like 3.12")
    _one_error(sh("bash", GPU / "prepare_data.sh", "--shared", tmp_path, ok=False),
               f"corpus file '{tmp_path}/multi30k-de-en/train.de' does not exist")
    proc = sh(sys.executable, GPU / "run_all.py", tmp_path, "--dtypes", "fp8", ok=False)
    assert proc.returncode == 2 and "--dtypes: expected a comma list of fp32, bf16, fp16, got fp8" in proc.stderr


# ------------------------------------------------------------------------------------------------
# the offline install on Python 3.12 with a torch that is not ours (opt-in: downloads ~3 GB once)
# ------------------------------------------------------------------------------------------------
def _python312():
    found = os.environ.get("FAIRSEQ_LOCAL_PYTHON312") or shutil.which("python3.12")
    if not found and shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        cands = sorted(Path(root, "versions").glob("3.12*/bin/python3.12"))
        found = str(cands[-1]) if cands else None
    return found


@pytest.fixture(scope="module")
def image_python():
    """A Python 3.12 venv with what the GPU image has: torch (not ours), numpy 2, scipy, scikit-learn."""
    if os.environ.get("FAIRSEQ_LOCAL_TEST_GPU_KIT") != "1":
        pytest.skip("set FAIRSEQ_LOCAL_TEST_GPU_KIT=1 to build a Python 3.12 venv and test the offline install")
    py312 = _python312()
    if not py312:
        pytest.skip("no Python 3.12 interpreter (set FAIRSEQ_LOCAL_PYTHON312)")
    cache = Path(os.environ.get("FAIRSEQ_LOCAL_GPU_KIT_CACHE", Path.home() / ".cache" / "fairseq_local_gpu_kit"))
    torch_spec = "torch==" + os.environ.get("FAIRSEQ_LOCAL_GPU_KIT_TORCH", "2.11.0")
    image = cache / "image"
    py = image / "bin" / "python"
    probe = [str(py), "-c", "import torch, numpy, scipy, sklearn; assert numpy.__version__ >= '2'; "
                            "print(torch.__version__)"]
    if not py.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        shutil.rmtree(image, ignore_errors=True)
        sh(py312, "-m", "venv", image)
        sh(py, "-m", "pip", "install", "-q", torch_spec, "numpy>=2", "scipy", "scikit-learn", timeout=3600)
    return py


@pytest.mark.gpu_kit
def test_offline_install_on_python312_with_foreign_torch(image_python, tmp_path):
    probe = "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__)"
    pyver, torch_version, numpy_version = sh(image_python, "-c", probe).stdout.split()
    assert pyver.startswith("3.12.")
    wheels = tmp_path / "wheels"
    sh("bash", GPU / "wheelhouse.sh", "--dest", wheels, timeout=1200)
    manifest = (wheels / "MANIFEST.txt").read_text().split()
    assert any(w.startswith("fairseq_fixed-0.12.3.1-cp312-cp312-manylinux") for w in manifest)
    assert not [w for w in manifest if re.match(r"(torch|torchaudio|numpy|nvidia)[-_]", w)]
    assert sum(f.stat().st_size for f in wheels.iterdir()) < 40 * 2**20

    # offline: no index, every proxy pointing at a closed port, this machine's pip settings still set
    blocked = dict(_env(), PIP_NO_INDEX="1", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
                   HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
                   PIP_FIND_LINKS=str(tmp_path / "elsewhere"), PIP_EXTRA_INDEX_URL="http://127.0.0.1:9/simple")
    target = tmp_path / "fl"
    sh("bash", GPU / "bootstrap.sh", target, "--wheels", wheels, "--python", image_python, env=blocked)
    pip_log = (target / "pip.log").read_text()
    assert "Downloading" not in pip_log and "http" not in pip_log.lower()
    processed = re.findall(r"Processing (\S+\.whl)", pip_log)
    assert processed and all(Path(p).resolve().parent == wheels.resolve() for p in processed)
    check = json.loads((target / "check.json").read_text())
    assert (check["python"], check["torch"], check["numpy"]) == (pyver, torch_version, numpy_version)  # kept
    assert check["fairseq"] == "0.12.3.1" and check["fairseq_path"].startswith(str(target))
    assert all(check["extensions"][m] == "ok" for m in run_all_required())
    assert check["model"]["arch"] == "mc_rnn_iwslt_de_en_3" and check["model"]["loss"] > 0
    again = sh("bash", GPU / "bootstrap.sh", target, "--wheels", wheels, "--python", image_python, "--no-check",
               env=blocked)
    assert "reusing" in again.stderr

    # train (bf16 on CPU), decode and score with the installed kit alone
    env = dict(blocked, PYTHONPATH=f"{target / 'site'}:{REPO}", PATH=f"{target / 'site' / 'bin'}:{blocked['PATH']}")
    raw = tmp_path / "raw"
    sh("python", "-c", f"""
from pathlib import Path
from fairseq_local.data.synthetic import SyntheticTranslationCorpus
raw = Path({str(raw)!r}); raw.mkdir()
c = SyntheticTranslationCorpus(seed=0, max_len=9)
for split, n in (("train", 48), ("valid", 8)):
    pairs = c.sample(n)
    (raw / f"{{split}}.src").write_text("".join(s + "\\n" for s, _ in pairs))
    (raw / f"{{split}}.tgt").write_text("".join(t + "\\n" for _, t in pairs))
""", env=env)
    sh("fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", raw / "train",
       "--validpref", raw / "valid", "--destdir", tmp_path / "bin", "--workers", "1", env=env)
    proc = sh("fairseq-train", tmp_path / "bin", "--user-dir", REPO / "fairseq_local", "--arch", "mc_rnn_iwslt_de_en_3",
              *TINY_TRAIN.split(), "--cpu", "--bf16", "--save-dir", tmp_path / "ckpt", "--log-format", "json", env=env)
    assert '"train_num_updates": "2"' in proc.stdout + proc.stderr
    gen = sh("fairseq-generate", tmp_path / "bin", "--user-dir", REPO / "fairseq_local", "--path",
             tmp_path / "ckpt" / "checkpoint_last.pt", "--gen-subset", "valid", "--beam", "5", "--cpu", env=env)
    assert len(re.findall(r"^H-\d+", gen.stdout, re.M)) == 8 and "BLEU4" in gen.stdout
    sh("bash", GPU / "run_all.sh", tmp_path / "plan", "--dry-run", env=env)


def run_all_required():
    from fairseq_local_repro.gpu import check_install

    return check_install.REQUIRED_EXTENSIONS


def test_fastpath_part_writes_its_own_file(tmp_path):
    """--part fastpath keeps its rows in OUT/fastpath.json, so a fastpath call into the folder of a
    --part bench call never replaces bench.json (here the lattice entry, skipped without its data)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text('{"kept": true}')
    run_all.main([str(out), "--part", "fastpath", "--cpu", "--tiny", "--dtypes", "fp32",
                  "--only", "^lattice_dwl_compiled_vs_eager$",
                  "--data", str(tmp_path / "no_data")])
    assert json.loads((out / "bench.json").read_text()) == {"kept": True}
    rows = json.loads((out / "fastpath.json").read_text())["entries"]
    assert [(r["name"], r["status"]) for r in rows] == [("lattice_dwl_compiled_vs_eager", "skipped")]
    assert "no " in rows[0]["reason"] and "prepare_data.sh" in rows[0]["reason"]


def test_startup_part_runs_startup_cost_for_each_family(tmp_path):
    """--part startup (its own device call): scripts/startup_cost.py for every family with the option,
    eager and cuda-graphs first, then compiled, each run's totals in OUT/startup.json (here on CPU with tiny
    models, genCNN and DPN-S2S only)."""
    out = tmp_path / "out"
    run_all.main([str(out), "--part", "startup", "--cpu", "--tiny", "--only", "gencnn|dpn"])
    runs = json.loads((out / "startup.json").read_text())["runs"]
    assert [(r["name"], r["impls"], r["status"]) for r in runs] == [
        ("gencnn", "eager,cuda-graphs", "ok"), ("dpn_s2s", "eager,cuda-graphs", "ok"), ("gencnn", "compiled", "ok"),
        ("dpn_s2s", "compiled", "ok")]
    for r in runs:
        assert r["command"].startswith("python scripts/startup_cost.py ") and "--device cpu" in r["command"]
        steps = r["result"]["steps"]
        assert {s["impl"] for s in steps} == set(r["impls"].split(",")) and len(steps) == 2 * len(r["impls"].split(","))
        assert all(isinstance(s["seconds"], float) and s["seconds"] >= 0 for s in steps)
    assert "startup gencnn eager,cuda-graphs: ok; eager " in (out / "run_all.log").read_text()


# ------------------------------------------------------------------------------------------------
# the acceptance run (CI: its corpus, time boxes, JSON and verdict, one tiny real run on CPU)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def acceptance_data(tmp_path_factory):
    """A tiny acceptance corpus: 60 training pairs of IWSLT-like lengths, all three corpora."""
    dest = tmp_path_factory.mktemp("acceptance") / "data"
    assert acceptance_corpus.main([str(dest), "--pairs", "60", "--valid", "12", "--vocab", "50",
                                   "--char-vocab", "30", "--seed", "3"]) == 0
    return dest


def _tool_lengths(shared_data):
    tool = shared_data.parent / "tools" / "iwslt_like_lengths.py"
    if not tool.is_file():
        pytest.skip(f"{tool} not found")
    spec = importlib.util.spec_from_file_location("iwslt_like_lengths", tool)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.lengths


def test_acceptance_corpus_has_the_tools_lengths(shared_data, acceptance_data):
    """The generator draws exactly the shared tool's lengths (same n and seed), and the binarized
    corpora hold sentences of those lengths, EOS included: translation (both sides), the LM (the
    target side) and the lattices (source - 1 characters)."""
    lengths = _tool_lengths(shared_data)
    for n, seed in ((160_000, 0), (500, 7)):
        for mine, theirs in zip(acceptance_corpus.iwslt_like_lengths(n, seed), lengths(n, seed)):
            np.testing.assert_array_equal(mine, theirs)
    for k, (split, n) in enumerate((("train", 60), ("valid", 12))):
        src, tgt = lengths(n, 3 + k)
        tr = acceptance_data / "translation"
        for prefix, want in ((tr / f"{split}.de-en.de", src), (tr / f"{split}.de-en.en", tgt),
                             (acceptance_data / "lm" / split, tgt)):
            ds = data_utils.load_indexed_dataset(str(prefix), None)  # kept alive: its sizes are its mmap
            np.testing.assert_array_equal(np.array(ds.sizes), want)
            del ds
        np.testing.assert_array_equal(np.load(acceptance_data / "lattice" / f"{split}.zh-en.zh.nchars.npy"), src - 1)
    corpus = json.loads((acceptance_data / "corpus.json").read_text())
    assert corpus["pairs"] == {"train": 60, "valid": 12}
    assert corpus["splits"]["train"]["target"]["max"] == int(lengths(60, 3)[1].max())
    # Zipf words: the frequent ones dominate, every dictionary holds more than a handful of types
    counts = [int(line.split()[1]) for line in (acceptance_data / "translation" / "dict.en.txt").read_text().splitlines()]
    assert counts == sorted(counts, reverse=True) and counts[0] > 5 * counts[len(counts) // 2] and len(counts) > 20
    # an existing corpus is kept as it is; other options for it are one line
    args = ["--pairs", "60", "--valid", "12", "--vocab", "50", "--char-vocab", "30", "--seed", "3"]
    before = (acceptance_data / "corpus.json").read_text()
    assert acceptance_corpus.main([str(acceptance_data), *args]) == 0
    assert (acceptance_data / "corpus.json").read_text() == before
    proc = sh(sys.executable, GPU / "acceptance_corpus.py", acceptance_data, ok=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"acceptance_corpus: error: {acceptance_data / 'corpus.json'}: a corpus of other options (pairs "
        f"{{'train': 60, 'valid': 12}}, vocab 50, char_vocab 30, seed 3): delete {acceptance_data} or pass those"]


def test_acceptance_time_box_cuts_a_part_and_the_rest_still_runs(tmp_path, acceptance_data):
    """A run still starting when its box ends is killed with its process group and recorded as a
    timeout; the next part still gets its own box; the verdict is a failure."""
    child = tmp_path / "child.pid"
    t = time.time()
    rc, seconds = acceptance.run_part([sys.executable, "-c", f"import subprocess, sys, time; "
                                       f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                                       f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)"],
                                      2.0, open(tmp_path / "log", "w"), dict(os.environ))
    assert rc is None and 2.0 <= seconds < 10 and time.time() - t < 15
    pid = int(child.read_text())
    time.sleep(0.5)
    assert _gone(pid)  # the grandchild died with its group (gone, or a zombie nobody reaped)

    out = tmp_path / "out"
    rc = acceptance.main([str(out), "--data", str(acceptance_data), "--cpu", "--tiny", "--only", "mc_rnn,gencnn",
                          "--modes", "graphs,eager", "--budget-minutes", "0.1", "--reserve", "0", "--min-box", "1",
                          "--graphs-options", "--rnn-impl eager"])
    assert rc == 1
    report = json.loads((out / "acceptance.json").read_text())
    fams = report["families"]
    assert [(f, m, fams[f]["runs"][m]["status"]) for f in ("mc_rnn", "gencnn") for m in ("graphs", "eager")] == [
        ("mc_rnn", "graphs", "timeout"), ("mc_rnn", "eager", "timeout"),
        ("gencnn", "graphs", "timeout"), ("gencnn", "eager", "timeout")]
    assert fams["mc_rnn"]["box_s"] == pytest.approx(3, abs=0.5) and fams["mc_rnn"]["seconds"] <= fams["mc_rnn"]["box_s"] + 2
    assert fams["gencnn"]["seconds"] > 0  # it ran after the first family was cut
    assert fams["mc_rnn"]["runs"]["graphs"]["error"] == "killed at the end of the family's time box"
    assert report["verdict"] == "failed" and "mc_rnn: graphs: timeout" in "\n".join(report["reasons"])
    assert acceptance.check_schema(report) == []
    log = (out / "acceptance.log").read_text()
    assert "mc_rnn graphs: timeout" in log and "gencnn eager: timeout" in log


def _children(pid):
    """Processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _gone(pid):
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_acceptance_stopped_by_sigterm_kills_the_running_family(tmp_path, acceptance_data):
    """The device call's own time limit (``timeout`` sends SIGTERM) ends the runner and the family
    process it runs, which lives in its own session."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, GPU / "acceptance.py", out, "--data", acceptance_data, "--cpu", "--tiny",
                             "--only", "mc_rnn", "--graphs-options", "--rnn-impl eager", "--min-box", "1"],
                            cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t = time.time()
    while not _children(proc.pid) and time.time() - t < 60:
        time.sleep(0.2)
    (worker,) = _children(proc.pid)
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + 15
    time.sleep(0.5)
    assert _gone(worker), "the family process outlived the runner"


def test_acceptance_time_boxes_share_what_is_left():
    # weights 3,1,1 over 100 s: the first graphs run gets 3/5; a part that ends early leaves its time to the rest
    assert acceptance.time_box(0, 100, [3, 1, 1]) == pytest.approx(60)
    assert acceptance.time_box(10, 100, [1, 1]) == pytest.approx(45)
    assert acceptance.time_box(120, 100, [1]) == 0
    # inside a family: a run stops at its share of the family's time left, less the start-up margin
    assert acceptance_train.stop_after(1100, 1000, [3, 1, 1], 15) == pytest.approx(45)
    assert acceptance_train.stop_after(1100, 1000, [1], 15) == pytest.approx(85)
    assert acceptance_train.stop_after(1020, 1000, [1, 1], 15) == pytest.approx(5)  # at least half its share


def _run(status="ok", updates=200, tokens=1000.0, fallbacks=0, captured=10, later=0):
    return {"status": status, "updates": updates, "tokens_per_s": tokens, "graph_fallbacks": fallbacks,
            "graphs_captured": captured, "peak_memory_bytes": 2**30, "command": "x", "box_s": 1, "seconds": 1,
            "capture_s": 0.5, "capture_ahead_s": 0.5, "variants": 4, "captures_after_epoch_1": later}


def test_acceptance_verdict_is_never_ok_with_a_fallback_or_a_missing_family():
    ok = {m: _run() for m in acceptance.MODES}
    assert acceptance.family_verdict("mc_rnn", ok) == ("ok", [])
    assert acceptance.family_verdict("mc_rnn", {**ok, "graphs": _run(fallbacks=1)}) == (
        "failed", ["graphs: 1 graph fallbacks (must be 0)"])
    assert acceptance.family_verdict("mc_rnn", {**ok, "graphs": _run(fallbacks=None)})[0] == "failed"
    assert acceptance.family_verdict("mc_rnn", {**ok, "graphs": _run(captured=0)}) == (
        "failed", ["graphs: no CUDA graph captured (the captured path did not run)"])
    assert acceptance.family_verdict("parallel_lm", {**ok, "graphs": _run(captured=0)}) == ("ok", [])  # fused cells
    assert acceptance.family_verdict("dpn_s2s", {**ok, "graphs": _run(later=2)}) == (
        "failed", ["graphs: 2 graphs captured after epoch 1 (the declared shapes are all captured in the first)"])
    assert acceptance.family_verdict("mc_rnn", {"graphs": _run(), "eager": _run()}) == ("failed", ["baseline: not run"])
    assert acceptance.family_verdict("gencnn", {**ok, "eager": _run("short")})[0] == "failed"

    families = {f: {"status": "ok", "reasons": []} for f in acceptance.FAMILIES}
    assert acceptance.verdict(families) == ("ok", [])
    del families["lattice"]
    assert acceptance.verdict(families) == ("failed", ["lattice: not run"])
    families["lattice"] = {"status": "failed", "reasons": ["graphs: 3 graph fallbacks (must be 0)"]}
    assert acceptance.verdict(families) == ("failed", ["lattice: graphs: 3 graph fallbacks (must be 0)"])

    args = acceptance.parse_args(["out", "--cpu"])
    assert acceptance.run_record("graphs", 0, {"updates": 200, "tokens_per_s": 5.0, "fast_path": {}}, args)["status"] == "ok"
    short = acceptance.run_record("graphs", 0, {"updates": 150, "tokens_per_s": 5.0, "fast_path": {}}, args)
    assert short["status"] == "short" and "150 updates of the 200" in short["reason"]
    assert acceptance.run_record("eager", 0, {"updates": 15, "tokens_per_s": 5.0, "fast_path": {}}, args)["status"] == "ok"
    assert acceptance.run_record("eager", 1, {"updates": 60, "error": "boom", "fast_path": {}}, args)["status"] == "failed"
    assert acceptance.run_record("eager", None, None, args)["status"] == "timeout"
    rec = acceptance.run_record("graphs", 0, {"updates": 200, "tokens_per_s": 5.0, "fast_path": {
        "graphs_captured": 12, "graph_fallbacks": 0, "variants": {"enc": 3, "dec": 5}}, "epochs": [
        {"epoch": 1, "updates": 100, "graphs_captured": 9}, {"epoch": 2, "updates": 100, "graphs_captured": 1},
        {"epoch": 3, "updates": 0, "graphs_captured": 2}]}, args)
    assert (rec["graphs_captured"], rec["variants"], rec["graph_fallbacks"], rec["captures_after_epoch_1"]) == (
        12, 8, 0, 3)


def test_acceptance_families_use_their_bench_comparison():
    """Each family trains its main speed comparison's model and fairseq baseline; the graphs run is
    the eager run plus the strict graph options."""
    args = acceptance.parse_args(["out"])
    assert set(acceptance.FAMILIES) == {"mc_rnn", "parallel_lm", "parallel_mt", "lattice", "gencnn", "dpn_s2s"}
    models = {f: acceptance.family_models(f) for f in acceptance.FAMILIES}
    assert (models["mc_rnn"]["arch"], models["mc_rnn"]["baseline"]) == ("mc_rnn_iwslt_de_en_3", "lstm")
    assert models["lattice"]["baseline"] == "rnnsearch_zh_word" and models["lattice"]["task"] == "lattice_translation"
    assert models["dpn_s2s"]["baseline"] == "dpn_baseline_deeper_san_iwslt"
    assert models["gencnn"]["task"] == models["parallel_lm"]["task"] == "language_modeling"
    for f in acceptance.FAMILIES:
        g, e, b = (acceptance.train_argv(f, m, args, "save") for m in acceptance.MODES)
        gi, ei = g.index("--rnn-impl"), e.index("--rnn-impl")
        assert g[gi:gi + 4] == ["--rnn-impl", "cuda-graphs", "--graph-fallback", "error"] and e[ei:ei + 2] == [
            "--rnn-impl", "eager"]
        same = [a == b for a, b in zip(g[:gi] + g[gi + 4:], e[:ei] + e[ei + 2:], strict=True)]
        assert same.count(False) == 1 and g[gi + 4:][same[gi:].index(False) - 1] == "--max-update"
        assert "--rnn-impl" not in b
        assert "--num-workers" not in g and "--max-update" in g and g[g.index("--max-update") + 1] == "200"
        assert e[e.index("--max-update") + 1] == b[b.index("--max-update") + 1] == "60"
        assert b[b.index("--arch") + 1] == models[f]["baseline"]


def test_acceptance_commands_parse_at_their_sizes():
    """fairseq-train's parser accepts every run's command at the acceptance sizes (the graphs runs
    once --rnn-impl has cuda-graphs), and the --tiny ones."""
    import fairseq_local  # noqa: F401  (registers the archs)
    from fairseq import options

    from fairseq_local.modules import fast_path

    for tiny in ([], ["--tiny"]):
        args = acceptance.parse_args(["out", *tiny])
        for f in acceptance.FAMILIES:
            for mode in acceptance.MODES:
                if mode == "graphs" and "cuda-graphs" not in fast_path.RNN_IMPLS:
                    continue
                argv = acceptance.train_argv(f, mode, args, "save")
                parsed = options.parse_args_and_arch(options.get_training_parser(), argv)
                assert parsed.arch == argv[argv.index("--arch") + 1] and parsed.max_tokens == 4000
                assert parsed.num_workers == 1 and parsed.no_save  # fairseq's loader defaults


def test_acceptance_tiny_real_training_on_cpu(tmp_path, acceptance_data):
    """One real fairseq-train through the runner (fairseq's loader and its defaults): the record has
    the updates, tokens/s and fast_path stats; on CPU with --rnn-impl eager no graph is captured, so
    the family is not accepted."""
    out = tmp_path / "out"
    rc = acceptance.main([str(out), "--data", str(acceptance_data), "--cpu", "--tiny", "--only", "mc_rnn",
                          "--modes", "graphs", "--updates", "8", "--compare-updates", "3", "--warmup-updates", "1",
                          "--min-measured", "1", "--max-tokens", "700", "--min-box", "1", "--budget-minutes", "4",
                          "--graphs-options", "--rnn-impl eager"])
    assert rc == 1
    report = json.loads((out / "acceptance.json").read_text())
    assert acceptance.check_schema(report) == []
    g = report["families"]["mc_rnn"]["runs"]["graphs"]
    assert g["status"] == "ok", g
    res = g["result"]
    assert res["updates"] == g["updates"] == 8 and res["error"] is None and res["device"] == "cpu"
    assert res["mode"] == "graphs" and 0 < res["stop_after_s"] and g["seconds"] == res["seconds"] > 0
    assert g["tokens_per_s"] > 0 and 0 < res["seconds_to_first_update"] < res["seconds"]
    # the updates and target tokens of each epoch, as fairseq's own epoch log lines count them
    log = (out / "acceptance.log").read_text()
    epochs = [json.loads(m) for m in re.findall(r"INFO:train:(\{.*\})", log)]
    assert len(epochs) >= 2 and [e["epoch"] for e in res["epochs"]] == [int(e["epoch"]) for e in epochs]
    done = [int(e["train_num_updates"]) for e in epochs]
    assert [e["updates"] for e in res["epochs"]] == [b - a for a, b in zip([0] + done, done)] and done[-1] == 8
    wpb = sum(float(e["train_wpb"]) * (b - a) for e, a, b in zip(epochs, [0] + done, done))
    assert res["target_tokens"] == pytest.approx(wpb, abs=0.05 * 8)
    assert res["fast_path"]["graph_fallbacks"] == g["graph_fallbacks"] == 0 and g["graphs_captured"] == 0
    assert "--rnn-impl eager" in g["command"] and "--arch mc_rnn_iwslt_de_en_3" in g["command"]
    assert report["families"]["mc_rnn"]["reasons"] == [
        "eager: not run", "baseline: not run", "graphs: no CUDA graph captured (the captured path did not run)"]
    assert report["verdict"] == "failed" and "parallel_lm: not run" in report["reasons"]
    assert report["corpus"]["pairs"]["train"] == 60
    assert "acceptance_train: graphs: 8 updates" in log and "verdict: failed" in log

    broken = dict(report, verdict="great", families={"mc_rnn": {"runs": {"graphs": {"status": "fine"}}}})
    problems = acceptance.check_schema(broken)
    assert "verdict: 'great'" in problems and "families.mc_rnn.runs.graphs.status: 'fine'" in problems
    assert "families.mc_rnn.arch: missing" in problems


def test_acceptance_option_errors(tmp_path):
    import torch

    if not torch.cuda.is_available():
        _one_error(sh(sys.executable, GPU / "acceptance.py", tmp_path / "out", ok=False),
                   "acceptance: error: no CUDA device (use --cpu --tiny to check the kit on CPU)")
    _one_error(sh(sys.executable, GPU / "acceptance.py", tmp_path / "out", "--cpu", "--data", tmp_path / "none",
                  ok=False), f"acceptance: error: --data {tmp_path / 'none'}: no lm/ (build it with python "
                             f"scripts/gpu/acceptance_corpus.py {tmp_path / 'none'})")
    assert not (tmp_path / "out").exists()
    proc = sh(sys.executable, GPU / "acceptance.py", tmp_path / "out", "--only", "mc_rnn,gencn", ok=False)
    assert proc.returncode == 2 and "--only/--modes: unknown gencn (families: parallel_lm, gencnn" in proc.stderr
    proc = sh(sys.executable, GPU / "acceptance.py", tmp_path / "out", "--compare-updates", "8", ok=False)
    assert proc.returncode == 2 and "--compare-updates must be >= --warmup-updates + --min-measured (15)" in proc.stderr
    proc = sh(sys.executable, GPU / "acceptance_corpus.py", tmp_path / "c", "--char-vocab", "30000", ok=False)
    assert proc.returncode == 2 and "--char-vocab must be <= 20000" in proc.stderr


def test_acceptance_device_call_in_the_docs_fits_the_call():
    """docs/gpu.md's device call: at most 2000 characters, valid bash, at most 8 carried paths, all
    ignored by git under gpu_kit/; bootstrap's and the runner's options accepted; the bootstrap's
    time limit, the runner's deadline and the final kill all inside 9 minutes of the call's start."""
    (block,) = [b for b in extract_blocks(REPO / "docs" / "gpu.md") if "command: " in b.code]
    fields = dict(line.split(": ", 1) for line in block.code.strip().splitlines())
    command, carry = fields["command"], json.loads(fields["carry"])
    assert len(command) <= 2000 and 0 < len(carry) <= 8 and int(fields["timeout_s"]) <= 600
    assert subprocess.run(["bash", "-n", "-c", command]).returncode == 0
    for path in carry:
        assert path.startswith("gpu_kit/") and sh("git", "check-ignore", "-q", path, ok=False).returncode == 0
    (boot,) = [argv for _, argv in simple_commands(command) if "scripts/gpu/bootstrap.sh" in argv]
    assert check_command(boot[boot.index("bash"):]) is None
    (run,) = [argv for _, argv in simple_commands(command) if "scripts/gpu/acceptance.py" in argv]
    run = run[run.index("python"):]
    args = acceptance.parse_args([{"$OUT": "out", "$S": "1000"}.get(a, a) for a in run[2:]])
    boot_limit = int(re.search(r"timeout (\d+) bash scripts/gpu/bootstrap.sh", command).group(1))
    kill, grace = map(int, re.search(r"timeout -k (\d+) \$\(\(S \+ (\d+) -", command).groups()[::-1])
    deadline = args.started_at + 60 * args.budget_minutes - args.reserve - 1000
    assert boot_limit + 60 < deadline < kill and kill + grace <= 9 * 60, (boot_limit, deadline, kill, grace)
