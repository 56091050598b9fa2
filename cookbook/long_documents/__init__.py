"""Long-document recipes (``python -m cookbook.long_documents.make_long_squad``)."""
