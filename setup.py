"""The one thing pyproject.toml cannot say stably: the two hot loops written in C.

protocol/_recscan.c (the record scanners) and policies/_digits.c (the digit-run check of the
JSON rules) are optional. Without a C compiler the install still succeeds and the Python
versions beside them do the work: the same answers, slower (`kpg run` logs which record
scanner it uses). Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._recscan",
            sources=["protocol/_recscan.c"],
            optional=True,
            extra_compile_args=["-Wextra"],
        ),
        Extension(
            "policies._digits",
            sources=["policies/_digits.c"],
            optional=True,
            extra_compile_args=["-Wextra"],
        ),
    ]
)
