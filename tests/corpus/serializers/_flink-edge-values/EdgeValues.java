// Writes edge values with Flink's own serializers (flink-core of the Flink 2.3 distribution), one line each:
//   serializer <TAB> hex of the record <TAB> Java hashCode (or -) <TAB> the value's fields as Java reports them
// Regenerate (from the repository root):
//   java -cp "$(ls .venv-flink/lib/python3*/site-packages/pyflink/lib/flink-dist-*.jar)" \
//     tests/corpus/serializers/_flink-edge-values/EdgeValues.java > tests/corpus/serializers/_flink-edge-values/edge-values.tsv
import java.math.BigDecimal;
import java.math.BigInteger;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.HexFormat;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.*;
import org.apache.flink.core.memory.DataOutputSerializer;

public class EdgeValues {
    static <T> void emit(String name, TypeSerializer<T> serializer, T value, String fields) throws Exception {
        DataOutputSerializer out = new DataOutputSerializer(64);
        serializer.serialize(value, out);
        String hash = value == null ? "-" : Integer.toString(value.hashCode());
        System.out.println(name + "\t" + HexFormat.of().formatHex(out.getCopyOfBuffer()) + "\t" + hash + "\t" + fields);
    }

    static void instant(Instant v) throws Exception {
        emit("Instant", InstantSerializer.INSTANCE, v, v.getEpochSecond() + " " + v.getNano());
    }

    static void localDateTime(LocalDateTime v) throws Exception {
        emit("LocalDateTime", LocalDateTimeSerializer.INSTANCE, v, v.getYear() + " " + v.getMonthValue() + " "
                + v.getDayOfMonth() + " " + v.getHour() + " " + v.getMinute() + " " + v.getSecond() + " " + v.getNano());
    }

    static void localTime(LocalTime v) throws Exception {
        emit("LocalTime", LocalTimeSerializer.INSTANCE, v, v.getHour() + " " + v.getMinute() + " " + v.getSecond()
                + " " + v.getNano());
    }

    static void localDate(LocalDate v) throws Exception {
        emit("LocalDate", LocalDateSerializer.INSTANCE, v, v.getYear() + " " + v.getMonthValue() + " " + v.getDayOfMonth());
    }

    static void timestamp(Timestamp v) throws Exception {
        emit("SqlTimestamp", SqlTimestampSerializer.INSTANCE, v, v.getTime() + " " + v.getNanos());
    }

    public static void main(String[] args) throws Exception {
        instant(Instant.ofEpochSecond(1714558500L, 999_999_999));
        instant(Instant.ofEpochSecond(-1L, 1));
        instant(Instant.MIN);
        instant(Instant.MAX);
        emit("Instant", InstantSerializer.INSTANCE, null, "null");
        localDateTime(LocalDateTime.of(2024, 5, 1, 10, 15, 0, 123_456_789));
        localDateTime(LocalDateTime.MIN);
        localDateTime(LocalDateTime.MAX);
        emit("LocalDateTime", LocalDateTimeSerializer.INSTANCE, null, "null");
        localTime(LocalTime.of(10, 15, 0, 1));
        localTime(LocalTime.MAX);
        emit("LocalTime", LocalTimeSerializer.INSTANCE, null, "null");
        localDate(LocalDate.of(-4, 2, 29));
        localDate(LocalDate.MIN);
        localDate(LocalDate.MAX);
        emit("LocalDate", LocalDateSerializer.INSTANCE, null, "null");
        Timestamp t = new Timestamp(-1L);
        t.setNanos(999_000_001);
        timestamp(t);
        timestamp(Timestamp.from(Instant.ofEpochSecond(1714558500L, 123_456_789)));
        timestamp(new Timestamp(Long.MAX_VALUE));
        emit("SqlTimestamp", SqlTimestampSerializer.INSTANCE, null, "null");
        emit("Date", DateSerializer.INSTANCE, new java.util.Date(Long.MAX_VALUE), Long.toString(Long.MAX_VALUE));
        emit("Date", DateSerializer.INSTANCE, new java.util.Date(-1L), "-1");
        emit("SqlDate", SqlDateSerializer.INSTANCE, new java.sql.Date(-86_400_000L), "-86400000");
        emit("SqlTime", SqlTimeSerializer.INSTANCE, new java.sql.Time(3_723_004L), "3723004");
        BigDecimal big = new BigDecimal("123456789012345678901234567890123456789012345678901234567890.123456789");
        emit("BigDec", BigDecSerializer.INSTANCE, big, big.toString());
        emit("BigDec", BigDecSerializer.INSTANCE, BigDecimal.ZERO, "0");
        emit("BigDec", BigDecSerializer.INSTANCE, new BigDecimal("0.00"), "0.00");
        emit("BigDec", BigDecSerializer.INSTANCE, BigDecimal.valueOf(10), "10");
        emit("BigDec", BigDecSerializer.INSTANCE, new BigDecimal(new BigInteger("10"), 1), "1.0");
        emit("BigDec", BigDecSerializer.INSTANCE, new BigDecimal("-1E+5"), "-1E+5");
        emit("BigInt", BigIntSerializer.INSTANCE, BigInteger.ZERO, "0");
        emit("BigInt", BigIntSerializer.INSTANCE, BigInteger.valueOf(1), "1");
        emit("BigInt", BigIntSerializer.INSTANCE, new BigInteger("10"), "10");
        emit("BigInt", BigIntSerializer.INSTANCE, BigInteger.valueOf(Long.MIN_VALUE), Long.toString(Long.MIN_VALUE));
        emit("BigInt", BigIntSerializer.INSTANCE, BigInteger.TWO.pow(64).negate(), BigInteger.TWO.pow(64).negate().toString());
        emit("Long", LongSerializer.INSTANCE, Long.MIN_VALUE, Long.toString(Long.MIN_VALUE));
        emit("Int", IntSerializer.INSTANCE, Integer.MIN_VALUE, Integer.toString(Integer.MIN_VALUE));
        emit("Double", DoubleSerializer.INSTANCE, Double.NaN, "NaN");
        emit("Double", DoubleSerializer.INSTANCE, Double.longBitsToDouble(0xfff8000000000001L), "NaN");
        emit("Double", DoubleSerializer.INSTANCE, -0.0, "-0.0");
        emit("Float", FloatSerializer.INSTANCE, Float.intBitsToFloat(0xffc00001), "NaN");
        emit("Float", FloatSerializer.INSTANCE, -0.0f, "-0.0");
        emit("String", StringSerializer.INSTANCE, "a\uD83D\uDE00b", "a\\uD83D\\uDE00b");
        emit("String", StringSerializer.INSTANCE, "\uDC00x\uD800", "\\uDC00x\\uD800");
        emit("String", StringSerializer.INSTANCE, null, "null");
        emit("Char", CharSerializer.INSTANCE, '\uD800', "\\uD800");
    }
}
