"""ChainerMN's module path ``chainermn.functions.point_to_point_communication``: mnframe's
differentiable ``send``/``recv`` and their function nodes."""

from mnframe.functions.point_to_point import Recv, Send, recv, send

__all__ = ["Recv", "Send", "recv", "send"]
