"""Command line of :mod:`fairseq_local_core.corpus_manifest` for the shell scripts (without torch)::

    python -m fairseq_local_repro.text.corpus_manifest [--prog PROG] write|gen-record|get|check-ref|claim ...
"""
import argparse
import os
import sys
from typing import Dict

from fairseq_local_core import corpus_manifest as cm


def _cmd_write(a):
    files: Dict[str, Dict[str, str]] = {}
    for item in a.files:
        split, lang, path = item.split(":", 2)
        files.setdefault(split, {})[lang] = path
    tf = {"tokenize": a.tokenize, "lowercase": a.lowercase == "1", "bpe": a.bpe,
          "bpe_size": a.bpe_size if a.bpe != "none" else None, "joint_bpe": a.joint == "1" and a.bpe != "none"}
    cm.write(a.directory, cm.build(files, a.languages.split(","), tf))


def _cmd_gen_record(a):
    outputs = {os.path.basename(p): p for p in a.output}
    langs = argparse.ArgumentParser(add_help=False)  # fairseq-generate's options after --
    langs.add_argument("-s", "--source-lang")
    langs.add_argument("-t", "--target-lang")
    given, _ = langs.parse_known_args(a.rest)
    cm.write_record(a.out, cm.gen_record(a.data, a.subset, outputs, given.source_lang, given.target_lang))


def _cmd_get(a):
    manifest = cm.read(a.data) or {}
    languages = manifest.get("languages") or []
    values = dict(manifest.get("transforms") or {}, target_lang=languages[1] if len(languages) == 2 else None)
    value = values.get(a.key)
    if value is not None:
        print(int(value) if isinstance(value, bool) else value)


def _cmd_check_ref(a):
    for note in cm.check_reference(a.hyp, a.ref, a.lowercase):
        print(f"{a.prog}: note: {note}", file=sys.stderr)


def _cmd_claim(a):
    cm.claim_run(a.save_dir, a.row, a.data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=cm.__doc__.split("\n\n")[0])
    p.add_argument("--prog", default="corpus_manifest", help="program name for the error line")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write DIR/corpus.json")
    w.add_argument("directory")
    w.add_argument("--languages", required=True)
    w.add_argument("--tokenize", default="none")
    w.add_argument("--lowercase", default="0")
    w.add_argument("--bpe", default="none")
    w.add_argument("--bpe-size", type=int)
    w.add_argument("--joint", default="1")
    w.add_argument("files", nargs="+", help="SPLIT:LANG:PATH")
    w.set_defaults(run=_cmd_write)
    g = sub.add_parser("gen-record", help="write generate.sh's gen.json (-- then fairseq-generate's options)")
    g.add_argument("out")
    g.add_argument("--data", required=True)
    g.add_argument("--subset", required=True)
    g.add_argument("--output", action="append", default=[])
    g.set_defaults(run=_cmd_gen_record)
    t = sub.add_parser("get", help="print a transform (tokenize, lowercase, bpe...) or the target_lang of a data "
                       "directory's corpus.json (nothing: unknown)")
    t.add_argument("data")
    t.add_argument("key")
    t.set_defaults(run=_cmd_get)
    c = sub.add_parser("check-ref", help="a reference for generate.sh's hypotheses")
    c.add_argument("--hyp", required=True)
    c.add_argument("--ref", required=True)
    c.add_argument("--lowercase", action="store_true")
    c.set_defaults(run=_cmd_check_ref)
    r = sub.add_parser("claim", help="record a recipe's row and data in its --save-dir")
    r.add_argument("save_dir")
    r.add_argument("--row", required=True)
    r.add_argument("--data", required=True)
    r.set_defaults(run=_cmd_claim)
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []  # gen-record: -- fairseq-generate's options
    a = p.parse_args(argv[:len(argv) - len(rest) - (1 if "--" in argv else 0)])
    a.rest = rest
    try:
        a.run(a)
    except (cm.CorpusManifestError, OSError) as err:
        message = err if isinstance(err, cm.CorpusManifestError) else f"{err.filename}: {err.strerror}"
        print(f"{a.prog}: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
