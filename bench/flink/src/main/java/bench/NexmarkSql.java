package bench;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableConfig;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

/**
 * One Nexmark query (bench/nexmark/flink/*.sql, rendered by bench/peers/flink_nexmark_peer.py)
 * in Flink SQL: the script's statements in order (the source table and its views, the sink
 * table), its one {@code INSERT} submitted as the job.
 *
 * <p>Arguments: bootstrap script.sql job.name checkpoint.dir parallelism checkpoint.interval.ms
 * mini-batch.size. The runtime is the word counts' ({@link JobRuntime#configuration}: exactly-once
 * aligned checkpoints every interval, RocksDB with incremental checkpoints, object reuse); the
 * table settings are the tuning guide's for aggregations: mini-batch (allow-latency = the
 * checkpoint interval, size from the caller) and two-phase (local-global) aggregation.
 *
 * <p>Without {@code bench.flink.remote} the job runs on a MiniCluster in this JVM until it ends
 * (a bounded source ends it); with {@code bench.flink.remote=host:port} it is submitted
 * detached to that session cluster ({@code bench/peers/flink_cluster.py}) and this JVM prints
 * {@code JOB_ID <id>} and exits.
 *
 * <p>https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/table/tuning/
 * https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/dev/table/config/
 */
public final class NexmarkSql {
  private NexmarkSql() {}

  /** The statements of a script: split at a ';' that ends a line, {@code --} lines dropped. */
  static List<String> statements(String script) {
    List<String> out = new ArrayList<>();
    StringBuilder current = new StringBuilder();
    for (String line : script.split("\n", -1)) {
      if (line.strip().startsWith("--")) {
        continue;
      }
      String trimmed = line.stripTrailing();
      if (trimmed.endsWith(";")) {
        current.append(trimmed, 0, trimmed.length() - 1);
        if (!current.toString().isBlank()) {
          out.add(current.toString().strip());
        }
        current.setLength(0);
      } else {
        current.append(line).append('\n');
      }
    }
    if (!current.toString().isBlank()) {
      out.add(current.toString().strip());
    }
    return out;
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println(
          "usage: NexmarkSql bootstrap script.sql job.name checkpoint.dir parallelism"
              + " checkpoint.interval.ms mini-batch.size");
      System.exit(2);
    }
    String script = Files.readString(Path.of(args[1]), StandardCharsets.UTF_8);
    long intervalMs = Long.parseLong(args[5]);
    JobRuntime.Args a =
        new JobRuntime.Args(
            args[0], "", "", args[2], args[3], Integer.parseInt(args[4]), intervalMs, null);
    Configuration conf = JobRuntime.configuration(a);

    StreamExecutionEnvironment env = JobRuntime.environment(conf);
    StreamTableEnvironment tEnv =
        StreamTableEnvironment.create(env, EnvironmentSettings.inStreamingMode());
    TableConfig table = tEnv.getConfig();
    table.set("pipeline.name", a.name());
    // Window bounds are TIMESTAMP(3) in the session's zone: UTC, so that their epoch
    // milliseconds are the events' own.
    table.set("table.local-time-zone", "UTC");
    // Mini-batch: aggregates and joins buffer their input and touch each key's state once per
    // batch. A batch fires after one checkpoint interval at the latest (the exactly-once sink
    // publishes only at checkpoints, so a longer wait is invisible) or at `size` records,
    // which the caller sets to at least rate x interval so that the latency bound, not the
    // count, fires it at the rate measured.
    table.set("table.exec.mini-batch.enabled", "true");
    table.set("table.exec.mini-batch.allow-latency", intervalMs + " ms");
    table.set("table.exec.mini-batch.size", args[6]);
    // Local aggregation before the shuffle, global after it.
    table.set("table.optimizer.agg-phase-strategy", "TWO_PHASE");

    String insert = null;
    for (String statement : statements(script)) {
      if (statement.regionMatches(true, 0, "INSERT", 0, 6)) {
        insert = statement;
      } else {
        tEnv.executeSql(statement);
      }
    }
    if (insert == null) {
      throw new IllegalArgumentException(args[1] + ": no INSERT statement");
    }
    // The optimized plan in the log (mini-batch assigner, local/global aggregates, the join
    // and window operators chosen).
    System.err.println(tEnv.explainSql(insert));
    TableResult result = tEnv.executeSql(insert);
    JobClient job = result.getJobClient().orElseThrow();
    if (JobRuntime.remote()) {
      System.out.println("JOB_ID " + job.getJobID());
      System.out.flush();
      return;
    }
    JobRuntime.runUntilCancelled(job);
  }
}
