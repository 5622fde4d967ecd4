"""Where savepoint bytes come from and go to: reading locations (:mod:`.locations`: local directories and the
containment policy for state-handle names; :mod:`.s3`), new savepoints being written (:mod:`.outputs`,
:mod:`.s3_output`: staging, locks, owner markers, publishing), one entry per operation on a path or ``s3://`` URI
(:mod:`.uri`), and the process-wide settings (:mod:`.settings`)."""
