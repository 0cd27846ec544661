"""The reproduction harness's analysis, importable: significance tests that hold their level and
the command that recomputes every p-value and interval of ``docs/results.md`` from committed files
(``python -m fairseq_local_repro.compare --recompute docs/results/reproduce``)."""
