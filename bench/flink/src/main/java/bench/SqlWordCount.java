package bench;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
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
 * <p>Arguments and runtime as the DataStream {@link WordCount}'s ({@link JobRuntime}), including
 * the optional retained {@code chk-N} directory to restore from.
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
  // Records a mini-batch operator buffers before it fires regardless of the latency bound
  // (the docs' guard against an unbounded heap buffer), sized as an expert would: at least
  // rate x interval (issue #42), here the highest rate measured, 1.825 M words/s, times the
  // 1 s interval, so that the interval, not the count, ends a batch and a batch folds an
  // epoch's words, as processor's combiner does. With two-phase aggregation both buffers
  // are maps of accumulators per word: their heap follows the vocabulary, not this size.
  private static final String MINI_BATCH_SIZE = "2000000";

  private SqlWordCount() {}

  /** The tokenizer of every JVM peer ({@link JobRuntime#words}) as a table function. */
  public static final class Words extends TableFunction<String> {
    public void eval(String line) {
      JobRuntime.words(line, this::collect);
    }
  }

  /** The sink's producer tuning ({@link JobRuntime#PRODUCER_TUNING}) as table options. */
  private static String producerProperties() {
    StringBuilder out = new StringBuilder();
    for (String[] kv : JobRuntime.PRODUCER_TUNING) {
      out.append(", 'properties.").append(kv[0]).append("' = ").append(quote(kv[1]));
    }
    return out.toString();
  }

  private static String quote(String value) {
    return "'" + value.replace("'", "''") + "'";
  }

  public static void main(String[] args) throws Exception {
    JobRuntime.Args a = JobRuntime.Args.parse("SqlWordCount", args);
    // The runtime: the same as the DataStream word count's.
    Configuration conf = JobRuntime.configuration(a);

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
    table.set("table.exec.mini-batch.allow-latency", a.intervalMs() + " ms");
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
            + "'topic' = " + quote(a.input()) + ", "
            + "'properties.bootstrap.servers' = " + quote(a.bootstrap()) + ", "
            + "'properties.group.id' = " + quote(a.name()) + ", "
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
            + "'topic' = " + quote(a.output()) + ", "
            + "'properties.bootstrap.servers' = " + quote(a.bootstrap()) + ", "
            + "'key.format' = 'raw', "
            + "'key.raw.charset' = 'UTF-8', "
            + "'value.format' = 'raw', "
            + "'value.raw.charset' = 'UTF-8', "
            + "'value.fields-include' = 'EXCEPT_KEY', "
            + "'sink.delivery-guarantee' = 'exactly-once', "
            + "'sink.transactional-id-prefix' = " + quote(a.name()) + ", "
            + "'properties.transaction.timeout.ms' = '" + JobRuntime.TRANSACTION_TIMEOUT_MS + "'"
            + producerProperties()
            + ")");

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
    JobRuntime.runUntilCancelled(job);
  }
}
