"""The one thing pyproject.toml cannot say stably: the record scanners in C.

protocol/_recscan.c is optional. Without a C compiler the install still succeeds and
protocol/records.py reads records with its Python scanners: the same answers, slower
(`kpg run` logs which it uses). Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._recscan",
            sources=["protocol/_recscan.c"],
            optional=True,
            extra_compile_args=["-Wextra"],
        )
    ]
)
