"""The fenced code blocks of README.md and docs/*.md, and the command checks of tests/test_docs.py.

Every fenced block carries a marker on the line right before its opening fence:

* ``<!-- doc-test: run needs=NAME,NAME -->``: executed from a copy of the repository root that holds
  the named tiny resources (``data-bin/de-en``, ``checkpoints/mc_rnn``... see test_docs.py); bash
  blocks run under ``bash -euo pipefail``, python blocks with the venv's interpreter; it must exit 0.
  ``provides=NAME`` (a data-preparation block): the block is how the tests build that resource.
* ``<!-- doc-test: parse (REASON) -->``: not run (paper-scale data, a GPU, a long training: the
  reason says which); every command in it must be accepted by its program's own option parser
  (fairseq's parsers, our scripts' argparse parsers, our shell scripts' ``--help``, the Hydra
  YAML and its override keys).
* ``<!-- doc-test: text -->``: not a command (a file format, program output, a directory layout).

A block without a marker is an error, so no snippet can go stale unchecked.
"""
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<mode>[a-z]+)\s*(?P<rest>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MODES = ("run", "parse", "text")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    info: str  # the fence's info string (bash, python, text...)
    code: str
    mode: Optional[str]  # None: no marker
    needs: List[str] = field(default_factory=list)
    provides: Optional[str] = None  # a run block that builds this resource for the blocks after it
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path}:{self.line}"

    @property
    def lang(self) -> str:
        return (self.info.split() or [""])[0].lower()


def doc_files() -> List[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "docs" / "results").glob("*.md"))


def extract_blocks(path: Path, text: Optional[str] = None) -> List[Block]:
    """The fenced blocks of a markdown file with their markers (an unclosed fence is an error)."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, fence = i, len(m.group("indent")), m.group("fence")
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{start + 1}: code fence {fence} is never closed")
        code = "\n".join(line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines[i + 1:j])
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        block = Block(path, start + 1, m.group("info").strip(), code + "\n", marker.group("mode") if marker else None)
        if marker:
            rest = marker.group("rest")
            needs = re.search(r"needs=(\S+)", rest)
            block.needs = needs.group(1).split(",") if needs else []
            provides = re.search(r"provides=(\S+)", rest)
            block.provides = provides.group(1) if provides else None
            block.reason = rest.strip("() ")
        blocks.append(block)
        i = j + 1
    return blocks


def indented_commands(path: Path, text: Optional[str] = None) -> List[int]:
    """Lines of commands written as indented (unfenced) code blocks, which no marker can cover."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).split("\n")
    found, in_fence, prev_blank = [], None, True
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if m and in_fence is None:
            in_fence = m.group("fence")[0]
        elif in_fence and re.match(rf"^\s*{re.escape(in_fence)}{{3,}}\s*$", line):
            in_fence = None
        elif not in_fence and prev_blank and re.match(r"^ {4,}(fairseq-|python3? |bash |echo |cat |[A-Z_]+=)", line):
            found.append(n)
        prev_blank = not line.strip() or (prev_blank and line.startswith("    "))
    return found


# ----------------------------------------------------------------------------------------------
# splitting a bash block into simple commands
# ----------------------------------------------------------------------------------------------
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")"}
REDIRECTS = {">", ">>", "<", "2>", "2>&1", ">&", "&>", "<<"}


def _join_continuations(code: str) -> List[Tuple[int, str]]:
    """Logical lines (backslash continuations joined, comments and heredoc bodies dropped)."""
    out, buf, first, heredoc = [], "", 0, None
    for n, raw in enumerate(code.split("\n"), 1):
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        line = raw.rstrip()
        if not buf:
            first = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", buf)
        if m:
            heredoc = m.group(1)
            buf = buf[:m.start()]
        if buf.strip():
            out.append((first, buf))
        buf = ""
    return out


