"""Every documented ``fairseq-train`` command of a paper row's arch trains that row.

The command (README.md and docs/, outside the generated result tables, which record runs that
happened) and the row (its YAML's training sections, :mod:`fairseq_local_repro.schedule`, and its
seed) are both parsed with fairseq's own parser; every value the row's schedule sets and every
option the command gives must be the same in both, so a command that leaves out or changes a
schedule value of its row (``--max-epoch``, ``--stop-min-lr``...) fails here.  ``fairseq-hydra-train
--config-name ROW`` commands are their row by construction."""
import glob
import re
from pathlib import Path

import pytest
import yaml
from fairseq import options

import fairseq_local  # noqa: F401  (registers the archs)
from doc_snippets import REPO, doc_files, extract_blocks, simple_commands
from fairseq_local_repro import schedule

# options of a command that are about one run, not about its row
RUN_KEYS = {"data", "save_dir", "user_dir", "rnn_impl", "embed_path"}
# the row's task section: where the data is and its languages, which a command leaves to the data folder
TASK_SECTION = "task"
GENERATED = re.compile(r"<!--\s*[a-z-]*table:begin\b.*?<!--\s*table:end\s*-->", re.S)


def _rows_by_arch():
    rows = {}
    for path in sorted(glob.glob(str(REPO / "configs" / "*" / "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
        if isinstance(cfg, dict) and isinstance(cfg.get("model"), dict) and "_name" in cfg["model"]:
            rows.setdefault(cfg["model"]["_name"], []).append(Path(path).relative_to(REPO).as_posix())
    return rows


ROWS = _rows_by_arch()


def documented_train_commands():
    """``[(where, argv)]``: each fairseq-train command of a bash block outside the generated tables."""
    found = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        generated = [(text[:m.start()].count("\n") + 1, text[:m.end()].count("\n") + 1)
                     for m in GENERATED.finditer(text)]
        for block in extract_blocks(path, text):
            if block.lang not in ("bash", "sh", "shell") or any(a <= block.line <= b for a, b in generated):
                continue
            for line, argv in simple_commands(block.code):
                if argv[0] == "fairseq-train":
                    found.append((f"{block.where}+{line}", argv))
    return found


def _dest(token: str) -> str:
    return token[2:].split("=")[0].replace("-", "_")


def _parse(argv):
    argv = [a if a != "fairseq_local" else str(REPO / "fairseq_local") for a in argv]
    return vars(options.parse_args_and_arch(options.get_training_parser(), argv))


def row_argv(row: str):
    """fairseq-train's command line of ``row``: its training sections, arch and seed."""
    cfg = schedule.load_row(row)
    seed = (cfg.get("common") or {}).get("seed")
    return (["data", "--user-dir", "fairseq_local"] + schedule.cli_args_from_yaml(cfg)
            + (["--seed", str(seed)] if seed is not None else []))


def row_keys(row: str):
    """The options the row's YAML sets outside its task section, as fairseq-train's names."""
    cfg = schedule.load_row(row)
    keys = set(schedule.schedule_values({k: v for k, v in cfg.items() if k != TASK_SECTION}))
    keys |= set(schedule.model_values(cfg)) - {"arch"}
    return keys | ({"seed"} if (cfg.get("common") or {}).get("seed") is not None else set())


def differences(argv, row: str):
    """``["--key: VALUE (the row: VALUE)"]`` where the command and the row disagree."""
    given = {_dest(t) for t in argv[1:] if t.startswith("--")}
    doc, ref = _parse(argv[1:]), _parse(row_argv(row))
    keys = sorted((row_keys(row) | given) - RUN_KEYS)
    return [f"--{k.replace('_', '-')}: {doc.get(k)!r} (the row: {ref.get(k)!r})" for k in keys
            if str(doc.get(k)) != str(ref.get(k))]  # "(0.9, 0.999)" as the YAML writes fairseq's default


COMMANDS = [(where, argv) for where, argv in documented_train_commands()
            if "--arch" in argv and argv[argv.index("--arch") + 1] in ROWS]


def test_the_documented_training_commands_of_rows_are_found():
    arches = {argv[argv.index("--arch") + 1] for _, argv in COMMANDS}
    assert {"mc_rnn_iwslt_de_en_3", "mc_rnn_lm_ptb", "gencnn_paper", "lattice_dwl_gating"} <= arches


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_training_command_is_its_rows(where, argv):
    arch = argv[argv.index("--arch") + 1]
    diffs = {row: differences(argv, row) for row in ROWS[arch]}
    row, best = min(diffs.items(), key=lambda item: len(item[1]))
    assert not best, f"{where}: the command differs from {row}: " + "; ".join(best)


def test_a_drifted_command_fails():
    row = "configs/mc_rnn/table2_mc_rnn_3.yaml"
    argv = ["fairseq-train"] + row_argv(row)
    assert differences(argv, row) == []
    drifted = [a for a in argv if a not in ("--stop-min-lr", "1e-06")]
    assert differences(drifted, row) == ["--stop-min-lr: -1.0 (the row: 1e-06)"]
    assert differences(argv + ["--dropout", "0.3"], row)[0].startswith("--dropout: 0.3 (the row: ")
