"""Models: each pinned model staged and verified in the host's model store before any restart; unused revisions collected."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglfleet.context import host_config, host_stack
from sglfleet.models import ModelError, load_manifest, staged_models
from sglfleet.operations import models


@deploy("Models")
def stage_models():
    config = host_config(host)
    wanted = staged_models(config)
    if not wanted:
        return  # unpinned (allow_unpinned_models) or local paths: the server loads them itself
    try:
        pairs = [(model, load_manifest(model.repo, model.revision, endpoint=config.hf_endpoint)) for model in wanted]
    except ModelError as error:
        # A missing manifest is the inventory's problem: stop before any host changes.
        raise PyinfraError(str(error)) from None
    models.staged(
        name="Models staged and verified",
        models=pairs,
        source=config.model_source,
        python=host_stack(host).venv + "/bin/python",  # the stack's huggingface_hub, hash-pinned in its lock
        endpoint=config.hf_endpoint,
        controller_dir=config.models_controller_dir,
    )


@deploy("Models")
def collect_models():
    # After the releases are collected: what no kept release loads goes. A run that
    # stages no model (unpinned, development only) leaves the store to the next
    # run that does, and spends no remote command on it.
    wanted = staged_models(host_config(host))
    if wanted:
        models.collected(name="Collect unused model revisions", keep=[m.dir for m in wanted])