def _strip_prefixes(argv: List[str]) -> List[str]:
    """``A=1 nice -n 5 time cmd ...`` -> ``cmd ...``."""
    while argv:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]) or argv[0] in ("time", "env"):
            argv = argv[1:]
        elif argv[0] == "nice":  # nice [-n N | -N] cmd
            skip = 3 if argv[1:2] == ["-n"] else 2 if len(argv) > 1 and re.fullmatch(r"-\d+", argv[1]) else 1
            argv = argv[skip:]
        else:
            break
    return argv


def simple_commands(code: str) -> List[Tuple[int, List[str]]]:
    """``[(line, argv)]`` of every simple command of a bash block (pipelines and lists split,
    redirections, leading ``VAR=value`` assignments and ``nice``/``time`` prefixes dropped)."""
    commands = []
    for line_no, line in _join_continuations(code):
        line = re.sub(r"(?<!\S)\d*>&\d+", " ", line)  # 2>&1
        line = re.sub(r"(?<!\S)\d+(?=>)", "", line)  # 2> FILE
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        argv: List[str] = []
        skip_target = False
        for tok in list(lexer) + [";"]:
            if skip_target:  # the file of a redirection
                skip_target = False
                continue
            if set(tok) <= set(";&|()"):
                argv = _strip_prefixes(argv)
                if argv:
                    commands.append((line_no, argv))
                argv = []
            elif set(tok) <= set("<>&"):
                skip_target = True
            else:
                argv.append(tok)
    return commands


# ----------------------------------------------------------------------------------------------
# parse checks: is a command accepted by its program's own option parser?
# ----------------------------------------------------------------------------------------------
FAIRSEQ_CLI = {
    "fairseq-train": "fairseq_cli.train", "fairseq-generate": "fairseq_cli.generate",
    "fairseq-interactive": "fairseq_cli.interactive", "fairseq-eval-lm": "fairseq_cli.eval_lm",
    "fairseq-preprocess": "fairseq_cli.preprocess", "fairseq-validate": "fairseq_cli.validate",
}
# programs that are not ours and take no option we document: allowed, their options not checked
SHELL = {"cd", "echo", "cat", "mkdir", "export", "source", ".", "head", "tail", "wc", "ls", "cp", "printf",
         "tee", "paste", "cut", "sort", "diff", "true", "pip", "sacrebleu", "git", "tar", "wget", "curl"}


class _Parsed(Exception):
    """Raised by the patched ArgumentParser.parse_args once the command line is accepted."""


def _parse_only(entry, argv: List[str], cwd: Path) -> Optional[str]:
    """Run ``entry()`` with ``sys.argv = argv`` until its argparse parser has accepted the command
    line (then stop): None, or argparse's error message."""
    import argparse
    import contextlib
    import io
    import os
    import sys

    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed()

    err = io.StringIO()
    old_argv, old_cwd = sys.argv, os.getcwd()
    argparse.ArgumentParser.parse_args = parse_args
    try:
        os.chdir(cwd)
        sys.argv = list(argv)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            entry()
    except _Parsed:
        return None
    except SystemExit as e:
        if e.code in (0, None):
            return None  # --help
        message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit status {e.code}"
        return message if len(message) < 400 else message[:400] + "..."
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv = old_argv
        os.chdir(old_cwd)
    return f"{argv[0]} finished without parsing a command line"


def _check_fairseq(argv: List[str], cwd: Path) -> Optional[str]:
    import importlib

    module = importlib.import_module(FAIRSEQ_CLI[argv[0]])
    return _parse_only(module.cli_main, argv, cwd)


def _check_python_script(argv: List[str], cwd: Path) -> Optional[str]:
    import runpy

    script = cwd / argv[0]
    if not script.is_file():
        return f"{argv[0]}: no such script"
    return _parse_only(lambda: runpy.run_path(str(script), run_name="__main__"), argv, cwd)


