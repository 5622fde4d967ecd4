"""State migration, as plan -> rewrite -> assemble -> verify, one module each: :mod:`.plan` (targets and the plan),
:mod:`.rewrite` (one subtask's keyed stream, and the dry run), :mod:`.assemble` (the new ``_metadata``),
:mod:`.verify` (the independent re-read, shared with the pipeline's re-check; :mod:`.canonical` is its comparable
form of values), :mod:`.runner` (all of it in one process), :mod:`.units` (the same split by key-group ranges, for
Spark: part files joined by the driver, verification per range). The declared migration: :mod:`.spec` (the
manifest's ``migration:``), :mod:`.manifest_targets` (targets from a manifest), :mod:`.transforms`,
:mod:`.conversions` and :mod:`.code_policy` (value transforms). Jobs built on them: :mod:`.job` (``flinkstate
migrate`` and the Spark job), :mod:`.dry_run`."""
