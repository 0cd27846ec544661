"""Every code block of README.md and docs/*.md is checked (convention: tests/doc_snippets.py).

``run`` blocks execute from a copy of the repository root that holds the tiny resources they
name (``needs=``): real text cut from ``shared/data`` (Multi30k, PTB, Tatoeba), binarized by the
pages' own data-preparation blocks (``provides=``), and checkpoints of 2 updates at tiny sizes. ``parse`` blocks (paper-
scale data, GPU boxes, long trainings) must be accepted by their programs' option parsers. The
speed tables embedded in the pages must equal scripts/docs_speed_table.py's output.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from doc_snippets import (MODES, REPO, Block, check_command, doc_files, extract_blocks, indented_commands,
                          simple_commands)
from fairseq_local_repro.tools import docs_speed_table

BLOCKS = [b for path in doc_files() for b in extract_blocks(path)]
N_TRAIN, N_VALID = 200, 30
BPE_DATA = ("bash scripts/preprocess.sh --src de --tgt en --train raw/de-en/train --valid raw/de-en/valid "
            "--test raw/de-en/test --destdir data-bin/de-en --bpe subword-nmt --bpe-size 8000 --tokenize moses "
            "--lowercase --workers 1")
S2S_TINY = ("--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 --decoder-hidden-size 16 "
            "--attention-dim 16")
TRAIN = "--optimizer adam --lr 0.001 --max-update 2 --cpu --no-epoch-checkpoints --num-workers 0 --seed 1"
LM_STATEFUL = "--task stateful_language_modeling --tokens-per-sample 16 --batch-size 4 --batch-size-valid 4"
# resource -> (resources it is built from, shell command run from the world's root)
RESOURCES: Dict[str, tuple] = {
    "raw/de-en": ((), None),
    "raw/lm": ((), None),
    "raw/zh-en": ((), None),
    "data-bin/de-en": (("raw/de-en",), BPE_DATA),
    "data-bin/lm": (("raw/lm",), "bash scripts/preprocess.sh --lm --train raw/lm/train.txt --valid raw/lm/valid.txt "
                                 "--test raw/lm/test.txt --destdir data-bin/lm --bpe none --workers 1"),
    "data-bin/lat": (("raw/zh-en",),  # one segmenting process for both splits (loading them dominates)
                     "mkdir -p lat && cat raw/zh-en/{train,valid}.zh > lat/all.raw && "
                     "python scripts/build_lattices.py --input lat/all.raw --output lat/all.zh "
                     "--segmenters jieba,thulac,snownlp && "
                     f"head -n {N_TRAIN} lat/all.zh > lat/train.zh && tail -n {N_VALID} lat/all.zh > lat/valid.zh && "
                     "cp raw/zh-en/*.en lat/ && cp lat/valid.zh lat/test.zh && cp lat/valid.en lat/test.en && "
                     "python scripts/preprocess_lattices.py --source-lang zh --target-lang en --trainpref lat/train "
                     "--validpref lat/valid --testpref lat/test --destdir data-bin/lat --workers 1"),
    "checkpoints/mc_rnn": (("data-bin/de-en",), f"fairseq-train data-bin/de-en --user-dir fairseq_local "
                                                 f"--arch mc_rnn_iwslt_de_en_3 {S2S_TINY} --max-tokens 2000 {TRAIN} "
                                                 "--save-dir checkpoints/mc_rnn"),
    "checkpoints/rnnsearch": (("data-bin/de-en",), f"fairseq-train data-bin/de-en --user-dir fairseq_local "
                                                   f"--arch rnnsearch_iwslt_de_en {S2S_TINY} --max-tokens 2000 {TRAIN} "
                                                   "--save-dir checkpoints/rnnsearch"),
    "checkpoints/parallel_lstm": (("data-bin/de-en",), "fairseq-train data-bin/de-en --user-dir fairseq_local "
                                  "--arch parallel_lstm_zh_en_wide3 --encoder-embed-dim 12 --encoder-hidden-size 12 "
                                  "--decoder-embed-dim 12 --decoder-hidden-size 12 --attention-dim 12 "
                                  "--encoder-layers 2 --decoder-layers 1 --max-source-positions 1024 "
                                  f"--max-target-positions 1024 --max-tokens 2000 {TRAIN} "
                                  "--save-dir checkpoints/parallel_lstm"),
    "checkpoints/dpn_s2s": (("data-bin/de-en",), "fairseq-train data-bin/de-en --user-dir fairseq_local "
                            "--arch dpn_s2s_iwslt_de_en --encoder-embed-dim 16 --decoder-embed-dim 16 "
                            "--encoder-conv-dim 16 --decoder-conv-dim 16 --encoder-ffn-embed-dim 32 "
                            "--decoder-ffn-embed-dim 32 --encoder-conv-layers 1 --decoder-conv-layers 1 "
                            "--encoder-san-layers 1 --decoder-san-layers 1 --encoder-attention-heads 2 "
                            f"--decoder-attention-heads 2 --max-tokens 2000 {TRAIN} --save-dir checkpoints/dpn_s2s"),
    "checkpoints/mc_rnn_lm": (("data-bin/lm",), f"fairseq-train data-bin/lm --user-dir fairseq_local {LM_STATEFUL} "
                              "--arch mc_rnn_lm_ptb --decoder-embed-dim 8 --decoder-hidden-size 8 "
                              f"{TRAIN} --save-dir checkpoints/mc_rnn_lm"),
    "checkpoints/parallel_lstm_lm": (("data-bin/lm",), f"fairseq-train data-bin/lm --user-dir fairseq_local "
                                     f"{LM_STATEFUL} --arch parallel_lstm_lm_1950h_wide3 --decoder-embed-dim 12 "
                                     f"--decoder-hidden-size 12 {TRAIN} --save-dir checkpoints/parallel_lstm_lm"),
    "checkpoints/gencnn": (("data-bin/lm",), "fairseq-train data-bin/lm --user-dir fairseq_local --task "
                           "language_modeling --sample-break-mode eos --arch gencnn_paper --decoder-embed-dim 6 "
                           "--alpha-length 6 --beta-length 4 --alpha-layers '(2,3,3),(2,2,2)' "
                           "--beta-layers '(2,3,0),(1,3,0)' --fc-dim 8 --max-tokens 1000 "
                           f"--required-batch-size-multiple 1 {TRAIN} --save-dir checkpoints/gencnn"),
    "checkpoints/lattice": (("data-bin/lat",), "fairseq-train data-bin/lat --user-dir fairseq_local --task "
                            "lattice_translation --arch lattice_dwl_gating --encoder-embed-dim 8 "
                            "--encoder-hidden-size 8 --decoder-embed-dim 8 --decoder-hidden-size 8 "
                            "--decoder-out-embed-dim 8 --attention-dim 8 --optimizer rmsprop --lr 0.0005 "
                            "--batch-size 20 --max-update 2 --cpu --no-epoch-checkpoints --num-workers 0 "
                            "--save-dir checkpoints/lattice"),
}
# a page's data-preparation block builds its resource (it runs once, as the fixture)
for _block in BLOCKS:
    if _block.mode == "run" and _block.provides in RESOURCES:
        RESOURCES[_block.provides] = (tuple(_block.needs), _block.code)
LINKED = ("fairseq_local", "scripts", "configs")  # the repository pieces every world sees


def _env():
    bin_dir = str(Path(sys.executable).parent)
    return dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1",
                MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")


def _run(cmd: str, cwd: Path, what: str, timeout=1800):  # minutes of wall time on a busy machine
    # the world's fairseq_local (a link to the repository's) is the one Python imports, as in a checkout
    env = dict(_env(), PYTHONPATH=os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _new_world(root: Path) -> Path:
    root.mkdir(parents=True)
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    return root


def _write_lines(path: Path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _raw(shared: Path, name: str, dest: Path):
    """Tiny raw corpora cut from shared/data: the first N_TRAIN lines train, the next valid, test
    (raw/zh-en has the shared Tatoeba corpus's layout: train and valid, no test)."""
    def lines(path):
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()][:N_TRAIN + 2 * N_VALID]

    splits = (("train", 0, N_TRAIN), ("valid", N_TRAIN, N_VALID), ("test", N_TRAIN + N_VALID, N_VALID))
    if name == "raw/lm":
        text = lines(shared / "lm" / "ptb.valid.txt")
        for split, a, n in splits:
            _write_lines(dest / f"{split}.txt", text[a:a + n])
        return
    corpus, langs = {"raw/de-en": ("multi30k-de-en", ("de", "en")), "raw/zh-en": ("tatoeba-zh-en", ("zh", "en"))}[name]
    if name == "raw/zh-en":
        splits = splits[:2]
    for lang in langs:
        text = lines(shared / corpus / f"train.{lang}")
        for split, a, n in splits:
            _write_lines(dest / f"{split}.{lang}", text[a:a + n])


