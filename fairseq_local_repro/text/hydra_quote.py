"""Paths given to Hydra as override values, whatever characters they hold.

Hydra's override grammar reads ``,`` as a sweep, ``=``, ``#``, quotes, brackets and spaces as syntax
and ``${...}`` as an interpolation, so ``task.data=/data/a,b`` fails inside the parser with a message
that never names the path.  :func:`quote` writes a value as a quoted Hydra string that Hydra and
OmegaConf read back as the same characters; ``scripts/train.sh --config`` passes every path it
hands to ``fairseq-hydra-train`` through it::

    python -m fairseq_local_repro.text.hydra_quote VALUE...    # one quoted value a line
"""
import re
import sys


def quote(value: str) -> str:
    """``value`` as a single-quoted Hydra string: quotes escaped, ``${`` escaped (no interpolation),
    backslashes doubled where Hydra would read them as escapes (before a quote, at the end)."""
    value = re.sub(r"\\+(?=')|\\+$", lambda m: m.group(0) * 2, value)
    return "'" + value.replace("'", "\\'").replace("${", "\\${") + "'"


def main(argv=None) -> int:
    for value in sys.argv[1:] if argv is None else argv:
        if "\n" in value:
            print(f"hydra_quote: error: {value!r} holds a line break: rename it", file=sys.stderr)
            return 2
        print(quote(value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
