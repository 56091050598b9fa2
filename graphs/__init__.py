"""LangGraph server entry points (see ``langgraph.json``)."""