class World:
    """Builds each resource once per session (in its own folder) and copies it into block folders."""

    def __init__(self, shared: Path, root: Path):
        self.shared, self.root = shared, root
        self.built: Dict[str, Path] = {}

    def resource(self, name: str) -> Path:
        if name not in RESOURCES:
            raise KeyError(f"unknown doc-test resource {name!r}: one of {', '.join(RESOURCES)}")
        if name not in self.built:
            deps, cmd = RESOURCES[name]
            home = _new_world(self.root / name.replace("/", "_"))
            if cmd is None:
                _raw(self.shared, name, home / name)
            else:
                self.populate(home, deps)
                _run(cmd, home, f"building {name}")
            self.built[name] = home / name
        return self.built[name]

    def populate(self, home: Path, names):
        for name in names:
            src = self.resource(name)
            shutil.copytree(src, home / name, symlinks=True)


@pytest.fixture(scope="session")
def world(shared_data, tmp_path_factory):
    return World(shared_data, tmp_path_factory.mktemp("doc_world"))


def _block_id(block: Block) -> str:
    return block.where.replace("/", "_")


# ----------------------------------------------------------------------------------------------
# every block is marked, and the marks are well formed
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", BLOCKS, ids=_block_id)
def test_block_is_marked(block: Block):
    assert block.mode is not None, (
        f"{block.where}: code block without a doc-test marker: put '<!-- doc-test: run needs=... -->', "
        "'<!-- doc-test: parse (why it cannot run in CI) -->' or '<!-- doc-test: text -->' on the line before it")
    assert block.mode in MODES, f"{block.where}: unknown doc-test mode {block.mode!r} (one of {', '.join(MODES)})"
    if block.mode == "run":
        assert block.lang in ("bash", "sh", "python"), f"{block.where}: a run block must be bash or python"
        unknown = [n for n in block.needs + ([block.provides] if block.provides else []) if n not in RESOURCES]
        assert not unknown, f"{block.where}: unknown resources {unknown} (known: {', '.join(RESOURCES)})"
    if block.mode == "parse":
        assert block.reason, f"{block.where}: a parse block says why it cannot run, e.g. (needs the IWSLT14 download)"
        assert block.lang in ("bash", "sh"), f"{block.where}: parse blocks hold shell commands"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_unfenced_commands(path):
    lines = indented_commands(path)
    assert not lines, (f"{path.relative_to(REPO)}: lines {lines}: commands in an indented code block; "
                       "use a fenced block with a doc-test marker")


