"""The one thing pyproject.toml cannot say stably: the two hot loops written in C.

protocol/_recscan.c (the fast record scanners) and policies/_digits.c (the digit-run check,
the key count and the long-number scan of the JSON rules) are optional. Without a C compiler
the install still succeeds and Python does the work (the full record reader of
protocol/records.py, a Python digit check, a second decoding for keys given twice and for
long numbers): the same answers, slower (`kpg run` warns when it reads records without the C
scanners).
Everything else about the package is in pyproject.toml.
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
