"""Figures of the analyses, written atomically (``fairseq_local_core/file_io.py``)."""
from fairseq_local_core.file_io import atomic_open


def save_png(fig, path: str, **savefig_kwargs):
    """``fig`` as a PNG at ``path``: the whole image or, when saving fails, the previous file."""
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", **savefig_kwargs)
