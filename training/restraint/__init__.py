"""Self-restraint ("LLMs can learn self-restraint through iterative self-reflection") training data.

* :mod:`~training.restraint.questions` — the questions, with their passages;
* :mod:`~training.restraint.algorithm` — ReSearch data, Algorithm 1: samples with expected utilities;
* :mod:`~training.restraint.pairs` — ReSearch records as SFT records, DPO pairs and RLOO prompts;
* :mod:`~training.restraint.reward` — the RLOO reward: expected utility under a frozen evaluator.
"""
