"""PagedAttention, seen: the one import name this project installs.

``paged.engine`` (the inference engine), ``paged.kernels`` (Triton and C kernels beside their
torch references), ``paged.viz`` (the viewer) and ``paged.lessons`` (lesson data). They live one
level down because a top-level ``kernels/`` shadows Hugging Face's ``kernels`` package, which
transformers imports: see docs/testing.md "One import name".
"""

from pathlib import Path

#: The folder that holds ``paged``: child processes (``python -m paged ...``) start there, so they
#: import this same copy, a checkout's or an installed one's, whatever the caller's folder.
IMPORT_ROOT = Path(__file__).resolve().parent.parent
