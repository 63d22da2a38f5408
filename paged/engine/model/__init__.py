"""The model side: weights and their loading, the tokenizer, our Llama forward, the KV arena and its
CPU tier, attention, and the runner that turns a batch into sampled tokens."""
