"""The method of fleet_marker.toml: read as data by sglfleet's patch engine, never imported."""


class KimiVLForConditionalGeneration:
    def sglfleet_fleet_marker(self):
        """Say that an operator's patch set reached this file."""
        return "patched by tests/data/patch_sets/fleet"
