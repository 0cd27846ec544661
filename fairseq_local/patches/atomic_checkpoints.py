"""Every checkpoint file a run writes appears atomically: complete, or not at all.

What it changes: ``checkpoint_utils.torch_persistent_save`` and ``checkpoint_utils.PathManager``
(for checkpoint_utils alone).  For whom: every training run, fairseq's own models included: a safety
change that keeps the bytes of every checkpoint and every number of the run as fairseq's.  Why:

fairseq writes ``checkpointN.pt`` (or ``checkpoint_E_U.pt``) once, through
``checkpoint_utils.torch_persistent_save`` (a fixed ``NAME.tmp`` renamed without fsync), and then
*copies* it to ``checkpoint_best.pt`` / ``checkpoint_last.pt`` with ``PathManager.copy``, which
writes the destination in place: a run killed during that copy leaves a truncated
``checkpoint_last.pt`` that resuming cannot load.  :func:`install` replaces both writers (for
local paths; remote iopath paths keep fairseq's code): the bytes go to a unique temporary file in
the same directory, which is fsync'ed and then ``os.replace``'d over the destination, and the
directory is fsync'ed.  A kill at any moment leaves the previous complete file in place (plus at
most a hidden ``.NAME.fairseq-local-PID-XXXX.tmp`` file, removed when the next run takes the
``--save-dir`` lock, see ``fairseq_local/save_dir_lock.py``; the temporary files are
:func:`fairseq_local_core.file_io.atomic_open`'s), so a resumed run continues from the last
complete checkpoint.  ``--write-checkpoints-asynchronously`` stays asynchronous: those writes are
fairseq's own (iopath's background writer, not atomic), and the log says so once.
"""
import logging
import os
import shutil

from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

from fairseq_local_core.file_io import atomic_open

logger = logging.getLogger(__name__)

_STATE = {}
_SAID = set()


def atomic_write(path: str, write):
    """Call ``write(f)`` on a binary file that replaces ``path`` only once written and fsync'ed."""
    with atomic_open(path, "wb", fsync=True) as f:
        write(f)


def copy_data(src, dst):
    """Copy the open file ``src`` into the open file ``dst`` (the fault-injection tests wrap this)."""
    shutil.copyfileobj(src, dst, 16 * 1024 * 1024)


def atomic_copy(src_path: str, dst_path: str):
    with open(src_path, "rb") as src:
        atomic_write(dst_path, lambda dst: copy_data(src, dst))


def install():
    if _STATE:
        return
    original_save = checkpoint_utils.torch_persistent_save

    def is_local(path) -> bool:
        return isinstance(path, str) and not PathManager.path_requires_pathmanager(path)

    def torch_persistent_save(obj, filename, async_write: bool = False):
        if async_write:  # --write-checkpoints-asynchronously stays asynchronous: fairseq's (iopath's) writer
            if "async" not in _SAID:
                _SAID.add("async")
                logger.info("--write-checkpoints-asynchronously: checkpoints are written by fairseq's asynchronous "
                            "writer, not atomically (fairseq_local/patches/atomic_checkpoints.py)")
            return original_save(obj, filename, async_write=async_write)
        if not is_local(filename):
            return original_save(obj, filename, async_write=async_write)
        atomic_write(filename, lambda f: checkpoint_utils._torch_persistent_save(obj, f))

    class AtomicPathManager(PathManager):
        """fairseq's PathManager whose ``copy`` of a local file is atomic (checkpoint_utils only)."""

        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if not (is_local(src_path) and is_local(dst_path)):
                return PathManager.copy(src_path, dst_path, overwrite=overwrite)
            if not overwrite and os.path.exists(dst_path):
                return False
            atomic_copy(src_path, dst_path)
            return True

    _STATE.update(original_save=original_save, original_path_manager=checkpoint_utils.PathManager)
    checkpoint_utils.torch_persistent_save = torch_persistent_save
    checkpoint_utils.PathManager = AtomicPathManager
