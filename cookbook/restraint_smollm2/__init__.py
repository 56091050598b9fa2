"""Self-restraint (seed 004) for the bundled model: ReSearch data, DPO/SFT/RLOO, `selfrag eval bio`."""
