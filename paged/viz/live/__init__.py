"""Runs recorded now: a real-model child process streaming its trace, and the scenario lab's dry runs; uploads folded in a child process."""
