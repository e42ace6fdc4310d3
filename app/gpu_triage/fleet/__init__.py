"""A fleet's recordings as one dataset: Hive-partitioned Parquet (``host=NAME/date=YYYY-MM-DD/…``),
written by ``record -o DIR/`` and ``export --record DIR`` (:mod:`.dataset`) and summarised by
``diagnose DIR --summary`` (:mod:`.summary`). See docs/recording.md, "A fleet's history as one dataset"."""
