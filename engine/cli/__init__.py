"""``python -m engine <command>``: one module per command."""
