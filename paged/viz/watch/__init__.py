"""Following a server's KV-event stream: the socket reader process, its subscriber, the folded state."""
