"""The on-disk format of a canonical Flink savepoint, one module per piece, each reading AND writing it:
``_metadata`` (:mod:`.metadata`), its state handles (:mod:`.handles`) and ``CheckpointProperties`` trailer
(:mod:`.checkpoint_properties`), and the keyed-state stream: its header (:mod:`.keyed_header`), its key-group blocks
(:mod:`.keyed_stream`) and their entries (:mod:`.keyed_entries`). Serializer snapshots and value codecs, one family
per module, are in :mod:`flinkstate.serializers`."""
