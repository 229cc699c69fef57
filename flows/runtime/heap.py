"""Keep freed memory in the process (glibc): a CPU speed-up that changes no number.

``execute.run_stage`` calls it before every stage instance, under every executor. A training
step (first measured on orbit's GRPO) allocates and frees the same few-megabyte tensors hundreds of times
(rollouts, forward, backward, AdamW). With glibc's default thresholds those blocks are
``mmap``-ed and unmapped or trimmed from the heap top again and again, and every reuse
faults its pages back in, zero-filled by the kernel: a 250-step GRPO instance took ~140k
minor page faults and ~30 % of its wall time in them. Raising ``M_MMAP_THRESHOLD`` and
``M_TRIM_THRESHOLD`` keeps such blocks in the heap for reuse. Where memory lives does not
change what torch computes (its CPU allocator aligns every block to 64 bytes either way), so
the results are bit-identical. The setting is process-wide and stays for the worker's later
stages; the thresholds bound what is held back (at most 1 GB of free heap top; blocks above
64 MB, e.g. a checkpoint's tensors, are still mapped and returned as before)."""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1     # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Set glibc's mmap / trim thresholds for this process; False where there is no glibc
    ``mallopt`` (macOS, musl's no-op stub), which leaves everything as it was."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
