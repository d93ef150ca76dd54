"""Firewall: the host's nftables policy, only its gateways reaching its engines, confirmed over a new SSH connection."""

from pyinfra.api import deploy

from sglfleet.operations import firewall


@deploy("Firewall")
def enforce_policy(plan, found):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``): its policy, or None (``firewall = false``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    """
    config = plan.config
    firewall.enforced(name="Firewall policy (table inet sglfleet)", policy=plan.policy, found=found.firewall,
                      rules=found.firewall_rules, confirm_s=config.firewall_confirm_s,
                      textfile_dir=config.textfile_dir)
