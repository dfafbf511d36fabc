package bench;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.sink.KafkaSinkBuilder;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Word count as bench/run.py measures it, on Flink's DataStream API in an embedded MiniCluster:
 * lines from the input topic (read_committed, from the earliest offset), lower-cased, words as
 * Python's {@code re.findall(r"\w+", line.lower())}, keyed by word, counted in keyed ValueState
 * on RocksDB, each new count written transactionally as key = word, value = UTF-8 decimal.
 *
 * <p>Arguments and runtime: {@link JobRuntime} (with {@code restore.path}, a retained {@code
 * chk-N} directory, the job starts from that checkpoint, as a supervisor restarts a killed job). The source commits
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
  private WordCount() {}

  /** Lines to words; the first record seen in this JVM prints the FIRST_RECORD marker. */
  static final class Tokenize implements FlatMapFunction<String, String> {
    @Override
    public void flatMap(String line, Collector<String> out) {
      JobRuntime.words(line, out::collect);
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

  /** The input's lines: read_committed, from the earliest offset, offsets to the job's group. */
  static KafkaSource<String> lines(JobRuntime.Args a) {
    return KafkaSource.<String>builder()
        .setBootstrapServers(a.bootstrap())
        .setTopics(a.input())
        .setGroupId(a.name())
        .setStartingOffsets(OffsetsInitializer.earliest())
        .setValueOnlyDeserializer(new SimpleStringSchema())
        .setProperty("isolation.level", "read_committed")
        .build();
  }

  /** The counts into the output topic, exactly once, with the peers' producer tuning. */
  static KafkaSink<Tuple2<String, Long>> counts(JobRuntime.Args a) {
    KafkaSinkBuilder<Tuple2<String, Long>> builder =
        KafkaSink.<Tuple2<String, Long>>builder()
            .setBootstrapServers(a.bootstrap())
            .setRecordSerializer(new CountRecord(a.output()))
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(a.name())
            .setProperty("transaction.timeout.ms", JobRuntime.TRANSACTION_TIMEOUT_MS);
    for (String[] kv : JobRuntime.PRODUCER_TUNING) {
      builder.setProperty(kv[0], kv[1]);
    }
    return builder.build();
  }

  public static void main(String[] args) throws Exception {
    JobRuntime.Args a = JobRuntime.Args.parse("WordCount", args);
    Configuration conf = JobRuntime.configuration(a);

    StreamExecutionEnvironment env = JobRuntime.environment(conf);

    KafkaSource<String> source = lines(a);
    KafkaSink<Tuple2<String, Long>> sink = counts(a);

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

    JobClient job = env.executeAsync(a.name());
    if (JobRuntime.remote()) {
      // Detached: the session cluster owns the job from here on.
      System.out.println("JOB_ID " + job.getJobID());
      System.out.flush();
      System.exit(0);
    }
    JobRuntime.runUntilCancelled(job);
  }
}
