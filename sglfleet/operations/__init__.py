"""sglfleet's pyinfra operations."""