# ----------------------------------------------------------------------------------------------
# parse blocks: each command is accepted by its program's parser
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "parse"], ids=_block_id)
def test_parse_block_commands_are_accepted(block: Block):
    import fairseq_local  # noqa: F401  (registers the archs the commands name)

    commands = simple_commands(block.code)
    assert commands, f"{block.where}: a parse block without a command"
    errors = [f"{block.path.name}:{block.line + n}: {err}" for n, argv in commands
              if (err := check_command(argv)) is not None]
    assert not errors, "\n".join(errors)


# ----------------------------------------------------------------------------------------------
# run blocks: executed on tiny real data and checkpoints
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "run"], ids=_block_id)
def test_run_block_exits_0(block: Block, world: World, tmp_path):
    if block.provides:  # built by this very block (see RESOURCES)
        assert RESOURCES[block.provides][1] == block.code
        assert any(world.resource(block.provides).iterdir()), f"{block.where} built an empty {block.provides}"
        return
    home = _new_world(tmp_path / "root")
    world.populate(home, block.needs)
    if block.lang == "python":
        (home / "snippet.py").write_text(block.code, encoding="utf-8")
        cmd = f"{sys.executable} snippet.py"
    else:
        cmd = block.code
    _run(cmd, home, f"{block.where} ({block.lang} block)")


# ----------------------------------------------------------------------------------------------
# the checker itself: a missing marker and bad commands are caught
# ----------------------------------------------------------------------------------------------
def test_unmarked_and_marked_blocks_are_told_apart(tmp_path):
    page = tmp_path / "page.md"
    text = ("intro\n\n<!-- doc-test: parse (needs the IWSLT14 download) -->\n```bash\nfairseq-train x\n```\n\n"
            "```bash\nfairseq-generate x\n```\n")
    blocks = extract_blocks(page, text)
    assert [(b.mode, b.reason, b.line) for b in blocks] == [("parse", "needs the IWSLT14 download", 4), (None, "", 8)]
    with pytest.raises(AssertionError, match="without a doc-test marker"):
        test_block_is_marked(blocks[1])
    assert indented_commands(page, text + "\nrun this:\n\n    fairseq-train data-bin\n\n* a list\n"
                                           "  continued\n") == [14]


