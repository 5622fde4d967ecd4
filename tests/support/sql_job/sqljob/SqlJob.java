package sqljob;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.PlanReference;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * A SQL job whose state flinkstate's tests read value by value (tests/support/sql_job.py recomputes it; keep the
 * two in step).
 *
 * <p>Source: {@code datagen} emitting the sequence 0, 1, 2, ... at parallelism 1 and a fixed rate, so that what was
 * processed before a savepoint is the prefix 0..N-1 (the sequence generator keeps the values still to emit in its
 * operator state, so a restored job continues from N). Every other column is a pure function of {@code id}.
 *
 * <p>Queries (one StatementSet, blackhole sinks):
 * <ul>
 *   <li>{@code agg}: GROUP BY a string key with COUNT, SUM, MAX, MIN, AVG over BIGINT, DECIMAL(10, 2), TIMESTAMP(3),
 *       TIMESTAMP(6), TIMESTAMP_LTZ(3) and TIMESTAMP(9);</li>
 *   <li>{@code agg_scaled}: the same aggregate over the amount as DECIMAL(12, 3), i.e. what a changed query's
 *       accumulators look like (the tests use its type to edit the manifest);</li>
 *   <li>{@code dedup}: keep the last row per key (ROW_NUMBER over proctime DESC = 1), which stores whole rows;</li>
 *   <li>{@code pairs}: a regular join of each row with the row before it ({@code a.id = b.id + 1}), which keeps every
 *       row of both sides (no unique key: MapState of row -> count);</li>
 *   <li>{@code bitmaps}: {@code BITMAP_BUILD_AGG} of the ids per d (a BITMAP accumulator);</li>
 *   <li>{@code retracting}: a GROUP BY over an updating input (the last row per {@code r = id % 20}, grouped by
 *       {@code p = r % 2}: every row retracts the one before it of its r) with MAX, MIN, FIRST_VALUE, LAST_VALUE,
 *       LISTAGG (with and without a separator) and ARRAY_AGG, whose retracting accumulators hold MapViews, ListViews
 *       and LinkedLists (their logical types hold {@code List.of(...)}: ImmutableCollections' serial form);</li>
 *   <li>{@code recent}: an OVER window with MAX over the last rows per d (retracting: a MapView of value -&gt;
 *       count).</li>
 * </ul>
 *
 * <p>Stable operator uids: the planner's uids ("&lt;exec node id&gt;_&lt;transformation&gt;") take the node ids from a
 * JVM-wide counter, so a job compiled in a JobManager that compiled other plans before gets other uids (and cannot
 * restore its own savepoint). The plan is therefore compiled once at build time ({@code --compile FILE}, a fresh JVM:
 * ids from 1) and shipped in the jar as {@code sqljob/plan.json}; the job executes that plan, whose uids are fixed.
 *
 * <p>{@code --job variant} runs another job instead: the last row per d with a VARIANT column ({@code PARSE_JSON} of
 * {"id": id, "k": k}), as SQL (a compiled plan cannot hold a VARIANT expression).
 *
 * <p>{@code --job window --window-seconds S} runs a third job: a window TVF aggregate (COUNT per k over a processing
 * time TUMBLE of S seconds), whose state is held by slice end: what a changed window size misreads.
 *
 * <p>Arguments: {@code --compile FILE} (with {@code --rate ROWS_PER_SECOND}, {@code --end LAST_ID}: write the plan and
 * exit); otherwise {@code --set key=value} (repeatable: any Flink option, e.g. {@code state.backend.type=rocksdb}).
 */
public final class SqlJob {
    /** Groups of the aggregates and of the deduplication: ids are keyed by id % GROUPS and id % DEDUP_KEYS. */
    static final int GROUPS = 7;
    static final int DEDUP_KEYS = 5;
    /** The updating input of {@code retracting}: the last row per {@code r = id % LATEST_KEYS}. */
    static final int LATEST_KEYS = 20;
    /** The OVER window's rows: the current one and those before it. */
    static final int RECENT_ROWS = 6;

    private SqlJob() {}

    public static void main(String[] args) throws IOException {
        Map<String, String> options = new HashMap<>();
        Map<String, String> flinkConf = new HashMap<>();
        flinkConf.put("parallelism.default", "1");
        for (int i = 0; i < args.length; i += 2) {
            String name = args[i];
            String value = args[i + 1];
            if (name.equals("--set")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--set expects key=value, got: " + value);
                }
                flinkConf.put(value.substring(0, eq), value.substring(eq + 1));
            } else {
                options.put(name.replaceFirst("^--", ""), value);
            }
        }
        // A name of its own: Flink's default for a statement set ("insert-into_" and every sink's full name) runs
        // past 255 characters with this many sinks, too long for a file name (the upgrade journal is named after it).
        flinkConf.putIfAbsent("pipeline.name", options.containsKey("job") ? "sql-job-" + options.get("job") : "sql-job");
        String rate = options.getOrDefault("rate", "200");
        String end = options.getOrDefault("end", "29999");

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(flinkConf));
        StreamTableEnvironment tEnv =
                StreamTableEnvironment.create(env, EnvironmentSettings.newInstance().inStreamingMode().build());
        // CAST(TIMESTAMP_LTZ AS TIMESTAMP) depends on the session time zone: UTC makes it a function of id.
        tEnv.getConfig().set("table.local-time-zone", "UTC");
        String compile = options.get("compile");
        boolean variantJob = "variant".equals(options.get("job"));
        boolean windowJob = "window".equals(options.get("job"));
        if (compile == null && !variantJob && !windowJob) {
            tEnv.executePlan(PlanReference.fromJsonString(planJson()));
            return;
        }

        // Catalog tables, not temporary ones: the compiled plan persists a catalog table's options (rate, end, sinks).
        tEnv.executeSql("CREATE TABLE seq (id BIGINT NOT NULL, proc AS PROCTIME()) WITH ("
                + "'connector' = 'datagen', 'fields.id.kind' = 'sequence', 'fields.id.start' = '0', "
                + "'fields.id.end' = '" + end + "', 'rows-per-second' = '" + rate + "')");
        // Derived columns: amount = id / 4 exactly; ltz = 2023-11-14T22:13:20Z + id * 1001 ms.
        tEnv.executeSql("CREATE TEMPORARY VIEW events AS SELECT id, proc, "
                + "CONCAT('k', CAST(MOD(id, " + GROUPS + ") AS STRING)) AS k, "
                + "CAST(MOD(id, " + DEDUP_KEYS + ") AS INT) AS d, "
                + "CAST(id * 0.25 AS DECIMAL(10, 2)) AS amount, "
                + "TO_TIMESTAMP_LTZ(1700000000000 + id * 1001, 3) AS ltz, "
                + "CAST(TO_TIMESTAMP_LTZ(1700000000000 + id * 1001, 3) AS TIMESTAMP(3)) AS ts, "
                + "CAST(TO_TIMESTAMP_LTZ(1700000000000 + id * 1001, 3) AS TIMESTAMP(6)) AS ts6, "
                // 2024-01-01T00:00 plus id nanoseconds: sub-millisecond digits in the non-compact TIMESTAMP layout
                + "CAST(CONCAT('2024-01-01 00:00:00.', LPAD(CAST(id AS STRING), 9, '0')) AS TIMESTAMP(9)) AS ts9 "
                + "FROM seq");
        if (windowJob) {
            tEnv.executeSql("CREATE TABLE window_sink (k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
                    + "n BIGINT) WITH ('connector' = 'blackhole')");
            tEnv.executeSql("INSERT INTO window_sink SELECT k, window_start, window_end, COUNT(*) FROM TABLE(TUMBLE("
                    + "TABLE events, DESCRIPTOR(proc), INTERVAL '" + Integer.parseInt(options.get("window-seconds"))
                    + "' SECOND)) GROUP BY k, window_start, window_end");
            return;
        }
        if (variantJob) {
            // A compiled plan cannot hold a VARIANT expression (Flink 2.3's plan serializer: "Unsupported
            // RelDataType: VARIANT"), so this query runs as SQL in a job of its own (its uids are not stable: the
            // tests find its operator by name). Its deduplicated rows hold PARSE_JSON of {"id": id, "k": k}.
            tEnv.executeSql("CREATE TABLE docs_sink (d INT, id BIGINT, doc VARIANT) WITH ('connector' = 'blackhole')");
            tEnv.executeSql("INSERT INTO docs_sink SELECT d, id, doc FROM (SELECT d, id, PARSE_JSON(CONCAT("
                    + "'{\"id\": ', CAST(id AS STRING), ', \"k\": \"', k, '\"}')) AS doc, ROW_NUMBER() OVER ("
                    + "PARTITION BY d ORDER BY proc DESC) AS rn FROM events) WHERE rn = 1");
            return;
        }
        String aggColumns = "k STRING, cnt BIGINT, total BIGINT, max_id BIGINT, min_id BIGINT, avg_id BIGINT, "
                + "amount_sum DECIMAL(38, %1$d), amount_max DECIMAL(%2$d, %1$d), ts_max TIMESTAMP(3), "
                + "ts_min TIMESTAMP(3), ts6_max TIMESTAMP(6), ltz_max TIMESTAMP_LTZ(3), ts9_max TIMESTAMP(9)";
        tEnv.executeSql("CREATE TABLE agg_sink (" + String.format(aggColumns, 2, 10)
                + ") WITH ('connector' = 'blackhole')");
        tEnv.executeSql("CREATE TABLE agg_scaled_sink (" + String.format(aggColumns, 3, 12)
                + ") WITH ('connector' = 'blackhole')");
        tEnv.executeSql("CREATE TABLE dedup_sink (d INT, id BIGINT, k STRING, amount DECIMAL(10, 2), "
                + "ts TIMESTAMP(3), ltz TIMESTAMP_LTZ(3)) WITH ('connector' = 'blackhole')");

        tEnv.executeSql("CREATE TABLE pairs_sink (id BIGINT, k STRING, previous BIGINT, previous_ltz TIMESTAMP_LTZ(3)) "
                + "WITH ('connector' = 'blackhole')");

        // Flink 2.x's semi-structured and bitmap types in state: a deduplicated row holding a VARIANT, and
        // BITMAP_BUILD_AGG's accumulator (appended last, so the uids of the queries above stay as they were).
        tEnv.executeSql("CREATE TABLE bitmaps_sink (d INT, ids BITMAP) WITH ('connector' = 'blackhole')");

        tEnv.executeSql("CREATE TABLE retracting_sink (p INT, max_id BIGINT, min_k STRING, first_ts TIMESTAMP(3), "
                + "last_amount DECIMAL(10, 2), ids STRING, ks STRING, id_array ARRAY<BIGINT>) "
                + "WITH ('connector' = 'blackhole')");
        tEnv.executeSql("CREATE TABLE recent_sink (d INT, id BIGINT, recent_max BIGINT) "
                + "WITH ('connector' = 'blackhole')");

        String aggregate = "SELECT k, COUNT(*), SUM(id), MAX(id), MIN(id), AVG(id), SUM(a), MAX(a), MAX(ts), MIN(ts), "
                + "MAX(ts6), MAX(ltz), MAX(ts9) FROM (SELECT k, id, ts, ts6, ltz, ts9, %s AS a FROM events) GROUP BY k";
        StatementSet statements = tEnv.createStatementSet();
        statements.addInsertSql("INSERT INTO agg_sink " + String.format(aggregate, "amount"));
        statements.addInsertSql("INSERT INTO agg_scaled_sink "
                + String.format(aggregate, "CAST(amount AS DECIMAL(12, 3))"));
        statements.addInsertSql("INSERT INTO dedup_sink SELECT d, id, k, amount, ts, ltz FROM ("
                + "SELECT *, ROW_NUMBER() OVER (PARTITION BY d ORDER BY proc DESC) AS rn FROM events) WHERE rn = 1");
        statements.addInsertSql("INSERT INTO pairs_sink SELECT a.id, a.k, b.id, b.ltz FROM events a JOIN events b "
                + "ON a.id = b.id + 1");
        statements.addInsertSql("INSERT INTO bitmaps_sink SELECT d, BITMAP_BUILD_AGG(CAST(id AS INT)) FROM events "
                + "GROUP BY d");
        // Appended last, like bitmaps: the uids of the queries above stay as they were.
        statements.addInsertSql("INSERT INTO retracting_sink SELECT MOD(r, 2) AS p, MAX(id), MIN(k), FIRST_VALUE(ts), "
                + "LAST_VALUE(amount), LISTAGG(CAST(id AS STRING)), LISTAGG(k, ';'), ARRAY_AGG(id) FROM ("
                + "SELECT id, k, ts, amount, r, ROW_NUMBER() OVER (PARTITION BY r ORDER BY proc DESC) AS rn FROM ("
                + "SELECT id, proc, k, ts, amount, CAST(MOD(id, " + LATEST_KEYS + ") AS INT) AS r FROM events)) WHERE rn = 1 "
                + "GROUP BY MOD(r, 2)");
        statements.addInsertSql("INSERT INTO recent_sink SELECT d, id, MAX(id) OVER (PARTITION BY d ORDER BY proc "
                + "ROWS BETWEEN " + (RECENT_ROWS - 1) + " PRECEDING AND CURRENT ROW) FROM events");
        statements.compilePlan().writeToFile(compile);
    }

    private static String planJson() throws IOException {
        try (InputStream in = SqlJob.class.getResourceAsStream("plan.json")) {
            if (in == null) {
                throw new IllegalStateException("sqljob/plan.json is missing from the jar: build it with --compile");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }
}
