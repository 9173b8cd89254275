"""A Chainer Iterator that forwards everything to the iterator it wraps.

The multi-node iterators are wrappers by composition: attribute reads and
writes go to ``actual_iterator``; the properties and methods that
``chainer.dataset.Iterator`` itself defines must be forwarded explicitly,
since ``__getattr__`` never sees them.
"""

from chainer.dataset import iterator as iterator_module


class ForwardingIterator(iterator_module.Iterator):
    def __getattr__(self, name):
        return getattr(self.__dict__["actual_iterator"], name)

    def __setattr__(self, name, value):
        setattr(self.actual_iterator, name, value)

    @property
    def epoch_detail(self):
        return self.actual_iterator.epoch_detail

    @property
    def previous_epoch_detail(self):
        return self.actual_iterator.previous_epoch_detail

    def reset(self):
        self.actual_iterator.reset()

    def finalize(self):
        self.actual_iterator.finalize()

    def serialize(self, serializer):
        self.actual_iterator.serialize(serializer)
