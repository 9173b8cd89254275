"""Tiny overrides for every shipped recipe, shared by the tests that run recipes through
``python -m mnframe`` (``tests/test_recipes_smoke.py``, ``tests/mpi/test_recipes_to_the_end.py``).

Small models (channel multipliers, few units) and few synthetic examples: one epoch is
about 2 iterations on 2 ranks, so a run to its natural end takes seconds.
"""

# recipe -> overrides
TINY = {
    "cifar": ["model.width=0.0625", "dataset.source.n_synthetic=16", "dataset.batch_size=4"],
    "imagenet": [
        "dataset.source.synthetic=true",
        "model._target_=mnframe.recipes.imagenet.models.NIN",
        "model.width=0.0625",
        "model.n_class=10",
        "dataset.source.n_class=10",
        "dataset.source.insize=64",
        "dataset.source.n_synthetic=16",
        "dataset.batch_size=4",
    ],
    "dcgan": [
        "model.gen.ch=16",
        "model.dis.ch=16",
        "model.gen.n_hidden=8",
        "dataset.source.n_synthetic=16",
        "dataset.batch_size=4",
    ],
    "seq2seq": [
        "dataset.source.n_train=16",
        "dataset.source.n_test=8",
        "dataset.batch_size=8",
        "topology.ranks.0.stages.0.module.n_units=8",
        "topology.ranks.1.stages.0.module.n_units=8",
    ],
    "parallel_convolution": ["model.width=0.0625", "dataset.source.n_synthetic=16", "dataset.batch_size=8"],
    "mnist": ["model.n_units=16", "dataset.batch_size=375"],
    "mnist_model_parallel": ["topology.ranks.0.stages.0.module.n_units=16", "dataset.batch_size=750"],
    "mnist_dual_parallel": [
        "topology.ranks.0.stages.0.module.n_units=16",
        "topology.ranks.1.stages.0.module.n_units=16",
        "dataset.batch_size=750",
    ],
}
