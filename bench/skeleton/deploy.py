"""
pyinfra's own cost for a deploy of sglfleet's shape, for bench/scale.py: as many ``@deploy``
steps and operations a host as sglfleet's no-op converge has, and one fact whose output is
as long as sglfleet's host read, but nothing of sglfleet's (no plan, no read's arguments,
no decisions). What a no-op converge costs beyond it is sglfleet's own.

Run from this folder (no config.py here), with the shape as host data:

.. code:: shell

    cd bench/skeleton && ../../.venv/bin/pyinfra ../../inventory/dev.py deploy.py -y \\
        --data skeleton_deploys=10 --data skeleton_operations=6 --data skeleton_read_lines=140 \\
        --data skeleton_read_bytes=9000
"""

from pyinfra import host
from pyinfra.api import FactBase, deploy, operation


class Output(FactBase):
    """``lines`` lines of ``width`` bytes each, made on the host: the read's size, nothing read."""

    def command(self, lines: int, width: int) -> str:
        return f"yes {'x' * max(width - 1, 1)} | head -n {lines}"

    def process(self, output):
        return len(output)


@operation()
def unchanged(step: int):
    """Nothing to do, as each of sglfleet's operations finds on an unchanged host."""
    host.noop(f"step {step} as it is")
    return
    yield


def _step(name: str, operations: int):
    @deploy(name)
    def step():
        for number in range(operations):
            unchanged(name=f"{name}: operation {number}", step=number)
    return step


lines, size = int(host.data.skeleton_read_lines), int(host.data.skeleton_read_bytes)
host.get_fact(Output, lines=lines, width=max(size // max(lines, 1), 1))
deploys, operations = int(host.data.skeleton_deploys), int(host.data.skeleton_operations)
for index in range(deploys):
    # The operations dealt over the steps, the first ones first, as sglfleet's phase A has them.
    _step(f"Step {index}", operations // deploys + (1 if index < operations % deploys else 0))()
