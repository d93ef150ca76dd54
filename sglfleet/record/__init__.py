"""The run's record: what one run learns and reports (outcomes, events, drift, reads, caches), passed to whoever needs it."""
