"""Dry runs at scale: the real scheduler and allocators without the forward pass, the paper's
workloads and figures, and capacity arithmetic."""
