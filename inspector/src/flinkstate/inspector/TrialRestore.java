package flinkstate.inspector;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSchemaCompatibility;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.StateObjectCollection;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.state.HeapPriorityQueuesManager;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.RegisteredPriorityQueueStateBackendMetaInfo;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendLoader;
import org.apache.flink.runtime.state.StateSerializerProvider;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSnapshotRestoreWrapper;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.SourceOperator;
import org.apache.flink.streaming.api.operators.StreamOperator;
import org.apache.flink.streaming.api.operators.StreamTaskStateInitializerImpl;
import org.slf4j.LoggerFactory;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Flink's own verdict on a savepoint for the new version of a job (``flinkstate check --trial``): each stateful
 * operator of the new job graph is created as {@link OperatorProbe} creates it, but its subtask restores the
 * savepoint's state of that operator (one key group of its keyed state, or all of them), on the state backend the
 * job configures, through Flink's own {@link StreamTaskStateInitializerImpl} and the backend's own restore operation;
 * then the operator initializes its state and opens, registering its states, so that Flink itself resolves every
 * registered state's compatibility against the restored serializer snapshot (migrating its values, or failing).
 *
 * <p>Each registration is watched (the keyed backend is wrapped): the state it registered, and Flink's answer: the
 * compatibility Flink's own {@code resolveSchemaCompatibility} gives (as is, reconfigured, after migration: which
 * the backend then carried out), or the exception the registration threw. A registration that fails continues on an
 * empty HashMap backend, so that the operator's later states are resolved too. A restore that fails (the key
 * serializer, values that no longer read) fails the whole operator, as it would fail the task.
 *
 * <p>The timer queues ({@code _timer_state/processing_<service>}, {@code _timer_state/event_<service>}) are watched
 * the same way: the operator's timer service creates them through the keyed backend as a
 * {@code PriorityQueueSetFactory} ({@code create(name, elementSerializer)}, from
 * {@code InternalTimeServiceManagerImpl.getInternalTimerService}), where the heap backend
 * ({@code HeapPriorityQueuesManager.createOrUpdate}) and RocksDB ({@code tryRegisterPriorityQueueMetaInfo}) resolve
 * the restored queue's element serializer against the new one and throw when it is incompatible (they migrate no
 * timer: any other answer is accepted). A restored queue the operator never creates is NOT_REGISTERED, as a state.
 *
 * <p>The operator states (split and union list states, broadcast states) likewise: the operator state backend is
 * watched, each {@code getListState} / {@code getUnionListState} / {@code getBroadcastState} resolved against the
 * snapshot {@code DefaultOperatorStateBackend} restored (a broadcast state: its key's and its value's, the worse of
 * the two), or the exception it threw (an incompatible serializer, another distribution mode); a failure of its
 * restore (values that no longer read) fails the operator as the keyed restore's does.
 *
 * <p>Output (big-endian, {@link DataOutputStream}): the magic {@code flinkstate-jar-trial}, format version 1, the
 * Flink version, the backend's name, the key groups mode, then per operator of the savepoint that the job has: its
 * id, uid, name, the number of key groups restored, the restore failure (empty: none), the failure of its
 * initialization or open outside a state registration (empty: none), then per state its name, whether it is an
 * operator state ({@code OPERATOR}) or a keyed state or timer queue ({@code KEYED}), Flink's outcome ({@code AS_IS},
 * {@code RECONFIGURED}, {@code AFTER_MIGRATION}, {@code NEW}, {@code FAILED}, {@code NOT_REGISTERED}) and the
 * exception (empty: none).
 */
final class TrialRestore {

    static final String MAGIC = "flinkstate-jar-trial";
    static final int FORMAT_VERSION = 2;
    /** What Flink answered for one state. */
    static final class StateOutcome {
        final String name;
        final String outcome;
        final String error;
        boolean operatorState;

        StateOutcome(String name, String outcome, String error) {
            this.name = name;
            this.outcome = outcome;
            this.error = error;
        }

        StateOutcome ofOperatorState() {
            operatorState = true;
            return this;
        }
    }

    /** One operator's trial. */
    static final class Result {
        final OperatorID operatorId;
        final String uid;
        final String name;
        int keyGroups;
        String restoreFailure = "";
        String openFailure = "";
        final List<StateOutcome> states = new ArrayList<>();

