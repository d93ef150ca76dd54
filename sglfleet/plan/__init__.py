"""Planning that never connects: the inventory's schema and validation, the lint, waves and batches, releases, templates, secrets, preflight's rules, sglang's flags."""