@pytest.mark.parametrize("argv, message", [
    ("fairseq-train data-bin/x --user-dir fairseq_local --arch mc_rnn_iwslt_de_en_33",
     "unknown choice 'mc_rnn_iwslt_de_en_33'; did you mean mc_rnn_iwslt_de_en_3 "),
    ("fairseq-train data-bin/x --user-dir fairseq_local --arch mc_rnn_iwslt_de_en_3 --mc-chanels 2",
     "unrecognized arguments: --mc-chanels"),
    ("fairseq-generate data-bin/x --user-dir fairseq_local --path c.pt --beem 5", "unrecognized arguments"),
    ("python scripts/bench.py --arch mc_rnn_iwslt_de_en_3 --baseline lstm --stepz 2", "unrecognized arguments"),
    ("bash scripts/recipes/mc_rnn_iwslt14.sh --rows table2_mc_rnn_3", "not in its --help: --rows"),
    ("fairseq-hydra-train --config-dir configs/mc_rnn --config-name table2_mc_rnn_3 model.mc_chanels=2",
     "has no key model.mc_chanels"),
    ("fairseq-hydra-train --config-dir configs/mc_rnn --config-name table9_mc_rnn_3", "no config"),
    ("fairseq-trian data-bin/x", "does not know"),
])
def test_bad_commands_are_refused(argv, message):
    import shlex

    import fairseq_local  # noqa: F401

    err = check_command(shlex.split(argv))
    assert err is not None and message in err, err


def test_good_commands_are_accepted():
    import shlex

    import fairseq_local  # noqa: F401

    for argv in ("fairseq-train data-bin/x --user-dir fairseq_local --arch mc_rnn_iwslt_de_en_3 --mc-channels 2",
                 "fairseq-hydra-train --config-dir configs/mc_rnn --config-name table2_mc_rnn_3 "
                 "task.data=/d common.user_dir=/u model.mc_channels=2 optimization.max_update=3",
                 "bash scripts/recipes/mc_rnn_iwslt14.sh --row table2_mc_rnn_3 --data d"):
        assert check_command(shlex.split(argv)) is None, argv


def test_commands_of_a_block_are_split_like_bash():
    code = ("# a comment\n"
            "OMP_NUM_THREADS=1 nice -n 5 python scripts/x.py --a 1 \\\n    --b 2 2>&1 | tail -3 && ls > f\n"
            "cat > groups.txt <<'EOF'\nnot a command\nEOF\necho 下雨 | fairseq-interactive d --beam 2  # trailing\n")
    assert simple_commands(code) == [
        (2, ["python", "scripts/x.py", "--a", "1", "--b", "2"]), (2, ["tail", "-3"]), (2, ["ls"]),
        (4, ["cat"]), (7, ["echo", "下雨"]), (7, ["fairseq-interactive", "d", "--beam", "2"])]


# ----------------------------------------------------------------------------------------------
# generated speed tables
# ----------------------------------------------------------------------------------------------
def test_embedded_speed_tables_equal_the_generator():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "docs_speed_table.py"), "--check"],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_family_pages_quote_every_published_reproduction():
    """Each family's results section is rendered from docs/results/reproduce/FAMILY, not retyped:
    every published family has a generated table on its page of the folders of its claims' primary
    settings (the verdict's Tested items), and its rows carry the JSON's figures (a changed figure
    changes the row)."""
    published = sorted(p.parent.name for p in (REPO / "docs" / "results" / "reproduce").glob("*/comparison.json"))
    assert published and all(f"reproduce_{f}" in docs_speed_table.RESULTS for f in published)
    for family in published:
        page = (REPO / docs_speed_table.FAMILIES[family]).read_text(encoding="utf-8")
        body = docs_speed_table.embedded(page, docs_speed_table.RESULTS_BEGIN.format(f"reproduce_{family}"))
        assert body is not None, family
        folders = docs_speed_table.primary_folders(family)
        assert all(f"From `{rel}/`" in body for rel in folders), family
        for path in (p for rel in folders for p in (REPO / rel).glob("*-s*.json")):
            r = json.loads(path.read_text(encoding="utf-8"))
            score = r["test"]["ppl"] if r["metric"] == "ppl" else r["test"]["bleu"]
            row = f"| {r['label']} | {r['params'] / 1e6:.2f}M | {r['seed']} | {r['updates']:,} |"
            assert row in body and f"| {r['dev_ppl']:.2f} | {score:.2f}" in body, (family, row)
    from fairseq_local_repro import page as repro_page

    comparison = repro_page.load_family(str(REPO / "docs" / "results" / "reproduce" / published[0]))
    comparison["systems"][0]["test"]["bleu" if comparison.get("kind") != "lm" else "ppl"] = 12.34
    assert "| 12.34" in repro_page.summary_table(comparison)


