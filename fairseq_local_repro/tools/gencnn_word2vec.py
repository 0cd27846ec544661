"""Word2Vec embeddings for genCNN's initialisation (genCNN paper, Section 4.1: "we use Word2Vec
(Mikolov et al., 2013) for the starting state of the word-embeddings (trained on the same dataset
as the main task)"), in the word2vec text format that ``--embed-path`` (``model.embed_path``)
reads, which is also fairseq's ``load_embedding`` format (a ``COUNT DIM`` header line, then
``WORD v1 .. vDIM`` per line).

    python scripts/gencnn_word2vec.py --train data/ptb/raw/ptb.train.txt --dim 100 \
        --out checkpoints/gencnn/word2vec.txt [--dict data/ptb/bin/dict.txt] [--epochs 5] [--seed 1]

The training text is read as fairseq reads it (whitespace-tokenised, one sentence per line).  With
``--dict``, words outside the model's dictionary are mapped to ``<unk>`` first, so ``<unk>`` gets
a vector trained on the same occurrences the model sees.  The paper gives no word2vec settings:
gensim's defaults (CBOW, window 5, negative sampling) with ``min_count`` 1, since the vocabulary
is already the task's.  One worker thread, so a seed gives the same vectors every run.
"""
import argparse
import sys


def read_sentences(path, vocab=None, unk="<unk>"):
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = line.split()
            if vocab is not None:
                words = [w if w in vocab else unk for w in words]
            if words:
                yield words


def read_dict(path):
    vocab = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\n").split(" ")
            if len(parts) < 2:
                sys.exit(f"gencnn_word2vec.py: error: {path}:{lineno}: expected 'WORD COUNT', got {line.strip()!r}")
            vocab.add(parts[0])
    return vocab


def main(argv=None):
    p = argparse.ArgumentParser(prog="gencnn_word2vec.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True, help="tokenised training text, one sentence per line")
    p.add_argument("--out", required=True, help="output file (word2vec text format)")
    p.add_argument("--dim", type=int, default=100, help="vector size (= --decoder-embed-dim; paper: 100)")
    p.add_argument("--dict", help="fairseq dict.txt: words outside it become <unk>")
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.dim <= 0 or a.window <= 0 or a.epochs <= 0:
        p.error("--dim, --window and --epochs must be positive")
    try:
        from gensim.models import Word2Vec
    except ImportError:
        sys.exit("gencnn_word2vec.py: error: gensim is not installed (pip install gensim; scripts/setup_env.sh installs it)")
    try:
        vocab = read_dict(a.dict) if a.dict else None
        sentences = list(read_sentences(a.train, vocab))
    except OSError as e:
        sys.exit(f"gencnn_word2vec.py: error: {e.filename}: {e.strerror}")
    if not sentences:
        sys.exit(f"gencnn_word2vec.py: error: --train {a.train}: no words")
    model = Word2Vec(sentences, vector_size=a.dim, window=a.window, min_count=1, workers=1, seed=a.seed,
                     epochs=a.epochs)
    model.wv.save_word2vec_format(a.out, binary=False)
    print(f"word2vec: {len(model.wv)} words x {a.dim} from {sum(map(len, sentences))} tokens -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
