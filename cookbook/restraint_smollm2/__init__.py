"""Self-restraint ("LLMs can learn self-restraint through iterative self-reflection") for the bundled model:
ReSearch data, DPO/SFT/RLOO, `selfrag eval bio`."""