        Result(OperatorID operatorId, String uid, String name) {
            this.operatorId = operatorId;
            this.uid = uid;
            this.name = name;
        }
    }

    private final Map<OperatorID, OperatorState> savedOperators = new HashMap<>();
    private final long checkpointId;
    private final boolean allKeyGroups;
    private final StateBackend backend;
    private final String backendName;
    private final ExecutionConfig executionConfig;

    TrialRestore(File savepoint, ClassLoader userClassLoader, boolean allKeyGroups, String backendChoice,
                 StreamConfig anyConfig, Configuration jobConfiguration, ExecutionConfig executionConfig)
            throws Exception {
        File metadata = savepoint.isDirectory() ? new File(savepoint, "_metadata") : savepoint;
        File directory = metadata.getAbsoluteFile().getParentFile();
        CheckpointMetadata loaded;
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(metadata)))) {
            loaded = Checkpoints.loadCheckpointMetadata(in, userClassLoader, directory.getAbsolutePath());
        }
        for (OperatorState state : loaded.getOperatorStates()) {
            savedOperators.put(state.getOperatorID(), state);
        }
        this.checkpointId = loaded.getCheckpointId();
        this.allKeyGroups = allKeyGroups;
        this.executionConfig = executionConfig;
        this.backend = backend(backendChoice, anyConfig, jobConfiguration, userClassLoader);
        this.backendName = backend.getName();
    }

    /** The backend the job configures (in its code, or its configuration; HashMap by default), or the one asked for. */
    private static StateBackend backend(String choice, StreamConfig config, Configuration jobConfiguration,
                                        ClassLoader userClassLoader) throws Exception {
        if (choice == null || choice.equals("job")) {
            StateBackend fromApplication = config == null ? null : config.getStateBackend(userClassLoader);
            return StateBackendLoader.fromApplicationOrConfigOrDefault(fromApplication, jobConfiguration,
                    new Configuration(), userClassLoader, LoggerFactory.getLogger(TrialRestore.class));
        }
        Configuration forced = new Configuration();
        forced.setString("state.backend.type", choice);
        // A job graph built for another backend gives RocksDB no share of managed memory ("The fraction of memory to
        // allocate should not be 0"): the trial's RocksDB takes its own small memory instead, which only changes
        // its caches, not how it restores or resolves a state.
        forced.setString("state.backend.rocksdb.memory.managed", "false");
        return StateBackendLoader.loadStateBackendFromConfig(forced, userClassLoader,
                LoggerFactory.getLogger(TrialRestore.class));
    }

    String backendName() {
        return backendName;
    }

    boolean hasState(OperatorID id) {
        return savedOperators.containsKey(id);
    }

    /** Restores the savepoint's state of the operator into a new instance of it, and records Flink's answers. */
    Result trial(OperatorProbe probe, OperatorID id, String uid, String name) throws Exception {
        OperatorState saved = savedOperators.get(id);
        Result result = new Result(id, uid, name);
        List<KeyedStateHandle> managedKeyed = new ArrayList<>();
        List<KeyedStateHandle> rawKeyed = new ArrayList<>();
        List<OperatorStateHandle> managedOperator = new ArrayList<>();
        List<OperatorStateHandle> rawOperator = new ArrayList<>();
        for (OperatorSubtaskState subtask : saved.getStates()) {
            managedKeyed.addAll(subtask.getManagedKeyedState());
            rawKeyed.addAll(subtask.getRawKeyedState());
            managedOperator.addAll(subtask.getManagedOperatorState());
            rawOperator.addAll(subtask.getRawOperatorState());
        }
        KeyGroupRange restored = allKeyGroups ? null : chosenKeyGroup(managedKeyed);
        if (restored != null) {
            managedKeyed = intersect(managedKeyed, restored);
            rawKeyed = intersect(rawKeyed, restored);
        }
        result.keyGroups = restored != null ? 1 : countKeyGroups(managedKeyed);
        OperatorSubtaskState state = OperatorSubtaskState.builder()
                .setManagedKeyedState(new StateObjectCollection<>(managedKeyed))
                .setRawKeyedState(new StateObjectCollection<>(rawKeyed))
                .setManagedOperatorState(new StateObjectCollection<>(managedOperator))
                .setRawOperatorState(new StateObjectCollection<>(rawOperator))
                .build();
        PrioritizedOperatorSubtaskState prioritized =
                new PrioritizedOperatorSubtaskState.Builder(state, Collections.emptyList(), checkpointId).build();
        probe.restoring(prioritized, checkpointId, saved.getMaxParallelism());

        Watch watch = new Watch();
        Environment environment = probe.environment();
        StreamOperator<Object> operator = probe.createOperator(environment);
        try {
            operator.initializeState(new StreamTaskStateInitializerImpl(environment, watchedBackend(watch)));
            if (!(operator instanceof SourceOperator)) {  // a source's open() starts reading (OperatorProbe)
                operator.open();
            }
        } catch (Throwable e) {
            if (watch.restoreFailure != null) {
                result.restoreFailure = SchemaInspector.oneLine(SchemaInspector.describe(watch.restoreFailure));
            } else {
                result.openFailure = SchemaInspector.oneLine(SchemaInspector.describe(innermost(e)));
            }
        }
        for (Map.Entry<String, StateOutcome> entry : watch.outcomes.entrySet()) {
            result.states.add(entry.getValue());
        }
        for (String restoredName : watch.restoredStates()) {
            if (!watch.outcomes.containsKey(restoredName)) {
                result.states.add(new StateOutcome(restoredName, "NOT_REGISTERED", ""));
            }
        }
        result.states.addAll(watch.operatorOutcomes.values());
        for (String restoredName : watch.restoredOperatorStates()) {
            if (!watch.operatorOutcomes.containsKey(restoredName)) {
                result.states.add(new StateOutcome(restoredName, "NOT_REGISTERED", "").ofOperatorState());
            }
        }
        return result;
    }

    /**
     * The one key group to restore: the one whose bytes are the most (of the largest handle), so that as many
     * states as possible have values in it for the backend to read (a value that no longer reads fails the heap
     * backend's restore only if there is one). Null when the keyed state is not in key-group handles (a native
     * savepoint's incremental handles): then all of it is restored.
     */
    private static KeyGroupRange chosenKeyGroup(List<KeyedStateHandle> handles) {
        int best = -1;
        long bestSize = -1;
        for (KeyedStateHandle handle : handles) {
            if (!(handle instanceof KeyGroupsStateHandle)) {
                return null;
            }
            KeyGroupsStateHandle groups = (KeyGroupsStateHandle) handle;
            // A canonical savepoint writes the non-empty key groups only: the others keep offset 0 (the header is
            // there). A group's bytes run to the next group's offset, the last group's to the end of the stream.
            List<long[]> written = new ArrayList<>();
            for (int group : groups.getKeyGroupRange()) {
                long offset = groups.getOffsetForKeyGroup(group);
                if (offset > 0) {
                    written.add(new long[] {offset, group});
                }
            }
            written.sort((a, b) -> Long.compare(a[0], b[0]));
            long streamEnd = groups.getDelegateStateHandle().getStateSize();
            for (int i = 0; i < written.size(); i++) {
                long next = i + 1 < written.size() ? written.get(i + 1)[0] : streamEnd;
                long size = next - written.get(i)[0];
                if (size > bestSize) {
                    bestSize = size;
                    best = (int) written.get(i)[1];
                }
            }
        }
        return best < 0 ? null : KeyGroupRange.of(best, best);
    }

    private static List<KeyedStateHandle> intersect(List<KeyedStateHandle> handles, KeyGroupRange range) {
        List<KeyedStateHandle> kept = new ArrayList<>();
        for (KeyedStateHandle handle : handles) {
            KeyedStateHandle part = handle.getIntersection(range);
            if (part != null) {
                kept.add(part);
            }
        }
        return kept;
    }

    private static int countKeyGroups(List<KeyedStateHandle> handles) {
        int count = 0;
        for (KeyedStateHandle handle : handles) {
            count += handle.getKeyGroupRange().getNumberOfKeyGroups();
        }
        return count;
    }

    // -- watching the backend ------------------------------------------------------------------------------------------

    /** What the watched backends saw: the keyed backend's restore failure, and each state's registration. */
    private final class Watch {
        Throwable restoreFailure;
        Object keyedBackend;
        Object scratchBackend;
        final Map<String, StateOutcome> outcomes = new LinkedHashMap<>();
        Object operatorBackend;
        Object scratchOperatorBackend;
        final Map<String, StateOutcome> operatorOutcomes = new LinkedHashMap<>();

        /** The operator states the operator state backend restored (list and broadcast ones). */
        Set<String> restoredOperatorStates() {
            Set<String> names = new LinkedHashSet<>();
            for (String field : new String[] {"registeredOperatorStates", "registeredBroadcastStates"}) {
                Map<?, ?> states = operatorBackend == null ? null : mapField(operatorBackend, field);
                if (states != null) {
                    for (Object key : states.keySet()) {
                        names.add(String.valueOf(key));
                    }
                }
            }
            return names;
        }

        /**
         * The states and timer queues the keyed backend restored (its registered ones after the restore: RocksDB
         * keeps both in one table, the heap backend its queues in its priority queues manager).
         */
        Set<String> restoredStates() {
            Set<String> names = new LinkedHashSet<>();
            if (keyedBackend == null) {
                return names;
            }
            Map<?, ?> states = registeredStates(keyedBackend);
            if (states != null) {
                for (Object key : states.keySet()) {
                    names.add(String.valueOf(key));
                }
            }
            for (Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>> queues : heapQueues(keyedBackend)) {
                names.addAll(queues.keySet());
            }
            return names;
        }
    }

    /** The backend, with its keyed backends watched: the restore's failure, and every state registration. */
    private StateBackend watchedBackend(Watch watch) {
        InvocationHandler handler = (proxy, method, args) -> {
            if (method.getName().equals("createKeyedStateBackend") && args != null && args.length == 1) {
                Object keyed;
                try {
                    keyed = method.invoke(backend, args);
                } catch (InvocationTargetException e) {
                    watch.restoreFailure = innermost(e.getCause());
                    throw e.getCause();
                }
                watch.keyedBackend = keyed;
                watch.scratchBackend = new HashMapStateBackend().createKeyedStateBackend(
                        withoutStateHandles((StateBackend.KeyedStateBackendParameters<?>) args[0],
                                StateBackend.KeyedStateBackendParameters.class));
                return watchedKeyedBackend(keyed, watch);
            }
            if (method.getName().equals("createOperatorStateBackend") && args != null && args.length == 1) {
                Object restored;
                try {
                    restored = method.invoke(backend, args);
                } catch (InvocationTargetException e) {
                    watch.restoreFailure = innermost(e.getCause());
                    throw e.getCause();
                }
                watch.operatorBackend = restored;
                watch.scratchOperatorBackend = new HashMapStateBackend().createOperatorStateBackend(
                        withoutStateHandles((StateBackend.OperatorStateBackendParameters) args[0],
                                StateBackend.OperatorStateBackendParameters.class));
                return watchedOperatorBackend(restored, watch);
            }
            try {
                return method.invoke(backend, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        };
        return (StateBackend) Proxy.newProxyInstance(TrialRestore.class.getClassLoader(),
                new Class<?>[] {StateBackend.class}, handler);
    }

    /** The same parameters, with nothing to restore: the scratch backend a failed registration continues on. */
    @SuppressWarnings("unchecked")
    private static <P> P withoutStateHandles(P parameters, Class<?> type) {
        InvocationHandler handler = (proxy, method, args) -> {
            if (method.getName().equals("getStateHandles")) {
                return Collections.emptyList();
            }
            try {
                return method.invoke(parameters, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        };
        return (P) Proxy.newProxyInstance(TrialRestore.class.getClassLoader(), new Class<?>[] {type}, handler);
    }

    /**
     * The operator state backend, each registration of an operator state watched (every interface of the backend
     * kept); a registration that fails continues on the empty backend.
     */
    private Object watchedOperatorBackend(Object restored, Watch watch) {
        Set<Class<?>> interfaces = new LinkedHashSet<>();
        for (Class<?> c = restored.getClass(); c != null; c = c.getSuperclass()) {
            collectInterfaces(c, interfaces);
        }
        InvocationHandler handler = (proxy, method, args) -> {
            String name = method.getName();
            StateDescriptor<?, ?> descriptor = args != null && args.length == 1 && args[0] instanceof StateDescriptor
                    && (name.equals("getListState") || name.equals("getUnionListState")
                    || name.equals("getBroadcastState")) ? (StateDescriptor<?, ?>) args[0] : null;
            if (descriptor == null) {
                try {
                    return method.invoke(restored, args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            }
            String state = descriptor.getName();
            boolean first = !watch.operatorOutcomes.containsKey(state);
            String resolved = first ? resolvedOperatorState(restored, descriptor) : null;
            try {
                Object registered = method.invoke(restored, args);
                if (first) {
                    watch.operatorOutcomes.put(state, new StateOutcome(state,
                            resolved == null || resolved.equals("INCOMPATIBLE") ? "AS_IS" : resolved, "")
                            .ofOperatorState());
                }
                return registered;
            } catch (InvocationTargetException e) {
                if (first) {
                    watch.operatorOutcomes.put(state, new StateOutcome(state, "FAILED",
                            SchemaInspector.oneLine(SchemaInspector.describe(innermost(e.getCause()))))
                            .ofOperatorState());
                }
                try {
                    return method.invoke(watch.scratchOperatorBackend, args);
                } catch (InvocationTargetException again) {
                    throw e.getCause();
                }
            }
        };
        return Proxy.newProxyInstance(TrialRestore.class.getClassLoader(), interfaces.toArray(new Class<?>[0]),
                handler);
    }

    /**
     * Flink's own resolution of an operator state's new serializers (the descriptor's, initialized as the backend
     * does) against the snapshots DefaultOperatorStateBackend restored: a list state's element serializer, a
     * broadcast state's key and value serializers (the worse answer). NEW when not restored, null when it cannot be
     * told (the registration itself then says what is wrong).
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private String resolvedOperatorState(Object restored, StateDescriptor<?, ?> descriptor) {
        try {
            boolean broadcast = descriptor instanceof MapStateDescriptor;
            Map<?, ?> states = mapField(restored, broadcast ? "registeredBroadcastStates" : "registeredOperatorStates");
            Object state = states == null ? null : states.get(descriptor.getName());
            if (state == null) {
                return "NEW";
            }
            Method getMeta = state.getClass().getMethod("getStateMetaInfo");
            getMeta.setAccessible(true);  // the backend's state classes are not all public
            Object meta = getMeta.invoke(state);
            descriptor.initializeSerializerUnlessSet(executionConfig);
            if (!broadcast) {
                return resolve(((ListStateDescriptor) descriptor).getElementSerializer(),
                        previousSnapshot(meta, "partitionStateSerializerProvider"));
            }
            MapStateDescriptor<?, ?> map = (MapStateDescriptor<?, ?>) descriptor;
            String key = resolve(map.getKeySerializer(), previousSnapshot(meta, "keySerializerProvider"));
            String value = resolve(map.getValueSerializer(), previousSnapshot(meta, "valueSerializerProvider"));
            return OUTCOME_ORDER.indexOf(key) >= OUTCOME_ORDER.indexOf(value) ? key : value;
        } catch (Throwable e) {
            return null;
        }
    }

    /** Resolutions from the best to the worst: a broadcast state's answer is its key's or value's worse one. */
    private static final List<String> OUTCOME_ORDER =
            List.of("NEW", "AS_IS", "RECONFIGURED", "AFTER_MIGRATION", "INCOMPATIBLE");

    /** The previous serializer snapshot a meta info's StateSerializerProvider field holds (restored state). */
    private static TypeSerializerSnapshot<?> previousSnapshot(Object meta, String providerField) throws Exception {
        for (Class<?> c = meta.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field field = c.getDeclaredField(providerField);
                field.setAccessible(true);
                return ((StateSerializerProvider<?>) field.get(meta)).getPreviousSerializerSnapshot();
            } catch (NoSuchFieldException e) {
                // further up
            }
        }
        throw new NoSuchFieldException(providerField);
    }

    /** A map field of a backend (its table of states), or null. */
    private static Map<?, ?> mapField(Object backend, String fieldName) {
        for (Class<?> c = backend.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field field = c.getDeclaredField(fieldName);
                field.setAccessible(true);
                return (Map<?, ?>) field.get(backend);
            } catch (NoSuchFieldException | IllegalAccessException e) {
                // further up
            }
        }
        return null;
    }

    /** The keyed backend, each registration of a state watched (every interface of the backend kept). */
    private Object watchedKeyedBackend(Object keyed, Watch watch) {
        Set<Class<?>> interfaces = new LinkedHashSet<>();
        for (Class<?> c = keyed.getClass(); c != null; c = c.getSuperclass()) {
            collectInterfaces(c, interfaces);
        }
        InvocationHandler handler = (proxy, method, args) -> {
            String queue = queueCreation(method, args);
            if (queue != null) {
                return watchedQueueCreation(keyed, watch, queue, method, args);
            }
            StateDescriptor<?, ?> descriptor = registration(method, args);
            if (descriptor == null) {
                try {
                    return method.invoke(keyed, args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            }
            String name = descriptor.getName();
            boolean first = !watch.outcomes.containsKey(name);
            String before = first ? resolvedBefore(keyed, descriptor) : null;
            try {
                Object state = method.invoke(keyed, args);
                if (first) {
                    String after = before == null || before.equals("INCOMPATIBLE") ? resolvedAfter(keyed, name) : before;
                    watch.outcomes.put(name, new StateOutcome(name, after == null ? "AS_IS" : after, ""));
                }
                return state;
            } catch (InvocationTargetException e) {
                Throwable failure = innermost(e.getCause());
                if (first) {
                    watch.outcomes.put(name, new StateOutcome(name, "FAILED",
                            SchemaInspector.oneLine(SchemaInspector.describe(failure))));
                }
                // Continue on an empty backend, so that the operator's later registrations are resolved too.
                try {
                    return method.invoke(watch.scratchBackend, args);
                } catch (InvocationTargetException again) {
                    throw e.getCause();
                }
            }
        };
        return Proxy.newProxyInstance(TrialRestore.class.getClassLoader(), interfaces.toArray(new Class<?>[0]),
                handler);
    }

    /**
     * A timer queue's creation, watched: Flink's answer is the compatibility of the new element serializer with the
     * restored queue's (what the backend resolves in it, and throws on when incompatible), or the exception. A
     * creation that fails continues on the empty backend, as a failed state registration does.
     */
    private Object watchedQueueCreation(Object keyed, Watch watch, String name, Method method, Object[] args)
            throws Throwable {
        boolean first = !watch.outcomes.containsKey(name);
        String resolved = first ? resolvedQueue(keyed, name, (TypeSerializer<?>) args[1]) : null;
        try {
            Object queue = method.invoke(keyed, args);
            if (first) {
                // INCOMPATIBLE cannot pass the backend's check: if it did, what Flink accepted is the answer
                watch.outcomes.put(name, new StateOutcome(name,
                        resolved == null || resolved.equals("INCOMPATIBLE") ? "AS_IS" : resolved, ""));
            }
            return queue;
        } catch (InvocationTargetException e) {
            Throwable failure = innermost(e.getCause());
            if (first) {
                watch.outcomes.put(name, new StateOutcome(name, "FAILED",
                        SchemaInspector.oneLine(SchemaInspector.describe(failure))));
            }
            try {
                return method.invoke(watch.scratchBackend, args);
            } catch (InvocationTargetException again) {
                throw e.getCause();
            }
        }
    }

    /** The timer queue a keyed backend call creates ({@code PriorityQueueSetFactory.create(name, serializer)}), or null. */
    private static String queueCreation(Method method, Object[] args) {
        if (!method.getName().equals("create") || args == null || args.length < 2
                || !(args[0] instanceof String) || !(args[1] instanceof TypeSerializer)) {
            return null;
        }
        return (String) args[0];
    }

    /**
     * Flink's own resolution of a timer queue's new element serializer against the snapshot the backend restored
     * (StateSerializerProvider.registerNewSerializerForRestoredState's), NEW when the queue was not restored, null
     * when it cannot be told (the creation itself then says what is wrong).
     */
    private static String resolvedQueue(Object keyed, String name, TypeSerializer<?> serializer) {
        try {
            RegisteredPriorityQueueStateBackendMetaInfo<?> meta = restoredQueue(keyed, name);
            if (meta == null) {
                return "NEW";
            }
            for (Class<?> c = meta.getClass(); c != null; c = c.getSuperclass()) {
                for (Field field : c.getDeclaredFields()) {
                    if (StateSerializerProvider.class.isAssignableFrom(field.getType())) {
                        field.setAccessible(true);
                        StateSerializerProvider<?> provider = (StateSerializerProvider<?>) field.get(meta);
                        return resolve(serializer, provider.getPreviousSerializerSnapshot());
                    }
                }
            }
            return null;
        } catch (Throwable e) {
            return null;
        }
    }

    /** The restored meta info of a timer queue: in RocksDB's table of states, or in a heap priority queues manager. */
    private static RegisteredPriorityQueueStateBackendMetaInfo<?> restoredQueue(Object keyed, String name)
            throws Exception {
        Map<?, ?> states = registeredStates(keyed);
        Object entry = states == null ? null : states.get(name);
        if (entry != null) {
            Field field = entry.getClass().getField("metaInfo");  // RocksDbKvStateInfo.metaInfo
            field.setAccessible(true);
            Object meta = field.get(entry);
            return meta instanceof RegisteredPriorityQueueStateBackendMetaInfo
                    ? (RegisteredPriorityQueueStateBackendMetaInfo<?>) meta : null;
        }
        for (Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>> queues : heapQueues(keyed)) {
            HeapPriorityQueueSnapshotRestoreWrapper<?> wrapper = queues.get(name);
            if (wrapper != null) {
                return wrapper.getMetaInfo();
            }
        }
        return null;
    }

    /**
     * The heap timer queues of a keyed backend: those of its priority queues managers (the heap backend's
     * {@code priorityQueuesManager}; RocksDB's {@code heapPriorityQueuesManager} when its timers are on the heap).
     */
    private static List<Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>>> heapQueues(Object keyed) {
        List<Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>>> found = new ArrayList<>();
        for (Class<?> c = keyed.getClass(); c != null; c = c.getSuperclass()) {
            for (Field field : c.getDeclaredFields()) {
                if (HeapPriorityQueuesManager.class.isAssignableFrom(field.getType())) {
                    try {
                        field.setAccessible(true);
                        HeapPriorityQueuesManager manager = (HeapPriorityQueuesManager) field.get(keyed);
                        if (manager != null) {
                            found.add(manager.getRegisteredPQStates());
                        }
                    } catch (IllegalAccessException | RuntimeException e) {
                        // not readable here: its queues are then not reported
                    }
                }
            }
        }
        return found;
    }

    private static void collectInterfaces(Class<?> type, Set<Class<?>> into) {
        for (Class<?> i : type.getInterfaces()) {
            if (java.lang.reflect.Modifier.isPublic(i.getModifiers()) && into.add(i)) {
                collectInterfaces(i, into);
            }
        }
    }

    /** The state descriptor a keyed backend call registers (getPartitionedState, getOrCreateKeyedState), or null. */
    private static StateDescriptor<?, ?> registration(Method method, Object[] args) {
        String name = method.getName();
        if (args == null || !(name.equals("getPartitionedState") || name.equals("getOrCreateKeyedState")
                || name.equals("createOrUpdateInternalState"))) {
            return null;
        }
        for (Object arg : args) {
            if (arg instanceof StateDescriptor) {
                return (StateDescriptor<?, ?>) arg;
            }
        }
        return null;
    }

    /**
     * Flink's own resolution of the state's new serializer (the descriptor's, initialized as the backend does)
     * against the snapshot the backend restored: the answer the backend acts on when it registers the state. Null
     * when the state was not restored, or is kept with TTL (the backend wraps its serializer: resolved after).
     */
    private String resolvedBefore(Object keyed, StateDescriptor<?, ?> descriptor) {
        try {
            RegisteredKeyValueStateBackendMetaInfo<?, ?> meta = metaInfo(keyed, descriptor.getName());
            if (meta == null) {
                return "NEW";
            }
            if (descriptor.getTtlConfig() != null && descriptor.getTtlConfig().isEnabled()) {
                return null;
            }
            descriptor.initializeSerializerUnlessSet(executionConfig);
            return resolve(descriptor.getSerializer(), meta.getPreviousStateSerializerSnapshot());
        } catch (Throwable e) {
            return null;  // the registration itself then says what is wrong
        }
    }

    /** The resolution with the serializer the backend registered (after a successful registration). */
    private static String resolvedAfter(Object keyed, String name) {
        try {
            RegisteredKeyValueStateBackendMetaInfo<?, ?> meta = metaInfo(keyed, name);
            return meta == null ? null : resolve(meta.getStateSerializer(), meta.getPreviousStateSerializerSnapshot());
        } catch (Throwable e) {
            return null;
        }
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static String resolve(TypeSerializer serializer, TypeSerializerSnapshot previous) {
        if (previous == null) {
            return "NEW";
        }
        TypeSerializerSchemaCompatibility<?> compatibility =
                serializer.snapshotConfiguration().resolveSchemaCompatibility(previous);
        if (compatibility.isCompatibleAsIs()) {
            return "AS_IS";
        }
        if (compatibility.isCompatibleWithReconfiguredSerializer()) {
            return "RECONFIGURED";
        }
        if (compatibility.isCompatibleAfterMigration()) {
            return "AFTER_MIGRATION";
        }
        return "INCOMPATIBLE";
    }

    /** The registered (or restored) meta info of a state in the heap or RocksDB keyed backend, or null. */
    private static RegisteredKeyValueStateBackendMetaInfo<?, ?> metaInfo(Object keyed, String name) throws Exception {
        Map<?, ?> states = registeredStates(keyed);
        Object entry = states == null ? null : states.get(name);
        if (entry == null) {
            return null;
        }
        for (Class<?> c = entry.getClass(); c != null; c = c.getSuperclass()) {
            for (Method method : c.getDeclaredMethods()) {
                if (method.getName().equals("getMetaInfo") && method.getParameterCount() == 0) {
                    method.setAccessible(true);
                    return (RegisteredKeyValueStateBackendMetaInfo<?, ?>) method.invoke(entry);
                }
            }
            for (Field field : c.getDeclaredFields()) {
                if (field.getName().equals("metaInfo")) {
                    field.setAccessible(true);
                    Object meta = field.get(entry);
                    return meta instanceof RegisteredKeyValueStateBackendMetaInfo
                            ? (RegisteredKeyValueStateBackendMetaInfo<?, ?>) meta : null;
                }
            }
        }
        return null;
    }

    /** The keyed backend's own table of states (heap: registeredKVStates; RocksDB: kvStateInformation). */
    private static Map<?, ?> registeredStates(Object keyed) {
        for (Class<?> c = keyed.getClass(); c != null; c = c.getSuperclass()) {
            for (String fieldName : new String[] {"registeredKVStates", "kvStateInformation"}) {
                try {
                    Field field = c.getDeclaredField(fieldName);
                    field.setAccessible(true);
                    return (Map<?, ?>) field.get(keyed);
                } catch (NoSuchFieldException | IllegalAccessException e) {
                    // another backend class, or further up
                }
            }
        }
        return null;
    }

    /** The failure's innermost cause (below Flink's wrappers: the backend builder's, the task's). */
    static Throwable innermost(Throwable e) {
        Throwable current = e;
        while (current.getCause() != null && current.getCause() != current) {
            current = current.getCause();
        }
        return current;
    }

    // -- output --------------------------------------------------------------------------------------------------------

    void write(DataOutputStream data, String flinkVersion, List<Result> results) throws Exception {
        data.writeUTF(MAGIC);
        data.writeInt(FORMAT_VERSION);
        data.writeUTF(flinkVersion);
        data.writeUTF(backendName);
        data.writeUTF(allKeyGroups ? "all" : "one");
        data.writeInt(results.size());
        for (Result result : results) {
            data.writeUTF(result.operatorId.toHexString());
            data.writeUTF(result.uid == null ? "" : result.uid);
            data.writeUTF(result.name == null ? "" : result.name);
            data.writeInt(result.keyGroups);
            data.writeUTF(result.restoreFailure);
            data.writeUTF(result.openFailure);
            data.writeInt(result.states.size());
            for (StateOutcome state : result.states) {
                data.writeUTF(state.name);
                data.writeUTF(state.operatorState ? "OPERATOR" : "KEYED");
                data.writeUTF(state.outcome);
                data.writeUTF(state.error);
            }
        }
    }
}
