"""The mnist_dual_parallel recipe: data x model parallelism with split communicators.

It reuses the components of ``mnframe.recipes.mnist_model_parallel.model``.
"""
