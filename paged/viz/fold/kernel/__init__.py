"""The kernel lesson's fold: one request's ``attention_read`` events and its run's frames
folded into frames that zoom into the decode kernel (``paged.viz.fold.kernel.frames``)."""
