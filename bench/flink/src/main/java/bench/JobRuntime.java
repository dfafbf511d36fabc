package bench;

import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * What the two Flink word counts (the DataStream {@link WordCount} and {@link SqlWordCount})
 * share: their arguments, the runtime configuration, the tokenizer, the sink's producer
 * settings and how the job runs until SIGTERM.
 *
 * <p>Arguments: bootstrap input output job.name checkpoint.dir parallelism
 * checkpoint.interval.ms [restore.path]. With {@code restore.path} (a retained {@code chk-N}
 * directory) the job starts from that checkpoint, as a supervisor restarts a killed
 * MiniCluster (a MiniCluster has no HA store: a restarted JVM finds its last checkpoint only
 * when told where it is).
 */
final class JobRuntime {
  // Python's \w is Unicode-aware; Java's is ASCII-only unless asked (as in bench/kstreams).
  static final Pattern WORD = Pattern.compile("\\w+", Pattern.UNICODE_CHARACTER_CLASS);
  // Below the broker's transaction.max.timeout.ms (15 minutes by default); the sink's own
  // default (1 hour) is refused by a default broker.
  static final String TRANSACTION_TIMEOUT_MS = "60000";
  // The sink's producer batched as every other peer's (bench/peers/kstreams_peer.py TUNING,
  // quix_app.py): lz4, 512 KB batches, a 20 ms linger. The count updates are small records
  // (a word and a number); the Kafka client's defaults (16 KB batches, no compression, 5 ms
  // linger in Kafka 4) send many small requests. Both Kafka sinks pass producer properties
  // through.
  // https://nightlies.apache.org/flink/flink-docs-stable/docs/connectors/datastream/kafka/#kafka-sink
  // https://kafka.apache.org/documentation/#producerconfigs
  static final String[][] PRODUCER_TUNING = {
    {"compression.type", "lz4"}, {"batch.size", "524288"}, {"linger.ms", "20"},
  };
  // RocksDB's share of the MiniCluster (its block cache and write buffers, from Flink's
  // managed memory): the large-state tuning guide's first advice is more managed memory. The
  // local default is 128 MB for all slots; 256 MB, split over the two slots, is still off
  // the 1 GB heap.
  // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/ops/state/large_state_tuning/#tuning-rocksdb-memory
  static final MemorySize MANAGED_MEMORY = MemorySize.ofMebiBytes(256);

  private static final AtomicBoolean FIRST = new AtomicBoolean(true);

  private JobRuntime() {}

  /** The command line of either job. */
  record Args(
      String bootstrap,
      String input,
      String output,
      String name,
      String dir,
      int parallelism,
      long intervalMs,
      String restore) {

    static Args parse(String program, String[] args) {
      if (args.length != 7 && args.length != 8) {
        System.err.println(
            "usage: "
                + program
                + " bootstrap input output job.name checkpoint.dir parallelism"
                + " checkpoint.interval.ms [restore.path]");
        System.exit(2);
      }
      return new Args(
          args[0],
          args[1],
          args[2],
          args[3],
          args[4],
          Integer.parseInt(args[5]),
          Long.parseLong(args[6]),
          args.length == 8 ? args[7] : null);
    }
  }

  /**
   * Exactly-once aligned checkpoints every interval, RocksDB with incremental checkpoints to
   * the job's directory (kept on cancellation), the restore path if given, managed memory,
   * object reuse, the MiniCluster's REST endpoint on loopback at a free port.
   */
  /**
   * A local environment, or with the system property {@code bench.flink.remote=host:port} a
   * session cluster's REST endpoint; no jar files: the classes of the job are on the cluster's
   * classpath (its JVMs run from this jar), as with a job jar in Flink's lib/.
   * https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/datastream/overview/#anatomy-of-a-flink-program
   * https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/resource-providers/standalone/overview/
   */
  /** Whether the job is submitted to a session cluster ({@code bench.flink.remote}). */
  static boolean remote() {
    return System.getProperty("bench.flink.remote") != null;
  }

  static StreamExecutionEnvironment environment(Configuration conf) {
    String remote = System.getProperty("bench.flink.remote");
    if (remote == null) {
      return StreamExecutionEnvironment.createLocalEnvironment(conf);
    }
    int colon = remote.lastIndexOf(':');
    return StreamExecutionEnvironment.createRemoteEnvironment(
        remote.substring(0, colon), Integer.parseInt(remote.substring(colon + 1)), conf);
  }

  static Configuration configuration(Args a) {
    Configuration conf = new Configuration();
    conf.set(CoreOptions.DEFAULT_PARALLELISM, a.parallelism());
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(a.intervalMs()));
    conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
    conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
    conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + a.dir() + "/checkpoints");
    // Kept when the job is cancelled too (a SIGKILL deletes nothing anyway): a restart can
    // resume from the latest one.
    conf.set(
        CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
    if (a.restore() != null) {
      conf.set(StateRecoveryOptions.SAVEPOINT_PATH, a.restore());
      // The restarted job owns the checkpoint and goes on incrementally from it, as the
      // killed one would have.
      conf.set(StateRecoveryOptions.RESTORE_MODE, RecoveryClaimMode.CLAIM);
    }
    // RocksDB's working files and Flink's spill files under the job's directory, not /tmp.
    conf.setString("state.backend.rocksdb.localdir", a.dir() + "/rocksdb");
    conf.set(CoreOptions.TMP_DIRS, a.dir() + "/tmp");
    conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MANAGED_MEMORY);
    // Chained operators hand records over without a deep copy: safe in both jobs, no function
    // keeps or modifies its input (Strings are immutable, counts are new tuples, the
    // mini-batch aggregates merge into accumulators of their own), which is the condition
    // the execution config docs give.
    // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/datastream/execution/execution_configuration/
    conf.set(PipelineOptions.OBJECT_REUSE, true);
    // The MiniCluster's REST endpoint: loopback, any free port (several runs share a machine).
    conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
    conf.set(RestOptions.BIND_PORT, "0");
    return conf;
  }

  /**
   * The words of a line, as Python's {@code re.findall(r"\w+", line.lower())}; the first line
   * seen in this JVM prints {@code FIRST_RECORD <epoch ms>}.
   */
  static void words(String line, Consumer<String> out) {
    if (FIRST.get() && FIRST.compareAndSet(true, false)) {
      System.out.println("FIRST_RECORD " + System.currentTimeMillis());
      System.out.flush();
    }
    if (line == null) {
      return;
    }
    Matcher m = WORD.matcher(line.toLowerCase(Locale.ROOT));
    while (m.find()) {
      out.accept(m.group());
    }
  }

  /** Until the job ends; SIGTERM cancels it (a few seconds). */
  static void runUntilCancelled(JobClient job) throws Exception {
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
