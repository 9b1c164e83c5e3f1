"""The Spark pipeline: a store's data files read as a Spark table.

``files`` lists a store's data files and ``rows`` turns one into rows; neither
needs Spark. ``source`` is the ``msgcask`` data source built on them,
``session`` starts a Spark session with it registered, and ``audit`` and
``dead_letters`` are the jobs the ``msgcask pipeline`` command runs. Spark is
an optional extra (``pip install 'msgcask[spark]'``): nothing here imports
PySpark until a Spark job is asked for.
"""
