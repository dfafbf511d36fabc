package bench;

import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

/**
 * {@link WordCount} with a pre-aggregation before the shuffle, the DataStream counterpart of
 * processor's per-epoch combiner and of Kafka Streams' pre-aggregating variant: each source
 * subtask folds its words into a map of partial counts (chained to the tokenizer: an
 * operator factory's default chaining in Flink 2 is ALWAYS; no serialization between them) and emits the partials just before each checkpoint barrier
 * ({@code prepareSnapshotPreBarrier}, so the map is empty at every snapshot and needs no
 * state), at the end of input, or when it holds {@link #MAX_KEYS} words. Behind the shuffle a
 * keyed sum adds each partial to the word's count in RocksDB and writes the new count, as
 * {@link WordCount} does per word.
 *
 * <p>Arguments and runtime: {@link JobRuntime}, as {@link WordCount}.
 */
public final class PreAggWordCount {
  private PreAggWordCount() {}

  // A bound on the map between two barriers, as a mini-batch's size bounds its buffer: far
  // above the vocabulary of the bench's corpus, so that a flush folds an epoch's words.
  static final int MAX_KEYS = 1_000_000;

  /** Words in, partial counts out, once per checkpoint (and at the end of input). */
  static final class PreAggregate extends AbstractStreamOperator<Tuple2<String, Long>>
      implements OneInputStreamOperator<String, Tuple2<String, Long>>, BoundedOneInput {
    private transient Map<String, Long> partial;
    private transient StreamRecord<Tuple2<String, Long>> reuse;

    @Override
    public void open() throws Exception {
      super.open();
      partial = new HashMap<>();
      reuse = new StreamRecord<>(null);
    }

    @Override
    public void processElement(StreamRecord<String> element) throws Exception {
      partial.merge(element.getValue(), 1L, Long::sum);
      if (partial.size() >= MAX_KEYS) {
        flush();
      }
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
      flush();
    }

    @Override
    public void endInput() throws Exception {
      flush();
    }

    private void flush() {
      for (Map.Entry<String, Long> e : partial.entrySet()) {
        output.collect(reuse.replace(Tuple2.of(e.getKey(), e.getValue())));
      }
      partial.clear();
    }
  }

  /** The running count of the current key (the word): each partial added, the total out. */
  static final class Sum extends RichMapFunction<Tuple2<String, Long>, Tuple2<String, Long>> {
    private transient ValueState<Long> count;

    @Override
    public void open(OpenContext context) {
      count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
    }

    @Override
    public Tuple2<String, Long> map(Tuple2<String, Long> partial) throws Exception {
      Long before = count.value();
      long now = (before == null ? 0 : before) + partial.f1;
      count.update(now);
      return Tuple2.of(partial.f0, now);
    }
  }

  public static void main(String[] args) throws Exception {
    JobRuntime.Args a = JobRuntime.Args.parse("PreAggWordCount", args);
    Configuration conf = JobRuntime.configuration(a);
    StreamExecutionEnvironment env = JobRuntime.environment(conf);
    TypeInformation<Tuple2<String, Long>> pair = Types.TUPLE(Types.STRING, Types.LONG);

    KafkaSource<String> source = WordCount.lines(a);

    env.fromSource(source, WatermarkStrategy.noWatermarks(), "lines")
        .flatMap(new WordCount.Tokenize())
        .returns(Types.STRING)
        .name("words")
        .transform("pre-aggregate", pair, new PreAggregate()) // chained: ALWAYS by default
        .keyBy(p -> p.f0, Types.STRING)
        .map(new Sum())
        .returns(pair)
        .name("counts")
        .sinkTo(WordCount.counts(a))
        .name("output");

    JobClient job = env.executeAsync(a.name());
    if (JobRuntime.remote()) {
      System.out.println("JOB_ID " + job.getJobID());
      System.out.flush();
      System.exit(0);
    }
    JobRuntime.runUntilCancelled(job);
  }
}
