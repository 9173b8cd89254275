"""ChainerMN's module path ``chainermn.extensions.multi_node_evaluator``: mnframe's evaluators."""

from mnframe.extensions.evaluator import GenericMultiNodeEvaluator, create_multi_node_evaluator

__all__ = ["GenericMultiNodeEvaluator", "create_multi_node_evaluator"]
