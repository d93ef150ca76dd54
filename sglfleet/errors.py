"""The error every check of the inventory raises, so modules that check need not import each other."""


class ConfigError(ValueError):
    """Inventory data that sglfleet refuses: ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))
