"""The Ray actors of reach: thin adapters that decode, call a policy, do the effect and reply."""
