"""The trained model as plain ``.npz`` files a user loads without mnframe.

``export_models`` writes each model with ``chainer.serializers.save_npz``
(the user's own link: the ``Classifier`` the runner may have wrapped around it
is left out), only from the ranks that hold distinct parameters: the first
replica (data-parallel rank 0). A data-parallel job writes ``model.npz``
(``model_<name>.npz`` for recipes with named models); a model-parallel job
writes ``model_rank<r>.npz`` per rank ``r`` of the model group, each holding
that rank's stages as a ``ChainList`` (keys ``0/...``, ``1/...`` in stage order).
Load one into the same link built by hand::

    model = mnframe.recipes.mnist.model.MLP(n_units=1000, n_out=10)
    chainer.serializers.load_npz("runs/mnist/<time>/model.npz", model)
"""

import os

from mnframe.runtime.errors import SaveError
from mnframe.utils.collectives import share_verdict
from mnframe.utils.fs import atomic_path
from mnframe.utils.npz import WriteFailed, payload_bytes, serialize, write_npz


def export_file_names(models, model_rank=None):
    """{file name: model name} for this rank's models (``model_rank`` for model parallelism)."""
    if model_rank is not None:
        return {f"model_rank{model_rank}.npz": name for name in models}
    if list(models) == ["main"]:
        return {"model.npz": "main"}
    return {f"model_{name}.npz": name for name in models}


def export_models(run_dir, models, writer, world, model_rank=None):
    """Write ``models`` ({name: link}) into ``run_dir`` on ranks where ``writer`` is true;
    collective over ``world`` (an error on any rank is raised on every rank). Returns the paths."""
    written, error = [], None
    if writer:
        try:
            for file_name, name in export_file_names(models, model_rank).items():
                path = os.path.join(os.fspath(run_dir), file_name)
                arrays = serialize(models[name])  # as chainer.serializers.save_npz writes them
                try:
                    with atomic_path(path) as tmp, open(tmp, "wb") as f:
                        write_npz(f, arrays)
                except OSError as exc:
                    raise WriteFailed(path, payload_bytes(arrays), exc) from exc
                written.append(path)
        except OSError as exc:
            error = f"the trained model was not written: {exc}"
    share_verdict(world, error, "export_models", SaveError)
    return written
