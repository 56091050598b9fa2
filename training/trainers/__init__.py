"""The TRL trainers: :mod:`~training.trainers.sft` (``SFTTrainer``), :mod:`~training.trainers.dpo`
(``DPOTrainer``) and :mod:`~training.trainers.rloo` (``RLOOTrainer``), with what they share in
:mod:`~training.trainers.common`."""
