"""What pyinfra calls during a run: config.py's hooks."""
