"""The model card of ``selfrag-smollm2-135m`` and its ``versions.json``, both written by code.

Every number in the card is read from the measurement files shipped beside it (``eval.json``,
``backend_agreement.json``, ``split.json``, ``*_training.json``, ``critic_accuracy.json``) and from
``versions.json``; the acceptance bars are judged here from ``eval.json``, never typed in.

* :mod:`.io` — reading the folder's JSON files, file digests;
* :mod:`.figures` — the comparable figures of an ``eval.json`` and the acceptance bars;
* :mod:`.versions` — ``versions.json`` rows and build lineages;
* :mod:`.cells` — table cells and short phrases;
* :mod:`.quality`, :mod:`.abstention`, :mod:`.restraint` — the measured-quality, abstention and
  self-restraint sections;
* :mod:`.render` — the whole card.

``python -m cookbook.selfrag_smollm2.model_card`` is the command line.
"""
