"""Models: each pinned model staged and verified in the host's model store before any restart, fanned out through peer hosts; unused revisions collected."""

from pyinfra import host, inventory, state
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglfleet.artifacts.models import ModelError, load_manifest
from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.facts.host import READ
from sglfleet.operations import models, sharing
from sglfleet.run.context import fleet_shares, host_config, host_is_gateway, host_models, host_stack, host_state


@deploy("Models")
def stage_models():
    if host_is_gateway(host):
        return  # a gateway loads no model
    config = host_config(host)
    wanted = host_models(host)  # every service's, once
    if not wanted:
        return  # unpinned (allow_unpinned_models) or local paths: the server loads them itself
    try:
        pairs = [(model, load_manifest(model.repo, model.revision, endpoint=config.hf_endpoint)) for model in wanted]
    except ModelError as error:
        # A missing manifest is the inventory's problem: stop before any host changes.
        raise PyinfraError(str(error)) from None
    targets = [h for h in inventory if state.is_host_in_limit(h) and not host_is_gateway(h)]
    shares = list(fleet_shares(host, targets, config.distribution, config.model_share_port,
                               f"sglfleet-models-share-{RUN_TOKEN}"))
    # pyinfra orders operations by call site, then loop position: one operation a round.
    # As read with the host (None: not read, so the operation reads it); its store is its own.
    answers = host_state(host).models
    for share in host.loop(shares):
        if share:
            models.staged(
                name=f"Models staged and verified, round {share.round}",
                models=pairs,
                source=config.model_source,
                python=host_stack(host).venv + "/bin/python",  # the stack's huggingface_hub, hash-pinned in its lock
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
def collect_models():
    # After the releases are collected: what no kept release loads goes. A run that
    # stages no model (unpinned, development only) leaves the store to the next
    # run that does, and spends no remote command on it.
    wanted = [] if host_is_gateway(host) else host_models(host)
    if wanted:
        models.collected(name="Collect unused model revisions", keep=[m.dir for m in wanted])
