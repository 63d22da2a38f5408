"""Traces: the JSONL format, its validation, the recorder that writes them and the scenarios it runs."""
