"""``python -m paged <command>``: one module per command."""
