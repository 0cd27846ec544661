"""Text tools of the pipeline scripts: checked text inputs (:mod:`.text_input`), fields of
fairseq-generate logs (:mod:`.gen_text`), the preprocessing scripts' ``<unk>`` warning
(:mod:`.unk_rate`), Chinese normalisation (:mod:`.zh_text`), and building
lattice files in parallel (:mod:`.segment_pool`, :mod:`.lattice_builder`).  Standard library, numpy
and tqdm only (the plugin's torch-free parts come from ``fairseq_local_core``): none of them imports
torch or fairseq."""
