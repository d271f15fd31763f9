"""One conversation turn, stage by stage: `pipeline` runs them in order."""
