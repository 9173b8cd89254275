"""Read TensorBoard event files back (tests of ``logger=tensorboard``), with only
tensorboardX's protobuf classes: no TensorFlow or tensorboard package needed."""

import struct
from pathlib import Path
from typing import Dict


def read_scalars(path) -> Dict[str, Dict[int, float]]:
    """``{tag: {step: value}}`` of one event file (a TFRecord file of Event protos:
    per record its length, a CRC of it, the Event, a CRC of that)."""
    from tensorboardX.proto.event_pb2 import Event

    out: Dict[str, Dict[int, float]] = {}
    data, pos = Path(path).read_bytes(), 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event.FromString(data[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
        for value in event.summary.value:
            out.setdefault(value.tag, {})[event.step] = value.simple_value
    return out
