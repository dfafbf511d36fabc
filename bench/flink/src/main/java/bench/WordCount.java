package bench;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.sink.KafkaSinkBuilder;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Word count as bench/run.py measures it, on Flink's DataStream API in an embedded MiniCluster:
 * lines from the input topic (read_committed, from the earliest offset), lower-cased, words as
 * Python's {@code re.findall(r"\w+", line.lower())}, keyed by word, counted in keyed ValueState
 * on RocksDB, each new count written transactionally as key = word, value = UTF-8 decimal.
 *
 * <p>Arguments: bootstrap input output job.name checkpoint.dir parallelism checkpoint.interval.ms
 * [restore.path]
 *
 * <p>With {@code restore.path} (a retained {@code chk-N} directory) the job starts from that
 * checkpoint, as a supervisor restarts a killed job (bench/recovery_lag.py). The source commits
 * its offsets to the group {@code job.name} when a checkpoint completes (the connector's
 * default once a group id is set): that is how the consumer lag of the job can be read.
 *
 * <p>Checkpoints are exactly-once, incremental, to {@code checkpoint.dir}; the sink commits its
 * Kafka transaction when a checkpoint completes. Prints {@code FIRST_RECORD <epoch ms>} when the
 * first input record is processed; SIGTERM cancels the job.
 *
 * <p>With the system property {@code bench.flink.remote=host:port} (a session cluster's REST
 * endpoint) the same job is submitted to that cluster instead of a MiniCluster, detached: this
 * JVM prints {@code JOB_ID <id>} and exits, the cluster runs the job and restarts it from its
 * latest checkpoint by itself when a TaskManager dies (bench/recovery_lag.py). The cluster's
 * JVMs run from this jar's classpath, so no user jar is shipped; the cluster's own settings
 * (restart strategy, heartbeats, memory) come from its configuration, not from here.
 */
public final class WordCount {
  // Python's \w is Unicode-aware; Java's is ASCII-only unless asked (as in bench/kstreams).
  private static final Pattern WORD = Pattern.compile("\\w+", Pattern.UNICODE_CHARACTER_CLASS);
  // Below the broker's transaction.max.timeout.ms (15 minutes by default); the sink's own
  // default (1 hour) is refused by a default broker.
  private static final String TRANSACTION_TIMEOUT_MS = "60000";
  // The sink's producer batched as every other peer's (bench/peers/kstreams_peer.py TUNING,
  // quix_app.py): lz4, 512 KB batches, a 20 ms linger. The count updates are small records
  // (a word and a number); the Kafka client's defaults (16 KB batches, no compression, 5 ms
  // linger in Kafka 4) send many small requests. A KafkaSink passes any producer property
  // through (setProperty).
  // https://nightlies.apache.org/flink/flink-docs-stable/docs/connectors/datastream/kafka/#kafka-sink
  // https://kafka.apache.org/documentation/#producerconfigs
  private static final String[][] PRODUCER_TUNING = {
    {"compression.type", "lz4"}, {"batch.size", "524288"}, {"linger.ms", "20"},
  };
  // RocksDB's share of the MiniCluster (its block cache and write buffers, from Flink's
  // managed memory): the large-state tuning guide's first advice is more managed memory. The
  // local default is 128 MB for all slots; 256 MB, split over the two slots, is still off
  // the 1 GB heap.
  // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/ops/state/large_state_tuning/#tuning-rocksdb-memory
  private static final MemorySize MANAGED_MEMORY = MemorySize.ofMebiBytes(256);

  private WordCount() {}

  /** Lines to words; the first record seen in this JVM prints the FIRST_RECORD marker. */
  static final class Tokenize implements FlatMapFunction<String, String> {
    private static final AtomicBoolean FIRST = new AtomicBoolean(true);

    @Override
    public void flatMap(String line, Collector<String> out) {
      if (FIRST.get() && FIRST.compareAndSet(true, false)) {
        System.out.println("FIRST_RECORD " + System.currentTimeMillis());
        System.out.flush();
      }
      if (line == null) {
        return;
      }
      Matcher m = WORD.matcher(line.toLowerCase(Locale.ROOT));
      while (m.find()) {
        out.collect(m.group());
      }
    }
  }

  /** The running count of the current key (the word), in keyed state. */
  static final class Count extends RichMapFunction<String, Tuple2<String, Long>> {
    private transient ValueState<Long> count;

    @Override
    public void open(OpenContext context) {
      count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
    }

    @Override
    public Tuple2<String, Long> map(String word) throws Exception {
      Long before = count.value();
      long now = before == null ? 1 : before + 1;
      count.update(now);
      return Tuple2.of(word, now);
    }
  }

