# SPDX-License-Identifier: MIT
"""sbxfs_deerflow: DeerFlow's sandbox provider on top of an sbxfs mount.

In DeerFlow's config.yaml:

    sandbox:
      use: sbxfs_deerflow:SbxfsSandboxProvider

Standard library only; DeerFlow is not needed (when it is importable, the
classes here subclass its Sandbox and SandboxProvider, and its GrepMatch and
effective user are used).  The behaviour follows the DeerFlow sandbox
semantics reference, §1 (Sandbox), §2 (provider), §3 (leases), §7 (network
events), §8 (list and search), §10.3 (skills sync); each module cites the
section a behaviour comes from.
"""

from .jobs import validate_extra_env
from .lease import SandboxLeaseManager, new_owner_id, run_sync_lifecycle_operation
from .mount import SbxfsNotMountedError
from .provider import SbxfsSandboxProvider
from .sandbox import SbxfsSandbox
from .search import IGNORE_PATTERNS, GrepMatch

__version__ = "0.1.0"
__all__ = ["SbxfsSandboxProvider", "SbxfsSandbox", "SandboxLeaseManager", "GrepMatch", "IGNORE_PATTERNS",
           "SbxfsNotMountedError", "new_owner_id", "run_sync_lifecycle_operation", "validate_extra_env"]
