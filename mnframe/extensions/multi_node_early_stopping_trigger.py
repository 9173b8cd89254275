"""ChainerMN's module path ``chainermn.extensions.multi_node_early_stopping_trigger``."""

from mnframe.extensions.early_stopping import MultiNodeEarlyStoppingTrigger
from mnframe.extensions.observation_aggregator import ObservationAggregator

__all__ = ["MultiNodeEarlyStoppingTrigger", "ObservationAggregator"]
