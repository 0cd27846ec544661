"""Training-time state carrying of --task stateful_language_modeling (Zaremba et al.; parallel-cells
paper Section 3.1): through ``task.train_step``, each batch of the training stream starts from the
previous batch's final state, detached; window 0 (every epoch) starts from zero; a dummy batch
(``ignore_grad``) neither reads nor advances the state; ``--no-carry-state`` never carries."""
import pytest
import torch

from test_stateful_language_modeling import _setup, lm_data  # noqa: F401  (fixture)


class _Backward:
    """The one optimizer method FairseqTask.train_step calls."""

    def backward(self, loss):
        loss.backward()


def _tensors(state):
    if torch.is_tensor(state):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in _tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in _tensors(v)]
    return []


class _Recorder:
    """The state the decoder starts each forward from, and the one it leaves in the carry."""

    def __init__(self, decoder):
        self.decoder, self.initial, self.final = decoder, [], []
        decoder.register_forward_pre_hook(self._pre, with_kwargs=True)
        decoder.register_forward_hook(self._post, with_kwargs=True)

    def _pre(self, module, args, kwargs):
        carry = kwargs.get("bptt_state")
        self.initial.append(None if carry is None else carry.get(module))

    def _post(self, module, args, kwargs, out):
        carry = kwargs.get("bptt_state")
        self.final.append(None if carry is None else carry.get(module))


def _train_windows(lm_data, tmp_path, extra=(), ignore=()):  # noqa: F811
    cfg, task, model, criterion = _setup(lm_data, tmp_path, extra)
    task.load_dataset("train")
    samples = list(task.get_batch_iterator(task.dataset("train")).next_epoch_itr(shuffle=False))
    assert len(samples) >= 3 and [s["bptt_window"] for s in samples[:3]] == [0, 1, 2]
    rec = _Recorder(model.decoder)
    for i, sample in enumerate(samples[:3] + samples[:1]):  # the 4th: window 0 of the next epoch
        task.train_step(sample, model, criterion, _Backward(), update_num=i, ignore_grad=i in ignore)
    return rec


def test_training_batch_starts_from_previous_final_state_detached(lm_data, tmp_path):  # noqa: F811
    rec = _train_windows(lm_data, tmp_path)
    assert len(rec.initial) == 4
    assert rec.initial[0] is None and rec.initial[3] is None  # window 0: zero state, every epoch
    for i in (1, 2):
        init, prev_final = _tensors(rec.initial[i]), _tensors(rec.final[i - 1])
        assert init and len(init) == len(prev_final)
        for a, b in zip(init, prev_final):
            assert b.grad_fn is not None  # the final state was part of the previous graph ...
            assert a.grad_fn is None and not a.requires_grad  # ... the next batch gets it detached
            assert torch.equal(a, b.detach())
        assert max(t.abs().max().item() for t in init) > 0


def test_dummy_batch_neither_reads_nor_advances_the_state(lm_data, tmp_path):  # noqa: F811
    rec = _train_windows(lm_data, tmp_path, ignore=(1,))
    assert rec.initial[1] is None and rec.final[1] is None  # the dummy batch ran without the carry
    init2, final0 = _tensors(rec.initial[2]), _tensors(rec.final[0])
    assert init2 and all(torch.equal(a, b.detach()) for a, b in zip(init2, final0))


def test_no_carry_state_starts_every_training_batch_from_zero(lm_data, tmp_path):  # noqa: F811
    rec = _train_windows(lm_data, tmp_path, extra=["--no-carry-state"])
    assert rec.initial == [None] * 4 and rec.final == [None] * 4

