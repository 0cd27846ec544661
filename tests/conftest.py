"""Shared pytest setup: every test must leave torch's global defaults as it found them."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_defaults_unchanged(request):
    dtype = torch.get_default_dtype()
    yield
    if torch.get_default_dtype() != dtype:
        torch.set_default_dtype(dtype)
        pytest.fail(f"{request.node.nodeid} changed torch's default dtype and did not restore it")


def shared_data_dir():
    """The small real corpora (`../shared/data` from the project root, or $FAIRSEQ_LOCAL_SHARED_DATA).

    Returns a Path or None when the corpora are not on this machine."""
    import os
    from pathlib import Path

    env = os.environ.get("FAIRSEQ_LOCAL_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return path if (path / "multi30k-de-en" / "train.de").is_file() else None


@pytest.fixture(scope="session")
def shared_data():
    """Path of the real corpora; tests that need them are skipped (with the reason) where absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("real corpora not found: set FAIRSEQ_LOCAL_SHARED_DATA to the shared/data folder")
    return path
