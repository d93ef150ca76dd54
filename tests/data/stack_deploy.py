"""Deploy for tests/test_stack_fleet.py: preflight and the stack, nothing else.

    pyinfra inventory/dev.py tests/data/stack_deploy.py -y
"""

from tasks.preflight import preflight
from tasks.stack import install_stack

preflight()
install_stack()
