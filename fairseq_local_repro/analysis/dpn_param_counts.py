"""Parameter counts of the DPN-S2S archs and the Tables 1-2 baselines, next to the paper's.

The vocabulary sizes default to fairseq's IWSLT14 De-En preparation with 10k joint BPE
(8848 German / 6632 English types) and, for the NIST archs, the paper's 37k / 25k (Section 4.1).
Column "params" is each arch as registered (DPN-S2S in the Table 1 reading of Section 4: W^s tied
to the target embeddings, one SAN decoder-to-encoder attention for both encoder paths, no CNN-path
fc1/fc2 at equal widths); "fairseq reading" is DPN-S2S with a separate W^s, one SAN attention per
encoder path and ConvS2S's fc1/fc2, and the baselines with their decoder input and output
embeddings tied (fconv --share-input-output-embed, transformer --share-decoder-input-output-embed).

    python scripts/analysis/dpn_param_counts.py [--src-vocab 8848 --tgt-vocab 6632] [--json out.json]
"""
import argparse
import json
import warnings

PAPER = {  # Table 1 (IWSLT14 De-En)
    "dpn_s2s_iwslt_de_en": 11.57e6, "dpn_baseline_wider_cnn_iwslt": 20.37e6,
    "dpn_baseline_wider_san_iwslt": 27.06e6, "dpn_baseline_deeper_cnn_iwslt": 13.82e6,
    "dpn_baseline_deeper_san_iwslt": 13.54e6,
}
IWSLT = ["dpn_s2s_iwslt_de_en", "dpn_baseline_wider_cnn_iwslt", "dpn_baseline_wider_san_iwslt",
         "dpn_baseline_deeper_cnn_iwslt", "dpn_baseline_deeper_san_iwslt"] + [f"dpn_s2s_m{i}" for i in range(1, 10)]
NIST = ["dpn_s2s_nist_zh_en", "dpn_baseline_cnn_nist", "dpn_baseline_san_nist"]
FAIRSEQ_READING = dict(decoder_output_embed="separate", san_cross_attention="per-path", cnn_path_projections="always")
TIED_BASELINE = {"fconv": dict(share_input_output_embed=True), "transformer": dict(share_decoder_input_output_embed=True)}


def other_reading(arch):
    """The overrides of the second column: the fairseq reading for DPN-S2S, tied embeddings for a baseline."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    name = ARCH_MODEL_NAME_REGISTRY[arch]
    return FAIRSEQ_READING if name == "dpn_s2s" else TIED_BASELINE[name]


class _Task:
    def __init__(self, src, tgt):
        self.source_dictionary, self.target_dictionary = src, tgt


def _dictionary(n):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def count(arch, n_src, n_tgt, **overrides):
    """Build ``arch`` through fairseq's registries (arch defaults, then the model's own defaults)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    args = argparse.Namespace(max_source_positions=1024, max_target_positions=1024, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    model_cls, name = ARCH_MODEL_REGISTRY[arch], ARCH_MODEL_NAME_REGISTRY[arch]
    cfg = MODEL_DATACLASS_REGISTRY[name].from_namespace(args) if name == "dpn_s2s" else args
    model = model_cls.build_model(cfg, _Task(_dictionary(n_src), _dictionary(n_tgt)))
    return sum(p.numel() for p in model.parameters())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src-vocab", type=int, default=8848)
    p.add_argument("--tgt-vocab", type=int, default=6632)
    p.add_argument("--nist-src-vocab", type=int, default=37000)
    p.add_argument("--nist-tgt-vocab", type=int, default=25000)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import fairseq_local  # noqa: F401

    rows = []
    for archs, vocab in ((IWSLT, (args.src_vocab, args.tgt_vocab)), (NIST, (args.nist_src_vocab, args.nist_tgt_vocab))):
        for arch in archs:
            rows.append((arch, count(arch, *vocab), count(arch, *vocab, **other_reading(arch)), PAPER.get(arch)))
    print(f"{'arch':<32}{'params':>10}{'fairseq reading':>17}{'paper':>10}")
    for arch, n, alt, paper in rows:
        print(f"{arch:<32}{n / 1e6:>9.2f}M{alt / 1e6:>16.2f}M{'' if paper is None else f'{paper / 1e6:.2f}M':>10}")
    if args.json:
        from fairseq_local_core.file_io import write_json

        write_json(args.json, {a: {"params": n, "fairseq_reading": alt, "paper": paper} for a, n, alt, paper in rows},
                   indent=2)
    return rows


if __name__ == "__main__":
    main()
