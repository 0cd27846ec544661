"""Measured durations as the harness records them.

A duration is recorded in seconds at the clock's own resolution, at most microseconds, so a real
step is never recorded as 0.0 however fast the machine; pages and log lines round where they print.
"""
import time

DIGITS = 6  # microseconds: finer than any step the harness times, coarser than perf_counter's resolution


def seconds(duration: float) -> float:
    """A measured duration as recorded (seconds, microseconds)."""
    return round(duration, DIGITS)


def seconds_since(start: float) -> float:
    """Seconds of ``time.perf_counter()`` since ``start``, as recorded."""
    return seconds(time.perf_counter() - start)
