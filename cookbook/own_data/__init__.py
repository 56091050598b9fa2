"""Your own documents and data: questions over a folder of documents (``documents_qa``); see README.md."""
