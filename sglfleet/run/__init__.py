"""One pyinfra run: what the tasks know of each host (the one read), the summary, diffs, dry runs, interrupts, the router, the run's events and webhooks, and sglfleet status."""
