"""
Switch every targeted host back to its previous release, wave by wave, behind the gate.

    pyinfra inventory/prod.py rollback.py -y
    pyinfra inventory/prod.py rollback.py -y --limit wave2
"""

from tasks.rollout import roll_back

roll_back()
