"""The Anthropic-compatible API: the Messages and Files APIs over Citegate's store.

An adapter, not a second product: it parses the Messages API's shapes, swaps file references
for the stored documents, and from there shares the upstream client, the caching rules, the
citation resolver and the answer store with ``/v1/answers``.
"""
