"""Other engines' protocols: vLLM's KV-event wire format."""
