package flinkstate.inspector;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobInfoImpl;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.accumulators.AccumulatorRegistry;
import org.apache.flink.runtime.broadcast.BroadcastVariableManager;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.InflightDataRescalingDescriptor;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.SavepointType;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.executiongraph.ExecutionAttemptID;
import org.apache.flink.runtime.externalresource.ExternalResourceInfoProvider;
import org.apache.flink.runtime.io.disk.iomanager.IOManagerAsync;
import org.apache.flink.runtime.io.network.api.writer.ResultPartitionWriter;
import org.apache.flink.runtime.io.network.partition.consumer.IndexedInputGate;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobType;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.jobgraph.tasks.TaskOperatorEventGateway;
import org.apache.flink.runtime.memory.MemoryManager;
import org.apache.flink.runtime.memory.SharedResources;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.runtime.query.KvStateRegistry;
import org.apache.flink.runtime.state.CheckpointStorageLocationReference;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyedStateBackend;
import org.apache.flink.runtime.state.OperatorStateBackend;
import org.apache.flink.runtime.state.LocalRecoveryConfig;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.StateObject;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.TaskStateManager;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.runtime.state.memory.MemCheckpointStreamFactory;
import org.apache.flink.runtime.taskmanager.TaskManagerRuntimeInfo;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.StreamOperatorStateHandler;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.SourceOperator;
import org.apache.flink.streaming.api.operators.StreamOperator;
import org.apache.flink.streaming.api.operators.StreamOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperatorFactoryUtil;
import org.apache.flink.streaming.api.operators.StreamTaskStateInitializerImpl;
import org.apache.flink.streaming.runtime.tasks.OperatorEventDispatcherImpl;
import org.apache.flink.streaming.runtime.tasks.StreamTask;
import org.apache.flink.util.SimpleUserCodeClassLoader;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.file.Files;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.RunnableFuture;

/**
 * Opens one operator of a job in isolation, as Flink's operator test harnesses do (they are not in Flink's
 * distribution; this is the small part of them that registering state takes): a task environment holding the job's
 * ExecutionConfig and configuration, a containing {@link StreamTask} that runs nothing, the operator created by its
 * own factory from the {@link StreamConfig} of the JobGraph, its state initialized empty on a HashMap keyed backend
 * (the key serializer is the one in that StreamConfig) and then opened, so that every state it registers in
 * initializeState() or open() is registered. Then a canonical savepoint of it is taken with Flink's own snapshot
 * code into memory, and the bytes of its keyed and operator state streams are returned.
 */
final class OperatorProbe {

    /** What one operator registered: its state streams' bytes (null: none written). */
    static final class Result {
        final OperatorID operatorId;
        final String uid;
        final String name;
        final String operatorClass;
        final boolean opened;
        /** The window it assigns records to ({@link WindowSpec}), "" when none. */
        final String window;
        final byte[] keyedState;
        final byte[] operatorState;

        Result(OperatorID operatorId, String uid, String name, String operatorClass, boolean opened, String window,
               byte[] keyedState, byte[] operatorState) {
            this.operatorId = operatorId;
            this.uid = uid;
            this.name = name;
            this.operatorClass = operatorClass;
            this.opened = opened;
            this.window = window;
            this.keyedState = keyedState;
            this.operatorState = operatorState;
        }
    }

    private static final long CHECKPOINT_ID = 1L;
    /** Managed memory for operators that ask for it (none of the HashMap backend's state needs any). */
    private static final long MANAGED_MEMORY = 32L << 20;

    private final JobGraph jobGraph;
    private final JobVertex vertex;
    private final StreamConfig config;
    private final ExecutionConfig executionConfig;
    private final ClassLoader userClassLoader;
    private final int defaultParallelism;
    private final Map<String, Object> environmentSlots = new HashMap<>();
    private PrioritizedOperatorSubtaskState restoreState = PrioritizedOperatorSubtaskState.emptyNotRestored();
    private long restoreCheckpointId = -1;
    private int restoredMaxParallelism = -1;

    OperatorProbe(JobGraph jobGraph, JobVertex vertex, StreamConfig config, ExecutionConfig executionConfig,
                  ClassLoader userClassLoader, int defaultParallelism) {
        this.jobGraph = jobGraph;
        this.vertex = vertex;
        this.config = config;
        this.executionConfig = executionConfig;
        this.userClassLoader = userClassLoader;
        this.defaultParallelism = defaultParallelism;
    }

