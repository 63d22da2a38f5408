"""Names of the attention backends, importable without torch: the CLI offers them in its help,
and only a command that runs a model may pay for torch."""

from __future__ import annotations

BACKENDS = ("auto", "torch", "cpu", "triton")