def _check_shell_script(argv: List[str], cwd: Path) -> Optional[str]:
    import subprocess

    script = cwd / argv[0]
    if not script.is_file():
        return f"{argv[0]}: no such script"
    proc = subprocess.run(["bash", str(script), "--help"], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return f"bash {argv[0]} --help exited with {proc.returncode}: {proc.stderr.strip()[-300:]}"
    usage = proc.stdout + proc.stderr
    options = []
    for arg in argv[1:]:
        if arg == "--":  # the rest is passed on (Hydra overrides)
            break
        if re.fullmatch(r"--[a-z][a-z0-9-]*", arg.split("=")[0]):
            options.append(arg.split("=")[0])
    unknown = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", usage)]
    return f"{argv[0]}: option(s) not in its --help: {' '.join(unknown)}" if unknown else None


def _hydra_key_exists(cfg, key: str) -> bool:
    """Whether ``group.field`` exists in the composed YAML or in the dataclass the group selects."""
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY
    from fairseq.tasks import TASK_DATACLASS_REGISTRY
    from omegaconf import OmegaConf

    group, _, name = key.partition(".")
    node = OmegaConf.to_container(cfg, resolve=False)
    for part in key.split("."):
        node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
    if node is not KeyError:
        return True
    if not name or "." in name:
        return False
    if group in ("model", "task"):
        chosen = (OmegaConf.to_container(cfg, resolve=False).get(group) or {}).get("_name")
        if group == "model":  # a paper row's YAML names its arch; the options are its model's
            chosen = ARCH_MODEL_NAME_REGISTRY.get(chosen, chosen)
        registry = MODEL_DATACLASS_REGISTRY if group == "model" else TASK_DATACLASS_REGISTRY
        dc = registry.get(chosen)
        return dc is not None and name in dc.__dataclass_fields__
    fields = FairseqConfig.__dataclass_fields__
    if group not in fields:
        return False
    import dataclasses

    f = fields[group]
    default = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    return name in getattr(default, "__dataclass_fields__", {})


def _check_hydra(argv: List[str], cwd: Path) -> Optional[str]:
    from omegaconf import OmegaConf

    args, overrides = {}, []
    it = iter(argv[1:])
    for a in it:
        if a in ("--config-dir", "--config-name", "-cd", "-cn"):
            args[a.lstrip("-")] = next(it, "")
        elif "=" in a and not a.startswith("-"):
            overrides.append(a)
        else:
            return f"fairseq-hydra-train: unexpected argument {a}"
    directory = args.get("config-dir") or args.get("cd")
    name = args.get("config-name") or args.get("cn")
    if not directory or not name:
        return "fairseq-hydra-train: needs --config-dir and --config-name"
    yaml = cwd / directory / f"{name}.yaml"
    if not yaml.is_file():
        return f"fairseq-hydra-train: no config {directory}/{name}.yaml"
    cfg = OmegaConf.load(yaml)
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+")
        if not key.startswith("hydra.") and not _hydra_key_exists(cfg, key):
            return f"fairseq-hydra-train: {directory}/{name}.yaml has no key {key}"
    return None


def check_command(argv: List[str], cwd: Path = REPO) -> Optional[str]:
    """None when ``argv`` is accepted by its program's parser, else one line saying why not."""
    prog = argv[0]
    if prog in FAIRSEQ_CLI:
        return _check_fairseq(argv, cwd)
    if prog == "fairseq-hydra-train":
        return _check_hydra(argv, cwd)
    if prog in ("python", "python3"):
        if argv[1:3] == ["-m", "venv"]:
            return None
        if len(argv) > 1 and argv[1].endswith(".py"):
            return _check_python_script(argv[1:], cwd)
        return f"python {' '.join(argv[1:2])}: only 'python SCRIPT.py ...' and 'python -m venv' are checked"
    if prog == "bash" and len(argv) > 1 and argv[1].endswith(".sh"):
        return _check_shell_script(argv[1:], cwd)
    if prog in SHELL:
        return None
    return f"{prog}: a program the doc test does not know (add a check to tests/doc_snippets.py)"
