"""create_empty_dataset: a dataset of empty examples, for models with no inputs or outputs.

Used by model-parallel stages whose ``forward`` starts with ``recv`` and ends
with ``send``: the iterator still needs a dataset of the right length.
"""


def create_empty_dataset(dataset):
    """A list of ``len(dataset)`` empty tuples (the examples are ``()``, as in ChainerMN)."""
    return [()] * len(dataset)
