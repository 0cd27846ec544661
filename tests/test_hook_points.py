"""Layers on a shared fairseq target run in the order they were added, around the function
(fairseq_local/hook_points.py); the loads in progress nest (fairseq_local/checkpoint_loads.py)."""
import pytest

from fairseq_local import checkpoint_loads, hook_points


def test_layers_run_in_order_around_the_function():
    calls = []

    def inner(x):
        calls.append(("fairseq", x))
        return x * 10

    def layer(name):
        def run(call, x):
            calls.append((name, x))
            return call(x + 1) + 1
        return run

    first, second = layer("first"), layer("second")
    point = hook_points.PREPROCESS_MAIN
    saved = list(hook_points._LAYERS.get(point, []))
    try:
        hook_points._LAYERS[point] = []
        hook_points.add(point, first)
        hook_points.add(point, second)
        hook_points.add(point, first)  # again: kept once, where it was
        assert hook_points.layers(point) == (first, second)
        assert hook_points.run(point, inner, 1) == 32
        assert calls == [("second", 1), ("first", 2), ("fairseq", 3)]
    finally:
        hook_points._LAYERS[point] = saved
    with pytest.raises(ValueError, match="^fairseq.nothing: not a hook point"):
        hook_points.add("fairseq.nothing", first)


def test_checkpoint_loads_nest_and_end_with_their_block():
    assert not checkpoint_loads.in_progress() and checkpoint_loads.current() is None
    with checkpoint_loads.loading(task="outer", path="a.pt") as outer:
        with pytest.raises(RuntimeError):
            with checkpoint_loads.loading(task="inner", path="b.pt") as inner:
                assert checkpoint_loads.current() is inner and inner == {"task": "inner", "path": "b.pt"}
                raise RuntimeError("a failed load")
        assert checkpoint_loads.current() is outer and checkpoint_loads.in_progress()
    assert not checkpoint_loads.in_progress()
