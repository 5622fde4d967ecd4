package edge;

import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeFormatterBuilder;

/**
 * Every state value of the edge job as a pure function of (key index k, n), n = events the key has seen (n >= 1),
 * and their audit notation. tests/support/edge_job.py recomputes the same values; keep the two in step.
 *
 * <p>idx = n + k picks the case, so that at any moment (when all keys have seen about the same number of events)
 * the keys together cover every case: an instant before 1970, one in 2024, one after year 9999 and one near the
 * epoch, each with nanoseconds from {@link #NANOS} (mostly not multiples of 1000: microsecond truncation shows).
 */
final class Values {
    private Values() {}

    static final int[] NANOS = {999_999_999, 1, 123_456_789, 0, 500_000_001};

    /** Seconds of 10000-01-01T00:00:00Z. */
    private static final long YEAR_10000 = 253_402_300_800L;

    static long seconds(int k, long n) {
        long idx = n + k;
        switch ((int) (idx % 4)) {
            case 0: return -1_000_000_000L - k * 86_400L - n;  // 1938
            case 1: return 1_714_558_500L + k * 3_600L + n;    // 2024-05-01
            case 2: return YEAR_10000 + k * 86_400L + n;       // year 10000
            default: return n * 1_000L + k;                    // near the epoch
        }
    }

    static int nanos(int k, long n, int shift) {
        return NANOS[(int) ((n + k + shift) % NANOS.length)];
    }

    static Instant instant(int k, long n) {
        return Instant.ofEpochSecond(seconds(k, n), nanos(k, n, 0));
    }

    static LocalDateTime localDateTime(int k, long n) {
        return LocalDateTime.ofEpochSecond(seconds(k, n + 1) + 7 * 3_600 + 17, nanos(k, n, 1), ZoneOffset.UTC);
    }

    static LocalTime localTime(int k, long n) {
        long second = ((n + k) * 3_607L + k * 11L) % 86_400L;
        return LocalTime.ofNanoOfDay(second * 1_000_000_000L + nanos(k, n, 2));
    }

    static Timestamp sqlTimestamp(int k, long n) {
        return Timestamp.from(Instant.ofEpochSecond(seconds(k, n + 2), nanos(k, n, 3)));
    }

    /** ISO-8601 with exactly 9 fractional digits, UTC, 'Z' (Instant.toString drops trailing zero groups). */
    private static final DateTimeFormatter INSTANT = new DateTimeFormatterBuilder().appendInstant(9).toFormatter();
    private static final DateTimeFormatter LOCAL_DATE_TIME =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSSSSSSS");
    private static final DateTimeFormatter LOCAL_TIME = DateTimeFormatter.ofPattern("HH:mm:ss.SSSSSSSSS");

    static String iso(Instant v) {
        return v == null ? null : INSTANT.format(v);
    }

    static String iso(LocalDateTime v) {
        return v == null ? null : LOCAL_DATE_TIME.format(v);
    }

    static String iso(LocalTime v) {
        return v == null ? null : LOCAL_TIME.format(v);
    }

    static String iso(Timestamp v) {
        return v == null ? null : INSTANT.format(v.toInstant());
    }
}
