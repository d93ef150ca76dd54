"""
Switch every targeted host back to its previous release, wave by wave, behind the gate.

    pyinfra inventory/prod.py rollback.py -y
    pyinfra inventory/prod.py rollback.py -y --limit wave2
"""

from tasks.access import check_access
from tasks.rollout import roll_back

check_access(read_host=False)
roll_back()
