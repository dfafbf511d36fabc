package bench.sql;

import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
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
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableConfig;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.functions.TableFunction;

/**
 * Word count as bench/run.py measures it, in Flink SQL on an embedded MiniCluster: the
 * counterpart of processor's combiner is Flink's mini-batched two-phase (local-global)
 * aggregation.
 *
 * <pre>
 * lines (kafka, raw, read_committed, earliest, group job.name)
 *   -> LATERAL TABLE(words(line))            the same tokenizer as the DataStream peer
 *   -> local COUNT per mini-batch             chained to the source, before the shuffle
 *   -> hash shuffle by word
 *   -> global COUNT, RocksDB state            one state access per word per mini-batch
 *   -> counts (upsert-kafka, exactly-once)    key = word, value = the count as decimal text
 * </pre>
 *
 * <p>Arguments: bootstrap input output job.name checkpoint.dir parallelism checkpoint.interval.ms
 * [restore.path]: as bench/flink's WordCount, including the optional retained {@code chk-N}
 * directory to restore from (a MiniCluster has no HA store: a restarted JVM finds its last
 * checkpoint only when told where it is).
 *
 * <p>Docs followed (Flink 2.2 / Kafka connector 5.0):
 *
 * <ul>
 *   <li>https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/table/tuning/
 *       (MiniBatch Aggregation, Local-Global Aggregation)
 *   <li>https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/table/config/
 *       (table.exec.mini-batch.*, table.optimizer.agg-phase-strategy)
 *   <li>https://nightlies.apache.org/flink/flink-docs-stable/docs/connectors/table/kafka/
 *       (properties.*, scan.startup.mode, sink.delivery-guarantee,
 *       sink.transactional-id-prefix; offsets committed to the group on checkpoints)
 *   <li>https://nightlies.apache.org/flink/flink-docs-stable/docs/connectors/table/upsert-kafka/
 *       (PRIMARY KEY as the Kafka key; at-least-once unless the delivery guarantee is set)
 *   <li>https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/connectors/table/formats/raw/
 *   <li>https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/table/functions/udfs/
 *       (table functions)
 * </ul>
 */
public final class SqlWordCount {
  // Below the broker's transaction.max.timeout.ms (15 minutes by default).
  private static final String TRANSACTION_TIMEOUT_MS = "60000";
  // Records a mini-batch operator buffers before it fires regardless of the latency bound:
  // the docs' guard against an unbounded heap buffer. 100,000 input words per local batch
  // fold onto at most the vocabulary (the bench corpus has up to 50,000 distinct words), so
  // the shuffle still carries well under one record per two words even when the count, not
  // the latency, fires the batch.
  private static final String MINI_BATCH_SIZE = "100000";

  private SqlWordCount() {}

  /**
   * The tokenizer of every JVM peer: words as Python's {@code re.findall(r"\w+", line.lower())}.
   * The first line seen in this JVM prints the FIRST_RECORD marker.
   */
  public static final class Words extends TableFunction<String> {
    // Python's \w is Unicode-aware; Java's is ASCII-only unless asked.
    private static final Pattern WORD = Pattern.compile("\\w+", Pattern.UNICODE_CHARACTER_CLASS);
    private static final AtomicBoolean FIRST = new AtomicBoolean(true);

    public void eval(String line) {
      if (FIRST.get() && FIRST.compareAndSet(true, false)) {
        System.out.println("FIRST_RECORD " + System.currentTimeMillis());
        System.out.flush();
      }
      if (line == null) {
        return;
      }
      Matcher m = WORD.matcher(line.toLowerCase(Locale.ROOT));
      while (m.find()) {
        collect(m.group());
      }
    }
  }

