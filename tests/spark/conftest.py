"""The Spark tests share the session-scoped ``spark_session`` fixture of
``tests/conftest.py`` with the Spark legs of ``tests/runtime/``: one
SparkSession (master ``local[2,2]``) for the whole test session."""