def test_speed_ceilings_are_the_numbers_the_pages_count():
    """Each comparison's CPU multiply-add ceiling (bench_entries.ENTRIES) is stated in its page's own text."""
    from fairseq_local_repro.bench_entries import ENTRIES

    for entry in ENTRIES:
        text = (REPO / docs_speed_table.FAMILIES[entry["family"]]).read_text(encoding="utf-8")
        prose = re.sub(r"<!-- speed-table:begin .*?<!-- table:end -->", "", text, flags=re.S)
        for key in ("ceiling", "gen_ceiling"):
            if entry.get(key) is not None:
                number = re.escape(f"{entry[key]:.2f}")
                assert re.search(rf"(?<![\d.]){number}(?!\d)", prose), (entry["name"], key, entry[key])


def test_cpu_speed_table_gives_the_machine_command_and_share_of_ceiling(monkeypatch):
    row = {"params": 2_000_000, "train_tokens_per_s": 600.0, "peak_mem_mib": 10.0, "gen_sent_per_s": 4.0}
    entry = {"name": "dpn_vs_transformer", "family": "dpn_s2s", "dtype": "fp32", "status": "ok",
             "command": "python scripts/bench.py --arch dpn_s2s_iwslt_de_en --baseline x --json /tmp/r.json",
             "gen_ratio": 0.712,
             "result": {"rows": [dict(row, arch="dpn_s2s_iwslt_de_en"),
                                 dict(row, arch="dpn_baseline_deeper_san_iwslt", train_tokens_per_s=800.0,
                                      gen_sent_per_s=4.0 / 0.712)],
                        "train_ratio": 0.736, "train_ratio_min": 0.644, "train_ratio_max": 0.828, "scaling": []}}
    check = {"cpu_model": "Some CPU @ 2.0GHz", "cpu_capability": "AVX2", "logical_cpus": 2, "torch": "2.13.0", "fairseq": "0.12.3.1",
             "command": "python scripts/gpu/run_all.py docs/results/cpu --part bench --cpu",
             "note": "two other jobs ran at lower priority",
             "entries": [{"name": "dpn_vs_transformer", "status": "ok", "torch_threads": 1, "load_1min_before": 2.5,
                          "load_1min_after": 3.25, "cpu_seconds": 95.0, "wall_seconds": 100.0},
                         {"name": "x", "status": "ok", "torch_threads": 1, "load_1min_before": 2.0,
                          "load_1min_after": 2.75, "cpu_seconds": 99.0, "wall_seconds": 100.0}]}
    source = {"path": "docs/results/cpu/bench.json", "gpu": False, "check": check,
              "bench": {"device": "cpu", "entries": [entry]}}
    monkeypatch.setattr(docs_speed_table, "_sources", lambda: [source])
    md = docs_speed_table.render("dpn_s2s")
    assert md.startswith("**CPU: Some CPU @ 2.0GHz (AVX2 kernels), 1 torch thread, torch 2.13.0, fairseq 0.12.3.1** "
                         "(`docs/results/cpu/bench.json`, 1 comparison;")
    assert "python scripts/gpu/run_all.py docs/results/cpu --part bench --cpu\n```" in md
    assert "Each benchmark process got 0.95–0.99 of a core" in md and "two other jobs ran at lower priority." in md
    assert "load average" not in md  # the page states what each measurement got, not the machine's load
    # 0.736 / 0.92 = 80 %, 0.644 / 0.92 = 70 %, 0.828 / 0.92 = 90 %; generation 0.712 / 0.89 = 80 %
    assert ("| fp32 | 2.00M / 2.00M | 600 / 800 | **0.74** (0.64–0.83) | 0.92 | **80 %** (70–90 %) | 4.0 / 5.6 | "
            "0.71 (80 % of its ceiling 0.89) | 10 / 10 |") in md
    assert "--json" not in md and "No CPU benchmark results" not in md
    monkeypatch.setattr(docs_speed_table, "_sources", lambda: [])
    assert "No CPU benchmark results are kept for this family" in docs_speed_table.render("dpn_s2s")
