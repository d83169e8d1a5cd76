"""Answer batches: many questions as one Message Batch, polled and stored in the background."""
