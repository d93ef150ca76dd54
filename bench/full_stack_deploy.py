"""Deploy for bench/full_stack_build.py: the stack step only, on GPU-less local-fleet hosts.

Preflight is left out on purpose: it refuses a CUDA stack on a host without a
GPU, which is right for a real fleet; here the build, the offline install and
the GPU-less probe are what is measured.

    pyinfra inventory/dev.py bench/full_stack_deploy.py -y --limit node1 --data stack=cu130-sglang-0.5.23
"""

from tasks.stack import install_stack

install_stack()
