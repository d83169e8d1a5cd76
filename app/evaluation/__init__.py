"""``citegate eval``: a JSONL question set answered by a running service or in-process, scored by
each citation's support verdict (API.md, "Claim support")."""
