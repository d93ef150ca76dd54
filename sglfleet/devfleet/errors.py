"""The one error the local fleet raises."""


class DevFleetError(Exception):
    """A local-fleet failure, worded as one line that says what to do."""