    /**
     * Makes the probe's subtask restore ``state`` (its TaskStateManager hands it to the operator's state
     * initialization, as a TaskManager hands a savepoint's), with the savepoint's max parallelism: the trial restore
     * ({@link TrialRestore}). Without it, every operator starts from empty state.
     */
    OperatorProbe restoring(PrioritizedOperatorSubtaskState state, long checkpointId, int maxParallelism) {
        this.restoreState = state;
        this.restoreCheckpointId = checkpointId;
        this.restoredMaxParallelism = maxParallelism;
        return this;
    }

    /** The operator, created by its own factory inside a task that runs nothing; its state not yet initialized. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    StreamOperator<Object> createOperator(Environment environment) throws Exception {
        ProbeTask task = new ProbeTask(environment);
        StreamOperatorFactory<Object> factory = config.getStreamOperatorFactory(userClassLoader);
        Output<Object> output = nothing(Output.class);
        OperatorEventDispatcherImpl dispatcher =
                new OperatorEventDispatcherImpl(userClassLoader, nothing(TaskOperatorEventGateway.class));
        return (StreamOperator<Object>) StreamOperatorFactoryUtil.createOperator(
                factory, (StreamTask) task, config, (Output) output, dispatcher).f0;
    }

    Result inspect(OperatorID operatorId, String uid) throws Exception {
        Environment environment = environment();
        StreamOperator<Object> operator = createOperator(environment);
        operator.initializeState(new StreamTaskStateInitializerImpl(environment, new HashMapStateBackend()));
        // A source's open() starts reading (and registers with its coordinator): its state is registered in
        // initializeState() already, so it is not opened.
        boolean opened = !(operator instanceof SourceOperator);
        if (opened) {
            operator.open();
        }
        // The snapshot Flink takes of the operator's backends for a canonical savepoint, without the operator's own
        // snapshotState() (user code that would write the values, of which there are none).
        CheckpointOptions options = new CheckpointOptions(
                SavepointType.savepoint(SavepointFormatType.CANONICAL), CheckpointStorageLocationReference.getDefault());
        MemCheckpointStreamFactory memory = new MemCheckpointStreamFactory(Integer.MAX_VALUE);
        long timestamp = System.currentTimeMillis();
        KeyedStateBackend<?> keyedBackend = backend(operator, "getKeyedStateBackend", KeyedStateBackend.class);
        byte[] keyed = null;
        if (keyedBackend != null) {
            keyed = streamBytes(StreamOperatorStateHandler
                    .prepareCanonicalSavepoint((CheckpointableKeyedStateBackend<?>) keyedBackend, new CloseableRegistry())
                    .snapshot(CHECKPOINT_ID, timestamp, memory, options));
        }
        OperatorStateBackend operatorBackend =
                backend(operator, "getOperatorStateBackend", OperatorStateBackend.class);
        byte[] operatorState = operatorBackend == null ? null
                : streamBytes(operatorBackend.snapshot(CHECKPOINT_ID, timestamp, memory, options));
        return new Result(operatorId, uid, config.getOperatorName(), operator.getClass().getName(), opened,
                WindowSpec.of(operator), keyed, operatorState);
    }

    /** The operator's keyed or operator state backend (both operator base classes have the getter), or null. */
    private static <T> T backend(StreamOperator<?> operator, String getter, Class<T> type) throws Exception {
        for (Class<?> c = operator.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Method method = c.getDeclaredMethod(getter);
                method.setAccessible(true);
                return type.cast(method.invoke(operator));
            } catch (NoSuchMethodException e) {
                // declared further up
            }
        }
        throw new IllegalStateException(operator.getClass().getName() + " has no " + getter + "(): an operator "
                + "that does not extend Flink's AbstractStreamOperator(V2)");
    }

    /** The bytes of the one stream a snapshot wrote (the state handle's delegate), or null when it wrote none. */
    private static byte[] streamBytes(RunnableFuture<? extends SnapshotResult<? extends StateObject>> future)
            throws Exception {
        if (future == null) {
            return null;
        }
        if (!future.isDone()) {
            future.run();
        }
        SnapshotResult<? extends StateObject> result = future.get();
        StateObject handle = result == null ? null : result.getJobManagerOwnedSnapshot();
        if (handle == null) {
            return null;
        }
        StreamStateHandle stream;
        if (handle instanceof KeyGroupsStateHandle) {
            stream = ((KeyGroupsStateHandle) handle).getDelegateStateHandle();
        } else if (handle instanceof OperatorStateHandle) {
            stream = ((OperatorStateHandle) handle).getDelegateStateHandle();
        } else {
            throw new IllegalStateException("unexpected state handle " + handle.getClass().getName());
        }
        try (InputStream in = stream.openInputStream()) {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            in.transferTo(bytes);
            return bytes.toByteArray();
        }
    }

    /** The containing task: runs nothing; the operator only asks it for its environment and services. */
    private static final class ProbeTask extends StreamTask<Object, StreamOperator<Object>> {
        ProbeTask(Environment environment) throws Exception {
            super(environment);
        }

        @Override
        protected void init() {}
    }

    // -- the task environment ----------------------------------------------------------------------------------------

    private int parallelism() {
        return vertex.getParallelism() > 0 ? vertex.getParallelism() : defaultParallelism;
    }

    int maxParallelism() {
        if (restoredMaxParallelism > 0) {
            return restoredMaxParallelism;  // a job restored with no max parallelism set takes the savepoint's
        }
        return vertex.getMaxParallelism() > 0
                ? vertex.getMaxParallelism()
                : KeyGroupRangeAssignment.computeDefaultMaxParallelism(parallelism());
    }

    /**
     * Flink's task {@link Environment} for one subtask of the vertex, as a proxy: the methods an operator's setup,
     * state initialization and open use answer with what a TaskManager would give (the job's configuration and
     * ExecutionConfig, the user class loader, unregistered metrics, no input or output partitions); a method this
     * does not know answers null (or false, 0, an empty Optional), so the same code serves Flink versions whose
     * Environment has more methods.
     */
    Environment environment() throws Exception {
        ExecutionAttemptID attempt = ExecutionAttemptID.randomId();
        File tmp = Files.createTempDirectory("flinkstate-inspector").toFile();
        tmp.deleteOnExit();
        Map<String, Object> answers = new HashMap<>();
        answers.put("getExecutionConfig", executionConfig);
        answers.put("getJobID", jobGraph.getJobID());
        answers.put("getJobType", JobType.STREAMING);
        answers.put("getJobVertexId", vertex.getID());
        answers.put("getExecutionId", attempt);
        // The task's own configuration has no outputs: the containing task writes nowhere.
        answers.put("getTaskConfiguration", new Configuration());
        answers.put("getJobConfiguration", jobGraph.getJobConfiguration());
        answers.put("getJobInfo", new JobInfoImpl(jobGraph.getJobID(), jobGraph.getName()));
        answers.put("getTaskInfo", new TaskInfoImpl(vertex.getName(), maxParallelism(), 0, parallelism(), 0));
        answers.put("getTaskManagerInfo", taskManagerInfo(tmp));
        answers.put("getMetricGroup", UnregisteredMetricGroups.createUnregisteredTaskMetricGroup());
        answers.put("getUserCodeClassLoader", SimpleUserCodeClassLoader.create(userClassLoader));
        // The RocksDB backend restores with the IO manager's executor (the trial restore, TrialRestore)
        answers.put("getIOManager", new IOManagerAsync(tmp.getAbsolutePath()));
        answers.put("getMemoryManager", MemoryManager.create(MANAGED_MEMORY, MemoryManager.DEFAULT_PAGE_SIZE));
        answers.put("getSharedResources", new SharedResources());
        answers.put("getDistributedCacheEntries", Collections.emptyMap());
        answers.put("getBroadcastVariableManager", new BroadcastVariableManager());
        answers.put("getTaskStateManager", taskStateManager());
        answers.put("getExternalResourceInfoProvider", ExternalResourceInfoProvider.NO_EXTERNAL_RESOURCES);
        answers.put("getAccumulatorRegistry", new AccumulatorRegistry(jobGraph.getJobID(), attempt));
        answers.put("getTaskKvStateRegistry",
                new KvStateRegistry().createTaskRegistry(jobGraph.getJobID(), vertex.getID()));
        answers.put("getAllWriters", new ResultPartitionWriter[0]);
        answers.put("getAllInputGates", new IndexedInputGate[0]);
        answers.put("getOperatorCoordinatorEventGateway", nothing(TaskOperatorEventGateway.class));
        InvocationHandler handler = (proxy, method, args) -> {
            String name = method.getName();
            // setX(value) / getX(): what the task hands the environment (mailbox, thread pool, storage access)
            if (name.startsWith("set") && args != null && args.length == 1) {
                environmentSlots.put(name.substring(3), args[0]);
                return null;
            }
            if (name.startsWith("get") && environmentSlots.containsKey(name.substring(3))) {
                return environmentSlots.get(name.substring(3));
            }
            if (name.equals("failExternally") && args != null && args[0] instanceof Throwable) {
                throw new IllegalStateException("the operator failed its task", (Throwable) args[0]);
            }
            if (answers.containsKey(name) && (args == null || args.length == 0)) {
                return answers.get(name);
            }
            return defaultAnswer(method);
        };
        return (Environment) Proxy.newProxyInstance(
                OperatorProbe.class.getClassLoader(), new Class<?>[] {Environment.class}, handler);
    }

    private static TaskManagerRuntimeInfo taskManagerInfo(File tmp) {
        Map<String, Object> answers = new HashMap<>();
        answers.put("getConfiguration", new Configuration());
        answers.put("getTmpDirectories", new String[] {tmp.getAbsolutePath()});
        answers.put("getTmpWorkingDirectory", tmp);
        answers.put("getTaskManagerExternalAddress", "127.0.0.1");
        answers.put("getTaskManagerBindAddress", "127.0.0.1");
        return answering(TaskManagerRuntimeInfo.class, answers);
    }

    /** The state to restore: none (every operator starts empty, as a job started without a savepoint), or the
     * trial's. */
    private TaskStateManager taskStateManager() {
        Map<String, Object> answers = new HashMap<>();
        answers.put("prioritizedOperatorState", restoreState);
        if (restoreCheckpointId >= 0) {
            answers.put("getRestoreCheckpointId", Optional.of(restoreCheckpointId));
        }
        answers.put("createLocalRecoveryConfig", LocalRecoveryConfig.BACKUP_AND_RECOVERY_DISABLED);
        answers.put("getInputRescalingDescriptor", InflightDataRescalingDescriptor.NO_RESCALE);
        answers.put("getOutputRescalingDescriptor", InflightDataRescalingDescriptor.NO_RESCALE);
        return answering(TaskStateManager.class, answers);
    }

    /** An implementation of the interface answering by method name from ``answers``, else with defaults. */
    @SuppressWarnings("unchecked")
    private static <T> T answering(Class<T> type, Map<String, Object> answers) {
        InvocationHandler handler = (proxy, method, args) ->
                answers.containsKey(method.getName()) ? answers.get(method.getName()) : defaultAnswer(method);
        return (T) Proxy.newProxyInstance(OperatorProbe.class.getClassLoader(), new Class<?>[] {type}, handler);
    }

    /** An implementation that does nothing (an output that drops everything, a gateway sending nothing). */
    static <T> T nothing(Class<T> type) {
        return answering(type, Collections.emptyMap());
    }

    private static Object defaultAnswer(Method method) {
        Class<?> type = method.getReturnType();
        String name = method.getName();
        if (name.equals("toString")) {
            return "flinkstate inspector " + method.getDeclaringClass().getSimpleName();
        }
        if (name.equals("hashCode")) {
            return 0;
        }
        if (name.equals("equals")) {
            return false;
        }
        if (type == boolean.class) {
            return false;
        }
        if (type == int.class || type == long.class || type == short.class || type == byte.class) {
            return type == long.class ? (Object) 0L : type == int.class ? (Object) 0
                    : type == short.class ? (Object) (short) 0 : (Object) (byte) 0;
        }
        if (type == double.class || type == float.class) {
            return type == double.class ? (Object) 0.0 : (Object) 0.0f;
        }
        if (type == Optional.class) {
            return Optional.empty();
        }
        return null;
    }
}
