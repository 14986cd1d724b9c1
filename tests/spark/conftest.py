"""The Spark tests share the session-scoped ``spark`` fixture of tests/conftest.py."""
