"""Deploy for tests/test_patch_operation.py: the patch operation on one path.

    SGLFLEET_TEST_PATCH_TARGET=/opt/x/kimi_k25.py pyinfra inventory/dev.py tests/data/patch_deploy.py
"""

import os

from sglfleet.operations import patch

patch.eagle3_methods(
    name="KimiK25 EAGLE-3 methods in the class body",
    path=os.environ["SGLFLEET_TEST_PATCH_TARGET"],
)
