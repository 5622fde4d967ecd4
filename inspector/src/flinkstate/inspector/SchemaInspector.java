package flinkstate.inspector;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializer;
import org.apache.flink.api.dag.Pipeline;
import org.apache.flink.client.program.PackagedProgram;
import org.apache.flink.client.program.PackagedProgramUtils;
import org.apache.flink.client.program.ProgramInvocationException;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.OperatorIDPair;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamNode;

import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The state schema of a job jar, as Flink will see it, without running the job.
 *
 * <p>{@code SchemaInspector --jar JAR --out FILE [--entry-class CLASS] [--parallelism N] [-- PROGRAM ARGS...]}
 *
 * <p>Runs the job's {@code main()} the way {@code flink run} builds a job without executing it (Flink's own
 * {@link PackagedProgramUtils#getPipelineFromProgram}: a context environment whose {@code execute()} captures the
 * StreamGraph and aborts the program), turns the StreamGraph into the JobGraph Flink would submit (operator ids: the
 * uids' hashes, and the generated hashes of uid-less operators), then opens every operator of it in isolation with
 * empty state ({@link OperatorProbe}) and snapshots it as a canonical savepoint with Flink's own classes. Nothing is
 * submitted, no record is read or written, no timer fires.
 *
 * <p>The output file (big-endian, {@link DataOutputStream}): the magic {@code flinkstate-jar-schema}, format version
 * 2, the Flink version, the job name, then per operator its id (32 hex), uid (empty: none), name, class, whether it
 * was opened (sources are only initialized: their open() starts reading), its window ({@link WindowSpec}, empty:
 * none), and the bytes of its keyed state stream
 * (starting with the {@code KeyedBackendSerializationProxy}) and of its operator state stream (starting with the
 * {@code OperatorBackendSerializationProxy}), each an int length then the bytes (0: the operator wrote none);
 * after the operators, the Kryo layouts of the jar's own classes ({@link KryoLayouts}: JSON, an int length then UTF-8),
 * as this Flink's KryoSerializer for the job's config sees them.
 *
 * <p>Errors: one line on stderr starting with {@code flinkstate-inspector: }, exit status 2 when the job's main()
 * failed (the job's own exception), 3 when an operator could not be opened, 1 otherwise.
 */
public final class SchemaInspector {

    static final String MAGIC = "flinkstate-jar-schema";
    static final int FORMAT_VERSION = 3;
    static final int EXIT_ERROR = 1;
    static final int EXIT_MAIN_FAILED = 2;
    static final int EXIT_OPERATOR_FAILED = 3;

    /** A failure to report in one line, with the exit status it gets. */
    static final class Failure extends Exception {
        final int status;

        Failure(int status, String message) {
            super(message);
            this.status = status;
        }
    }

    private SchemaInspector() {}

    public static void main(String[] args) {
        int status;
        try {
            run(args);
            status = 0;
        } catch (Failure failure) {
            System.err.println("flinkstate-inspector: " + oneLine(failure.getMessage()));
            status = failure.status;
        } catch (Throwable unexpected) {
            System.err.println("flinkstate-inspector: " + oneLine(describe(unexpected)));
            status = EXIT_ERROR;
        }
        System.err.flush();
        // The job's code may have started threads (a client, a timer) that would keep the JVM alive.
        Runtime.getRuntime().halt(status);
    }

    private static void run(String[] args) throws Exception {
        String jar = null;
        String out = null;
        String entryClass = null;
        int parallelism = 1;
        String trialSavepoint = null;  // --trial: Flink's own restore of this savepoint (TrialRestore)
        String keyGroups = "one";
        String backendChoice = "job";
        String[] programArgs = new String[0];
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (arg.equals("--")) {
                programArgs = Arrays.copyOfRange(args, i + 1, args.length);
                break;
            }
            if (i + 1 >= args.length) {
                throw new Failure(EXIT_ERROR, "usage: " + arg + " needs a value");
            }
            String value = args[++i];
            switch (arg) {
                case "--jar": jar = value; break;
                case "--out": out = value; break;
                case "--entry-class": entryClass = value; break;
                case "--parallelism": parallelism = Integer.parseInt(value); break;
                case "--trial": trialSavepoint = value; break;
                case "--key-groups": keyGroups = value; break;
                case "--backend": backendChoice = value; break;
                default: throw new Failure(EXIT_ERROR, "usage: unknown option " + arg);
            }
        }
        if (jar == null || out == null) {
            throw new Failure(EXIT_ERROR, "usage: --jar JAR --out FILE [--entry-class CLASS] [--parallelism N]"
                    + " [--trial SAVEPOINT [--key-groups one|all] [--backend job|hashmap|rocksdb]]"
                    + " [-- PROGRAM ARGS...]");
        }
        if (!keyGroups.equals("one") && !keyGroups.equals("all")) {
            throw new Failure(EXIT_ERROR, "usage: --key-groups one|all, not " + keyGroups);
        }

        PackagedProgram.Builder builder = PackagedProgram.newBuilder()
                .setJarFile(new File(jar))
                .setArguments(programArgs)
                .setConfiguration(new Configuration());
        if (entryClass != null) {
            builder.setEntryPointClassName(entryClass);
        }
        PackagedProgram program;
        try {
            program = builder.build();
        } catch (ProgramInvocationException e) {
            throw new Failure(EXIT_ERROR, jar + ": " + describe(e));
        }
        ClassLoader userClassLoader = program.getUserCodeClassLoader();
        String mainClass = program.getMainClassName();

        Pipeline pipeline;
        try {
            pipeline = PackagedProgramUtils.getPipelineFromProgram(program, new Configuration(), parallelism, true);
        } catch (ProgramInvocationException e) {
            throw new Failure(EXIT_MAIN_FAILED, "main() of " + mainClass + " failed: " + describe(jobCause(e)));
        } catch (Throwable e) {  // an Error thrown by main() (NoClassDefFoundError, ...) is the job's too
            throw new Failure(EXIT_MAIN_FAILED, "main() of " + mainClass + " failed: " + describe(jobCause(e)));
        }
        if (!(pipeline instanceof StreamGraph)) {
            throw new Failure(EXIT_ERROR, "main() of " + mainClass + " built a " + pipeline.getClass().getName()
                    + ", not a streaming job (StreamGraph)");
        }
        StreamGraph streamGraph = (StreamGraph) pipeline;

        Thread.currentThread().setContextClassLoader(userClassLoader);
        JobGraph jobGraph = streamGraph.getJobGraph(userClassLoader, null);  // (ClassLoader, JobID): 1.20 and 2.x
        ExecutionConfig executionConfig = jobGraph.getSerializedExecutionConfig().deserializeValue(userClassLoader);

        List<OperatorProbe.Result> results = new ArrayList<>();
        TrialRestore trial = null;
        List<TrialRestore.Result> trials = new ArrayList<>();
        if (trialSavepoint != null) {
            JobVertex first = jobGraph.getVerticesSortedTopologicallyFromSources().get(0);
            try {
                trial = new TrialRestore(new File(trialSavepoint), userClassLoader, keyGroups.equals("all"),
                        backendChoice, new StreamConfig(first.getConfiguration()), jobGraph.getJobConfiguration(),
                        executionConfig);
            } catch (java.io.IOException e) {
                throw new Failure(EXIT_ERROR, trialSavepoint + ": Flink cannot load the savepoint's metadata: "
                        + describe(e));
            }
        }
        for (JobVertex vertex : jobGraph.getVerticesSortedTopologicallyFromSources()) {
            StreamConfig head = new StreamConfig(vertex.getConfiguration());
            // by stream node id: the order the job defined its operators in
            Map<Integer, StreamConfig> chain = new TreeMap<>(head.getTransitiveChainedTaskConfigsWithSelf(userClassLoader));
            for (StreamConfig config : chain.values()) {
                StreamNode node = streamGraph.getStreamNode(config.getVertexID());
                OperatorID operatorId = restoredId(vertex, config.getOperatorID());
                String uid = node == null ? null : node.getTransformationUID();
                OperatorProbe probe = new OperatorProbe(jobGraph, vertex, config, executionConfig, userClassLoader,
                        parallelism);
                if (trial != null) {
                    if (trial.hasState(operatorId)) {
                        trials.add(trial.trial(probe, operatorId, uid, config.getOperatorName()));
                    }
                    continue;
                }
                try {
                    results.add(probe.inspect(operatorId, uid));
                } catch (Throwable e) {
                    throw new Failure(EXIT_OPERATOR_FAILED, "operator " + label(uid, operatorId, config)
                            + " could not be opened with empty state: " + describe(jobCause(e)));
                }
            }
        }
        if (trial != null) {
            writeTrial(Path.of(out), trial, trials);
            return;
        }
        String layouts;
        try {
            layouts = KryoLayouts.layoutsJson(
                    new KryoSerializer<>(Object.class, executionConfig.getSerializerConfig()).getKryo(),
                    KryoLayouts.jarClasses(new File(jar), userClassLoader));
        } catch (Exception | LinkageError e) {
            // the job's Kryo configuration cannot be built here (a registered serializer failing outside the job):
            // no layouts, so its user classes' Kryo records are refused where a migration meets them
            layouts = "[]";
        }
        write(Path.of(out), jobGraph.getName(), results, layouts);
    }

    private static void writeTrial(Path out, TrialRestore trial, List<TrialRestore.Result> results) throws Exception {
        Path tmp = Files.createTempFile(out.toAbsolutePath().getParent(), ".inspector", ".tmp");
        try (DataOutputStream data = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(tmp.toFile())))) {
            trial.write(data, EnvironmentInformation.getVersion(), results);
        }
        Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    /**
     * The id Flink restores the operator's state from: the user-given hash ({@code setUidHash}) when there is one,
     * else the generated one (the uid's hash, or the graph-derived hash of a uid-less operator).
     */
    private static OperatorID restoredId(JobVertex vertex, OperatorID generated) {
        for (OperatorIDPair pair : vertex.getOperatorIDs()) {
            if (pair.getGeneratedOperatorID().equals(generated)) {
                return pair.getUserDefinedOperatorID().orElse(generated);
            }
        }
        return generated;
    }

    private static String label(String uid, OperatorID id, StreamConfig config) {
        return (uid != null ? "'" + uid + "'" : "'" + config.getOperatorName() + "'") + " (id " + id + ")";
    }

    private static void write(Path out, String jobName, List<OperatorProbe.Result> results, String layouts)
            throws Exception {
        Path tmp = Files.createTempFile(out.toAbsolutePath().getParent(), ".inspector", ".tmp");
        try (DataOutputStream data = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(tmp.toFile())))) {
            data.writeUTF(MAGIC);
            data.writeInt(FORMAT_VERSION);
            data.writeUTF(EnvironmentInformation.getVersion());
            data.writeUTF(jobName == null ? "" : jobName);
            data.writeInt(results.size());
            for (OperatorProbe.Result result : results) {
                data.writeUTF(result.operatorId.toHexString());
                data.writeUTF(result.uid == null ? "" : result.uid);
                data.writeUTF(result.name == null ? "" : result.name);
                data.writeUTF(result.operatorClass);
                data.writeBoolean(result.opened);
                data.writeUTF(result.window);
                writeBytes(data, result.keyedState);
                writeBytes(data, result.operatorState);
            }
            writeBytes(data, layouts.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        }
        Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    private static void writeBytes(DataOutputStream data, byte[] bytes) throws Exception {
        data.writeInt(bytes == null ? 0 : bytes.length);
        if (bytes != null) {
            data.write(bytes);
        }
    }

    /** The job's own exception: the innermost cause below Flink's and reflection's wrappers. */
    static Throwable jobCause(Throwable e) {
        Throwable current = e;
        while (current.getCause() != null && current.getCause() != current
                && (current instanceof ProgramInvocationException
                        || current instanceof InvocationTargetException
                        || current.getClass().getName().startsWith("org.apache.flink.util.FlinkRuntimeException")
                        || current.getClass().getName().equals("java.util.concurrent.ExecutionException")
                        || current.getClass().getName().equals("org.apache.flink.util.WrappingRuntimeException"))) {
            current = current.getCause();
        }
        return current;
    }

    static String describe(Throwable e) {
        String message = e.getMessage();
        StringBuilder text = new StringBuilder(e.getClass().getName());
        if (message != null && !message.isEmpty()) {
            text.append(": ").append(message);
        }
        Throwable cause = e.getCause();
        if (cause != null && cause != e && cause.getMessage() != null && (message == null
                || !message.contains(cause.getMessage()))) {
            text.append(" (caused by ").append(cause.getClass().getName()).append(": ")
                    .append(cause.getMessage()).append(')');
        }
        return text.toString();
    }

    static String oneLine(String text) {
        String line = text == null ? "" : text.replaceAll("\\s*[\\r\\n]+\\s*", " ").trim();
        return line.length() > 2000 ? line.substring(0, 2000) + "..." : line;
    }
}
