"""The trained model as plain ``.npz`` and ``.safetensors`` files.

``export_models`` writes each model as ``.npz`` (``mnframe._internal.npz_write.save_npz``: Chainer's
keys, no pickle) and, beside it, ``.safetensors`` (``model_files.save_safetensors``)
(the user's own link: the ``Classifier`` the runner may have wrapped around it
is left out), only from the ranks that hold distinct parameters: the first
replica (data-parallel rank 0). A data-parallel job writes ``model.npz``
(``model_<name>.npz`` for recipes with named models); a model-parallel job
writes ``model_rank<r>.npz`` per rank ``r`` of the model group, each holding
that rank's stages as a ``ChainList`` (keys ``0/...``, ``1/...`` in stage order).
Load one with ``mnframe.checkpoint.model_files.load_model(run_dir)`` (built from the
run's config), or into the same link built by hand with ``load_params(path, model)``.
"""

import os

from mnframe._internal.npz_write import WriteFailed, payload_bytes, serialize, write_npz
from mnframe.checkpoint.model_files import export_file_names, save_safetensors
from mnframe.communicators.host_collectives import share_verdict
from mnframe.runtime.errors import SaveError
from mnframe.runtime.fs import atomic_path


def export_models(run_dir, models, writer, world, model_rank=None):
    """Write ``models`` ({name: link}) into ``run_dir`` on ranks where ``writer`` is true;
    collective over ``world`` (an error on any rank is raised on every rank, a failed write as
    one ``SaveError`` line naming the path and the bytes needed). Returns the paths."""
    written, error = [], None
    if writer:
        try:
            for file_name, name in export_file_names(models, model_rank).items():
                path = os.path.join(os.fspath(run_dir), file_name)
                arrays = serialize(models[name])  # as chainer.serializers.save_npz writes them
                _write(path, arrays, lambda tmp, arrays=arrays: _write_npz_file(tmp, arrays))
                written.append(path)
                path = path[: -len(".npz")] + ".safetensors"
                _write(path, arrays, lambda tmp, link=models[name]: save_safetensors(tmp, link))
                written.append(path)
        except (OSError, ValueError) as exc:
            error = f"the trained model was not written: {exc}"
    share_verdict(world, error, "export_models", SaveError)
    return written


def _write_npz_file(tmp, arrays):
    with open(tmp, "wb") as f:
        write_npz(f, arrays)


def _write(path, arrays, write):
    """``write(tmp)`` then rename onto ``path``; an OSError becomes ``WriteFailed`` (path, bytes needed)."""
    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except OSError as exc:
        raise WriteFailed(path, payload_bytes(arrays), exc) from exc