  private static String quote(String value) {
    return "'" + value.replace("'", "''") + "'";
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 7 && args.length != 8) {
      System.err.println(
          "usage: SqlWordCount bootstrap input output job.name checkpoint.dir parallelism"
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

    // The runtime: the same as the DataStream peer's (bench/flink WordCount.java).
    Configuration conf = new Configuration();
    conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism);
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(intervalMs));
    conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
    conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
    conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + dir + "/checkpoints");
    conf.set(
        CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
    if (args.length == 8) {
      conf.set(StateRecoveryOptions.SAVEPOINT_PATH, args[7]);
      conf.set(StateRecoveryOptions.RESTORE_MODE, RecoveryClaimMode.CLAIM);
    }
    // Object reuse: records handed between chained operators (source, tokenizer, local
    // aggregate) are not deep-copied. The execution config docs name it a performance switch
    // for code that does not keep or modify its inputs; the tokenizer emits fresh Strings and
    // the mini-batch aggregates merge into accumulators of their own (the exactness check of
    // this peer runs with it on).
    // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/datastream/execution/execution_configuration/
    conf.set(PipelineOptions.OBJECT_REUSE, true);
    // RocksDB: managed memory is the first knob the large-state tuning guide names; the
    // MiniCluster's default is 128 MB for all slots. 256 MB, split over the two slots.
    // https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/ops/state/large_state_tuning/#tuning-rocksdb-memory
    conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(256));
    conf.setString("state.backend.rocksdb.localdir", dir + "/rocksdb");
    conf.set(CoreOptions.TMP_DIRS, dir + "/tmp");
    conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
    conf.set(RestOptions.BIND_PORT, "0");

    StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(conf);
    StreamTableEnvironment tEnv =
        StreamTableEnvironment.create(env, EnvironmentSettings.inStreamingMode());
    TableConfig table = tEnv.getConfig();
    // Mini-batch: each aggregate buffers its input and touches each key's state once per
    // batch, not once per record (docs: "MiniBatch Aggregation"). Local-global aggregation
    // depends on it.
    table.set("table.exec.mini-batch.enabled", "true");
    // A batch fires at the latest after one checkpoint interval: the output's freshness is
    // bounded by the checkpoint interval anyway (the exactly-once sink publishes its records
    // only when a checkpoint completes), so a longer wait adds nothing visible and a shorter
    // one folds fewer words per batch.
    table.set("table.exec.mini-batch.allow-latency", intervalMs + " ms");
    table.set("table.exec.mini-batch.size", MINI_BATCH_SIZE);
    // Two-phase: a local COUNT per mini-batch before the shuffle, a global COUNT after it
    // (docs: "Local-Global Aggregation", the Combine + Reduce pattern): the shuffle carries
    // one partial count per word per batch instead of one record per word occurrence.
    table.set("table.optimizer.agg-phase-strategy", "TWO_PHASE");

    tEnv.createTemporarySystemFunction("words", Words.class);

    // The input: value bytes as one STRING column (raw format, UTF-8). The KafkaSource
    // underneath commits its offsets to the group when a checkpoint completes: the progress
    // the bench reads (group = job.name). On a restore, the checkpoint's offsets win over the
    // startup mode.
    tEnv.executeSql(
        "CREATE TABLE lines (line STRING) WITH ("
            + "'connector' = 'kafka', "
            + "'topic' = " + quote(input) + ", "
            + "'properties.bootstrap.servers' = " + quote(bootstrap) + ", "
            + "'properties.group.id' = " + quote(name) + ", "
            + "'properties.isolation.level' = 'read_committed', "
            + "'scan.startup.mode' = 'earliest-offset', "
            + "'format' = 'raw', "
            + "'raw.charset' = 'UTF-8')");
    // The output: key = word, value = the count as decimal text, both raw UTF-8. Exactly-once
    // (transactional, committed when a checkpoint completes) instead of the connector's
    // at-least-once default; producer batching as every other peer gets it (lz4, 512 KB
    // batches, 20 ms linger).
    tEnv.executeSql(
        "CREATE TABLE counts (word STRING, cnt STRING, PRIMARY KEY (word) NOT ENFORCED) WITH ("
            + "'connector' = 'upsert-kafka', "
            + "'topic' = " + quote(output) + ", "
            + "'properties.bootstrap.servers' = " + quote(bootstrap) + ", "
            + "'key.format' = 'raw', "
            + "'key.raw.charset' = 'UTF-8', "
            + "'value.format' = 'raw', "
            + "'value.raw.charset' = 'UTF-8', "
            + "'value.fields-include' = 'EXCEPT_KEY', "
            + "'sink.delivery-guarantee' = 'exactly-once', "
            + "'sink.transactional-id-prefix' = " + quote(name) + ", "
            + "'properties.transaction.timeout.ms' = '" + TRANSACTION_TIMEOUT_MS + "', "
            + "'properties.compression.type' = 'lz4', "
            + "'properties.linger.ms' = '20', "
            + "'properties.batch.size' = '524288')");

    String insert =
        "INSERT INTO counts "
            + "SELECT word, CAST(COUNT(*) AS STRING) "
            + "FROM lines, LATERAL TABLE(words(line)) AS t(word) "
            + "GROUP BY word";
    // The optimized plan in the log: LocalGroupAggregate / GlobalGroupAggregate and the
    // MiniBatchAssigner show that the settings took.
    System.err.println(tEnv.explainSql(insert));

    TableResult result = tEnv.executeSql(insert);
    JobClient job = result.getJobClient().orElseThrow();
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
