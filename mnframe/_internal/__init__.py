"""Private helpers every layer above ``runtime`` may use; not part of the API.

The import-path resolver (``import_path``), ``_target_`` checks (``targets``), the words of
a config problem (``config_issue``), ChainerMN's module-path table (``chainermn_paths``) with
the lazy names (``lazy``) and the finder of file-less modules (``path_finder``) that read
it, Chainer's NumPy 2 import hook (``numpy_compat``) and the ``.npz`` files (``npz_read``,
``npz_write``). This package imports only ``runtime``, ``dependencies`` and itself, and
its ``__init__`` imports nothing, so ``import mnframe`` stays cheap.
"""
