"""Command line of the output-folder claims of :mod:`fairseq_local_core.file_io` for the shell scripts
(without torch)::

    python -m fairseq_local_repro.text.output_claim [--prog PROG] lock-path|claim|mark ...
"""
import argparse
import sys

from fairseq_local_core import file_io


def main(argv=None) -> int:
    """The shell scripts' door (``python -m fairseq_local_repro.text.output_claim``):
    ``lock-path DIR``; ``claim DIR --what OPT --fd N --pid PID [--check-ours [--marker NAME]...]``;
    ``mark DIR --tool NAME``."""
    p = argparse.ArgumentParser(prog="output_claim")
    p.add_argument("--prog", default="output_claim")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("lock-path").add_argument("folder")
    c = sub.add_parser("claim")
    c.add_argument("folder")
    c.add_argument("--what", required=True)
    c.add_argument("--fd", type=int, required=True)
    c.add_argument("--pid", type=int, required=True)
    c.add_argument("--check-ours", action="store_true")
    c.add_argument("--marker", action="append", default=[])
    m = sub.add_parser("mark")
    m.add_argument("folder")
    m.add_argument("--tool", required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "lock-path":
            print(file_io.lock_path(a.folder, create=True))
        elif a.cmd == "claim":
            file_io.claim(a.folder, a.what, run=f"{a.prog} run", fd=a.fd, pid=a.pid)
            if a.check_ours:
                file_io.check_ours(a.folder, a.what, a.marker)
        else:
            file_io.mark_ours(a.folder, a.tool)
    except (file_io.OutputInUseError, file_io.NotOursError) as err:
        print(f"{a.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
