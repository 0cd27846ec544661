"""Every published run followed the harness's schedule (fairseq_local_repro.train.schedule_deviations:
the learning rate halves after each epoch that does not improve the dev loss, and the run stops at
its ``patience``-th such epoch in a row), except the runs listed here, which resumed without their
stopping state before fairseq_local/patches/exact_resume.py and whose pages say what that changed."""
import glob
import json
import os

from fairseq_local_repro.train import schedule_deviations

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLISHED = os.path.join(REPO, "docs", "results", "reproduce")

# run -> (the verdict page that explains it, a phrase of that explanation)
RESUMED_WITHOUT_STATE = {
    "gencnn/streamed/gencnn-s1.json": ("gencnn", "genCNN seed 1 was interrupted twice and resumed"),
}


def curve(*points, lr=1e-3):
    return [{"epoch": i + 1, "dev_loss": loss, "lr": rate} for i, (loss, rate) in enumerate(points)]


def test_schedule_deviations_of_hand_made_curves():
    kept = curve((5.0, 1e-3), (4.0, 1e-3), (4.1, 1e-3), (3.9, 5e-4), (3.95, 5e-4), (3.97, 2.5e-4))
    assert schedule_deviations(kept, patience=2) == []
    lost_halving = curve((5.0, 1e-3), (4.0, 1e-3), (4.1, 1e-3), (3.9, 1e-3))
    assert schedule_deviations(lost_halving, patience=2) == [
        "epoch 4 trained at learning rate 0.001, the schedule's is 0.0005"]
    overran = curve((5.0, 1e-3), (4.0, 1e-3), (4.1, 1e-3), (4.2, 5e-4), (4.3, 2.5e-4))
    assert schedule_deviations(overran, patience=2) == [
        "trained on after epoch 4, where 2 dev losses in a row not below the best end the run"]
    # an equal loss is no improvement for either rule (fairseq compares the logged, rounded losses)
    assert schedule_deviations(curve((5.0, 1e-3), (5.0, 1e-3), (4.0, 1e-3)), patience=2) == [
        "epoch 3 trained at learning rate 0.001, the schedule's is 0.0005"]


def test_published_runs_follow_the_schedule():
    deviating = {}
    for path in sorted(glob.glob(os.path.join(PUBLISHED, "**", "*.json"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        if isinstance(run, dict) and run.get("curve") and "patience" in run:
            found = schedule_deviations(run["curve"], run["patience"])
            if found:
                deviating[os.path.relpath(path, PUBLISHED).replace(os.sep, "/")] = found
    assert sorted(deviating) == sorted(RESUMED_WITHOUT_STATE), deviating
    for run, (family, phrase) in RESUMED_WITHOUT_STATE.items():
        with open(os.path.join(PUBLISHED, family, "verdict.md"), encoding="utf-8") as f:
            assert phrase in " ".join(f.read().split()), (run, phrase)
