"""scripts/check_kernels.py: every packing kernel variant compiles with NVRTC for sm_90, no GPU needed.

Runs where CuPy (with NVRTC) is installed, e.g. in the venv scripts/check_kernels.sh makes
(``.venv-kernels/bin/python -m pytest tests/unit/test_check_kernels.py``); skipped elsewhere.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def check_kernels():
    pytest.importorskip("cupy", reason="CuPy is not installed (bash scripts/check_kernels.sh sets up a venv)")
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # CuPy without NVRTC
        pytest.skip(f"NVRTC is not loadable ({e}): pip install nvidia-cuda-nvrtc")
    spec = importlib.util.spec_from_file_location("check_kernels", SCRIPTS / "check_kernels.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_kernels"] = module
    spec.loader.exec_module(module)
    return module


def test_all_variants_compile_for_sm_90(check_kernels, capsys):
    assert check_kernels.main(["--arch", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "36 compiled, 0 failed (of 36 variants) for sm_90" in out


def test_a_broken_kernel_fails(check_kernels):
    import cupy

    bad = cupy.ElementwiseKernel("raw uint64 ptrs", "raw float32 out", "out[0] = no_such_name;", "mnframe_bad")
    with pytest.raises(Exception, match="(?i)compile|error"):
        check_kernels.compile_one(bad, True, "sm_90")
