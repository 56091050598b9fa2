"""Self-RAG training data.

* :mod:`~training.selfrag.qa_data` — SQuAD, Self-RAG and instruction loaders; :mod:`~training.selfrag.sources`
  — the files a data command reads;
* :mod:`~training.selfrag.bm25` — BM25 retrieval over passages;
* :mod:`~training.selfrag.labels` — critic cases, the critic prompt and labellers; :mod:`~training.selfrag.teacher`
  — a chat model as labeller;
* :mod:`~training.selfrag.critic_cases` — critic cases for the four aspects; :mod:`~training.selfrag.critic_eval`
  — critic accuracy per aspect;
* :mod:`~training.selfrag.algorithm3` — generator data, the paper's Algorithm 3.
"""
