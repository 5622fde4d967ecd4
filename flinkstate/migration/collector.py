"""Python's cyclic garbage collector, held back while a migration rewrites or verifies keyed state.

The hot loops hold a key group's decoded entries in lists (tens of thousands of entries per key group at 10^7
entries), and keep allocating: every automatic full collection then walks those lists and every object the process
holds (modules, the plan, caches), while how often full collections come depends on the allocations, not on the
size of what they walk. That made ``migrate`` + verify super-linear: 9.85x the entries took 16.4x the time, and
linear with the collector off. :func:`collector_deferred` freezes what exists when the work starts (it stays alive
throughout: no collection needs to walk it) and raises the thresholds so that full collections all but stop, while
young collections still reclaim the cycles a migration function may leave behind. Everything is restored on the
way out, on success or error.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Young collections every this many new container objects (Python's default: 700): a rare, cheap pass over the
#: newest objects only, so garbage cycles made in the loop are still reclaimed.
YOUNG_THRESHOLD = 100_000
#: Middle and full collections after this many of the younger ones: with the young threshold above, a full
#: collection would need about 10^10 allocations, which no migration reaches.
OLDER_THRESHOLD = 100


@contextmanager
def collector_deferred() -> Iterator[None]:
    """Within: the objects alive on entry frozen (:func:`gc.freeze`, unless the process froze some itself: then
    its freeze is left as it is), the thresholds raised. On exit: the thresholds as they were, the frozen objects
    back in the oldest generation. Whether the collector is enabled is never changed (a caller that disabled it
    keeps it disabled). Nested uses restore what their own entry found."""
    thresholds = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()


__all__ = ["collector_deferred"]
