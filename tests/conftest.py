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
