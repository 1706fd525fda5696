"""Examples that ship with the package, runnable from any folder once it is installed.

``statestream run statestream.examples.wordcount --until-idle`` counts the words
of the small corpus beside it (package data); a checkout also runs them as
files, ``statestream run examples/wordcount.py``, which is this module.
"""
