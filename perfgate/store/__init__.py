"""Side effects: stored baselines (JSON files). Every write is atomic."""
