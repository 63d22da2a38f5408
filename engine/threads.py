"""How torch's OpenMP workers wait between parallel regions: a choice for a program, not a library.

Importing ``engine`` changes no setting of the process. A program's entry point calls
:func:`configure_openmp` before anything imports torch: ``python -m engine``, the test suite and
the CPU benchmarks do. ``LLM`` does not call it: ``engine.llm`` imports torch, so by the time an
``LLM`` exists libgomp has read its settings, and a call there would only reach child processes
and leave the caller's environment changed behind its back.
"""

from __future__ import annotations

import os
import sys

#: Workers spin this many iterations (tens of microseconds) before they sleep.
SPIN_COUNT = "3000"


def configure_openmp() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` and ``GOMP_SPINCOUNT=3000`` in ``os.environ`` unless the
    user set either (then both are left as they are). Returns False when torch is already
    imported: libgomp read its settings as torch loaded, so these reach only child processes.
    Raises nothing."""
    # Why: a CPU step is hundreds of small ops, each a parallel region of torch's OpenMP threads.
    # libgomp's default lets an idle worker spin ~300k iterations (~3 ms) before it sleeps; on a
    # shared machine (more runnable threads than cores) the spinner takes the core its partner
    # needs and every region waits out a scheduler time slice (a decode-sized matmul at load ~8
    # on 2 cores: 16-18 ms spinning, 0.8 ms passive). Never spinning costs the other way on an
    # idle machine: each region then starts with a futex wake-up (bench/prefix.py's cached run,
    # idle: 4.7-4.9 s passive, 3.9-4.4 s with a short spin). So workers spin briefly (enough to
    # bridge back-to-back ops) and then sleep; OMP_WAIT_POLICY=PASSIVE covers OpenMP runtimes
    # that do not read GOMP_SPINCOUNT. A setting of either by the user wins.
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return "torch" not in sys.modules
