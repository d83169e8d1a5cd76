"""The OpenAI-compatible API: Chat Completions, Responses, files and vector stores over
Citegate's store.

An adapter, not a second pipeline: each request is parsed into the question the answer
pipeline of ``/v1/answers`` takes (documents, a collection, a conversation), asked through it,
and its stored Answer is rendered back in OpenAI's shapes. A file is a document and a vector
store a collection, with the same ids.
"""
