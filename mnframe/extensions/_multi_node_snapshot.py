"""ChainerMN's private module ``chainermn.extensions._multi_node_snapshot``: mnframe's
``multi_node_snapshot`` and the replica-set parser ChainerMN's tests call as ``_parse_replica_sets``."""

from mnframe.extensions.snapshot import MultiNodeSnapshot as _MultiNodeSnapshot
from mnframe.extensions.snapshot import multi_node_snapshot
from mnframe.extensions.snapshot import parse_replica_sets as _parse_replica_sets

__all__ = ["multi_node_snapshot", "_MultiNodeSnapshot", "_parse_replica_sets"]
