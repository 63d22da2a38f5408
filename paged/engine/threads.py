"""How torch's OpenMP workers wait between parallel regions: a choice for a program, not a library.

Importing ``engine`` changes no setting of the process. A program's entry point calls
:func:`configure_openmp` before anything imports torch: ``python -m paged``, the test suite and
the CPU benchmarks do. ``LLM`` does not call it: ``paged.engine.llm`` imports torch, so by the time an
``LLM`` exists libgomp has read its settings, and a call there would only reach child processes
and leave the caller's environment changed behind its back.
"""

from __future__ import annotations

import os
import sys

#: Workers spin this many iterations (a few hundred microseconds) before they sleep.
SPIN_COUNT = "30000"


def configure_openmp() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` and ``GOMP_SPINCOUNT=30000`` in ``os.environ`` unless the
    user set either (then both are left as they are). Returns False when torch is already
    imported: libgomp read its settings as torch loaded, so these reach only child processes.
    Raises nothing."""
    # Why: a CPU step is hundreds of small ops, each a parallel region of torch's OpenMP threads.
    # libgomp's default lets an idle worker spin ~300k iterations (~3 ms) before it sleeps; on a
    # shared machine (more runnable threads than cores) the spinner takes the core its partner
    # needs and every region waits out a scheduler time slice (a decode-sized matmul at load ~8
    # on 2 cores: 16-18 ms spinning, 0.8 ms passive). Never spinning costs the other way on an
    # idle machine: each region then starts with a futex wake-up (bench/prefix.py's cached run,
    # idle: 4.7-4.9 s passive, 3.9-4.4 s with a short spin). On this project's VM a wake-up costs
    # ~64 us (a 2-thread parallel region: 1 us spinning), and a decode step opens ~150 regions
    # (paged/kernels/cpu.c's matmuls and attention) with Python's work between them: a spin of 3000
    # (tens of us) let workers fall asleep in those gaps, and bench/vllm_peer.py's 16 x 64 run
    # took 3.2-4.5 s against 2.9-3.5 s at 30000. So workers spin a few hundred microseconds
    # (across a step's gaps, not across a loaded machine's time slices) and then sleep;
    # OMP_WAIT_POLICY=PASSIVE covers OpenMP runtimes that do not read GOMP_SPINCOUNT. A setting
    # of either by the user wins.
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return "torch" not in sys.modules
