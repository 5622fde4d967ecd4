"""The compiled fast path (flinkstate/_speedups/_cdecode.c), built at install; everything else is in pyproject.toml.

The extension is optional: if it does not build (no C compiler), the install goes on and the pure-Python reference
runs (flinkstate._speedups.BUILD_ERROR says why; tests/test_speedups.py fails in CI when it was expected).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("flinkstate._speedups._cdecode", ["flinkstate/_speedups/_cdecode.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # the JSON Lines writer of dump: its own module, as it is its own piece (output, not the format)
                   Extension("flinkstate._speedups._cjson", ["flinkstate/_speedups/_cjson.c"],
                             extra_compile_args=["-O2"], optional=True)])