  /** key = word, value = the count as decimal text; Kafka's partitioner places it by key. */
  static final class CountRecord implements KafkaRecordSerializationSchema<Tuple2<String, Long>> {
    private final String topic;

    CountRecord(String topic) {
      this.topic = topic;
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(
        Tuple2<String, Long> count, KafkaSinkContext context, Long timestamp) {
      return new ProducerRecord<>(
          topic,
          count.f0.getBytes(StandardCharsets.UTF_8),
          Long.toString(count.f1).getBytes(StandardCharsets.UTF_8));
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 7 && args.length != 8) {
      System.err.println(
          "usage: WordCount bootstrap input output job.name checkpoint.dir parallelism"
              + " checkpoint.interval.ms [restore.path]");
      System.exit(2);
    }
    String bootstrap = args[0];
    String input = args[1];
    String output = args[2];
    String name = args[3];
    String dir = args[4];
    int parallelism = Integer.parseInt(args[5]);
    long intervalMs = Long.parseLong(args[6]);

    Configuration conf = new Configuration();
    conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism);
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(intervalMs));
    conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
    conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
    conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + dir + "/checkpoints");
    // Kept when the job is cancelled too (a SIGKILL deletes nothing anyway): a restart can
    // resume from the latest one.
    conf.set(
        CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
    if (args.length == 8) {
      conf.set(StateRecoveryOptions.SAVEPOINT_PATH, args[7]);
      // The restarted job owns the checkpoint and goes on incrementally from it, as the
      // killed one would have.
      conf.set(StateRecoveryOptions.RESTORE_MODE, RecoveryClaimMode.CLAIM);
    }
    // RocksDB's working files and Flink's spill files under the job's directory, not /tmp.
    conf.setString("state.backend.rocksdb.localdir", dir + "/rocksdb");
    conf.set(CoreOptions.TMP_DIRS, dir + "/tmp");
    conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MANAGED_MEMORY);
    // The MiniCluster's REST endpoint: loopback, any free port (several runs share a machine).
    conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
    conf.set(RestOptions.BIND_PORT, "0");

    String remote = System.getProperty("bench.flink.remote");
    StreamExecutionEnvironment env;
    if (remote == null) {
      env = StreamExecutionEnvironment.createLocalEnvironment(conf);
    } else {
      // A session cluster's REST endpoint; no jar files: the classes of this job are on the
      // cluster's classpath (its JVMs run from this jar), as with a job jar in Flink's lib/.
      // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/datastream/overview/#anatomy-of-a-flink-program
      // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/resource-providers/standalone/overview/
      int colon = remote.lastIndexOf(':');
      env =
          StreamExecutionEnvironment.createRemoteEnvironment(
              remote.substring(0, colon), Integer.parseInt(remote.substring(colon + 1)), conf);
    }
    // Chained operators (source -> tokenizer, counter -> sink) hand records over without a
    // deep copy: safe here, no function keeps or modifies its input (Strings are immutable,
    // Count returns a new Tuple2), which is the condition the execution config docs give.
    // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/datastream/execution/execution_configuration/
    env.getConfig().enableObjectReuse();

    KafkaSource<String> source =
        KafkaSource.<String>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(input)
            .setGroupId(name)
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setValueOnlyDeserializer(new SimpleStringSchema())
            .setProperty("isolation.level", "read_committed")
            .build();
    KafkaSinkBuilder<Tuple2<String, Long>> sinkBuilder =
        KafkaSink.<Tuple2<String, Long>>builder()
            .setBootstrapServers(bootstrap)
            .setRecordSerializer(new CountRecord(output))
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(name)
            .setProperty("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS);
    for (String[] kv : PRODUCER_TUNING) {
      sinkBuilder.setProperty(kv[0], kv[1]);
    }
    KafkaSink<Tuple2<String, Long>> sink = sinkBuilder.build();

    env.fromSource(source, WatermarkStrategy.noWatermarks(), "lines")
        .flatMap(new Tokenize())
        .returns(Types.STRING)
        .name("words")
        .keyBy(word -> word, Types.STRING)
        .map(new Count())
        .returns(Types.TUPLE(Types.STRING, Types.LONG))
        .name("counts")
        .sinkTo(sink)
        .name("output");

    JobClient job = env.executeAsync(name);
    if (remote != null) {
      // Detached: the session cluster owns the job from here on.
      System.out.println("JOB_ID " + job.getJobID());
      System.out.flush();
      System.exit(0);
    }
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    job.cancel().get(30, TimeUnit.SECONDS);
                  } catch (Exception exc) {
                    System.err.println("cancel: " + exc);
                  }
                }));
    job.getJobExecutionResult().get();
  }
}
