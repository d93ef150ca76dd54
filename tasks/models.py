"""Models: each pinned model staged and verified in the host's model store before any restart, fanned out through peer hosts; unused revisions collected."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglfleet.artifacts.fanout import turns
from sglfleet.artifacts.models import ModelError, load_manifest
from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.facts.host import READ
from sglfleet.operations import models, sharing


@deploy("Models")
def stage_models(fleet, plan, found):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    """
    if plan.is_gateway or not plan.models:
        return  # a gateway loads no model; unpinned models (allow_unpinned_models) or local paths the server loads itself
    config = plan.config
    try:
        pairs = [(model, load_manifest(model.repo, model.revision, endpoint=config.hf_endpoint))
                 for model in plan.models]
    except ModelError as error:
        # A missing manifest is the inventory's problem: stop before any host changes.
        raise PyinfraError(str(error)) from None
    targets = [(one.name, one.address) for one in fleet.targeted(gateways=False)]
    shares = list(turns(plan.name, targets, config.distribution, config.model_share_port,
                        f"sglfleet-models-share-{RUN_TOKEN}"))
    # pyinfra orders operations by call site, then loop position: one operation a round.
    # As read with the host (None: not read, so the operation reads it); its store is its own.
    answers = found.models
    for share in host.loop(shares):
        if share:
            models.staged(
                name=f"Models staged and verified, round {share.round}",
                models=pairs,
                source=config.model_source,
                # the stack's huggingface_hub, hash-pinned in its lock
                python=plan.build(found.os.python_minor).stack.venv + "/bin/python",
                endpoint=config.hf_endpoint,
                controller_dir=config.models_controller_dir,
                share=share,
                answers=READ if answers is None else answers,
                textfile_dir=config.textfile_dir,
            )
    # After every round of every host: no peer fetches from these servers any more. A host
    # that stages nothing started none.
    stages = answers is None or any(models.wanted_paths(manifest, answer)
                                    for (_, manifest), answer in zip(pairs, answers or []))
    serving = next((s.unit for s in shares if s and s.serves), None) if stages else None
    if serving:
        sharing.serving_stopped(name="Model files no longer served to peers", unit=serving, what="model files")


@deploy("Models")
def collect_models(plan):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``)
    """
    # After the releases are collected: what no kept release loads goes. A run that
    # stages no model (unpinned, development only) leaves the store to the next
    # run that does, and spends no remote command on it.
    if plan.models and not plan.is_gateway:
        models.collected(name="Collect unused model revisions", keep=[m.dir for m in plan.models])
