"""Usage and cost: reports read from the stored answers, priced by a versioned table."""
